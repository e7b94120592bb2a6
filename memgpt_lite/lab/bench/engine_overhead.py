"""The engine section: the engine's own time per model call, the model excluded.

An instant scripted model drives `Agent.step` on the English store of the store section;
the agent's real methods are wrapped with timers, nothing else about the loop changes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from memgpt_lite.lab.bench.corpus import corpus_text
from memgpt_lite.lab.bench.plan import BENCH_AGENT, ENGINE_WINDOW, Plan
from memgpt_lite.lab.bench.report import Figure, Row, Section, Target, latency_figures, short_count
from memgpt_lite.lab.bench.store import Corpus
from memgpt_lite.lab.scripted import estimate_usage, text_response, tool_response

QUEUE_FILL = 0.60  # of the budget: a realistic full queue just under the 70% warn level


class InstantModel:
    """A ModelClient that answers at once: a core_memory_replace call, then a short text.
    It adds up the time spent inside itself, so the benchmark can subtract the model."""

    def __init__(self) -> None:
        self.seconds, self.calls, self.focus = 0.0, 0, 0

    def stream(self, request: Any) -> Iterator[Any]:
        t = time.perf_counter()
        response = self._answer(request)
        self.calls += 1
        self.seconds += time.perf_counter() - t
        yield response

    def _answer(self, request: Any) -> Any:
        last = request.messages[-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            response = text_response("Noted, and updated your profile.")
        else:
            old, self.focus = self.focus, self.focus + 1
            response = tool_response([("core_memory_replace", {
                "label": "human", "old_content": f"Focus: turn {old}",
                "new_content": f"Focus: turn {self.focus}"})])
        response.usage = estimate_usage(request, response)  # lets the counter anchor
        return response


@dataclass
class EngineTimes:
    request: list[float] = field(default_factory=list)  # per model call: inputs + builds
    inputs: list[float] = field(default_factory=list)  # per model call
    builds: list[float] = field(default_factory=list)  # per model call (all its builds)
    pager: list[float] = field(default_factory=list)  # per model call
    dispatch: list[float] = field(default_factory=list)  # per tool call
    commit: list[float] = field(default_factory=list)  # per turn
    total: list[float] = field(default_factory=list)  # per model call (turn average)
    _inputs: float = 0.0
    _builds: float = 0.0


def instrument(agent: Any, times: EngineTimes) -> None:
    """Wrap the agent's real code paths (instance attributes shadow the methods) with
    perf_counter; nothing else about the loop changes."""
    inputs_fn, build_fn, prepare_fn = agent._inputs, agent.builder.build, agent.pager.prepare
    dispatch_fn, commit_fn = agent._dispatch, agent._commit

    def inputs(run: Any) -> Any:
        t = time.perf_counter()
        try:
            return inputs_fn(run)
        finally:
            times._inputs = time.perf_counter() - t

    def build(ctx: Any) -> Any:
        t = time.perf_counter()
        try:
            return build_fn(ctx)
        finally:
            times._builds += time.perf_counter() - t

    def prepare(ctx: Any, turn_id: int) -> Any:
        times._builds = 0.0
        t = time.perf_counter()
        built = yield from prepare_fn(ctx, turn_id)
        elapsed = time.perf_counter() - t
        times.request.append(times._inputs + times._builds)
        times.inputs.append(times._inputs)
        times.builds.append(times._builds)
        times.pager.append(elapsed - times._builds)
        return built

    agent._inputs, agent.builder.build, agent.pager.prepare = inputs, build, prepare
    agent._dispatch = _timed(dispatch_fn, times.dispatch)
    agent._commit = _timed(commit_fn, times.commit)


def _timed(fn: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            into.append(time.perf_counter() - t)
    return timed


def fill_queue(agent: Any, fraction: float) -> list[int]:
    """Put the newest stored turns back in the queue until the request is about `fraction`
    of the budget (estimated by the agent's own, calibrated counter)."""
    from memgpt_lite.engine.context import message_tokens

    store, agent_id = agent.store, agent.id
    queued = sorted({m.turn_id for m in store.context_messages(agent_id)})
    store.set_in_context(agent_id, queued, False)
    used = agent.context_report().used_tokens
    goal, turn, chosen = fraction * agent.settings.budget, store.max_turn_id(agent_id), []
    while used < goal and turn > 0:
        used += message_tokens(agent.counter, store.turn_messages(agent_id, turn))
        chosen.append(turn)
        turn -= 1
    store.set_in_context(agent_id, chosen, True)
    return sorted(chosen)


def run_engine(corpus: Corpus, plan: Plan, progress: Callable[[str], None]) -> Section:
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.config import Settings

    model = InstantModel()
    agent = Agent.open(corpus.store, BENCH_AGENT, model_client=model,
                       settings=Settings(context_window=ENGINE_WINDOW))
    try:
        human = agent.store.get_block(agent.id, "human")
        agent.edit_block("human", (human.value if human else "") + "\nFocus: turn 0")
        queue = fill_queue(agent, QUEUE_FILL)
        _run_turns(agent, model, queue, 5, EngineTimes())  # warm-up: calibrates the counter
        queue = fill_queue(agent, QUEUE_FILL)
        times = EngineTimes()
        instrument(agent, times)
        progress(f"engine: {len(queue)} turns in the queue, "
                 f"{agent.context_report().used_tokens:,} tokens; {plan.engine_turns} turns")
        _run_turns(agent, model, queue, plan.engine_turns, times)
        report = agent.context_report()
    finally:
        agent.close()
    return _engine_section(corpus, times, len(queue), report)


def _run_turns(agent: Any, model: InstantModel, queue: list[int], turns: int,
           times: EngineTimes) -> None:
    rng = random.Random("engine")
    for _ in range(turns):
        text = corpus_text(rng, "en", "user")
        model_s, calls = model.seconds, model.calls
        t = time.perf_counter()
        events = list(agent.step(text))
        wall = time.perf_counter() - t
        if not events[-1].completed:
            raise RuntimeError(f"an engine benchmark turn failed: {events[-2]}")
        n = model.calls - calls
        times.total.extend([(wall - (model.seconds - model_s)) / n] * n)
        # Keep the queue steady (outside the timing): the oldest turn leaves as one arrives.
        queue.append(events[-1].turn_id)
        agent.store.set_in_context(agent.id, [queue.pop(0)], False)


_ENGINE_METHOD = (
    "Agent.step driven with an instant scripted model (each turn: a core_memory_replace tool "
    "call, then a text reply, i.e. 2 model calls), on the English store holding {messages} "
    "messages in recall and {passages} passages, {window:,}-token window (budget {budget:,}), "
    "queue refilled to ~{fill:.0%} of the budget and kept there. The agent's real methods are "
    "wrapped with time.perf_counter: building the request = reading summary, queue and core "
    "memory from SQLite + ContextBuilder.build; pager check = Pager.prepare minus its builds; "
    "tool dispatch = Agent._dispatch of the memory tool; persisting = Agent._commit (one "
    "transaction). Total = wall time of Agent.step minus the time spent inside the model, per "
    "model call; it also covers storing the user text, request digests, events and usage.")


def _engine_section(corpus: Corpus, times: EngineTimes, queue_turns: int, report: Any) -> Section:
    from memgpt_lite.engine.config import Settings

    budget = Settings(context_window=ENGINE_WINDOW).budget
    method = _ENGINE_METHOD.format(messages=short_count(corpus.messages), window=ENGINE_WINDOW,
                                   passages=short_count(corpus.passages), budget=budget,
                                   fill=QUEUE_FILL)
    section = Section("engine", "Engine overhead per model call (model excluded)", method)
    section.rows = [
        Row("context: the queue at steady state",
            [Figure(queue_turns, "turns"), Figure(report.used_tokens, "tokens of the request"),
             Figure(corpus.messages, "messages in recall")]),
        Row("build the request: read summary, queue, core memory (SQLite)",
            latency_figures(times.inputs)),
        Row("build the request: ContextBuilder.build, all builds of the call",
            latency_figures(times.builds)),
        Row("build the request, total (per model call)", latency_figures(times.request)),
        Row("pager check, its builds excluded (per model call)", latency_figures(times.pager)),
        Row("tool dispatch: core_memory_replace (per tool call)", latency_figures(times.dispatch)),
        Row("persist the turn, one transaction (per turn)", latency_figures(times.commit)),
        Row("engine total per model call", latency_figures(times.total), Target("p50", 5, "ms")),
    ]
    section.data = {k: [round(x * 1000, 4) for x in v] for k, v in asdict(times).items()
                    if not k.startswith("_")}
    section.data.update(queue_turns=queue_turns, request_tokens=report.used_tokens,
                        budget=budget, recall_messages=corpus.messages)
    return section

"""Scenario evals: the scenario file, running it through a fresh agent, its checks and its
report.

A scenario (TOML) holds sessions of user inputs, with restarts between sessions and a fixed
clock; `run_scenario` re-drives them against a model client in a temporary data dir and
scores checks on what the agent did. This module never prints; progress goes to an optional
callback.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.events import Event
from memgpt_lite.engine.recording import (
    UNRECORDED_KINDS,
    Recorder,
    core_memory,
    record_header,
    recorded_step,
)
from memgpt_lite.engine.records import utc_iso
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import shorten
from memgpt_lite.lab.harness import (
    DEFAULT_CLOCK,
    Progress,
    ScenarioError,
    StepClock,
    parse_clock,
)
from memgpt_lite.lab.judge import ask_judge

CHECK_TYPES = ("reply_contains", "reply_matches", "core_contains", "archival_contains",
               "tool_called", "tool_not_called", "no_overflow", "max_input_tokens_per_turn",
               "judge")


# --------------------------------------------------------------------------- the scenario file


@dataclass
class Check:
    name: str
    type: str
    params: dict[str, Any]


@dataclass
class SessionSpec:
    inputs: list[str]
    restart: bool = False  # reopen the agent from its store first (a new process)
    clock: str | None = None  # jump the clock here first (e.g. a session a week later)


@dataclass
class Scenario:
    """A scenario file: sessions of user inputs and the checks to score.

        name = "remembers-a-fact"
        clock = "2026-01-01T09:00:00Z"   # fixed start; +clock_step seconds per input
        [settings]                        # overrides of config.Settings
        context_window = 6000
        [[session]]
        inputs = ["My cat is called Miso.", "Thanks!"]
        [[session]]
        restart = true
        inputs = ["What is my cat called?"]
        [[check]]
        type = "reply_contains"           # see CHECK_TYPES
        turn = "last"                     # 1-based over all sessions, or "last"
        text = "Miso"
    """

    name: str
    sessions: list[SessionSpec]
    checks: list[Check]
    clock: str = DEFAULT_CLOCK
    clock_step: int = 60
    settings: dict[str, Any] = field(default_factory=dict)
    agent: str = "eval"
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise ScenarioError(f"no scenario file at {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{path} is not valid TOML: {exc}") from None
        scenario = cls.from_dict(data, default_name=path.stem)
        scenario.path = path
        return scenario

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, default_name: str = "scenario") -> Scenario:
        sessions = [_session(s, i) for i, s in enumerate(data.get("session") or [], 1)]
        if not sessions or not any(s.inputs for s in sessions):
            raise ScenarioError(f"scenario {default_name!r} has no [[session]] with inputs")
        checks = _checks(data.get("check") or [], sum(len(s.inputs) for s in sessions))
        unknown = set(data.get("settings") or {}) - set(Settings().to_dict())
        if unknown:
            raise ScenarioError(f"unknown setting(s) in [settings]: {', '.join(sorted(unknown))}")
        clock = str(data.get("clock") or DEFAULT_CLOCK)
        parse_clock(clock)
        return cls(str(data.get("name") or default_name), sessions, checks, clock,
                   int(data.get("clock_step", 60)), dict(data.get("settings") or {}),
                   str(data.get("agent") or "eval"))

    @property
    def inputs(self) -> list[str]:
        return [text for s in self.sessions for text in s.inputs]


def _session(raw: Any, number: int) -> SessionSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("inputs", []), list):
        raise ScenarioError(f"[[session]] {number} needs inputs = [\"...\", ...]")
    if raw.get("clock"):
        parse_clock(str(raw["clock"]))
    return SessionSpec([str(x) for x in raw.get("inputs", [])], bool(raw.get("restart")),
                       raw.get("clock"))


_REQUIRED = {"reply_contains": ("text",), "reply_matches": ("pattern",),
             "core_contains": ("label", "text"), "archival_contains": ("text",),
             "tool_called": ("tool",), "tool_not_called": ("tool",), "no_overflow": (),
             "max_input_tokens_per_turn": ("max",), "judge": ("criterion",)}


def _checks(raw: list[Any], inputs: int) -> list[Check]:
    checks, names = [], Counter()
    for i, item in enumerate(raw, 1):
        kind = _check_kind(item, i, inputs)
        params = {k: v for k, v in item.items() if k not in ("type", "name")}
        name = str(item.get("name") or _auto_name(kind, params))
        names[name] += 1
        checks.append(Check(name if names[name] == 1 else f"{name} #{names[name]}", kind, params))
    return checks


def _check_kind(item: Any, i: int, inputs: int) -> str:
    """The type of [[check]] number `i`, once its parameters are known to be usable: a bad
    one must stop the run before it spends model calls, and a turn past the last input
    would make tool_not_called and no_overflow pass on nothing."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind not in _REQUIRED:
        raise ScenarioError(f"[[check]] {i} has type {kind!r}; use one of {', '.join(CHECK_TYPES)}")
    missing = [k for k in _REQUIRED[kind] if k not in item]
    if missing:
        raise ScenarioError(f"[[check]] {i} ({kind}) needs {', '.join(missing)}")
    if kind == "reply_matches":
        try:
            re.compile(item["pattern"])
        except re.error as exc:
            raise ScenarioError(f"[[check]] {i}: bad regex {item['pattern']!r}: {exc}") from None
    turn = item.get("turn")
    if turn not in (None, "last", "any") and not (str(turn).isdigit()
                                                  and 1 <= int(turn) <= inputs):
        raise ScenarioError(f"[[check]] {i}: turn = {turn!r}; use 1 to {inputs}, "
                            f"\"last\" or \"any\"")
    return kind


def _auto_name(kind: str, p: dict[str, Any]) -> str:
    where = f" @{p['turn']}" if "turn" in p else ""
    detail = {"reply_contains": lambda: repr(p["text"]), "reply_matches": lambda: f"/{p['pattern']}/",
              "core_contains": lambda: f"{p['label']} {p['text']!r}",
              "archival_contains": lambda: repr(p["text"]), "tool_called": lambda: p["tool"],
              "tool_not_called": lambda: p["tool"], "no_overflow": lambda: "",
              "max_input_tokens_per_turn": lambda: f"≤ {p['max']:,}",
              "judge": lambda: repr(str(p["criterion"])[:40])}[kind]()
    return f"{kind} {detail}{where}".strip()


# --------------------------------------------------------------------------- running


@dataclass
class TurnRecord:
    index: int  # 1-based over the whole scenario
    session: int
    text: str
    reply: str = ""
    completed: bool = False
    events: list[Event] = field(default_factory=list)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class RunState:
    """What a scenario run produced; the checks read it."""

    turns: list[TurnRecord]
    core: dict[str, str]
    passages: list[str]


def run_scenario(scenario: Scenario, model_client: Any, *, summary_client: Any = None,
                 model: str | None = None, recorder: Recorder | None = None,
                 judge: Any = None, progress: Progress | None = None,
                 source: str = "scripted") -> dict[str, Any]:
    """Run a scenario through a fresh agent and score it; returns the JSON report.

    `model_client` is any ModelClient (AnthropicClient, ScriptedModel, ReplayModelClient).
    A ReplayModelClient is re-aligned at every input. `judge` (a ModelClient) enables
    judge checks; without it they are skipped and not scored."""
    settings = Settings.from_dict({**Settings().to_dict(), **scenario.settings,
                                   **({"model": model} if model else {})})
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-eval-") as tmp:
        state = _drive(scenario, settings, model_client, summary_client, recorder,
                       Path(tmp) / "eval.db", progress)
    checks = [score_check(c, state, judge) for c in scenario.checks]
    report = _scenario_report(scenario, settings.model, source, checks, state)
    divergences = getattr(model_client, "divergences", None)
    if divergences is not None:
        report["replay_divergences"] = [str(d) for d in divergences]
    if recorder is not None:
        report["recording"] = str(recorder.path)
    return report


def _drive(scenario: Scenario, settings: Settings, client: Any, summary_client: Any,
           recorder: Recorder | None, db: Path, progress: Progress | None) -> RunState:
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store import Store

    clock = StepClock(parse_clock(scenario.clock))
    store = Store(db)
    open_agent = lambda: Agent.open(store, scenario.agent, model_client=client,  # noqa: E731
                                    summary_client=summary_client, settings=settings,
                                    clock=clock)
    agent, turns = open_agent(), []
    if recorder is not None:
        record_header(agent, recorder, source="eval", note=f"scenario {scenario.name}",
                      created_at=utc_iso(clock.now))
    try:
        for number, session in enumerate(scenario.sessions, 1):
            if session.restart:
                store.close()
                store = Store(db)
                agent = open_agent()
                if recorder is not None:
                    recorder.restart()
            for j, text in enumerate(session.inputs):
                _tick(clock, session, j, scenario.clock_step, first_turn=not turns)
                turns.append(_turn(agent, client, recorder, TurnRecord(len(turns) + 1, number, text)))
                if progress:
                    progress(f"turn {len(turns)}/{len(scenario.inputs)}")
        return RunState(turns, core_memory(agent),
                        [h.text for h in store.list_passages(agent.id, limit=100_000)])
    finally:
        store.close()


def _tick(clock: StepClock, session: SessionSpec, index: int, step: int, *,
          first_turn: bool) -> None:
    """Set the clock for input `index` of `session`: a session with its own clock starts
    there; every other input comes `step` seconds after the one before."""
    if index == 0 and session.clock:
        clock.now = parse_clock(session.clock)
    elif not first_turn:
        clock.now += timedelta(seconds=step)


def _turn(agent: Any, client: Any, recorder: Recorder | None, record: TurnRecord) -> TurnRecord:
    if hasattr(client, "begin_turn"):
        client.begin_turn(record.index - 1)
    events = recorded_step(agent, recorder, record.text) if recorder else agent.step(record.text)
    for event in events:
        if event.kind not in UNRECORDED_KINDS:
            record.events.append(event)
        if event.kind == "turn_end":
            record.reply, record.completed = event.text, event.completed  # type: ignore[union-attr]
    return record


# --------------------------------------------------------------------------- checks


def _turns_for(check: Check, state: RunState) -> list[TurnRecord]:
    turn = check.params.get("turn")
    if turn is None:
        return state.turns if check.type.startswith(("tool_", "max_", "no_")) else state.turns[-1:]
    if turn == "last":
        return state.turns[-1:]
    if turn == "any":
        return state.turns
    index = int(turn)
    return [t for t in state.turns if t.index == index]


def score_check(check: Check, state: RunState, judge: Any = None) -> dict[str, Any]:
    """{name, type, passed (None = skipped), detail}"""
    passed, detail = _SCORERS[check.type](check, state, judge)
    return {"name": check.name, "type": check.type, "passed": passed, "detail": detail}


def _casefold_unless_sensitive(text: str, check: Check) -> str:
    return text if check.params.get("case_sensitive") else text.casefold()


def _reply_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    want = _casefold_unless_sensitive(str(check.params["text"]), check)
    hit = [t for t in turns if want in _casefold_unless_sensitive(t.reply, check)]
    if hit:
        return True, f"turn {hit[0].index} contains {check.params['text']!r}"
    return False, _reply_miss(turns, f"no reply contains {check.params['text']!r}")


def _reply_matches(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    flags = 0 if check.params.get("case_sensitive") else re.IGNORECASE
    hit = [t for t in turns if re.search(check.params["pattern"], t.reply, flags)]
    if hit:
        return True, f"turn {hit[0].index} matches /{check.params['pattern']}/"
    return False, _reply_miss(turns, f"no reply matches /{check.params['pattern']}/")


def _reply_miss(turns: list[TurnRecord], what: str) -> str:
    if not turns:
        return f"{what}: there is no such turn"
    return f"{what}; turn {turns[-1].index} said {shorten(turns[-1].reply, 70)!r}"


def _core_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    label = str(check.params["label"])
    value = state.core.get(label)
    if value is None:
        return False, f"there is no core block {label!r}"
    want = _casefold_unless_sensitive(str(check.params["text"]), check)
    ok = want in _casefold_unless_sensitive(value, check)
    return ok, f"{label} = {shorten(value, 70)!r}"


def _archival_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    want = _casefold_unless_sensitive(str(check.params["text"]), check)
    hits = [p for p in state.passages if want in _casefold_unless_sensitive(p, check)]
    if hits:
        return True, f"passage {shorten(hits[0], 70)!r}"
    return False, f"none of {len(state.passages)} passages contains {check.params['text']!r}"


def _tool_calls(check: Check, state: RunState) -> list[int]:
    return [t.index for t in _turns_for(check, state) for e in t.of("tool_call")
            if e.call.name == check.params["tool"]]


def _tool_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    least = int(check.params.get("min", 1))
    where = f"in turns {sorted(set(calls))}" if calls else "never"
    return len(calls) >= least, f"{check.params['tool']} called {len(calls)}× {where}"


def _tool_not_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    where = f" in turns {sorted(set(calls))}" if calls else ""
    return not calls, f"{check.params['tool']} called {len(calls)}×{where}"


def _no_overflow(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    bad = [t.index for t in _turns_for(check, state) if _overflowed(t)]
    return not bad, f"provider overflow in turns {bad}" if bad else "no overflow"


def _overflowed(turn: TurnRecord) -> bool:
    """The agent retries a call the provider refused as too long under the same call index,
    and evicts first only when it has turns to evict, so the repeat is the sure sign."""
    indexes = [e.call_index for e in turn.of("model_call") if e.purpose == "chat"]
    return (len(indexes) != len(set(indexes))
            or any(e.by == "overflow" for e in turn.of("eviction"))
            or any(e.error_kind in ("prompt_too_long", "overflow") for e in turn.of("error")))


def _max_input_tokens(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    limit, per = int(check.params["max"]), check.params.get("per", "turn")
    sizes = []
    for t in _turns_for(check, state):
        if per == "request":
            sizes += [(t.index, e.usage.total_input) for e in t.of("usage")]
        else:
            sizes += [(t.index, sum(e.usage.total_input for e in t.of("usage")))]
    if not sizes:
        return False, "no turns to measure"
    turn, worst = max(sizes, key=lambda s: s[1])
    return worst <= limit, f"largest {per}: {worst:,} input tokens (turn {turn}); limit {limit:,}"


def _judge(check: Check, state: RunState, judge: Any) -> tuple[bool | None, str]:
    if judge is None:
        return None, "skipped: judge checks run only with --judge"
    turns = _turns_for(check, state)
    if not turns:
        return False, "there is no such turn"
    verdict = ask_judge(judge, str(check.params["criterion"]), turns[-1].text, turns[-1].reply,
                        model=check.params.get("model"))
    return verdict.startswith("PASS"), verdict


_SCORERS: dict[str, Callable[[Check, RunState, Any], tuple[bool | None, str]]] = {
    "reply_contains": _reply_contains, "reply_matches": _reply_matches,
    "core_contains": _core_contains, "archival_contains": _archival_contains,
    "tool_called": _tool_called, "tool_not_called": _tool_not_called,
    "no_overflow": _no_overflow, "max_input_tokens_per_turn": _max_input_tokens,
    "judge": _judge,
}


# --------------------------------------------------------------------------- report


def _scenario_report(scenario: Scenario, model: str, source: str,
                     checks: list[dict[str, Any]], state: RunState) -> dict[str, Any]:
    scored = [c for c in checks if c["passed"] is not None]
    passed = sum(1 for c in scored if c["passed"])
    return {"scenario": scenario.name, "model": model, "source": source,
            "created_at": utc_iso(datetime.now(timezone.utc)),
            "checks": checks, "passed": passed, "failed": len(scored) - passed,
            "skipped": len(checks) - len(scored),
            "score": round(passed / len(scored), 4) if scored else 1.0,
            "totals": totals(state.turns)}


def totals(turns: list[TurnRecord]) -> dict[str, Any]:
    """The report's totals, counted by the engine's Tally so that a number means here what it
    means in the chat and in replay: model_calls is every call sent, and tokens and cost are
    every paid call's, the summariser's included (`Tally.paid_*`); max_request_tokens is the
    largest chat request. `turns` is every input driven, whether or not its turn completed."""
    tally = Tally().add_all([e for t in turns for e in t.events])
    usage = tally.paid_usage
    return {"turns": len(turns), "model_calls": tally.model_calls,
            "tool_calls": tally.tool_call_count, "tools": dict(sorted(tally.tool_calls.items())),
            "input_tokens": usage.total_input, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_input_tokens,
            "max_request_tokens": tally.max_request_tokens, "cost_usd": round(tally.paid_cost_usd, 6),
            "alerts": tally.alerts, "evictions": tally.model_evictions,
            "forced_flushes": tally.forced_flushes, "errors": tally.errors}

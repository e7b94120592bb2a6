"""A restart costs nothing: what the agent learned about token counts and pressure alerts
is stored with it, so a new process sees the queue at its true size (on either backend)."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.engine.store import open_store
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.tokens import RULE
from memgpt_lite.lab.fake_server import Counting, count_tokens

SETTINGS = Settings(context_window=12_000, max_output_tokens=1_000, safety_margin=500)


class TrueCounts:
    """Answers every call; usage counted as the (strict) fake server counts, not as we do."""

    def __init__(self, counting: Counting = Counting()) -> None:
        self.requests: list[ModelRequest] = []
        self.counting = counting

    def stream(self, request: ModelRequest):
        self.requests.append(request)
        text = f"noted {len(self.requests)}"
        yield ModelResponse([{"type": "text", "text": text}], "end_turn",
                            Usage(count_tokens(request.to_api(), self.counting), 5),
                            request.model, "m")


def test_reopening_an_agent_at_60_percent_neither_evicts_nor_summarises(store_target):
    db = store_target
    model = TrueCounts()
    with open_store(db) as store:
        agent = Agent.open(store, "a", model_client=model, summary_client=model,
                           settings=SETTINGS)
        last = 0
        while last < 0.60 * SETTINGS.budget:
            events = list(agent.step("Here is another note about my garden and the bees. " * 6))
            last = [e for e in events if e.kind == "usage"][-1].usage.total_input
        assert Tally().add_all(events).forced_flushes == 0
        agent.close()
    assert 0.55 * SETTINGS.budget < last < 0.70 * SETTINGS.budget
    with open_store(db) as store:  # a new process: nothing but what is stored
        again = Agent.open(store, "a", model_client=model, summary_client=model)
        events = list(again.step("And one more short note."))
    tally = Tally().add_all(events)
    assert tally.forced_flushes == 0 and tally.model_evictions == 0 and tally.summary_calls == 0
    first_estimate = next(e for e in events if e.kind == "model_call").estimated_tokens
    assert abs(first_estimate - last) <= 0.10 * last, (first_estimate, last)


def _cjk_queue_then_reopen(db, *, as_stored_before_rules: bool):
    """A CJK queue near 60% of the budget by a per-byte server's count; the agent reopened
    (its stored counter state as this version keeps it, or without its rule, as versions
    before counting rules kept it): (its state, the last usage, the next turn's events)."""
    model = TrueCounts(Counting(per_byte=True))
    with open_store(db) as store:
        agent = Agent.open(store, "a", model_client=model, summary_client=model,
                           settings=SETTINGS)
        if as_stored_before_rules:
            agent.counter.use_rule(1)
        last = 0
        while last < 0.60 * SETTINGS.budget:
            events = list(agent.step("我在花园里养了蜜蜂，它们很忙。🐝 " * 12))
            last = [e for e in events if e.kind == "usage"][-1].usage.total_input
        agent.close()
        row = store.get_agent("a")
        if as_stored_before_rules:
            state = {**row.state, "counter": {k: v for k, v in row.state["counter"].items()
                                              if k != "rule"}}
            store.set_state(row.id, state)
    with open_store(db) as store:
        again = Agent.open(store, "a", model_client=model, summary_client=model)
        events = list(again.step("再说一句。"))
        return store.get_agent("a").state["counter"], last, events


def test_a_restart_keeps_the_counting_rule_and_its_calibration(tmp_path):
    state, last, events = _cjk_queue_then_reopen(tmp_path / "a.db",
                                                 as_stored_before_rules=False)
    assert state["rule"] == RULE
    tally = Tally().add_all(events)
    assert tally.forced_flushes == 0 and tally.summary_calls == 0
    first_estimate = next(e for e in events if e.kind == "model_call").estimated_tokens
    assert abs(first_estimate - last) <= 0.10 * last, (first_estimate, last)


def test_a_calibration_stored_before_counting_rules_is_converted_not_reused(tmp_path):
    """Learned by characters, the stored ratio read as bytes would see a CJK queue at a
    third of its size; converted at the first request, the restart still costs nothing."""
    state, last, events = _cjk_queue_then_reopen(tmp_path / "a.db",
                                                 as_stored_before_rules=True)
    assert state["rule"] == RULE
    tally = Tally().add_all(events)
    assert tally.forced_flushes == 0 and tally.summary_calls == 0
    first_estimate = next(e for e in events if e.kind == "model_call").estimated_tokens
    assert last <= first_estimate <= 1.10 * last, (first_estimate, last)

"""A restart costs nothing: what the agent learned about token counts and pressure alerts
is stored with it, so a new process sees the queue at its true size (on either backend)."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.engine.store import open_store
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.fake_server import count_tokens

SETTINGS = Settings(context_window=12_000, max_output_tokens=1_000, safety_margin=500)


class TrueCounts:
    """Answers every call; usage counted as the (strict) fake server counts, not as we do."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest):
        self.requests.append(request)
        text = f"noted {len(self.requests)}"
        yield ModelResponse([{"type": "text", "text": text}], "end_turn",
                            Usage(count_tokens(request.to_api()), 5), request.model, "m")


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

"""Property-based tests of the paging controller: every request valid and within budget, nothing lost.

Random sessions — turns, tool calls (parallel too), tool-result and paste sizes, the model's
answers to pressure alerts (ignore, bad ids, the current id, wrong types, everything, the
oldest half) and small context windows — are driven through the real agent loop. Whatever
happens: every request is valid for the API, no request exceeds the budget by the counter,
every turn completes, and recall holds every message ever sent, whole.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from test_paging import BlobTools, clock

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import count_cache_controls, validate_request
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.events import ModelCallStart, ResponseEvent, TurnEndEvent
from memgpt_lite.engine.records import ModelRequest
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

PAGING_KINDS = {"pressure_alert", "fold", "eviction", "summary", "clip", "notice"}
EVICTIONS = ["none", "bad", "current", "wrong_type", "empty", "all", "oldest_half"]

turn_plans = st.fixed_dictionaries({
    "user_chars": st.one_of(st.integers(1, 600), st.integers(600, 8_000),
                            st.sampled_from([30_000])),
    # Each round is one model response calling tools in parallel; values are result sizes.
    "rounds": st.lists(st.lists(st.one_of(st.integers(0, 3_000), st.integers(3_000, 40_000)),
                                min_size=1, max_size=3), max_size=3),
    "evict": st.sampled_from(EVICTIONS),
})


@dataclass
class Policy:
    """A scripted model that reads each request, as a real one would."""

    plan: dict = field(default_factory=dict)
    turn_id: int = 0
    round: int = 0
    evicted: bool = False

    def start(self, plan: dict, turn_id: int) -> None:
        self.plan, self.turn_id, self.round, self.evicted = plan, turn_id, 0, False

    def __call__(self, request: ModelRequest):
        tail = " ".join(b.get("text", "") for b in request.messages[-1]["content"]
                        if b.get("type") == "text")
        listed = [int(i) for i in re.findall(r"^- (\d+) · ", tail, re.M)]
        calls = []
        if listed and not self.evicted and self.plan["evict"] != "none":
            self.evicted = True
            calls.append(("evict_turns", {"turn_ids": self._victims(listed), "summary": "kept"}))
        if self.round < len(self.plan["rounds"]) and request.tool_choice is None:
            sizes = self.plan["rounds"][self.round]
            self.round += 1
            calls += [("archival_search", {"query": f"blob {n} #{self.round}{k}"})
                      for k, n in enumerate(sizes)]
        if calls:
            return tool_response(calls)
        return text_response(f"answer to turn {self.turn_id}")

    def _victims(self, listed: list[int]):
        choice = self.plan["evict"]
        return {"bad": [10**6], "current": [self.turn_id], "wrong_type": [str(listed[0])],
                "empty": [], "all": listed, "oldest_half": listed[:max(1, len(listed) // 2)],
                }[choice]


def user_text(i: int, n: int) -> str:
    return (f"msg{i} " + " ".join(f"u{i}w{k}" for k in range(n // 7 + 1)))[:max(n, 6)]


@settings(max_examples=60, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(window=st.integers(5_800, 12_000), plans=st.lists(turn_plans, min_size=1, max_size=10))
def test_paging_invariants(window, plans):
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "p.db")
        try:
            run_session(store, window, plans)
        finally:
            store.close()


def run_session(store: SQLiteStore, window: int, plans: list[dict]) -> None:
    policy = Policy()
    model = ScriptedModel([policy] * 400, validate=True)
    summariser = ScriptedModel([lambda r: text_response("- summary of old turns")] * 400,
                               validate=True)
    s = Settings(context_window=window, max_output_tokens=256, safety_margin=200)
    agent = Agent.open(store, "p", model_client=model, summary_client=summariser, settings=s,
                       clock=clock())
    agent.tools = BlobTools(store, agent.id)
    sent: list[tuple[int, str, list]] = []
    for i, plan in enumerate(plans):
        turn_id = store.max_turn_id(agent.id) + 1
        policy.start(plan, turn_id)
        text = user_text(i, plan["user_chars"])
        events = list(agent.step(text))
        end = events[-1]
        assert isinstance(end, TurnEndEvent) and end.completed, [e for e in events
                                                                  if e.kind == "error"]
        check_requests(events, s.budget)
        for kind in sorted({e.kind for e in events} & PAGING_KINDS):
            event(kind)  # shows in --hypothesis-show-statistics: the paths were exercised
        sent += [(turn_id, "user", [{"type": "text", "text": text}])]
        sent += sent_in_turn(turn_id, events)
    for request in model.requests + summariser.requests:
        assert validate_request(request.to_api()) is None
        assert count_cache_controls(request.to_api()) <= 4
    check_recall(store, agent.id, sent)


def check_requests(events: list, budget: int) -> None:
    for e in events:
        if isinstance(e, ModelCallStart):
            assert e.estimated_tokens <= budget, (e.purpose, e.estimated_tokens, budget)


def sent_in_turn(turn_id: int, events: list) -> list[tuple[int, str, list]]:
    """Every message of the turn as it was first sent or received: full texts."""
    out = []
    for e in events:
        if isinstance(e, ResponseEvent) and e.purpose == "chat":
            out.append((turn_id, "assistant", e.response.content))
        elif e.kind == "tool_result":
            if not out or out[-1][1] != "user":
                out.append((turn_id, "user", []))
            out[-1][2].append(e.result.to_block())
    return out


def check_recall(store: SQLiteStore, agent_id: int, sent: list[tuple[int, str, list]]) -> None:
    stored = [m for t in range(1, store.max_turn_id(agent_id) + 1)
              for m in store.turn_messages(agent_id, t)]
    assert store.agent_stats(agent_id)["messages"] == len(sent) == len(stored)
    for (turn_id, role, content), m in zip(sent, stored):
        assert (m.turn_id, m.role, m.content) == (turn_id, role, content)

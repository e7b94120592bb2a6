"""/compact through the paging controller: the model gets the memory-pressure alert on
demand and evicts what it chooses; when it evicts nothing the oldest turns are flushed and
summarised; the request to compact leaves the queue; a failed compaction leaves nothing
behind; a recorded compaction replays exactly."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer, server_error
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "c.db") as s:
        yield s


def agent_with_turns(store, script, n=4):
    model = ScriptedModel([text_response(f"Answer {i}.") for i in range(1, n + 1)] + script)
    agent = Agent.open(store, "a", model_client=model, summary_client=model, clock=lambda: FIXED)
    for i in range(1, n + 1):
        assert list(agent.step(f"Question {i} about the garden"))[-1].completed
    return agent, model


def queued(store, agent):
    return sorted({m.turn_id for m in store.context_messages(agent.id)})


def test_the_model_gets_the_alert_on_demand_and_evicts_what_it_chooses(store):
    agent, model = agent_with_turns(store, [
        tool_response([("evict_turns", {"turn_ids": [1, 2], "summary": "Garden questions."})]),
        text_response("Kept the garden plans.")])
    events = list(agent.compact("keep the garden plans"))
    request = model.requests[4]
    tail = request.messages[-1]["content"]
    texts = " ".join(b.get("text", "") for b in tail)
    assert "Memory pressure:" in texts  # the alert, though the context is nowhere near full
    assert "What the user wants kept: keep the garden plans" in texts
    kinds = [e.kind for e in events]
    assert "pressure_alert" in kinds and events[-1].completed
    assert [e.by for e in events if e.kind == "eviction"] == ["model"]
    assert queued(store, agent) == [3, 4]  # the compaction turn itself left the queue too
    assert "Garden questions." in store.get_agent_by_id(agent.id).summary
    assert len(model.requests) == 6  # no summariser call: the model did it
    assert store.turn_messages(agent.id, 5)  # the exchange stays in recall


def test_when_the_model_evicts_nothing_the_oldest_go(store):
    agent, model = agent_with_turns(store, [text_response("Nothing to evict, I think."),
                                            text_response("Summary of turns one and two.")])
    events = list(agent.compact())
    evictions = [e for e in events if e.kind == "eviction"]
    assert [e.by for e in evictions] == ["compact"]
    assert evictions[0].turn_ids[0] == 1 and len(evictions[0].turn_ids) >= 1
    assert [e.purpose for e in events if e.kind == "model_call"] == ["chat", "summary"]
    assert events[-1].completed and 5 not in queued(store, agent)
    assert 1 not in queued(store, agent) and 4 in queued(store, agent)
    assert store.get_agent_by_id(agent.id).summary == "Summary of turns one and two."


def test_a_failed_compaction_leaves_the_queue_as_it_was(store):
    agent, model = agent_with_turns(store, [
        tool_response([("evict_turns", {"turn_ids": [1, 2, 3], "summary": "x"})]),
        OverloadedError("busy")])
    before = queued(store, agent)
    events = list(agent.compact())
    assert not events[-1].completed and any(e.kind == "error" for e in events)
    assert queued(store, agent) == before and store.get_agent_by_id(agent.id).summary == ""


def test_nothing_to_compact_is_said(store):
    agent = Agent.open(store, "a", model_client=ScriptedModel([]), clock=lambda: FIXED)
    with pytest.raises(LookupError, match="nothing to compact"):
        list(agent.compact())


def test_a_recorded_compaction_replays_exactly(store, tmp_path):
    agent, model = agent_with_turns(store, [text_response("Nothing to evict."),
                                            text_response("Summary."), text_response("Next.")])
    recorder = recording.Recorder(tmp_path / "rec.jsonl")
    recording.record_header(agent, recorder)
    list(recording.recorded_step(agent, recorder, "keep names", compact=True))
    list(recording.recorded_step(agent, recorder, "And now?"))
    recorder.close()
    report = replay_mod.replay(tmp_path / "rec.jsonl", strict=True)
    assert report.ok and not report.divergences, report.divergences
    assert report.tally.forced_flushes == 1


def test_a_retried_compaction_is_a_compaction_again(tmp_path):
    """/compact fails (a 500), the error says /retry sends it again: it goes as a /compact,
    with the alert listing the turns and the flush when the model evicts nothing, and it
    leaves the queue; it is not the instructions sent as an ordinary message."""
    with FakeAnthropicServer() as server, SQLiteStore(tmp_path / "r.db") as store:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(store, "a", model_client=client, summary_client=client,
                           clock=lambda: FIXED)
        for text in ["my locker code is 4471", "the basil needs repotting"]:
            assert list(agent.step(text))[-1].completed
        server.enqueue(server_error(500))
        assert not list(agent.compact("keep the code"))[-1].completed
        events = list(agent.retry())
        user = next(e for e in events if e.kind == "user")
        assert user.retry and user.compact and user.text == "keep the code"
        sent = json.dumps(server.requests[-2]["messages"][-1])  # the chat call, then the summary
        assert "Memory pressure:" in sent and "What the user wants kept: keep the code" in sent
        assert [e.by for e in events if e.kind == "eviction"] == ["compact"]
        assert events[-1].completed and 3 not in queued(store, agent)
        assert len(store.turn_messages(agent.id, 3)) == 2  # the exchange stays in recall, once


def test_a_recorded_retry_of_a_compaction_replays_exactly(store, tmp_path):
    agent, model = agent_with_turns(store, [OverloadedError("busy"), text_response("Nothing."),
                                            text_response("Summary.")])
    recorder = recording.Recorder(tmp_path / "rec.jsonl")
    recording.record_header(agent, recorder)
    list(recording.recorded_step(agent, recorder, "keep names", compact=True))
    list(recording.recorded_step(agent, recorder, "", retry=True))
    recorder.close()
    report = replay_mod.replay(tmp_path / "rec.jsonl", strict=True)
    assert report.ok and not report.divergences, report.divergences
    assert report.tally.forced_flushes == 1

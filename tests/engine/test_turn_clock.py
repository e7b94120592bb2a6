"""The model is told the turn's local date and time (model contract 3): in the tail, read from
the turn's clock, the same in every request of a turn, kept by a recording and replayed."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from memgpt_lite.engine import prompts, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.context import render_time
from memgpt_lite.engine.records import zoned_iso
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.turn_clock import local_now
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

LISBON_SUMMER = timezone(timedelta(hours=1))
# Late on a Sunday in the user's zone, already Monday in UTC.
START = datetime(2026, 3, 1, 23, 50, tzinfo=timezone(timedelta(hours=-5)))


class Clock:
    """A clock in a zone of its own that moves on by itself on every reading."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=41)
        return self.now


def last_user_texts(request) -> list[str]:
    last = [m for m in request.messages if m["role"] == "user"][-1]
    return [b["text"] for b in last["content"] if b.get("type") == "text"]


def told_times(requests) -> list[str]:
    """The <current_time> sections the last user message of each request carries."""
    return [m for r in requests for t in last_user_texts(r)
            for m in re.findall(r"<current_time>.*?</current_time>", t)]


def test_render_time_names_the_weekday_the_offset_and_the_utc_moment():
    assert render_time(datetime(2026, 12, 3, 9, 45, 30, tzinfo=LISBON_SUMMER)) == (
        "<current_time>Thursday 2026-12-03 09:45 UTC+01:00 (2026-12-03 08:45 UTC)"
        "</current_time>")
    assert render_time(START) == ("<current_time>Sunday 2026-03-01 23:50 UTC-05:00 "
                                  "(2026-03-02 04:50 UTC)</current_time>")
    india = timezone(timedelta(hours=5, minutes=30))
    assert "UTC+05:30" in render_time(datetime(2026, 1, 1, tzinfo=india))
    utc = "<current_time>Thursday 2026-12-03 09:45 UTC</current_time>"
    assert render_time(datetime(2026, 12, 3, 9, 45, tzinfo=timezone.utc)) == utc
    assert render_time(datetime(2026, 12, 3, 9, 45)) == utc  # naive is UTC, as stored rows


def test_every_request_of_a_turn_is_told_the_turns_local_time_after_core_memory(tmp_path):
    model = ScriptedModel([tool_response([("conversation_search", {"query": "bees"})]),
                           text_response("Nothing yet."), text_response("Hi again.")])
    agent = Agent.open(SQLiteStore(tmp_path / "a.db"), "ada", model_client=model,
                       clock=Clock())
    list(agent.step("What did I say yesterday about bees?"))
    list(agent.step("hello"))
    first, second, third = model.requests
    turn1 = "<current_time>Sunday 2026-03-01 23:50 UTC-05:00 (2026-03-02 04:50 UTC)</current_time>"
    # The tool call read the clock again; the model is still told the turn's time.
    assert told_times([first]) == told_times([second]) == [turn1]
    assert told_times([third]) != [turn1]
    texts = last_user_texts(first)
    assert texts[-1] == "What did I say yesterday about bees?"
    assert texts[0].startswith("The core_memory section below") and texts[0].endswith(turn1)
    # Stable parts carry no time: the system prompt says where it is, never what it is.
    for request in model.requests:
        assert "2026-03" not in json.dumps(request.system) + json.dumps(request.tools)
    assert "<current_time>" in request.system[0]["text"]
    # Stored rows stay in UTC.
    user = agent.store.turn_messages(agent.id, 1)[0]  # the user's text (then a tool_result)
    assert user.role == "user" and user.created_at == "2026-03-02T04:50:41Z"


def test_an_agent_under_contract_2_is_told_no_time(tmp_path):
    model = ScriptedModel([text_response("ok")])
    agent = Agent.open(SQLiteStore(tmp_path / "a.db"), "ada", model_client=model,
                       clock=Clock(), contract=2)
    list(agent.step("hello"))
    assert told_times(model.requests) == []
    assert model.requests[0].system[0]["text"] == prompts.system_prompt(2)
    assert "<current_time>" not in prompts.system_prompt(2)
    assert prompts.system_prompt(2) != prompts.system_prompt(3)


def test_a_recording_keeps_the_local_offset_and_replays_the_same_requests(tmp_path):
    path = tmp_path / "s.jsonl"
    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([tool_response([("conversation_search", {"query": "pears"})]),
                           text_response("No pears yet."), text_response("Noted.")])
    agent = Agent.open(store, "ada", model_client=model, clock=Clock())
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        for text in ("Any pears?", "Next week I pick them."):
            list(recording.recorded_step(agent, rec, text))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["contract"] == prompts.CONTRACT == 3
    clocks = [x["readings"] for x in lines if x["type"] == "clock"]
    assert clocks[0][0] == "2026-03-01T23:50:41-05:00"
    users = [x["at"] for x in lines if x["type"] == "user"]
    assert users[0] == "2026-03-02T04:50:41Z"  # the user line's time stays UTC
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [] and report.completed


def test_a_replay_that_lost_the_offset_diverges(tmp_path):
    """The replay is exact because of the recorded offset: the same readings in UTC make
    other requests (so the check above could fail)."""
    path = tmp_path / "s.jsonl"
    agent = Agent.open(SQLiteStore(tmp_path / "live.db"), "ada",
                       model_client=ScriptedModel([text_response("ok")]), clock=Clock())
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "hello"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        if line["type"] == "clock":
            line["readings"] = [zoned_iso(datetime.fromisoformat(r).astimezone(timezone.utc))
                                for r in line["readings"]]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert replay_mod.replay(path, strict=False).divergences


def test_zoned_iso_and_the_live_clock():
    assert zoned_iso(datetime(2026, 3, 1, 12, 0, tzinfo=LISBON_SUMMER)) == "2026-03-01T12:00:00+01:00"
    assert zoned_iso(datetime(2026, 3, 1, 12, 0, 5, 999, tzinfo=timezone.utc)) == "2026-03-01T12:00:05Z"
    now = local_now()
    assert now.utcoffset() is not None
    assert abs(now - datetime.now(timezone.utc)) < timedelta(minutes=1)

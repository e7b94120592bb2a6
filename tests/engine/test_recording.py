"""The recorder: JSONL format, file mode, every event recorded, interruption, listing."""

from __future__ import annotations

import json
import os
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from memgpt_lite.engine import agent as agent_module
from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings, recordings_dir
from memgpt_lite.engine.errors import PromptTooLongError
from memgpt_lite.engine.records import ModelResponse
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

START = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


def _agent(tmp_path: Path, script: list, name: str = "ada") -> Agent:
    store = SQLiteStore(tmp_path / "db.sqlite")
    return Agent.open(store, name, model_client=ScriptedModel(script),
                      settings=Settings(context_window=8_000), clock=lambda: START)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_every_line_is_versioned_json_with_a_type(tmp_path):
    agent = _agent(tmp_path, [tool_response([("core_memory_append",
                                              {"label": "human", "content": "Name: Ada"})]),
                              text_response("Hello Ada.")])
    rec = recording.Recorder.create(agent.name)
    recording.record_header(agent, rec)
    events = list(recording.recorded_step(agent, rec, "I am Ada"))
    rec.close()
    lines = _lines(rec.path)
    assert all(line["v"] == 2 and "type" in line and "t" in line for line in lines)
    header, user = lines[0], lines[1]
    assert header["type"] == "header" and header["agent"] == "ada"
    assert header["settings"]["context_window"] == 8_000 and header["model"] == agent.settings.model
    assert header["prompt_digests"]["system.md"] and header["version"]
    assert user == {"v": 2, "type": "user", "text": "I am Ada", "at": "2026-01-05T10:00:00Z",
                    "t": user["t"]}
    recorded = [line["type"] for line in lines[1:]]
    expected = [e.kind for e in events if e.kind not in recording.UNRECORDED_KINDS]
    assert recorded[: len(expected)] == expected  # one line per event (user first), in order
    assert recorded[len(expected):] == ["clock", "memory"]
    assert lines[-1]["blocks"]["human"].endswith("Name: Ada")
    response = next(line for line in lines if line["type"] == "response")
    assert ModelResponse.from_dict(response["response"]).tool_calls[0].name == "core_memory_append"


def test_recording_lives_in_the_data_dir_and_is_private(tmp_path):
    rec = recording.Recorder(recording.new_recording_path("ada / evil", now=START))
    rec.user("hi", "2026-01-05T10:00:00Z")
    rec.close()
    assert rec.path.parent.parent == recordings_dir()
    assert rec.path.name == "20260105T100000Z.jsonl" and "/" not in rec.path.parent.name
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o600
    again = recording.new_recording_path("ada / evil", now=START)
    assert again != rec.path  # never appends to another session's file


def test_lines_are_flushed_as_they_are_written(tmp_path):
    rec = recording.Recorder(tmp_path / "r.jsonl")
    rec.user("first", "2026-01-05T10:00:00Z")
    assert _lines(tmp_path / "r.jsonl")[0]["text"] == "first"  # before close
    rec.close()


def test_interrupted_turn_is_recorded_and_the_agent_turn_closed(tmp_path):
    agent = _agent(tmp_path, [text_response("a long answer " * 20)])
    rec = recording.Recorder(tmp_path / "r.jsonl")
    recording.record_header(agent, rec)
    gen = recording.recorded_step(agent, rec, "tell me a story")
    for event in gen:
        if event.kind == "text_delta":
            gen.close()  # Ctrl-C mid-stream
            break
    rec.close()
    kinds = [line["type"] for line in _lines(tmp_path / "r.jsonl")]
    assert kinds[-3:] == ["interrupted", "clock", "memory"]
    assert agent.store.context_messages(agent.id) == []  # nothing of the turn in the queue
    assert agent.clock is not None and agent.clock() == START  # the real clock is back


def test_header_carries_the_history_of_an_agent_that_has_one(tmp_path):
    agent = _agent(tmp_path, [text_response("hi"), text_response("again")])
    list(agent.step("before recording"))
    rec = recording.Recorder(tmp_path / "r.jsonl")
    recording.record_header(agent, rec)
    rec.close()
    header = _lines(tmp_path / "r.jsonl")[0]
    assert header["base"] is None  # a small history rides in the header's delta
    assert "before recording" in json.dumps(header["delta"])


def test_list_recordings_reports_agent_start_and_turns(tmp_path):
    agent = _agent(tmp_path, [text_response("one"), text_response("two")])
    rec = recording.Recorder.for_agent(agent)
    recording.record_header(agent, rec, created_at="2026-01-05T10:00:00Z")
    for text in ("a", "b"):
        list(recording.recorded_step(agent, rec, text))
    rec.close()
    (rec.path.parent / "junk.jsonl").write_text("not json\n")
    good, junk = sorted(recording.list_recordings(), key=lambda r: r.turns, reverse=True)
    assert (good.agent, good.turns, good.started, good.problem) == (
        "ada", 2, "2026-01-05T10:00:00Z", None)
    assert junk.problem and "line 1 is not valid JSON" in junk.problem  # listed, not hidden
    assert len(recording.list_recordings(agent.row)) == 2
    nobody = SimpleNamespace(uid="0123", name="nobody")
    assert recording.list_recordings(nobody) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_or_a_folder_named_like_a_recording_is_passed_over_not_read(tmp_path):
    import threading

    from memgpt_lite.engine.privacy import agent_recordings

    agent = _agent(tmp_path, [text_response("one")])
    rec = recording.Recorder.for_agent(agent)
    recording.record_header(agent, rec)
    list(recording.recorded_step(agent, rec, "a"))
    rec.close()
    os.mkfifo(rec.path.parent / "pipe.jsonl")  # opening it would wait for a writer for ever
    (rec.path.parent / "folder.jsonl").mkdir()
    found: list = []
    worker = threading.Thread(target=lambda: found.extend(
        [recording.list_recordings(), agent_recordings(agent.row)]), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "sessions and forget blocked on the FIFO"
    listed, forget_sees = found
    assert [r.path for r in listed] == [rec.path] and forget_sees == [rec.path]


def test_recordings_begun_in_the_same_second_are_listed_in_the_order_they_began(tmp_path):
    # A /model switch or /pop starts a new recording at once: several share a second, and
    # are named STAMP, STAMP-2 … STAMP-11 (two digits, so text order would be wrong too).
    agent = _agent(tmp_path, [text_response(f"reply {n}") for n in range(11)])
    moment = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
    for n in range(11):
        rec = recording.Recorder(recording.new_recording_path(agent.row.uid, now=moment))
        recording.record_header(agent, rec, created_at="2026-01-05T10:00:00Z")
        list(recording.recorded_step(agent, rec, f"message {n}"))
        rec.close()
    rows = recording.list_recordings(agent.row)
    assert [recording.Recording.load(r.path).turns[0].text for r in rows] == [
        f"message {n}" for n in range(11)]
    assert recording.session_ids(rows)[:3] == [
        "20260105T100000Z", "20260105T100000Z-2", "20260105T100000Z-3"]


def test_unreadable_recordings_give_one_sentence(tmp_path):
    with pytest.raises(recording.RecordingError, match="no recording at"):
        recording.Recording.load(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"v":1,"type":"header","agent":"a","settings":{},"model":"m"}\n{oops\n')
    with pytest.raises(recording.RecordingError, match="line 2 is not valid JSON"):
        recording.Recording.load(bad)
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"v":99,"type":"header"}\n')
    with pytest.raises(recording.RecordingError, match="newer memgpt-lite"):
        recording.Recording.load(newer)


class SealedAgent(Agent):
    """An agent whose attributes only its own code may set once it is open: anything else
    that sets one (a recorder swapping its clock or model client) fails the turn."""

    def __setattr__(self, name, value):
        setter = sys._getframe(1).f_code.co_filename
        if self.__dict__.get("sealed") and Path(setter) != Path(agent_module.__file__):
            raise AttributeError(f"agent.{name} set from {setter}")
        super().__setattr__(name, value)


def test_recording_observes_the_agent_and_never_reassigns_its_attributes(tmp_path):
    """The turn is recorded from the agent's events and the clock readings it reports:
    its clock and model client stay the ones it was built with, during the turn too."""
    seen: list[bool] = []  # whether the agent used its own clock and client at each use

    def clock():
        seen.append(agent.clock is clock)
        return START

    class Client(ScriptedModel):
        def stream(self, request):
            seen.append(agent.model_client is self)
            yield from super().stream(request)

    refusal = PromptTooLongError("prompt is too long: 9000 tokens > 8000 maximum",
                                 actual=9000, maximum=8000)
    client = Client([tool_response([("archival_insert", {"content": "Ada keeps bees"})]),
                     text_response("Noted."), refusal, text_response("Still here.")])
    summary = ScriptedModel([text_response("Earlier: bees.")] * 3)
    store = SQLiteStore(tmp_path / "db.sqlite")
    agent = SealedAgent.open(store, "ada", model_client=client, summary_client=summary,
                             settings=Settings(context_window=8_000), clock=clock)
    agent.__dict__["sealed"] = True
    path = tmp_path / "r.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        for text in ("I keep bees", "and now?"):
            assert list(recording.recorded_step(agent, rec, text))[-1].completed
    assert seen and all(seen)
    assert agent.clock is clock and agent.model_client is client
    lines = _lines(path)
    assert [line["type"] for line in lines if line["type"] in ("user", "clock")] == [
        "user", "clock", "user", "clock"]
    refused = next(line for line in lines if line["type"] == "prompt_too_long")
    assert refused == {"v": 2, "type": "prompt_too_long", "message": refusal.message,
                       "actual": 9000, "maximum": 8000, "t": refused["t"]}
    assert all(line["readings"] for line in lines if line["type"] == "clock")
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed, report.divergences


def test_the_turn_opens_with_its_message_as_stored(tmp_path):
    """The first event of a turn is the user's text as the agent stored it (secrets
    redacted): the recording's user line, the store and the event hold the same text."""
    key = "sk-ant-api03-" + "Q" * 40
    agent = _agent(tmp_path, [text_response("ok"), text_response("again")])
    path = tmp_path / "r.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        first = list(recording.recorded_step(agent, rec, f"my key is {key}"))[0]
        retried = list(recording.recorded_step(agent, rec, "", retry=True))[0]
    assert first.kind == "user" and first.text == "my key is [redacted: anthropic key]"
    assert (first.at, first.turn_id, first.retry) == ("2026-01-05T10:00:00Z", 1, False)
    assert (retried.text, retried.retry) == (first.text, True)
    users = [line for line in _lines(path) if line["type"] == "user"]
    assert [(u["text"], u.get("retry")) for u in users] == [(first.text, None), (first.text, True)]
    stored = agent.store.turn_messages(agent.id, 1)[0].content[0]["text"]
    assert stored == first.text and key not in path.read_text()


def test_a_recording_an_editor_saved_with_a_byte_order_mark_is_read(tmp_path):
    """It was refused ("line 1 is not valid JSON"), listed as broken and not scrubbed by a
    forget: an editor on Windows starts a UTF-8 file with one."""
    from memgpt_lite.engine import recording_scrub
    from memgpt_lite.engine.matching import Matcher

    agent = _agent(tmp_path, [text_response("noted")])
    rec = recording.Recorder.for_agent(agent)
    recording.record_header(agent, rec, created_at="2026-01-05T10:00:00Z")
    list(recording.recorded_step(agent, rec, "my code is zebra"))
    rec.close()
    rec.path.write_bytes(b"\xef\xbb\xbf" + rec.path.read_bytes())
    loaded = recording.Recording.load(rec.path)
    assert [t.text for t in loaded.turns] == ["my code is zebra"]
    assert recording.header_line(rec.path)["type"] == "header"
    assert [r.problem for r in recording.list_recordings()] == [None]
    scrubbed = recording_scrub.scrub_recording(rec.path, Matcher.build("zebra"), at="now")
    assert scrubbed.turns == {1}
    assert recording.header_line(rec.path)["forgotten"]["turns"] == [1]

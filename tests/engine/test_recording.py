"""The recorder: JSONL format, file mode, every event recorded, interruption, listing."""

from __future__ import annotations

import json
import stat
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings, recordings_dir
from memgpt_lite.engine.records import ModelResponse
from memgpt_lite.engine.store import Store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

START = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


def _agent(tmp_path: Path, script: list, name: str = "ada") -> Agent:
    store = Store(tmp_path / "db.sqlite")
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

"""Damaged recordings are refused with one sentence naming the line, never a traceback; a
recording cut short by a crash replays up to its last complete line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_replay import MEMORY_SESSION, record_session

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.lab.scripted import text_response

WRONG = [{}, [], None, "x", -1, 1.5, True, {"a": 1}, ["x"]]


def _paths(value, prefix=()):
    """Every (path to a value) inside a JSON value, depth first."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


def _set(value, path, new):
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("damage")
    settings = Settings(context_window=5_200, max_output_tokens=512, safety_margin=200)
    inputs, script = MEMORY_SESSION
    script = [*script, OverloadedError("The API is overloaded."), text_response("back")]
    return record_session(tmp, [*inputs, "again", "and again"], script, settings=settings,
                          summary_script=[text_response("s")] * 4)


def test_every_type_mutation_is_refused_or_replayed_never_a_crash(session, tmp_path):
    lines = [json.loads(x) for x in session.read_text("utf-8").splitlines()]
    assert replay_mod.replay(session, strict=True).ok
    tried = 0
    for number, line in enumerate(lines):
        for path in list(_paths(line))[1:]:
            if path[-1] in ("v", "type"):
                continue
            for wrong in WRONG[tried % 3::3]:  # a third of the wrong values per field
                mutated = json.loads(json.dumps(lines))
                _set(mutated[number], path, wrong)
                target = tmp_path / f"m{tried}.jsonl"
                target.write_text("".join(json.dumps(x) + "\n" for x in mutated))
                try:
                    replay_mod.replay(target, strict=True)
                except recording.RecordingError as exc:
                    assert f"line {number + 1}" in str(exc), str(exc)
                tried += 1
    assert tried > 300


@pytest.mark.parametrize("clock_lines", [True, False])
def test_user_lines_without_a_time_replay(session, tmp_path, clock_lines):
    """`at` may be null or absent; the clock lines hold the turn's readings, when kept."""
    lines = [json.loads(x) for x in session.read_text("utf-8").splitlines()]
    users = [line for line in lines if line["type"] == "user"]
    users[0]["at"] = None
    for line in users[1:]:
        del line["at"]
    kept = [line for line in lines if clock_lines or line["type"] != "clock"]
    target = tmp_path / "no_times.jsonl"
    target.write_text("".join(json.dumps(x) + "\n" for x in kept))
    report = replay_mod.replay(target, strict=clock_lines)
    assert report.ok if clock_lines else report.completed, report.divergences


def test_a_last_line_cut_short_replays_up_to_there_with_a_warning(session, tmp_path):
    text = session.read_text("utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: text.rindex('"type":"memory"') + 12])  # mid-line, no newline
    rec = recording.Recording.load(cut)
    assert rec.warnings and "cut short" in rec.warnings[0]
    report = replay_mod.replay(cut, strict=False)
    assert report.tally.turns >= 1


def test_a_bad_line_in_the_middle_is_named(session, tmp_path):
    lines = session.read_text("utf-8").splitlines()
    lines[3] = "{not json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(recording.RecordingError, match="line 4 is not valid JSON"):
        recording.Recording.load(bad)


def test_a_damaged_snapshot_in_the_header_is_one_sentence(tmp_path):
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    from memgpt_lite.lab.scripted import ScriptedModel

    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([text_response(f"r{i}") for i in range(4)])
    agent = Agent.open(store, "ada", model_client=model)
    list(agent.step("before the recording"))
    path = tmp_path / "s.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "during"))
    store.close()
    lines = [json.loads(x) for x in path.read_text("utf-8").splitlines()]
    assert lines[0]["delta"] and replay_mod.replay(path, strict=True).ok
    for i, sub in enumerate(list(_paths(lines[0]["delta"]))[1:]):
        mutated = json.loads(json.dumps(lines))
        _set(mutated[0]["delta"], sub, WRONG[i % len(WRONG)])
        target = tmp_path / f"d{i}.jsonl"
        target.write_text("".join(json.dumps(x) + "\n" for x in mutated))
        try:
            replay_mod.replay(target, strict=True)
        except recording.RecordingError as exc:
            assert "line 1" in str(exc), str(exc)

"""A recording cut short (the chat killed inside a turn, a full disk) replays strictly up to
its last recorded event, whatever that event is (a summariser call that got no answer
included), and ends in the state the live agent's next start leaves: the cut-off turn undone
unless it had committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_replay import record_session

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.config import Settings
from memgpt_lite.lab.scripted import text_response, tool_response
from memgpt_lite.terminal import cli

NOTE = "Here is a long note about hives, frames and the smell of wax in May. " * 12


def flush_session(tmp_path: Path) -> Path:
    """Four turns in a small window: tool calls and a passage in the first, then a forced
    flush (a summariser call) before a later chat call."""
    settings = Settings(context_window=5_200, max_output_tokens=512, safety_margin=200)
    tools = [("core_memory_append", {"label": "human", "content": "Keeps bees."}),
             ("archival_insert", {"content": "Hives have frames", "tags": ["bees"]})]
    script = [tool_response(tools), text_response("Noted: bees.")] + [text_response(f"ok {i}") for i in range(2, 5)]
    path = record_session(tmp_path, [f"note {i}: {NOTE}" for i in range(1, 5)], script,
                          settings=settings,
                          summary_script=[text_response("Earlier notes: hives and frames.")] * 4)
    purposes = [c.purpose for c in recording.Recording.load(path).calls()]
    assert "summary" in purposes, "the session should have forced a flush"
    return path


def _committed_memory(full: recording.Recording, prefix: list[dict], blocks: dict) -> dict:
    """Core memory as the live agent's next start leaves it after the session was cut after
    `prefix`: every turn that committed (its turn_end says so) counts, the cut one undone."""
    memory, turn = blocks, -1
    for line in prefix:
        if line["type"] == "user":
            turn += 1
        elif line["type"] == "turn_end" and line["completed"]:
            memory = full.turns[turn].memory
    return memory


def test_a_recording_cut_at_any_line_replays_strictly(tmp_path):
    path = flush_session(tmp_path)
    full = recording.Recording.load(path)
    lines = path.read_text("utf-8").splitlines()
    cut, torn, last_calls = tmp_path / "cut.jsonl", tmp_path / "torn.jsonl", set()
    for n in range(1, len(lines) + 1):
        prefix = [json.loads(line) for line in lines[:n]]
        cut.write_text("\n".join(lines[:n]) + "\n", "utf-8")
        report = replay_mod.replay(cut, strict=True)
        assert report.ok and report.completed, (f"cut after line {n}", report.divergences)
        want = _committed_memory(full, prefix, full.header["blocks"])
        assert report.final_core_memory == want, f"cut after line {n}"
        if prefix[-1]["type"] == "model_call":
            last_calls.add(prefix[-1]["purpose"])
        if n < len(lines):  # the next line half written: the same recording, and a warning
            torn.write_text(cut.read_text("utf-8") + lines[n][: len(lines[n]) // 2], "utf-8")
            assert recording.Recording.load(torn).turns == recording.Recording.load(cut).turns
    assert last_calls == {"chat", "summary"}  # cut while either kind of call was waiting


def test_a_recording_that_ends_waiting_for_the_summariser_says_so(tmp_path, capsys):
    """The CLI: `replay --strict` matches and says where the recording ends."""
    path = flush_session(tmp_path)
    lines = path.read_text("utf-8").splitlines()
    last = max(i for i, line in enumerate(lines) if '"purpose":"summary"' in line
               and json.loads(line)["type"] == "model_call")
    path.write_text("\n".join(lines[: last + 1]) + "\n", "utf-8")
    loaded = recording.Recording.load(path)
    assert loaded.turns[-1].cut and not loaded.turns[0].cut
    assert cli.main(["replay", str(path), "--strict"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"ends inside turn {len(loaded.turns)}" in out and "zero divergence" in out
    assert out.count("(the recording ends inside this turn)") == 1  # the live view marks it


@pytest.mark.parametrize("tamper", ["response", "tool_result"])
def test_a_cut_recording_still_catches_a_real_divergence(tmp_path, tamper):
    """Cutting a turn short exempts only what the recording does not hold."""
    path = flush_session(tmp_path)
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    end = next(i for i, line in enumerate(lines) if line["type"] == "turn_end")
    kept = lines[:end]  # turn 1 cut before its end, after its tool results
    hit = next(line for line in kept if line["type"] == tamper)
    if tamper == "response":
        hit["response"]["content"][0]["input"] = {"label": "human", "content": "Keeps wasps."}
    else:
        hit["result"]["content"] = "Something else entirely."
    path.write_text("".join(json.dumps(line) + "\n" for line in kept), "utf-8")
    report = replay_mod.replay(path, strict=True)
    assert not report.ok and report.divergences[0].turn == 1


def test_a_recording_with_one_passage_ids_line_per_turn_still_replays():
    """Recordings written before passage ids were written as they came (one line after each
    turn's events): the demo as it was bundled then."""
    old = Path(__file__).parent / "recordings" / "demo_before_observer.jsonl"
    assert [line["type"] for line in map(json.loads, old.read_text("utf-8").splitlines())
            ].count("passage_ids") == 3
    report = replay_mod.replay(old, strict=True)
    assert report.ok and report.completed, report.divergences
    assert "Maya Okafor" in report.final_core_memory["human"]


def test_a_cut_turn_keeps_the_ids_its_passages_got(tmp_path):
    """Passage ids are global to a data dir: another agent's passages shift them. A turn cut
    right after an archival_insert still replays with the id the live passage got."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    from memgpt_lite.lab.scripted import ScriptedModel

    store = SQLiteStore(tmp_path / "live.db")
    other = Agent.open(store, "other", model_client=ScriptedModel([
        tool_response([("archival_insert", {"content": "one"}),
                       ("archival_insert", {"content": "two"})]), text_response("ok")]))
    list(other.step("save two things"))
    ada = Agent.open(store, "ada", model_client=ScriptedModel([
        tool_response([("archival_insert", {"content": "Ada keeps bees"})]),
        text_response("Noted.")]))
    path = tmp_path / "r.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(ada, rec)
        list(recording.recorded_step(ada, rec, "I keep bees"))
    lines = path.read_text("utf-8").splitlines()
    results = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "tool_result"]
    assert "#3" in json.loads(lines[results[0]])["result"]["content"]
    for n in range(results[0] + 1, len(lines) + 1):
        path.write_text("\n".join(lines[:n]) + "\n", "utf-8")
        report = replay_mod.replay(path, strict=True)
        assert report.ok, (f"cut after line {n}", report.divergences)

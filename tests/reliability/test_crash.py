"""kill -9 at every kind of moment of a turn; the next process finds a store it can trust."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
from rel_support import (
    assert_trustworthy,
    child_env,
    start_worker,
    store_problems,
    wait_for_line,
)

from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS

pytestmark = pytest.mark.slow  # every test here starts real processes


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the worker ended before the kill"


@pytest.mark.parametrize("stage", ["streaming", "after_tool", "commit", "summariser"])
def test_kill_at_a_stage_of_a_turn(tmp_path, stage):
    db = tmp_path / "data" / "memgpt_lite.db"
    proc = start_worker("stage", str(db), "crash", stage)
    try:
        lines = wait_for_line(proc, "STAGE ", timeout=60)
    finally:
        kill(proc)
    assert lines[-1] == f"STAGE {stage}"
    typed = [l[6:] for l in lines if l.startswith("TYPED ")]
    answered = [l[10:] for l in lines if l.startswith("COMMITTED ")]
    assert "first answer is safe" in answered
    if stage == "after_tool":  # the tools' writes reached the file before the kill
        with SQLiteStore(db) as store:
            row = store.get_agent("crash")
            assert "Likes tea." in store.get_block(row.id, "human").value
            assert store.count_passages(row.id) == 1
    assert_trustworthy(db, "crash", typed=typed, answered=answered)
    with SQLiteStore(db) as store:  # reopening the agent undid everything the cut-off turn did
        row = store.get_agent("crash")
        assert store.get_block(row.id, "human").value == "Nothing is known about the user yet."
        assert store.count_passages(row.id) == 0
        assert [h["source"] for h in store.block_history(row.id)] == ["init", "init"]
        assert store.db.query("SELECT count(*) FROM turn_effects")[0][0] == 0
        cut = [m for m in store.all_messages(row.id) if m.content[0].get("text") == typed[-1]]
        assert [(m.status, m.in_context) for m in cut] == [("interrupted", False)]


def test_kill_during_a_migration(tmp_path):
    db = tmp_path / "data" / "memgpt_lite.db"
    proc = start_worker("stage", str(db), "crash", "migration")
    try:
        wait_for_line(proc, "STAGE migration")
    finally:
        kill(proc)
    with SQLiteStore(db) as store:  # the half-applied migration was rolled back and runs again
        assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
        assert store_problems(store) == []
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.lab.scripted import ScriptedModel, text_response

    with SQLiteStore(db) as store:
        agent = Agent.open(store, "fresh", model_client=ScriptedModel([text_response("hi")]))
        assert list(agent.step("hello"))[-1].completed
        assert store.search_messages(agent.id, "hello").total == 1


SEED = 20241129
ROUNDS = 6


def test_kill_at_random_moments_repeatedly(tmp_path):
    """A seeded conversation with tool calls, evictions and summaries, killed at a random
    moment, restarted, killed again... Every restart must find a trustworthy store."""
    rng = random.Random(SEED)
    db = tmp_path / "data" / "memgpt_lite.db"
    typed: list[str] = []
    answered: list[str] = []
    for round_ in range(ROUNDS):
        proc = start_worker("random", str(db), "rnd", str(SEED + round_), "1000")
        wait_for_line(proc, "OPEN")
        time.sleep(rng.uniform(0.4, 1.6))
        kill(proc)
        out = proc.stdout.read().splitlines()  # type: ignore[union-attr]
        typed += [l[6:] for l in out if l.startswith("TYPED ")]
        answered += [l[10:] for l in out if l.startswith("COMMITTED ")]
        if typed:  # killed after the worker got going: check everything so far
            assert_trustworthy(db, "rnd", typed=typed, answered=answered)
    assert len(answered) >= ROUNDS, "the worker never got far enough to test anything"


def test_kill_the_real_chat_process_mid_reply(tmp_path):
    """`memgpt-lite chat` (piped) against the fake server, killed while a reply streams."""
    from memgpt_lite.engine import config
    from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang
    from memgpt_lite.lab.scripted import text_response

    with FakeAnthropicServer() as server:
        server.enqueue(text_response("First reply, committed."))
        server.enqueue(hang(seconds=30, after=6))
        env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--agent", "k"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        proc.stdin.write("hello there\nplease answer slowly\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while len(server.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # some of the reply has streamed
        kill(proc)
        assert len(server.requests) == 2
    assert_trustworthy(config.db_path(), "k", typed=["hello there", "please answer slowly"],
                       answered=["First reply, committed."])
    recordings = list(config.recordings_dir().rglob("*.jsonl"))
    assert recordings, "the session was recorded up to the kill"
    from memgpt_lite.engine.recording import Recording

    Recording.load(recordings[0])  # a recording cut by a kill still loads


FLUSH_NOTE = "A long note about hives, frames, smokers and the smell of wax in May. " * 25


def _chat(server, *extra: str, home: str | None = None, stdin: str = "") -> subprocess.Popen:
    env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                    **({"MEMGPT_LITE_HOME": home} if home else {}))
    proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--context-window",
                             "9000", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    proc.stdin.write(stdin)  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    return proc


def _summary_requests(server) -> list[int]:
    import json

    return [i for i, body in enumerate(server.requests)
            if "<removed_turns>" in json.dumps(body["messages"])]


def test_a_chat_killed_while_the_summariser_answers_replays_strictly(tmp_path, capsys):
    """A forced flush's summariser call hangs and the chat is killed while it waits: the
    recording ends with that call, unanswered, and `replay --strict` matches up to there."""
    import json

    from memgpt_lite.engine import config
    from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang
    from memgpt_lite.terminal import cli

    stdin = "".join(f"note {i}: {FLUSH_NOTE}\n" for i in range(1, 5))
    with FakeAnthropicServer() as server:  # a dry run finds which request is the summariser's
        dry = _chat(server, "--no-record", home=str(tmp_path / "dry"), stdin=stdin)
        dry.communicate(timeout=120)
        first = _summary_requests(server)[0]
    with FakeAnthropicServer() as server:
        server.enqueue(server.default_reply, times=first)
        server.enqueue(hang(seconds=60))
        proc = _chat(server, stdin=stdin)
        deadline = time.monotonic() + 60
        while len(server.requests) <= first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _summary_requests(server) == [first], "the flush did not come where it did"
        kill(proc)
    (path,) = config.recordings_dir().rglob("*.jsonl")
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert (lines[-1]["type"], lines[-1]["purpose"]) == ("model_call", "summary")
    assert cli.main(["replay", str(path), "--strict"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    turns = sum(line["type"] == "user" for line in lines)
    assert f"ends inside turn {turns}" in out and "zero divergence" in out
# --------------------------------------------------------------------------- readers


def cut_off_turn(monkeypatch) -> str:
    """An agent whose last turn appended to core memory and was then cut off, as by kill -9:
    its undo never ran (the next open runs it). Returns the text the turn appended."""
    from memgpt_lite.engine import config
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

    added = "Lives on a houseboat called Kestrel."
    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "cut", model_client=ScriptedModel(
            [text_response("hello"),
             tool_response([("core_memory_append", {"label": "human", "content": added})]),
             text_response("never sent")]))
        assert list(agent.step("first"))[-1].completed
        steps = agent.step("I live on a houseboat")
        for event in steps:
            if event.kind == "memory_edit":
                break
        with monkeypatch.context() as m:  # the process dies here: no undo runs
            m.setattr(type(store), "undo_turn", lambda *a, **k: None)
            steps.close()
        agent.close()
    with SQLiteStore(config.db_path()) as store:  # as the next process finds it
        row = store.get_agent("cut")
        assert store.unfinished_turns(row.id)
        assert any(added in b.value for b in store.get_blocks(row.id))
    return added


def test_readers_see_a_cut_off_turn_undone_and_export_never_writes_it(monkeypatch, capsys):
    from memgpt_lite.terminal import cli

    added = cut_off_turn(monkeypatch)
    for argv in (["core", "--agent", "cut"], ["agents", "show", "cut"]):
        assert cli.main(argv) == 0
        assert "houseboat called Kestrel" not in capsys.readouterr().out, argv
    assert cli.main(["agents", "export", "cut"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert added not in json.dumps(doc["blocks"])
    assert all(m["status"] != "open" for m in doc["messages"])
    assert [m["status"] for m in doc["messages"] if m["role"] == "user"][-1] == "interrupted"


@pytest.mark.slow
def test_an_export_while_another_process_is_inside_a_turn_is_refused(monkeypatch, capsys):
    from memgpt_lite.engine import config
    from memgpt_lite.terminal import cli

    cut_off_turn(monkeypatch)
    other = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from memgpt_lite.engine.locking import "
        "AgentLock; AgentLock(Path(sys.argv[1]), 'cut').acquire(); print('held', flush=True);"
        " time.sleep(60)"), str(config.db_path().parent)], stdout=subprocess.PIPE, text=True,
        env=child_env())
    try:
        assert other.stdout.readline().strip() == "held"
        assert cli.main(["agents", "export", "cut"]) == 1
        err = capsys.readouterr().err
        assert "is in the middle of a turn" in err and "Traceback" not in err
    finally:
        other.kill()
        other.wait()

"""The reliability promises on Postgres, with real processes: kill -9 at every kind of
moment of a turn (no partial turn, no lost committed message), a kill during a migration,
two processes racing for one agent (one at a time, whole turns), two agents side by side,
and a killed holder leaving no stale lock. The worker is the suite's own
(reliability_worker.py) pointed at a postgresql:// URL."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time

import pytest
from rel_support import assert_trustworthy, child_env, start_worker, store_problems, wait_for_line
from test_crash import kill

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import open_store
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS
from memgpt_lite.lab.scripted import ScriptedModel, text_response

pytestmark = pytest.mark.slow  # every test here starts real processes


@pytest.mark.parametrize("stage", ["streaming", "after_tool", "commit", "summariser"])
def test_kill_at_a_stage_of_a_turn(pg_url, stage):
    proc = start_worker("stage", pg_url, "crash", stage)
    try:
        lines = wait_for_line(proc, "STAGE ", timeout=60)
    finally:
        kill(proc)
    assert lines[-1] == f"STAGE {stage}"
    typed = [line[6:] for line in lines if line.startswith("TYPED ")]
    answered = [line[10:] for line in lines if line.startswith("COMMITTED ")]
    assert "first answer is safe" in answered
    if stage == "after_tool":  # the tools' writes were committed before the kill
        with open_store(pg_url) as store:
            row = store.get_agent("crash")
            assert "Likes tea." in store.get_block(row.id, "human").value
            assert store.count_passages(row.id) == 1
    if stage == "commit":  # the half-written commit never reached the database
        with open_store(pg_url) as store:
            row = store.get_agent("crash")
            assert [m.role for m in store.context_messages(row.id)] == ["user", "assistant"]
    assert_trustworthy(pg_url, "crash", typed=typed, answered=answered)
    with open_store(pg_url) as store:  # reopening the agent undid what the cut-off turn did
        row = store.get_agent("crash")
        assert store.get_block(row.id, "human").value == "Nothing is known about the user yet."
        assert store.count_passages(row.id) == 0
        assert store.db.query("SELECT count(*) FROM turn_effects")[0][0] == 0
        cut = [m for m in store.all_messages(row.id) if m.content[0].get("text") == typed[-1]]
        assert [(m.status, m.in_context) for m in cut] == [("interrupted", False)]


def test_kill_during_a_migration(pg_url):
    proc = start_worker("stage", pg_url, "crash", "migration")
    try:
        wait_for_line(proc, "STAGE migration")
    finally:
        kill(proc)
    with open_store(pg_url) as store:  # rolled back with its ledger row, then applied again
        assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
        assert store_problems(store) == []
        agent = Agent.open(store, "fresh", model_client=ScriptedModel([text_response("hi")]))
        assert list(agent.step("hello"))[-1].completed
        agent.close()


def test_kill_at_random_moments_repeatedly(pg_url):
    rng = random.Random(20250101)
    typed: list[str] = []
    answered: list[str] = []
    for round_ in range(4):
        proc = start_worker("random", pg_url, "rnd", str(77 + round_), "1000")
        wait_for_line(proc, "OPEN")
        time.sleep(rng.uniform(0.8, 2.0))
        kill(proc)
        out = proc.stdout.read().splitlines()  # type: ignore[union-attr]
        typed += [line[6:] for line in out if line.startswith("TYPED ")]
        answered += [line[10:] for line in out if line.startswith("COMMITTED ")]
        if typed:
            assert_trustworthy(pg_url, "rnd", typed=typed, answered=answered)
    assert len(answered) >= 4, "the worker never got far enough to test anything"


def test_a_second_chat_is_refused_naming_the_holder_pid_and_host(pg_url):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    holder = start_worker("hold", pg_url, "same", "30")
    try:
        wait_for_line(holder, "COMMITTED")
        with FakeAnthropicServer() as server:
            env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
            proc = subprocess.run([sys.executable, "-m", "memgpt_lite", "--db", pg_url, "chat",
                                   "--no-record", "--agent", "same"], input="hello\n",
                                  capture_output=True, text=True, env=env, timeout=60)
            assert not server.requests, "the second process talked to the model"
        assert proc.returncode == 1
        expected = (f"agent 'same' is in use by another memgpt-lite process (pid {holder.pid} "
                    f"on {socket.gethostname()})")
        assert expected in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    finally:
        holder.kill()
        holder.wait()


def test_two_processes_racing_for_one_agent_take_whole_turns_in_turn(pg_url):
    racers = [start_worker("race", pg_url, "shared", "8", tag) for tag in ("left", "right")]
    outputs = [r.communicate(timeout=180) for r in racers]
    for racer, (out, err) in zip(racers, outputs):
        assert racer.returncode == 0, err
        assert out.count("COMMITTED") == 8
    with open_store(pg_url) as store:
        row = store.get_agent("shared")
        turns: dict[int, list[str]] = {}
        for m in store.all_messages(row.id):
            turns.setdefault(m.turn_id, []).append(m.content[0]["text"])
        assert sorted(turns) == list(range(1, 17))  # every turn, each id once
        for texts in turns.values():  # whole: the reply is to this turn's own message
            assert len(texts) == 2 and texts[1] == f"re: {texts[0]}", texts
        assert {t[0].split()[0] for t in turns.values()} == {"left", "right"}
        assert store_problems(store) == []


def test_two_agents_side_by_side(pg_url):
    workers = {name: start_worker("random", pg_url, name, str(seed), "10")
               for seed, name in enumerate(["alpha", "beta"])}
    outputs = {name: w.communicate(timeout=120) for name, w in workers.items()}
    for name, w in workers.items():
        out, err = outputs[name]
        assert w.returncode == 0, err
        answered = [line[10:] for line in out.splitlines() if line.startswith("COMMITTED ")]
        typed = [line[6:] for line in out.splitlines() if line.startswith("TYPED ")]
        assert len(answered) == 10
        assert_trustworthy(pg_url, name, typed=typed, answered=answered)


def test_a_killed_holder_leaves_no_stale_lock(pg_url):
    holder = start_worker("hold", pg_url, "crashy", "60")
    wait_for_line(holder, "LOCKED")
    kill(holder)
    with open_store(pg_url) as store:
        started = time.monotonic()
        agent = Agent.open(store, "crashy", model_client=ScriptedModel([text_response("hi")]),
                           lock_wait=5)
        assert time.monotonic() - started < 1.0
        agent.close()

"""One process per agent: a second process waits, then refuses with a clear message; two
different agents in one data dir work side by side."""

from __future__ import annotations

import pytest

import os
import signal
import stat
import subprocess
import sys
import time

from rel_support import assert_trustworthy, child_env, start_worker, wait_for_line

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.locking import AgentBusyError, AgentLock, lock_path
from memgpt_lite.engine.store import StoreError
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response


def chat(agent: str, text: str, server, timeout: float = 30) -> subprocess.CompletedProcess:
    env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
    return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                           "--agent", agent], input=text, capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.slow
def test_second_chat_on_the_same_agent_waits_then_refuses(tmp_path):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    holder = start_worker("hold", str(config.db_path()), "same", "20")
    try:
        wait_for_line(holder, "COMMITTED")
        with FakeAnthropicServer() as server:
            started = time.monotonic()
            proc = chat("same", "hello from the second process\n", server)
            waited = time.monotonic() - started
            assert not server.requests, "the second process talked to the model"
        assert proc.returncode == 1
        assert (f"agent 'same' is in use by another memgpt-lite process (pid {holder.pid})"
                in proc.stderr), proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert waited >= 2.5  # it waited a few seconds before refusing
    finally:
        holder.kill()
        holder.wait()
    with SQLiteStore(config.db_path()) as store:  # nothing of the refused process was written
        row = store.get_agent("same")
        texts = [m.content[0].get("text") for m in store.context_messages(row.id)]
        assert "hello from the second process" not in texts


@pytest.mark.slow
def test_second_process_gets_the_agent_when_the_first_lets_go(tmp_path):
    db = str(config.db_path())
    first = start_worker("hold", db, "shared", "0.5")
    wait_for_line(first, "LOCKED")
    second = start_worker("hold", db, "shared", "0")  # blocks in Agent.open, then proceeds
    out2, err2 = second.communicate(timeout=30)
    first.communicate(timeout=30)
    assert second.returncode == 0, err2
    assert "COMMITTED" in out2
    with SQLiteStore(db) as store:
        row = store.get_agent("shared")
        turns = {}
        for m in store.context_messages(row.id):
            turns.setdefault(m.turn_id, []).append(m.role)
        assert list(turns.values()) == [["user", "assistant"]] * 2  # whole, not interleaved
    assert_trustworthy(db, "shared", answered=["held"])


@pytest.mark.slow
def test_two_agents_side_by_side_in_one_data_dir(tmp_path):
    db = str(config.db_path())
    workers = {name: start_worker("random", db, name, str(seed), "12")
               for seed, name in enumerate(["alpha", "beta"])}
    outputs = {name: w.communicate(timeout=90) for name, w in workers.items()}
    for name, w in workers.items():
        out, err = outputs[name]
        assert w.returncode == 0, err
        answered = [l[10:] for l in out.splitlines() if l.startswith("COMMITTED ")]
        typed = [l[6:] for l in out.splitlines() if l.startswith("TYPED ")]
        assert len(answered) == 12
        assert_trustworthy(db, name, typed=typed, answered=answered)


@pytest.mark.slow
def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    db = str(config.db_path())
    holder = start_worker("hold", db, "crashy", "60")
    wait_for_line(holder, "LOCKED")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with SQLiteStore(db) as store:
        started = time.monotonic()
        agent = Agent.open(store, "crashy", model_client=ScriptedModel([text_response("hi")]))
        assert time.monotonic() - started < 0.5
        agent.close()


@pytest.mark.slow
def test_lock_in_process(tmp_path):
    store = SQLiteStore(tmp_path / "data" / "db.sqlite")
    a = Agent.open(store, "x", model_client=ScriptedModel([]))
    again = Agent.open(store, "x", model_client=ScriptedModel([]))  # re-entrant per process
    path = lock_path(store.path.parent, "x")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().strip() == str(os.getpid())
    a.close()
    again.close()
    # once released, another process takes it at once
    code = ("import sys; from memgpt_lite.engine.locking import AgentLock; "
            "AgentLock(sys.argv[1], 'x').acquire(0); print('ok')")
    out = subprocess.run([sys.executable, "-c", code, str(store.path.parent)],
                         capture_output=True, text=True, timeout=30, env=child_env())
    assert out.stdout.strip() == "ok", out.stderr


def test_busy_error_is_one_sentence_for_the_cli():
    err = AgentBusyError("default", 4242)
    assert isinstance(err, StoreError)
    assert str(err).startswith("agent 'default' is in use by another memgpt-lite process "
                               "(pid 4242)")


def test_names_that_sanitise_alike_get_different_locks(tmp_path):
    assert lock_path(tmp_path, "a/b") != lock_path(tmp_path, "a_b")
    with AgentLock(tmp_path, "a/b"), AgentLock(tmp_path, "a_b"):
        pass


@pytest.mark.slow
def test_deleting_an_agent_that_is_in_use_is_refused(tmp_path):
    holder = start_worker("hold", str(config.db_path()), "busy", "15")
    try:
        wait_for_line(holder, "COMMITTED")
        proc = subprocess.run([sys.executable, "-m", "memgpt_lite", "agents", "delete", "busy",
                               "--yes"], capture_output=True, text=True, timeout=30,
                              env=child_env())
        assert proc.returncode != 0 and "in use" in proc.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_that_cannot_record_its_pid_is_not_left_held(tmp_path, monkeypatch):
    def disk_full(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", disk_full)
        try:
            AgentLock(tmp_path, "full").acquire(wait=0)
        except StoreError as exc:
            assert "No space left on device" in str(exc)
        else:
            raise AssertionError("the lock was taken without its pid")
    AgentLock(tmp_path, "full").acquire(wait=0).release()  # no fd of the failure holds it


def _has_lock_open(pid: int) -> bool:
    """Whether process `pid` has a file under locks/ open (it is waiting on an agent's lock)."""
    try:
        return any("/locks/" in os.readlink(f"/proc/{pid}/fd/{fd}")
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see the wait")
def test_a_chat_that_waited_out_a_delete_still_keeps_others_off_the_agent(tmp_path):
    """`agents delete` removes the agent's lock file while it holds it. A chat that was
    waiting on that file opens the agent (created anew) once the delete is done; a third
    process on the agent must still be refused while that chat runs."""
    pexpect = pytest.importorskip("pexpect")
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    env = child_env()
    subprocess.run([sys.executable, "-m", "memgpt_lite", "agents", "create", "x"], env=env,
                   check=True, capture_output=True, timeout=30)
    with FakeAnthropicServer() as server:
        deleting = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "agents", "delete", "x"],
                                 env=env, encoding="utf-8", timeout=30)
        deleting.expect_exact("[y/N]")  # the delete holds x's lock while it asks
        chat_env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        waiting = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                                    "--agent", "x"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=chat_env)
        try:
            deadline = time.monotonic() + 30
            while not _has_lock_open(waiting.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert waiting.poll() is None, waiting.communicate()
            deleting.sendline("y")
            deleting.expect(pexpect.EOF)
            waiting.stdin.write("hello from the chat that waited\n")  # type: ignore[union-attr]
            waiting.stdin.flush()  # type: ignore[union-attr]
            while len(server.requests) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert waiting.poll() is None and server.requests, "the waiting chat never got in"
            third = chat("x", "hello from a third process\n", server)
            assert third.returncode == 1, third.stdout
            assert (f"agent 'x' is in use by another memgpt-lite process (pid {waiting.pid})"
                    in third.stderr), third.stderr
        finally:
            out, err = waiting.communicate("", timeout=60)
        assert waiting.returncode == 0, err
        assert "Fake reply to: hello from the chat that waited" in out


def test_a_lock_that_makes_the_data_dir_makes_it_private(tmp_path):
    # On Postgres no database file creates the data dir first: a lock file may be the first
    # thing written there, and the data dir it makes must be 0700 like the rest.
    old = os.umask(0o022)
    try:
        AgentLock(tmp_path / "home", "x").acquire(0).release()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "home" / "locks").stat().st_mode) == 0o700

"""One process per agent: a second process waits, then refuses with a clear message; two
different agents in one data dir work side by side."""

from __future__ import annotations

import pytest

import io
import os
import queue
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time

from rel_support import (
    assert_trustworthy,
    child_env,
    recall_texts,
    start_worker,
    wait_for_line,
)

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


# Another process (a sqlite3 shell, a backup tool, a long memgpt-lite write) holding the
# write lock until told to let go.
HOLD_WRITE_LOCK = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
                   " c.execute('BEGIN IMMEDIATE'); print('held', flush=True);"
                   " sys.stdin.readline(); c.execute('COMMIT')")


def _lines_of(stream, into: queue.Queue) -> threading.Thread:
    def pump():
        for line in stream:
            into.put(line.rstrip("\n"))
        into.put(None)
    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _next_line(lines: queue.Queue, wanted: str) -> str:
    while (line := lines.get(timeout=60)) is not None:
        if wanted in line:
            return line
    raise AssertionError(f"the chat ended before a line with {wanted!r}")


@pytest.mark.slow
def test_a_chat_outlives_another_process_holding_the_write_lock_too_long(tmp_path):
    """A message sent while another process keeps the database's write lock past SQLite's
    wait fails in one line; the chat goes on and answers the next message."""
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                                 "--agent", "busy"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        out, err = queue.Queue(), queue.Queue()
        readers = [_lines_of(proc.stdout, out), _lines_of(proc.stderr, err)]
        proc.stdin.write("before the lock\n")
        proc.stdin.flush()
        _next_line(out, "Fake reply to: before the lock")
        holder = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK,
                                   str(config.db_path())], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline() == "held\n"
            proc.stdin.write("while it is held\n")
            proc.stdin.flush()
            error = _next_line(err, "error:")
        finally:
            holder.communicate("go\n", timeout=30)
        proc.stdin.write("after it is let go\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 1  # a message went unanswered
        for reader in readers:
            reader.join(timeout=30)
    rest = list(out.queue) + list(err.queue)
    assert any("Fake reply to: after it is let go" in line for line in rest if line), rest
    assert error.startswith(f"error: The database {config.db_path()} is locked by another "
                            "process"), error
    assert error.endswith("Your message was not sent."), error
    assert not any("Traceback" in line for line in rest if line), rest
    assert_trustworthy(config.db_path(), "busy", answered=["before the lock", "after it is"])


class _LocksWhileAnswering:
    """A scripted model whose second call lets another connection take the write lock, as
    if another process began a long write while the model answered."""

    def __init__(self, other: sqlite3.Connection, replies: list[str]):
        self.other = other
        self.inner = ScriptedModel([text_response(r) for r in replies])
        self.calls = 0

    def stream(self, request):
        self.calls += 1
        if self.calls == 2:
            self.other.execute("BEGIN IMMEDIATE")
        yield from self.inner.stream(request)


@pytest.mark.slow  # two of SQLite's 5 s waits for the lock
def test_a_turn_whose_commit_finds_the_database_locked_is_kept_for_retry(tmp_path):
    """The lock is taken while the model answers: the turn cannot be committed (nor undone)
    and fails in one line; once the lock is let go, /retry answers the same message, and
    it is in recall once."""
    from rich.console import Console

    from memgpt_lite.terminal.chat import ChatSession
    from memgpt_lite.terminal.view import ChatView

    store = SQLiteStore(config.db_path())
    other = sqlite3.connect(config.db_path(), isolation_level=None)
    model = _LocksWhileAnswering(other, ["first answer", "lost answer", "retried answer"])
    agent = Agent.open(store, model_client=model)
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    session = ChatSession(agent, console, ChatView(console, live=False, markdown=False))
    try:
        session.handle_line("one")
        session.handle_line("two")
        other.execute("COMMIT")
        shown = " ".join(buf.getvalue().split())  # the console wraps long lines
        assert shown.count("error:") == 1 and "Traceback" not in shown
        assert (f"error: The database {config.db_path()} is locked by another process (it held "
                "the write lock for over 5 s); try again once it is done. Your message is kept "
                "in recall, unanswered.") in shown
        assert session.failed_turns == 1
        session.handle_line("/retry")
        assert session.failed_turns == 0  # the retry answered it
        said = [(m.role, m.content[-1]["text"]) for m in store.context_messages(agent.id)]
        assert said == [("user", "one"), ("assistant", "first answer"), ("user", "two"),
                        ("assistant", "retried answer")]
        assert [t for t in recall_texts(store, agent.id) if t == "two"] == ["two"]
    finally:
        agent.close()
        other.close()
        store.close()

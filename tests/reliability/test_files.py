"""Files: private permissions everywhere; a full disk or read-only data dir gives one clear
error and no partial turn."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rel_support import child_env, queue_problems, recall_texts

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import StoreError
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


def modes(root: Path) -> dict[str, int]:
    out = {str(root): stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def assert_private(root: Path, skip_dirs: tuple[str, ...] = ()) -> None:
    for name, mode in modes(root).items():
        if name in skip_dirs:
            continue
        assert mode & 0o077 == 0, f"{name} is {mode:o}: readable by others"


def chat_with_umask_0() -> Path:
    """A recorded chat session in a child process with a permissive umask."""
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        env = child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        proc = subprocess.run(
            [sys.executable, "-c", "import os, sys; os.umask(0); from memgpt_lite.terminal.cli import main;"
             " sys.exit(main(['chat', '--agent', 'p']))"],
            input="hello\nsecond\n", capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    home = config.data_dir()
    names = modes(home)
    assert "memgpt_lite.db" in names
    assert any(n.startswith("recordings/") and n.endswith(".jsonl") for n in names)
    assert any(n.startswith("locks/") for n in names)
    return home


@pytest.mark.slow
def test_every_file_a_chat_creates_is_private(tmp_path):
    home = chat_with_umask_0()
    folders = {str(p.relative_to(home)) for p in (home / "recordings").rglob("*") if p.is_dir()}
    assert_private(home, skip_dirs=("recordings", *folders))


@pytest.mark.slow
def test_recording_directories_are_private(tmp_path):
    assert_private(chat_with_umask_0())


def test_wal_and_shm_files_are_private_while_open(tmp_path):
    old = os.umask(0)
    try:
        store = SQLiteStore(config.db_path())
        agent = Agent.open(store, "w", model_client=ScriptedModel([text_response("ok")]))
        list(agent.step("hello"))
        names = modes(config.data_dir())
        assert "memgpt_lite.db-wal" in names and "memgpt_lite.db-shm" in names
        assert_private(config.data_dir())
        assert names[str(config.data_dir())] == 0o700
        store.close()
    finally:
        os.umask(old)


# --------------------------------------------------------------------------- disk full


class FullDisk:
    """Wraps a store's connection: once armed, every write statement fails the way SQLite
    fails on a full disk."""

    def __init__(self, db: sqlite3.Connection):
        self._db, self.armed = db, False

    def execute(self, sql: str, *args):
        if self.armed and sql.lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def executemany(self, sql: str, *args):
        if self.armed:
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def full_disk_agent(tmp_path, script) -> tuple[SQLiteStore, Agent, FullDisk]:
    store = SQLiteStore(tmp_path / "data" / "memgpt_lite.db")
    agent = Agent.open(store, "full", model_client=ScriptedModel(
        [text_response("first, safe"), *script]))
    assert list(agent.step("first message"))[-1].completed
    disk = FullDisk(store.db.connection)
    store.db.connection = disk  # type: ignore[assignment]
    return store, agent, disk


def test_disk_full_before_the_turn_starts(tmp_path):
    store, agent, disk = full_disk_agent(tmp_path, [text_response("never asked")])
    disk.armed = True
    with pytest.raises(StoreError, match="disk holding .* is full; free some space"):
        list(agent.step("this cannot be saved"))
    assert agent.model_client.remaining == 1  # no model call for an unsaved message
    disk.armed = False
    assert sorted({m.turn_id for m in store.context_messages(agent.id)}) == [1]
    assert queue_problems(store, agent.id) == []


def test_disk_full_at_the_commit_leaves_no_partial_turn(tmp_path):
    store, agent, disk = full_disk_agent(tmp_path, [text_response("a reply that won't fit")])
    steps = agent.step("the question")
    next(steps)  # the user's message is stored; the disk fills up during the reply
    disk.armed = True
    with pytest.raises(StoreError, match="is full"):
        list(steps)
    disk.armed = False
    assert sorted({m.turn_id for m in store.context_messages(agent.id)}) == [1]
    assert queue_problems(store, agent.id) == []
    assert "the question" in recall_texts(store, agent.id)
    assert "a reply that won't fit" not in recall_texts(store, agent.id)
    agent.model_client = ScriptedModel([text_response("fits now")], validate=True)
    assert list(agent.step("the question"))[-1].completed


def test_disk_full_during_a_tool_is_an_error_result_or_a_clean_failure(tmp_path):
    store, agent, disk = full_disk_agent(tmp_path, [
        tool_response([("archival_insert", {"content": "a fact to keep"})]),
        text_response("done")])
    steps = agent.step("remember a fact")
    next(steps)
    disk.armed = True
    with pytest.raises(StoreError, match="is full"):
        list(steps)
    disk.armed = False
    assert store.count_passages(agent.id) == 0
    assert sorted({m.turn_id for m in store.context_messages(agent.id)}) == [1]
    assert queue_problems(store, agent.id) == []


# --------------------------------------------------------------------------- real mounts


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 1 MB tmpfs (needs root and mount rights; skipped elsewhere): room for a new
    database with every migration and its write-ahead log, and little more."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_a_really_full_disk(tiny_fs):
    store = SQLiteStore(tiny_fs / "memgpt_lite.db")
    agent = Agent.open(store, "real", model_client=ScriptedModel(
        [text_response("first, safe")] + [text_response("x" * 300_000)] * 4))
    assert list(agent.step("first message"))[-1].completed
    error = None
    for i in range(4):  # each reply is bigger than what is left sooner or later
        try:
            events = list(agent.step(f"question {i}"))
        except StoreError as exc:
            error = exc
            break
        assert events[-1].completed
    assert error is not None and "is full" in str(error)
    assert queue_problems(store, agent.id) == []
    store.close()
    with SQLiteStore(tiny_fs / "memgpt_lite.db") as again:  # reopens; what was committed is there
        row = again.get_agent("real")
        assert "first, safe" in recall_texts(again, row.id)


@pytest.mark.slow
def test_a_read_only_data_dir(tiny_fs):
    db = tiny_fs / "memgpt_lite.db"
    store = SQLiteStore(db)
    agent = Agent.open(store, "ro", model_client=ScriptedModel([text_response("first, safe")]))
    list(agent.step("first message"))
    agent.close()
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    with pytest.raises(StoreError) as info:
        # SQLite may still open the file for reading (a full tiny disk can keep its WAL):
        # then the first write is refused in the same one sentence.
        SQLiteStore(db).set_summary(1, "a write")
    message = str(info.value)
    assert "\n" not in message
    assert "read-only" in message, message


@pytest.mark.slow
def test_chat_on_a_read_only_data_dir_says_so_in_one_line(tiny_fs):
    store = SQLiteStore(tiny_fs / "memgpt_lite.db")
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    proc = subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record"],
                          input="hello\n", capture_output=True, text=True, timeout=30,
                          env=child_env(MEMGPT_LITE_HOME=str(tiny_fs),
                                        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
                                        ANTHROPIC_API_KEY="test"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("memgpt-lite: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_read_only_data_dir_can_still_be_listed_shown_and_exported(tiny_fs):
    """A backup on a read-only medium: reading it must work; every write is one sentence."""
    store = SQLiteStore(tiny_fs / "memgpt_lite.db")
    agent = Agent.open(store, "ro", model_client=ScriptedModel([text_response("first, safe")]))
    list(agent.step("a message worth keeping"))
    agent.close()
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memgpt_lite", *argv], capture_output=True,
                              text=True, timeout=60, env=child_env(MEMGPT_LITE_HOME=str(tiny_fs)))

    listed = run("agents", "list")
    assert listed.returncode == 0 and "ro" in listed.stdout, listed.stderr
    assert run("core", "--agent", "ro").returncode == 0
    exported = run("agents", "export", "ro")
    assert exported.returncode == 0, exported.stderr
    assert "a message worth keeping" in exported.stdout
    refused = run("agents", "set", "ro", "model=haiku")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Read-only" in refused.stderr


def _an_agent() -> None:
    with SQLiteStore(config.db_path()) as s:
        Agent.open(s, model_client=ScriptedModel([])).close()


def test_an_export_to_a_pipe_is_written_into_it_not_renamed_over_it(tmp_path):
    """`-o >(gzip > x.gz)` or `-o /dev/stdout`: a pipe or a device stays one (renamed over,
    /dev/null would become a regular file for every program)."""
    from memgpt_lite.terminal import cli

    _an_agent()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # the other end, as gzip would hold it
    try:
        assert cli.main(["agents", "export", "default", "-o", str(pipe)]) == 0
        data = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert json.loads(data)["agent"]["name"] == "default"


def test_an_export_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    from memgpt_lite.terminal import cli

    _an_agent()
    (tmp_path / "backups").mkdir()
    target = tmp_path / "backups" / "default.json"
    target.write_text("the previous export\n")
    link = tmp_path / "default.json"
    link.symlink_to(target)
    assert cli.main(["agents", "export", "default", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["agent"]["name"] == "default"
    assert sorted(p.name for p in target.parent.iterdir()) == ["default.json"]


def test_an_export_to_dev_stdout_as_a_pipe_is_written_into_the_pipe(tmp_path):
    """/dev/stdout is a link to /proc/self/fd/1, which names no file when it is a pipe."""
    from memgpt_lite.terminal import cli

    _an_agent()
    read_end, write_end = os.pipe()
    try:
        assert cli.main(["agents", "export", "default", "-o",
                         f"/proc/self/fd/{write_end}"]) == 0
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            assert json.loads(pipe.read())["agent"]["name"] == "default"
    finally:
        with contextlib.suppress(OSError):
            os.close(write_end)


@pytest.mark.slow
def test_export_to_dev_stdout_piped_into_import_moves_the_agent(tmp_path):
    """`agents export NAME -o /dev/stdout | agents import -`: stdout holds the JSON alone."""
    _an_agent()
    exported = subprocess.run([sys.executable, "-m", "memgpt_lite", "agents", "export",
                               "default", "-o", "/dev/stdout"], capture_output=True,
                              timeout=60, env=child_env())
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["agent"]["name"] == "default"
    assert b"Exported agent 'default' to /dev/stdout." in exported.stderr
    imported = subprocess.run([sys.executable, "-m", "memgpt_lite", "agents", "import", "-",
                               "--name", "moved"], input=exported.stdout, capture_output=True,
                              timeout=60, env=child_env())
    assert imported.returncode == 0, imported.stderr

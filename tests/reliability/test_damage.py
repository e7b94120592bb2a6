"""No traceback, no lost message: a recording that cannot be written costs neither the turn
nor the message (one notice, then the chat goes on without recording), and a database with a
damaged page gives one sentence pointing at `memgpt-lite doctor` and is never written to."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rel_support import child_env, recall_texts

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import StoreError
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import ScriptedModel, text_response

MARKER = "zanzibar-marker-text"


def chat(*args: str, stdin: str, server: FakeAnthropicServer, **env: str):
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], input=stdin,
                          capture_output=True, text=True, timeout=60,
                          env=child_env(ANTHROPIC_BASE_URL=server.base_url,
                                        ANTHROPIC_API_KEY="test", **env))


def assert_one_clean_line(text: str, *words: str) -> None:
    assert "Traceback" not in text and "Error:" not in text, text
    lines = [line for line in text.splitlines() if any(w in line for w in words)]
    assert len(lines) == 1, text


# --------------------------------------------------------------------------- recordings


@pytest.mark.slow
def test_a_recordings_folder_that_cannot_be_made_costs_no_turn(tmp_path):
    config.data_dir().mkdir(parents=True)
    (config.data_dir() / "recordings").write_text("in the way")  # a file, not a folder
    with FakeAnthropicServer() as server:
        done = chat("chat", stdin="hello\nsecond\n", server=server)
    assert done.returncode == 0, done.stderr
    assert "Fake reply to: hello" in done.stdout and "Fake reply to: second" in done.stdout
    assert_one_clean_line(done.stdout + done.stderr, "Cannot record this session")
    with SQLiteStore(config.db_path()) as store:
        texts = recall_texts(store, store.get_agent("default").id)
    assert "hello" in texts and "second" in texts


@pytest.fixture
def mounted_recordings(tmp_path):
    """A real tmpfs at the recordings folder (needs root and mount rights)."""
    folder = config.data_dir() / "recordings"
    folder.mkdir(parents=True)
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(folder)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.slow
def test_a_read_only_recordings_folder_costs_no_turn(mounted_recordings):
    subprocess.run(["mount", "-o", "remount,ro", str(mounted_recordings)], check=True)
    with FakeAnthropicServer() as server:
        done = chat("chat", stdin="hello\nsecond\n", server=server)
    assert done.returncode == 0, done.stderr
    assert "Fake reply to: second" in done.stdout
    assert_one_clean_line(done.stdout + done.stderr, "Cannot record this session")
    assert "Read-only file system" in done.stdout + done.stderr


@pytest.mark.slow
def test_a_full_disk_under_the_recordings_costs_no_turn(mounted_recordings):
    with open(mounted_recordings / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with FakeAnthropicServer() as server:
        done = chat("chat", stdin="hello\nsecond\n", server=server)
    assert done.returncode == 0, done.stderr
    assert "Fake reply to: second" in done.stdout
    assert_one_clean_line(done.stdout + done.stderr, "Cannot record this session")
    assert not [p for p in mounted_recordings.rglob("*.jsonl")]  # no 0-byte recordings


def test_a_recording_that_fails_mid_session_says_so_once_and_the_chat_goes_on(tmp_path):
    from memgpt_lite.terminal.chat import ChatSession
    from memgpt_lite.terminal.chat_main import open_recorder
    from memgpt_lite.terminal.render import make_console
    from memgpt_lite.terminal.view import ChatView

    store = SQLiteStore(config.db_path())
    agent = Agent.open(store, model_client=ScriptedModel([text_response(f"Reply {i}.")
                                                          for i in range(3)]))
    out = io.StringIO()
    console = make_console(out, plain=True, width=200)
    session = ChatSession(agent, console, ChatView(console, live=False, markdown=False),
                          recorder_factory=lambda: open_recorder(agent))
    session.handle_line("first")

    def full(text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    session.recorder._file.write = full  # the disk fills up
    session.handle_line("second")
    session.handle_line("third")
    session.close()
    text = out.getvalue()
    assert "Reply 1." in text and "Reply 2." in text
    assert text.count("Cannot record this session") == 1, text
    assert [t for t in recall_texts(store, agent.id) if t in ("first", "second", "third")] == [
        "first", "second", "third"]


# --------------------------------------------------------------------------- a damaged file


def damaged_db(tmp_path) -> Path:
    """A real database with garbage written over the page that holds a queued message."""
    path = config.db_path()
    with SQLiteStore(path) as store:
        agent = store.create_agent("default", Settings().to_dict(),
                                   {"human": ("", 100), "persona": ("", 100)})
        for t in range(1, 200):
            text = MARKER if t == 150 else f"message {t} " + "filler " * 30
            store.add_messages(agent.id, [Message("user", [{"type": "text", "text": text}], t),
                                          Message("assistant", [{"type": "text",
                                                                 "text": f"reply {t}"}], t)])
    data = bytearray(path.read_bytes())
    page = 4096
    at = data.index(MARKER.encode()) // page * page
    assert 0 < at < len(data) - page  # a page in the middle, not the header
    data[at:at + page] = os.urandom(page)
    path.write_bytes(bytes(data))
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_damaged_page_is_one_sentence_and_the_store_writes_nothing(tmp_path):
    path = damaged_db(tmp_path)
    before = digest(path)
    store = SQLiteStore(path)
    with pytest.raises(StoreError) as info:
        agent = Agent.open(store, model_client=ScriptedModel([text_response("never")]),
                           lock_wait=None)
        list(agent.step("hello"))
    message = str(info.value)
    assert "is damaged" in message and "memgpt-lite doctor" in message and "\n" not in message
    assert store.damage is not None
    with pytest.raises(StoreError, match="is damaged"):
        store.set_block(1, "human", "a write after the damage")
    with pytest.raises(StoreError, match="is damaged"):
        store.touch(1)
    assert store.integrity_problems()  # the damage can still be described
    store.close()
    assert digest(path) == before
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


@pytest.mark.parametrize("command", [["chat", "--no-record"], ["chat"], ["core"]])
@pytest.mark.slow
def test_commands_on_a_damaged_file_say_so_in_one_line(tmp_path, command):
    path = damaged_db(tmp_path)
    before = digest(path)
    with FakeAnthropicServer() as server:
        done = chat(*command, stdin="hello\n", server=server)
    if command[0] == "chat":
        assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr + done.stdout
    if done.returncode:
        assert done.stderr.startswith("memgpt-lite: ") and "damaged" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert digest(path) == before


def _damage_index_page(path: Path, index: str) -> None:
    """Garbage over the root page of `index`, a page the reads of a chat never touch."""
    with sqlite3.connect(path) as db:
        (root,), = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,))
        size = db.execute("PRAGMA page_size").fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[(root - 1) * size:root * size] = os.urandom(size)
    path.write_bytes(bytes(data))


def test_a_damaged_index_page_is_found_before_anything_is_written(tmp_path):
    """The turn reads the queue and writes messages, never the tombstones' index: the
    background page check finds the damage, and the first write waits for it."""
    path = config.db_path()
    with SQLiteStore(path) as store:
        agent = Agent.open(store, model_client=ScriptedModel([text_response("first")]))
        list(agent.step("hello"))
        agent.close()
    _damage_index_page(path, "tombstones_agent")
    before = digest(path)
    store = SQLiteStore(path)
    agent = Agent.open(store, model_client=ScriptedModel([text_response("never")]),
                       lock_wait=None)
    assert [m.role for m in store.context_messages(agent.id)] == ["user", "assistant"]
    with pytest.raises(StoreError, match="is damaged.*memgpt-lite doctor") as info:
        list(agent.step("a second message"))
    assert "\n" not in str(info.value)
    store.close()
    assert digest(path) == before


def test_closing_a_store_ends_its_page_check_and_lets_go_of_the_file(tmp_path):
    """A replay opens a snapshot in a temporary folder and removes the folder when done: a
    page check still reading the file then must not hold it (or make its -shm) any more."""
    path = tmp_path / "big" / "memgpt.db"
    with SQLiteStore(path) as store:
        agent_id = store.create_agent("ada", {}, {}).id
        store.add_messages(agent_id, [Message("user", f"word {i} " * 500, i + 1) for i in range(800)])
    for _ in range(5):
        store = SQLiteStore(path)
        store.close()
        checks = [t for t in threading.enumerate() if t.name == "memgpt-lite page check"]
        assert checks == []
    shutil.rmtree(path.parent)
    assert not path.parent.exists()

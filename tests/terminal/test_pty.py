"""`memgpt-lite chat` on a real pseudo-terminal against the fake Anthropic server on
127.0.0.1: streamed reply, /core, a pasted multi-line message, Ctrl-C during a hanging
reply, Ctrl-D — then the store is checked for consistency; a damaged input history; Ctrl-D
at the continuation prompt."""

from __future__ import annotations

import os
import sys
import time

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang
from memgpt_lite.lab.scripted import text_response

pytestmark = pytest.mark.slow  # every test here starts real processes

pexpect = pytest.importorskip("pexpect")

PROMPT = "you› "


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


def spawn_chat(server, *args: str):
    env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
               TERM="xterm-256color", COLUMNS="100", LINES="30")
    child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", *args], env=env,
                          dimensions=(30, 100), encoding="utf-8", timeout=20)
    child.expect_exact(PROMPT)
    return child


def last_user_texts(server) -> list[str]:
    out = []
    for body in server.requests:
        content = body["messages"][-1]["content"]
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        out.append(texts[-1] if texts else "")
    return out


def test_chat_on_a_pty_streams_edits_pastes_and_survives_ctrl_c(server):
    server.enqueue(text_response("Hello Ada, streaming works fine here."))
    server.enqueue(text_response("Two lines received."))
    server.enqueue(hang(seconds=30, after=4))  # starts streaming, then never finishes
    server.enqueue(text_response("Still here after the interruption."))
    child = spawn_chat(server)
    try:
        child.sendline("Hi, I'm Ada")
        child.expect_exact("streaming works fine here.")
        child.expect(r"context [\d,]+/[\d,]+ tokens \(\d+%\)")
        child.expect_exact(PROMPT)

        child.sendline("/core")
        child.expect_exact("human  36/5,000 chars")
        child.expect_exact(PROMPT)

        # A bracketed paste with a newline inside arrives as one message.
        child.send("\x1b[200~first pasted line\rsecond pasted line\x1b[201~")
        child.send("\r")
        child.expect_exact("Two lines received.")
        child.expect_exact(PROMPT)

        child.sendline("tell me a long story")
        child.expect_exact("Fake reply to")  # the first streamed chunk of the hanging reply
        child.sendintr()
        child.expect_exact("interrupted — the turn was cancelled")
        child.expect_exact(PROMPT)

        child.sendline("are you still there?")
        child.expect_exact("Still here after the interruption.")
        child.expect_exact(PROMPT)

        child.sendline("/forget pasted")  # the paste goes from recall and the input history
        child.expect_exact("Forget all of this?")
        child.sendline("y")
        child.expect_exact("1 recording file scrubbed")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0

    texts = last_user_texts(server)
    assert texts[0].endswith("Hi, I'm Ada")
    assert texts[1].endswith("first pasted line\nsecond pasted line")
    assert texts[2].endswith("tell me a long story")
    assert len(server.requests) == 4  # Ctrl-C did not retry the hanging call

    with SQLiteStore(config.db_path()) as store:
        agent = store.get_agent("default")
        queue = store.context_messages(agent.id)
        assert [(m.turn_id, m.role) for m in queue] == [
            (1, "user"), (1, "assistant"), (2, "user"), (2, "assistant"), (4, "user"),
            (4, "assistant")]
        assert queue[2].content[0]["text"] == "first [forgotten] line\nsecond [forgotten] line"
        assert store.search_messages(agent.id, "pasted").total == 0
        body = {"model": "m", "max_tokens": 10,
                "messages": [m.to_api() for m in queue] + [
                    {"role": "user", "content": [{"type": "text", "text": "next"}]}]}
        assert validate_request(body) is None
        hits = store.search_messages(agent.id, "long story")
        assert [(h.turn_id, h.role) for h in hits.hits] == [(3, "user")]  # kept in recall
        assert store.db.connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    history = (config.data_dir() / "chat_history").read_text()
    assert "/core" in history and "tell me a long story" in history
    assert "pasted" not in history
    assert oct((config.data_dir() / "chat_history").stat().st_mode & 0o777) == "0o600"
    recordings = list(config.recordings_dir().rglob("*.jsonl"))
    assert len(recordings) == 1 and '"type":"interrupted"' in recordings[0].read_text()
    assert "pasted" not in recordings[0].read_text()


def test_ctrl_c_twice_at_the_prompt_exits_and_backslash_continues(server):
    server.enqueue(text_response("Got both lines."))
    child = spawn_chat(server, "--no-record")
    try:
        child.sendline("one \\")
        child.expect_exact("  … ")
        child.sendline("two")
        child.expect_exact("Got both lines.")
        child.expect_exact(PROMPT)
        # A SIGINT in the instant before readline takes the terminal is only seen after the
        # next Enter (a CPython readline race no typing human hits), so pause like one.
        time.sleep(0.3)
        child.sendintr()
        child.expect_exact("press Ctrl-C again or Ctrl-D to leave")
        child.expect_exact(PROMPT)
        time.sleep(0.3)
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert last_user_texts(server)[0].endswith("one \ntwo")
    assert not config.recordings_dir().exists() or not any(config.recordings_dir().rglob("*.jsonl"))


@pytest.mark.parametrize("damage", ["nul", "folder"])
def test_a_damaged_or_unreadable_input_history_does_not_stop_a_typed_chat(server, damage):
    history = config.data_dir() / "chat_history"
    history.parent.mkdir(parents=True, exist_ok=True)
    if damage == "nul":  # readline refuses a NUL byte
        history.write_bytes(b"an old line\nhalf\x00written\n")
    else:
        history.mkdir()
    server.enqueue(text_response("Still chatting."))
    child = spawn_chat(server, "--no-record")
    try:
        if damage == "folder":
            assert "the input history" in child.before and "cannot be read" in child.before
        child.sendline("hello")
        child.expect_exact("Still chatting.")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert last_user_texts(server) == ["hello"]
    if damage == "nul":  # kept as it was, the new message added
        assert history.read_bytes() == b"an old line\nhalf\x00written\nhello\n/exit\n"


def test_sigterm_mid_turn_ends_the_chat_as_exit_does(server):
    """SIGTERM (a service manager, `kill`) while a reply streams: the turn is undone, the
    cursor shown again, the lock released and the agent this run created dropped, since no
    turn of it finished; exit 143. Dying where it stood left all of that behind."""
    server.enqueue(hang(seconds=30, after=4))
    child = spawn_chat(server, "--agent", "fresh")
    try:
        child.sendline("tell me a long story")
        child.expect_exact("Fake reply to")
        child.kill(15)
        child.expect_exact("was not kept: no turn of it finished")
        child.expect_exact("ended by SIGTERM")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 143
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("fresh") is None
        assert store.db.connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sighup_at_the_prompt_keeps_the_session_and_frees_the_agent(server):
    """SIGHUP (the terminal window closed) after a finished turn: the agent keeps it, its
    lock is released (the next chat opens at once) and the cursor is shown; exit 129."""
    server.enqueue(text_response("First answer, kept."))
    server.enqueue(text_response("Second chat opened."))
    child = spawn_chat(server, "--agent", "kept")
    try:
        child.sendline("hello")
        child.expect_exact("First answer, kept.")
        child.expect_exact(PROMPT)
        child.kill(1)
        child.expect_exact("ended by SIGHUP")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 129
    again = spawn_chat(server, "--agent", "kept")
    try:
        again.sendline("still there?")
        again.expect_exact("Second chat opened.")
        again.expect_exact(PROMPT)
        again.sendeof()
        again.expect(pexpect.EOF)
    finally:
        again.close(force=True)
    with SQLiteStore(config.db_path()) as store:
        agent = store.get_agent("kept")
        turns = {m.turn_id for m in store.context_messages(agent.id)}
        assert turns == {1, 2}


def test_ctrl_d_at_the_continuation_prompt_keeps_the_lines_typed(server):
    """Ctrl-D at `  … ` (a line ended with a backslash) leaves the chat, as at the prompt;
    the line typed before it was neither sent nor kept, so it was gone for good."""
    server.enqueue(text_response("Got it back."))
    child = spawn_chat(server, "--no-record")
    try:
        child.sendline("a long thought \\")
        child.expect_exact("  … ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert server.requests == []
    again = spawn_chat(server, "--no-record")
    try:
        again.send("\x1b[A")  # Up: the line typed last time
        again.send("\r")
        again.expect_exact("Got it back.")
        again.expect_exact(PROMPT)
        again.sendeof()
        again.expect(pexpect.EOF)
    finally:
        again.close(force=True)
    assert last_user_texts(server) == ["a long thought "]


SHOW_CURSOR = "\x1b[?25h"


def test_the_chat_started_after_a_kill_9_shows_the_cursor_again(server):
    """kill -9 mid-stream leaves the cursor hidden (nothing can run in a process killed so);
    the next chat started in that terminal kept it hidden until its first reply. Now its
    start, and its end however it ends, show it."""
    server.enqueue(hang(seconds=30, after=4))
    server.enqueue(text_response("Back again."))
    child = spawn_chat(server)
    try:
        child.sendline("tell me a long story")
        child.expect_exact("Fake reply to")  # the live region is up: the cursor hidden
        child.kill(9)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    again = spawn_chat(server)
    try:
        assert SHOW_CURSOR in again.before
        again.sendline("/exit")
        again.expect(pexpect.EOF)
        assert SHOW_CURSOR in again.before
    finally:
        again.close(force=True)
    assert again.exitstatus == 0


@pytest.mark.parametrize("signum, code", [(15, 143), (1, 129)])
def test_a_signal_during_an_eval_progress_bar_shows_the_cursor_again(signum, code, tmp_path):
    """A progress bar hides the cursor; SIGTERM or SIGHUP killed the eval where it stood
    and left the terminal without one."""
    import json

    turns = [{"speaker": "Ann" if i % 2 else "Bo", "dia_id": f"D1:{i}",
              "text": f"On day {i} I planted tulip number {i} by the pond."}
             for i in range(1, 400)]
    qa = [{"question": f"When did I plant tulip number {i}?", "answer": f"day {i}",
           "evidence": [f"D1:{i}"], "category": 4} for i in range(1, 400)]
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([{"sample_id": f"s{n}", "qa": qa, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": turns}} for n in range(40)]))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="30")
    child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "eval", "locomo", str(data),
                                           "--retrieval-only"], env=env, dimensions=(30, 100),
                          encoding="utf-8", timeout=60)
    try:
        child.expect_exact("LoCoMo samples")  # the bar is drawn: the cursor is hidden
        child.expect_exact("sample 1/40")
        child.kill(signum)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert SHOW_CURSOR in child.before
    assert child.exitstatus == code

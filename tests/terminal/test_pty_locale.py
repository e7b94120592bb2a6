"""`memgpt-lite chat` on a real pseudo-terminal under locales and terminals other than a
UTF-8 xterm: the C locale (LC_ALL=C, where Python reads and writes UTF-8 but readline keeps
ASCII), a Latin-1 locale, and TERM=dumb."""

from __future__ import annotations

import os
import sys

import pytest

from memgpt_lite.engine import config
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import text_response

pytestmark = pytest.mark.slow  # every test here starts real processes

pexpect = pytest.importorskip("pexpect")

PROMPT = "you› "
UP = "\x1b[A"


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


def spawn_chat(server, env: dict[str, str], *args: str, encoding: str = "utf-8"):
    full = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                TERM="xterm-256color", COLUMNS="100", LINES="30")
    for name in ("LANG", "LC_ALL", "LC_CTYPE", "LANGUAGE"):
        full.pop(name, None)
    full.update(env)
    return pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--no-record", *args],
                         env=full, dimensions=(30, 100), encoding=encoding,
                         codec_errors="replace", timeout=20)


def last_user_texts(server) -> list[str]:
    return [body["messages"][-1]["content"][-1]["text"] for body in server.requests]


def test_the_c_locale_keeps_non_ascii_typing_and_the_up_arrow(server):
    """Under LC_ALL=C readline keeps ASCII: a history file with `café` in it, or a typed
    `héllo 日本`, ended the chat with a traceback and the message was lost."""
    history = config.data_dir() / "chat_history"
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text("an old café line\n", encoding="utf-8")
    server.enqueue(text_response("First answer."))
    server.enqueue(text_response("Second answer."))
    child = spawn_chat(server, {"LC_ALL": "C"})
    try:
        child.expect_exact(PROMPT)
        child.sendline("héllo 日本")
        child.expect_exact("First answer.")
        child.expect_exact(PROMPT)
        child.send(UP)  # the message just sent, recalled whole
        child.send("\r")
        child.expect_exact("Second answer.")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert last_user_texts(server) == ["héllo 日本", "héllo 日本"]
    assert history.read_text(encoding="utf-8") == "an old café line\nhéllo 日本\nhéllo 日本\n"


def latin1_locale(folder) -> dict[str, str]:
    """A Latin-1 locale compiled into `folder` (LOCPATH), or a skip naming why not."""
    import shutil
    import subprocess

    if shutil.which("localedef") is None:
        pytest.skip("localedef is not installed (glibc's libc-bin)")
    made = subprocess.run(["localedef", "-i", "en_US", "-f", "ISO-8859-1",
                           str(folder / "en_US.ISO-8859-1")], capture_output=True, check=False)
    if not (folder / "en_US.ISO-8859-1").exists():
        pytest.skip(f"no Latin-1 locale could be made: {made.stderr.decode(errors='replace')}")
    return {"LOCPATH": str(folder), "LANG": "en_US.ISO-8859-1"}


def test_a_latin1_terminal_gets_question_marks_not_a_traceback(server, tmp_path):
    """In a Latin-1 locale the prompt's `›` (and any emoji of a reply) cannot be written:
    the chat ended with a UnicodeEncodeError at its first prompt."""
    server.enqueue(text_response("Olá — emoji 🎉 and café"))
    child = spawn_chat(server, latin1_locale(tmp_path), encoding="latin-1")
    try:
        child.expect_exact("you> ")
        child.sendline("café olá")
        child.expect_exact("Olá ? emoji ? and café")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert last_user_texts(server) == ["café olá"]


def test_a_dumb_terminal_gets_no_escape_codes_and_lines_of_its_width(server):
    """TERM=dumb (Emacs' shell): the prompt forced bracketed paste on, writing `ESC[?2004h`
    around every line typed, and rich took the terminal for 80 columns, so at 40 every
    padded line of a reply wrapped onto a second row."""
    server.enqueue(text_response(" ".join(f"word{i}" for i in range(40))))
    env = {"TERM": "dumb", "LANG": "C.UTF-8"}
    full = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test", **env)
    full.pop("COLUMNS", None)
    full.pop("LINES", None)
    child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--no-record"],
                          env=full, dimensions=(24, 40), encoding="utf-8", timeout=20)
    try:
        child.expect_exact(PROMPT)
        seen = child.before + child.after
        child.sendline("hello")
        child.expect_exact("word39")
        seen += child.before + child.after
        child.expect_exact(PROMPT)
        seen += child.before + child.after
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        seen += child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, seen
    assert "\x1b" not in seen, repr(seen)
    assert "word0 word1" in seen
    reply = [line for line in seen.split("\r\n") if "word" in line]
    assert len(reply) > 3 and max(len(line) for line in reply) <= 40, reply


def test_tab_completes_a_file_name_that_is_not_ascii_in_the_c_locale(server, tmp_path):
    """Under LC_ALL=C readline could not take `naïve.md` back from the completer (it raised,
    and readline shows nothing then): Tab did nothing for such a name."""
    (tmp_path / "naïve.md").write_text("notes")
    child = spawn_chat(server, {"LC_ALL": "C"})
    try:
        child.expect_exact(PROMPT)
        child.send(f"/add {tmp_path}/na\t")
        child.expect_exact("naïve.md")
        child.send("\r")
        child.expect_exact("naïve.md (5 chars) will be sent with your next message")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before

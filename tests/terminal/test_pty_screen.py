"""What the user sees: `memgpt-lite chat` on a real pseudo-terminal against the fake server,
its output fed through a terminal emulator (pyte), and the screen checked: Ctrl-C or a resize
mid-stream leaves each line of the reply once, keys typed while the model answers are not
echoed into the reply (they wait for the next prompt, also after Ctrl-Z and `fg` in a real
shell), and Ctrl-C at a y/N question ends its line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang
from memgpt_lite.lab.scripted import text_response

pytestmark = pytest.mark.slow  # every test here starts real processes

pexpect = pytest.importorskip("pexpect")
pyte = pytest.importorskip("pyte")

PROMPT = "you› "
WORDS = " ".join(f"word{i}" for i in range(60))


class Terminal:
    """A chat on a pty of `cols` columns, with everything it wrote kept for the emulator."""

    def __init__(self, server, *args: str, cols: int = 80, rows: int = 24):
        # No COLUMNS/LINES: the size comes from the pty, as in a terminal, so it can change.
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                   TERM="xterm-256color")
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        self.cols, self.rows = cols, rows
        self.child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--no-record",
                                                    *args], env=env, dimensions=(rows, cols),
                                   encoding="utf-8", timeout=20)
        self.raw = ""  # every byte written, for what a screen shows only for a moment
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        self.expect(PROMPT)

    def feed(self, text: str) -> None:
        self.raw += text
        self.stream.feed(text)

    def expect(self, text: str) -> None:
        self.child.expect_exact(text)
        self.feed(self.child.before + self.child.after)

    def pump(self, seconds: float) -> None:
        if self.child.buffer:  # read past the last match: pexpect keeps it, the fd has not
            self.feed(self.child.buffer)
            self.child.buffer = ""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.feed(self.child.read_nonblocking(65536, timeout=0.05))
            except pexpect.TIMEOUT:
                pass

    def pump_until_reply(self, timeout: float = 30.0) -> None:
        """Read until a line of the reply is on screen (a slow, busy machine may take a few
        seconds to import the SDK), then a little more so that the stream is under way."""
        end = time.monotonic() + timeout
        while not reply_lines(self.lines()) and time.monotonic() < end:
            self.pump(0.2)
        self.pump(0.5)

    def resize(self, cols: int) -> None:
        self.child.setwinsize(self.rows, cols)
        self.screen.resize(self.rows, cols)
        self.cols = cols

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]

    def close(self) -> None:
        self.child.close(force=True)


@pytest.fixture
def server():
    with FakeAnthropicServer(chunk=8) as srv:
        yield srv


def reply_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("Fake reply to:")]


def test_ctrl_c_mid_stream_leaves_the_reply_once(server):
    server.enqueue(hang(seconds=30, after=12))  # streams some text, then never finishes
    term = Terminal(server)
    try:
        term.child.sendline(WORDS)
        term.pump_until_reply()
        assert reply_lines(term.lines()), term.lines()
        term.child.sendintr()
        term.expect("interrupted — the turn was cancelled")
        term.expect(PROMPT)
        lines = term.lines()
    finally:
        term.close()
    assert len(reply_lines(lines)) == 1, lines
    assert not [line for line in lines if "^C" in line], lines


def test_a_resize_mid_stream_leaves_the_reply_once(server):
    server.enqueue(hang(seconds=30, after=12))  # streams some text, then never finishes
    term = Terminal(server, cols=80)
    try:
        term.child.sendline(WORDS)
        term.pump_until_reply()
        assert reply_lines(term.lines()), term.lines()
        term.resize(50)  # narrower than the streamed line
        term.pump(1.5)
        term.child.sendintr()
        term.expect(PROMPT)
        lines = term.lines()
    finally:
        term.close()
    assert len(reply_lines(lines)) == 1, lines


def test_keys_typed_while_the_model_answers_wait_for_the_prompt(server):
    server.enqueue(hang(seconds=3))  # the first token takes a while
    term = Terminal(server)
    try:
        term.child.sendline("first question")
        term.expect("thinking")  # the turn is under way, the spinner up
        before = len(term.raw)
        term.child.send("typed ahead")
        term.pump(0.5)
        waiting = term.raw[before:]  # written while the spinner is up: no echo in it
        term.expect("Fake reply to: first question")
        term.expect(PROMPT)
        term.pump(1.0)
        lines = term.lines()
        term.child.send("\r")
        term.expect("Fake reply to: typed ahead")
    finally:
        term.close()
    assert "typed ahead" not in waiting, waiting
    typed = [line for line in lines if "typed ahead" in line]
    assert typed == [PROMPT + "typed ahead"], "\n".join(lines)  # on the prompt only


def test_lines_pasted_while_the_model_answers_are_sent_next_as_one_message(server):
    """Text pasted (or typed with Enter) while the model answers is sent when it is done,
    its lines as one message, as a paste at the prompt is: it was sent a line at a time,
    three lines making three turns one after another, the user never seeing a prompt. A
    slash command typed ahead still runs on its own."""
    server.enqueue(hang(seconds=3))  # the first token takes a while
    term = Terminal(server)
    try:
        term.child.sendline("first question")
        term.expect("thinking")
        term.child.send("one\rtwo \\\rthree\r/tokens\rand still typing")
        term.expect("Fake reply to: first question")
        term.expect("Fake reply to: one")
        term.expect(PROMPT + "/tokens")  # a command typed ahead is a line of its own
        term.expect("cache hit")
        term.expect(PROMPT)
        term.pump(1.0)
        lines = term.lines()
    finally:
        term.close()
    sent = [body["messages"][-1]["content"][-1]["text"] for body in server.requests]
    assert sent[-1] == "one\ntwo \nthree", sent
    assert len(server.requests) == 3, sent  # the hung call retried once, then one message
    assert lines[-1] == PROMPT + "and still typing", lines  # the line without its Enter


def test_a_long_line_typed_while_the_model_answers_is_kept_whole_and_edited(server):
    """The terminal's own line editing held at most 4,095 characters of a line typed while
    the model answered, and dropped the rest of a longer paste; Backspace and Ctrl-W
    typed meanwhile still edit it."""
    server.enqueue(hang(seconds=3))  # the first token takes a while
    term = Terminal(server)
    long = "y" * 6000
    try:
        term.child.sendline("first question")
        term.expect("thinking")
        for start in range(0, len(long), 1000):
            term.child.send(long[start:start + 1000])
        term.child.send(" end\x7f\x7fnd two words\x17\x17now")
        term.expect("Fake reply to: first question")
        term.expect(PROMPT)
        term.pump(1.0)
        term.child.send("\r")
        term.expect("Fake reply to: yyy")
    finally:
        term.close()
    assert server.requests[-1]["messages"][-1]["content"][-1]["text"] == long + " end now"


def test_arrow_keys_pressed_while_the_model_answers_leave_no_escape_codes(server):
    server.enqueue(hang(seconds=3))
    term = Terminal(server)
    try:
        term.child.sendline("first question")
        term.expect("thinking")
        term.child.send("\x1b[A\x1b[Ato\x1b[D\x1bOP go")  # Up twice, Left, F1: keys, not text
        term.expect("Fake reply to: first question")
        term.expect(PROMPT)
        term.pump(1.0)
        lines = term.lines()
        term.child.send("\r")
        term.expect("Fake reply to: to go")  # was: to^[[D^[OP go, after ^[[A^[[A
    finally:
        term.close()
    assert [line for line in lines if line.startswith(PROMPT)][-1] == PROMPT + "to go", lines
    sent = server.requests[-1]["messages"][-1]["content"]
    assert "\x1b" not in str(sent)


def test_ctrl_z_mid_stream_gives_the_shell_a_cursor_and_fg_keeps_typing_hidden(server):
    """Ctrl-Z while a reply streams, in a real shell: its prompt came back with the cursor
    hidden (the live region's), and after `fg` the shell's echo was on again, so what was
    typed went into the reply instead of waiting for the next prompt."""
    from memgpt_lite.lab.fake_server import trickle

    server.enqueue(trickle(0.3))  # a reply that streams for a few seconds
    server.enqueue(text_response("Second answer."))
    env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
               TERM="xterm-256color", PS1="SHELL$ ")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    shell = pexpect.spawn("bash", ["--norc", "--noprofile", "-i"], env=env,
                          dimensions=(24, 100), encoding="utf-8", timeout=30)
    try:
        shell.expect_exact("SHELL$ ")
        shell.sendline(f"{sys.executable} -m memgpt_lite chat --no-record")
        shell.expect_exact(PROMPT)
        shell.sendline("first question")
        shell.expect_exact("Fake reply")
        stopped = shell.before + shell.after  # the live region hid the cursor in here
        shell.sendcontrol("z")
        shell.expect_exact("Stopped")
        stopped += shell.before
        shell.expect_exact("SHELL$ ")
        shell.sendline("stty -a")
        shell.expect_exact("SHELL$ ")
        modes = shell.before
        shell.sendline("fg")
        shell.expect_exact("Fake reply")
        shell.send("typed ahead")
        shell.expect_exact(PROMPT, timeout=60)
        streamed = shell.before
        shell.send("\r")
        shell.expect_exact("Second answer.")
        shell.expect_exact(PROMPT)
        shell.sendeof()
        shell.expect_exact("SHELL$ ")
    finally:
        shell.close(force=True)
    assert stopped.rfind("\x1b[?25h") > stopped.rfind("\x1b[?25l"), repr(stopped)
    assert " echo " in modes and "-echo " not in modes, modes
    assert "typed ahead" not in streamed, repr(streamed)
    assert server.requests[-1]["messages"][-1]["content"][-1]["text"] == "typed ahead"


def test_ctrl_c_at_the_forget_question_ends_its_line(server):
    server.enqueue(text_response("Noted the zebra."))
    term = Terminal(server)
    try:
        term.child.sendline("I like zebras")
        term.expect("Noted the zebra.")
        term.expect(PROMPT)
        term.child.sendline("/forget zebras")
        term.expect("[y/N] ")
        time.sleep(0.3)
        term.child.sendintr()
        term.expect("nothing forgotten")
        term.expect(PROMPT)
        lines = term.lines()
    finally:
        term.close()
    assert "nothing forgotten" in lines, lines  # a line of its own, not glued to the question


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux, a terminal that rewraps lines")
def test_a_resize_in_a_terminal_that_rewraps_leaves_the_reply_once(server, tmp_path):
    """tmux, like most terminals today, rewraps (reflows) its lines when it gets narrower:
    the streamed line then takes two rows, and erasing one row per line left a copy."""
    server.enqueue(hang(seconds=30, after=12))
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    command = (f"env -u COLUMNS -u LINES ANTHROPIC_BASE_URL={server.base_url} "
               f"ANTHROPIC_API_KEY=test MEMGPT_LITE_HOME={os.environ['MEMGPT_LITE_HOME']} "
               f"{sys.executable} -m memgpt_lite chat --no-record")
    subprocess.run(tmux + ["new-session", "-d", "-x", "80", "-y", "24", command], check=True)
    try:
        def screen() -> str:
            return subprocess.run(tmux + ["capture-pane", "-p", "-J"], capture_output=True,
                                  text=True).stdout

        wait_for(lambda: PROMPT.strip() in screen())
        subprocess.run(tmux + ["send-keys", WORDS, "Enter"], check=True)
        wait_for(lambda: "Fake reply to:" in screen())
        # Resize once the stream has stalled (the reply stands still): a redraw in flight
        # while the terminal rewraps erases by the old width, a race no redraw can close.
        wait_for(lambda: still(screen))
        subprocess.run(tmux + ["resize-window", "-x", "50", "-y", "24"], check=True)
        time.sleep(1.0)
        subprocess.run(tmux + ["send-keys", "C-c"], check=True)
        wait_for(lambda: "interrupted" in screen())
        shown = screen()
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
    assert shown.count("Fake reply to:") == 1, shown


def still(screen) -> bool:
    """The screen is the same twice, a few of the live region's ticks apart."""
    before = screen()
    time.sleep(0.4)
    return screen() == before


def wait_for(condition, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)

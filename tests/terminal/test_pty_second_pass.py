"""The second pass on a real terminal and in real processes: Tab completion on screen, a
mistyped --agent asked about (and a piped one announced), a failed first turn leaving no
agent, /memory in $EDITOR, the status line and a heading at 60 columns, /retry fixing the
exit status, files attached from -a and a pipe (and refused when too large), sessions' ids
that replay takes, and shell completion of agent names and recordings."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer, overloaded
from memgpt_lite.lab.scripted import text_response

pytestmark = pytest.mark.slow  # every test here starts real processes

pexpect = pytest.importorskip("pexpect")
pyte = pytest.importorskip("pyte")

PROMPT = "you› "


class Screen:
    """A chat on a pty of `cols` columns, its output fed to a terminal emulator."""

    def __init__(self, server, *args: str, cols: int = 80, rows: int = 24, env: dict | None = None,
                 prompt: bool = True):
        full = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                    TERM="xterm-256color", **(env or {}))
        full.pop("COLUMNS", None)
        full.pop("LINES", None)
        self.child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", *args],
                                   env=full, dimensions=(rows, cols), encoding="utf-8",
                                   timeout=30)
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        if prompt:
            self.expect(PROMPT)

    def expect(self, text: str) -> None:
        self.child.expect_exact(text)
        self.stream.feed(self.child.before + self.child.after)

    def settle(self, seconds: float = 0.5) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.05))
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                return

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]

    def finish(self) -> int:
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        self.child.close(force=True)


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


def make_agents(*names: str) -> None:
    with SQLiteStore(config.db_path()) as store:
        for name in names:
            store.create_agent(name, {"_form": 2}, {"human": ("", 5000)})


def test_tab_completes_commands_and_block_labels(server):
    term = Screen(server, "--no-record")
    try:
        term.child.send("/me\t")
        term.settle()
        assert term.lines()[-1].endswith(PROMPT + "/memory"), term.lines()
        term.child.send("\x15")  # Ctrl-U: clear the line
        term.child.send("/core ed\th\t")
        term.settle()
        assert term.lines()[-1].endswith(PROMPT + "/core edit human"), term.lines()
        term.child.send("\x15/co\t\t")  # several candidates: a second Tab lists them
        term.settle()
        shown = " ".join(term.lines())
        assert all(c in shown for c in ("/compact", "/context", "/core", "/cost")), shown
    finally:
        term.close()


def test_a_mistyped_agent_is_asked_about_and_nothing_is_created(server):
    make_agents("travel")
    term = Screen(server, "--no-record", "--agent", "tr", prompt=False)
    try:
        term.expect("There is no agent 'tr' (agents: travel). Create it? [y/N] ")
        term.child.sendline("n")
        term.expect("Nothing created.")
        assert term.finish() == 1
    finally:
        term.close()
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("tr") is None
    term = Screen(server, "--no-record", "--agent", "trips", prompt=False)
    try:
        term.expect("Create it? [y/N] ")
        term.child.sendline("y")
        term.expect(PROMPT)
        term.child.sendline("Hello")
        term.expect("Fake reply to: Hello")
        term.expect(PROMPT)
        term.child.sendline("/exit")
        assert term.finish() == 0
    finally:
        term.close()
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("trips") is not None


def run(server, *args: str, stdin: bytes | None = None, env: dict | None = None):
    full = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "test",
            **(env or {})}
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], input=stdin,
                          capture_output=True, env=full, timeout=60,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_piped_a_new_agent_is_announced_and_a_failed_first_turn_leaves_none(server):
    make_agents("travel")
    server.enqueue(text_response("Hi."))
    done = run(server, "chat", "--no-record", "--agent", "trips", "-p", "hello")
    assert done.returncode == 0
    assert b"memgpt-lite: creating agent 'trips' (agents: travel)" in done.stderr
    server.enqueue(overloaded(), times=5)
    failed = run(server, "chat", "--agent", "typo", "-p", "hello")  # recorded, and failing
    assert failed.returncode == 1
    assert b"agent 'typo' was not kept: no turn of it finished (its unanswered message went " \
        b"with it)" in failed.stderr
    with SQLiteStore(config.db_path()) as store:
        names = {a.name for a in store.list_agents()}
    assert names == {"travel", "trips"}
    assert not any((config.recordings_dir()).rglob("*.jsonl")) or all(
        "typo" not in p.read_text() for p in config.recordings_dir().rglob("*.jsonl"))
    # Left before any message: there was none to lose (it was said to have gone with it).
    left = run(server, "chat", "--agent", "idle", stdin=b"/exit\n")
    assert left.returncode == 0
    assert b"agent 'idle' was not kept: nothing was sent to it\n" in left.stderr


def test_memory_in_the_editor_on_a_terminal(server, tmp_path):
    editor = tmp_path / "edit.sh"
    editor.write_text("#!/bin/sh\nsed -i -e 's/Nothing is known about the user yet./Name: Ada./' "
                      "-e 's/Nothing is known about this project yet./Deploy with hexo g./' "
                      "\"$1\"\nprintf '\\n=== notes · limit 500 ===\\nTea, no sugar.\\n' "
                      ">> \"$1\"\n")
    editor.chmod(0o755)
    term = Screen(server, "--no-record", env={"EDITOR": str(editor), "VISUAL": ""})
    try:
        term.child.sendline("/memory")
        term.expect("notes: added · 14/500 chars")
        term.expect(PROMPT)
        term.child.sendline("/core")
        term.expect("Tea, no sugar.")  # /core lists the agent's blocks, then the project's
        term.expect("Deploy with hexo g.")
        term.expect(PROMPT)
        lines = term.lines()
    finally:
        term.close()
    assert "human: saved · 10/5,000 chars" in lines, lines
    assert "project: saved · 19/5,000 chars" in lines, lines  # the project's own block


def test_status_line_and_heading_at_60_columns(server):
    server.enqueue(text_response("# Plan\n\nPlant tomatoes in May."))
    term = Screen(server, "--no-record", cols=60)
    try:
        term.child.sendline("What is the plan?")
        term.expect("turn $")
        term.expect(PROMPT)
        lines = term.lines()
    finally:
        term.close()
    assert "Plan" in lines and "Plant tomatoes in May." in lines  # the heading at the left
    status = [line for line in lines if line.startswith(("· context", "  cache", "  turn"))]
    text = " ".join(status)
    assert len(status) >= 1 and "context " in text and "turn $" in text
    for line in status:
        assert not line.rstrip().endswith(("tokens (", "/", ",")), status  # no field cut in two


def test_a_retry_that_answers_makes_the_chat_exit_0(server):
    server.enqueue(overloaded(), times=3)  # the SDK's retries see it too
    server.enqueue(text_response("Done at last."))
    term = Screen(server, "--no-record")
    try:
        term.child.sendline("do it")
        term.expect("error: ")
        term.expect(PROMPT)
        term.child.sendline("/retry")
        term.expect("Done at last.")
        term.expect(PROMPT)
        term.child.sendline("/exit")
        assert term.finish() == 0
    finally:
        term.close()


def test_files_from_a_pipe_and_from_attach_reach_the_model(server, tmp_path):
    notes = b"My notes: the launch word is zanzibar.\n" * 2
    server.enqueue(text_response("Summary."))
    done = run(server, "chat", "--no-record", "-p", "Summarise this", stdin=notes)
    assert done.returncode == 0, done.stderr
    sent = server.requests[-1]["messages"][-1]["content"]
    texts = [b["text"] for b in sent if b.get("type") == "text"]
    assert texts[-1] == "Summarise this"
    assert any(t.startswith('<attachment name="stdin"') and "zanzibar" in t for t in texts)
    png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00"
           b"\x00\x00\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18"
           b"\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
    (tmp_path / "dot.png").write_bytes(png)
    server.enqueue(text_response("A dot."))
    done = run(server, "chat", "--no-record", "-a", str(tmp_path / "dot.png"), "-p", "What?")
    assert done.returncode == 0, done.stderr
    assert b"attached dot.png (image/png, 1" in done.stderr
    assert any(b.get("type") == "image" for b in server.requests[-1]["messages"][-1]["content"])
    missing = run(server, "chat", "--no-record", "-a", str(tmp_path / "nope.txt"), "-p", "x")
    assert missing.returncode == 2
    assert missing.stderr.decode().strip().startswith("memgpt-lite: Cannot read ")
    assert len(missing.stderr.decode().strip().splitlines()) == 1


def test_a_pipe_larger_than_a_file_may_be_is_refused_before_it_is_read_whole(server, tmp_path):
    from memgpt_lite.engine.attachments import MAX_FILE_BYTES

    # A pipe has no size to check before reading (nor has /dev/zero, which never ends): `-a`
    # of a FIFO, as `-a <(cmd)` gives, and stdin with -p.
    too_much = b"y" * (MAX_FILE_BYTES + 1)
    fifo = tmp_path / "notes"
    os.mkfifo(fifo)
    writer = threading.Thread(target=_write_fifo, args=(fifo, too_much), daemon=True)
    writer.start()
    for args, stdin in ((("-a", str(fifo)), None), ((), too_much)):
        done = run(server, "chat", "--no-record", *args, "-p", "Summarise this", stdin=stdin)
        assert done.returncode == 2, done.stderr[-300:]
        message = done.stderr.decode().strip()
        assert f"is more than {MAX_FILE_BYTES:,} bytes" in message, message
        assert len(message.splitlines()) == 1, message
    assert server.requests == []  # refused before any call
    writer.join(timeout=30)


def _write_fifo(path, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError), open(path, "wb") as fh:
        fh.write(data)


def test_sessions_ids_are_whole_at_80_columns_and_replay_takes_them(server):
    server.enqueue(text_response("Recorded."))
    assert run(server, "chat", "-p", "remember this").returncode == 0
    term = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "sessions"], dimensions=(24, 80),
                         encoding="utf-8", env=dict(os.environ, TERM="xterm-256color"))
    term.expect(pexpect.EOF)
    lines = term.before.splitlines()
    row = next(line for line in lines if " default " in line)
    session_id = row.split()[0]
    path = next(config.recordings_dir().rglob("*.jsonl"))
    assert session_id == path.stem
    replayed = run(server, "replay", session_id, "--strict")
    assert replayed.returncode == 0, replayed.stdout[-500:]
    assert b"zero divergence" in replayed.stdout
    listed = run(server, "sessions", "--paths")
    assert listed.stdout.decode().strip() == str(path)


def test_the_transcript_of_a_typed_chat_with_stdout_redirected(server, tmp_path):
    server.enqueue(text_response("First answer."))
    server.enqueue(text_response("Second answer."))
    out = tmp_path / "t.md"
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t",
           "TERM": "xterm-256color"}
    child = pexpect.spawn("bash", ["-c", f"{sys.executable} -m memgpt_lite chat --no-record "
                                         f"> {out}"], env=env, encoding="utf-8", timeout=30)
    try:
        child.expect_exact("you› ")
        child.sendline("one\\")
        child.expect_exact("  … ")
        child.sendline("two lines")
        child.expect_exact("turn $")  # on the terminal: the status line (stderr) only
        child.expect_exact("you› ")
        child.sendline("again")
        child.expect_exact("turn $")
        child.expect_exact("you› ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert out.read_text() == ("> you: one\n> two lines\n\nFirst answer.\n\n> you: again\n\n"
                               "Second answer.\n")
    assert json.dumps(out.read_text())  # plain text, nothing else


def test_with_stdout_redirected_commands_and_questions_reach_the_terminal(server, tmp_path):
    server.enqueue(text_response("Noted."))
    out = tmp_path / "t.md"
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t",
           "TERM": "xterm-256color"}
    child = pexpect.spawn("bash", ["-c", f"{sys.executable} -m memgpt_lite chat --no-record "
                                         f"> {out}"], env=env, encoding="utf-8", timeout=30)
    try:  # was: the plan and its y/N question went into the file; the chat seemed to hang
        child.expect_exact("you› ")
        child.sendline("my code word is zebra")
        child.expect_exact("you› ")
        child.sendline("/forget zebra")
        child.expect_exact("message #1 · turn 1 · user · redact: my code word is zebra")
        child.expect_exact("Forget all of this? It cannot be undone. [y/N] ")
        child.sendline("y")
        child.expect_exact("1 message redacted in the queue")
        child.expect_exact("you› ")
        child.sendline("/core")
        child.expect_exact("human  36/5,000 chars")
        child.expect_exact("you› ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert out.read_text() == "> you: my code word is zebra\n\nNoted.\n"  # the transcript only


def test_the_editor_draws_on_the_terminal_with_stdout_redirected(server, tmp_path):
    """`chat > transcript.md` then /memory: the editor inherited stdout, so it drew its
    screen into the transcript and the user faced a blank terminal that seemed to hang."""
    editor = tmp_path / "edit.sh"
    editor.write_text("#!/bin/sh\n[ -t 1 ] && echo 'editor on the terminal'\n"
                      "printf '=== human ===\\nName: Ada.\\n' > \"$1\"\n")
    editor.chmod(0o755)
    out = tmp_path / "t.md"
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t",
           "TERM": "xterm-256color", "EDITOR": str(editor)}
    env.pop("VISUAL", None)
    child = pexpect.spawn("bash", ["-c", f"{sys.executable} -m memgpt_lite chat --no-record "
                                         f"> {out}"], env=env, encoding="utf-8", timeout=30)
    try:
        child.expect_exact("you› ")
        child.sendline("/memory")
        child.expect_exact("editor on the terminal")
        child.expect_exact("human: saved · 10/5,000 chars")
        child.expect_exact("you› ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert out.read_text() == ""  # no message was sent: the transcript has nothing yet


def test_a_delete_question_reaches_the_terminal_with_stdout_redirected(server, tmp_path):
    make_agents("scratch")
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t"}
    child = pexpect.spawn("bash", ["-c", f"{sys.executable} -m memgpt_lite agents delete "
                                         f"scratch > {tmp_path / 'log'}"], env=env,
                          encoding="utf-8", timeout=30)
    try:
        child.expect_exact("[y/N] ")
        child.sendline("n")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "[y/N]" not in (tmp_path / "log").read_text()
    with contextlib.closing(SQLiteStore(config.db_path())) as store:
        assert store.get_agent("scratch") is not None  # answered no: kept


def _bash_complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of `words`, with the completion script loaded and
    `memgpt-lite` on PATH (this interpreter's, on this test's data dir)."""
    bindir = os.path.dirname(sys.executable)
    quoted = " ".join(f"'{w}'" for w in words)
    driver = (script + f"\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _memgpt_lite; "
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    out = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}"))
    return [line for line in out.stdout.splitlines() if line]


@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="needs bash")
def test_shell_completion_offers_agent_names_and_recordings(server):
    make_agents("travel", "trips", "work")
    server.enqueue(text_response("Recorded."))
    assert run(server, "chat", "--agent", "work", "-p", "remember this").returncode == 0
    script = run(server, "completion", "bash").stdout.decode()
    assert _bash_complete(script, "memgpt-lite", "core", "--agent", "tr") == ["travel", "trips"]
    assert _bash_complete(script, "memgpt-lite", "agents", "show", "w") == ["work"]
    session_id = next(config.recordings_dir().rglob("*.jsonl")).stem
    offered = _bash_complete(script, "memgpt-lite", "replay", "")
    assert session_id in offered and not any(o.startswith("-") for o in offered)
    assert "--strict" in _bash_complete(script, "memgpt-lite", "replay", "--s")
    from memgpt_lite.terminal.completion import first_sentence

    help_text = "store the settings given by flags with the agent, for later runs too"
    cut = first_sentence(help_text, 30)  # fish's descriptions: cut at a word, never inside one
    assert cut == "store the settings given by…"
    assert f"'{first_sentence(help_text)}'" in run(server, "completion", "fish").stdout.decode()

"""`memgpt-lite chat --confirm-memory` against the fake Anthropic server: on a pseudo-terminal
each memory write is shown and asked y/N (y applies it, n declines it); piped, every write
is declined with one notice and the chat never waits; /new and /resume on a terminal; the
recordings replay strictly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import text_response, tool_response

pytestmark = pytest.mark.slow  # every test here starts real processes

pexpect = pytest.importorskip("pexpect")

PROMPT = "you› "
QUESTION = "apply this memory write? [y/N]"


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


def env_for(server) -> dict:
    return dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                TERM="xterm-256color", COLUMNS="100", LINES="30")


def append(content: str, label: str = "human"):
    return tool_response([("core_memory_append", {"label": label, "content": content})])


def human_value() -> str:
    with SQLiteStore(config.db_path()) as store:
        return store.get_block(store.get_agent("default").id, "human").value


def test_a_write_is_asked_on_a_pty_and_y_applies_it_n_declines_it(server, tmp_path):
    server.enqueue(append("Name: Ada."))
    server.enqueue(text_response("Saved your name."))
    server.enqueue(append("Likes liquorice."))
    server.enqueue(text_response("All right, I won't keep that."))
    server.enqueue(text_response("A new task."))
    child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--confirm-memory",
                                           "--project", str(tmp_path)],
                          env=env_for(server), dimensions=(30, 100), encoding="utf-8",
                          timeout=30)
    try:
        child.expect_exact(PROMPT)
        child.sendline("I'm Ada")
        child.expect_exact("core_memory_append on block 'human'")
        child.expect_exact("new: Name: Ada.")
        child.expect_exact(QUESTION)
        child.sendline("y")
        child.expect_exact("Saved your name.")
        child.expect_exact(PROMPT)
        child.sendline("I like liquorice")
        child.expect_exact(QUESTION)
        child.sendline("n")
        child.expect_exact("declined by the user")
        child.expect_exact("I won't keep that.")
        child.expect_exact(PROMPT)
        child.sendline("/new")
        child.expect_exact("conversation 2 (new)")
        child.expect_exact(PROMPT)
        child.sendline("next task")
        child.expect_exact("A new task.")
        child.expect_exact(PROMPT)
        child.sendline("/conversations")
        child.expect_exact("I'm Ada")
        child.expect_exact(PROMPT)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert human_value() == "Name: Ada."
    declined = server.requests[3]["messages"][-1]["content"]
    assert any("declined" in str(b.get("content")) for b in declined)
    recordings = sorted(config.recordings_dir().rglob("*.jsonl"))
    assert len(recordings) == 2
    assert sum(p.read_text().count('"type":"memory_confirm"') for p in recordings) == 2
    for path in recordings:
        report = replay_mod.replay(path, strict=True)
        assert report.ok and report.completed, (path, report.divergences)


def test_piped_a_write_is_declined_with_one_notice_and_nothing_waits(server):
    for _ in range(2):
        server.enqueue(append("Name: Ada."))
        server.enqueue(text_response("Could not save it."))
    done = subprocess.run([sys.executable, "-m", "memgpt_lite", "chat"],
                          input="I'm Ada\nreally, I'm Ada\n", text=True, capture_output=True,
                          env=dict(env_for(server), MEMGPT_LITE_CONFIRM_MEMORY="on"),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("confirm_memory is on and there is no terminal to ask") == 1
    assert done.stdout.count("Could not save it.") == 2
    assert human_value() == "Nothing is known about the user yet."
    result = server.requests[1]["messages"][-1]["content"]
    assert any("no terminal to ask them" in str(b.get("content")) for b in result)


@pytest.mark.parametrize("redirected", [False, True], ids=["stdout-terminal", "stdout-file"])
def test_share_asks_on_a_terminal_which_value_to_keep(redirected, tmp_path):
    """With stdout in a file (`> log`) the question still reaches the terminal, not the file."""
    from memgpt_lite.engine.memory import default_blocks

    with SQLiteStore(config.db_path()) as store:
        for name, value in (("home", "Answers in Chinese."), ("work", "Name: Ada.")):
            row = store.create_agent(name, {}, default_blocks(5_000))
            store.set_block(row.id, "human", value, source="user")
        store.share_block(store.get_agent("home").id, "human")
    command = f"{sys.executable} -m memgpt_lite agents share work human"
    log = tmp_path / "log"
    child = pexpect.spawn("bash", ["-c", f"{command} > {log}" if redirected else command],
                          env=dict(os.environ, TERM="dumb"), encoding="utf-8", timeout=30)
    try:
        child.expect_exact("shared: Answers in Chinese.")
        child.expect_exact("work: Name: Ada.")
        child.expect_exact("[shared/mine/both]")
        child.sendline("both")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert not redirected or "[shared/mine/both]" not in log.read_text()
    with SQLiteStore(config.db_path()) as store:
        assert store.shared_block("human").value == "Answers in Chinese.\nName: Ada."

"""A chat outlives its Postgres server's restart: a real `memgpt-lite chat` process on a
server of its own (tests/pg_support.py), restarted between two turns and during one, and
stopped for a while. Every acknowledged turn is stored once, the typed message is answered
(or, while the server is away, said to be kept), the session's recording replays strictly
and `doctor` finds nothing wrong."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pg_support
import psycopg
import pytest
from rel_support import child_env

from memgpt_lite.engine.store import open_store
from memgpt_lite.engine.store.postgres.lock import lock_key
from memgpt_lite.lab.fake_embeddings import FakeEmbeddingsServer
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import text_response

pytestmark = pytest.mark.slow  # a server of its own, restarted; real chat processes


@pytest.fixture
def pg():
    """A Postgres server for this test alone (restarting the suite's would cut off others)."""
    server = pg_support.Server()
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError) as exc:
        server.stop()
        pg_support.skip_or_fail(f"no PostgreSQL server could be started ({exc})")
    yield server
    server.stop()


class Chat:
    """`memgpt-lite chat --agent NAME` with piped stdin; its output read as it comes."""

    def __init__(self, home, url: str, api: FakeAnthropicServer, name: str = "ada",
                 **env: str):
        self.env = child_env(MEMGPT_LITE_HOME=str(home), MEMGPT_LITE_DATABASE_URL=url,
                             ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=api.base_url, **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--agent",
                                      name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=self.env)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=lambda s=stream, i=into: i.extend(s), daemon=True).start()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def wait_for(self, text: str, where: str = "out", timeout: float = 60) -> None:
        lines = self.out if where == "out" else self.err
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(lines)):
            ended = self.proc.poll() is not None
            time.sleep(0.3 if ended else 0.05)  # an ended chat's last lines still come
            if ended and not any(text in line for line in list(lines)):
                pytest.fail(f"the chat ended before {text!r}; stderr: {''.join(self.err)}")
            assert time.monotonic() < deadline, f"{text!r} never came: {''.join(self.err)}"

    def answered(self, text: str, turns: int) -> None:
        """Wait for the reply `text` and for the end of the chat's `turns`-th turn (its
        context line comes once the turn is committed)."""
        self.wait_for(text)
        deadline = time.monotonic() + 60
        while sum(line.startswith("· context ") for line in list(self.err)) < turns:
            assert self.proc.poll() is None, "".join(self.err)
            assert time.monotonic() < deadline, "".join(self.err)
            time.sleep(0.05)

    def finish(self) -> int:
        self.proc.stdin.close()  # type: ignore[union-attr]
        code = self.proc.wait(60)
        time.sleep(0.2)  # the readers take the last lines
        return code

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], env=self.env,
                              capture_output=True, text=True, timeout=120)


def stored(url: str, name: str = "ada") -> list[tuple[str, str, str]]:
    """(role, text, status) of every message of the agent, oldest first."""
    with open_store(url) as store:
        row = store.get_agent(name)
        assert store.unfinished_turns(row.id) == []
        return [(m.role, " ".join(b.get("text", "") for b in m.content), m.status)
                for m in store.all_messages(row.id)]


def assert_replays_and_doctor_is_clean(chat: Chat, home) -> None:
    recordings = sorted((home / "recordings").rglob("*.jsonl"))
    assert recordings
    for recording in recordings:
        replay = chat.cli("replay", "--strict", str(recording))
        assert replay.returncode == 0, replay.stdout + replay.stderr
    doctor = chat.cli("doctor", "--offline")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_a_restart_between_two_turns(pg, tmp_path):
    home = tmp_path / "home"
    with FakeAnthropicServer() as api:
        chat = Chat(home, pg.url, api)
        chat.send("my name is Ada")
        chat.answered("Fake reply to: my name is Ada", 1)
        pg.restart()
        chat.send("what is my name?")
        chat.answered("Fake reply to: what is my name?", 2)
        with psycopg.connect(pg.url, autocommit=True) as other:  # the lock was taken again
            assert not other.execute("SELECT pg_try_advisory_lock(%s)",
                                     (lock_key("ada"),)).fetchone()[0]
        assert chat.finish() == 0, "".join(chat.err)
    assert "connection was lost and is open again" in "".join(chat.err)
    assert "Traceback" not in "".join(chat.err)
    assert stored(pg.url) == [("user", "my name is Ada", ""),
                              ("assistant", "Fake reply to: my name is Ada", ""),
                              ("user", "what is my name?", ""),
                              ("assistant", "Fake reply to: what is my name?", "")]
    assert_replays_and_doctor_is_clean(chat, home)


def test_a_restart_while_the_model_answers(pg, tmp_path):
    """The server restarts while the reply is on its way: the turn cannot be committed on
    the dead connection; the new one undoes it, and the message is sent again as a retry:
    one copy of it, one answer."""
    home = tmp_path / "home"
    asked, restarted = threading.Event(), threading.Event()

    def slow_reply(body: dict):
        asked.set()
        restarted.wait(60)
        return text_response("an answer the restart cut off")

    with FakeAnthropicServer() as api:
        chat = Chat(home, pg.url, api)
        chat.send("first")
        chat.answered("Fake reply to: first", 1)
        api.enqueue(slow_reply)
        chat.send("second")
        assert asked.wait(60)
        pg.restart()
        restarted.set()
        chat.wait_for("Fake reply to: second")
        chat.send("third")
        chat.wait_for("Fake reply to: third")
        assert chat.finish() == 0, "".join(chat.err)
    err = "".join(chat.err)
    assert "Traceback" not in err
    assert "sending your message again" in err
    assert stored(pg.url) == [("user", "first", ""), ("assistant", "Fake reply to: first", ""),
                              ("user", "second", ""), ("assistant", "Fake reply to: second", ""),
                              ("user", "third", ""), ("assistant", "Fake reply to: third", "")]
    assert_replays_and_doctor_is_clean(chat, home)


def test_the_background_indexer_embeds_again_after_a_restart(pg, tmp_path):
    """With an embedder, the indexer's own connection dies with the chat's: it opens a new
    one, and the turns after the restart get their vectors too (no thread traceback)."""
    home = tmp_path / "home"
    with FakeAnthropicServer() as api, FakeEmbeddingsServer() as embeddings:
        chat = Chat(home, pg.url, api, MEMGPT_LITE_EMBEDDER="http",
                    MEMGPT_LITE_EMBEDDINGS_URL=embeddings.url,
                    MEMGPT_LITE_EMBEDDINGS_MODEL="fake", MEMGPT_LITE_EMBEDDINGS_TIMEOUT="5")
        chat.send("tea before ten")
        chat.answered("Fake reply to: tea before ten", 1)
        pg.restart()
        chat.send("coffee after noon")
        chat.wait_for("Fake reply to: coffee after noon")
        assert chat.finish() == 0, "".join(chat.err)
    assert "Traceback" not in "".join(chat.err)
    with open_store(pg.url) as store:
        row = store.get_agent("ada")
        counts = store.vector_counts(row.id, "http:fake")["messages"]
    assert (counts["current"], counts["missing"]) == (4, 0)
    assert_replays_and_doctor_is_clean(chat, home)


def test_a_server_away_for_a_while_keeps_the_chat_and_says_so(pg, tmp_path):
    home = tmp_path / "home"
    with FakeAnthropicServer() as api:
        chat = Chat(home, pg.url, api)
        chat.send("first")
        chat.answered("Fake reply to: first", 1)
        pg.pause()
        chat.send("while it is down")
        chat.wait_for("the chat tries the database again at your next input", "err")
        pg.resume()
        chat.send("after it is back")
        chat.wait_for("Fake reply to: after it is back")
        assert chat.finish() == 1  # a message went unanswered
    err = "".join(chat.err)
    assert "Traceback" not in err
    line = next(x for x in chat.err if "tries the database again" in x)
    assert line.startswith("error: Cannot connect to the database postgresql://memgpt@")
    assert "Your message was not sent" in line
    assert [t for _, t, _ in stored(pg.url)] == ["first", "Fake reply to: first",
                                                   "after it is back",
                                                   "Fake reply to: after it is back"]
    assert_replays_and_doctor_is_clean(chat, home)


def test_an_agent_taken_by_another_process_meanwhile_ends_the_chat(pg, tmp_path):
    home = tmp_path / "home"
    with FakeAnthropicServer() as api:
        chat = Chat(home, pg.url, api)
        chat.send("first")
        chat.answered("Fake reply to: first", 1)
        pg.restart()
        with psycopg.connect(pg.url, autocommit=True,
                             application_name="memgpt-lite pid 4242 on elsewhere") as other:
            assert other.execute("SELECT pg_try_advisory_lock(%s)",
                                 (lock_key("ada"),)).fetchone()[0]
            chat.send("second")
            code = chat.proc.wait(60)
    err = "".join(chat.err)
    assert code == 1
    assert "agent 'ada' is in use by another memgpt-lite process (pid 4242 on elsewhere)" in err
    assert "Traceback" not in err
    assert [t for _, t, _ in stored(pg.url)] == ["first", "Fake reply to: first"]


def test_on_a_terminal_the_message_typed_while_the_server_is_away_comes_back_with_up(pg,
                                                                                    tmp_path):
    pexpect = pytest.importorskip("pexpect")
    with FakeAnthropicServer() as api:
        env = child_env(MEMGPT_LITE_HOME=str(tmp_path / "home"), MEMGPT_LITE_DATABASE_URL=pg.url,
                        ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=api.base_url,
                        TERM="xterm-256color", COLUMNS="200", LINES="30")
        child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--agent", "ada"],
                              env=env, dimensions=(30, 200), encoding="utf-8", timeout=60)
        try:
            child.expect_exact("you› ")
            child.sendline("first")
            child.expect_exact("Fake reply to: first")
            child.expect_exact("you› ")
            pg.pause()
            child.sendline("typed while it is down")
            child.expect_exact("↑ brings it back")  # (the line wraps)
            child.expect_exact("you› ")
            pg.resume()
            child.send("\x1b[A")  # ↑
            child.expect_exact("typed while it is down")
            child.send("\r")
            child.expect_exact("Fake reply to: typed while it is down")
            child.expect_exact("you› ")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert "Traceback" not in (child.before or "")
    assert [t for _, t, _ in stored(pg.url)] == ["first", "Fake reply to: first",
                                                   "typed while it is down",
                                                   "Fake reply to: typed while it is down"]

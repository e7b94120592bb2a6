"""Bounded waits: a server that never answers, or trickles its reply, is given up on within
the call's deadline (retries included), with one sentence naming the host and the wait. The
deadline is set by MEMGPT_LITE_TIMEOUT or the chat's --timeout; the bounds asserted here are
generous (several times the deadline) and far below what an unbounded wait would take."""

from __future__ import annotations

import itertools
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from rel_support import child_env, recall_texts

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import ConfigError
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import (
    FakeAnthropicServer,
    hang,
    overloaded,
    rate_limited,
    trickle,
)


def failed_turn(tmp_path, client) -> tuple[list, float, SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent.open(store, "t", model_client=client)
    started = time.monotonic()
    events = list(agent.step("the question"))
    return events, time.monotonic() - started, store, agent


def the_error(events) -> str:
    errors = [e.message for e in events if e.kind == "error"]
    assert len(errors) == 1 and not events[-1].completed, errors
    return errors[0]


def test_a_server_that_never_answers_is_given_up_on_retries_included(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1.5")
    with FakeAnthropicServer() as server:
        server.enqueue(hang(seconds=60), times=3)  # the first try and both SDK retries
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=2)
        events, took, store, agent = failed_turn(tmp_path, client)
    message = the_error(events)
    assert message.startswith(f"Gave up waiting for 127.0.0.1:{server.port}: it timed out (")
    # the attempts started before the deadline (the SDK's back-off between them counts too):
    # on a loaded machine the back-off alone can reach it, and no retry starts at all
    assert re.search(r"s(?: after [12] retr(?:y|ies))?; a call may take 1\.5 s", message), message
    assert "MEMGPT_LITE_TIMEOUT or --timeout" in message
    assert took < 10  # three full waits of the server's 60 s would be 180 s
    assert "the question" in recall_texts(store, agent.id)


def test_a_trickling_stream_is_given_up_on_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1.5")
    with FakeAnthropicServer(chunk=1) as server:
        server.enqueue(trickle(seconds=0.25))  # each event in time, the whole reply never
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        events, took, store, agent = failed_turn(tmp_path, client)
    assert "text_delta" in [e.kind for e in events]  # it was streaming when we gave up
    message = the_error(events)
    assert message.startswith("Gave up waiting for 127.0.0.1:") and "may take 1.5 s" in message
    assert took < 8  # the whole trickle takes over 8 s


def test_the_timeout_setting_is_checked_where_it_enters(monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="MEMGPT_LITE_TIMEOUT must be a number of seconds"):
        AnthropicClient(base_url="http://127.0.0.1:9", api_key="test")
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "0")
    with pytest.raises(ConfigError,
                       match="MEMGPT_LITE_TIMEOUT must be more than 0 and at most 3,600"):
        AnthropicClient(base_url="http://127.0.0.1:9", api_key="test")


def chat(server: FakeAnthropicServer, *flags: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record", *flags],
                          input="hello\nsecond\nthird\nlast\n", capture_output=True, text=True,
                          timeout=90,
                          env=child_env(ANTHROPIC_BASE_URL=server.base_url,
                                        ANTHROPIC_API_KEY="test", **env))


@pytest.mark.parametrize("how", ["env", "flag"])
@pytest.mark.slow
def test_a_piped_chat_gives_up_in_one_line_and_goes_on(how):
    with FakeAnthropicServer() as server:
        server.enqueue(hang(seconds=60), times=3)
        started = time.monotonic()
        done = (chat(server, MEMGPT_LITE_TIMEOUT="1") if how == "env"
                else chat(server, "--timeout", "1"))
        took = time.monotonic() - started
    assert done.returncode == 1, done.stderr  # one turn failed: the exit status says so
    assert "Traceback" not in done.stdout + done.stderr
    gave_up = [line for line in done.stderr.splitlines() if "Gave up waiting for" in line]
    assert all(f"127.0.0.1:{server.port}" in line for line in gave_up)
    # The deadline ends a turn before the SDK's last retry when the back-off leaves it no
    # room, so the three hangs take one turn or more; each failed turn says so in one line,
    # and the chat goes on: the last message is answered. (On a loaded machine a retry's
    # reply can start streaming and still miss the deadline: its words are shown, and the
    # turn fails all the same.)
    replies = [t for t in ("hello", "second", "third", "last")
               if f"Fake reply to: {t}" in done.stdout]
    failed = re.search(r"(\d+) failed\)", done.stderr)
    assert 1 <= len(gave_up) <= 3 and failed and int(failed.group(1)) == len(gave_up)
    assert len(replies) >= 4 - len(gave_up), done.stderr
    assert "last" in replies
    assert took < 45


@pytest.mark.slow
def test_a_bad_timeout_flag_is_one_sentence():
    with FakeAnthropicServer() as server:
        done = chat(server, "--timeout", "forever")
    assert done.returncode == 2
    assert done.stderr == ("memgpt-lite: --timeout must be a number of seconds, "
                           "got 'forever'.\n")


# --------------------------------------------------------------------------- a raw trickle

_SSE_REPLY = (
    'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", "type": '
    '"message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, '
    '"stop_sequence": null, "usage": {"input_tokens": 9, "output_tokens": 1}}}\n\n'
    'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
    '"content_block": {"type": "text", "text": ""}}\n\n'
    'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
    '"delta": {"type": "text_delta", "text": "' + "slow " * 200 + '"}}\n\n'
    'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
    'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn", '
    '"stop_sequence": null}, "usage": {"output_tokens": 5}}\n\n'
    'event: message_stop\ndata: {"type": "message_stop"}\n\n')
_HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"


class TrickleServer:
    """A raw socket server that answers every request in one hostile way, a little at a time,
    so that no read ever waits long enough to time out: `bytes` sends a whole streamed reply
    one byte per `interval`; `pings` sends the headers, then SSE comment lines (`: ping`) and
    never an event; `headers` sends the status line, then header bytes that never end."""

    def __init__(self, mode: str, interval: float = 0.3, most: int | None = None):
        self.mode, self.interval, self.most = mode, interval, most  # most: pieces, then close
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.requests = 0

    def __enter__(self) -> TrickleServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            self._read_request(conn)
            self.requests += 1
            try:
                for piece in itertools.islice(self._pieces(), self.most):
                    if self.stopping.wait(self.interval):
                        return
                    conn.sendall(piece)
            except OSError:
                return  # the client gave up and closed the connection

    def _pieces(self) -> Iterator[bytes]:
        if self.mode == "bytes":
            for byte in (_HEAD + "\r\n" + _SSE_REPLY).encode():
                yield bytes([byte])
        elif self.mode == "pings":
            yield (_HEAD + "\r\n").encode()
            yield from itertools.repeat(b": ping\n\n")
        else:
            yield b"HTTP/1.1 200 OK\r\nx-padding: "
            yield from itertools.repeat(b"a")

    @staticmethod
    def _read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk


@pytest.mark.parametrize("mode", ["bytes", "pings", "headers"])
@pytest.mark.slow
def test_a_deadline_holds_against_a_trickle_whatever_arrives(mode):
    with TrickleServer(mode) as server:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "memgpt_lite", "chat", "--no-record", "--timeout", "2",
             "-p", "hello"], capture_output=True, text=True, timeout=90,
            env=child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test"))
        took = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    gave_up = [line for line in done.stderr.splitlines() if "Gave up waiting for" in line]
    assert len(gave_up) == 1, done.stderr
    assert f"127.0.0.1:{server.port}: it timed out" in gave_up[0]
    assert "a call may take 2 s" in gave_up[0]
    assert took < 45  # a generous bound: without the deadline the trickle never ends


def test_a_call_given_up_on_stops_and_sends_no_retry(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1")
    with TrickleServer("pings", interval=0.1, most=300) as server:  # 30 s of pings at most
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=2)
        events, took, store, agent = failed_turn(tmp_path, client)
        assert the_error(events).startswith("Gave up waiting for 127.0.0.1:")
        workers = [t for t in threading.enumerate() if t.name == "model-call"]
        for worker in workers:
            worker.join(timeout=20)  # its socket was shut down: it ends at once
        assert not any(w.is_alive() for w in workers)
        assert server.requests == 1  # the pings kept the one attempt alive; none followed


@pytest.mark.parametrize("fault, timeout, words", [
    # The server asks for a wait longer than the call may take in all.
    (lambda: rate_limited(retry_after=30), "10", ["Rate limited by the API (429)", "wait 30s"]),
    # No retry-after: the SDK's own back-off (0.5 s, 1 s, 2 s, ...) soon outlasts the deadline.
    (overloaded, "3", ["The API is overloaded (529) after"]),
])
def test_a_retry_that_cannot_start_in_time_is_not_waited_for(tmp_path, monkeypatch, fault,
                                                             timeout, words):
    """The server answered at once, so the sentence says what it answered, not that it timed
    out; and the SDK does not sleep past the deadline for a retry that would never be sent."""
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", timeout)
    with FakeAnthropicServer() as server:
        server.enqueue(fault(), times=9)
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=8)
        events, _, store, agent = failed_turn(tmp_path, client)
        message = the_error(events)
        assert all(w in message for w in words) and "timed out" not in message, message
        assert server.pending > 0  # the SDK stopped before its own retries ran out
        if "wait 30s" in words[-1]:
            assert len(server.requests) == 1
    assert "the question" in recall_texts(store, agent.id)

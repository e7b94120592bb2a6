"""Bounded waits: a server that never answers, or trickles its reply, is given up on within
the call's deadline (retries included), with one sentence naming the host and the wait. The
deadline is set by MEMGPT_LITE_TIMEOUT or the chat's --timeout; the bounds asserted here are
generous (several times the deadline) and far below what an unbounded wait would take."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from rel_support import child_env, recall_texts

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import ConfigError
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang, trickle


def failed_turn(tmp_path, client) -> tuple[list, float, Store, Agent]:
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
    assert "s after 2 retries; a call may take 1.5 s" in message
    assert "MEMGPT_LITE_TIMEOUT or --timeout" in message
    assert took < 10  # three full waits of the server's 60 s would be 180 s
    assert "the question" in recall_texts(store, agent.id)


def test_a_trickling_stream_is_given_up_on_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1.5")
    with FakeAnthropicServer(chunk=1) as server:
        server.enqueue(trickle(seconds=0.4))  # each event in time, the whole reply never
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        events, took, store, agent = failed_turn(tmp_path, client)
    assert "text_delta" in [e.kind for e in events]  # it was streaming when we gave up
    message = the_error(events)
    assert message.startswith("Gave up waiting for 127.0.0.1:") and "may take 1.5 s" in message
    assert took < 8  # the whole trickle takes over 13 s


def test_the_timeout_setting_is_checked_where_it_enters(monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="MEMGPT_LITE_TIMEOUT must be a number of seconds"):
        AnthropicClient(base_url="http://127.0.0.1:9", api_key="test")
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "0")
    with pytest.raises(ConfigError, match="MEMGPT_LITE_TIMEOUT must be between 0 and 3,600"):
        AnthropicClient(base_url="http://127.0.0.1:9", api_key="test")


def chat(server: FakeAnthropicServer, *flags: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record", *flags],
                          input="hello\nsecond\n", capture_output=True, text=True, timeout=60,
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
    assert len(gave_up) == 1 and f"127.0.0.1:{server.port}" in gave_up[0]
    assert "Fake reply to: second" in done.stdout
    assert took < 30


@pytest.mark.slow
def test_a_bad_timeout_flag_is_one_sentence():
    with FakeAnthropicServer() as server:
        done = chat(server, "--timeout", "forever")
    assert done.returncode == 2
    assert done.stderr == ("memgpt-lite: --timeout must be a number of seconds, "
                           "got 'forever'.\n")

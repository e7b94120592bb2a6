"""API faults end to end: Agent + the real SDK (AnthropicClient) + FakeAnthropicServer.

Each fault ends in exactly one clear ErrorEvent and an uncommitted turn; the user's text is in
recall, no half-written reply is stored, the queue is unchanged, and retrying the same text
works (the server validates the retry's request strictly)."""

from __future__ import annotations

import time

import pytest
from rel_support import queue_problems, recall_texts

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import (
    FakeAnthropicServer,
    connection_reset,
    error_event,
    hang,
    malformed_json,
    overloaded,
    rate_limited,
    server_error,
    truncated,
    unauthorized,
)
from memgpt_lite.lab.scripted import text_response, tool_response

FAULTS = {
    "429 retry-after": (lambda: rate_limited(retry_after=0), True, ["Rate limited", "429"]),
    "529 overloaded": (overloaded, True, ["overloaded", "529"]),
    "500": (server_error, True, ["server error", "500"]),
    "reset before reply": (lambda: connection_reset(), True, ["connection"]),
    "reset mid-stream": (lambda: connection_reset(after=6), True, ["connection"]),
    "timeout before reply": (lambda: hang(seconds=3), True, ["timed out"]),
    "timeout mid-stream": (lambda: hang(seconds=3, after=6), True, ["Timed out"]),
    "error event": (lambda: error_event(after=6), True, ["mid-reply", "overloaded_error"]),
    "malformed json": (lambda: malformed_json(after=6), True, ["malformed"]),
    "truncated stream": (lambda: truncated(after=6), True, ["ended before the reply"]),
    "401": (unauthorized, False, ["ANTHROPIC_API_KEY", "401"]),
}


@pytest.fixture
def server():
    with FakeAnthropicServer(chunk=4) as s:
        yield s


def open_agent(tmp_path, server, **client_args) -> tuple[SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "data" / "memgpt_lite.db")
    client = AnthropicClient(base_url=server.base_url, api_key="test",
                             max_retries=client_args.pop("max_retries", 0),
                             timeout=client_args.pop("timeout", 0.5))
    agent = Agent.open(store, "faulty", model_client=client)
    server.enqueue(text_response("The first turn is safe."))
    assert list(agent.step("first message"))[-1].completed
    return store, agent


def assert_clean_failure(store, agent, events, retryable: bool, words: list[str],
                         queued: list[int] = [1]) -> None:
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 1, errors
    message = errors[0].message
    assert errors[0].retryable is retryable
    assert "\n" not in message and "Traceback" not in message
    assert all(w.lower() in message.lower() for w in words), message
    assert events[-1].kind == "turn_end" and not events[-1].completed
    assert sorted({m.turn_id for m in store.context_messages(agent.id)}) == queued
    assert queue_problems(store, agent.id) == []
    texts = recall_texts(store, agent.id)
    assert "the question" in texts
    streamed = "".join(e.text for e in events if e.kind == "text_delta")
    if streamed:  # what the user saw of the broken reply was not stored
        assert not any(streamed in t for t in texts), "a half-written reply was stored"


@pytest.mark.parametrize("name", FAULTS)
def test_fault_then_retry(tmp_path, server, name):
    make, retryable, words = FAULTS[name]
    store, agent = open_agent(tmp_path, server)
    server.enqueue(make())
    started = time.monotonic()
    events = list(agent.step("the question"))
    assert time.monotonic() - started < 10
    assert_clean_failure(store, agent, events, retryable, words)
    if name == "401":  # the user fixes the key, then retries
        agent.model_client = AnthropicClient(base_url=server.base_url, api_key="good",
                                             max_retries=0, timeout=2)
    server.enqueue(text_response("Recovered answer."))
    end = list(agent.step(agent.last_user_text()))[-1]
    assert end.completed and end.text == "Recovered answer."
    assert queue_problems(store, agent.id) == []
    assert not server.errors


def test_partial_reply_is_not_stored_when_the_stream_breaks(tmp_path, server):
    store, agent = open_agent(tmp_path, server)
    server.enqueue(error_event(after=12))  # the echo reply, cut after a few deltas
    events = list(agent.step("the question"))
    assert "".join(e.text for e in events if e.kind == "text_delta").startswith("Fake")
    assert_clean_failure(store, agent, events, True, ["mid-reply"])
    assert not any("Fake reply" in t for t in recall_texts(store, agent.id))


def test_fault_after_a_tool_call_leaves_no_orphan_tool_use(tmp_path, server):
    store, agent = open_agent(tmp_path, server)
    server.enqueue(tool_response([("core_memory_append",
                                   {"label": "human", "content": "Plays the cello."})]))
    server.enqueue(overloaded())
    events = list(agent.step("the question"))
    assert_clean_failure(store, agent, events, True, ["overloaded"])
    assert "Plays the cello." not in agent.blocks()[1].value  # the failed turn's edit is undone
    server.enqueue(tool_response([("core_memory_append",
                                   {"label": "human", "content": "Plays the cello."})]))
    server.enqueue(text_response("Cello noted."))
    assert list(agent.retry())[-1].completed
    assert agent.blocks()[1].value.count("Plays the cello.") == 1
    assert recall_texts(store, agent.id).count("the question") == 1
    assert queue_problems(store, agent.id) == []


def test_rate_limit_is_retried_by_the_sdk_and_then_succeeds(tmp_path, server):
    # A deadline well above the SDK's backoff: the retry must fit in the call's time.
    store, agent = open_agent(tmp_path, server, max_retries=2, timeout=10)
    server.enqueue(rate_limited(retry_after=0))
    server.enqueue(text_response("After one retry."))
    events = list(agent.step("the question"))
    assert not [e for e in events if e.kind == "error"]
    assert events[-1].completed and events[-1].text == "After one retry."


def test_rate_limit_after_the_sdk_retries_says_so(tmp_path, server):
    store, agent = open_agent(tmp_path, server, max_retries=1, timeout=10)
    server.enqueue(rate_limited(retry_after=0), times=2)
    events = list(agent.step("the question"))
    assert_clean_failure(store, agent, events, True, ["after 1 retry"])


def test_no_server_at_all(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    store = SQLiteStore(tmp_path / "db.sqlite")
    agent = Agent.open(store, "offline", model_client=AnthropicClient(
        base_url=f"http://127.0.0.1:{port}", api_key="test", max_retries=0, timeout=1))
    events = list(agent.step("the question"))
    assert_clean_failure(store, agent, events, True, ["Could not connect"], queued=[])

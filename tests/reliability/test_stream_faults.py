"""A broken or hostile Anthropic-compatible server, through the real SDK and the fake server:
odd text in the stream (lone surrogates, bytes that are not UTF-8), fields of the wrong type,
a stall mid-stream, a reply cut off, Ctrl-C while a one-shot chat streams, a server asking to wait before a retry. Each case ends the
turn with one sentence (or not at all), keeps the user's message, and the next request is
one a strict server accepts (the fake server refuses lone surrogates and broken pairing)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from rel_support import child_env, queue_problems, recall_texts

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.call_deadline import asked_wait
from memgpt_lite.engine.events import RetryWaitEvent
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import (
    FakeAnthropicServer,
    Fault,
    hang,
    http_error,
    not_utf8,
    odd_values,
    trickle,
    truncated,
)
from memgpt_lite.lab.scripted import text_response, tool_response
from memgpt_lite.terminal.view import describe_event


def open_agent(tmp_path, server: FakeAnthropicServer) -> tuple[SQLiteStore, Agent]:
    client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
    store = SQLiteStore(tmp_path / "t.db")
    return store, Agent.open(store, "t", model_client=client)


def outcome(events) -> tuple[bool, list[str]]:
    """Whether the turn completed, and its error sentences."""
    return events[-1].completed, [e.message for e in events if e.kind == "error"]


def all_valid_utf8(server: FakeAnthropicServer) -> bool:
    try:
        for body in server.requests:
            json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------- odd text


def test_a_lone_surrogate_in_a_tool_input_becomes_u_fffd_and_the_turn_goes_on(tmp_path):
    # chunk=3 splits the escape between input_json_deltas, as a server may.
    with FakeAnthropicServer(chunk=3) as server:
        server.enqueue(tool_response([("archival_insert", {"content": "note \ud800 here"})]))
        server.enqueue(text_response("Saved."))
        store, agent = open_agent(tmp_path, server)
        done, errors = outcome(list(agent.step("remember this")))
        assert (done, errors) == (True, [])
        assert outcome(list(agent.step("and again")))[0]  # the history is still sendable
    assert all_valid_utf8(server) and len(server.requests) == 3
    sent_back = server.requests[1]["messages"][-2]["content"]
    assert [b["input"] for b in sent_back if b["type"] == "tool_use"] == [
        {"content": "note \ufffd here"}]
    assert "note \ufffd here" in str(store.search_passages(agent.id, "note"))


def test_a_lone_surrogate_in_a_text_delta_is_stored_as_u_fffd(tmp_path):
    with FakeAnthropicServer(chunk=4) as server:
        server.enqueue(text_response("odd \ud800 reply"))
        store, agent = open_agent(tmp_path, server)
        events = list(agent.step("hello"))
        assert outcome(events) == (True, [])
        shown = "".join(e.text for e in events if e.kind == "text_delta")
        assert shown == events[-1].text == "odd \ufffd reply"
        assert outcome(list(agent.step("next")))[0]
    assert all_valid_utf8(server)
    assert "odd \ufffd reply" in recall_texts(store, agent.id)


def test_a_byte_that_is_not_utf8_ends_the_turn_in_one_sentence_and_retry_works(tmp_path):
    with FakeAnthropicServer() as server:
        server.enqueue(not_utf8(after=3))
        store, agent = open_agent(tmp_path, server)
        events = list(agent.step("the question"))
        done, errors = outcome(events)
        assert not done
        assert events[-1].usage.total_input > 0  # message_start came first: its input is paid
        assert errors == [f"The server at 127.0.0.1:{server.port} sent bytes that are not "
                          f"UTF-8 in its reply stream, so the reply could not be read."]
        assert "the question" in recall_texts(store, agent.id)
        retried = list(agent.retry())
    assert outcome(retried) == (True, [])
    assert retried[-1].text == "Fake reply to: the question"
    assert recall_texts(store, agent.id).count("the question") == 1


@pytest.mark.parametrize("values", [
    {"id": 123, "model": None, "stop_reason": 7},
    {"id": {"x": 1}, "model": ["a"], "stop_reason": {"why": "no"}},
    {"id": None, "model": 4.5, "stop_reason": None, "stop_sequence": 9, "role": 3},
])
def test_fields_of_the_wrong_type_are_taken_as_unknown(tmp_path, values):
    with FakeAnthropicServer() as server:
        server.enqueue(odd_values(**values))
        store, agent = open_agent(tmp_path, server)
        events = list(agent.step("hello"))
        assert outcome(events) == (True, [])
        (response,) = [e.response for e in events if e.kind == "response"]
        assert (response.id, response.model, response.stop_reason) == ("", "", None)
        assert events[-1].text == "Fake reply to: hello"
        assert outcome(list(agent.step("next")))[0]


# --------------------------------------------------------------------------- cut off, stalled


def test_a_tool_call_cut_off_mid_stream_leaves_a_history_a_strict_server_takes(tmp_path):
    # The stream ends inside the tool_use block (message_start, ping, content_block_start and
    # one input delta; no content_block_stop, no message_stop): the user retries, and no
    # dangling tool_use may reach a request (the fake server refuses one without its result).
    call = tool_response([("archival_insert", {"content": "a fact"})])
    with FakeAnthropicServer() as server:
        server.enqueue(truncated(after=4, reply=call))
        server.enqueue(call)
        server.enqueue(text_response("Kept."))
        store, agent = open_agent(tmp_path, server)
        done, errors = outcome(list(agent.step("keep a fact")))
        assert not done and "ended before the reply was complete" in errors[0]
        retried = list(agent.retry())
        assert outcome(retried) == (True, [])
        assert retried[-1].text == "Kept."
        assert outcome(list(agent.step("later")))[0]
    assert [entry["status"] for entry in server.log] == [200, 200, 200, 200]
    assert queue_problems(store, agent.id) == []
    assert recall_texts(store, agent.id).count("keep a fact") == 1


@pytest.mark.parametrize("retries", [0, 2])
def test_a_stall_after_message_start_is_given_up_on_naming_the_setting(tmp_path, monkeypatch,
                                                                       retries):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1.5")
    with FakeAnthropicServer() as server:
        server.enqueue(hang(seconds=60, after=1))  # message_start, then nothing
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=retries)
        store = SQLiteStore(tmp_path / "t.db")
        agent = Agent.open(store, "t", model_client=client)
        started = time.monotonic()
        done, errors = outcome(list(agent.step("the question")))
        took = time.monotonic() - started
        assert not done and len(errors) == 1
        assert errors[0].startswith(f"Gave up waiting for 127.0.0.1:{server.port}: it timed out")
        assert "a call may take 1.5 s, set by MEMGPT_LITE_TIMEOUT or --timeout" in errors[0]
        if retries:  # a try's share of the deadline (0.5 s of silence) ended it: it says so
            assert "silent mid-reply for 0.5 s, the most a try may wait;" in errors[0]
        assert took < 10
        assert outcome(list(agent.retry()))[0]
    assert recall_texts(store, agent.id).count("the question") == 1


def chat(server, *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "memgpt_lite", "chat", "--no-record", *args],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test"))


@pytest.mark.slow
def test_a_one_shot_chat_stalled_mid_stream_exits_1_in_one_line():
    with FakeAnthropicServer() as server:
        server.enqueue(hang(seconds=60, after=1), times=3)
        proc = chat(server, "--timeout", "1", "-p", "hello")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if "error: " in line]
    assert len(lines) == 1 and "Gave up waiting for" in lines[0] and "--timeout" in lines[0]


@pytest.mark.slow
def test_ctrl_c_while_a_piped_one_shot_chat_streams_exits_130_and_keeps_the_message(tmp_path):
    question = tmp_path / "question.txt"
    question.write_text("my streamed question\n")
    with FakeAnthropicServer(chunk=2) as server:
        first = chat(server, "-p", "a first turn, so the agent is kept")
        assert first.wait(timeout=60) == 0, first.stderr.read()
        server.enqueue(trickle(seconds=0.3))  # a reply of many events, 0.3 s apart
        with question.open() as stdin:
            proc = chat(server, "-p", "-", stdin=stdin)
            deadline = time.monotonic() + 60
            while len(server.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(2.5)  # a few text deltas in
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert out.startswith("Fake") and "question" not in out  # cut mid-reply, as it streamed
    assert proc.returncode == 130, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err
    assert err.splitlines() == ["· interrupted — the turn was cancelled; your message stays in "
                                "recall"]
    home = tmp_path / "home"
    with SQLiteStore(home / "memgpt_lite.db") as store:
        agent = store.get_agent("default")
        assert "my streamed question" in recall_texts(store, agent.id)



# --------------------------------------------------------------------------- retry waits


def rate_limited_for(ms: str, seconds: str = "30", status: int = 429) -> Fault:
    kind = "rate_limit_error" if status == 429 else "overloaded_error"
    return http_error(status, kind, "slow down", {"retry-after-ms": ms, "retry-after": seconds})


@pytest.mark.parametrize("status", [429, 529, 503])
def test_retry_after_ms_is_waited_once_and_told_to_the_user(tmp_path, status):
    # retry-after-ms wins over retry-after (as the SDK reads them): 0.4 s, not 30 s; the SDK
    # sleeps it, once, and the engine says so as the wait begins.
    with FakeAnthropicServer() as server:
        server.enqueue(rate_limited_for("400", status=status))
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=2)
        store = SQLiteStore(tmp_path / "t.db")
        agent = Agent.open(store, "t", model_client=client)
        started = time.monotonic()
        events = list(agent.step("hello"))
        took = time.monotonic() - started
    assert outcome(events) == (True, [])
    waits = [e for e in events if isinstance(e, RetryWaitEvent)]
    assert [(w.status, w.seconds, w.asked) for w in waits] == [(status, 0.4, True)]
    assert 0.4 <= took < 5 and len(server.requests) == 2
    assert describe_event(waits[0])[0].startswith(
        f"the API answered {status} (") and "retrying in 0.4 s (as it asked)" in describe_event(
        waits[0])[0]


def test_a_retry_after_past_the_deadline_is_not_waited_and_not_announced(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "5")
    with FakeAnthropicServer() as server:
        server.enqueue(rate_limited_for("60000"))  # a minute: past the call's 5 s
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=2)
        store = SQLiteStore(tmp_path / "t.db")
        agent = Agent.open(store, "t", model_client=client)
        started = time.monotonic()
        events = list(agent.step("hello"))
    assert time.monotonic() - started < 4
    assert not [e for e in events if isinstance(e, RetryWaitEvent)]
    assert outcome(events)[1] == ["Rate limited by the API (429) (the API asked to wait 60s)."]
    assert len(server.requests) == 1


def test_a_retry_after_ms_of_zero_means_the_client_s_back_off():
    # The SDK takes the first header that is a number; 0 there means its own back-off,
    # whatever retry-after says (which a wait computed from retry-after would not match).
    assert asked_wait({"retry-after-ms": "0", "retry-after": "30"}) is None
    assert asked_wait({"retry-after-ms": "nope", "retry-after": "2"}) == 2.0
    assert asked_wait({"retry-after-ms": "nan"}) is None


@pytest.mark.slow
def test_a_one_shot_chat_shows_the_wait_on_stderr():
    with FakeAnthropicServer() as server:
        server.enqueue(rate_limited_for("300"))
        proc = chat(server, "-p", "hello")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "Fake reply to: hello\n"
    assert "· the API answered 429 (rate limited); retrying in 0.3 s (as it asked)" in err


@pytest.mark.slow
def test_json_output_carries_the_wait_as_an_event():
    with FakeAnthropicServer() as server:
        server.enqueue(rate_limited_for("200", status=529))
        proc = chat(server, "--json", "-p", "hello")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert {"status": 529, "seconds": 0.2, "asked": True, "kind": "retry_wait"} in events

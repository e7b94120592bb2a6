"""The model boundary: the real anthropic SDK offline (httpx2.MockTransport) and ScriptedModel."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx2
import pytest

from memgpt_lite.engine import errors
from memgpt_lite.engine.events import RetryWaitEvent, TextDelta, ThinkingDelta
from memgpt_lite.engine.model import PLACEHOLDER_API_KEY, AnthropicClient
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.lab.fake_server import sse_events
from memgpt_lite.lab.scripted import (
    ScriptedModel,
    ScriptExhausted,
    estimate_usage,
    text_response,
    tool_response,
)


def thinking_block(text: str, signature: str = "sig") -> dict:
    """A thinking block as the API returns it."""
    return {"type": "thinking", "thinking": text, "signature": signature}

REQUEST = ModelRequest(
    model="claude-sonnet-5-5", max_tokens=256,
    system=[{"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}],
    messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    tools=[{"name": "archival_search", "description": "search",
            "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}],
)
USAGE = {"input_tokens": 12, "output_tokens": 7, "cache_creation_input_tokens": 100,
         "cache_read_input_tokens": 2000}


def message(content, stop_reason="end_turn", usage=None):
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or USAGE}


def sse_bytes(events) -> bytes:
    return "".join(f"event: {name}\ndata: {data if isinstance(data, str) else json.dumps(data)}\n\n"
                   for name, data in events).encode()


def stream_response(msg, chunk=4) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                           content=sse_bytes(sse_events(msg, chunk)))


def error_response(status, error_type, text, headers=None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": error_type, "message": text}}
    return httpx2.Response(status, json=body, headers=headers or {})


class Recorder:
    """A MockTransport handler that answers from a list and keeps every request."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply(request) if callable(reply) else reply

    def body(self, i=0) -> dict:
        return json.loads(self.requests[i].content)


def client_for(handler, *, max_retries=0, **kw) -> AnthropicClient:
    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    return AnthropicClient(api_key=kw.pop("api_key", "test"), http_client=http,
                           max_retries=max_retries, **kw)


def run(client, request=REQUEST):
    items = list(client.stream(request))
    assert isinstance(items[-1], ModelResponse)
    assert not any(isinstance(i, ModelResponse) for i in items[:-1])
    return items[:-1], items[-1]


def fail(client, request=REQUEST) -> errors.ModelError:
    with pytest.raises(errors.ModelError) as info:
        list(client.stream(request))
    assert "\n" not in info.value.message and "Traceback" not in info.value.message
    return info.value


# --------------------------------------------------------------------------- import hygiene


@pytest.mark.slow
def test_importing_model_does_not_import_anthropic():
    code = ("import sys, memgpt_lite.engine.model, memgpt_lite.lab.fake_server; "
            "print('anthropic' in sys.modules, 'httpx2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- streaming


def test_streams_text_deltas_then_one_response_and_sends_the_request_as_built():
    rec = Recorder(stream_response(message([{"type": "text", "text": "Hello there, friend!"}])))
    deltas, response = run(client_for(rec))
    assert all(isinstance(d, TextDelta) for d in deltas) and len(deltas) > 1
    assert "".join(d.text for d in deltas) == "Hello there, friend!"
    assert response.content == [{"type": "text", "text": "Hello there, friend!"}]
    assert (response.id, response.model, response.stop_reason) == (
        "msg_01", "claude-sonnet-5-5", "end_turn")
    body = rec.body()
    assert body.pop("stream") is True
    assert body == REQUEST.to_api()
    assert rec.requests[0].url.path == "/v1/messages"


def test_two_parallel_tool_uses_come_back_with_parsed_input():
    content = [{"type": "text", "text": "Let me look."},
               {"type": "tool_use", "id": "toolu_a", "name": "archival_search",
                "input": {"query": "cats", "page": 2}},
               {"type": "tool_use", "id": "toolu_b", "name": "conversation_search",
                "input": {"query": "dogs \"quoted\"", "tags": ["x", "y"]}}]
    _, response = run(client_for(Recorder(stream_response(message(content, "tool_use")))))
    assert response.stop_reason == "tool_use"
    assert response.content == content
    assert [(c.id, c.name, c.input) for c in response.tool_calls] == [
        ("toolu_a", "archival_search", {"query": "cats", "page": 2}),
        ("toolu_b", "conversation_search", {"query": 'dogs "quoted"', "tags": ["x", "y"]})]


def test_thinking_blocks_are_streamed_and_kept_with_their_signature():
    content = [{"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCkYIBx=="},
               {"type": "redacted_thinking", "data": "ZXhhbXBsZQ=="},
               {"type": "text", "text": "Hi!"}]
    deltas, response = run(client_for(Recorder(stream_response(message(content)))))
    assert "".join(d.text for d in deltas if isinstance(d, ThinkingDelta)) == "The user greets me."
    assert response.content == content


@pytest.mark.parametrize("stop_reason", ["end_turn", "tool_use", "max_tokens", "pause_turn",
                                         "refusal", "stop_sequence",
                                         "model_context_window_exceeded"])
def test_each_stop_reason_is_reported(stop_reason):
    _, response = run(client_for(Recorder(stream_response(
        message([{"type": "text", "text": "partial"}], stop_reason)))))
    assert response.stop_reason == stop_reason


def test_usage_includes_cache_fields():
    reply = stream_response(message([{"type": "text", "text": "x"}]))
    _, response = run(client_for(Recorder(reply)))
    assert response.usage == Usage(12, 7, 100, 2000)
    assert response.usage.total_input == 2112


def test_usage_without_cache_fields_is_zero_not_none():
    usage = {"input_tokens": 5, "output_tokens": 1}
    _, response = run(client_for(Recorder(stream_response(
        message([{"type": "text", "text": "x"}], usage=usage)))))
    assert response.usage == Usage(5, 1, 0, 0)


def test_count_tokens_uses_the_count_endpoint_without_max_tokens():
    rec = Recorder(httpx2.Response(200, json={"input_tokens": 4242}))
    assert client_for(rec).count_tokens(REQUEST) == 4242
    assert rec.requests[0].url.path == "/v1/messages/count_tokens"
    assert "max_tokens" not in rec.body() and rec.body()["tools"] == REQUEST.tools


def test_count_tokens_after_a_retry_wait_is_the_count():
    # The wait before the SDK's retry is handed to the caller among the call's items; a count
    # is the last of them.
    rec = Recorder(error_response(429, "rate_limit_error", "slow", {"retry-after-ms": "10"}),
                   httpx2.Response(200, json={"input_tokens": 77}))
    assert client_for(rec, max_retries=1).count_tokens(REQUEST) == 77
    assert len(rec.requests) == 2


def test_a_retry_wait_is_an_item_of_the_stream_before_the_reply():
    rec = Recorder(error_response(529, "overloaded_error", "busy", {"retry-after-ms": "10"}),
                   stream_response(message([{"type": "text", "text": "hi"}])))
    items = list(client_for(rec, max_retries=1).stream(REQUEST))
    assert items[0] == RetryWaitEvent(529, 0.01, True)
    assert isinstance(items[-1], ModelResponse) and items[-1].text == "hi"


# --------------------------------------------------------------------------- credentials


@pytest.fixture
def no_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))  # no ~/.config/anthropic profiles
    for var in ("ANTHROPIC_CONFIG_DIR", "ANTHROPIC_PROFILE", "ANTHROPIC_IDENTITY_TOKEN",
                "ANTHROPIC_IDENTITY_TOKEN_FILE",
                "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_ORGANIZATION_ID"):
        monkeypatch.delenv(var, raising=False)


def test_no_key_at_all_is_one_sentence_naming_the_env_vars(no_profiles):
    with pytest.raises(errors.AuthError) as info:
        AnthropicClient()
    assert "ANTHROPIC_API_KEY" in info.value.message
    assert "ANTHROPIC_BASE_URL" in info.value.message
    assert info.value.retryable is False


def test_key_from_env_is_used(no_profiles, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env-key")
    rec = Recorder(stream_response(message([{"type": "text", "text": "x"}])))
    http = httpx2.Client(transport=httpx2.MockTransport(rec))
    run(AnthropicClient(http_client=http, max_retries=0))
    headers = rec.requests[0].headers
    assert "sk-env-key" in (headers.get("x-api-key") or headers.get("authorization") or "")


def test_base_url_without_key_sends_a_placeholder_key(no_profiles, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    rec = Recorder(stream_response(message([{"type": "text", "text": "x"}])))
    http = httpx2.Client(transport=httpx2.MockTransport(rec))
    client = AnthropicClient(http_client=http, max_retries=0)
    run(client)
    assert rec.requests[0].url.host == "127.0.0.1"
    headers = rec.requests[0].headers
    assert PLACEHOLDER_API_KEY in (headers.get("x-api-key") or headers.get("authorization") or "")
    assert client.host == "127.0.0.1:9"


def test_a_proxy_error_page_is_named_by_its_title_not_dumped():
    page = ("<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>"
            + "x" * 5000 + "</body></html>")
    rec = Recorder(httpx2.Response(502, headers={"content-type": "text/html"}, text=page))
    err = fail(client_for(rec))
    assert "an HTML page titled '502 Bad Gateway'" in err.message
    assert "xxxx" not in err.message and len(err.message) < 200


def test_a_long_error_message_is_cut_to_one_short_line():
    text = "messages.0: " + "the reason, at length\n" * 100
    err = fail(client_for(Recorder(error_response(400, "invalid_request_error", text))))
    assert err.message.startswith("The API rejected the request (400): messages.0: the reason")
    assert len(err.message) < 400 and "…" in err.message


@pytest.mark.parametrize("kind,body", [("text/html", "<html><body>Welcome to nginx</body></html>"),
                                       ("application/json", '{"hello": "world"}')])
def test_a_200_that_is_not_a_stream_of_events_says_what_answered(kind, body):
    rec = Recorder(httpx2.Response(200, headers={"content-type": kind}, text=body))
    err = fail(client_for(rec))
    assert isinstance(err, errors.StreamError)
    assert f"answered with {kind}, not a stream of events" in err.message
    assert "ANTHROPIC_BASE_URL" in err.message


@pytest.mark.parametrize("reply", [
    httpx2.Response(200, headers={"content-type": "text/html"}, text="<html>Welcome</html>"),
    httpx2.Response(200, json={"hello": "world"}),
    httpx2.Response(200, json={"input_tokens": "many"}),
    httpx2.Response(200, json={"input_tokens": -3})])
def test_a_token_count_without_a_count_is_one_sentence_not_a_traceback(reply):
    with pytest.raises(errors.ModelError) as info:
        client_for(Recorder(reply)).count_tokens(REQUEST)
    assert "answered a token count with no count in it" in info.value.message


def _events_with(change):
    """The SSE bytes of a one-text reply, `change` applied to its list of (name, data)."""
    events = sse_events(message([{"type": "text", "text": "hi"}]))
    change(events)
    return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                           content=sse_bytes(events))


def _empty_start(events):
    events[0] = ("message_start", {"type": "message_start", "message": {}})


def _null_usage(events):
    events[0][1]["message"]["usage"] = None
    events[-2][1]["usage"] = None


@pytest.mark.parametrize("change", [_empty_start, _null_usage])
def test_a_stream_with_fields_left_out_or_null_is_a_stream_error_not_a_traceback(change):
    err = fail(client_for(Recorder(_events_with(change))))
    assert isinstance(err, errors.StreamError) and "malformed response stream" in err.message


def test_token_counts_that_are_not_counts_are_taken_as_none(recwarn):
    def bad_counts(events):
        events[0][1]["message"]["usage"] = {"input_tokens": -50, "output_tokens": "x",
                                            "cache_read_input_tokens": "lots"}
        events[-2][1]["usage"] = {"output_tokens": "x"}

    _, response = run(client_for(Recorder(_events_with(bad_counts))))
    assert response.content == [{"type": "text", "text": "hi"}]
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (0, 0, 0)
    assert not [w for w in recwarn if "serializer" in str(w.message)]  # nothing on stderr


def test_an_empty_base_url_variable_means_the_api_not_a_url_of_nothing(no_profiles, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "")  # `export ANTHROPIC_BASE_URL=` to unset it
    rec = Recorder(stream_response(message([{"type": "text", "text": "x"}])))
    http = httpx2.Client(transport=httpx2.MockTransport(rec))
    client = AnthropicClient(api_key="test", http_client=http, max_retries=0)
    run(client)
    assert rec.requests[0].url.host == "api.anthropic.com"
    assert client.host == "api.anthropic.com"


def test_a_404_from_a_base_url_ending_in_v1_says_to_drop_it():
    rec = Recorder(error_response(404, "not_found_error", "Not found: /v1/v1/messages"))
    err = fail(client_for(rec, base_url="http://127.0.0.1:9/v1/"))
    assert rec.requests[0].url.path == "/v1/v1/messages"
    assert "ends in /v1" in err.message and "try http://127.0.0.1:9" in err.message
    assert "/v1" not in err.message.rsplit("try ", 1)[1]


def test_a_404_elsewhere_has_no_such_hint():
    rec = Recorder(error_response(404, "not_found_error", "model: claude-nope"))
    err = fail(client_for(rec, base_url="http://127.0.0.1:9/proxy"))
    assert "model: claude-nope" in err.message and "/v1" not in err.message


# --------------------------------------------------------------------------- error mapping


def test_rate_limit_after_retries_says_so_and_keeps_the_message():
    rec = Recorder(error_response(429, "rate_limit_error", "Too many requests",
                                  {"retry-after": "0", "retry-after-ms": "1"}))
    err = fail(client_for(rec, max_retries=1))
    assert isinstance(err, errors.RateLimitError) and err.status == 429
    assert len(rec.requests) == 2
    assert "after 1 retry" in err.message and "message is kept" not in err.message


def test_rate_limit_reports_a_positive_retry_after():
    rec = Recorder(error_response(429, "rate_limit_error", "slow down", {"retry-after": "20"}))
    err = fail(client_for(rec))
    assert "wait 20s" in err.message and "retr" not in err.message


def test_overloaded_529():
    err = fail(client_for(Recorder(error_response(529, "overloaded_error", "Overloaded"))))
    assert isinstance(err, errors.OverloadedError) and err.status == 529
    assert "overloaded" in err.message


def test_server_error_500():
    err = fail(client_for(Recorder(error_response(500, "api_error", "Internal server error"))))
    assert type(err) is errors.ModelError and err.status == 500 and err.retryable
    assert "server error (500" in err.message


@pytest.mark.parametrize("status,kind", [(401, "authentication_error"),
                                         (403, "permission_error")])
def test_invalid_key_names_the_env_var(status, kind):
    err = fail(client_for(Recorder(error_response(status, kind, "invalid x-api-key"))))
    assert isinstance(err, errors.AuthError) and err.status == status and not err.retryable
    assert "ANTHROPIC_API_KEY" in err.message


def test_connection_error_names_the_host():
    rec = Recorder(httpx2.ConnectError("Connection refused"))
    http = httpx2.Client(transport=httpx2.MockTransport(rec))
    client = AnthropicClient(api_key="test", base_url="http://llm.example:8080",
                             http_client=http, max_retries=0)
    err = fail(client)
    assert isinstance(err, errors.APIConnectionError)
    assert "Could not connect to llm.example:8080" in err.message
    assert "ANTHROPIC_BASE_URL" in err.message


def test_timeout_is_a_connection_error():
    err = fail(client_for(Recorder(httpx2.ReadTimeout("timed out"))))
    assert isinstance(err, errors.APIConnectionError) and "timed out" in err.message


def test_error_event_mid_stream_is_a_stream_error():
    events = sse_events(message([{"type": "text", "text": "Hello there, friend!"}]), 4)[:4]
    events.append(("error", {"type": "error",
                             "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    rec = Recorder(httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=sse_bytes(events)))
    items = []
    with pytest.raises(errors.StreamError) as info:
        for item in client_for(rec).stream(REQUEST):
            items.append(item)
    assert items and all(isinstance(i, TextDelta) for i in items)  # deltas came first
    assert "overloaded_error" in info.value.message


def test_truncated_stream_is_a_stream_error():
    events = sse_events(message([{"type": "text", "text": "Hello there"}]), 4)[:-2]
    rec = Recorder(httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=sse_bytes(events)))
    err = fail(client_for(rec))
    assert isinstance(err, errors.StreamError) and "ended before" in err.message


def test_malformed_json_in_a_data_line_is_a_stream_error():
    events = sse_events(message([{"type": "text", "text": "Hello"}]), 4)[:3]
    events.append(("content_block_delta", '{"type": "content_block_delta", "index": 0,'))
    rec = Recorder(httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=sse_bytes(events)))
    err = fail(client_for(rec))
    assert isinstance(err, errors.StreamError) and "malformed" in err.message


def test_a_tool_input_the_sdk_cannot_parse_is_named_as_the_model_s_tool_call():
    # The model writes a tool call's input as JSON; JSON the SDK's parser cannot read fails
    # the stream. The error says so instead of blaming the API.
    content = [{"type": "tool_use", "id": "toolu_a", "name": "archival_search", "input": {}}]
    events = sse_events(message(content, "tool_use"), 4)
    at = next(i for i, (_, d) in enumerate(events)
              if d.get("delta", {}).get("type") == "input_json_delta")
    events[at][1]["delta"]["partial_json"] = '{"query": nope}'
    rec = Recorder(httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=sse_bytes(events)))
    err = fail(client_for(rec))
    assert isinstance(err, errors.StreamError) and err.retryable
    assert err.message.startswith("The model wrote a tool call whose input is not readable")
    assert "JSON:" not in err.message  # the parser's reason, not the input


def test_a_lone_surrogate_escape_in_a_tool_input_is_read_as_u_fffd():
    # \ud800 with no pair: the SDK's parser would refuse it; it is replaced before the SDK
    # reads the stream (sse_text.py), a proper pair is kept, and the call is answered.
    content = [{"type": "tool_use", "id": "toolu_a", "name": "archival_search",
                "input": {"query": "lone \ud800 low \udc00 pair \U0001f600"}}]
    _, response = run(client_for(Recorder(stream_response(message(content, "tool_use")))))
    assert response.tool_calls[0].input == {"query": "lone \ufffd low \ufffd pair \U0001f600"}


def test_prompt_too_long_carries_the_numbers():
    rec = Recorder(error_response(400, "invalid_request_error",
                                  "prompt is too long: 210345 tokens > 200000 maximum"))
    err = fail(client_for(rec))
    assert isinstance(err, errors.PromptTooLongError)
    assert (err.actual, err.maximum, err.status) == (210345, 200000, 400)
    assert "210345 tokens > 200000" in err.message


def test_other_bad_request_carries_the_api_message():
    text = "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after"
    err = fail(client_for(Recorder(error_response(400, "invalid_request_error", text))))
    assert type(err) is errors.BadRequestError and not err.retryable
    assert text in err.message


@pytest.mark.parametrize("body", [{"error": "boom"}, {"error": None}, ["not", "an", "object"]])
def test_an_error_body_of_another_shape_is_still_one_sentence(body):
    # Compatible servers do not all send {"error": {"type", "message"}}; a string `error`
    # used to escape as a raw AttributeError from the error mapping.
    err = fail(client_for(Recorder(httpx2.Response(500, json=body))))
    assert type(err) is errors.ModelError and "server error (500" in err.message


def test_warm_up_does_not_print_when_the_sdk_cannot_be_imported(monkeypatch):
    import threading

    client = client_for(Recorder(stream_response(message([{"type": "text", "text": "x"}]))))
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)  # would print the traceback
    monkeypatch.setitem(sys.modules, "anthropic", None)  # makes `import anthropic` fail
    client.warm_up()
    for thread in threading.enumerate():
        if thread.name == "import-anthropic":
            thread.join(timeout=10)
    assert failures == []


def test_count_tokens_errors_are_mapped_too():
    with pytest.raises(errors.OverloadedError):
        client_for(Recorder(error_response(529, "overloaded_error", "Overloaded"))).count_tokens(
            REQUEST)


# --------------------------------------------------------------------------- ScriptedModel


def test_scripted_model_streams_chunks_and_records_requests():
    model = ScriptedModel([text_response("abcdefghij", usage=Usage(1, 2))], chunk=4)
    items = list(model.stream(REQUEST))
    assert [i.text for i in items[:-1]] == ["abcd", "efgh", "ij"]
    response = items[-1]
    assert response.text == "abcdefghij" and response.usage == Usage(1, 2)
    assert response.model == REQUEST.model and response.id == "msg_scripted_001"
    assert model.requests == [REQUEST]
    model.assert_complete()


def test_scripted_model_streams_thinking_then_text():
    reply = ModelResponse([thinking_block("hmm ok"), {"type": "text", "text": "yes"}],
                          "end_turn", Usage())
    items = list(ScriptedModel([reply], chunk=3).stream(REQUEST))
    assert items[:3] == [ThinkingDelta("hmm"), ThinkingDelta(" ok"), TextDelta("yes")]
    assert items[-1].content[0]["signature"] == "sig"


def test_scripted_model_raises_scripted_exceptions_and_calls_callables():
    boom = errors.RateLimitError("Rate limited.", status=429)
    model = ScriptedModel([boom, lambda req: text_response(f"{len(req.messages)} msgs")])
    with pytest.raises(errors.RateLimitError):
        list(model.stream(REQUEST))
    assert list(model.stream(REQUEST))[-1].text == "1 msgs"
    assert len(model.requests) == 2


def test_scripted_model_raises_when_the_script_runs_out():
    model = ScriptedModel([text_response("one")])
    list(model.stream(REQUEST))
    with pytest.raises(ScriptExhausted, match="call #2"):
        list(model.stream(REQUEST))
    assert isinstance(ScriptExhausted("x"), AssertionError)


def test_assert_complete_fails_when_items_are_left():
    model = ScriptedModel([text_response("one"), text_response("two")])
    list(model.stream(REQUEST))
    with pytest.raises(AssertionError, match="1 of 2"):
        model.assert_complete()


def test_responses_are_copies_so_callers_cannot_corrupt_the_script():
    reply = text_response("same")
    model = ScriptedModel([reply, reply])
    first = list(model.stream(REQUEST))[-1]
    first.content[0]["text"] = "changed"
    assert list(model.stream(REQUEST))[-1].text == "same"


def test_tool_response_has_unique_ids_and_parallel_calls():
    a = tool_response([("archival_search", {"query": "x"}), ("core_memory_append",
                                                            {"label": "human", "content": "y"})],
                      text="Saving.")
    b = tool_response([("archival_search", {"query": "x"})])
    ids = [c.id for c in a.tool_calls + b.tool_calls]
    assert len(set(ids)) == 3 and all(i.startswith("toolu_") for i in ids)
    assert a.stop_reason == "tool_use" and a.text == "Saving."
    assert [c.name for c in a.tool_calls] == ["archival_search", "core_memory_append"]


def test_estimated_usage_grows_with_the_request():
    small = estimate_usage(REQUEST)
    bigger = ModelRequest(**{**REQUEST.__dict__, "messages": REQUEST.messages + [
        {"role": "assistant", "content": [{"type": "text", "text": "x" * 400}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]}]})
    assert estimate_usage(bigger).input_tokens >= small.input_tokens + 100
    model = ScriptedModel([text_response("a"), text_response("b")])
    list(model.stream(REQUEST))
    list(model.stream(bigger))
    first, second = model.responses
    assert first.usage == estimate_usage(REQUEST, first) and first.usage.output_tokens > 0
    assert second.usage.input_tokens > first.usage.input_tokens


def test_validating_scripted_model_rejects_what_the_api_would():
    bad = ModelRequest(model="m", max_tokens=10, system=[], messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "x", "input": {}}]},
        {"role": "user", "content": "and?"}])
    model = ScriptedModel([text_response("never")], validate=True)
    with pytest.raises(errors.BadRequestError, match="without `tool_result`"):
        list(model.stream(bad))
    checked = ScriptedModel([text_response("ok")], validate=True)
    assert list(checked.stream(REQUEST))[-1].text == "ok"

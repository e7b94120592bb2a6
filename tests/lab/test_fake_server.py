"""The fake Anthropic server: strict validation, its own token counts and caching, and every
fault, end to end through the real SDK (AnthropicClient)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx2
import pytest

from memgpt_lite.engine import errors
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.events import TextDelta
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.lab.fake_server import (
    Counting,
    FakeAnthropicServer,
    connection_reset,
    count_tokens,
    error_event,
    fault_from_dict,
    first_difference,
    genuine_thinking,
    hang,
    http_error,
    malformed_json,
    not_utf8,
    odd_values,
    overloaded,
    prompt_blocks,
    rate_limited,
    server_error,
    sign_thinking,
    truncated,
    unauthorized,
)
from memgpt_lite.lab.scripted import text_response, tool_response


def thinking_block(text: str, signature: str = "sig") -> dict:
    """A thinking block as the API returns it."""
    return {"type": "thinking", "thinking": text, "signature": signature}

TOOL = {"name": "archival_search", "description": "search archival memory",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
CC = {"type": "ephemeral"}


def user(*blocks):
    return {"role": "user", "content": [b if isinstance(b, dict) else text(b) for b in blocks]}


def assistant(*blocks):
    return {"role": "assistant", "content": [b if isinstance(b, dict) else text(b) for b in blocks]}


def text(t, **extra):
    return {"type": "text", "text": t, **extra}


def use(tool_id, name="archival_search", **args):
    return {"type": "tool_use", "id": tool_id, "name": name, "input": args}


def result(tool_id, content="ok"):
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def body(messages, **extra):
    return {"model": "claude-sonnet-5-5", "max_tokens": 100, "messages": messages, **extra}


def request(messages, **extra) -> ModelRequest:
    return ModelRequest(model="claude-sonnet-5-5", max_tokens=100,
                        system=extra.pop("system", [text("You are a memory agent.")]),
                        messages=messages, **extra)


@pytest.fixture
def server():
    with FakeAnthropicServer() as s:
        yield s
    assert s.errors == []


def client(server, **kw) -> AnthropicClient:
    kw.setdefault("max_retries", 0)
    return AnthropicClient(base_url=server.base_url, api_key="test", **kw)


def final(c, req) -> ModelResponse:
    return list(c.stream(req))[-1]


# --------------------------------------------------------------------------- validation rules

ROUND_TRIP = [user("find cats"), assistant("Looking.", use("toolu_1", query="cats"),
                                           use("toolu_2", query="kittens")),
              user(result("toolu_1"), result("toolu_2"), "thanks"), assistant("Found them."),
              user("bye")]


def test_a_full_parallel_tool_round_trip_is_valid():
    assert validate_request(body(ROUND_TRIP, tools=[TOOL], system=[text("sys")])) is None


def test_consecutive_user_messages_are_merged_like_the_api_does():
    assert validate_request(body([user("a"), user("b")])) is None


@pytest.mark.parametrize("messages,expected", [
    ([assistant("hi"), user("x")], 'first message must use the "user" role'),
    ([], "at least one message"),
    ([user("x"), assistant(use("toolu_1")), user("next")],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "toolu_1"),
    ([user("x"), assistant(use("toolu_1"))], "without `tool_result` blocks"),
    ([user("x"), assistant(use("toolu_1"), use("toolu_2")), user(result("toolu_1"))],
     "immediately after: toolu_2"),
    ([user("x"), assistant(use("toolu_1")), user("first", result("toolu_1"))],
     "`tool_result` blocks must come first"),
    ([user("x"), assistant("no tools"), user(result("toolu_9"))],
     "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"),
    ([user(result("toolu_9"))], "unexpected `tool_use_id`"),
    ([user("x"), assistant(use("toolu_1")), user(result("toolu_1"), result("toolu_1"))],
     "unexpected `tool_use_id`"),
    ([user("x"), assistant(use("toolu_1")), user(result("toolu_1")), assistant(use("toolu_1")),
      user(result("toolu_1"))], "`tool_use` ids must be unique"),
    ([user(text(""))], "text content blocks must contain non-whitespace text"),
    ([user(text("  \n"))], "non-whitespace"),
    ([{"role": "user", "content": ""}], "non-empty content"),
    ([{"role": "user", "content": []}], "non-empty content"),
    ([{"role": "system", "content": "x"}], "Input should be 'user' or 'assistant'"),
    ([user(use("toolu_1"))], "`tool_use` blocks are not allowed in user messages"),
    ([user("x"), assistant(result("toolu_1"))], "not allowed in assistant messages"),
    ([user({"type": "banana"})], "unknown content block type"),
    ([user(text("x", colour="red"))], "colour: Extra inputs are not permitted"),
    ([user("x"), assistant("prefill ")], "cannot end with trailing whitespace"),
    ([user("x"), assistant({"type": "thinking", "thinking": "t"})], "signature: Field required"),
])
def test_invalid_messages_are_rejected_with_the_api_wording(messages, expected):
    problem = validate_request(body(messages))
    assert problem is not None and expected in problem


def test_five_cache_breakpoints_are_rejected_four_are_fine():
    tools = [dict(TOOL, cache_control=CC)]
    system = [text("a", cache_control=CC), text("b", cache_control=CC)]
    four = body([user(text("c", cache_control=CC))], tools=tools, system=system)
    assert validate_request(four) is None
    five = body([user(text("c", cache_control=CC)), assistant("d"),
                 user(result_free := text("e", cache_control=CC))], tools=tools, system=system)
    assert result_free["cache_control"] == CC
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." == \
        validate_request(five)


def test_cache_control_inside_tool_results_and_at_top_level_count_too():
    nested = {"type": "tool_result", "tool_use_id": "toolu_1",
              "content": [text("r", cache_control=CC)], "cache_control": CC}
    msgs = [user(text("a", cache_control=CC)), assistant(use("toolu_1")), user(nested)]
    assert "Found 5" in validate_request(body(msgs, system=[text("s", cache_control=CC)],
                                              cache_control=CC))


@pytest.mark.parametrize("extra,expected", [
    ({"tools": [dict(TOOL, name="bad name!")]}, "tools.0.name: String should match pattern"),
    ({"tools": [TOOL, TOOL]}, "Tool names must be unique"),
    ({"tools": [dict(TOOL, input_schema={"type": "string"})]},
     "input_schema: JSON schema is invalid"),
    ({"tools": [{"name": "x"}]}, "input_schema"),
    ({"tool_choice": {"type": "any"}}, "only be specified while providing tools"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
    ({"tools": [TOOL], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": 500}}, "greater than or equal to 1024"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "`max_tokens` must be greater"),
    ({"thinking": {"type": "on"}}, "thinking.type"),
    ({"max_tokens": 5000, "tools": [TOOL], "tool_choice": {"type": "any"},
      "thinking": {"type": "enabled", "budget_tokens": 1024}}, "tool_choice forces tool use"),
    ({"system": [text("")]}, "system.0.text"),
    ({"system": [text("s", cache_control={"type": "forever"})]}, "cache_control"),
    ({"temperature_x": 1}, "temperature_x: Extra inputs are not permitted"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"model": ""}, "model: Field required"),
])
def test_invalid_request_options_are_rejected(extra, expected):
    problem = validate_request(body([user("hi")], **extra))
    assert problem is not None and expected in problem


def test_missing_max_tokens_is_rejected_but_count_tokens_does_not_need_it():
    b = body([user("hi")])
    del b["max_tokens"]
    assert validate_request(b) == "max_tokens: Field required"
    assert validate_request(b, count_only=True) is None


def test_with_thinking_the_tool_loop_assistant_message_must_start_with_thinking():
    thinking = {"type": "enabled", "budget_tokens": 1024}
    loop = [user("x"), assistant(use("toolu_1")), user(result("toolu_1"))]
    problem = validate_request(body(loop, max_tokens=4000, thinking=thinking, tools=[TOOL]))
    assert "Expected `thinking` or `redacted_thinking`, but found `tool_use`" in problem
    loop[1] = assistant(thinking_block("plan", sign_thinking("plan")), use("toolu_1"))
    assert validate_request(body(loop, max_tokens=4000, thinking=thinking, tools=[TOOL]),
                            check_signature=genuine_thinking) is None


@pytest.mark.parametrize("messages", [
    [user("x"), assistant(use("toolu_1")), user(result("toolu_1"))],
    [user("x"), assistant(use("toolu_1")), user(result("toolu_1")), assistant("done"),
     user("next")],
])
def test_a_history_with_tool_blocks_needs_tools_defined(messages):
    # The API refuses it even when the tools are not to be used now (tool_choice "none"
    # is the way to withhold them), e.g. a summariser call that reuses the history.
    assert validate_request(body(messages)) == (
        "Requests which include `tool_use` or `tool_result` blocks must define tools.")
    assert validate_request(body(messages, tools=[TOOL])) is None
    assert validate_request(body(messages, tools=[TOOL], tool_choice={"type": "none"})) is None


THINKING = {"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 1024}}


@pytest.mark.parametrize("extra,expected", [
    ({**THINKING, "temperature": 0.2}, "`temperature` may only be set to 1 when thinking"),
    ({"thinking": {"type": "adaptive"}, "temperature": 0}, "`temperature` may only be set to 1"),
    ({**THINKING, "top_k": 40}, "`top_k` must be unset when thinking"),
    ({**THINKING, "top_p": 0.9}, "`top_p` must be greater than or equal to 0.95"),
    ({"temperature": 1.5}, "temperature: Input should be a number between 0 and 1"),
    ({"top_p": "high"}, "top_p: Input should be a number"),
    ({"top_k": -1}, "top_k: Input should be a non-negative integer"),
])
def test_sampling_options_are_checked_and_limited_with_thinking(extra, expected):
    problem = validate_request(body([user("hi")], **extra))
    assert problem is not None and expected in problem


@pytest.mark.parametrize("extra", [
    {**THINKING, "temperature": 1, "top_p": 0.95}, {"temperature": 0, "top_k": 5, "top_p": 0.5},
    {"thinking": {"type": "disabled"}, "temperature": 0.3},
])
def test_sampling_options_within_the_limits_are_fine(extra):
    assert validate_request(body([user("hi")], **extra)) is None


def test_edited_thinking_fails_the_signature_check():
    edited = [user("x"), assistant(thinking_block("edited plan", sign_thinking("plan")), "ok"),
              user("y")]
    assert "Invalid `signature`" in validate_request(body(edited), check_signature=genuine_thinking)
    assert validate_request(body(edited)) is None  # off by default (ScriptedModel scripts)


# --------------------------------------------------------------------------- tokens and caching


def test_the_server_counts_tokens_its_own_way():
    b = body([user("word " * 700)])
    assert count_tokens(b) > len(json.dumps(b["messages"])) / 4  # more than a chars/4 guess
    assert count_tokens(body([user("word " * 800)])) > count_tokens(b)


def test_the_server_can_count_pessimistically_by_chars_or_utf8_bytes():
    english, cjk = body([user("word " * 700)]), body([user("記憶" * 700)])
    double = Counting(chars_per_token=1.75)
    assert count_tokens(english, double) > 1.9 * count_tokens(english)  # overheads stay
    # per byte: a CJK character is three UTF-8 bytes, so it costs three times its characters
    assert count_tokens(cjk, Counting(per_byte=True)) > 2.5 * count_tokens(cjk)
    with FakeAnthropicServer(context_window=1_000, counting=double) as s:
        req = request([user("word " * 400)])  # fits by the default count, not by this one
        with pytest.raises(errors.PromptTooLongError) as info:
            list(client(s).stream(req))
        assert info.value.actual == count_tokens(s.requests[-1], double) > 1_000
        assert count_tokens(s.requests[-1]) < 1_000
        assert client(s).count_tokens(req) == info.value.actual


def test_prompt_cache_writes_then_reads_a_stable_prefix(server):
    server.cache.min_tokens = 100
    system = [text("Stable instructions. " * 100, cache_control=CC)]
    c = client(server)
    first = final(c, request([user("one")], system=system, tools=[TOOL]))
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    second = final(c, request([user("two")], system=system, tools=[TOOL]))
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.total_input == count_tokens(server.requests[-1])


def test_a_moving_breakpoint_reads_the_previous_prefix_and_writes_only_the_new_part(server):
    server.cache.min_tokens = 100
    system = [text("Stable instructions. " * 100)]
    turn1 = [user(text("first question " * 20, cache_control=CC))]
    c = client(server)
    a = final(c, request(turn1, system=system))
    turn2 = [user(text("first question " * 20)), assistant("answer"),
             user(text("second question", cache_control=CC))]
    b = final(c, request(turn2, system=system))
    assert b.usage.cache_read_input_tokens == a.usage.cache_creation_input_tokens
    assert 0 < b.usage.cache_creation_input_tokens < a.usage.cache_creation_input_tokens


def test_small_prefixes_are_not_cached():
    with FakeAnthropicServer() as s:  # default minimum: 1024 tokens
        c = client(s)
        req = request([user(text("short", cache_control=CC))])
        assert final(c, req).usage.cache_creation_input_tokens == 0
        assert final(c, req).usage.cache_read_input_tokens == 0


def test_over_the_context_window_is_prompt_too_long_with_the_servers_numbers():
    with FakeAnthropicServer(context_window=500) as s:
        req = request([user("many words " * 300)])
        with pytest.raises(errors.PromptTooLongError) as info:
            list(client(s).stream(req))
        assert info.value.actual == count_tokens(s.requests[-1]) > 500
        assert info.value.maximum == 500


def test_count_tokens_endpoint(server):
    req = request([user("hello " * 50)], tools=[TOOL])
    assert client(server).count_tokens(req) == count_tokens(server.count_requests[-1])


# --------------------------------------------------------------------------- responses


def test_default_reply_echoes_and_streams_in_deltas(server):
    items = list(client(server).stream(request([user("tell me about hexo")])))
    assert items[-1].text == "Fake reply to: tell me about hexo"
    assert len([i for i in items if isinstance(i, TextDelta)]) >= 2
    assert items[-1].id.startswith("msg_fake_") and items[-1].model == "claude-sonnet-5-5"


def test_scripted_tool_round_trip_end_to_end(server):
    server.enqueue(tool_response([("archival_search", {"query": "cats"}),
                                  ("archival_search", {"query": "dogs"})], text="Searching."))
    server.enqueue(lambda b: text_response(f"got {len(b['messages'])} messages"))
    c = client(server)
    first = final(c, request([user("pets?")], tools=[TOOL]))
    calls = first.tool_calls
    assert [call.input for call in calls] == [{"query": "cats"}, {"query": "dogs"}]
    follow = [user("pets?"), {"role": "assistant", "content": first.content},
              user(*[result(call.id, "none found") for call in calls])]
    assert final(c, request(follow, tools=[TOOL])).text == "got 3 messages"
    assert server.pending == 0 and len(server.requests) == 2
    assert server.requests[1]["messages"][1]["content"] == first.content


def test_thinking_round_trips_through_the_server_and_edits_are_caught(server):
    server.enqueue(ModelResponse([thinking_block("I should search."),
                                  {"type": "tool_use", "id": "toolu_t", "name": "archival_search",
                                   "input": {"query": "x"}}], "tool_use", Usage()))
    thinking = {"type": "enabled", "budget_tokens": 1024}
    c = client(server)
    base = dict(tools=[TOOL], thinking=thinking)
    first = final(c, ModelRequest("claude-sonnet-5-5", 4000, [], [user("go")], **base))
    assert first.content[0]["signature"] == sign_thinking("I should search.")
    ok = [user("go"), {"role": "assistant", "content": first.content}, user(result("toolu_t"))]
    assert final(c, ModelRequest("claude-sonnet-5-5", 4000, [], ok, **base)).text
    tampered = json.loads(json.dumps(ok))
    tampered[1]["content"][0]["thinking"] = "I changed my mind."
    with pytest.raises(errors.BadRequestError, match="Invalid `signature`"):
        list(c.stream(ModelRequest("claude-sonnet-5-5", 4000, [], tampered, **base)))


@pytest.mark.parametrize("stop_reason", ["end_turn", "tool_use", "max_tokens", "pause_turn",
                                         "refusal", "model_context_window_exceeded"])
def test_any_stop_reason_can_be_served(server, stop_reason):
    server.enqueue(text_response("cut", stop_reason=stop_reason))
    assert final(client(server), request([user("x")])).stop_reason == stop_reason


def test_non_streaming_requests_get_a_json_message(server):
    server.enqueue(text_response("plain"))
    r = httpx2.post(f"{server.base_url}/v1/messages", json=body([user("x")]),
                    headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200
    msg = r.json()
    assert msg["content"] == [{"type": "text", "text": "plain"}] and msg["type"] == "message"
    assert msg["usage"]["input_tokens"] == count_tokens(body([user("x")]))


def test_invalid_requests_get_400_and_do_not_consume_the_queue(server):
    server.enqueue(text_response("kept for later"))
    bad = request([user("x"), assistant(use("toolu_1")), user("no result")])
    with pytest.raises(errors.BadRequestError) as info:
        list(client(server).stream(bad))
    assert "without `tool_result` blocks" in info.value.message
    assert server.pending == 1 and server.log[-1]["status"] == 400
    assert final(client(server), request([user("x")])).text == "kept for later"


def test_requests_from_the_assistant_first_are_rejected_end_to_end(server):
    with pytest.raises(errors.BadRequestError, match='first message must use the "user" role'):
        list(client(server).stream(request([assistant("hi"), user("x")])))


def test_missing_or_wrong_api_key_is_401():
    with FakeAnthropicServer(api_key="right") as s:
        with pytest.raises(errors.AuthError, match="ANTHROPIC_API_KEY"):
            list(AnthropicClient(base_url=s.base_url, api_key="wrong", max_retries=0).stream(
                request([user("x")])))
        r = httpx2.post(f"{s.base_url}/v1/messages", json=body([user("x")]),
                        headers={"anthropic-version": "2023-06-01"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("fault,error,words", [
    (rate_limited(retry_after=0), errors.RateLimitError, "Rate limited"),
    (overloaded(), errors.OverloadedError, "overloaded"),
    (server_error(), errors.ModelError, "server error (500"),
    (unauthorized(), errors.AuthError, "ANTHROPIC_API_KEY"),
    (connection_reset(), errors.APIConnectionError, "connection"),
    (error_event(after=4), errors.StreamError, "overloaded_error"),
    (malformed_json(after=4), errors.StreamError, "malformed"),
    (truncated(after=5), errors.StreamError, "ended before"),
    (connection_reset(after=4), errors.StreamError, "broke mid-reply"),
    (not_utf8(after=3), errors.StreamError, "not UTF-8"),
    (http_error(400, "invalid_request_error", "prompt is too long: 9 tokens > 5 maximum"),
     errors.PromptTooLongError, "9 tokens > 5"),
])
def test_each_fault_ends_in_one_clear_error_and_the_next_call_works(server, fault, error, words):
    server.enqueue(fault)
    c = client(server)
    with pytest.raises(error) as info:
        list(c.stream(request([user("hello there, how are you")])))
    assert type(info.value) is error
    assert words in info.value.message and "\n" not in info.value.message
    assert final(c, request([user("again")])).text == "Fake reply to: again"


def test_rate_limit_is_retried_by_the_sdk_and_the_message_says_so(server):
    server.enqueue(rate_limited(retry_after=0.01), times=2)
    with pytest.raises(errors.RateLimitError) as info:
        list(client(server, max_retries=1).stream(request([user("x")])))
    assert "after 1 retry" in info.value.message
    assert len(server.requests) == 2


def test_a_retry_that_succeeds_is_invisible(server):
    server.enqueue(overloaded())
    server.enqueue(text_response("made it"))
    server.enqueue(rate_limited(retry_after=0.01))
    assert final(client(server, max_retries=1), request([user("x")])).text == "made it"
    assert server.pending == 1


@pytest.mark.parametrize("fault", [hang(seconds=2.0), hang(seconds=2.0, after=4)])
def test_a_hanging_server_times_out_quickly(server, fault):
    server.enqueue(fault)
    started = time.monotonic()
    with pytest.raises(errors.APIConnectionError, match="(?i)timed out"):
        list(client(server, timeout=0.3).stream(request([user("x")])))
    assert time.monotonic() - started < 1.5


def test_deltas_before_a_mid_stream_error_reach_the_caller(server):
    server.enqueue(text_response("a fairly long reply that streams in pieces"))
    server.enqueue(error_event(after=5))
    c = client(server)
    assert final(c, request([user("x")]))
    seen = []
    with pytest.raises(errors.StreamError):
        for item in c.stream(request([user("x")])):
            seen.append(item)
    assert seen and all(isinstance(i, TextDelta) for i in seen)


def test_faults_can_be_written_as_json_for_scripts():
    assert fault_from_dict({"fault": "rate_limited", "retry_after": 3}) == rate_limited(3)
    assert fault_from_dict({"fault": "truncated", "after": 2}) == truncated(2)
    assert fault_from_dict({"fault": "odd_values", "id": 5}) == odd_values(id=5)
    cut = fault_from_dict({"fault": "truncated", "after": 4, "reply": text_response("x").to_dict()})
    assert cut.reply is not None and cut.reply.text == "x"


def test_odd_values_are_sent_where_the_api_sends_text(server):
    server.enqueue(odd_values(id=7, model=None, stop_reason={"a": 1}))
    with httpx2.stream("POST", f"{server.base_url}/v1/messages",
                       json=body([user("x")], stream=True),
                       headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as r:
        data = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    start = data[0]["message"]
    delta = next(d["delta"] for d in data if d["type"] == "message_delta")
    assert (start["id"], start["model"], delta["stop_reason"]) == (7, None, {"a": 1})


def test_a_request_holding_a_lone_surrogate_is_refused_as_a_strict_server_does(server):
    raw = json.dumps(body([user("lone \ud800 here")])).encode()  # JSON escapes it: ASCII bytes
    r = httpx2.post(f"{server.base_url}/v1/messages", content=raw,
                    headers={"x-api-key": "k", "anthropic-version": "2023-06-01",
                             "content-type": "application/json"})
    assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"]


@pytest.mark.slow
def test_runs_as_a_module_for_manual_testing(tmp_path):
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps(text_response("scripted hello").to_dict()) + "\n"
                      + json.dumps({"fault": "overloaded"}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite.lab.fake_server", "--port", "0",
                             "--script", str(script)], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        base_url = line.split(" on ", 1)[1].split()[0]
        c = AnthropicClient(base_url=base_url, api_key="test", max_retries=0)
        assert final(c, request([user("x")])).text == "scripted hello"
        with pytest.raises(errors.OverloadedError):
            list(c.stream(request([user("x")])))
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def _body(*messages: dict, system: str = "Be brief.") -> dict:
    return {"model": "claude-sonnet-5-5", "max_tokens": 10,
            "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": list(messages)}


def test_prompt_blocks_are_named_in_cache_order_with_their_breakpoints():
    body = _body({"role": "user", "content": [{"type": "text", "text": "hi"},
                                              {"type": "text", "text": "there"}]})
    blocks = prompt_blocks(body)
    assert [b.name for b in blocks] == ["tools[t]", "system[0]", "messages[0].user[0]:text",
                                        "messages[0].user[1]:text"]
    assert [b.breakpoint for b in blocks] == [False, True, False, False]
    assert blocks[-1].tokens == count_tokens(body)  # running totals, as the cache counts
    assert "cache_control" not in blocks[1].text  # moving a breakpoint keeps the prefix


def test_first_difference_names_the_block_and_byte_where_prompts_part():
    hi = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ho = {"role": "user", "content": [{"type": "text", "text": "ho"}]}
    same = first_difference(_body(hi), _body(hi))
    assert same.block is None and same.index == 3
    parted = first_difference(_body(hi), _body(ho))
    assert (parted.block, parted.index) == ("messages[0].user[0]:text", 2)
    written = "".join(b.text for b in prompt_blocks(_body(hi)))
    assert written[parted.byte - 1] == "h" and written[parted.byte] == "i"
    assert first_difference(_body(hi), _body(hi, system="Be long.")).block == "system[0]"
    assert first_difference(_body(hi), {**_body(hi), "model": "other"}).block == "model"


@pytest.mark.parametrize("line,reason", [
    ('{"fault": "nope"}', "unknown fault 'nope'"),
    ('{"fault": "hang", "bogus": 1}', "unexpected keyword argument 'bogus'"),
    ("[1, 2]", "line 1 is not a reply or a fault"),
    ("{not json", "line 1 is not a reply or a fault"),
])
def test_a_bad_script_line_is_one_sentence_naming_it(tmp_path, capsys, line, reason):
    from memgpt_lite.lab.fake_server import main

    script = tmp_path / "bad.jsonl"
    script.write_text(line + "\n")
    with pytest.raises(SystemExit) as info:
        main(["--port", "0", "--script", str(script)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and reason in err and "Traceback" not in err
    assert "the faults are rate_limited" in err

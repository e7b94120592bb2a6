"""The agent loop over the real anthropic SDK, offline (httpx2.MockTransport)."""

from __future__ import annotations

import json

import httpx2

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import count_cache_controls, validate_request
from memgpt_lite.engine.events import (
    ErrorEvent,
    TextDelta,
    ToolResultEvent,
    TurnEndEvent,
)
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import sse_events

USAGE = {"input_tokens": 900, "output_tokens": 20, "cache_creation_input_tokens": 0,
         "cache_read_input_tokens": 1500}


def streamed(content, stop_reason) -> httpx2.Response:
    msg = {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
           "content": content, "stop_reason": stop_reason, "stop_sequence": None,
           "usage": USAGE}
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n"
                   for name, data in sse_events(msg, 5))
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


class API:
    """Answers each /v1/messages call from a list; keeps every request body."""

    def __init__(self, *replies: httpx2.Response):
        self.replies = list(replies)
        self.bodies: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        return self.replies.pop(0)


def agent_over(tmp_path, api: API) -> Agent:
    client = AnthropicClient(api_key="test", max_retries=0,
                             http_client=httpx2.Client(transport=httpx2.MockTransport(api)))
    return Agent.open(SQLiteStore(tmp_path / "sdk.db"), "sdk", model_client=client)


def test_parallel_tool_round_trip_through_the_sdk(tmp_path):
    api = API(
        streamed([{"type": "text", "text": "Saving that."},
                  {"type": "tool_use", "id": "toolu_a", "name": "core_memory_append",
                   "input": {"label": "human", "content": "Name: Ada."}},
                  {"type": "tool_use", "id": "toolu_b", "name": "archival_insert",
                   "input": {"content": "Ada deploys with hexo g.", "tags": ["blog"]}}],
                 "tool_use"),
        streamed([{"type": "text", "text": "Got it, Ada — hexo it is."}], "end_turn"))
    agent = agent_over(tmp_path, api)
    events = list(agent.step("I'm Ada; I deploy my blog with hexo g."))
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Saving that.Got it, Ada — hexo it is."
    assert [e.result.is_error for e in events if isinstance(e, ToolResultEvent)] == [False, False]
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and end.completed
    assert end.usage.total_input == 2 * 2400
    second = api.bodies[1]
    assert validate_request(second) is None and count_cache_controls(second) <= 4
    results = second["messages"][-1]["content"]
    assert [b["tool_use_id"] for b in results[:2]] == ["toolu_a", "toolu_b"]
    assert "Name: Ada." in agent.store.get_block(agent.id, "human").value


def test_an_api_error_through_the_sdk_is_one_sentence_and_retryable(tmp_path):
    overloaded = httpx2.Response(529, json={"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})
    api = API(overloaded, streamed([{"type": "text", "text": "Back."}], "end_turn"))
    agent = agent_over(tmp_path, api)
    events = list(agent.step("hello"))
    error = next(e for e in events if isinstance(e, ErrorEvent))
    assert error.retryable and "\n" not in error.message and not events[-1].completed
    assert list(agent.step(agent.last_user_text()))[-1].text == "Back."

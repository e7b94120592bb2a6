"""What of a model's reply enters the history, checked through the real SDK against the strict
fake server: the next request must stay valid whatever ids and names the model's tool calls
carry."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import ModelResponse, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import text_response


def calls(*blocks: tuple[str, str, dict]) -> ModelResponse:
    content = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in blocks]
    return ModelResponse(content=content, stop_reason="tool_use", usage=Usage(100, 10))


def run_turns(tmp_path, *replies: ModelResponse, turns: int = 2):
    store = SQLiteStore(tmp_path / "replies.db")
    with FakeAnthropicServer() as server:
        for reply in replies:
            server.enqueue(reply)
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(store, "a", model_client=client)
        ends = [list(agent.step(f"message {i}"))[-1] for i in range(turns)]
        for body in server.requests:
            validate_request(body)
    return store, agent, ends


def results_of(store: SQLiteStore, agent: Agent) -> list[dict]:
    return [b for m in store.context_messages(agent.id) for b in m.content
            if b.get("type") == "tool_result"]


def test_the_same_tool_use_id_twice_in_one_reply_does_not_break_the_turn(tmp_path):
    store, agent, ends = run_turns(
        tmp_path,
        calls(("t1", "core_memory_append", {"label": "human", "content": "Name: Ada"}),
              ("t1", "core_memory_append", {"label": "human", "content": "Likes tea"})),
        text_response("Noted."), text_response("Hello again."))
    assert [e.completed for e in ends] == [True, True], ends
    assert ends[0].text == "Noted."
    assert store.get_block(agent.id, "human").value == "Name: Ada\nLikes tea"
    ids = [r["tool_use_id"] for r in results_of(store, agent)]
    assert len(ids) == 2 and len(set(ids)) == 2 and ids[0] == "t1"


def test_a_tool_use_id_from_an_earlier_turn_is_not_sent_twice(tmp_path):
    store, agent, ends = run_turns(
        tmp_path,
        calls(("t1", "archival_insert", {"content": "Ada deploys with hexo."})),
        text_response("Stored."),
        calls(("t1", "archival_search", {"query": "hexo"})),
        text_response("Found it."))
    assert [e.completed for e in ends] == [True, True], ends
    assert ends[1].text == "Found it."
    ids = [r["tool_use_id"] for r in results_of(store, agent)]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_a_tool_call_with_an_id_or_name_the_api_refuses_is_answered_and_the_turn_goes_on(
        tmp_path):
    store, agent, ends = run_turns(
        tmp_path,
        calls(("c1", "no such tool!", {})),
        text_response("Sorry."),
        calls(("bad id.1", "core_memory_append", {"label": "human", "content": "Name: Ada"})),
        text_response("Noted."))
    assert [e.completed for e in ends] == [True, True], ends
    first, second = results_of(store, agent)
    assert first["is_error"] and "Unknown tool" in first["content"]
    assert not second.get("is_error") and second["tool_use_id"] == "bad_id_1"
    assert store.get_block(agent.id, "human").value == "Name: Ada"

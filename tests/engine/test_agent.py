"""The agent loop: tool round trips, stop reasons, atomic turns, bounds, persistence."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import count_cache_controls, validate_request
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.events import (
    ErrorEvent,
    MemoryEditEvent,
    NoticeEvent,
    TextDelta,
    ToolResultEvent,
    TurnEndEvent,
)
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import ModelResponse, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.fake_server import FakeAnthropicServer, http_error
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


def thinking_block(text: str, signature: str = "sig") -> dict:
    """A thinking block as the API returns it."""
    return {"type": "thinking", "thinking": text, "signature": signature}


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "agent.db")
    yield s
    s.close()


def run(agent: Agent, text: str) -> list:
    return list(agent.step(text))


def make(store, script, **settings) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(script, validate=True)
    return Agent.open(store, "t", model_client=model, settings=Settings(**settings)), model


def last_user_blocks(request) -> list[dict]:
    return request.messages[-1]["content"]


def test_parallel_tool_round_trip(store):
    agent, model = make(store, [
        tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada."}),
                       ("archival_insert", {"content": "Ada deploys her blog with hexo."})]),
        text_response("Nice to meet you, Ada."),
    ])
    events = run(agent, "I'm Ada and I deploy my blog with hexo.")
    second = model.requests[1].messages
    # both results come back first, in order, in the one user message after the tool_use
    results = [b for b in second[-1]["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [b["id"] for b in second[-2]["content"]]
    assert second[-1]["content"][:2] == results
    assert any(isinstance(e, MemoryEditEvent) and e.label == "human" for e in events)
    summaries = [e.summary for e in events if isinstance(e, ToolResultEvent)]
    assert summaries[0].startswith("core_memory_append human +")
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and end.completed
    assert end.text == "Nice to meet you, Ada."
    assert "Name: Ada." in store.get_block(agent.id, "human").value
    assert store.search_passages(agent.id, "hexo").total == 1
    model.assert_complete()


def test_streamed_text_arrives_in_deltas(store):
    agent, _ = make(store, [text_response("A reply long enough for several deltas.")])
    deltas = [e.text for e in run(agent, "hi") if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "A reply long enough for several deltas."


def test_request_shape_and_layout(store):
    agent, model = make(store, [text_response("one"), tool_response(
        [("conversation_search", {"query": "one"})]), text_response("two")])
    run(agent, "first")
    run(agent, "second")
    for request in model.requests:
        body = request.to_api()
        assert validate_request(body) is None
        assert list(body)[:4] == ["model", "max_tokens", "system", "messages"]
        assert body["messages"][0]["role"] == "user"
        assert count_cache_controls(body) <= 4
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    last = model.requests[-1]
    # core memory is data in the last user message, after the tool_results
    blocks = last_user_blocks(last)
    assert blocks[0]["type"] == "tool_result"
    assert "<core_memory>" in blocks[1]["text"]
    # the queue's last message carries a breakpoint; stored messages never hold core memory
    assert any("cache_control" in b for b in last.messages[1]["content"])
    for m in store.context_messages(agent.id):
        assert "<core_memory>" not in json.dumps(m.content)


def test_core_memory_edit_changes_only_the_tail(store):
    agent, model = make(store, [
        text_response("ok"),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        text_response("noted"),
    ])
    run(agent, "hello")
    run(agent, "I like tea")
    before, after = model.requests[1].messages, model.requests[2].messages
    # everything before the current turn's last message is byte-identical across the edit
    assert before[:-1] == [m for m in after[: len(before) - 1]]
    assert "Likes tea." in after[-1]["content"][1]["text"]


@pytest.mark.parametrize("stop, notice", [
    ("max_tokens", "cut"), ("refusal", "declined"), ("end_turn", None)])
def test_stop_reasons(store, stop, notice):
    agent, _ = make(store, [text_response("partial", stop_reason=stop)])
    events = run(agent, "go")
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    if notice:
        assert any(notice in n for n in notices)
    else:
        assert not notices
    assert events[-1].completed and events[-1].stop_reason == stop


def test_max_tokens_drops_a_half_written_tool_use(store):
    cut = ModelResponse([{"type": "text", "text": "Let me save"},
                         {"type": "tool_use", "id": "toolu_cut", "name": "archival_insert",
                          "input": {}}], "max_tokens", Usage(10, 5))
    agent, model = make(store, [cut, text_response("next")])
    run(agent, "go")
    run(agent, "again")  # validate=True: an unanswered tool_use would be rejected here
    assert "toolu_cut" not in json.dumps(model.requests[1].messages)


def test_pause_turn_is_sent_back_to_continue(store):
    paused = ModelResponse([{"type": "text", "text": "Working…"}], "pause_turn", Usage(10, 5))
    agent, model = make(store, [paused, text_response("done")])
    events = run(agent, "long task")
    assert events[-1].text == "done"
    assert model.requests[1].messages[-1]["role"] == "assistant"  # continues the paused reply


def test_api_error_leaves_queue_untouched_and_text_in_recall(store):
    agent, _ = make(store, [text_response("first reply"), OverloadedError("Anthropic is overloaded.")])
    run(agent, "first")
    queue_before = store.context_messages(agent.id)
    events = run(agent, "remember the password rotation on friday")
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    # What broke, once; the chat adds what to do about it (see test_chat's event lines).
    assert errors and errors[0].retryable and errors[0].message == "Anthropic is overloaded."
    assert not events[-1].completed
    assert [m.id for m in store.context_messages(agent.id)] == [m.id for m in queue_before]
    assert store.search_messages(agent.id, "password rotation").total == 1
    assert agent.last_user_text() == "remember the password rotation on friday"


def test_interrupted_turn_leaves_no_orphan_tool_use(store):
    agent, model = make(store, [
        tool_response([("archival_search", {"query": "x"})]), text_response("never sent"),
        text_response("after")])
    gen = agent.step("search something")
    for event in gen:
        if isinstance(event, ToolResultEvent):
            gen.close()  # what the chat does on Ctrl-C
            break
    assert store.context_messages(agent.id) == []
    run(agent, "next")  # validate=True checks the next request is well formed
    assert len(model.requests) == 2


def test_turn_is_bounded_and_identical_calls_stop(store):
    same = [tool_response([("archival_search", {"query": "same"})]) for _ in range(3)]
    agent, model = make(store, [*same, text_response("giving up")])
    events = run(agent, "loop")
    assert any("identical" in e.message for e in events if isinstance(e, NoticeEvent))
    assert model.requests[-1].tool_choice == {"type": "none"}
    assert events[-1].completed


def test_call_limit_withholds_tools_on_last_call(store):
    script = [tool_response([("archival_search", {"query": f"q{i}"})]) for i in range(3)]
    agent, model = make(store, [*script, text_response("final")], max_calls_per_turn=4)
    events = run(agent, "go")
    assert len(model.requests) == 4
    assert model.requests[-1].tool_choice == {"type": "none"}
    assert all(r.tool_choice is None for r in model.requests[:-1])
    assert events[-1].text == "final"


def test_unknown_tool_and_bad_arguments_are_error_results(store):
    agent, model = make(store, [
        tool_response([("send_message", {"text": "hi"}),
                       ("core_memory_append", {"label": "human"})]),
        text_response("sorry")])
    events = run(agent, "go")
    results = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert all(r.is_error for r in results)
    assert "Unknown tool 'send_message'" in results[0].content
    assert events[-1].completed


def test_thinking_blocks_go_back_unchanged(store):
    from memgpt_lite.lab.fake_server import sign_thinking

    think = thinking_block("I should search.", sign_thinking("I should search."))
    first = ModelResponse([think, {"type": "tool_use", "id": "toolu_t1", "name": "archival_search",
                                   "input": {"query": "x"}}], "tool_use", Usage(10, 5))
    agent, model = make(store, [first, text_response("done")], thinking=True)
    run(agent, "think")
    assert model.requests[0].thinking == {"type": "enabled", "budget_tokens": 1024}
    assert model.requests[1].messages[1]["content"][0] == think


def test_empty_reply_keeps_the_queue_valid(store):
    empty = ModelResponse([], "end_turn", Usage(5, 0))
    agent, model = make(store, [empty, text_response("fine")])
    events = run(agent, "hi")
    assert any("empty" in e.message for e in events if isinstance(e, NoticeEvent))
    run(agent, "again")
    assert validate_request(model.requests[-1].to_api()) is None


def test_pop_and_last_user_text(store):
    agent, _ = make(store, [text_response("a"), text_response("b")])
    run(agent, "one")
    run(agent, "two")
    assert agent.pop_turns(1).turn_ids == [2]
    assert [m.turn_id for m in store.context_messages(agent.id)] == [1, 1]
    assert agent.last_user_text() == "one"


def test_usage_and_cost_are_accounted(store):
    agent, _ = make(store, [text_response("hi", usage=Usage(1000, 100, 200, 300))])
    events = run(agent, "hello")
    end = events[-1]
    assert end.usage.total_input == 1500
    assert end.cost_usd == pytest.approx((1000 * 3 + 200 * 3.75 + 300 * 0.3 + 100 * 15) / 1e6)
    assert Tally().add_all(events).cost_usd == pytest.approx(end.cost_usd)


RESTART = textwrap.dedent("""
    import json, sys
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.lab.scripted import ScriptedModel, text_response
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    store = SQLiteStore(sys.argv[1])
    model = ScriptedModel([text_response(sys.argv[3])], validate=True)
    agent = Agent.open(store, "restart", model_client=model)
    list(agent.step(sys.argv[2]))
    print(json.dumps(model.requests[-1].to_api()["messages"]))
""")


@pytest.mark.slow
def test_restart_continues_the_conversation(tmp_path):
    db = str(tmp_path / "r.db")

    def turn(text: str, reply: str) -> list:
        out = subprocess.run([sys.executable, "-c", RESTART, db, text, reply],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    turn("my cat is Miso", "Hello Miso's human")
    turn("I live in Lyon", "Lyon is lovely")
    messages = turn("what do you know?", "plenty")
    texts = json.dumps(messages)
    assert "my cat is Miso" in texts and "Lyon is lovely" in texts
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2 + ["user"]


def test_passages_are_dated_by_the_agent_clock(tmp_path):
    from datetime import datetime, timezone

    store = SQLiteStore(tmp_path / "clock.db")
    fixed = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    model = ScriptedModel([tool_response([("archival_insert", {"content": "Kyoto trip in May"})]),
                           text_response("saved")], validate=True)
    agent = Agent.open(store, "c", model_client=model, clock=lambda: fixed)
    run(agent, "remember my Kyoto trip")
    hit = store.search_passages(agent.id, "Kyoto").hits[0]
    assert hit.created_at == "2024-05-06T07:08:09Z"
    assert all(m.created_at == "2024-05-06T07:08:09Z" for m in store.context_messages(agent.id))


def test_an_empty_message_is_refused_before_anything_is_stored(store):
    agent, model = make(store, [])
    with pytest.raises(ValueError):
        list(agent.step("  \n"))
    assert store.agent_stats(agent.id)["messages"] == 0 and model.requests == []


def test_pause_turn_at_the_call_limit_ends_with_a_notice(store):
    paused = [ModelResponse([{"type": "text", "text": f"Working {i}…"}], "pause_turn",
                            Usage(10, 5)) for i in range(2)]
    agent, model = make(store, paused, max_calls_per_turn=2)
    events = run(agent, "long task")
    assert len(model.requests) == 2 and events[-1].completed
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    assert any("paused its turn" in n for n in notices)  # else the reply just stops mid-way


def test_each_call_of_a_turn_is_retried_once_after_the_provider_says_too_long(tmp_path):
    """A server that counts more than the estimate may refuse a turn's first call (a paste)
    and, once a tool ran, a later one (its result is what is new): each call is learned from
    and retried once, through the real SDK; only the same call refused twice fails the turn."""
    window = 20_000
    too_long = http_error(400, "invalid_request_error",
                          f"prompt is too long: {window + 900} tokens > {window} maximum")
    with FakeAnthropicServer(context_window=window) as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        store = SQLiteStore(tmp_path / "agent.db")
        agent = Agent.open(store, "a", model_client=client,
                           summary_client=ScriptedModel([text_response("- sum")] * 20),
                           settings=Settings(context_window=window))
        for i in range(3):
            list(agent.step(f"note {i} " + "about the garden and the bees " * 60))
        for reply in (too_long, tool_response([("archival_search", {"query": "bees"})]),
                      too_long, text_response("found them")):
            server.enqueue(reply)
        events = list(agent.step("what did I say about the bees?"))
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and end.completed, [
        e.message for e in events if isinstance(e, ErrorEvent)]
    assert end.text == "found them"
    assert [e.kind for e in events].count("prompt_too_long") == 2
    assert agent.last_user_text() == "what did I say about the bees?"
    assert store.turn_messages(agent.id, end.turn_id)[-1].role == "assistant"  # committed


KILLED_MID_RETRY = textwrap.dedent("""
    import sys
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.config import Settings
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    client = AnthropicClient(base_url=sys.argv[2], api_key="test", max_retries=0)
    agent = Agent.open(SQLiteStore(sys.argv[1]), "k", model_client=client,
                       settings=Settings(context_window=32_000))
    for event in agent.step("a long paste " * 2_500):
        print(event.kind, flush=True)
""")


@pytest.mark.slow
def test_a_window_the_provider_taught_survives_a_kill_during_the_retried_call(tmp_path):
    """The provider refused the first call, the window shrank to its maximum, and the
    process was killed (-9) while the retried call ran: the next start works within the
    learned window, instead of overflowing again to learn it anew."""
    import time

    from memgpt_lite.lab.fake_server import hang

    db = str(tmp_path / "k.db")
    with FakeAnthropicServer(context_window=10_000) as server:
        server.enqueue(hang(60))  # the retried call: the process dies while it waits
        child = subprocess.Popen([sys.executable, "-c", KILLED_MID_RETRY, db, server.base_url],
                                 stdout=subprocess.PIPE, text=True)
        try:
            for kind in ("prompt_too_long", "model_call"):  # refused, then the retry begins
                while (line := child.stdout.readline().strip()) != kind:
                    assert line, "the turn ended before the retried call"
            deadline = time.monotonic() + 30
            while len(server.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # the retried request reached the server: it is hanging
            assert len(server.requests) == 2
        finally:
            child.kill()
            child.wait()
        with SQLiteStore(db) as store:
            again = Agent.open(store, "k", model_client=AnthropicClient(
                base_url=server.base_url, api_key="test", max_retries=0),
                settings=Settings(context_window=32_000))
            assert again.settings.context_window == 10_000
            assert again.last_user_text().startswith("a long paste")  # kept for /retry
            again.close()

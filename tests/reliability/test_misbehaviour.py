"""The model misbehaves; the loop stays bounded, every request stays valid, the store sound.

Every ScriptedModel here validates each request with the fake server's API rules, so a
tool_use without its result, a non-object tool input sent back, or an empty text block would
fail the turn with a 400 and fail the test."""

from __future__ import annotations

import pytest
from rel_support import queue_problems, store_problems

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.records import ModelResponse, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


def run(tmp_path, script, text="hello", **agent_attrs):
    store = SQLiteStore(tmp_path / "data" / "memgpt_lite.db")
    model = ScriptedModel(script, validate=True)
    agent = Agent.open(store, "mis", model_client=model)
    for k, v in agent_attrs.items():
        setattr(agent, k, v)
    events = list(agent.step(text))
    assert queue_problems(store, agent.id) == []
    assert store_problems(store) == []
    return store, agent, model, events


def results(events):
    return [e.result for e in events if e.kind == "tool_result"]


def raw_tool_use(name, args, id_="toolu_raw1") -> ModelResponse:
    return ModelResponse([{"type": "tool_use", "id": id_, "name": name, "input": args}],
                         "tool_use", Usage(10, 10))


BAD_CALLS = {
    "unknown tool": ("delete_everything", {"really": True}, "Unknown tool"),
    # stored as {} (a non-object input would make the API reject every later request)
    "input is a list": ("core_memory_append", [1, 2], "Missing required argument"),
    "input is a string": ("archival_search", "cats", "Missing required argument"),
    "input is null": ("archival_search", None, "Missing required argument"),
    "missing argument": ("core_memory_append", {"label": "human"}, "Missing required"),
    "extra argument": ("archival_search", {"query": "x", "limit": 5}, "Unknown argument"),
    "wrong type": ("conversation_search", {"query": "x", "page": "two"}, "must be an integer"),
    "bool as int": ("archival_search", {"query": "x", "page": True}, "must be an integer"),
    "no such block": ("core_memory_append", {"label": "secrets", "content": "x"}, "no core memory"),
    "bad date": ("conversation_search", {"query": "x", "start_date": "yesterday"}, "YYYY-MM-DD"),
    "evict the current turn": ("evict_turns", {"turn_ids": [1], "summary": "s"}, "current"),
    "evict unknown turns": ("evict_turns", {"turn_ids": [99], "summary": "s"}, "99"),
    "evict wrong types": ("evict_turns", {"turn_ids": "all", "summary": 3}, "turn_ids"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_tool_call_becomes_an_error_result_the_model_can_act_on(tmp_path, case):
    name, args, words = BAD_CALLS[case]
    store, agent, model, events = run(tmp_path, [raw_tool_use(name, args),
                                                 text_response("Sorry, fixed.")])
    [result] = results(events)
    assert result.is_error and words.lower() in result.content.lower(), result.content
    assert events[-1].completed and events[-1].text == "Sorry, fixed."
    sent = model.requests[1].to_api()["messages"][-1]["content"]
    assert sent[0]["type"] == "tool_result" and sent[0]["is_error"] is True


def test_a_one_megabyte_argument(tmp_path):
    huge = "lorem ipsum " * 90_000  # ~1 MB
    store, agent, model, events = run(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": huge}),
                       ("archival_insert", {"content": huge})]),
        text_response("Stored what I could."),
        text_response("Still fine.")])
    core, archival = results(events)  # both refused by the schema's bound, with the reason
    assert core.is_error and archival.is_error and "at most 20,000" in archival.content
    assert events[-1].completed
    for request in model.requests:  # the 1 MB never goes back verbatim: the budget holds
        assert len(str(request.to_api())) < 400_000
    assert list(agent.step("and now?"))[-1].completed
    assert queue_problems(store, agent.id) == []


def test_endless_tool_calling_is_bounded(tmp_path):
    def keep_calling(request):  # a different call each time: no repeat detection
        n = sum(1 for m in request.messages for b in m["content"]
                if isinstance(b, dict) and b.get("type") == "tool_result")
        return tool_response([("archival_search", {"query": f"thing {n}"})])

    store = SQLiteStore(tmp_path / "data" / "memgpt_lite.db")
    model = ScriptedModel([keep_calling] * 40, validate=True)
    agent = Agent.open(store, "loop", model_client=model)
    events = list(agent.step("hello"))
    limit = agent.settings.max_calls_per_turn
    assert len(model.requests) <= limit, f"{len(model.requests)} model calls for one turn"
    assert events[-1].kind == "turn_end"
    assert any(e.kind == "notice" and "limit" in e.message for e in events)
    assert queue_problems(store, agent.id) == []


def test_identical_calls_stop_after_three(tmp_path):
    same = [tool_response([("archival_search", {"query": "same"})]) for _ in range(3)]
    store, agent, model, events = run(tmp_path, [*same, text_response("ok")])
    assert len(model.requests) == 4
    assert model.requests[-1].tool_choice == {"type": "none"}
    assert any(e.kind == "notice" and "identical" in e.message for e in events)


@pytest.mark.parametrize("content", [[], [{"type": "text", "text": ""}],
                                     [{"type": "text", "text": "   "}]])
def test_an_empty_response(tmp_path, content):
    empty = ModelResponse(content, "end_turn", Usage(10, 0))
    store, agent, model, events = run(tmp_path, [empty, text_response("second")])
    assert events[-1].completed
    assert list(agent.step("again"))[-1].completed  # the next request is valid


def test_tool_use_with_the_wrong_stop_reason(tmp_path):
    odd = ModelResponse([{"type": "tool_use", "id": "toolu_x", "name": "archival_search",
                          "input": {"query": "x"}}], "end_turn", Usage(10, 10))
    store, agent, model, events = run(tmp_path, [odd, text_response("done")])
    assert events[-1].completed


def test_many_parallel_calls_in_one_response(tmp_path):
    calls = [("archival_insert", {"content": f"fact number {i}"}) for i in range(50)]
    store, agent, model, events = run(tmp_path, [tool_response(calls), text_response("ok")])
    assert len(results(events)) == 50
    assert store.count_passages(agent.id) == 50

"""Imports are checked like user input: a hostile or damaged export is refused with one
sentence naming the field, and nothing is written."""

from __future__ import annotations

import copy

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import StoreError, transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> dict:
    store = SQLiteStore(tmp_path_factory.mktemp("x") / "db")
    model = ScriptedModel([tool_response([("archival_insert", {"content": "Ann likes tea"})]),
                           text_response("Noted."), text_response("Hi again.")])
    agent = Agent.open(store, "ann", model_client=model)
    list(agent.step("I like tea"))
    list(agent.step("hello"))
    doc = transfer.export_agent(store, "ann")
    store.close()
    return doc


def _queue(doc):
    return [m for m in doc["messages"] if m["in_context"]]


def _set(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


HOSTILE = [
    (("agent", "settings", "max_output_tokens"), 0, "max_output_tokens"),
    (("agent", "settings", "context_window"), "abc", "context_window"),
    (("agent", "settings", "context_window"), -5, "context_window"),
    (("agent", "settings", "context_window"), "32k", "context_window"),
    (("agent", "settings", "warn_fraction"), "high", "warn_fraction"),
    (("agent", "settings", "thinking"), "yes", "thinking"),
    (("agent", "settings", "model"), "", "model"),
    (("agent", "settings"), ["a"], "settings"),
    (("agent", "summary"), ["a"], "summary"),
    (("agent", "created_at"), "yesterday", "created_at"),
    (("agent", "name"), None, "name"),
    (("blocks", 0, "limit"), -1, "blocks[0]"),
    (("blocks", 0, "value"), "x" * 9_000, "blocks[0]"),
    (("passages", 0, "tags"), "tea", "passages[0].tags"),
    (("passages", 0, "text"), 42, "passages[0].text"),
    (("messages", 0, "content"), "plain text", "messages[0].content"),
    (("messages", 0, "role"), "system", "messages[0].role"),
    (("messages", 0, "turn_id"), "1", "messages[0].turn_id"),
    (("messages", 0, "turn_id"), 0, "messages[0].turn_id"),
    (("messages", 0, "created_at"), 12, "messages[0].created_at"),
    (("messages", 1, "content", 0, "input"), "not an object", "messages[1].content[0].input"),
    (("messages",), "nope", "messages"),
    (("block_history",), {"a": 1}, "block_history"),
]


@pytest.mark.parametrize("path, value, field", HOSTILE, ids=[h[2] + "=" + repr(h[1])[:12]
                                                             for h in HOSTILE])
def test_a_bad_field_is_named_and_nothing_is_written(tmp_path, export, path, value, field):
    doc = copy.deepcopy(export)
    _set(doc, path, value)
    with SQLiteStore(tmp_path / "db") as store:
        with pytest.raises(StoreError, match="damaged") as info:
            transfer.import_agent(store, doc, name="copy")
        assert field in str(info.value) and "nothing was imported" in str(info.value)
        assert str(info.value).count(".") <= 6  # one sentence, not a traceback
        assert store.list_agents() == []


def test_a_queue_the_api_would_refuse_is_refused(tmp_path, export):
    cases = {}
    unpaired = copy.deepcopy(export)  # the tool call loses its result
    unpaired["messages"] = [m for m in unpaired["messages"]
                            if not any(b["type"] == "tool_result" for b in m["content"])]
    cases["unpaired tool call"] = unpaired
    first = copy.deepcopy(export)  # the queue starts with the assistant
    first["messages"] = [m for m in first["messages"]
                         if not (m["role"] == "user" and m["turn_id"] == 2)]
    cases["assistant first"] = first
    empty = copy.deepcopy(export)
    _queue(empty)[-1]["content"] = [{"type": "text", "text": "   "}]
    cases["empty text"] = empty
    with SQLiteStore(tmp_path / "db") as store:
        for name, doc in cases.items():
            with pytest.raises(StoreError, match="queue") as info:
                transfer.import_agent(store, doc, name="copy")
            assert "nothing was imported" in str(info.value), name
        assert store.list_agents() == []
        assert transfer.import_agent(store, export, name="copy").name == "copy"

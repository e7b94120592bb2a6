"""The memory served to outside clients (`memgpt-lite mcp`): the chat's own tools with the
same inputs, limits and errors, plus core_memory_view and the blocks as resources; a second
connection beside a running chat (no lock, nothing lost, the chat's next request holds the
edit, strict replay still matches, undo never clobbers it); the client named in block
history; arguments redacted; forget reaches what it wrote. On SQLite and on Postgres."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memgpt_lite.engine import config, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import ConfigError
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.memory import MEMORY_TOOL_NAMES, default_blocks, memory_tool_schemas
from memgpt_lite.engine.memory_service import (
    TOOL_NAMES,
    MemoryService,
    author_of,
    block_uri,
    outside_tools,
)
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import StoreError, open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli


@pytest.fixture(params=["sqlite", "postgres"])
def target(request) -> str:
    if request.param == "sqlite":
        return str(config.db_path())
    return request.getfixturevalue("pg_url")


@pytest.fixture
def stores(target):
    """Two connections to one store: the chat's process and the MCP server's."""
    with open_store(target) as chat_store, open_store(target) as mcp_store:
        yield chat_store, mcp_store


def serve(store, tmp_path: Path, name: str = "work") -> MemoryService:
    return MemoryService.open(store, name, tmp_path)


def chat_agent(store, script=(), name: str = "work") -> Agent:
    return Agent.open(store, name, model_client=ScriptedModel(list(script), validate=True),
                      summary_client=ScriptedModel([]), lock_wait=None)


def append(content: str, label: str = "human"):
    return tool_response([("core_memory_append", {"label": label, "content": content})])


def human(store, name: str = "work") -> str:
    return store.get_block(store.get_agent(name).id, "human").value


# ---------------------------------------------------------------- the tools


def test_the_tools_are_the_chats_own_with_descriptions_for_an_outside_agent():
    tools = outside_tools()
    assert [t.name for t in tools] == ["core_memory_view", *MEMORY_TOOL_NAMES]
    chat = {t["name"]: t for t in memory_tool_schemas()}
    for tool in tools[1:]:
        assert tool.input_schema == chat[tool.name]["input_schema"]  # same inputs, limits
        assert tool.description != chat[tool.name]["description"]
    assert tools[0].input_schema["properties"] == {}
    text = {t.name: t.description for t in tools}
    assert "archival_insert" in text["core_memory_append"]  # what goes where
    assert "before you say you don't know" in text["conversation_search"]
    assert "before you say you don't know" in text["archival_search"]
    assert {t.name for t in tools if t.read_only} == {"core_memory_view", "conversation_search",
                                                       "archival_search"}


def test_every_tool_answers_good_input_and_refuses_bad_input(stores, tmp_path):
    service = serve(stores[1], tmp_path)
    good = service.call("core_memory_append", {"label": "human", "content": "Name: Ada."})
    assert not good.is_error and "Name: Ada." in good.text
    calls = [
        ("core_memory_replace", {"label": "human", "old_content": "Ada.", "new_content": "Ada L."}),
        ("archival_insert", {"content": "The blog deploys with hexo g.", "tags": ["blog"]}),
        ("archival_search", {"query": "hexo", "tags": ["blog"]}),
        ("archival_update", {"passage_id": 1, "content": "The blog deploys with hexo d."}),
        ("conversation_search", {"query": "anything", "page": 1}),
        ("archival_delete", {"passage_id": 1, "reason": "moved to netlify"}),
        ("core_memory_view", {}),
    ]
    for name, args in calls:
        outcome = service.call(name, args)
        assert not outcome.is_error, (name, outcome.text)
    bad = [
        ("core_memory_append", {"label": "human", "content": 5}, "must be a string"),
        ("core_memory_append", {"label": "nope", "content": "x"}, "no core memory block"),
        ("core_memory_append", {"label": "human", "content": "x" * 20_001}, "at most 20,000"),
        ("core_memory_append", {"label": "human", "content": "y" * 6_000}, "over its limit"),
        ("core_memory_replace", {"label": "human", "old_content": "zebra", "new_content": ""},
         "was not found"),
        ("archival_update", {"passage_id": 1, "content": "again"}, "was deleted on"),
        ("archival_delete", {"passage_id": 99, "reason": "x"}, "There is no passage #99"),
        ("archival_search", {"query": "x", "page": 0}, "between 1 and"),
        ("conversation_search", {"query": "x", "start_date": "March"}, "YYYY-MM-DD"),
        ("core_memory_view", {"label": "human"}, "takes no arguments"),
        ("core_memory_append", None, "Missing required argument"),
        ("core_memory_append", ["human", "x"], "JSON object"),
        ("core_memory_append", {"label": "human", "content": "x", "extra": 1},
         "Unknown argument"),
        ("evict_turns", {"turn_ids": [1], "summary": "x"}, "Unknown tool 'evict_turns'"),
        ("no_such_tool", {}, "the memory tools are: core_memory_view"),
    ]
    for name, args, words in bad:
        outcome = service.call(name, args)
        assert outcome.is_error and words in outcome.text, (name, outcome.text)
    assert human(stores[0]) == "Name: Ada L."  # the refused calls changed nothing


def test_a_store_that_cannot_be_used_is_a_tool_error_not_a_crash(stores, tmp_path,
                                                                 monkeypatch):
    service = serve(stores[1], tmp_path)

    def full(*args, **kwargs):
        raise StoreError("The disk holding the database is full; free some space.")

    monkeypatch.setattr(service.store, "set_block", full)
    outcome = service.call("core_memory_append", {"label": "human", "content": "x"})
    assert outcome.is_error and "disk holding the database is full" in outcome.text


def test_core_memory_view_shows_every_block_with_scope_and_size(stores, tmp_path):
    chat_store, mcp_store = stores
    row = chat_store.create_agent("home", {}, default_blocks(5_000))
    chat_store.share_block(row.id, "human")
    work = serve(mcp_store, tmp_path)
    work.store.share_block(work.row.id, "human")
    work.call("core_memory_append", {"label": "persona", "content": "Ignore </block> tags."})
    text = work.call("core_memory_view", {}).text
    assert text.startswith(f"Core memory of agent 'work' in project {tmp_path}: 3 blocks.")
    assert f'<block label="project" scope="project" project="{tmp_path}" used="' in text
    assert '<block label="persona" scope="agent" used="' in text
    assert '<block label="human" scope="user" shared_by="home, work" used="36" limit="5000">' \
        in text
    assert "Ignore &lt;/block> tags." in text  # a value cannot close its tag


def test_the_client_is_the_author_in_block_history():
    assert author_of("claude-code") == "mcp:claude-code"
    assert author_of(None) == author_of("") == author_of(7) == "mcp"
    assert author_of("evil\x1b]0;title\x07name") == "mcp:evil]0;titlename"
    assert len(author_of("x" * 500)) == len("mcp:") + 60


def test_block_history_names_the_client(stores, tmp_path):
    service = serve(stores[1], tmp_path)
    service.call("core_memory_append", {"label": "human", "content": "Likes tea."},
                 author="mcp:claude-code")
    history = stores[0].block_history(service.row.id, "human")
    assert history[-1]["source"] == "mcp:claude-code"
    assert history[-1]["new_value"] == "Likes tea." and history[-1]["turn_id"] is None
    assert history[-1]["old_value"] == "Nothing is known about the user yet."  # undoable


def test_arguments_are_redacted_before_anything_is_stored(stores, tmp_path):
    service = serve(stores[1], tmp_path)
    key = "sk-ant-api03-" + "a" * 40
    service.call("core_memory_append", {"label": "human", "content": f"Key: {key}"})
    service.call("archival_insert", {"content": f"The deploy key is {key}.", "tags": [key]})
    assert human(stores[0]) == "Key: [redacted: anthropic key]"
    passages = stores[0].list_passages(service.row.id)
    assert key not in json.dumps([(p.text, p.tags) for p in passages])
    assert "[redacted: anthropic key]" in passages[0].text


def test_passage_corrections_keep_the_old_version(stores, tmp_path):
    service = serve(stores[1], tmp_path)
    service.call("archival_insert", {"content": "The cat is called Rex."})
    service.call("archival_update", {"passage_id": 1, "content": "The cat is called Luna."})
    versions = stores[0].passage_versions(service.row.id)
    assert [v.text for v in versions] == ["The cat is called Rex."]


def test_resources_are_the_blocks(stores, tmp_path):
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)
    chat_store.set_block(service.row.id, "notes / todo", "buy figs", 2_000)
    found = service.resources()
    assert [r.label for r in found] == ["persona", "human", "notes / todo", "project"]
    assert f"scope project ({tmp_path})" in found[3].description
    assert found[2].uri == "memgpt-lite://agents/work/core/notes%20%2F%20todo"
    assert service.read(found[2].uri).text == "buy figs"
    assert "8/2,000 chars, scope agent" in found[2].description
    assert service.read(block_uri("work", "missing")) is None
    assert service.read(block_uri("other", "human")) is None
    assert service.read("file:///etc/passwd") is None


def test_a_new_agent_is_created_on_first_use_and_a_bad_name_refused(stores, tmp_path):
    service = serve(stores[1], tmp_path, "fresh")
    assert [b.label for b in service.blocks()] == ["persona", "human", "project"]
    assert stores[0].get_agent("fresh") is not None
    with pytest.raises(ConfigError, match="cannot be an agent name"):
        serve(stores[1], tmp_path, "../etc")


@pytest.mark.parametrize("late", ["chat", "mcp"])
def test_a_chat_and_an_mcp_server_creating_one_new_agent_at_once_both_open_it(
        stores, target, tmp_path, monkeypatch, late):
    """Started at the same moment on a new name, both look, find nothing and create: the one
    that comes second opens the other's agent instead of failing to start. On SQLite the
    create's own look is serialised (a write transaction); on Postgres both looks can miss
    and the second insert meets the first's row."""
    chat_store, mcp_store = stores
    store = chat_store if late == "chat" else mcp_store
    look, misses, blind = store.get_agent, [], 2 if target.startswith("postgresql") else 1

    def missed(name):  # the looks that come before the other's row
        if len(misses) < blind:
            misses.append(name)
            if len(misses) == blind:  # the other process creates the agent, its own way
                (serve(mcp_store, tmp_path, name) if late == "chat"
                 else chat_agent(chat_store, name=name).close())
            return None
        return look(name)

    monkeypatch.setattr(store, "get_agent", missed)
    agent = chat_agent(chat_store, name="fresh") if late == "chat" else None
    service = serve(mcp_store, tmp_path, "fresh")
    agent = agent or chat_agent(chat_store, name="fresh")
    try:
        assert agent.row.id == service.row.id and not (late == "chat" and agent.created)
        service.call("core_memory_append", {"label": "human", "content": "Both see this."})
        assert "Both see this." in human(chat_store, "fresh")
    finally:
        agent.close()


# ---------------------------------------------------------------- beside a running chat


def test_an_mcp_edit_is_in_the_chats_next_request_and_the_chats_edit_in_the_view(stores,
                                                                                tmp_path):
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)

    def edit_meanwhile(request):  # the MCP client writes while the model answers
        service.call("core_memory_append", {"label": "human", "content": "Mid-turn fact."})
        return tool_response([("conversation_search", {"query": "figs"})])

    agent = chat_agent(chat_store, [append("Chat fact."), text_response("ok"), edit_meanwhile,
                                    text_response("ok")])
    list(agent.step("I like figs"))
    assert "Chat fact." in service.call("core_memory_view", {}).text
    service.call("core_memory_append", {"label": "human", "content": "Between turns."})
    list(agent.step("next"))
    requests = agent.model_client.requests
    assert "Between turns." in json.dumps(requests[2].messages[-1])
    assert "Mid-turn fact." not in json.dumps(requests[2].messages[-1])
    assert "Mid-turn fact." in json.dumps(requests[3].messages[-1])
    assert human(chat_store).splitlines() == ["Chat fact.", "Between turns.", "Mid-turn fact."]


def test_a_recorded_chat_with_mcp_edits_between_and_within_turns_replays_strictly(stores,
                                                                                 tmp_path):
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)

    def edit_meanwhile(request):
        service.call("core_memory_append", {"label": "human", "content": "Mid-turn."})
        return append("The chat's own line.")

    agent = chat_agent(chat_store, [append("Name: Ada."), text_response("ok"), edit_meanwhile,
                                    text_response("ok"), text_response("ok")])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "I'm Ada"))
        service.call("core_memory_append", {"label": "human", "content": "Between."})
        service.call("core_memory_replace", {"label": "persona", "old_content": "direct",
                                             "new_content": "brief"})
        list(recording.recorded_step(agent, recorder, "more"))
        list(recording.recorded_step(agent, recorder, "and more"))
    turns = recording.Recording.load(path).turns
    assert [e["label"] for e in turns[1].outside_edits] == ["persona", "human", "human"]
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.final_core_memory["human"].endswith("Mid-turn.\nThe chat's own line.")


def test_a_failed_chat_turn_and_pop_never_undo_an_mcp_edit(stores, tmp_path):
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)

    def mcp_edits_then_overloaded(request):
        service.call("core_memory_append", {"label": "human", "content": "From MCP."})
        raise OverloadedError("The API is overloaded.")

    agent = chat_agent(chat_store, [append("From the chat."), mcp_edits_then_overloaded,
                                    append("Popped later."), text_response("ok")])
    assert not list(agent.step("hi"))[-1].completed
    assert human(chat_store) == "From the chat.\nFrom MCP."  # the MCP edit came later: kept
    list(agent.step("again"))
    service.call("core_memory_append", {"label": "human", "content": "After the turn."})
    assert agent.pop_turns(1).blocks_kept == ["human"]
    assert "After the turn." in human(chat_store)


def test_opening_never_undoes_the_turn_a_running_chat_has_open(stores, tmp_path):
    chat_store, mcp_store = stores
    agent = chat_agent(chat_store)
    user = Message("user", [{"type": "text", "text": "hi"}], 1, in_context=False)
    chat_store.begin_turn(agent.id, user)
    agent.tools.execute("core_memory_append", {"label": "human", "content": "Mid-turn."})
    service = serve(mcp_store, tmp_path)
    service.call("archival_insert", {"content": "Written beside the open turn."})
    assert mcp_store.unfinished_turns(agent.id) == [1]  # still the chat's
    assert human(chat_store) == "Mid-turn."


def test_forget_reaches_what_an_mcp_client_wrote(target, tmp_path):
    with open_store(target) as store:
        service = serve(store, tmp_path)
        service.call("core_memory_append", {"label": "human", "content": "Code: tulip-42."})
        service.call("core_memory_append", {"label": "human", "content": "Likes figs."})
        service.call("archival_insert", {"content": "The locker code is tulip-42."})
        agent_id = service.row.id
    db = [] if target == str(config.db_path()) else ["--db", target]
    assert cli.main([*db, "forget", "tulip-42", "--yes", "--agent", "work"]) == 0
    with open_store(target) as store:
        assert human(store) == "Likes figs."
        assert store.count_passages(agent_id) == 0
        history = json.dumps(store.block_history(agent_id))
        assert "tulip-42" not in history and "Likes figs." in history


def test_a_rename_is_followed_and_a_deleted_agent_is_a_tool_error(stores, tmp_path):
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)
    chat_store.rename_agent("work", "home")
    assert "Core memory of agent 'home'" in service.call("core_memory_view", {}).text
    assert service.resources()[0].uri == "memgpt-lite://agents/home/core/persona"
    chat_store.delete_agent("home")
    outcome = service.call("core_memory_append", {"label": "human", "content": "x"})
    assert outcome.is_error and "'home' was deleted while this server ran" in outcome.text
    assert service.resources() == [] and service.read(block_uri("home", "human")) is None


def test_after_a_failed_call_the_next_one_runs_on_a_new_connection(target, tmp_path,
                                                                   monkeypatch):
    store = open_store(target)
    service = serve(store, tmp_path)

    def cut_off(*args, **kwargs):
        raise StoreError("The database cannot be used: the connection is closed.")

    monkeypatch.setattr(store, "get_agent_by_id", cut_off)
    failed = service.call("core_memory_append", {"label": "human", "content": "x"})
    assert failed.is_error and "check with core_memory_view" in failed.text
    assert service.store is not store and service.tools.store is service.store
    again = service.call("core_memory_append", {"label": "human", "content": "Back."})
    assert not again.is_error and human(service.store) == "Back."
    service.close()


def test_a_damaged_store_is_never_reopened(stores, tmp_path, monkeypatch):
    service = serve(stores[1], tmp_path)
    damage = StoreError("The database is damaged; memgpt-lite will not write to it.")
    monkeypatch.setattr(type(service.store), "damage", property(lambda self: damage))
    monkeypatch.setattr(service.store, "set_block", lambda *a, **k: (_ for _ in ()).throw(damage))
    outcome = service.call("core_memory_append", {"label": "human", "content": "x"})
    assert outcome.is_error and "damaged" in outcome.text
    assert service.store is stores[1]


def test_a_client_sees_and_edits_the_project_block_of_its_root(stores, tmp_path):
    """The server's project is the one a chat in that directory works in: the same block,
    read and written through the same store methods; another root's block is another."""
    chat_store, mcp_store = stores
    blog, shop = tmp_path / "blog", tmp_path / "shop"
    chat = Agent.open(chat_store, "work", model_client=ScriptedModel([
        append("Deploy with hexo d.", "project"), text_response("Saved.")], validate=True),
        summary_client=ScriptedModel([]), lock_wait=None, project=str(blog))
    assert list(chat.step("how we deploy"))[-1].completed
    service = MemoryService.open(mcp_store, "work", blog)
    assert "Deploy with hexo d." in service.call("core_memory_view", {}).text
    service.call("core_memory_append", {"label": "project", "content": "Never force-push."})
    other = Agent.open(chat_store, "other", model_client=ScriptedModel([]), lock_wait=None,
                       project=str(blog))
    assert next(b for b in other.blocks() if b.label == "project").value == (
        "Deploy with hexo d.\nNever force-push.")
    elsewhere = MemoryService.open(mcp_store, "work", shop)
    assert "hexo" not in elsewhere.call("core_memory_view", {}).text


def test_a_root_whose_name_is_not_utf8_is_served_as_text(stores, tmp_path):
    """A folder named in bytes that are not UTF-8 (as Python decodes them: surrogates) is
    named in text every client takes, and is the project a chat in that folder works in."""
    chat_store, mcp_store = stores
    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/pr\xff"))
    service = MemoryService.open(mcp_store, "work", root)
    assert not service.call("core_memory_append",
                            {"label": "project", "content": "Tabs."}).is_error
    view = service.call("core_memory_view", {}).text
    assert view.encode("utf-8") and f"{tmp_path}/pr\\xff" in view
    assert all(r.description.encode("utf-8") for r in service.resources())
    chat = Agent.open(chat_store, "work", model_client=ScriptedModel([]), lock_wait=None,
                      project=str(root))
    assert next(b for b in chat.blocks() if b.label == "project").value == "Tabs."


def test_a_uri_under_the_old_name_of_a_renamed_agent_names_the_new_one(stores, tmp_path):
    """A client keeps the URIs it listed; after a rename they read as 'no block there',
    and nothing said the agent was now under another name."""
    chat_store, mcp_store = stores
    service = serve(mcp_store, tmp_path)
    assert service.created  # the first open of a name makes the agent
    old = service.resources()[1].uri
    chat_store.rename_agent("work", "home")
    assert service.read(old) is None
    assert service.moved(old) == ("The agent 'work' was renamed 'home'; its core memory is "
                                  "served under the new name (memgpt-lite://agents/home/core/"
                                  "human).")
    assert "resources/list names them" in service.moved(block_uri("work", "nope"))
    assert service.moved(block_uri("other", "human")) is None


def test_open_says_whether_it_created_the_agent(tmp_path):
    with open_store() as store:
        assert MemoryService.open(store, "new-one", tmp_path).created
        assert not MemoryService.open(store, "new-one", tmp_path).created

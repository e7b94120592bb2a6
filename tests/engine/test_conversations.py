"""Conversations and project scope, on both backends: a new conversation starts without the
old one's turns or summary but with all of core memory (agent, project and user blocks) and
with recall of every conversation; resuming brings a conversation's queue back exactly;
agents in one project share its block and an agent elsewhere does not see it; each
conversation's recording replays strictly; a data dir made before conversations opens with
its one conversation intact."""

from __future__ import annotations

import json
import sqlite3

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.store import StoreError, open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


@pytest.fixture
def store(store_target):
    with open_store(store_target) as s:
        yield s


def opened(store, name="ada", script=(), **kw) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(list(script), validate=True)
    agent = Agent.open(store, name, model_client=model, summary_client=ScriptedModel([]),
                       lock_wait=None, **kw)
    return agent, model


def request_text(request) -> str:
    """Every text of a request (system prompt, messages, tool results), one per line."""
    found: list[str] = []

    def walk(value):
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk([request.system, request.messages])
    return "\n".join(found)


def bare(messages: list[dict]) -> list[dict]:
    """Messages without the cache breakpoints (they move to the newest blocks)."""
    return [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                              for b in m["content"]]} for m in messages]


def run(agent, text):
    events = list(agent.step(text))
    assert events[-1].completed, events[-1]
    return events


def test_a_new_conversation_keeps_memory_but_not_the_turns(store, tmp_path):
    project = str(tmp_path / "blog")
    row = store.create_agent("ada", {}, default_blocks(5_000))
    store.share_block(row.id, "human")
    ada, _ = opened(store, script=[
        tool_response([("core_memory_append", {"label": "project",
                                               "content": "Run hexo g before deploying."})]),
        text_response("Noted."), text_response("Nice.")], project=project)
    run(ada, "In this blog we always run hexo g before deploying.")
    run(ada, "The kangaroo mascot is called Skippy.")
    store.set_summary(ada.id, "Earlier: talked about marsupials.")
    ada.start_conversation()
    assert ada.conversation_id == 2
    model = ScriptedModel([tool_response([("conversation_search", {"query": "kangaroo"})]),
                           text_response("Skippy.")], validate=True)
    ada = Agent.open(store, "ada", model_client=model, lock_wait=None, project=project)
    assert ada.conversation_id == 2  # the most recent: what `chat` resumes
    run(ada, "What is the mascot called?")
    first = request_text(model.requests[0])
    assert "kangaroo" not in first and "marsupials" not in first and "Noted." not in first
    assert "Run hexo g before deploying." in first  # the project block
    assert 'scope="user"' in first and 'scope="project"' in first and "persona" in first
    found = model.requests[1].messages[-1]["content"][0]["content"]
    assert "kangaroo mascot is called Skippy" in found
    assert "· conv 1" in found and "this one is conv 2" in found
    only_here = ada.tools.execute("conversation_search", {"query": "kangaroo",
                                                          "current_only": True})
    assert "kangaroo mascot" not in only_here.text
    assert [c.turns for c in store.conversations(ada.id)] == [2, 1]


def test_resume_brings_the_queue_and_summary_back_exactly(store):
    ada, model = opened(store, script=[text_response("One."), text_response("Two.")])
    run(ada, "first task message")
    store.set_summary(ada.id, "The first task so far.")
    run(ada, "second message of the first task")
    before = model.requests[-1]
    queue = [(m.id, m.content, m.turn_id) for m in store.context_messages(ada.id)]
    ada.start_conversation()
    assert store.context_messages(ada.id) == [] and store.conversation(ada.id).summary == ""
    ada, _ = opened(store, script=[text_response("Other task.")], new_conversation=True)
    assert ada.conversation_id == 2  # a new conversation not used yet is kept, not a third
    run(ada, "an unrelated task")
    model2 = ScriptedModel([text_response("Back.")], validate=True)
    ada = Agent.open(store, "ada", model_client=model2, lock_wait=None, conversation=1)
    assert [(m.id, m.content, m.turn_id) for m in store.context_messages(ada.id)] == queue
    run(ada, "third message of the first task")
    again = model2.requests[0]
    # Every message the first task sent before (the newest carries core memory) comes back.
    assert bare(again.messages[:len(before.messages) - 1]) == bare(before.messages[:-1])
    assert "unrelated task" not in request_text(again)
    assert request_text(again).count("The first task so far.") == 1
    with pytest.raises(StoreError, match="no conversation 9"):
        Agent.open(store, "ada", model_client=model2, lock_wait=None, conversation=9)


def test_agents_of_one_project_share_its_block_and_others_do_not_see_it(store, tmp_path):
    blog, shop = str(tmp_path / "blog"), str(tmp_path / "shop")
    ada, _ = opened(store, "ada", [
        tool_response([("core_memory_append", {"label": "project",
                                               "content": "Deploy with hexo d."})]),
        text_response("Saved.")], project=blog)
    run(ada, "remember how we deploy")
    bob, bob_model = opened(store, "bob", [text_response("Hexo d.")], project=blog)
    run(bob, "how do we deploy?")
    assert "Deploy with hexo d." in request_text(bob_model.requests[0])
    cy, cy_model = opened(store, "cy", [text_response("No idea.")], project=shop)
    run(cy, "how do we deploy?")
    assert "Deploy with hexo d." not in request_text(cy_model.requests[0])
    assert [b.value for b in store.project_blocks(blog)] == ["Deploy with hexo d."]
    assert store.project_blocks(shop) == []


def test_every_conversation_replays_strictly(store, tmp_path, monkeypatch):
    blog = str(tmp_path / "blog")
    ada, _ = opened(store, script=[
        tool_response([("core_memory_append", {"label": "project", "content": "Rule one."})]),
        text_response("Saved."), text_response("Hello again."),
        tool_response([("conversation_search", {"query": "rule"})]), text_response("Found."),
        text_response("Back in one.")], project=blog)
    paths = []
    for step in (lambda: None, ada.start_conversation, lambda: ada.resume_conversation(1)):
        step()
        recorder = recording.start_recording(ada)
        texts = {1: ["set a rule"], 2: ["hi", "what was the rule?"]}.get(
            len(paths) + 1, ["back to the first"])
        for text in texts:
            events = list(recording.recorded_step(ada, recorder, text))
            assert events[-1].completed
        recorder.close()
        paths.append(recorder.path)
    headers = [json.loads(p.read_text("utf-8").splitlines()[0]) for p in paths]
    assert [h["conversation"] for h in headers] == [1, 2, 1]
    assert {h["project"] for h in headers} == {blog}
    for path in paths:
        report = replay_mod.replay(path, strict=True)
        assert report.ok and report.completed, (path, report.divergences)


@pytest.mark.parametrize("name", ["demo_before_conversations.jsonl",
                                  "demo_layout2_before_conversations.jsonl"])
def test_recordings_made_before_conversations_replay_strictly(name):
    """The bundled demo as it was before conversations: search layout 1, and layout 2 (both
    model contract 1: the old system prompt and conversation_search)."""
    from pathlib import Path

    path = Path(__file__).parent / "recordings" / name
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed, report.divergences


def _database_made_before_conversations(path) -> None:
    """A SQLite file as the version before conversations left it: migrations up to 007, an
    agent with a queue, a summary and the pager's state on its row."""
    from memgpt_lite.engine.store.sqlite import fts
    from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    names = [n for n, _ in MIGRATIONS]
    for name, apply in MIGRATIONS[:names.index("007_passage_history_and_shared_blocks") + 1]:
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (name,))
    state = {"counter": {"ratio": 1.0}, "pager": {"alerted": True}}
    db.execute("INSERT INTO agents (name, created_at, last_used_at, uid, summary, state, "
               "settings) VALUES ('old', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', 'u1', "
               "'We planned a trip to Lisbon.', ?, '{}')", (json.dumps(state),))
    db.execute("INSERT INTO blocks (agent_id, label, value, char_limit, updated_at) "
               "VALUES (1, 'human', 'Name: Ada.', 5000, '2026-01-01')")
    for i, (role, text) in enumerate([("user", "Book the Lisbon flight"),
                                      ("assistant", "Booked.")], 1):
        db.execute("INSERT INTO messages (agent_id, id, turn_id, role, content, index_text, "
                   "created_at, in_context, seq) VALUES (1, ?, 1, ?, ?, ?, "
                   "'2026-01-01T10:00:00Z', 1, ?)",
                   (i, role, json.dumps([{"type": "text", "text": text}]), text, i))
    fts.rebuild(db, 1)
    db.close()


def test_a_data_dir_made_before_conversations_opens_with_its_conversation(tmp_path):
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore

    path = tmp_path / "old.db"
    _database_made_before_conversations(path)
    with SQLiteStore(path) as store:
        assert "008_conversations_and_project_blocks" in store.applied_migrations()
        row = store.get_agent("old")
        [conv] = store.conversations(row.id)
        assert (conv.id, conv.turns, conv.summary) == (1, 1, "We planned a trip to Lisbon.")
        assert conv.state == {"pager": {"alerted": True}} and "pager" not in row.state
        assert conv.started_at == "2026-01-01T10:00:00Z" and conv.name.startswith("Book the")
        assert row.summary == "We planned a trip to Lisbon."
        assert [m.conversation_id for m in store.context_messages(row.id)] == [1, 1]
        model = ScriptedModel([text_response("Lisbon, yes.")], validate=True)
        agent = Agent.open(store, "old", model_client=model, lock_wait=None)
        run(agent, "where are we going?")
        sent = request_text(model.requests[0])
        assert "Book the Lisbon flight" in sent and "We planned a trip to Lisbon." in sent


def test_a_postgres_database_made_before_conversations_opens_with_its_conversation(pg_url):
    """The same on Postgres: a database migrated up to 007 by the version before, with an
    agent's queue, summary and pager state, gets conversation 1 holding them."""
    import psycopg

    from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS

    names = [n for n, _ in MIGRATIONS]
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("CREATE SCHEMA memgpt_lite")  # where the store keeps its tables
        db.execute("SET search_path TO memgpt_lite")
        db.execute("CREATE TABLE schema_migrations (position INTEGER PRIMARY KEY, name TEXT "
                   "NOT NULL UNIQUE, applied_at TEXT NOT NULL)")
        for position, (name, sql) in enumerate(
                MIGRATIONS[:names.index("007_passage_history_and_shared_blocks") + 1], 1):
            db.execute(sql)
            db.execute("INSERT INTO schema_migrations VALUES (%s, %s, '2026-01-01')",
                       (position, name))
        state = json.dumps({"counter": {"ratio": 1.0}, "pager": {"alerted": True}})
        db.execute("INSERT INTO agents (name, created_at, last_used_at, uid, summary, state) "
                   "VALUES ('old', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', 'u1', "
                   "'We planned a trip to Lisbon.', %s)", (state,))
        for i, (role, text) in enumerate([("user", "Book the Lisbon flight"),
                                          ("assistant", "Booked.")], 1):
            db.execute("INSERT INTO messages (agent_id, id, turn_id, role, content, index_text, "
                       "created_at, in_context, seq) VALUES (1, %s, 1, %s, %s, %s, "
                       "'2026-01-01T10:00:00Z', TRUE, %s)",
                       (i, role, json.dumps([{"type": "text", "text": text}]), text, i))
    with open_store(pg_url) as store:
        assert "008_conversations_and_project_blocks" in store.applied_migrations()
        row = store.get_agent("old")
        [conv] = store.conversations(row.id)
        assert (conv.id, conv.turns, conv.summary) == (1, 1, "We planned a trip to Lisbon.")
        assert conv.state == {"pager": {"alerted": True}} and "pager" not in row.state
        assert [m.conversation_id for m in store.context_messages(row.id)] == [1, 1]


def test_pop_and_retry_act_on_the_current_conversation_only(store):
    ada, _ = opened(store, script=[text_response("One."), text_response("Two."),
                                   text_response("Two again.")])
    run(ada, "first conversation")
    first_queue = [m.id for m in store.context_messages(ada.id)]
    ada.start_conversation()
    run(ada, "second conversation")
    assert ada.last_user_text() == "second conversation"
    assert list(ada.retry())[-1].completed  # the second conversation's message, again
    popped = ada.pop_turns(1)
    assert popped and store.context_messages(ada.id) == []
    assert ada.pop_turns(1).turn_ids == []  # nothing left here; the first is not touched
    ada.resume_conversation(1)
    assert [m.id for m in store.context_messages(ada.id)] == first_queue
    assert ada.last_user_text() == "first conversation"


def test_chat_resumes_the_conversation_used_last_within_one_second(store, store_target,
                                                                    monkeypatch):
    """Times are stamped to the second: a piped chat (`/new`, a message, `/resume 1`, a
    message) does it all within one, and the next `chat` still resumes conversation 1."""
    second = "2026-03-02T18:00:00Z"
    for module in ("agents", "conversations"):
        monkeypatch.setattr(f"memgpt_lite.engine.store.{module}.now_iso", lambda: second)
    from datetime import datetime, timezone
    at = datetime(2026, 3, 2, 18, 0, 0, tzinfo=timezone.utc)
    ada, _ = opened(store, script=[text_response("One."), text_response("Two."),
                                   text_response("Three.")], clock=lambda: at)
    run(ada, "first task")
    ada.start_conversation()
    run(ada, "second task")
    ada.resume_conversation(1)
    run(ada, "back to the first task")
    ada.close()
    with open_store(store_target) as later:  # the next process: nothing chosen yet
        again, _ = opened(later)
        assert again.conversation_id == 1


def test_new_after_popping_every_turn_starts_without_the_old_summary(store):
    """A conversation whose turns were all popped has no turns left but still its summary
    (of turns flushed before the pop): /new must not hand it out as a new one."""
    ada, _ = opened(store, script=[text_response("One."), text_response("Two.")])
    run(ada, "the old task: migrate the kangaroo database")
    store.set_summary(ada.id, "Earlier: migrating the kangaroo database.")
    run(ada, "still the old task")
    assert ada.pop_turns(2).turn_ids
    new = ada.start_conversation()
    assert new.id == 2 and ada.conversation_id == 2
    assert store.conversation(ada.id).summary == ""
    assert ada.start_conversation().id == 2  # and that one, unused, is kept

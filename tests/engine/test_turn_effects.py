"""A failed turn leaves nothing behind; /retry sends a message once; /pop undoes memory edits.

Each failure test takes every table the agent's memory lives in before the turn and after
it, and requires them equal but for the one row a failed turn keeps: the user's message, in
recall, marked interrupted. Every test runs on SQLite and on Postgres (`store_target`)."""

from __future__ import annotations

import json

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import open_store
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

TABLES = {
    "agents": "SELECT id, name, summary, settings FROM agents ORDER BY id",
    "blocks": "SELECT agent_id, label, value, char_limit FROM blocks ORDER BY id",
    "block_history": "SELECT id, agent_id, label, old_value, new_value, source, turn_id "
                     "FROM block_history ORDER BY id",
    "passages": "SELECT id, agent_id, text, tags, created_at, turn_id FROM passages ORDER BY id",
    "messages": "SELECT id, agent_id, turn_id, role, content, context_content, in_context, "
                "status, seq FROM messages ORDER BY id",
    "turn_effects": "SELECT * FROM turn_effects",
}
SMALL = Settings(context_window=6_000, max_output_tokens=500, safety_margin=100,
                 fold_min_chars=600)


def tables(store: SQLiteStore) -> dict[str, list[tuple]]:
    found = {name: [tuple(r) for r in store.db.query(sql)] for name, sql in TABLES.items()}
    state = json.loads(store.db.query("SELECT state FROM agents WHERE name = 'a'")[0][0])
    pager = state.get("pager") or {"alert_tokens": None, "alert_turn": None}
    found["pager"] = [tuple(sorted(pager.items()))]
    found["search"] = [(h.id, h.text) for h in store.search_passages(1, "fact cello").hits]
    return found


def assert_only_the_message_was_added(before, after, store: SQLiteStore, text: str) -> None:
    added = after["messages"][len(before["messages"]):]
    assert after["messages"][:len(before["messages"])] == before["messages"]
    assert [(json.loads(r[4])[0]["text"], r[3], r[6], r[7]) for r in added] == [
        (text, "user", 0, "interrupted")]
    assert {k: v for k, v in after.items() if k != "messages"} == \
        {k: v for k, v in before.items() if k != "messages"}
    assert store.integrity_problems() == []


BACKEND: dict[str, str] = {}  # where `opened` puts the store of the running test


@pytest.fixture(autouse=True)
def _each_backend(store_target):
    BACKEND["target"] = store_target


def opened(tmp_path, script, settings=None) -> tuple[SQLiteStore, Agent]:
    store = open_store(BACKEND["target"])
    agent = Agent.open(store, "a", model_client=ScriptedModel(script, validate=True),
                       summary_client=ScriptedModel([]), settings=settings)
    return store, agent


def completed(agent: Agent, text: str) -> list:
    events = list(agent.step(text))
    assert events[-1].completed, [e for e in events if e.kind == "error"]
    return events


def test_a_529_after_memory_tool_calls_leaves_every_table_as_before(tmp_path):
    store, agent = opened(tmp_path, [
        tool_response([("archival_insert", {"content": "An old fact about otters."})]),
        text_response("Noted."), text_response("Hello.")])
    completed(agent, "remember otters")
    completed(agent, "hi")
    before = tables(store)
    agent.model_client = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human", "content": "Plays the cello."}),
                       ("core_memory_replace", {"label": "persona", "old_content": "direct",
                                                "new_content": "blunt"}),
                       ("archival_insert", {"content": "Cello fact: lessons on Tuesdays."})]),
        OverloadedError("The API is overloaded.")])
    events = list(agent.step("I play the cello"))
    assert [e.kind for e in events].count("memory_edit") == 2 and not events[-1].completed
    assert_only_the_message_was_added(before, tables(store), store, "I play the cello")


def test_a_529_after_evict_turns_leaves_the_queue_and_summary_as_before(tmp_path):
    store, agent = opened(tmp_path, [text_response(f"Answer {i}.") for i in range(4)])
    for i in range(4):
        completed(agent, f"message {i}")
    before = tables(store)
    agent.model_client = ScriptedModel([
        tool_response([("evict_turns", {"turn_ids": [1, 2], "summary": "Small talk."})]),
        OverloadedError("The API is overloaded.")])
    events = list(agent.step("make room"))
    assert [e.by for e in events if e.kind == "eviction"] == ["model"]
    assert_only_the_message_was_added(before, tables(store), store, "make room")
    assert sorted({m.turn_id for m in store.context_messages(agent.id)}) == [1, 2, 3, 4]


def prefill(store: SQLiteStore, agent: Agent) -> None:
    """A queue big enough that the next turn folds a bulky tool result and flushes."""
    bulky = [Message("user", [{"type": "text", "text": "list the files"}], 1),
             Message("assistant", [{"type": "tool_use", "id": "t1", "name": "archival_search",
                                    "input": {"query": "files"}}], 1),
             Message("user", [{"type": "tool_result", "tool_use_id": "t1",
                               "content": "file " * 700}], 1),
             Message("assistant", [{"type": "text", "text": "Many files."}], 1)]
    store.add_messages(agent.id, bulky)
    for t in range(2, 9):
        store.add_messages(agent.id, [
            Message("user", [{"type": "text", "text": f"old turn {t} " + "x" * 2_000}], t),
            Message("assistant", [{"type": "text", "text": f"old reply {t}"}], t)])
    store.set_summary(agent.id, "An earlier summary.")


def test_a_529_after_a_fold_a_flush_and_a_summary_leaves_every_table_as_before(tmp_path):
    store, agent = opened(tmp_path, [], settings=SMALL)
    prefill(store, agent)
    before = tables(store)
    agent.model_client = ScriptedModel([OverloadedError("The API is overloaded.")])
    agent.pager.summariser.client = ScriptedModel([text_response("New summary.")] * 20)
    events = list(agent.step("and now?"))
    kinds = [e.kind for e in events]
    assert "fold" in kinds and "eviction" in kinds and "summary" in kinds, kinds
    assert_only_the_message_was_added(before, tables(store), store, "and now?")
    assert store.get_agent("a").summary == "An earlier summary."


def test_ctrl_c_after_tool_calls_undoes_them_too(tmp_path):
    store, agent = opened(tmp_path, [text_response("Hello.")])
    completed(agent, "hi")
    before = tables(store)
    agent.model_client = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human", "content": "Has a cat."}),
                       ("archival_insert", {"content": "Cello fact: the cat is Miso."})]),
        text_response("never seen")])
    steps = agent.step("I have a cat")
    for event in steps:
        if event.kind == "tool_result" and event.call.name == "archival_insert":
            break
    steps.close()
    assert_only_the_message_was_added(before, tables(store), store, "I have a cat")


def test_three_interrupted_retries_then_one_that_completes_store_the_message_once(tmp_path):
    store, agent = opened(tmp_path, [])
    agent.model_client = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        text_response("Tea noted.")])
    for steps in (agent.step("I like tea"), agent.retry(), agent.retry()):
        for event in steps:
            if event.kind == "tool_result":
                break  # Ctrl-C once the edit is made
        steps.close()
    events = list(agent.retry())
    assert events[-1].completed and events[-1].text == "Tea noted."
    users = [m for m in store.all_messages(agent.id) if m.role == "user" and
             m.content[0].get("text") == "I like tea"]
    assert [(m.turn_id, m.status, m.in_context) for m in users] == [(1, "", True)]
    assert agent.blocks()[1].value.count("Likes tea.") == 1


def test_retry_of_a_completed_turn_undoes_it_and_sends_it_again(tmp_path):
    store, agent = opened(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."}),
                       ("archival_insert", {"content": "Cello fact: tea at five."})]),
        text_response("Tea noted."),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        text_response("Tea noted again.")])
    completed(agent, "I like tea")
    events = list(agent.retry())
    notices = [e.message for e in events if e.kind == "notice"]
    assert notices and "'human': put back" in notices[0] and "deleted" in notices[0]
    assert events[-1].completed and events[-1].text == "Tea noted again."
    assert agent.blocks()[1].value.count("Likes tea.") == 1
    assert store.count_passages(agent.id) == 0
    assert [m.content[0].get("text") for m in store.all_messages(agent.id)
            if m.role == "user" and m.content[0].get("type") == "text"] == ["I like tea"]


def test_pop_reverts_memory_edits_unless_they_were_changed_since(tmp_path):
    store, agent = opened(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."}),
                       ("core_memory_append", {"label": "persona", "content": "Says hi."}),
                       ("archival_insert", {"content": "Cello fact: tea at five."})]),
        text_response("Noted.")])
    human, persona = (b.value for b in agent.blocks()[1::-1])
    completed(agent, "I like tea")
    agent.edit_block("persona", agent.blocks()[0].value + "\nEdited by hand.")
    popped = agent.pop_turns(1)
    assert popped.turn_ids == [1] and popped.blocks_reverted == ["human"]
    assert popped.blocks_kept == ["persona"] and len(popped.passages_deleted) == 1
    assert agent.blocks()[1].value == human
    assert agent.blocks()[0].value == persona + "\nSays hi.\nEdited by hand."
    assert store.count_passages(agent.id) == 0 and store.all_messages(agent.id) == []
    assert store.integrity_problems() == []


def test_an_interrupted_message_is_marked_in_conversation_search(tmp_path):
    store, agent = opened(tmp_path, [OverloadedError("The API is overloaded."),
                                     tool_response([("conversation_search",
                                                     {"query": "zebra"})]),
                                     text_response("Found it.")])
    list(agent.step("the zebra question"))
    events = completed(agent, "what did I ask?")
    result = next(e.result.content for e in events if e.kind == "tool_result")
    assert "user (interrupted, never answered): the zebra question" in result


def test_a_recorded_failed_turn_and_its_retry_replay_strictly(tmp_path):
    store, agent = opened(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        OverloadedError("The API is overloaded."),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        text_response("Tea noted.")])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "I like tea"))
        events = list(recording.recorded_step(agent, recorder, "I like tea", retry=True))
    assert events[-1].completed
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.final_core_memory["human"].count("Likes tea.") == 1


def test_a_retry_in_a_later_recording_replays_strictly(tmp_path):
    store, agent = opened(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."}),
                       ("archival_insert", {"content": "Cello fact: tea at five."})]),
        text_response("Noted."),
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."})]),
        text_response("Noted again.")])
    paths = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    with recording.Recorder(paths[0]) as recorder:
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "I like tea"))
    with recording.Recorder(paths[1]) as recorder:  # the next session retries that turn
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "I like tea", retry=True))
    for path in paths:
        report = replay_mod.replay(path, strict=True)
        assert report.ok, (path.name, report.divergences)
    assert report.final_core_memory["human"].count("Likes tea.") == 1


def test_old_database_marks_turns_that_never_finished(tmp_path):
    import sqlite3

    from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS

    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, apply in MIGRATIONS[:3]:
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2025-01-01')", (name,))
    db.execute("INSERT INTO agents (name, created_at, uid) VALUES ('a', '2025-01-01', 'u1')")
    rows = [(1, "user", 1), (1, "assistant", 1), (2, "user", 0), (3, "user", 0),
            (3, "assistant", 0)]  # turn 2 never finished; turn 3 was evicted
    for turn, role, queued in rows:
        db.execute("INSERT INTO messages (agent_id, turn_id, role, content, created_at, "
                   "in_context) VALUES (1, ?, ?, '[]', '2025-01-01', ?)", (turn, role, queued))
    db.close()
    with SQLiteStore(path) as store:
        assert [(m.turn_id, m.status) for m in store.all_messages(1)] == [
            (1, ""), (1, ""), (2, "interrupted"), (3, ""), (3, "")]


def test_an_exported_agent_keeps_what_pop_needs(tmp_path):
    from memgpt_lite.engine.store import transfer

    store, agent = opened(tmp_path, [
        tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."}),
                       ("archival_insert", {"content": "Cello fact: tea at five."})]),
        text_response("Noted."), OverloadedError("The API is overloaded.")])
    completed(agent, "I like tea")
    list(agent.step("cut off"))
    doc = json.loads(json.dumps(transfer.export_agent(store, "a")))
    copy = transfer.import_agent(store, doc, "b")
    again = Agent.open(store, "b", model_client=ScriptedModel([]), lock_wait=None)
    assert [m.status for m in store.all_messages(copy.id)][-1] == "interrupted"
    popped = again.pop_turns(1)
    assert popped.blocks_reverted == ["human"] and len(popped.passages_deleted) == 1
    assert "Likes tea." not in again.blocks()[1].value

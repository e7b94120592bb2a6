"""The store's contract, on both backends: every test here runs on a SQLite file and on a
fresh Postgres database (`store_target` in conftest.py), through `open_store` and the
`Store` protocol only. Backend-specific details (files, pragmas, FTS5) stay in
test_store.py; what only Postgres does is in test_postgres.py."""

from __future__ import annotations

import random

import pytest

from memgpt_lite.engine.records import Block, Message
from memgpt_lite.engine.store import StoreError, Store, open_store, transfer
from memgpt_lite.engine.store.base import BlockChanged
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS


def text_msg(role, text, turn, **kw):
    return Message(role, [{"type": "text", "text": text}], turn, **kw)


@pytest.fixture
def store(store_target):
    s = open_store(store_target)
    yield s
    s.close()


@pytest.fixture
def agent(store):
    return store.create_agent("default", {"model": "m1"},
                              {"persona": ("I help.", 100), "human": ("Unknown.", 100)})


def count(store, table: str) -> int:
    return store.db.query(f"SELECT count(*) FROM {table}")[0][0]


# ---------------------------------------------------------------- the store itself


def test_it_is_the_protocol_with_the_same_named_migrations(store, store_target):
    assert isinstance(store, Store)
    assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
    assert store.schema_version() == len(MIGRATIONS)
    store.close()
    with open_store(store_target) as again:  # reopening applies nothing twice
        assert again.applied_migrations() == [name for name, _ in MIGRATIONS]
        assert count(again, "schema_migrations") == len(MIGRATIONS)
    assert store_target.startswith("postgresql://") == store.location.startswith("postgresql://")


def test_transaction_rolls_back_and_nests(store, agent):
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add_message(agent.id, text_msg("user", "one", 1))
            with store.transaction():
                store.add_message(agent.id, text_msg("user", "two", 1))
            raise RuntimeError("boom")
    assert store.agent_stats(agent.id)["messages"] == 0
    assert store.search_messages(agent.id, "one").total == 0
    with store.transaction():
        store.add_message(agent.id, text_msg("user", "one", 1))
        with store.transaction():
            store.add_message(agent.id, text_msg("user", "two", 1))
    assert store.agent_stats(agent.id)["messages"] == 2
    assert store.integrity_problems() == []


# ---------------------------------------------------------------- agents and blocks


def test_agent_crud(store, agent):
    assert agent.name == "default" and agent.model == "m1" and agent.settings == {"model": "m1"}
    assert len(agent.uid) == 16
    with pytest.raises(StoreError, match="already exists"):
        store.create_agent("default", {}, {})
    store.update_settings(agent.id, {"model": "m2", "x": 1})
    store.set_summary(agent.id, "they talked")
    store.set_state(agent.id, {"counter": {"ratio": 3.5}})
    store.touch(agent.id)
    row = store.get_agent_by_id(agent.id)
    assert (row.model, row.settings, row.summary) == ("m2", {"model": "m2", "x": 1}, "they talked")
    assert row.state == {"counter": {"ratio": 3.5}} and row.last_used_at is not None
    store.create_agent("zed", {}, {})
    store.create_agent("Zebra", {}, {})
    store.rename_agent("default", "alpha")
    assert [a.name for a in store.list_agents()] == ["Zebra", "alpha", "zed"]  # code points
    with pytest.raises(StoreError, match="already exists"):
        store.rename_agent("alpha", "zed")
    with pytest.raises(StoreError, match="no agent"):
        store.delete_agent("missing")
    assert store.get_agent("alpha").uid == agent.uid  # stable across renames


def test_two_renames_to_one_name_at_once_say_it_exists(store_target, store, agent):
    """The second waits for the first's transaction; on Postgres its re-check cannot see
    the first's name yet, and it met the unique index: 'The database … refused the write'."""
    import threading

    store.create_agent("other", {}, {})
    outcome = []
    with open_store(store_target) as second:
        def rename_other():
            try:
                second.rename_agent("other", "taken")
                outcome.append("renamed")
            except StoreError as exc:
                outcome.append(str(exc))

        with store.transaction():
            store.rename_agent("default", "taken")
            worker = threading.Thread(target=rename_other)
            worker.start()
            worker.join(1)  # it waits for this transaction to end
        worker.join(30)
    assert outcome == ["An agent named 'taken' already exists."]
    assert store.get_agent("other") is not None


def test_a_renamed_agent_is_found_under_its_old_names(store, agent):
    """A -> B -> C: both old names lead to C; renaming back makes a name real again; a new
    agent of an old name takes it back; deleting the agent drops its old names."""
    store.rename_agent("default", "b")
    store.rename_agent("b", "c")
    assert store.get_agent("default") is None
    assert store.renamed_agent("default").id == store.renamed_agent("b").id == agent.id
    assert store.renamed_agent("c") is None  # a real name is no alias
    store.rename_agent("c", "default")  # back: 'default' is its name again
    assert store.renamed_agent("default") is None
    assert store.renamed_agent("c").name == "default"
    fresh = store.create_agent("c", {}, {})  # on purpose: 'c' is a new agent's
    assert store.renamed_agent("c") is None and store.get_agent("c").id == fresh.id
    assert store.renamed_agent("b").name == "default"
    store.delete_agent("default")
    assert store.renamed_agent("b") is None and count(store, "agent_aliases") == 0
    assert store.integrity_problems() == []


def test_delete_agent_removes_all_its_memory(store, agent):
    other = store.create_agent("other", {}, {"human": ("kept", 100)})
    store.add_message(agent.id, text_msg("user", "hello there", 1))
    store.add_passage(agent.id, "a fact")
    store.delete_turns(agent.id, [1])  # a tombstone
    store.delete_agent("default")
    for table in ("messages", "passages", "blocks", "block_history", "tombstones"):
        assert count(store, table) == (1 if table in ("blocks", "block_history") else 0), table
    assert store.get_agent("default") is None
    assert store.get_block(other.id, "human").value == "kept"
    assert store.integrity_problems() == []


def test_blocks_order_limits_and_history(store, agent):
    store.set_block(agent.id, "notes", "n", 50)
    store.set_block(agent.id, "human", "Name: Ann", source="user")
    assert [b.label for b in store.get_blocks(agent.id)] == ["persona", "human", "notes"]
    assert store.get_block(agent.id, "human").limit == 100  # limit kept when not given
    with pytest.raises(ValueError, match="over its limit"):
        store.set_block(agent.id, "human", "x" * 101)
    hist = store.block_history(agent.id, "human")
    assert [(h["old_value"], h["new_value"], h["source"]) for h in hist] == [
        (None, "Unknown.", "init"), ("Unknown.", "Name: Ann", "user")]
    assert len(store.block_history(agent.id)) == 4


def test_shared_blocks_are_one_value_for_every_agent_that_shares_them(store, agent):
    other = store.create_agent("other", {}, {"human": ("own", 100)})
    assert store.share_block(agent.id, "human") is False  # it becomes the shared one
    assert store.share_block(other.id, "human") is True  # joined another value
    assert store.shared_block_agents("human") == ["default", "other"]
    store.set_block(other.id, "human", "Name: Ann", expected="Unknown.")
    assert store.get_block(agent.id, "human") == Block("human", "Name: Ann", 100, "user")
    with pytest.raises(BlockChanged):  # a write from a stale read is refused
        store.set_block(agent.id, "human", "Name: Bo", expected="Unknown.")
    store.apply_outside_edit(agent.id, "human", "Name: Cy")
    assert store.get_block(other.id, "human").value == "Name: Cy"
    assert store.unshare_block(other.id, "human") and not store.unshare_block(other.id, "human")
    store.set_block(other.id, "human", "mine")
    assert store.get_block(agent.id, "human").value == "Name: Cy"
    store.delete_agent("default")
    assert store.shared_block_agents("human") == []


def test_corrections_keep_history_that_search_never_returns(store, agent):
    a = store.add_passage(agent.id, "Jonas is allergic to peanuts")
    b = store.add_passage(agent.id, "Jonas lives in Lisbon")
    store.update_passage(agent.id, a, "Jonas is no longer allergic to peanuts")
    assert store.retire_passage(agent.id, b, "moved").text == "Jonas lives in Lisbon"
    with pytest.raises(LookupError):
        store.update_passage(agent.id, b, "x")
    assert store.get_passage(agent.id, b) is None
    assert [h.text for h in store.search_passages(agent.id, "allergic Lisbon").hits] == \
        ["Jonas is no longer allergic to peanuts"]
    versions = store.passage_versions(agent.id)
    assert [(v.passage_id, v.change) for v in versions] == [(a, "update"), (b, "delete")]
    assert store.deleted_version(agent.id, b).reason == "moved"
    assert store.add_passage(agent.id, "new") not in (a, b)  # a deleted id is never reused
    assert [h.id for h in store.similar_passages(agent.id, "is Jonas allergic to peanuts")] \
        == [a]
    assert store.purge_passage_versions(agent.id, [versions[1].id]) == 1
    assert store.delete_passages(agent.id, [a]) == 1 and store.passage_versions(agent.id) == []
    assert store.integrity_problems() == []


def test_a_recording_delta_carries_history_and_scopes(store, agent):
    from memgpt_lite.engine.store import snapshot

    since = store.revision(agent.id)
    pid = store.add_passage(agent.id, "tea")
    store.update_passage(agent.id, pid, "green tea")
    store.share_block(agent.id, "human")
    delta = snapshot.changes_since(store, agent.id, since)
    assert [v["text"] for v in delta["passage_history"]] == ["tea"]
    assert {b["label"]: b["scope"] for b in delta["blocks"]} == {"persona": "agent",
                                                                 "human": "user"}


# ---------------------------------------------------------------- messages


def test_messages_roundtrip_context_and_turns(store, agent):
    m1 = text_msg("user", "hi", 1)
    store.add_message(agent.id, m1)
    assert m1.id and m1.created_at.endswith("Z") and len(m1.created_at) == 20
    tool_use = Message("assistant", [{"type": "tool_use", "id": "t1", "name": "x",
                                      "input": {"b": 1, "a": 2}}], 1)
    tool_res = Message("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], 1)
    store.add_messages(agent.id, [tool_use, tool_res, text_msg("assistant", "done", 1),
                                  text_msg("user", "next", 2, created_at="2025-01-02T00:00:00Z")])
    assert tool_use.id < tool_res.id
    assert [m.id for m in store.context_messages(agent.id)] == [m1.id, tool_use.id, tool_res.id,
                                                                tool_res.id + 1, tool_res.id + 2]
    # stored content reads back as it was written, key order included (the prompt cache)
    assert list(store.turn_messages(agent.id, 1)[1].content[0]["input"]) == ["b", "a"]
    assert store.max_turn_id(agent.id) == 2
    assert store.turn_messages(agent.id, 2)[0].created_at == "2025-01-02T00:00:00Z"
    store.set_in_context(agent.id, [1], False)
    assert [m.turn_id for m in store.context_messages(agent.id)] == [2]
    store.set_context_content(agent.id, tool_res.id, [{"type": "text", "text": "[folded]"}])
    got = store.turn_messages(agent.id, 1)[2]
    assert got.content == tool_res.content and got.api_content()[0]["text"] == "[folded]"
    assert got.in_context is False
    assert store.agent_stats(agent.id)["turns"] == 2
    assert store.message_positions(agent.id) == [1, 2, 3, 4, 5]
    assert store.delete_turns(agent.id, [1]) == 4
    assert store.agent_stats(agent.id)["messages"] == 1
    assert store.max_turn_id(store.create_agent("b", {}, {}).id) == 0
    assert store.integrity_problems() == []


def test_update_message_reindexes(store, agent):
    m = text_msg("user", "alpha", 1)
    store.add_message(agent.id, m)
    m.content = [{"type": "text", "text": "bravo"}]
    m.in_context = False
    store.update_message(agent.id, m)
    assert store.search_messages(agent.id, "alpha").total == 0
    assert store.search_messages(agent.id, "bravo").total == 1
    assert store.turn_messages(agent.id, 1)[0].in_context is False
    assert store.integrity_problems() == []


def test_text_that_is_not_valid_unicode_is_stored_without_error(store, agent):
    store.add_message(agent.id, text_msg("user", "bad \ud800 text and a nul\x00byte", 1))
    assert store.turn_messages(agent.id, 1)[0].content == [
        {"type": "text", "text": "bad \ufffd text and a nul\x00byte"}]
    assert store.search_messages(agent.id, "bad \udfff").total == 1
    assert store.search_messages(agent.id, "byte").total == 1
    store.set_block(agent.id, "human", "tab\there \ud800")
    assert store.get_block(agent.id, "human").value == "tab\there \ufffd"


def test_queue_reads_see_every_change_and_rollbacks(store, store_target, agent):
    store.add_messages(agent.id, [text_msg("user", "one", 1), text_msg("assistant", "two", 1),
                                  text_msg("user", "three", 2)])
    texts = lambda s: [m.content[0]["text"] for m in s.context_messages(agent.id)]  # noqa: E731
    assert texts(store) == ["one", "two", "three"]
    store.delete_turns(agent.id, [2])
    store.add_message(agent.id, text_msg("user", "reused id", 2))  # may take the freed id
    assert texts(store) == ["one", "two", "reused id"]
    with open_store(store_target) as other:
        msg = other.context_messages(agent.id)[0]
        msg.content = [{"type": "text", "text": "changed elsewhere"}]
        other.update_message(agent.id, msg)
    assert texts(store) == ["changed elsewhere", "two", "reused id"]
    with pytest.raises(RuntimeError):
        with store.transaction():
            msg = store.context_messages(agent.id)[0]
            msg.content = [{"type": "text", "text": "rolled back"}]
            store.update_message(agent.id, msg)
            assert texts(store)[0] == "rolled back"
            raise RuntimeError("undo")
    assert texts(store)[0] == "changed elsewhere"


# ---------------------------------------------------------------- isolation


def test_agents_never_see_each_other(store):
    a = store.create_agent("a", {}, {"human": ("A secret", 100)})
    b = store.create_agent("b", {}, {"human": ("B data", 100)})
    store.add_message(a.id, text_msg("user", "zebra password is hunter2", 1))
    store.add_passage(a.id, "zebra archive", ["secret"])
    assert store.search_messages(b.id, "zebra hunter2").total == 0
    assert store.search_passages(b.id, "zebra", tags=["secret"]).total == 0
    assert store.near_duplicate(b.id, "zebra archive") is None
    assert store.context_messages(b.id) == [] and store.turn_messages(b.id, 1) == []
    assert store.list_passages(b.id) == [] and store.count_passages(b.id) == 0
    assert store.get_block(b.id, "human").value == "B data"
    assert store.delete_turns(b.id, [1]) == 0
    assert store.delete_passages(b.id, [1]) == 0
    store.set_in_context(b.id, [1], False)
    msg = store.turn_messages(a.id, 1)[0]
    msg.content = [{"type": "text", "text": "overwritten"}]
    store.update_message(b.id, msg)
    assert store.turn_messages(a.id, 1)[0].content[0]["text"].startswith("zebra")
    assert store.turn_messages(a.id, 1)[0].in_context is True
    assert store.search_messages(a.id, "zebra").total == 1


# ---------------------------------------------------------------- search


def test_search_stems_pages_dates_and_replies(store, agent):
    store.add_messages(agent.id, [
        text_msg("user", "I deployed the blog yesterday", 1, created_at="2025-01-01T10:00:00Z"),
        text_msg("assistant", "Great, the deploy worked.", 1, created_at="2025-01-01T10:00:05Z"),
        text_msg("user", "Deploying again today", 2, created_at="2025-02-01T10:00:00Z"),
        text_msg("assistant", "Noted.", 2, created_at="2025-02-01T10:00:05Z")])
    page = store.search_messages(agent.id, "deploy", per_page=2)
    assert (page.total, page.pages, len(page.hits)) == (3, 2, 2)
    assert store.search_messages(agent.id, "deploy", page=2, per_page=2).hits
    dated = store.search_messages(agent.id, "deploy", start_date="2025-02-01")
    assert [h.text for h in dated.hits] == ["Deploying again today"]
    assert [c.text for c in dated.hits[0].context] == ["Noted."]
    assert store.search_messages(agent.id, "deploy", end_date="2025-01-01").total == 2
    replies = store.replies(agent.id, [dated.hits[0].id])
    assert [h.text for h in replies[dated.hits[0].id]] == ["Noted."]


def test_cjk_questions_find_cjk_answers(store, agent):
    store.add_messages(agent.id, [text_msg("user", "部署博客前必须运行 hexo g", 1),
                                  text_msg("assistant", "好的,记住了。", 1),
                                  text_msg("user", "今天天气很好", 2)])
    hits = store.search_messages(agent.id, "部署前要做什么").hits
    assert hits[0].text == "部署博客前必须运行 hexo g"
    assert store.search_messages(agent.id, "天").hits[0].text == "今天天气很好"  # one character


@pytest.mark.parametrize("query", ["", "   ", "\"", "'; DROP TABLE messages; --", "a*b OR c",
                                   "NEAR(x y)", "🙂🙂", "\x00", "\\", ":*", "&|!", "-- ++"])
def test_search_never_raises_on_odd_queries(store, agent, query):
    store.add_message(agent.id, text_msg("user", "plain words and symbols :* & |", 1))
    store.search_messages(agent.id, query)
    store.search_passages(agent.id, query)


def test_passages_tags_duplicates_lists_and_deletes(store, agent):
    first = store.add_passage(agent.id, "Ann likes green tea", ["food", "ann"],
                              "2025-01-01T00:00:00Z")
    second = store.add_passage(agent.id, "Ann's cat is called Miso", ["pets"])
    assert (first, second) == (1, 2)  # ids the model sees, counted per agent
    assert store.search_passages(agent.id, "tea").hits[0].created_at == "2025-01-01T00:00:00Z"
    assert store.search_passages(agent.id, "ann", tags=["pets"]).hits[0].id == second
    assert store.search_passages(agent.id, "ann", tags=["nope"]).total == 0
    assert store.near_duplicate(agent.id, "ann LIKES green   tea").id == first
    assert store.near_duplicate(agent.id, "Ann likes green tea!").id == first
    assert store.near_duplicate(agent.id, "something else entirely") is None
    long_text = "word " * 5_000  # longer than an index entry may be
    third = store.add_passage(agent.id, long_text)
    assert store.near_duplicate(agent.id, long_text).id == third
    assert [p.id for p in store.list_passages(agent.id, limit=2, offset=1)] == [second, third]
    assert len(store.list_passages(agent.id, limit=None)) == store.count_passages(agent.id) == 3
    assert store.passage_turns(agent.id) == [None, None, None]
    assert store.delete_passages(agent.id, [first, 999]) == 1
    assert store.search_passages(agent.id, "tea").total == 0
    assert store.integrity_problems() == []


# ---------------------------------------------------------------- revisions


def test_every_write_bumps_the_revision_and_deletions_leave_tombstones(store, agent):
    start = store.revision(agent.id)
    store.add_messages(agent.id, [text_msg("user", "one", 1), text_msg("assistant", "two", 1)])
    pid = store.add_passage(agent.id, "kept fact")
    after_writes = store.revision(agent.id)
    assert after_writes > start
    changed = list(store.snapshot_rows(agent.id, "messages", since=start))
    assert [r["index_text"] for r in changed] == ["one", "two"]
    assert set(changed[0]) >= {"id", "agent_id", "turn_id", "seq", "rev", "status", "in_context"}
    assert changed[0]["in_context"] == 1
    store.delete_passages(agent.id, [pid])
    store.delete_turns(agent.id, [1])
    assert sorted(store.tombstones_since(agent.id, after_writes)) == [
        ("messages", 1), ("messages", 2), ("passages", pid)]
    assert store.count_changes(agent.id, after_writes) == 3
    assert store.revision(agent.id) > after_writes
    with store.read_snapshot():
        assert [r["id"] for r in store.snapshot_rows(agent.id, "agents")] == [agent.id]


# ---------------------------------------------------------------- turns


def test_an_undone_turn_leaves_memory_as_it_was(store, agent):
    store.add_messages(agent.id, [text_msg("user", "old", 1), text_msg("assistant", "ok", 1)])
    store.set_summary(agent.id, "before")
    before = ([(b.label, b.value) for b in store.get_blocks(agent.id)],
              store.count_passages(agent.id), store.block_history(agent.id))
    user = text_msg("user", "new turn", 2)
    store.begin_turn(agent.id, user)
    store.set_block(agent.id, "human", "Plays cello.")
    store.set_block(agent.id, "made_up", "new block", 100)
    store.add_passage(agent.id, "cello lessons on tuesdays")
    store.set_in_context(agent.id, [1], False)
    store.set_context_content(agent.id, 1, [{"type": "text", "text": "[folded]"}])
    store.set_summary(agent.id, "during")
    assert store.unfinished_turns(agent.id) == []  # the running turn is not unfinished
    store.undo_turn(agent.id, 2)
    assert ([(b.label, b.value) for b in store.get_blocks(agent.id)],
            store.count_passages(agent.id), store.block_history(agent.id)) == before
    assert store.get_agent_by_id(agent.id).summary == "before"
    assert [m.id for m in store.context_messages(agent.id)] == [1, 2]
    assert store.context_messages(agent.id)[0].context_content is None
    assert [(m.status, m.in_context) for m in store.turn_messages(agent.id, 2)] == [
        ("interrupted", False)]
    assert count(store, "turn_effects") == 0
    assert store.integrity_problems() == []


def test_a_turn_left_open_by_a_dead_process_is_found_and_undone(store, store_target, agent):
    user = text_msg("user", "cut off", 1)
    store.begin_turn(agent.id, user)
    store.add_passage(agent.id, "written by the cut-off turn")
    store.close()  # the process dies: the turn stays open in the database
    with open_store(store_target) as again:
        assert again.unfinished_turns(agent.id) == [1]
        again.undo_turn(agent.id, 1)
        assert again.unfinished_turns(agent.id) == [] and again.count_passages(agent.id) == 0


def test_commit_and_pop_turns(store, agent):
    user = text_msg("user", "remember tea", 1)
    store.begin_turn(agent.id, user)
    store.set_block(agent.id, "human", "Likes tea.")
    pid = store.add_passage(agent.id, "tea fact")
    store.commit_turn(agent.id, user, [text_msg("assistant", "noted", 1)])
    assert [m.role for m in store.context_messages(agent.id)] == ["user", "assistant"]
    assert store.passage_turns(agent.id) == [1] and count(store, "turn_effects") == 0
    popped = store.pop_turns(agent.id, [1])
    assert (popped.blocks_reverted, popped.passages_deleted) == (["human"], [pid])
    assert store.get_block(agent.id, "human").value == "Unknown."
    assert store.context_messages(agent.id) == [] and store.count_passages(agent.id) == 0


def test_pop_turns_names_the_turns_that_had_left_the_queue(store, agent):
    for turn in (1, 2, 3):
        user = text_msg("user", f"message {turn}", turn)
        store.begin_turn(agent.id, user)
        store.commit_turn(agent.id, user, [text_msg("assistant", "ok", turn)])
    store.set_in_context(agent.id, [1, 2], False)
    assert store.pop_turns(agent.id, [2, 3]).summarised == [2]
    assert store.pop_turns(agent.id, [1]).summarised == [1]


def test_the_last_turns_of_more_than_a_database_integer_are_all_of_them(store, agent):
    """`/pop 99999999999999999999` ended the chat in an OverflowError traceback."""
    for turn in (1, 2):
        user = text_msg("user", f"message {turn}", turn)
        store.begin_turn(agent.id, user)
        store.commit_turn(agent.id, user, [text_msg("assistant", "ok", turn)])
    assert store.last_turn_ids(agent.id, 10**20) == [1, 2]
    assert store.last_turn_ids(agent.id, 2**63) == [1, 2]


# ---------------------------------------------------------------- transfer


def test_export_import_roundtrip(store, agent):
    store.set_block(agent.id, "human", "Name: Ann")
    store.add_messages(agent.id, [text_msg("user", "deploy the blog", 1, in_context=False),
                                  text_msg("assistant", "done", 1, in_context=False),
                                  text_msg("user", "thanks", 2), text_msg("assistant", "ok", 2)])
    store.add_passage(agent.id, "Ann likes tea", ["food"], "2025-01-01T00:00:00Z")
    store.set_summary(agent.id, "earlier: greetings")
    doc = transfer.export_agent(store, "default")
    copy = transfer.import_agent(store, doc, name="copy")
    assert copy.summary == "earlier: greetings" and copy.settings == agent.settings
    assert store.get_blocks(copy.id) == store.get_blocks(agent.id)
    assert store.search_messages(copy.id, "deploying").total == 1
    assert [m.in_context for m in store.turn_messages(copy.id, 2)] == [True, True]
    assert _same_export(transfer.export_agent(store, "copy"), doc)
    with pytest.raises(StoreError, match="already exists"):
        transfer.import_agent(store, doc)
    broken = dict(doc, blocks=doc["blocks"] + [dict(doc["blocks"][0])])  # a label twice
    with pytest.raises(StoreError, match="damaged"):
        transfer.import_agent(store, broken, name="broken")
    assert store.get_agent("broken") is None


def _same_export(a: dict, b: dict) -> bool:
    strip = lambda d: {k: v for k, v in d.items() if k != "exported_at"}  # noqa: E731
    a, b = without_passage_ids(strip(a)), without_passage_ids(strip(b))
    a["agent"], b["agent"] = dict(a["agent"], name="x"), dict(b["agent"], name="x")
    return a == b


def without_passage_ids(doc: dict) -> dict:
    """An export with its passage ids replaced by their order (an import gives new ids: on
    SQLite they are the data dir's), the history pointing at the same order."""
    order = {p["id"]: i for i, p in enumerate(doc.get("passages", []))}
    gone: dict[int, str] = {}
    history = [{**v, "passage_id": order.get(v["passage_id"]) if v["passage_id"] in order
                else gone.setdefault(v["passage_id"], f"gone {len(gone)}")}
               for v in doc.get("passage_history", [])]
    passages = [{k: v for k, v in p.items() if k != "id"} for p in doc.get("passages", [])]
    return {**doc, "passages": passages, "passage_history": history}


# ---------------------------------------------------------------- vectors


def test_vectors_are_stored_scanned_and_dropped_with_their_rows(store, agent):
    np = pytest.importorskip("numpy")
    store.add_messages(agent.id, [text_msg("user", "a dog", 1), text_msg("assistant", "a cat", 1),
                                  Message("user", [{"type": "tool_result", "tool_use_id": "t",
                                                    "content": "x"}], 1)])
    pid = store.add_passage(agent.id, "a fish")
    assert [i for i, _ in store.texts_to_embed(agent.id, "messages", "m")] == [1, 2]
    assert store.last_row_id(agent.id, "messages") == 3
    vectors = np.eye(4, dtype=np.float32)[:2]
    assert store.put_vectors(agent.id, "messages", "m", [1, 2], vectors) == 2
    assert store.put_vectors(agent.id, "passages", "m", [pid], np.eye(4, dtype=np.float32)[3:])
    assert store.put_vectors(agent.id, "messages", "m", [99], vectors[:1]) == 0  # gone rows
    assert store.put_vectors(agent.id, "messages", "m", [1], vectors[:1], ["a cat"]) == 0
    assert store.vector_dim(agent.id, "m") == 4 and store.vector_models(agent.id) == {"m": 3}
    scores = store.dense_scores(agent.id, "messages", "m", np.array([1, 0, 0, 0], np.float32))
    assert max(scores, key=scores.get) == 1 and scores[1] == pytest.approx(1.0, abs=0.01)
    assert store.texts_to_embed(agent.id, "messages", "m") == []
    counts = store.vector_counts(agent.id, "m")
    assert counts["messages"] == {"rows": 2, "current": 2, "other": 0, "missing": 0}
    wide = store.add_passage(agent.id, "a bird")  # embedded by a model of another size
    assert store.put_vectors(agent.id, "passages", "m", [wide], np.ones((1, 8), np.float32))
    fish = np.eye(4, dtype=np.float32)[3]
    assert list(store.dense_scores(agent.id, "passages", "m", fish)) == [pid]
    assert store.delete_vectors(agent.id, except_model="m", except_dim=4) == 1  # the 8 wide
    store.delete_turns(agent.id, [1])  # a deleted row takes its vector with it
    assert store.dense_scores(agent.id, "messages", "m", np.ones(4, np.float32) / 2) == {}
    assert store.delete_vectors(agent.id, except_model="other") == 1
    assert store.vector_models(agent.id) == {}


# ---------------------------------------------------------------- forget


def test_a_forget_reaches_what_another_connection_wrote_after_its_preview(store, agent,
                                                                          store_target):
    """`memgpt-lite mcp` writes without the agent's lock: a passage it stored while the
    preview waited for the user's answer survived a forget that did only the preview's
    units. The store changed since the preview's mark, so the units are found anew."""
    from memgpt_lite.engine.matching import Matcher

    matcher = Matcher.build("tulip-42")
    store.add_passage(agent.id, "the code is tulip-42")
    mark = store.forget_mark()
    units = store.forget_units(agent.id, matcher)
    with open_store(store_target) as other:  # another process, in effect
        other.add_passage(agent.id, "again: tulip-42")
        other.set_block(agent.id, "human", "Code: tulip-42\nLikes tea")
    done = store.apply_forget(agent.id, units, matcher, mark=mark)
    assert sorted(u.place for u in done) == ["block history", "core memory", "passages",
                                             "passages"]
    assert store.forget_units(agent.id, matcher) == []
    assert store.get_block(agent.id, "human").value == "Likes tea"
    unchanged = store.forget_mark()
    assert store.apply_forget(agent.id, [], matcher, mark=unchanged) == []


# ---------------------------------------------------------------- integrity


def test_integrity_finds_an_index_out_of_step_and_rebuild_mends_it(store, agent):
    store.add_message(agent.id, text_msg("user", "hello world", 1))
    assert store.integrity_problems() == []
    store.db.execute("UPDATE messages SET index_text = 'other words'")  # behind its back
    problems = store.integrity_problems()
    assert problems and "messages search index of agent 'default'" in problems[0]
    store.rebuild_search_index()
    assert store.integrity_problems() == []
    assert store.search_messages(agent.id, "other").total == 1


# ---------------------------------------------------------------- ranking


def test_both_backends_rank_a_corpus_identically(tmp_path, pg_url):
    """The same history on SQLite and on Postgres: every query finds the same rows with the
    same scores (what makes a replay of a Postgres session on SQLite exact)."""
    from memgpt_lite.lab.bench.corpus import synthetic_messages, synthetic_queries

    rng = random.Random(17)
    stores = [open_store(str(tmp_path / "a.db")), open_store(pg_url)]
    extra = ["部署博客前必须运行 hexo g", "allergies to peanuts; allergic reaction",
             "the medicine and medication", "went to the support group", "x" * 300,
             "naïve café résumé", "emoji 🙂 and tabs\tand\nnewlines"]
    for s in stores:
        aid = s.create_agent("a", {}, {}).id
        msgs = synthetic_messages(random.Random(5), 1_500)
        for i, m in enumerate(msgs):
            m.turn_id = 1 + i // 2
        s.add_messages(aid, msgs + [text_msg("user", t, 900 + i) for i, t in enumerate(extra)])
        for i in range(200):
            s.add_passage(aid, msgs[i * 3].content[0]["text"], ["t"] if i % 2 else [])
        s.delete_turns(aid, [3, 4, 50])
    queries = synthetic_queries(rng, 60) + extra + ["部署前要做什么", "allergy", "go", "medic",
                                                     "café", "the and of", "天", "x" * 300]
    for q in queries:
        pages = [s.search_messages(1, q, per_page=10) for s in stores]
        assert [(h.id, h.score, [c.id for c in h.context]) for h in pages[0].hits] == \
            [(h.id, h.score, [c.id for c in h.context]) for h in pages[1].hits], q
        assert pages[0].total == pages[1].total, q
        passages = [s.search_passages(1, q, per_page=10, tags=["t"] if len(q) % 2 else None)
                    for s in stores]
        assert [(h.id, h.score) for h in passages[0].hits] == \
            [(h.id, h.score) for h in passages[1].hits], q
    for s in stores:
        s.close()


# ---------------------------------------------------------------- the protocol itself

# The store's own implementation (the domains over the database seam, the backends) is not
# a caller of the protocol; snapshot.py and transfer.py are.
IMPLEMENTATION = {"base", "core", "database", "tables", "sql", "agents", "blocks", "recall",
                  "archive", "turns", "vectors", "forget", "history", "scrub", "terms"}
# Used on a SQLiteStore only: a replay's store (the passage and message ids it is told to
# give) and a base snapshot file (written and materialised in SQLite, see snapshot.py).
SQLITE_ONLY = {"planned_passage_ids", "planned_message_ids", "copy_agent", "db"}


def test_the_protocol_lists_exactly_what_the_engine_terminal_and_lab_call():
    import ast
    from pathlib import Path

    import memgpt_lite
    from memgpt_lite.engine.store.base import Store

    called: set[str] = set()
    for path in Path(memgpt_lite.__file__).parent.rglob("*.py"):
        parts = path.relative_to(Path(memgpt_lite.__file__).parent).parts
        if parts[:2] == ("engine", "store") and (len(parts) > 3 or path.stem in IMPLEMENTATION):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if name in ("store", "_store"):
                    called.add(node.attr)
    listed = {n for n in Store.__dict__ if not n.startswith("_")}
    assert called - SQLITE_ONLY == listed

from __future__ import annotations

import sqlite3
from contextlib import closing
import stat

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.setting_rules import ConfigError
from memgpt_lite.engine.store import StoreError, transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS, _m001_initial


def text_msg(role, text, turn, **kw):
    return Message(role, [{"type": "text", "text": text}], turn, **kw)


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "data" / "memgpt.db")
    yield s
    s.close()


@pytest.fixture
def agent(store):
    return store.create_agent("default", {"model": "m1"},
                              {"persona": ("I help.", 100), "human": ("Unknown.", 100)})


# ---------------------------------------------------------------- file, pragmas, migrations


def test_open_default_uses_data_dir_with_private_permissions(_isolated_home):
    with SQLiteStore(config.db_path()) as s:
        assert s.path == config.db_path()
    assert stat.S_IMODE(_isolated_home.stat().st_mode) == 0o700
    assert stat.S_IMODE(config.db_path().stat().st_mode) == 0o600


def test_pragmas(store):
    db = store.db.connection
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_fresh_db_has_every_migration_in_ledger(store):
    assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
    assert store.schema_version() == len(MIGRATIONS)
    rows = store.db.connection.execute("SELECT name, applied_at FROM schema_migrations").fetchall()
    assert all(r[1].endswith("Z") for r in rows)


def test_reopen_does_not_reapply(tmp_path):
    path = tmp_path / "db"
    SQLiteStore(path).close()
    with SQLiteStore(path) as s:
        assert s.applied_migrations() == [name for name, _ in MIGRATIONS]
        assert s.db.connection.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(
            MIGRATIONS)


def make_old_db(path):
    """A database as the first release wrote it: migration 1 only, with data in it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    _m001_initial(db)
    db.execute("INSERT INTO schema_migrations VALUES ('001_initial', '2025-01-01T00:00:00Z')")
    db.execute("INSERT INTO agents (name, created_at) VALUES ('old', '2025-01-01T00:00:00Z')")
    db.execute("INSERT INTO messages (agent_id, turn_id, role, content, index_text, created_at) "
               "VALUES (1, 1, 'user', '[{\"type\": \"text\", \"text\": \"my cat Tom\"}]', "
               "'my cat Tom', '2025-01-01T00:00:00Z')")
    db.execute("INSERT INTO passages (agent_id, text, norm, index_text, created_at) VALUES "
               "(1, 'Tom likes tuna', 'tom likes tuna', 'Tom likes tuna', '2025-01-01')")
    db.close()


def test_old_db_is_upgraded_and_existing_rows_become_searchable(tmp_path):
    path = tmp_path / "old.db"
    make_old_db(path)
    with SQLiteStore(path) as s:
        assert s.applied_migrations() == [name for name, _ in MIGRATIONS]
        agent = s.get_agent("old")
        assert [h.text for h in s.search_messages(agent.id, "cats").hits] == ["my cat Tom"]
        assert s.search_passages(agent.id, "tuna").total == 1
        assert s.integrity_problems() == []


def test_not_a_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 50)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a SQLite database"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_a_data_dir_that_cannot_be_made_is_one_sentence(tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    folder = tmp_path / "a-file" / "home"  # as on a read-only mount: mkdir fails
    with pytest.raises(ConfigError) as info:  # a path the user can mend: exit 2 at the CLI
        SQLiteStore(folder / "memgpt_lite.db")
    assert str(info.value) == (f"The data dir {folder} cannot be created: a part of that path "
                               "is a file, not a folder; move it away or point MEMGPT_LITE_HOME "
                               "elsewhere.")


def test_a_data_dir_that_is_a_file_is_one_sentence(tmp_path):
    folder = tmp_path / "a-file"
    folder.write_text("not a folder\n")
    with pytest.raises(ConfigError) as info:  # a path the user can mend: exit 2 at the CLI
        SQLiteStore(folder / "memgpt_lite.db")
    assert str(info.value) == (f"The data dir {folder} is a file, not a folder; move it away "
                               "or point MEMGPT_LITE_HOME elsewhere.")


def test_a_data_dir_that_is_a_link_to_nothing_is_one_sentence_and_nothing_is_made(tmp_path):
    """A link to a drive not mounted: nothing is created where the drive belongs."""
    target = tmp_path / "usb" / "memgpt"
    link = tmp_path / "home"
    link.symlink_to(target)
    for folder in (link, link / "deeper"):
        with pytest.raises(ConfigError) as info:
            SQLiteStore(folder / "memgpt_lite.db")
        assert str(info.value) == (
            f"The data dir {folder} cannot be used: {link} is a link to {target}, which does "
            "not exist (a drive not mounted?); mount or create it, or point MEMGPT_LITE_HOME "
            "elsewhere.")
    assert not (tmp_path / "usb").exists()


def test_newer_schema_is_refused_and_untouched(tmp_path):
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_migrations VALUES ('099_from_the_future', 'x')")
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer memgpt-lite.*099_from_the_future"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_db_is_refused_and_untouched(tmp_path):
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE recipes (name TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="another program"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_empty_file_is_initialised(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with SQLiteStore(path) as s:
        assert s.schema_version() == len(MIGRATIONS)


def test_locked_database_gives_store_error(tmp_path):
    path = tmp_path / "db"
    s = SQLiteStore(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    s.db.connection.execute("PRAGMA busy_timeout = 50")
    try:
        with pytest.raises(StoreError, match="locked"):
            s.create_agent("x", {}, {})
    finally:
        other.execute("ROLLBACK")
        other.close()
        s.close()


# ---------------------------------------------------------------- transactions


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


# ---------------------------------------------------------------- agents and blocks


def test_agent_crud(store, agent):
    assert agent.name == "default" and agent.model == "m1" and agent.settings == {"model": "m1"}
    with pytest.raises(StoreError, match="already exists"):
        store.create_agent("default", {}, {})
    store.update_settings(agent.id, {"model": "m2", "x": 1})
    store.set_summary(agent.id, "they talked")
    store.touch(agent.id)
    row = store.get_agent_by_id(agent.id)
    assert (row.model, row.settings, row.summary) == ("m2", {"model": "m2", "x": 1}, "they talked")
    assert row.last_used_at is not None
    store.create_agent("zed", {}, {})
    store.rename_agent("default", "alpha")
    assert [a.name for a in store.list_agents()] == ["alpha", "zed"]
    with pytest.raises(StoreError, match="already exists"):
        store.rename_agent("alpha", "zed")
    with pytest.raises(StoreError, match="no agent"):
        store.delete_agent("missing")


def test_delete_agent_removes_all_its_memory(store, agent):
    store.add_message(agent.id, text_msg("user", "hello there", 1))
    store.add_passage(agent.id, "a fact")
    store.delete_agent("default")
    for table in ("messages", "passages", "blocks", "block_history", "tombstones"):
        assert store.db.connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
    left = store.db.connection.execute("SELECT name FROM sqlite_master WHERE name LIKE ?",
                             (f"%\\_{agent.id}%",)).fetchall()
    assert [r[0] for r in left if r[0].endswith(f"_{agent.id}")] == []  # its indexes went too
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


# ---------------------------------------------------------------- messages


def test_messages_roundtrip_context_and_turns(store, agent):
    m1 = text_msg("user", "hi", 1)
    store.add_message(agent.id, m1)
    assert m1.id and m1.created_at.endswith("Z") and len(m1.created_at) == 20
    tool_use = Message("assistant", [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}], 1)
    tool_res = Message("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], 1)
    store.add_messages(agent.id, [tool_use, tool_res, text_msg("assistant", "done", 1),
                                  text_msg("user", "next", 2, created_at="2025-01-02T00:00:00Z")])
    assert tool_use.id < tool_res.id
    assert [m.id for m in store.context_messages(agent.id)] == [m1.id, tool_use.id, tool_res.id,
                                                                tool_res.id + 1, tool_res.id + 2]
    assert store.max_turn_id(agent.id) == 2
    assert store.turn_messages(agent.id, 2)[0].created_at == "2025-01-02T00:00:00Z"
    store.set_in_context(agent.id, [1], False)
    assert [m.turn_id for m in store.context_messages(agent.id)] == [2]
    store.set_context_content(agent.id, tool_res.id, [{"type": "text", "text": "[folded]"}])
    got = store.turn_messages(agent.id, 1)[2]
    assert got.content == tool_res.content and got.api_content()[0]["text"] == "[folded]"
    assert got.in_context is False
    assert store.agent_stats(agent.id)["turns"] == 2
    assert store.delete_turns(agent.id, [1]) == 4
    assert store.agent_stats(agent.id)["messages"] == 1
    assert store.max_turn_id(store.create_agent("b", {}, {}).id) == 0


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


def test_lone_surrogates_are_stored_without_error(store, agent):
    m = text_msg("user", "bad \ud800 text", 1)
    store.add_message(agent.id, m)  # the one rule: what is not valid Unicode becomes U+FFFD
    assert store.turn_messages(agent.id, 1)[0].content == [{"type": "text",
                                                           "text": "bad \ufffd text"}]
    assert store.search_messages(agent.id, "bad \udfff").total == 1


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
    assert [x.value for x in store.get_blocks(b.id)] == ["B data"]
    assert store.get_block(b.id, "human").value == "B data"
    # writes addressed to the wrong agent do nothing
    assert store.delete_turns(b.id, [1]) == 0
    assert store.delete_passages(b.id, [1]) == 0
    store.set_in_context(b.id, [1], False)
    msg = store.turn_messages(a.id, 1)[0]
    msg.content = [{"type": "text", "text": "overwritten"}]
    store.update_message(b.id, msg)
    assert store.turn_messages(a.id, 1)[0].content[0]["text"].startswith("zebra")
    assert store.turn_messages(a.id, 1)[0].in_context is True
    assert store.search_messages(a.id, "zebra").total == 1


# ---------------------------------------------------------------- export / import / integrity


def test_export_import_roundtrip(store, agent):
    store.set_block(agent.id, "human", "Name: Ann")
    store.add_messages(agent.id, [text_msg("user", "deploy the blog", 1, in_context=False),
                                  text_msg("assistant", "done", 1, in_context=False),
                                  text_msg("user", "thanks", 2), text_msg("assistant", "ok", 2)])
    store.add_passage(agent.id, "Ann likes tea", ["food"], "2025-01-01T00:00:00Z")
    store.set_summary(agent.id, "earlier: greetings")
    doc = transfer.export_agent(store, "default")
    assert doc["format"] == "memgpt-lite-agent" and doc["version"] == 1
    copy = transfer.import_agent(store, doc, name="copy")
    assert copy.summary == "earlier: greetings" and copy.settings == agent.settings
    assert store.get_blocks(copy.id) == store.get_blocks(agent.id)
    assert len(store.block_history(copy.id)) == len(store.block_history(agent.id))
    assert store.search_messages(copy.id, "deploying").total == 1
    assert [m.in_context for m in store.turn_messages(copy.id, 1)] == [False, False]
    assert [m.in_context for m in store.turn_messages(copy.id, 2)] == [True, True]
    assert store.search_passages(copy.id, "tea", tags=["food"]).hits[0].created_at == \
        "2025-01-01T00:00:00Z"
    with pytest.raises(StoreError, match="already exists"):
        transfer.import_agent(store, doc)
    with pytest.raises(StoreError, match="not a memgpt-lite agent export"):
        transfer.import_agent(store, {"hello": 1})
    broken = dict(doc, messages=[{"role": "user"}])
    with pytest.raises(StoreError, match="damaged"):
        transfer.import_agent(store, broken, name="broken")
    assert store.get_agent("broken") is None


def test_integrity_detects_out_of_sync_index(store, agent):
    store.add_message(agent.id, text_msg("user", "hello world", 1))
    assert store.integrity_problems() == []
    # change the stored text behind the index's back
    store.db.connection.execute("UPDATE messages SET index_text = 'other words' WHERE id = 1")
    problems = store.integrity_problems()
    assert problems and "messages search index of agent 'default'" in problems[0]
    store.rebuild_search_index()
    assert store.integrity_problems() == []


# ---------------------------------------------------------------- the queue's decode cache


def queue_texts(store, agent_id):
    return [m.content[0]["text"] for m in store.context_messages(agent_id)]


def test_queue_reads_see_every_change_made_through_the_store(store, agent):
    store.add_messages(agent.id, [text_msg("user", "one", 1), text_msg("assistant", "two", 1),
                                  text_msg("user", "three", 2)])
    assert queue_texts(store, agent.id) == ["one", "two", "three"]
    store.delete_turns(agent.id, [2])
    store.add_message(agent.id, text_msg("user", "reused id", 2))  # may take the freed id
    assert queue_texts(store, agent.id) == ["one", "two", "reused id"]
    first = store.context_messages(agent.id)[0]
    first.content = [{"type": "text", "text": "edited"}]
    store.update_message(agent.id, first)
    store.set_context_content(agent.id, first.id, [{"type": "text", "text": "[folded]"}])
    assert queue_texts(store, agent.id)[0] == "edited"
    assert store.context_messages(agent.id)[0].api_content()[0]["text"] == "[folded]"


def test_queue_reads_see_changes_from_another_connection_and_rollbacks(store, agent):
    store.add_message(agent.id, text_msg("user", "original", 1))
    assert queue_texts(store, agent.id) == ["original"]
    with SQLiteStore(store.path) as other:
        msg = other.context_messages(agent.id)[0]
        msg.content = [{"type": "text", "text": "changed elsewhere"}]
        other.update_message(agent.id, msg)
    assert queue_texts(store, agent.id) == ["changed elsewhere"]
    with pytest.raises(RuntimeError):
        with store.transaction():
            msg = store.context_messages(agent.id)[0]
            msg.content = [{"type": "text", "text": "rolled back"}]
            store.update_message(agent.id, msg)
            assert queue_texts(store, agent.id) == ["rolled back"]
            raise RuntimeError("undo")
    assert queue_texts(store, agent.id) == ["changed elsewhere"]


@pytest.mark.parametrize("damage", [
    lambda doc: doc["blocks"][0].update(value=None),
    lambda doc: doc["agent"].update(summary=None),
    lambda doc: doc["blocks"].append(dict(doc["blocks"][0])),  # a label twice
])
def test_import_of_an_export_the_schema_refuses_is_damaged_not_a_crash(store, agent, damage):
    doc = transfer.export_agent(store, agent.name)
    damage(doc)
    with pytest.raises(StoreError, match="damaged"):
        transfer.import_agent(store, doc, name="broken")
    assert store.get_agent("broken") is None


def test_an_old_file_is_not_upgraded_under_a_chat_that_has_it_open(tmp_path):
    """The user upgraded while an older version's chat ran: the next command migrated the
    file under it, and that chat went on writing its summary and alert state on the agent's
    row, where the new schema no longer reads them (lost). The file is now left as it is
    until that chat ends."""
    import fcntl
    import os

    from memgpt_lite.engine import locking

    path = tmp_path / "memgpt_lite.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, apply in MIGRATIONS[:7]:  # as the version before conversations left it
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (name,))
    db.close()
    lock = locking.lock_path(tmp_path, "old")
    lock.parent.mkdir()
    lock.write_text("4242")
    chat = os.open(lock, os.O_RDWR)  # the older chat's lock: a flock of its own
    fcntl.flock(chat, fcntl.LOCK_EX)
    try:
        with pytest.raises(StoreError, match=r"from an older memgpt-lite and must be "
                           r"upgraded, but another memgpt-lite process \(pid 4242\) still "
                           r"has an agent of it open.*Nothing was changed"):
            SQLiteStore(path)
    finally:
        os.close(chat)  # the chat ended
    with closing(sqlite3.connect(path)) as check:
        assert check.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == 7
    with SQLiteStore(path) as store:
        assert len(store.applied_migrations()) == len(MIGRATIONS)

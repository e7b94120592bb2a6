"""What only the Postgres backend does, and the command line pointed at it: choosing the
backend (and one sentence without psycopg or a server), its schema and ledger, ids counted
per agent, moving an agent between backends, doctor, the chat, and strict replay of a
Postgres session on SQLite. The shared contract is in test_store_contract.py; processes
killed and racing are in reliability/test_postgres.py."""

from __future__ import annotations

import itertools
import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_store_contract import without_passage_ids

from memgpt_lite.engine import config, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import Message, ModelResponse
from memgpt_lite.engine.store import StoreError, open_store, snapshot
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, estimate_usage, text_response, tool_response
from memgpt_lite.terminal import cli

REPO = Path(__file__).resolve().parents[3]


def run_cli(*args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess:
    import os

    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], input=stdin,
                          capture_output=True, text=True, env=environ, timeout=120)


# --------------------------------------------------------------------------- choosing it


def test_open_store_picks_the_backend(tmp_path, monkeypatch, pg_url):
    from memgpt_lite.engine.store.postgres.store import PostgresStore

    with open_store() as store:
        assert isinstance(store, SQLiteStore) and store.location == str(config.db_path())
    with open_store(f"sqlite:///{str(tmp_path).lstrip('/')}/x.db") as store:
        assert isinstance(store, SQLiteStore) and store.location == f"{tmp_path}/x.db"
    monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", pg_url)
    with open_store() as store:
        assert isinstance(store, PostgresStore)
    with pytest.raises(StoreError, match=r"^mysql:// databases are not supported; use a "):
        open_store("mysql://root@localhost/db")


@pytest.mark.slow
def test_without_psycopg_a_postgres_url_is_one_sentence():
    code = ("import sys; sys.modules['psycopg'] = None; from memgpt_lite.terminal.cli import "
            "main; raise SystemExit(main(['--db', 'postgresql://u@127.0.0.1:9/db', 'agents', "
            "'list']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("memgpt-lite: A postgresql:// database needs psycopg: pip "
                                   "install 'memgpt-lite[postgres]'.")


@pytest.mark.slow
def test_help_and_a_sqlite_start_never_load_psycopg():
    code = ("import sys; from memgpt_lite.terminal.cli import main; main(['--help']); "
            "main(['agents', 'list']); print('psycopg' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("False"), proc.stderr
    assert "--db URL" in proc.stdout and "MEMGPT_LITE_DATABASE_URL" in proc.stdout


@pytest.mark.slow
def test_a_server_that_cannot_be_reached_is_one_sentence_without_the_password():
    pytest.importorskip("psycopg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    proc = run_cli("--db", f"postgresql://ann:hunter2@127.0.0.1:{port}/mem", "agents", "list")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"memgpt-lite: Cannot connect to the database postgresql://ann@127.0.0.1:{port}/mem: ")
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize("url", ["postgres://ann:hunter2@[::1/mem",  # quoted back whole
                                 "postgresql://ann:hunter2@127.0.0.1:99999/mem",
                                 "postgresql://ann:hunter2@/mem?host=%zz"])
def test_a_url_libpq_cannot_parse_is_one_sentence_without_the_password(url, capsys):
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match="^Cannot connect to the database ") as caught:
        open_store(url)
    assert "hunter2" not in str(caught.value) and "ann@" in str(caught.value)
    assert cli.main(["--db", url, "agents", "list"]) == 1
    assert "hunter2" not in capsys.readouterr().err


# --------------------------------------------------------------------------- its schema


def test_a_newer_schema_or_another_programs_tables_are_refused_and_left_alone(pg_url):
    import psycopg

    open_store(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO memgpt_lite.schema_migrations VALUES (99, '099_future', 'x')")
    with pytest.raises(StoreError, match="newer memgpt-lite.*099_future"):
        open_store(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA memgpt_lite CASCADE")
        conn.execute("CREATE SCHEMA memgpt_lite")
        conn.execute("CREATE TABLE memgpt_lite.recipes (name text)")
    with pytest.raises(StoreError, match="another program"):
        open_store(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables WHERE "
                              "table_schema = 'memgpt_lite'").fetchall()
    assert tables == [("recipes",)]


def _database_of_the_version_before(pg_url: str) -> None:
    """A database migrated up to 007 (as the version before conversations left it)."""
    import psycopg

    from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS as PG_MIGRATIONS

    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("CREATE SCHEMA memgpt_lite")
        db.execute("SET search_path TO memgpt_lite")
        db.execute("CREATE TABLE schema_migrations (position INTEGER PRIMARY KEY, name TEXT "
                   "NOT NULL UNIQUE, applied_at TEXT NOT NULL)")
        for position, (name, sql) in enumerate(PG_MIGRATIONS[:7], 1):
            db.execute(sql)
            db.execute("INSERT INTO schema_migrations VALUES (%s, %s, '2026-01-01')",
                       (position, name))


def test_an_old_schema_is_not_upgraded_under_a_chat_that_has_it_open(pg_url, capsys):
    """The user upgraded while an older version's chat ran (here or on another machine):
    the next command migrated the schema under it, and that chat went on writing its summary
    and alert state where the new schema no longer reads them (lost). The schema is now left
    as it is until that chat ends, with the sentence the SQLite file gets."""
    import psycopg

    from memgpt_lite.engine.store.postgres.lock import PostgresAgentLock, lock_key
    from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS as PG_MIGRATIONS

    _database_of_the_version_before(pg_url)

    def ledger() -> int:
        with psycopg.connect(pg_url) as conn:
            return conn.execute("SELECT count(*) FROM memgpt_lite.schema_migrations"
                                ).fetchone()[0]

    refusal = (r"is from an older memgpt-lite and must be upgraded, but another memgpt-lite "
               r"process \({}\) still has an agent of it open; close that chat \(an older "
               r"version's\), then run this command again\. Nothing was changed\.$")
    # The older chat's lock session, as lock.py names it.
    chat = psycopg.connect(pg_url, autocommit=True,
                           application_name="memgpt-lite pid 4242 on laptop")
    try:
        chat.execute("SELECT pg_advisory_lock(%s)", (lock_key("old"),))
        with pytest.raises(StoreError, match=refusal.format("pid 4242 on laptop")):
            open_store(pg_url)
        assert ledger() == 7
        assert cli.main(["--db", pg_url, "agents", "list"]) == 1
        err = capsys.readouterr().err
        assert "pid 4242 on laptop" in err and "Nothing was changed." in err
        assert "Traceback" not in err and ledger() == 7
    finally:
        chat.close()  # the chat ended
    # A holder that does not say who it is: the server's pid of its session, its address.
    other = psycopg.connect(pg_url, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s)", (lock_key("old"),))
        backend = other.info.backend_pid
        with pytest.raises(StoreError, match=refusal.format(f"database session {backend} from 127.0.0.1")):
            open_store(pg_url)
    finally:
        other.close()
    # This process's own lock of an agent is no older chat.
    with PostgresAgentLock(pg_url, "here", "mine"):
        with open_store(pg_url) as store:
            assert len(store.applied_migrations()) == len(PG_MIGRATIONS)


def test_a_role_that_may_not_create_tables_uses_a_migrated_schema(pg_url, capsys):
    """An application role with rights on the rows but not to create tables (its schema
    migrated by its owner) reads and writes; one that may only read lists its agents."""
    import secrets

    import psycopg
    import pg_support

    with open_store(pg_url) as store:
        store.create_agent("ada", {}, {"human": ("Ann.", 500)})
    app, reader = f"app_{secrets.token_hex(4)}", f"reader_{secrets.token_hex(4)}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for role in (app, reader):
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT USAGE ON SCHEMA memgpt_lite TO {role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                     f"memgpt_lite TO {app}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA memgpt_lite TO {app}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA memgpt_lite TO {reader}")
    as_role = {r: pg_support.with_database(pg_url.replace("memgpt@", f"{r}@"),
                                           pg_url.rsplit("/", 1)[1]) for r in (app, reader)}
    try:
        with open_store(as_role[app]) as store:
            store.create_agent("bo", {}, {"human": ("Bo.", 500)})
            assert [a.name for a in store.list_agents()] == ["ada", "bo"]
        assert cli.main(["--db", as_role[reader], "agents", "list"]) == 0
        out = capsys.readouterr().out
        assert "ada" in out and "bo" in out
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for role in (app, reader):
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_migrate_it_once(pg_url):
    from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS as PG_MIGRATIONS

    code = "import sys; from memgpt_lite.engine.store import open_store; open_store(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()  # type: ignore[union-attr]
    with open_store(pg_url) as store:
        assert store.schema_version() == len(PG_MIGRATIONS)
        assert store.db.query("SELECT count(*) FROM schema_migrations")[0][0] == len(PG_MIGRATIONS)


def test_snapshot_rows_have_exactly_the_sqlite_columns(tmp_path, pg_url):
    from memgpt_lite.engine.store.tables import SNAPSHOT_TABLES

    with SQLiteStore(tmp_path / "s.db") as lite, open_store(pg_url) as pg:
        for store in (lite, pg):
            agent = store.create_agent("a", {}, {"human": ("x", 100)})
            for table in SNAPSHOT_TABLES:
                found = tuple(r[1] for r in lite.db.query(f"PRAGMA table_info({table})"))
                rows = list(store.snapshot_rows(agent.id, table))
                assert all(tuple(r) == found for r in rows), f"{table}: must hand over {found}"


def test_ids_the_model_sees_are_counted_per_agent(pg_url):
    with open_store(pg_url) as store:
        a, b = (store.create_agent(n, {}, {}).id for n in ("a", "b"))
        ids = [(store.add_passage(a, f"fact {i} for a"), store.add_passage(b, f"fact {i} for b"))
               for i in range(3)]
        assert ids == [(1, 1), (2, 2), (3, 3)]
        store.delete_passages(a, [3])
        assert store.add_passage(a, "again") == 3  # as SQLite gives an agent alone


def test_text_postgres_cannot_hold_becomes_the_replacement_character(pg_url):
    with open_store(pg_url) as store:
        agent = store.create_agent("a", {}, {"human": ("x", 100)})
        store.set_block(agent.id, "human", "nul\x00here")
        assert store.get_block(agent.id, "human").value == "nul\ufffdhere"
        pid = store.add_passage(agent.id, "a nul\x00in a passage")
        assert store.list_passages(agent.id)[0].text == "a nul\ufffdin a passage"
        assert store.search_passages(agent.id, "passage").hits[0].id == pid


def test_term_row_counts_follow_every_write_and_doctor_mends_them(pg_url):
    """`term_docs` (how many rows hold each term, read by every search) agrees with the rows
    after inserts, edits and deletions; counts gone astray are found and rebuilt."""
    with open_store(pg_url) as store:
        aid = store.create_agent("a", {}, {}).id
        msgs = [Message("user", [{"type": "text", "text": t}], i // 2 + 1)
                for i, t in enumerate(["deploy the blog", "deploy it again", "the cat",
                                       "部署博客前必须运行 hexo g", "", "blog blog blog"])]
        store.add_messages(aid, msgs)
        msgs[1].content = [{"type": "text", "text": "never mind"}]
        store.update_message(aid, msgs[1])
        store.delete_turns(aid, [3])
        pid = store.add_passage(aid, "the blog runs on hexo")
        store.add_passage(aid, "hexo again")
        store.delete_passages(aid, [pid])
        assert [store.index._term_docs_off(k, aid) for k in ("messages", "passages")] == [0, 0]
        assert store.search_messages(aid, "deploy").total == 1
        assert store.db.query("SELECT docs FROM term_docs WHERE lexeme = ?", (f"{aid}:blog",)) == \
            [(1,)]
        store.db.execute("UPDATE term_docs SET docs = docs + 5")  # behind its back
        assert "messages search index of agent 'a'" in store.integrity_problems()[0]
        store.rebuild_search_index()
        assert store.integrity_problems() == []


@pytest.mark.slow
def test_an_agent_opened_twice_in_one_process_shares_its_lock(pg_url):
    with open_store(pg_url) as store:
        first = Agent.open(store, "x", model_client=ScriptedModel([]))
        second = Agent.open(store, "x", model_client=ScriptedModel([]), lock_wait=0)
        first.close()
        second.close()
    code = ("import sys; from memgpt_lite.engine.store import open_store; "
            "open_store(sys.argv[1]).agent_lock('x').acquire(0); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, pg_url], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_two_writers_of_the_same_vectors_take_turns(pg_url):
    """A chat's background indexer and `memgpt-lite index` (or two index runs) embed the
    same new rows at once: the second writer waits for the first and replaces its vectors,
    rather than failing on the unique key (`index` said the database refused the write)."""
    import threading
    import time

    import numpy as np

    with open_store(pg_url) as first, open_store(pg_url) as second:
        row = first.create_agent("idx", {}, {})
        first.add_messages(row.id, [Message("user", [{"type": "text", "text": "my beagle"}], 1,
                                            in_context=False)])
        ids = [m.id for m in first.all_messages(row.id)]
        vectors = np.full((1, 4), 0.5, dtype=np.float32)
        failed: list[BaseException] = []

        def other_writer() -> None:
            try:
                second.put_vectors(row.id, "messages", "fake", ids, vectors)
            except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
                failed.append(exc)

        waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted"
        with first.transaction():  # the first writer has written and not yet committed
            first.put_vectors(row.id, "messages", "fake", ids, vectors)
            thread = threading.Thread(target=other_writer)
            thread.start()
            deadline = time.monotonic() + 30
            while not first.db.query(waiting)[0][0] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert first.db.query(waiting)[0][0], "the second writer never waited"
        thread.join(30)
        assert failed == []
        assert first.vector_counts(row.id, "fake")["messages"]["missing"] == 0
        assert first.db.query("SELECT count(*) FROM vectors")[0][0] == 1


def test_a_row_lock_held_too_long_is_one_sentence_not_a_wait_without_end(pg_url):
    """Another session keeps the agent's row locked (a transaction left open, a process
    stopped mid-write): a write gives up after the wait SQLite's busy timeout allows, with
    a sentence, where it waited for ever (an MCP client's call was never answered)."""
    import threading

    import psycopg

    with open_store(pg_url) as store:
        row = store.create_agent("held", {}, {"human": ("", 100)})
        outcome: list[BaseException | None] = []

        def write() -> None:
            try:
                store.set_summary(row.id, "a write")
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
                outcome.append(exc)

        with psycopg.connect(pg_url) as other:  # its transaction stays open
            other.execute("SELECT * FROM memgpt_lite.agents FOR UPDATE")
            thread = threading.Thread(target=write, daemon=True)
            thread.start()
            thread.join(60)
            assert not thread.is_alive(), "the write waited for the lock for a minute"
        assert isinstance(outcome[0], StoreError)
        assert str(outcome[0]).startswith(f"The database {store.location} is locked by "
                                          "another process (")
        store.set_summary(row.id, "a write")  # the lock is gone: the same write works


def test_the_vacuum_after_a_forget_waits_for_another_however_long(pg_url, monkeypatch):
    """A second forget's VACUUM waits for the first one's; the row-lock wait must not end it
    (the forget would stay pending). LOCK_WAIT is shortened so the test waits past it."""
    import threading
    import time

    import psycopg

    from memgpt_lite.engine.store.postgres import database, store as pg_store

    monkeypatch.setattr(database, "LOCK_WAIT", "200ms")
    monkeypatch.setattr(pg_store, "LOCK_WAIT", "200ms")
    with open_store(pg_url) as store, psycopg.connect(pg_url) as other:
        store.create_agent("vac", {}, {"human": ("", 100)})
        other.execute("LOCK TABLE memgpt_lite.messages IN SHARE UPDATE EXCLUSIVE MODE")
        threading.Thread(target=lambda: (time.sleep(1.0), other.rollback()),
                         daemon=True).start()  # as a VACUUM of the table running for a while
        assert store.wipe_freed() is True
        assert store.db.query("SHOW lock_timeout")[0][0] == "200ms"  # the row-lock wait again


# --------------------------------------------------------------------------- moving, doctor


def make_history(store_target: str) -> None:
    """An agent with every kind of row: turns with tool calls, a block edited (history), a
    passage with tags, one corrected and one deleted (passage history), a user-scope block
    shared with another agent, an evicted turn, a cut-off turn, a summary and learned
    state."""
    script = [tool_response([("core_memory_append", {"label": "human", "content": "Ada."}),
                             ("archival_insert", {"content": "Ada's bike is red.",
                                                  "tags": ["bike"]}),
                             ("archival_insert", {"content": "Ada's cat is Tom."}),
                             ("archival_insert", {"content": "Ada likes tea."})]),
              text_response("Noted."),
              tool_response([("archival_update", {"passage_id": 2,
                                                  "content": "Ada's cat is Tim."}),
                             ("archival_delete", {"passage_id": 3, "reason": "wrong"})]),
              text_response("A static site generator."), text_response("Later.")]
    with open_store(store_target) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel(script))
        for text in ("I'm Ada, my bike is red", "What is hexo?", "部署博客前必须运行 hexo g"):
            list(agent.step(text))
        other = store.create_agent("bob", {}, {"team": ("ships friday", 200)})
        store.share_block(other.id, "team")
        store.share_block(agent.id, "team")
        store.set_in_context(agent.id, [1], False)
        store.set_summary(agent.id, "Ada has a red bike.")
        store.begin_turn(agent.id, Message("user", [{"type": "text", "text": "cut off"}], 4))
        store.undo_turn(agent.id, 4)
        agent.close()


def exported(*args: str, **env: str) -> dict:
    proc = run_cli(*args, "agents", "export", "ada", "-", **env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    doc.pop("exported_at")
    return doc


@pytest.mark.slow
def test_an_agent_moves_between_backends_with_every_table(tmp_path, pg_url):
    make_history(str(config.db_path()))
    from_sqlite = exported()
    assert from_sqlite["block_history"] and from_sqlite["passages"]
    assert [v["change"] for v in from_sqlite["passage_history"]] == ["update", "delete"]
    assert {b["label"]: b["scope"] for b in from_sqlite["blocks"]}["team"] == "user"
    assert {m["status"] for m in from_sqlite["messages"]} == {"", "interrupted"}
    (tmp_path / "ada.json").write_text(json.dumps({**from_sqlite, "exported_at": "x"}))
    assert run_cli("--db", pg_url, "agents", "import", str(tmp_path / "ada.json")).returncode == 0
    from_postgres = exported("--db", pg_url)
    assert without_passage_ids(from_postgres) == without_passage_ids(from_sqlite)
    (tmp_path / "back.json").write_text(json.dumps({**from_postgres, "exported_at": "x"}))
    other_home = tmp_path / "other-home"
    proc = run_cli("agents", "import", str(tmp_path / "back.json"),
                   MEMGPT_LITE_HOME=str(other_home))
    assert proc.returncode == 0, proc.stderr
    assert without_passage_ids(exported(MEMGPT_LITE_HOME=str(other_home))) == \
        without_passage_ids(from_sqlite)
    with open_store(pg_url) as store:  # and it is searchable there, CJK included
        row = store.get_agent("ada")
        assert store.search_messages(row.id, "部署前要做什么").hits[0].text.startswith("部署")
        assert store.search_passages(row.id, "bike", tags=["bike"]).total == 1


def test_doctor_checks_and_repairs_a_postgres_database(capsys, pg_url):
    from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS as PG_MIGRATIONS

    make_history(pg_url)
    assert cli.main(["--db", pg_url, "doctor", "--offline"]) == 0
    out = capsys.readouterr().out
    n = len(PG_MIGRATIONS)
    assert f"database {pg_url}: schema version {n} ({n} migrations applied), 2 agent(s)" in out
    assert "integrity check and search index consistency" in out
    with open_store(pg_url) as store:  # an index entry out of step with its text
        store.db.execute("UPDATE messages SET terms = NULL WHERE id = 1")
    assert cli.main(["--db", pg_url, "doctor", "--offline"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  database: the messages search index of agent 'ada' is out of step" in out
    assert cli.main(["--db", pg_url, "doctor", "--offline", "--repair"]) == 0
    assert "rebuilt the search indexes" in capsys.readouterr().out


@pytest.mark.slow
def test_chat_on_postgres_shows_where_without_the_password(pg_url):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    url = pg_url.replace("memgpt@", "memgpt:hunter2@")  # trust auth: any password works
    with FakeAnthropicServer() as server:
        proc = run_cli("--db", url, "chat", "--agent", "pg", stdin="hello there\n",
                       ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
    assert proc.returncode == 0, proc.stderr
    assert "Fake reply to: hello there" in proc.stdout
    assert f"data {pg_url} · recording to" in proc.stderr and "hunter2" not in proc.stderr
    with open_store(pg_url) as store:
        row = store.get_agent("pg")
        assert [m.role for m in store.context_messages(row.id)] == ["user", "assistant"]


# --------------------------------------------------------------------------- replay


CALLS = itertools.count(1)


class Keeper:
    """A deterministic model: "keep X" makes it store X in archival memory, "find X" makes it
    search for X; anything else gets a short reply."""

    def stream(self, request):
        n = next(CALLS)
        last = request.messages[-1]["content"]
        said = next((b["text"] for b in reversed(last) if b.get("type") == "text"), "")
        answered = any(b.get("type") == "tool_result" for b in last)
        verb, _, rest = said.partition(" ")
        if verb in ("keep", "find") and not answered:
            tool, args = (("archival_insert", {"content": f"{rest} (note {n})"}) if verb == "keep"
                          else ("conversation_search", {"query": rest}))
            content = [{"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": args}]
            response = ModelResponse(content, "tool_use", estimate_usage(request))
        else:
            response = ModelResponse([{"type": "text", "text": f"ok {n}"}], "end_turn",
                                     estimate_usage(request))
        yield ModelResponse(response.content, response.stop_reason,
                            estimate_usage(request, response), request.model, f"m{n}")


def test_postgres_sessions_replay_strictly_on_sqlite(pg_url, monkeypatch):
    """Two agents in one database storing passages in turn (their ids interleave in time),
    searching, popping; bases written from Postgres rows. Every recording replays on SQLite
    with zero divergence."""
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 6)
    settings = Settings(context_window=6_000, max_output_tokens=500)
    store = open_store(pg_url)
    agents = {n: Agent.open(store, n, model_client=Keeper(), summary_client=Keeper(),
                            settings=settings) for n in ("a", "b")}
    paths = []
    for round_ in range(3):
        for name, agent in agents.items():
            recorder = recording.Recorder.for_agent(agent)
            recording.record_header(agent, recorder)
            for text in (f"keep {name} likes tulips round {round_}", "find tulips",
                         f"keep {name} rides a bike", "hello", "find bike round"):
                list(recording.recorded_step(agent, recorder, text))
            recorder.close()
            paths.append(recorder.path)
            agent.pop_turns(1)
    bases = sorted(config.recordings_dir().rglob("rev-*.db"))
    assert bases, "no base snapshot was written from the Postgres rows"
    with sqlite3.connect(bases[-1]) as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] > 0
    for path in paths:
        report = replay_mod.replay(path, strict=True)
        assert report.ok, (path.name, report.divergences)
    text = "\n".join(p.read_text() for p in paths)
    assert "Stored as passage #2" in text  # the ids the model saw came from Postgres
    store.close()


@pytest.mark.slow
def test_forget_on_postgres_deletes_the_turns_and_passages_and_no_other_agents(pg_url):
    make_history(pg_url)
    with open_store(pg_url) as store:
        other = store.create_agent("other", {}, {})
        store.add_message(other.id, Message("user", [{"type": "text", "text": "my bike too"}], 1))
    proc = run_cli("--db", pg_url, "forget", "bike", "--agent", "ada", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "1 passage deleted, 1 line removed from summary" in proc.stdout
    with open_store(pg_url) as store:
        row = store.get_agent("ada")
        assert store.search_messages(row.id, "bike").total == 0
        assert [p.text for p in store.list_passages(row.id)] == ["Ada's cat is Tim."]
        assert store.forget_units(row.id, Matcher.build("bike")) == []
        assert store.forget_intents() == []
        assert "bike" not in json.dumps(store.db.query("SELECT * FROM messages WHERE agent_id = ?",
                                                 (row.id,)))
        assert store.search_messages(other.id, "bike").total == 1
        assert store.integrity_problems() == []


def test_bench_store_measures_both_backends_in_a_scratch_database(pg_url, capsys):
    import psycopg

    from memgpt_lite.lab.bench import suite

    def databases() -> set[str]:
        with psycopg.connect(pg_url) as conn:
            return {r[0] for r in conn.execute("SELECT datname FROM pg_database")
                    if r[0].startswith("memgpt_lite_bench_")}  # other tests may run at once

    before = databases()
    assert suite.store_main(["--db", pg_url, "--sizes", "300,600", "--queries", "5",
                             "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["backend"], r["messages"]) for r in rows] == \
        [("sqlite", 300), ("sqlite", 600), ("postgres", 300), ("postgres", 600)]
    # the same corpus and queries find the same rows on both
    assert [r["median_matches"] for r in rows[:2]] == [r["median_matches"] for r in rows[2:]]
    assert all(r["insert_msgs_per_s"] > 0 and r["search_p95_ms"] > 0 and r["forget_scan_s"] >= 0
               for r in rows)
    assert databases() == before  # the scratch database is gone


def test_the_retrieval_eval_scores_our_search_on_postgres_too(pg_url):
    from memgpt_lite.lab.retrieval_eval import OURS, retrieval_eval

    data = retrieval_eval(filler=300, db=pg_url)
    assert data["results"][OURS + " on Postgres"] == data["results"][OURS]
    assert data["results"][OURS]["all"]["recall@10"] > 0.5


def test_a_forget_vacuums_every_table_it_changed(pg_url):
    """docs/postgres.md: memgpt-lite runs VACUUM on the tables a forget touched. A forget
    in the summary, a conversation's title, a project's block and the keyword index's term
    counts (the forgotten word is a row of its own there) left those tables unvacuumed, their
    old row versions holding the text."""
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.store.tables import TABLES

    with open_store(pg_url) as store:
        agent = Agent.open(store, "ada", project="/tmp/h6-proj", model_client=ScriptedModel(
            [tool_response([("core_memory_append", {"label": "project",
                                                    "content": "Zanzibar runs CI"})]),
             text_response("Noted zanzibar.")]))
        assert list(agent.step("the zanzibar box runs CI"))[-1].completed
        store.set_summary(agent.id, "Ada owns the zanzibar box. She likes tea.")
        store.set_conversation_title(agent.id, store.current_conversation(agent.id),
                                     "zanzibar notes")
        plan = privacy.plan_forget(store, agent.row, Matcher.build("zanzibar"))
        assert {u.place for u in plan.units} >= {"summary", "conversation titles",
                                                 "project memory", "messages"}
        before = _vacuums(store)
        privacy.forget(store, plan)
        after = _vacuums(store)
        agent.close()
    written = {t.name for t in TABLES if t.forget and "postgres" in t.backends}
    written |= {"term_docs", "forget_intents", "vectors"}
    assert {t for t in written if after[t] == before[t]} == set()


def _vacuums(store) -> dict[str, int]:
    store.db.execute("SELECT pg_stat_clear_snapshot()")
    return dict(store.db.query("SELECT relname, vacuum_count FROM pg_stat_user_tables "
                               "WHERE schemaname = 'memgpt_lite'"))

"""The forget corpus: each case forgets something in a data dir full of it (tests/reliability/forget_world.py:
two agents, recorded sessions, tool calls, passages, core memory, a fold in the queue, a
flushed summary, a base snapshot, the input history) and checks both directions:

* every match is gone from every place: messages (text, tool inputs and results, the folded
  copy), passages, core memory, the summary, block history, the base snapshot, the
  recordings, the input history, and the raw bytes of the database and its WAL;
* nothing else changed: every other message, passage, block line and recorded line is byte
  for byte what it was, the other agent is untouched, and what changed is exactly what the
  preview listed;

and that the store stays sound: the queue is valid for the API, the search index agrees
with the text, the next turn works, and every recording replays strictly (to its end when
the forget did not touch it, else up to the turn its header names).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from forget_world import TABLES, a_texts, assert_no_match_left, build, recorded_texts, state

from memgpt_lite.engine import config, privacy
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.input_history import drop_matching
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import checks, open_store
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.scrub import redact_message
from memgpt_lite.lab.scripted import ScriptedModel, text_response


@dataclass
class Case:
    query: str
    mode: str = "phrase"
    gone: tuple[str, ...] = ()  # must appear nowhere of agent "a" afterwards (also raw bytes)
    keep: tuple[str, ...] = ()  # must still be in agent "a"'s messages, passages or memory
    places: tuple[str, ...] = ()  # places the preview must list
    only: tuple[str, ...] | None = None  # ...and no other place


CASES = {
    "phrase": Case("Paris trip", gone=("Paris trip",), keep=("My trip to Rome last year",),
                   places=("messages", "summary", "recordings", "input history")),
    "phrase-any-case": Case("pARIS TRIP", gone=("Paris trip",), keep=("trip to Rome",)),
    "phrase-order-matters": Case("trip Paris", only=()),
    "long-phrase": Case("Paris trip in May with my sister", gone=("with my sister",),
                        keep=("You are planning it for May.",)),
    "word-not-inside-longer-words": Case(
        "Rex", gone=("called Rex and", "Dog: Rex"), keep=("My cousin Rexford visits on Sunday.",),
        places=("messages", "passages", "core memory", "block history", "summary",
                "base snapshots", "recordings", "input history")),
    "longer-word-only": Case("Rexford", gone=("Rexford",), keep=("Dog: Rex.", "Hello Rex")),
    "no-prefix-match": Case("medication", gone=("medication",),
                            keep=("The medical centre is closed on Mondays.",)),
    "no-stem-match": Case("medical centre", gone=("medical centre",),
                          keep=("the medical checkup is in June",)),
    "secret-with-dash": Case("zanzibar-7781", gone=("zanzibar", "7781"),
                             places=("messages", "core memory", "block history", "summary",
                                     "recordings")),
    "word-inside-a-code": Case("zanzibar", gone=("zanzibar",), keep=("Log 1 filed",)),
    "digits": Case("7781", gone=("7781",), keep=("Locker code",)),
    "cjk-two": Case("北京", gone=("北京",), keep=("Rome",)),
    "cjk-three-inside-a-run": Case("海淀区", gone=("海淀区",)),
    "cjk-in-the-middle": Case("上海", gone=("上海",), keep=("好的，周末愉快。",)),
    "cjk-longer": Case("北京市海淀区", gone=("海淀",)),
    "address-line": Case("12 Quokka Lane", gone=("Quokka",), keep=("Got your address.",)),
    "phrase-over-a-line-break": Case("Quokka Lane Springfield", gone=("Quokka", "Springfield")),
    "any-word": Case("Rex Luna", mode="any", gone=("called Rex and",), keep=("Rexford",)),
    "any-two-secrets": Case("zanzibar quokka", mode="any", gone=("zanzibar", "Quokka")),
    "regex": Case(r"zanzibar-\d+", mode="regex", gone=("zanzibar",)),
    "regex-letters": Case("Quok+a", mode="regex", gone=("Quokka",), keep=("Got your address.",)),
    "regex-over-a-line-break": Case(r"Lane\s+Springfield", mode="regex",
                                    gone=("Lane\nSpringfield",)),
    "in-tool-input-and-passage": Case(
        "mountains", gone=("mountains",), keep=("Rex",),
        places=("messages", "passages", "summary", "recordings")),
    "phrase-in-a-tool-input": Case("loves the mountains", gone=("loves the mountains",),
                                   keep=("I like the mountains in autumn.",)),
    "only-in-tool-results": Case("Core memory block", gone=("Core memory block",),
                                 only=("messages", "base snapshots", "recordings")),
    "only-in-the-summary": Case("Ada said", gone=("Ada said",),
                                only=("summary", "base snapshots", "recordings")),
    "one-core-memory-line": Case("Log 3 filed", gone=("Log 3 filed",),
                                 keep=("Log 5 filed", "Log 1 filed")),
    "core-memory-line-with-punctuation": Case("Dog: Rex.", gone=("Dog: Rex",),
                                              keep=("My dog is called Rex and",)),
    "accents-and-emoji": Case("café flore ☕", gone=("Café Flore",)),
    "accented-word": Case("CAFÉ", gone=("Café",)),
    "accent-typed-apart": Case("Cafe\u0301 Flore", gone=("Café Flore",)),  # e + U+0301
    "full-width-letters": Case("ＣＡＦÉ ｆｌｏｒｅ", gone=("Café Flore",)),
    "quotes": Case('"blue" door', gone=('"blue" door',), keep=("Easy to find.",)),
    "thinking-block": Case("teal", gone=("teal",)),
    # The input history is one file for every agent: its lines go whichever agent they were for.
    "only-in-the-other-agent": Case("Lisbon", keep=("Lisbon is lovely.",),
                                    only=("input history",)),
    "a-common-word": Case("the", mode="any", gone=()),
    "sister": Case("sister", gone=("sister",)),
}


# --------------------------------------------------------------------------- the world


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def template(request, tmp_path_factory):
    """The world, built once per backend: its data dir (and, on Postgres, the database
    each test gets a copy of)."""
    home = tmp_path_factory.mktemp("world") / "home"
    admin = database = None
    if request.param == "postgres":
        import pg_support

        admin, why = request.getfixturevalue("postgres_server")
        if admin is None:
            pg_support.skip_or_fail(why)
        database = pg_support.create_database(admin)[0]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMGPT_LITE_HOME", str(home))
        if database:
            mp.setenv("MEMGPT_LITE_DATABASE_URL", pg_support.with_database(admin, database))
        facts = build()
    assert facts["folded"], "the world needs a folded tool result in the queue"
    assert facts["evicted"] and facts["summary"] and facts["bases"]
    yield home, admin, database
    if database:
        pg_support.drop_database(admin, database)


@pytest.fixture
def home(template, monkeypatch):
    world, admin, database = template
    home = config.data_dir()
    shutil.copytree(world, home)
    if database:  # a copy of the world's database for this test, dropped afterwards
        import pg_support
        import psycopg

        copy = f"{database}_{len(list(home.parent.iterdir()))}_{id(home) % 10**6}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {copy} TEMPLATE {database}")
        monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", pg_support.with_database(admin, copy))
        yield home
        pg_support.drop_database(admin, copy)
        return
    yield home


def agent_ids(before: dict) -> dict[str, int]:
    return {r["name"]: i for i, r in before["rows"]["agents"].items()}


def run_forget(case: Case) -> tuple[privacy.ForgetPlan, privacy.ForgetResult | None]:
    matcher = Matcher.build(case.query, case.mode)
    with open_store() as store:
        row = store.get_agent("a")
        plan = privacy.plan_forget(store, row, matcher)
        result = None if plan.empty else privacy.forget(store, plan)
    return plan, result


# --------------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("name", list(CASES))
def test_forget_corpus(name, home):
    case = CASES[name]
    before = state(home)
    plan, result = run_forget(case)
    after = state(home)
    matcher = plan.matcher
    listed = {place for place, n in plan.counts().items() if n}
    assert set(case.places) <= listed, listed
    if case.only is not None:
        assert listed <= set(case.only), listed
    if result is not None:
        assert result.problems == [] and result.wal_clean
    assert_no_match_left(home, matcher, case.gone)
    assert_nothing_else_changed(before, after, plan, matcher)
    assert_kept(home, case.keep)
    assert_sound_and_replayable(home, before, after)


def assert_nothing_else_changed(before: dict, after: dict, plan, matcher: Matcher) -> None:
    ids = agent_ids(before)
    units = {(u.place, u.key): u for u in plan.units}
    for table in TABLES:
        for key, row in before["rows"][table].items():
            now, row_id = after["rows"][table].get(key), row["id"]
            unit = units.get(({"messages": "messages", "passages": "passages",
                               "blocks": "core memory", "block_history": "block history"}[table],
                              row["label"] if table == "blocks" else row_id))
            if row["agent_id"] != ids["a"] or unit is None:
                assert now == row, (table, row_id)  # untouched, byte for byte
            elif unit.action == "delete":
                assert now is None, (table, row_id)
            elif table == "messages":
                content, context = redact_message(json.loads(row["content"]),
                                                  json.loads(row["context_content"] or "null"),
                                                  matcher)
                assert json.loads(now["content"]) == content
                assert json.loads(now["context_content"] or "null") == context
                same = {k: v for k, v in row.items() if k not in (
                    "content", "context_content", "index_text", "rev",
                    "terms", "term_counts", "length")}  # the last three: Postgres's index
                assert {k: now[k] for k in same} == same
            elif table == "blocks":
                assert now["value"] == matcher.drop_lines(row["value"])[0]
            else:
                assert now["new_value"] == matcher.drop_lines(row["new_value"])[0]
        assert set(after["rows"][table]) <= set(before["rows"][table])  # nothing new
    summary = before["rows"]["agents"][ids["a"]]["summary"]
    assert after["rows"]["agents"][ids["a"]]["summary"] == matcher.drop_lines(summary)[0]
    assert after["rows"]["agents"][ids["b"]] == before["rows"]["agents"][ids["b"]]
    assert after["history"] == drop_matching(before["history"], matcher)[0]
    for name, data in before["files"].items():
        if name.endswith(".jsonl") and b'"agent":"a"' in data.split(b"\n")[0]:
            assert_recording_lines(data, after["files"][name], matcher)
        elif name.endswith(".jsonl"):  # the other agent's
            assert after["files"][name] == data
        elif not plan.bases:
            assert after["files"][name] == data


def assert_recording_lines(old: bytes, new: bytes, matcher: Matcher) -> None:
    """A recorded line without a match keeps its bytes (the header gains only `forgotten`)."""
    old_lines, new_lines = old.split(b"\n"), new.split(b"\n")
    assert len(old_lines) == len(new_lines)
    for a, b in zip(old_lines, new_lines):
        if not a.strip():
            continue
        value = json.loads(a)
        if any(matcher.hits(t) for t in recorded_texts(value)):
            assert a != b
            continue
        if value.get("type") == "header":
            value_b = json.loads(b)
            value_b.pop("forgotten", None)
            assert value_b == value
        else:
            assert a == b


def assert_kept(home: Path, keep: tuple[str, ...]) -> None:
    texts = a_texts(home)
    with open_store() as store:
        row = store.get_agent("b")
        texts += [m.content[0].get("text", "") for m in store.all_messages(row.id)]
    for text in keep:
        assert any(text in t for t in texts), f"{text!r} was forgotten too"


def assert_sound_and_replayable(home: Path, before: dict, after: dict) -> None:
    with open_store() as store:
        assert store.integrity_problems() == []  # the search index agrees with the text
        row = store.get_agent("a")
        assert checks.queue_problem(store.context_messages(row.id)) is None
        model = ScriptedModel([text_response("still here")] * 6, validate=True)
        agent = Agent.open(store, "a", model_client=model)
        assert list(agent.step("are you there?"))[-1].completed
        agent.close()
    for name, data in before["files"].items():
        if not name.endswith(".jsonl"):
            continue
        report = replay_mod.replay(home / name, strict=True)
        assert report.ok, (name, report.divergences)
        if after["files"][name] == data:
            assert report.completed and report.scrubbed is None, name
        else:
            assert report.scrubbed is not None, name


# --------------------------------------------------------------------------- more promises


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 30


def test_the_same_phrase_in_any_case_finds_the_same_units(home):
    with open_store() as store:
        row = store.get_agent("a")
        plans = [privacy.plan_forget(store, row, Matcher.build(q))
                 for q in ("Paris trip", "PARIS TRIP", "paris\n trip")]
    keys = [[(u.place, u.key) for u in p.units] for p in plans]
    assert keys[0] and keys[0] == keys[1] == keys[2]


def test_forgetting_twice_or_the_marker_changes_nothing(home):
    run_forget(Case("Rex"))
    before = state(home)
    for query in ("Rex", "forgotten", "[forgotten]"):
        plan, result = run_forget(Case(query))
        assert plan.empty and result is None, query
    assert state(home) == before


def test_a_file_from_before_secure_delete_is_rewritten_whole_at_its_first_forget(monkeypatch):
    """Written without secure_delete (an earlier version, or a SQLite built without it), a
    file keeps old copies of rows in its free space; the migration marks such a file, and
    its first forget rewrites it whole."""
    from memgpt_lite.engine.store.sqlite.database import SQLiteDatabase

    real = SQLiteDatabase._enable_wal

    def without_secure_delete(self):
        real(self)
        self.connection.execute("PRAGMA secure_delete = OFF")

    monkeypatch.setattr(SQLiteDatabase, "_enable_wal", without_secure_delete)
    for flagged in (False, True):
        shutil.rmtree(config.data_dir(), ignore_errors=True)
        with SQLiteStore(config.db_path()) as store:
            agent = Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")] * 3))
            list(agent.step("once more: zanzibar"))
            store.add_messages(agent.id, [Message("user", [{"type": "text", "text": f"note {i} "
                                                           + "filler " * 40}], i + 2,
                                                  in_context=False) for i in range(300)])
            store.delete_turns(agent.id, [1])  # its bytes stay in the file's free space
            list(agent.step("my locker code is zanzibar-7781"))  # pages away from the old copy
            agent.close()
            store.db.execute("DELETE FROM schema_migrations WHERE name = '006_forget_intents'")
            store.db.connection.execute("DROP TABLE forget_intents")
            store.db.connection.execute("DROP TABLE store_flags")
        monkeypatch.setattr(SQLiteDatabase, "_enable_wal", real)
        with SQLiteStore(config.db_path()) as store:  # the migration marks the file: it has agents
            assert [r[0] for r in store.db.query("SELECT name FROM store_flags")] == ["vacuum_on_forget"]
            if not flagged:
                store.db.connection.execute("DELETE FROM store_flags")
            plan = privacy.plan_forget(store, store.get_agent("a"), Matcher.build("zanzibar-7781"))
            privacy.forget(store, plan)
            assert store.db.query("SELECT count(*) FROM store_flags")[0][0] == 0
        raw = config.db_path().read_bytes()
        assert (b"once more: zanzibar" in raw) is not flagged  # unmarked, the old copy stays
        assert b"zanzibar-7781" not in raw
        monkeypatch.setattr(SQLiteDatabase, "_enable_wal", without_secure_delete)


@pytest.mark.slow
def test_a_regex_that_backtracks_without_end_is_stopped_with_one_sentence(tmp_path):
    """`(a+)+$` over a long line of a's never returns in Python's engine: the preview gives
    up with one sentence and nothing changes (a subprocess, so a hang fails the test)."""
    import subprocess
    import sys

    from rel_support import child_env

    line = "a" * 5_000 + "!"
    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "re", model_client=ScriptedModel([text_response("ok")]))
        assert list(agent.step(line))[-1].completed
        agent.close()
    done = subprocess.run([sys.executable, "-m", "memgpt_lite", "forget", "--regex", "(a+)+$",
                           "--agent", "re", "--yes"], capture_output=True, text=True,
                          timeout=120, env=child_env())
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("memgpt-lite: The pattern '(a+)+$' took over 3 s on one text")
    assert done.stderr.rstrip().endswith("Nothing was forgotten.")
    with SQLiteStore(config.db_path()) as store:
        row = store.get_agent("re")
        assert line in [b["text"] for m in store.all_messages(row.id) for b in m.content
                        if b.get("type") == "text"]


def test_a_regex_that_is_fine_still_forgets_and_a_written_down_forget_gives_up_quietly():
    """A forget written down is finished bounded too (texts written since its preview never
    met the pattern), giving up on a text without raising (see matching.py)."""
    quick = Matcher.build("(a+)+$", "regex")
    assert quick.bounded and quick.spans("aaa") == [(0, 3)]
    resumed = Matcher.from_spec(quick.spec())
    assert resumed.bounded and resumed.skip_slow and resumed.spans("aaa") == [(0, 3)]
    assert not Matcher.build("a b").bounded  # phrases never backtrack without end


def test_a_previewed_regex_is_not_stopped_half_way_through_the_forget(monkeypatch):
    """The preview ran the pattern over every text, bounded, and finished; the forget that
    follows runs it over the same texts again. On a busy machine one of them could now take
    over the limit: the forget stopped half done with a traceback, and the next command
    finished it. What was previewed is done, whatever the clock says."""
    from memgpt_lite.engine import matching

    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "re", model_client=ScriptedModel([text_response("ok")]))
        assert list(agent.step("my pin is 4321 " + "x" * 100_000))[-1].completed
        agent.edit_block("human", "Pin: 4321\nLikes tea")
        plan = privacy.plan_forget(store, agent.row, Matcher.build(r"\d{4}", "regex"))
        monkeypatch.setattr(matching, "REGEX_SECONDS", 1e-6)  # every text is now "too slow"
        result = privacy.forget(store, plan)
        assert not result.problems and store.forget_intents() == []
        assert store.get_block(agent.id, "human").value == "Likes tea"
        assert "4321" not in json.dumps([m.content for m in store.all_messages(agent.id)])


RUNAWAY = r"(a+)+$|4321"  # the pin, and a pattern that backtracks without end on a's


@pytest.mark.slow
def test_a_forget_finished_later_never_hangs_on_a_text_written_after_its_preview():
    """A forget cut off after it was written down is finished by the next command; a text
    written since then (here: a message) never met the pattern in a preview. The resumed
    forget ran it unbounded, and `(a+)+$` over a line of a's hung every command for good.
    Now it gives up on that text after the limit, leaves it as it is and says so, and
    finishes the rest (a subprocess, so a hang fails the test)."""
    import subprocess
    import sys

    from rel_support import child_env

    line = "a" * 5_000 + "!"
    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "re", model_client=ScriptedModel([text_response("ok")] * 2))
        assert list(agent.step("my pin is 4321"))[-1].completed
        store.add_forget_intent(agent.id, agent.row.uid, Matcher.build(RUNAWAY, "regex"))
        assert list(agent.step(line))[-1].completed  # written after the forget's preview
        agent.close()
    done = subprocess.run([sys.executable, "-m", "memgpt_lite", "core", "--agent", "re"],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert done.returncode == 0, done.stderr
    err = " ".join(done.stderr.split())
    assert "Finished a forget cut off" in err and "Traceback" not in err
    assert "Left as it was: 1 text the preview had not seen, on which the pattern took " \
           "over 3 s (5,001 characters in the store)" in err, err
    with SQLiteStore(config.db_path()) as store:
        assert store.forget_intents() == []
        texts = [b["text"] for m in store.all_messages(store.get_agent("re").id)
                 for b in m.content if b.get("type") == "text"]
        assert line in texts and not [t for t in texts if "4321" in t]


def test_a_forget_under_way_never_hangs_on_a_line_another_chat_added(monkeypatch, capsys):
    """Between the preview and the forget, a chat on another agent adds a line to the input
    history (one file for all agents): the forget ran the pattern over it unbounded."""
    from memgpt_lite.engine.input_history import InputHistory
    from memgpt_lite.terminal import cli

    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "re", model_client=ScriptedModel([text_response("ok")]))
        assert list(agent.step("my pin is 4321"))[-1].completed
        agent.close()
    history = InputHistory(config.data_dir())
    history.append(["my pin is 4321"])
    real_forget = privacy.forget

    def another_chat_types_first(store, plan):
        history.append(["a" * 5_000 + "!"])
        return real_forget(store, plan)

    monkeypatch.setattr(privacy, "forget", another_chat_types_first)
    assert cli.main(["forget", "--regex", RUNAWAY, "--agent", "re", "--yes"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 input history line removed" in out and "Left as it was: 1 text" in out, out
    assert history.lines() == ["a" * 5_000 + "!"]
    with SQLiteStore(config.db_path()) as store:
        assert store.forget_intents() == []

"""Corrections in archival memory: archival_insert shows similar passages, archival_update and
archival_delete fix them, superseded versions are history that search never returns, a
failed turn leaves nothing, /pop puts passages back, and exports, replays and forget carry
the history."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.memory import MemoryTools, ToolOutcome
from memgpt_lite.engine.store import open_store, transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

OLD = "Jonas is allergic to peanuts."
NEW = "Jonas is no longer allergic to peanuts: the desensitisation worked."


@pytest.fixture
def store(store_target):
    s = open_store(store_target)
    yield s
    s.close()


def tools_for(store: SQLiteStore, name: str = "a") -> MemoryTools:
    agent = store.create_agent(name, {}, {"human": ("", 500)})
    return MemoryTools(store, agent.id, clock=lambda: "2026-02-01T10:00:00Z")


def run(tools: MemoryTools, name: str, **args) -> ToolOutcome:
    return tools.execute(name, args)


def stored_id(outcome: ToolOutcome) -> int:
    assert not outcome.is_error, outcome.text
    return int(outcome.text.split("#", 1)[1].split(" ")[0].rstrip(".").split(".")[0])


def search_text(tools: MemoryTools, query: str) -> str:
    return run(tools, "archival_search", query=query).text


# ---------------------------------------------------------------- archival_insert


def test_insert_lists_the_similar_passages_it_may_correct(store):
    tools = tools_for(store)
    old = stored_id(run(tools, "archival_insert", content=OLD))
    stored_id(run(tools, "archival_insert", content="The team meets on Tuesdays in room 4."))
    out = run(tools, "archival_insert", content=NEW)
    assert not out.is_error and out.text.startswith("Stored as passage #")
    assert f"- #{old} 2026-02-01: {OLD}" in out.text
    assert "archival_update" in out.text and "room 4" not in out.text
    assert out.summary.endswith(f"similar: #{old}")


def test_insert_without_overlap_lists_nothing_and_a_duplicate_is_still_refused(store):
    tools = tools_for(store)
    stored_id(run(tools, "archival_insert", content=OLD))
    out = run(tools, "archival_insert", content="The cat is called Miso.")
    assert out.text.count("\n") == 0 and "Similar" not in out.text
    dup = run(tools, "archival_insert", content="jonas is  ALLERGIC to peanuts.")
    assert dup.text.startswith("Not stored") and store.count_passages(tools.agent_id) == 2


# ---------------------------------------------------------------- archival_update


def test_update_replaces_the_text_and_search_returns_only_the_new_version(store):
    tools = tools_for(store)
    pid = stored_id(run(tools, "archival_insert", content=OLD, tags=["Health"]))
    out = run(tools, "archival_update", passage_id=pid, content=NEW)
    assert not out.is_error and f"Passage #{pid} updated" in out.text and NEW in out.text
    assert out.summary.startswith(f"archival_update #{pid} ")
    found = search_text(tools, "peanuts allergic")
    assert NEW in found and "page 1 of 1, 1 result\n" in found and f"#{pid}" in found
    assert "[tags: health]" in found  # tags stay
    [version] = store.passage_versions(tools.agent_id)
    assert (version.passage_id, version.text, version.change) == (pid, OLD, "update")


def test_update_with_the_same_text_changes_nothing(store):
    tools = tools_for(store)
    pid = stored_id(run(tools, "archival_insert", content=OLD))
    out = run(tools, "archival_update", passage_id=pid, content=f"  {OLD}\n")
    assert not out.is_error and "nothing was changed" in out.text
    assert store.passage_versions(tools.agent_id) == []


@pytest.mark.parametrize("args, fragment", [
    ({"passage_id": 999, "content": NEW}, "There is no passage #999"),
    ({"passage_id": 1, "content": "   "}, "content is empty"),
    ({"passage_id": 0, "content": NEW}, "between 1 and"),
    ({"passage_id": 2**60, "content": NEW}, "between 1 and"),
    ({"passage_id": "1", "content": NEW}, "must be an integer"),
    ({"passage_id": True, "content": NEW}, "must be an integer"),
    ({"passage_id": 1, "content": "x" * 20_001}, "at most 20,000"),
    ({"passage_id": 1}, "Missing required argument 'content'"),
    ({"content": NEW}, "Missing required argument 'passage_id'"),
])
def test_update_errors_are_actionable_and_change_nothing(store, args, fragment):
    tools = tools_for(store)
    stored_id(run(tools, "archival_insert", content=OLD))
    out = tools.execute("archival_update", args)
    assert out.is_error and fragment in out.text, out.text
    assert [h.text for h in store.list_passages(tools.agent_id)] == [OLD]
    assert store.passage_versions(tools.agent_id) == []


def test_another_agents_passage_cannot_be_updated_or_deleted(store):
    mine, theirs = tools_for(store, "mine"), tools_for(store, "theirs")
    their_id = stored_id(run(theirs, "archival_insert", content=OLD))
    for name, args in (("archival_update", {"content": NEW}),
                       ("archival_delete", {"reason": "wrong"})):
        out = run(mine, name, passage_id=their_id, **args)
        assert out.is_error and f"There is no passage #{their_id} in your archival" in out.text
    assert [h.text for h in store.list_passages(theirs.agent_id)] == [OLD]
    assert store.passage_versions(theirs.agent_id) == []


# ---------------------------------------------------------------- archival_delete


def test_delete_removes_the_passage_from_search_and_keeps_it_as_history(store):
    tools = tools_for(store)
    pid = stored_id(run(tools, "archival_insert", content=OLD))
    out = run(tools, "archival_delete", passage_id=pid, reason="  no longer true ")
    assert not out.is_error and "no longer returns it" in out.text
    assert out.summary == f"archival_delete #{pid}: no longer true"
    assert "No matches" in search_text(tools, "peanuts")
    [version] = store.passage_versions(tools.agent_id)
    assert (version.text, version.change, version.reason) == (OLD, "delete", "no longer true")


def test_a_deleted_passage_says_so_and_its_id_is_never_given_again(store):
    tools = tools_for(store)
    pid = stored_id(run(tools, "archival_insert", content=OLD))
    run(tools, "archival_delete", passage_id=pid, reason="moved away")
    for name, args in (("archival_update", {"content": NEW}),
                       ("archival_delete", {"reason": "again"})):
        out = run(tools, name, passage_id=pid, **args)
        assert out.is_error and "was deleted on 2026-02-01 (reason: moved away)" in out.text
        assert "archival_insert" in out.text
    assert stored_id(run(tools, "archival_insert", content="A new fact.")) > pid


@pytest.mark.parametrize("args, fragment", [
    ({"passage_id": 1, "reason": ""}, "reason is empty"),
    ({"passage_id": 1}, "Missing required argument 'reason'"),
    ({"passage_id": 1, "reason": "x" * 1_001}, "at most 1,000"),
    ({"passage_id": -5, "reason": "x"}, "between 1 and"),
    ({"passage_id": 77, "reason": "x"}, "There is no passage #77"),
])
def test_delete_errors_are_actionable_and_change_nothing(store, args, fragment):
    tools = tools_for(store)
    stored_id(run(tools, "archival_insert", content=OLD))
    out = tools.execute("archival_delete", args)
    assert out.is_error and fragment in out.text, out.text
    assert store.count_passages(tools.agent_id) == 1


# ---------------------------------------------------------------- search never returns history

WORDS = ["otter", "heron", "maple", "cobalt", "lantern", "quartz"]
OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
    st.tuples(st.just("update"), st.integers(0, 12),
              st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 12))), max_size=25)


@settings(max_examples=60, deadline=None, database=None)
@given(ops=OPS)
def test_search_never_returns_a_superseded_or_deleted_version(tmp_path_factory, ops):
    """Every version's text carries a unique marker word (vN); after any sequence of
    inserts, updates and deletes, a search finds each marker only while its version is a
    passage's current text, and every hit is a live passage as it is now."""
    with SQLiteStore(tmp_path_factory.mktemp("prop") / "db") as store:
        tools, other = tools_for(store), tools_for(store, "other")
        run(other, "archival_insert", content="otter heron v999 belongs to another agent")
        current: dict[int, str] = {}
        for n, op in enumerate(ops):
            text = " ".join(op[-1]) + f" v{n}" if op[0] != "delete" else ""
            ids = sorted(current)
            if op[0] == "insert":
                current[stored_id(run(tools, "archival_insert", content=text))] = text
            elif ids and op[0] == "update":
                pid = ids[op[1] % len(ids)]
                assert not run(tools, "archival_update", passage_id=pid, content=text).is_error
                current[pid] = text
            elif ids:
                pid = ids[op[1] % len(ids)]
                assert not run(tools, "archival_delete", passage_id=pid, reason="x").is_error
                del current[pid]
        live = set(current.values())
        for n in [*range(len(ops)), 999]:
            hits = store.search_passages(tools.agent_id, f"v{n}", per_page=50).hits
            assert [h.text for h in hits] == [t for t in live if t.endswith(f" v{n}")]
        for word in WORDS:
            for hit in store.search_passages(tools.agent_id, word, per_page=50).hits:
                assert current.get(hit.id) == hit.text


# ---------------------------------------------------------------- turns: undo, /pop, replay


def tables(store: SQLiteStore) -> dict[str, list[tuple]]:
    queries = {"passages": "SELECT id, text, tags, norm, index_text, created_at, turn_id "
                           "FROM passages ORDER BY id",
               "history": "SELECT * FROM passage_history ORDER BY id",
               "effects": "SELECT * FROM turn_effects"}
    found = {k: [tuple(r) for r in store.db.query(q)] for k, q in queries.items()}
    found["search"] = [(h.id, h.text) for h in store.search_passages(1, "peanuts cello").hits]
    return found


def agent_with(target: str, script) -> tuple[SQLiteStore, Agent]:
    store = open_store(target)
    agent = Agent.open(store, "a", model_client=ScriptedModel(script, validate=True),
                       summary_client=ScriptedModel([]))
    return store, agent


def test_a_failed_turn_leaves_no_update_or_delete_behind(store_target):
    store, agent = agent_with(store_target, [
        tool_response([("archival_insert", {"content": OLD}),
                       ("archival_insert", {"content": "Plays the cello on Sundays."})]),
        text_response("Noted.")])
    assert list(agent.step("remember"))[-1].completed
    before = tables(store)
    agent.model_client = ScriptedModel([
        tool_response([("archival_update", {"passage_id": 1, "content": NEW}),
                       ("archival_delete", {"passage_id": 2, "reason": "stopped"}),
                       ("archival_insert", {"content": "Cello lessons moved to Mondays."})]),
        OverloadedError("The API is overloaded.")])
    events = list(agent.step("news"))
    assert not events[-1].completed
    assert [e.result.is_error for e in events if e.kind == "tool_result"] == [False] * 3
    assert tables(store) == before
    assert store.integrity_problems() == []


def test_a_turn_cut_off_by_a_crash_is_undone_when_the_agent_is_next_opened(store_target):
    store, agent = agent_with(store_target, [tool_response([("archival_insert", {"content": OLD})]),
                                         text_response("Noted.")])
    list(agent.step("remember"))
    before = tables(store)
    steps = agent.step("news")
    agent.model_client = ScriptedModel([
        tool_response([("archival_update", {"passage_id": 1, "content": NEW}),
                       ("archival_delete", {"passage_id": 1, "reason": "gone"})]),
        text_response("never")])
    for event in steps:
        if event.kind == "tool_result" and event.call.name == "archival_delete":
            break  # the process dies here: the generator is never closed
    agent.lock.release()
    with open_store(store_target) as again:
        Agent.open(again, "a", model_client=ScriptedModel([]))
        assert tables(again) == before


def test_pop_puts_updated_and_deleted_passages_back(store_target):
    store, agent = agent_with(store_target, [
        tool_response([("archival_insert", {"content": OLD}),
                       ("archival_insert", {"content": "Plays the cello on Sundays."})]),
        text_response("Noted."),
        tool_response([("archival_update", {"passage_id": 1, "content": NEW})]),
        text_response("Updated."),
        tool_response([("archival_update", {"passage_id": 1, "content": NEW + " Since May."}),
                       ("archival_delete", {"passage_id": 2, "reason": "stopped"})]),
        text_response("Updated again.")])
    for text in ("remember", "news", "more news"):
        assert list(agent.step(text))[-1].completed
    popped = agent.pop_turns(1)
    assert popped.passages_restored == [2, 1] and popped.passages_kept == []
    assert "archival passage #2: put back as it was before" in popped.memory_lines()
    assert [h.text for h in store.list_passages(agent.id)] == [NEW, "Plays the cello on Sundays."]
    assert "cello" in search_text(agent.tools, "cello")
    popped = agent.pop_turns(1)
    assert popped.passages_restored == [1]
    assert [h.text for h in store.list_passages(agent.id)] == [OLD, "Plays the cello on Sundays."]
    assert store.passage_versions(agent.id) == [] and store.integrity_problems() == []
    assert agent.pop_turns(1).passages_deleted == [1, 2]


def test_retry_of_a_turn_that_updated_sends_it_against_the_original(tmp_path):
    store, agent = agent_with(str(tmp_path / "a.db"), [
        tool_response([("archival_insert", {"content": OLD})]), text_response("Noted."),
        tool_response([("archival_update", {"passage_id": 1, "content": NEW})]),
        text_response("Updated."),
        tool_response([("archival_update", {"passage_id": 1, "content": NEW})]),
        text_response("Updated once.")])
    list(agent.step("remember"))
    list(agent.step("news"))
    events = list(agent.retry())
    assert events[0].kind == "user" and events[0].retry  # the turn opens with its message
    assert events[-1].completed and "put back" in events[1].message
    assert [v.text for v in store.passage_versions(agent.id)] == [OLD]


def test_recorded_corrections_replay_strictly_with_another_agent_in_the_data_dir(tmp_path):
    """Passage ids are global: another agent's passages between this agent's turns shift
    them, and a replay (which has only this agent) must still hand out the same ids."""
    store, agent = agent_with(str(tmp_path / "a.db"), [
        tool_response([("archival_insert", {"content": OLD})]), text_response("Noted."),
        tool_response([("archival_insert", {"content": NEW})]), text_response("Noted."),
        tool_response([("archival_delete", {"passage_id": 1, "reason": "superseded"})]),
        text_response("Deleted.")])
    other = Agent.open(store, "b", model_client=ScriptedModel([
        tool_response([("archival_insert", {"content": "Unrelated passage of b."})]),
        text_response("ok")]))
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "remember"))
        list(other.step("b's turn"))
        list(recording.recorded_step(agent, recorder, "news"))
        list(recording.recorded_step(agent, recorder, "drop the old one"))
    inserted = recording.Recording.load(path).turns[1].passage_ids
    assert inserted == [3]
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences


def test_a_later_recording_starts_from_the_history_and_replays_strictly(tmp_path):
    store, agent = agent_with(str(tmp_path / "a.db"), [
        tool_response([("archival_insert", {"content": OLD})]), text_response("Noted."),
        tool_response([("archival_update", {"passage_id": 1, "content": NEW})]),
        text_response("Updated."),
        tool_response([("archival_search", {"query": "peanuts"})]), text_response("Found.")])
    list(agent.step("remember"))
    list(agent.step("news"))
    path = tmp_path / "later.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        assert recording.Recording.load(path).header["delta"]["passage_history"][0]["text"] == OLD
        list(recording.recorded_step(agent, recorder, "what about peanuts?"))
        agent.pop_turns(1)
        recorder.command("pop_turns", n=1)
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences


# ---------------------------------------------------------------- export, forget, migration


def test_export_and_import_carry_the_history_to_new_ids(store):
    tools = tools_for(store)
    run(tools_for(store, "filler"), "archival_insert", content="Taking id 1.")
    kept = stored_id(run(tools, "archival_insert", content=OLD))
    gone = stored_id(run(tools, "archival_insert", content="Lives in Lisbon."))
    run(tools, "archival_update", passage_id=kept, content=NEW)
    run(tools, "archival_delete", passage_id=gone, reason="moved to Porto")
    doc = json.loads(json.dumps(transfer.export_agent(store, "a")))
    assert [v["change"] for v in doc["passage_history"]] == ["update", "delete"]
    copy = transfer.import_agent(store, doc, "b")
    [passage] = store.list_passages(copy.id)
    versions = store.passage_versions(copy.id)
    assert passage.text == NEW and versions[0].passage_id == passage.id
    assert versions[1].passage_id != passage.id
    if isinstance(store, SQLiteStore):  # on SQLite ids are the data dir's (Postgres: the agent's)
        assert passage.id != kept and versions[1].passage_id not in (gone, kept)
    assert versions[1].reason == "moved to Porto"
    assert store.deleted_version(copy.id, versions[1].passage_id) is not None


def test_an_export_with_a_bad_history_row_is_refused_whole(store):
    tools = tools_for(store)
    run(tools, "archival_insert", content=OLD)
    doc = transfer.export_agent(store, "a")
    doc["passage_history"] = [{"passage_id": 1, "text": "x", "tags": [], "created_at":
                               "2026-01-01T00:00:00Z", "superseded_at": "soon",
                               "change": "update"}]
    from memgpt_lite.engine.store import StoreError

    with pytest.raises(StoreError, match="superseded_at"):
        transfer.import_agent(store, doc, "b")
    assert store.get_agent("b") is None


def test_deleting_a_passage_purges_its_history(store):
    tools = tools_for(store)
    pid = stored_id(run(tools, "archival_insert", content=OLD))
    run(tools, "archival_update", passage_id=pid, content="Jonas eats everything now.")
    assert [v.text for v in store.passage_versions(tools.agent_id)] == [OLD]
    assert store.delete_passages(tools.agent_id, [pid]) == 1
    assert store.passage_versions(tools.agent_id) == []


def test_an_old_database_gets_passage_history_and_keeps_its_ids(tmp_path):
    import sqlite3

    from memgpt_lite.engine.store.sqlite import fts
    from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS

    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, apply in MIGRATIONS[:4]:
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2025-01-01')", (name,))
    db.execute("INSERT INTO agents (name, created_at, uid) VALUES ('a', '2025-01-01', 'u1')")
    db.execute("INSERT INTO blocks (agent_id, label, value, char_limit, updated_at) "
               "VALUES (1, 'human', 'Ann', 100, '2025-01-01')")
    db.execute("INSERT INTO passages (id, agent_id, text, norm, index_text, created_at) "
               "VALUES (41, 1, 'old fact', 'old fact', 'old fact', '2025-01-01')")
    fts.rebuild(db, 1)
    db.close()
    with SQLiteStore(path) as store:
        assert "007_passage_history_and_shared_blocks" in store.applied_migrations()
        assert [(b.label, b.scope) for b in store.get_blocks(1)] == [("human", "agent")]
        tools = MemoryTools(store, 1)
        assert not run(tools, "archival_update", passage_id=41, content="new fact").is_error
        assert stored_id(run(tools, "archival_insert", content="another")) == 42


def test_forget_reaches_old_versions_in_the_store_the_bases_and_the_recordings(tmp_path):
    from memgpt_lite.engine import config, privacy
    from memgpt_lite.engine.store import snapshot

    store = SQLiteStore(config.db_path())
    agent = Agent.open(store, "a", model_client=ScriptedModel([
        tool_response([("archival_insert", {"content": "The wifi password is tulip-42."})]),
        text_response("Saved."),
        tool_response([("archival_update", {"passage_id": 1,
                                            "content": "The wifi password changed; ask Ada."})]),
        text_response("Updated.")]))
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    for text in ("remember the wifi", "it changed"):
        list(recording.recorded_step(agent, recorder, text))
    recorder.close()
    base, _ = snapshot.write_base(store, agent.id, recorder.path.parent / recording.BASES)
    from memgpt_lite.engine.matching import Matcher

    plan = privacy.plan_forget(store, store.get_agent("a"), Matcher.build("tulip-42"))
    assert plan.counts()["passages"] == 0 and plan.counts()["passage history"] == 1
    assert [u.text for u in plan.units if u.place == "passage history"] == [
        "The wifi password is tulip-42."]
    result = privacy.forget(store, plan)
    assert result.actions()[("passage history", "delete")] == 1
    assert store.passage_versions(agent.id) == []
    assert "tulip-42" not in recorder.path.read_text()
    import sqlite3

    with sqlite3.connect(base) as db:
        assert db.execute("SELECT count(*) FROM passage_history").fetchone()[0] == 0
    store.close()

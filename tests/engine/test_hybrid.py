"""Hybrid recall search: vectors in the store, fusion, context, background embedding,
failures falling back to keywords, and strict replay of hybrid sessions without an embedder."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from memgpt_lite.engine import privacy, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.dense import DenseRecall
from memgpt_lite.engine.embeddings import HttpEmbedder
from memgpt_lite.engine.indexer import attach_embedder, index_agent
from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.search import KEYWORD_WEIGHT, fuse
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS
from memgpt_lite.lab.fake_embeddings import ConceptEmbedder, FakeEmbeddingsServer
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

np = pytest.importorskip("numpy")


def say(store: SQLiteStore, agent_id: int, turn: int, *lines: tuple[str, str]) -> list[int]:
    msgs = [Message(role, [{"type": "text", "text": text}], turn, in_context=False,  # type: ignore[arg-type]
                    created_at=f"2025-03-{turn:02d}T10:00:00Z") for role, text in lines]
    store.add_messages(agent_id, msgs)
    return [m.id for m in msgs]  # type: ignore[misc]


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "db.sqlite") as s:
        yield s


@pytest.fixture
def agent_id(store):
    aid = store.create_agent("a", {}, {}).id
    say(store, aid, 1, ("user", "We adopted a beagle called Biscuit."), ("assistant", "Lovely!"))
    say(store, aid, 2, ("user", "How is your garden doing?"),
        ("assistant", "The tomatoes are finally red."))
    say(store, aid, 3, ("user", "I booked flights to Kyoto in April."),
        ("assistant", "Cherry blossom season, great timing."))
    return aid


# --------------------------------------------------------------------------- context


def test_a_hit_brings_the_reply_that_answered_it(store, agent_id):
    page = store.search_messages(agent_id, "garden")
    assert [h.text for h in page.hits] == ["How is your garden doing?"]
    assert [c.text for c in page.hits[0].context] == ["The tomatoes are finally red."]
    assert page.total == 1  # the reply is context, not a result of its own
    tool = MemoryTools(store, agent_id).execute("conversation_search", {"query": "garden"})
    assert ("2025-03-02\n- user: How is your garden doing?\n"
            "  ↳ assistant: The tomatoes are finally red.") in tool.text
    assert store.search_messages(agent_id, "garden", context=False).hits[0].context == []


def test_a_reply_that_is_a_hit_itself_is_not_shown_twice(store, agent_id):
    page = store.search_messages(agent_id, "garden tomatoes")
    assert sorted(h.text for h in page.hits) == ["How is your garden doing?",
                                                "The tomatoes are finally red."]
    question = next(h for h in page.hits if h.text.startswith("How"))
    assert question.context == []


def test_tool_messages_between_a_question_and_its_answer_are_skipped(store):
    aid = store.create_agent("t", {}, {}).id
    tool_use = Message("assistant", [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}], 1)
    result = Message("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "zzz"}], 1)
    store.add_messages(aid, [Message("user", [{"type": "text", "text": "what about parrots"}], 1),
                             tool_use, result,
                             Message("assistant", [{"type": "text", "text": "Polly is fine."}], 1)])
    hit = store.search_messages(aid, "parrots").hits[0]
    assert [c.text for c in hit.context] == ["Polly is fine."]


# --------------------------------------------------------------------------- vectors


def test_vectors_are_stored_int8_with_their_model_and_go_with_their_rows(store, agent_id):
    emb = ConceptEmbedder()
    assert index_agent(store, agent_id, emb) == 6
    assert store.vector_counts(agent_id, emb.name)["messages"] == {
        "rows": 6, "current": 6, "other": 0, "missing": 0}
    assert store.vector_dim(agent_id, emb.name) == 64  # int8: one byte per dimension
    store.delete_turns(agent_id, [1])  # /pop
    assert store.vector_counts(agent_id, emb.name)["messages"]["current"] == 4
    from memgpt_lite.engine.matching import Matcher

    row = store.get_agent_by_id(agent_id)
    privacy.forget(store, privacy.plan_forget(store, row, Matcher.build("Kyoto")))
    # only the message naming Kyoto changes (deleted, or redacted in the queue): its vector goes
    assert store.vector_counts(agent_id, emb.name)["messages"]["current"] == 3
    pid = store.add_passage(agent_id, "Biscuit the beagle likes carrots")
    index_agent(store, agent_id, emb)
    store.delete_passages(agent_id, [pid])
    assert store.db.query("SELECT count(*) FROM vectors WHERE kind = 'passages'")[0][0] == 0


def test_a_changed_text_loses_its_stale_vector(store, agent_id):
    emb = ConceptEmbedder()
    index_agent(store, agent_id, emb)
    msg = store.all_messages(agent_id)[0]
    msg.content = [{"type": "text", "text": "We adopted a cat."}]
    store.update_message(agent_id, msg)
    assert store.vector_counts(agent_id, emb.name)["messages"]["missing"] == 1
    assert store.texts_to_embed(agent_id, "messages", emb.name) == [(msg.id, "We adopted a cat.")]


def test_deleting_an_agent_deletes_its_vectors(store, agent_id):
    index_agent(store, agent_id, ConceptEmbedder())
    store.delete_agent("a")
    assert store.db.query("SELECT count(*) FROM vectors")[0][0] == 0


def test_a_switch_of_model_reindexes(store, agent_id):
    index_agent(store, agent_id, ConceptEmbedder(name="fake:one"))
    index_agent(store, agent_id, ConceptEmbedder(dim=32, name="fake:two"))
    assert store.vector_models(agent_id) == {"fake:two": 6}
    assert store.vector_dim(agent_id, "fake:two") == 32


def test_an_old_database_gets_the_vector_table(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, apply in MIGRATIONS[:3]:
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2025-01-01')", (name,))
    db.close()
    with SQLiteStore(path) as s:
        assert "005_vectors" in s.applied_migrations()
        aid = s.create_agent("x", {}, {}).id
        say(s, aid, 1, ("user", "my puppy"))
        assert index_agent(s, aid, ConceptEmbedder()) == 1


# --------------------------------------------------------------------------- fusion


def test_fusion_weighs_each_side_scaled_to_its_own_range():
    fused = fuse({1: 10.0, 2: 5.0, 3: 0.0}, {2: 0.9, 4: 0.5}, keyword_weight=0.6)
    assert fused == pytest.approx({1: 0.6, 2: 0.3 + 0.4, 3: 0.0, 4: 0.0})
    assert fuse({}, {7: 0.3}) == {7: pytest.approx(1 - KEYWORD_WEIGHT)}


def test_dense_finds_meaning_keywords_miss_and_unembedded_rows_are_still_found(store, agent_id):
    emb = ConceptEmbedder()
    index_agent(store, agent_id, emb)
    late = say(store, agent_id, 4, ("user", "Biscuit chewed my shoes again."))[0]  # no vector
    dense = DenseRecall(store, agent_id, emb)
    assert store.search_messages(agent_id, "puppy").total == 0  # no shared word
    scores, weight, events = dense.rank("conversation_search", "messages", "puppy")
    page = store.search_messages(agent_id, "puppy", dense=scores, keyword_weight=weight)
    assert page.hits[0].text == "We adopted a beagle called Biscuit."
    assert page.hits[0].context[0].text == "Lovely!"
    assert events[0].ids[0] == page.hits[0].id and events[0].model == emb.name
    scores, weight, _ = dense.rank("conversation_search", "messages", "Biscuit shoes")
    page = store.search_messages(agent_id, "Biscuit shoes", dense=scores, keyword_weight=weight)
    assert late in [h.id for h in page.hits]


def test_dense_candidates_respect_the_date_range(store, agent_id):
    emb = ConceptEmbedder()
    index_agent(store, agent_id, emb)
    dense = DenseRecall(store, agent_id, emb)
    scores, _, _ = dense.rank("conversation_search", "messages", "puppy", "2025-03-02",
                              "2025-03-03")
    days = {m.id: m.created_at[:10] for m in store.all_messages(agent_id)}
    assert scores and {days[i] for i in scores} <= {"2025-03-02", "2025-03-03"}


def test_archival_search_fuses_too_and_keeps_the_tag_filter(store, agent_id):
    emb = ConceptEmbedder()
    store.add_passage(agent_id, "Biscuit is a beagle", ["pets"])
    store.add_passage(agent_id, "Pepper the greyhound", ["friends"])
    index_agent(store, agent_id, emb)
    tools = MemoryTools(store, agent_id)
    tools.dense = DenseRecall(store, agent_id, emb)
    out = tools.execute("archival_search", {"query": "dog", "tags": ["pets"]})
    assert "Biscuit is a beagle" in out.text and "Pepper" not in out.text
    assert [e.kind for e in out.events] == ["dense_search"]


# --------------------------------------------------------------------------- in a chat


def search_then_answer(query: str) -> list:
    return [tool_response([("conversation_search", {"query": query})]), text_response("ok")]


def open_agent(store: SQLiteStore, script: list) -> Agent:
    return Agent.open(store, "a", model_client=ScriptedModel(script),
                      settings=Settings(context_window=20_000, max_output_tokens=500))


def test_new_turns_are_embedded_in_the_background_without_holding_the_reply(store, agent_id):
    emb = ConceptEmbedder()
    emb.gate = threading.Event()  # the model is stuck until released
    agent = open_agent(store, [text_response("Noted, a greyhound.")])
    indexer = attach_embedder(agent, emb)
    try:
        events = list(agent.step("My neighbour has a greyhound."))
        assert events[-1].kind == "turn_end" and events[-1].completed  # done while stuck
        assert emb.calls == 0
        emb.gate.set()
        assert indexer.wait_idle(10)
        assert emb.calls == 2  # the new user message and the reply; older rows are index's
        missing = store.vector_counts(agent.id, emb.name)["messages"]["missing"]
        assert missing == 6
    finally:
        indexer.close()
        agent.close()


def test_a_forget_while_the_turn_is_being_embedded_leaves_no_vector_of_what_it_removed(
        store, agent_id, tmp_path):
    from memgpt_lite.engine.matching import Matcher

    emb = ConceptEmbedder()
    emb.gate = threading.Event()  # the indexer has read the turn's texts and is embedding
    agent = open_agent(store, [text_response("Noted.")])
    indexer = attach_embedder(agent, emb)
    try:
        list(agent.step("My locker code is zebra, near the Kyoto poster."))
        with SQLiteStore(tmp_path / "db.sqlite") as other:  # `forget` in another terminal
            row = other.get_agent_by_id(agent_id)
            privacy.forget(other, privacy.plan_forget(other, row, Matcher.build("zebra")))
        emb.gate.set()
        assert indexer.wait_idle(10)
    finally:
        indexer.close()
        agent.close()
    texts = dict(store.texts_to_embed(agent_id, "messages", "another model", limit=99))
    vectors = store.db.query("SELECT row_id, vec, scale FROM vectors")
    assert "Noted." in [texts[row_id] for row_id, _, _ in vectors]
    for row_id, vec, scale in vectors:
        assert "zebra" not in texts[row_id]  # redacted in the queue: "[forgotten]"
        stored = np.frombuffer(vec, dtype=np.int8).astype(np.float32) * scale
        assert float(stored @ emb.embed([texts[row_id]])[0]) > 0.99, texts[row_id]


def test_a_failing_endpoint_degrades_to_keywords_with_one_notice(store, agent_id):
    with FakeEmbeddingsServer() as server:
        emb = HttpEmbedder(server.url, "m", timeout=2)
        index_agent(store, agent_id, emb)
        server.faults += [500, 500]
        agent = open_agent(store, search_then_answer("Kyoto") + search_then_answer("garden"))
        indexer = attach_embedder(agent, emb)
        try:
            first = list(agent.step("find Kyoto"))
            second = list(agent.step("find garden"))
        finally:
            indexer.close()
            agent.close()
    for events, found in ((first, "flights to Kyoto"), (second, "tomatoes are finally red")):
        assert events[-1].completed
        result = next(e for e in events if e.kind == "tool_result")
        assert not result.result.is_error and found in result.result.content
    notices = [e.message for e in first + second if e.kind == "notice"]
    assert len(notices) == 1 and "keywords only" in notices[0] and "answered 500" in notices[0]
    errors = [e.error for e in first + second if e.kind == "dense_search"]
    assert errors[0] and errors[1]  # the second search rests instead of calling again
    assert len(server.requests) == 1 + 1  # the backfill, then the first query only


def test_an_endpoint_serving_another_model_under_the_same_name_is_reindexed(store, agent_id):
    with FakeEmbeddingsServer() as server:
        index_agent(store, agent_id, HttpEmbedder(server.url, "m"))
        server.embedder = ConceptEmbedder(dim=32)  # another model loaded, same name asked
        emb = HttpEmbedder(server.url, "m", timeout=2)  # a new session
        agent = open_agent(store, [text_response("Noted.")] + search_then_answer("Kyoto"))
        indexer = attach_embedder(agent, emb)
        try:
            list(agent.step("My neighbour has a greyhound."))
            assert indexer.wait_idle(10)
            events = list(agent.step("find Kyoto"))
        finally:
            indexer.close()
            agent.close()
        sizes = store.db.query("SELECT DISTINCT length(vec) FROM vectors")
        assert sizes == [(64,)]  # the new model's vectors were refused, not mixed in
        result = next(e for e in events if e.kind == "tool_result")
        assert not result.result.is_error and "flights to Kyoto" in result.result.content
        notices = [e.message for e in events if e.kind == "notice"]
        assert len(notices) == 1 and "run `memgpt-lite index`" in notices[0]
        assert index_agent(store, agent_id, emb) == 10  # every row again, in the new size
        assert store.db.query("SELECT DISTINCT length(vec) FROM vectors") == [(32,)]
        query = emb.embed(["trip"], query=True)[0]
    assert store.dense_scores(agent_id, "messages", "http:m", query)


def test_search_reads_only_the_vectors_of_the_query_size(store, agent_id):
    index_agent(store, agent_id, ConceptEmbedder(name="same"))
    ids = say(store, agent_id, 4, ("user", "A trip to Japan."))
    store.put_vectors(agent_id, "messages", "same", ids, ConceptEmbedder(dim=32).embed(["x"]))
    query = ConceptEmbedder().embed(["trip"], query=True)[0]
    scores = store.dense_scores(agent_id, "messages", "same", query)
    assert scores and ids[0] not in scores


# --------------------------------------------------------------------------- replay


def record_hybrid(store: SQLiteStore, agent_id: int) -> tuple:
    emb = ConceptEmbedder()
    index_agent(store, agent_id, emb)
    agent = open_agent(store, search_then_answer("puppy") + [text_response("bye")])
    indexer = attach_embedder(agent, emb)
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    try:
        first = list(recording.recorded_step(agent, recorder, "find puppy"))
        indexer.wait_idle(10)
        list(recording.recorded_step(agent, recorder, "thanks"))
    finally:
        recorder.close()
        indexer.close()
        agent.close()
    return recorder.path, first


def test_strict_replay_reproduces_a_hybrid_session_without_an_embedder(store, agent_id):
    path, events = record_hybrid(store, agent_id)
    result = next(e for e in events if e.kind == "tool_result").result.content
    assert "beagle called Biscuit" in result  # found by meaning alone
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed


def test_replay_serves_the_recorded_dense_candidates(store, agent_id):
    path, _ = record_hybrid(store, agent_id)
    lines = path.read_text("utf-8").splitlines()
    for i, line in enumerate(lines):
        row = json.loads(line)
        if row["type"] == "dense_search":
            row["ids"], row["scores"] = [], []  # as if the dense side had found nothing
            lines[i] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    report = replay_mod.replay(path, strict=True)
    assert not report.ok  # the next request differs: the tool result lost its hit


def test_strict_replay_of_a_hybrid_session_in_a_data_dir_shared_with_another_agent(
        store, agent_id):
    """SQLite numbers messages across the data dir: another agent's messages made this
    session's ids skip, and the replay, which holds this agent's rows alone, numbered its
    messages otherwise; the recorded dense candidates then named messages it did not
    have (a KeyError traceback out of `replay --strict`)."""
    other = store.create_agent("other", {}, {}).id
    say(store, other, 1, ("user", "My dog is a greyhound."), ("assistant", "Fast!"))
    emb = ConceptEmbedder()
    index_agent(store, agent_id, emb)
    agent = open_agent(store, [text_response("Noted.")] + search_then_answer("dog"))
    indexer = attach_embedder(agent, emb)
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    try:
        list(recording.recorded_step(agent, recorder, "We also got a puppy, Rex."))
        indexer.wait_idle(10)
        events = list(recording.recorded_step(agent, recorder, "what about my dogs?"))
    finally:
        recorder.close()
        indexer.close()
        agent.close()
    found = next(e for e in events if e.kind == "dense_search")
    assert any(i > 8 for i in found.ids)  # this session's message, past the other's ids
    lines = [json.loads(line) for line in recorder.path.read_text("utf-8").splitlines()]
    assert [line["ids"] for line in lines if line["type"] == "message_ids"] == [[9], [9, 10]]
    report = replay_mod.replay(recorder.path, strict=True)
    assert report.ok and report.completed

"""An agent's history is its own: search ranks from the agent's rows alone, recordings carry
only what changed since a base snapshot, and replays rebuild the agent row for row."""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memgpt_lite.engine import config, privacy, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import Message, ModelRequest, ModelResponse
from memgpt_lite.engine.store import snapshot
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS
from memgpt_lite.lab.scripted import estimate_usage

WORDS = ("garden tulip bike deploy hexo budget recipe invoice python sqlite beagle rex "
         "mountain paris rome trip doctor medicine train ticket").split()


def text(role: str, body: str, turn: int) -> Message:
    return Message(role, [{"type": "text", "text": body}], turn)


def history(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]


def ranked(store: SQLiteStore, agent_id: int, query: str) -> list[tuple[str, float]]:
    page = store.search_messages(agent_id, query, per_page=10)
    return [(h.text, round(h.score, 9)) for h in page.hits]


# --------------------------------------------------------------------------- ranking


def test_ranking_does_not_depend_on_other_agents(tmp_path):
    """The same history alone, or interleaved with another agent's (sharing every word),
    ranks every query identically: positions and statistics are the agent's own."""
    rng = random.Random(3)
    mine, theirs = history(rng, 60), history(rng, 90)
    alone, shared = SQLiteStore(tmp_path / "alone.db"), SQLiteStore(tmp_path / "shared.db")
    a1 = alone.create_agent("me", {}, {})
    a2, other = shared.create_agent("me", {}, {}), shared.create_agent("other", {}, {})
    for i, body in enumerate(mine, 1):
        alone.add_message(a1.id, text("user", body, i))
        shared.add_message(a2.id, text("user", body, i))
        for extra in theirs[i % 30::30][:2]:
            shared.add_message(other.id, text("user", extra, i))
    for query in ("garden tulip", "deploy hexo python", "rex beagle doctor", "paris"):
        assert ranked(alone, a1.id, query) == ranked(shared, a2.id, query), query


def test_old_database_gets_per_agent_positions_and_indexes(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, apply in MIGRATIONS[:2]:
        apply(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, '2025-01-01')", (name,))
    for agent in ("a", "b"):
        db.execute("INSERT INTO agents (name, created_at) VALUES (?, '2025-01-01')", (agent,))
    for i in range(6):  # interleaved: a, b, a, b, ...
        db.execute("INSERT INTO messages (agent_id, turn_id, role, content, index_text, "
                   "created_at) VALUES (?, ?, 'user', ?, ?, '2025-01-01')",
                   (1 + i % 2, i, json.dumps([{"type": "text", "text": f"tulip {i}"}]),
                    f"tulip {i}"))
    db.close()
    with SQLiteStore(path) as store:
        assert store.integrity_problems() == []
        for agent_id in (1, 2):
            assert store.message_positions(agent_id) == [1, 2, 3]
            assert store.search_messages(agent_id, "tulip").total == 3
        uids = {a.uid for a in store.list_agents()}
        assert len(uids) == 2 and "" not in uids


# --------------------------------------------------------------------------- recordings


CALLS = itertools.count(1)  # ids unique across every model and process, as the API's are


class Policy:
    """A deterministic model: a user message "find X" makes it search for X first."""

    def stream(self, request: ModelRequest):
        self.n = next(CALLS)
        last = request.messages[-1]["content"]
        asked = next((b["text"] for b in last if b.get("type") == "text"
                      and "find " in b.get("text", "")), None)
        answered = any(b.get("type") == "tool_result" for b in last)
        if asked and not answered:
            query = asked.split("find ", 1)[1].split()[0]
            content = [{"type": "tool_use", "id": f"toolu_{self.n}",
                        "name": "conversation_search", "input": {"query": query}}]
            response = ModelResponse(content, "tool_use", estimate_usage(request))
        else:
            response = ModelResponse([{"type": "text", "text": f"ok {self.n}"}], "end_turn",
                                     estimate_usage(request))
        response = ModelResponse(response.content, response.stop_reason,
                                 estimate_usage(request, response), request.model, f"m{self.n}")
        yield response


def open_agent(store: SQLiteStore, name: str) -> Agent:
    return Agent.open(store, name, model_client=Policy(), summary_client=Policy(),
                      settings=Settings(context_window=7_000, max_output_tokens=500))


def record(agent: Agent, inputs: list[str]) -> Path:
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    for body in inputs:
        list(recording.recorded_step(agent, recorder, body))
    recorder.close()
    return recorder.path


def test_a_large_agent_records_a_base_once_and_small_headers_after(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 30)
    store = SQLiteStore(config.db_path())
    agent = open_agent(store, "big")
    for body in history(random.Random(5), 40):
        list(agent.step(body))
    first = record(agent, ["find tulip", "hello"])
    second = record(agent, ["find garden", "find paris"])
    bases = sorted((first.parent / "bases").glob("*.db"))
    assert len(bases) == 1  # written for the first session, reused by the second
    headers = [json.loads(p.read_text().splitlines()[0]) for p in (first, second)]
    assert headers[0]["base"] == headers[1]["base"] == f"bases/{bases[0].name}"
    assert len(headers[1]["delta"]["messages"]) < 20  # what changed since the base
    assert len(json.dumps(headers[1])) < 20_000
    for path in (first, second):
        report = replay_mod.replay(path, strict=True)
        assert report.ok, report.divergences


def test_a_missing_base_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 5)
    store = SQLiteStore(config.db_path())
    agent = open_agent(store, "a")
    for body in history(random.Random(1), 10):
        list(agent.step(body))
    path = record(agent, ["find tulip"])
    for base in (path.parent / "bases").glob("*.db"):
        base.unlink()
    with pytest.raises(recording.RecordingError, match="snapshot .* is missing"):
        replay_mod.replay(path, strict=True)


def test_ids_reused_after_a_pop_replay_from_base_and_delta(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 5)
    store = SQLiteStore(config.db_path())
    agent = open_agent(store, "a")
    for body in history(random.Random(2), 10):
        list(agent.step(body))
    record(agent, ["find tulip"])  # writes the base
    agent.pop_turns(2)  # the highest ids are freed and SQLite hands them out again
    list(agent.step("tulip garden again"))
    path = record(agent, ["find tulip", "find garden"])
    assert replay_mod.replay(path, strict=True).ok


def test_forget_removes_the_text_from_the_base_files(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 5)
    store = SQLiteStore(config.db_path())
    agent = open_agent(store, "a")
    for body in history(random.Random(4), 10) + ["my locker code is zanzibar"]:
        list(agent.step(body))
    path = record(agent, ["hello"])
    (base,) = (path.parent / "bases").glob("*.db")
    assert b"zanzibar" in base.read_bytes()
    plan = privacy.plan_forget(store, store.get_agent_by_id(agent.id), Matcher.build("zanzibar"))
    assert plan.bases == {base: 1}
    privacy.forget(store, plan)
    assert b"zanzibar" not in base.read_bytes()
    assert b"zanzibar" not in path.read_bytes()
    # the recording started from that base: its replay says so instead of diverging
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.scrubbed.start and report.scrubbed.turns == []


# --------------------------------------------------------------------------- property


ACTIONS = st.lists(st.sampled_from(["say", "say", "long", "long", "long", "find", "find", "find",
                                    "pop", "restart", "switch", "forget"]),
                   min_size=12, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=ACTIONS, seed=st.integers(0, 10_000), refresh=st.sampled_from([4, 10_000]))
def test_strict_replay_of_every_recording_never_diverges(tmp_path_factory, monkeypatch,
                                                         actions, seed, refresh):
    """Two agents in one data dir, sessions with pops, forgets, searches and restarts:
    every recording replays strictly, all through when no forget touched it, else up to the
    turn its header says a forget scrubbed (a forget may rewrite the history it starts
    from); one made after the last forget is never touched."""
    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", refresh)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
    rng = random.Random(seed)
    store = SQLiteStore(config.db_path())
    agents = {name: open_agent(store, name) for name in ("a", "b")}
    current, recorders, made_after_forget = "a", {}, []

    def recorder_for(name: str) -> recording.Recorder:
        if name not in recorders:
            recorders[name] = recording.Recorder.for_agent(agents[name])
            recording.record_header(agents[name], recorders[name])
            made_after_forget.append(recorders[name].path)
        return recorders[name]

    def end(name: str) -> None:
        if name in recorders:
            recorders.pop(name).close()

    for action in actions:
        agent = agents[current]
        if action in ("say", "long", "find"):
            words = rng.randint(150, 400) if action == "long" else rng.randint(2, 6)
            body = ("find " if action == "find" else "") + " ".join(
                rng.choice(WORDS) for _ in range(words))
            list(recording.recorded_step(agent, recorder_for(current), body))
        elif action == "pop":
            if agent.pop_turns(1):
                end(current)
        elif action == "restart":
            for name in list(recorders):
                end(name)
            agents[current].close()
            agents[current] = open_agent(store, current)
        elif action == "switch":
            current = "b" if current == "a" else "a"
        else:
            for name in list(recorders):
                end(name)
            row = store.get_agent_by_id(agent.id)
            plan = privacy.plan_forget(store, row, Matcher.build(rng.choice(WORDS)))
            if not plan.empty:
                privacy.forget(store, plan)
            made_after_forget.clear()
    for name in list(recorders):
        end(name)
    for path in sorted(config.recordings_dir().rglob("*.jsonl")):
        report = replay_mod.replay(path, strict=True)
        assert report.ok, (path.name, report.divergences)
        if report.scrubbed is None or path in made_after_forget:
            assert report.completed and report.scrubbed is None, path.name
    store.close()

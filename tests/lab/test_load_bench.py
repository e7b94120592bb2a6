"""`bench load`: many chat processes on one Postgres, and the check that no committed write
was lost or interleaved. The run itself is a benchmark (timing is never asserted); what is
tested is that a small run verifies clean, and that the verification really finds a lost
message and a turn split by another."""

from __future__ import annotations

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.bench import load
from memgpt_lite.lab.scripted import ScriptedModel


@pytest.mark.slow
def test_a_small_load_run_commits_every_turn_whole(pg_url):
    result = load.load_benchmark(pg_url, agents=3, turns=3, race_turns=3)
    assert {k: (r["turns"], r["lost"], r["interleaved"]) for k, r in result.items()} == \
        {"concurrent": (9, 0, 0), "race": (6, 0, 0)}
    assert result["race"]["engine_p95_ms"] >= result["race"]["engine_p50_ms"] > 0


@pytest.fixture
def history(store_target):
    store = open_store(store_target)
    script = [r for i in range(3) for r in load._script("T", i)]
    agent = Agent.open(store, "a", model_client=ScriptedModel(script))
    for i in range(3):
        list(agent.step(f"T turn {i}"))
    agent.close()
    yield store, agent.id
    store.close()


def _x(store, sql: str, params: tuple) -> None:
    with store.transaction():
        store.db.execute(sql, params)


def test_verify_finds_a_lost_message(history):
    store, aid = history
    assert load.verify(store, aid, {"T": 3}) == {"turns": 3, "lost": 0, "interleaved": 0}
    reply = [m for m in store.all_messages(aid) if load._text(m) == "re: T turn 1"][0]
    _x(store, "DELETE FROM messages WHERE agent_id = ? AND id = ?", (aid, reply.id))
    assert load.verify(store, aid, {"T": 3})["lost"] == 1
    assert load.verify(store, aid, {"T": 4})["lost"] == 2  # a turn never written at all


def test_verify_finds_turns_written_into_each_other(history):
    store, aid = history
    first, second = [m.id for m in store.all_messages(aid)
                     if m.role == "user" and not load._text(m)][:2]  # tool results, turns 1, 2
    turns = {m.id: m.turn_id for m in store.all_messages(aid)}
    _x(store, "UPDATE messages SET turn_id = ? WHERE agent_id = ? AND id = ?",
       (turns[second], aid, first))
    _x(store, "UPDATE messages SET turn_id = ? WHERE agent_id = ? AND id = ?",
       (turns[first], aid, second))
    assert load.verify(store, aid, {"T": 3}) == {"turns": 3, "lost": 0, "interleaved": 2}

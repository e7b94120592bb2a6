"""The request and its token ledger (engine/context.py), through the real agent and store."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response


def test_the_ledgers_sections_add_up_to_the_context_it_reports(tmp_path):
    """/context prints the request's size and one row per section: the rows must add up to
    it, whatever the sizes (each section rounded on its own used to miss it by a token)."""
    replies = [text_response("ok " * (1 + 7 * i % 50)) for i in range(40)]
    with SQLiteStore(tmp_path / "ledger.db") as store:
        agent = Agent.open(store, "a", model_client=ScriptedModel(replies),
                           settings=Settings(context_window=16_000))
        missed = []
        for i in range(30):
            list(agent.step("x" * (1 + 97 * i % 3_000)))
            report = agent.context_report()
            if sum(report.ledger.values()) != report.used_tokens:
                missed.append((i, sum(report.ledger.values()), report.used_tokens))
        agent.close()
    assert missed == []


def test_a_section_of_nothing_gets_no_tokens_and_none_goes_below_zero():
    from memgpt_lite.engine.context import shares

    assert shares(3, [5, 5, 0]) == [2, 1, 0]  # rounding each half up once gave the last -1
    assert sum(shares(9_808, [5_393, 3_165, 215, 445, 590, 0])) == 9_808

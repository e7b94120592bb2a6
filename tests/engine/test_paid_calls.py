"""Every paid call is counted: the summariser's calls are in the turn's cost, the replay
report, eval totals and the long-session benchmark, all through `Tally.paid_*`."""

from __future__ import annotations

import io

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.scenarios import TurnRecord, totals
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import render

SMALL = Settings(context_window=6_000, max_output_tokens=500, safety_margin=100)


def agent_that_must_flush(tmp_path) -> tuple[SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "a.db")
    agent = Agent.open(store, "a", model_client=ScriptedModel([text_response("Fine.")]),
                       summary_client=ScriptedModel([text_response("New summary.")] * 20),
                       settings=SMALL)
    for t in range(1, 9):
        store.add_messages(agent.id, [
            Message("user", [{"type": "text", "text": f"old turn {t} " + "x" * 2_000}], t),
            Message("assistant", [{"type": "text", "text": f"old reply {t}"}], t)])
    return store, agent


def test_the_turn_cost_counts_the_summariser(tmp_path):
    store, agent = agent_that_must_flush(tmp_path)
    events = list(agent.step("and now?"))
    tally = Tally().add_all(events)
    assert tally.summary_calls >= 1 and tally.summary_cost_usd > 0
    assert events[-1].cost_usd == tally.paid_cost_usd > tally.cost_usd
    assert events[-1].usage == tally.paid_usage
    record = TurnRecord(1, 1, "and now?", events[-1].text, True, events)
    assert totals([record])["cost_usd"] == round(tally.paid_cost_usd, 6)
    assert totals([record])["input_tokens"] == tally.paid_usage.total_input


def test_the_replay_report_counts_the_summariser(tmp_path):
    store, agent = agent_that_must_flush(tmp_path)
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        live = list(recording.recorded_step(agent, recorder, "and now?"))[-1].cost_usd
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.tally.paid_cost_usd == live > report.tally.cost_usd
    out = io.StringIO()
    render.print_replay_report(render.make_console(out, plain=True, width=100), report)
    assert f"${live:.4f}" in out.getvalue()

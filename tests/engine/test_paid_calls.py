"""Every paid call is counted: the summariser's calls are in the turn's cost, the replay
report, eval totals and the long-session benchmark, all through `Tally.paid_*`."""

from __future__ import annotations

import io
from dataclasses import replace

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import StreamError
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import Message, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.fake_server import FakeAnthropicServer, error_event, overloaded
from memgpt_lite.lab.scenarios import TurnRecord, totals
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import render

SMALL = Settings(context_window=6_000, max_output_tokens=500, safety_margin=100)


def agent_that_must_flush(tmp_path, settings=SMALL) -> tuple[SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "a.db")
    agent = Agent.open(store, "a", model_client=ScriptedModel([text_response("Fine.")]),
                       summary_client=ScriptedModel([text_response("New summary.")] * 20),
                       settings=settings)
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


def test_a_stream_that_fails_after_it_began_is_paid_for_and_counted(tmp_path):
    """The API bills a call's input once its message has started, even if the stream then
    breaks: the turn's cost, the session's tally and a strict replay of it all count it."""
    with FakeAnthropicServer() as server:
        server.enqueue(error_event(after=3))  # message_start and a block, then an error
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(SQLiteStore(tmp_path / "a.db"), "a", model_client=client)
        path = tmp_path / "rec.jsonl"
        with recording.Recorder(path) as recorder:
            recording.record_header(agent, recorder)
            events = list(recording.recorded_step(agent, recorder, "hello there"))
    tally = Tally().add_all(events)
    assert tally.errors == 1 and not events[-1].completed
    assert tally.usage.total_input > 1_000 and tally.cost_usd > 0
    assert events[-1].usage == tally.paid_usage and events[-1].cost_usd == tally.paid_cost_usd
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.tally.paid_usage == tally.paid_usage


def test_a_call_refused_before_its_stream_began_costs_nothing(tmp_path):
    with FakeAnthropicServer() as server:
        server.enqueue(overloaded())
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(SQLiteStore(tmp_path / "a.db"), "a", model_client=client)
        events = list(agent.step("hello there"))
    tally = Tally().add_all(events)
    assert tally.errors == 1 and tally.paid_usage.total_input == 0 == tally.paid_cost_usd


def test_a_summariser_model_with_no_price_is_shown_as_unknown_not_guessed(tmp_path):
    settings = replace(SMALL, summary_model="claude-haiku-4-5")  # not in the price list
    store, agent = agent_that_must_flush(tmp_path, settings)
    tally = Tally().add_all(list(agent.step("and now?")))
    assert tally.summary_calls >= 1 and tally.summary_usage.total_input > 0
    assert tally.summary_cost_usd == 0 and tally.cost_usd > 0  # not priced as Sonnet
    assert tally.unpriced == {"claude-haiku-4-5"} == tally.unpriced_by_kind["summariser"]
    out = io.StringIO()
    console = render.make_console(out, plain=True, width=200)
    render.print_tokens(console, tally)
    render.print_cost(console, tally)
    shown = out.getvalue()
    assert f"cost ${tally.paid_cost_usd:.4f} + unknown (no price for claude-haiku-4-5" in shown
    # /tokens: the session and the summariser; /cost: the summariser, the total and why
    assert shown.count("+ unknown") == 5


def test_a_priced_session_shows_its_cost_alone(tmp_path):
    store, agent = agent_that_must_flush(tmp_path)
    tally = Tally().add_all(list(agent.step("and now?")))
    out = io.StringIO()
    render.print_cost(render.make_console(out, plain=True, width=200), tally)
    assert not tally.unpriced and "unknown" not in out.getvalue()


class BilledThenBroken:
    """A summariser whose every stream breaks after the API billed its input."""

    def stream(self, request):
        error = StreamError("The connection broke mid-reply.")
        error.billed = Usage(input_tokens=1_234, output_tokens=5)
        raise error
        yield  # a generator, as a ModelClient's stream is


def test_a_summariser_call_billed_then_broken_is_counted_as_the_summariser_s(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    agent = Agent.open(store, "a", model_client=ScriptedModel([text_response("Fine.")]),
                       summary_client=BilledThenBroken(), settings=SMALL)
    for t in range(1, 9):
        store.add_messages(agent.id, [
            Message("user", [{"type": "text", "text": f"old turn {t} " + "x" * 2_000}], t),
            Message("assistant", [{"type": "text", "text": f"old reply {t}"}], t)])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        events = list(recording.recorded_step(agent, recorder, "and now?"))
    tally = Tally().add_all(events)
    assert events[-1].completed and tally.summary_calls >= 1  # the deterministic fallback
    assert tally.summary_usage.input_tokens == 1_234 * tally.summary_calls
    assert tally.summary_cost_usd > 0 and events[-1].usage == tally.paid_usage
    assert tally.context_tokens != 1_234  # the chat's own size, not the summariser's
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.tally.paid_usage == tally.paid_usage


def test_a_replay_shows_an_unpriced_turn_cost_as_unknown(tmp_path):
    """The replay's per-turn line said `$0.0012` for a turn whose summariser had no price:
    a part of the cost shown as the whole."""
    from memgpt_lite.terminal.replay_view import ReplayView

    settings = replace(SMALL, summary_model="claude-haiku-4-5")  # not in the price list
    store, agent = agent_that_must_flush(tmp_path, settings)
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, "and now?"))
    out = io.StringIO()
    view = ReplayView(render.make_console(out, plain=True, width=200))
    assert replay_mod.replay(path, strict=True, observer=view).ok
    turns = [line for line in out.getvalue().splitlines() if " input tokens · $" in line]
    assert len(turns) == 1, out.getvalue()
    assert "+ unknown (no price for claude-haiku-4-5" in turns[0]

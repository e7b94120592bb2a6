"""Edits the user approves (confirm_memory): the engine asks through the callback it is given,
applies what is approved, declines the rest with a tool result saying so, declines with one
notice when no one can be asked, and records every answer so a replay answers the same."""

from __future__ import annotations

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import ConfigError, Settings
from memgpt_lite.engine.events import MemoryConfirmEvent, NoticeEvent, ToolResultEvent
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


@pytest.fixture
def store(store_target):
    with open_store(store_target) as s:
        yield s


WRITES = [
    tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada."})]),
    tool_response([("archival_insert", {"content": "Ada deploys with hexo d."})]),
    text_response("Done."),
]


def confirming(store, answers, name="ada"):
    asked: list[MemoryConfirmEvent] = []

    def confirm(change):
        asked.append(change)
        return answers.pop(0)

    agent = Agent.open(store, name, model_client=ScriptedModel(list(WRITES), validate=True),
                       settings=Settings(confirm_memory=True), lock_wait=None)
    agent.confirm = confirm if answers is not None else None
    return agent, asked


def test_an_approved_write_is_applied_and_a_declined_one_is_not(store):
    agent, asked = confirming(store, [True, False])
    events = list(agent.step("I'm Ada; we deploy with hexo d."))
    assert events[-1].completed
    assert [(c.tool, c.target, c.new) for c in asked] == [
        ("core_memory_append", "human", "Name: Ada."),
        ("archival_insert", "", "Ada deploys with hexo d.")]
    assert asked[0].old == "Nothing is known about the user yet." and asked[0].scope == "agent"
    answers = [e.answer for e in events if isinstance(e, MemoryConfirmEvent)]
    assert answers == ["yes", "no"]
    results = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert not results[0].is_error and results[1].is_error
    assert "declined" in results[1].content
    assert store.get_block(agent.id, "human").value == "Name: Ada."
    assert store.list_passages(agent.id) == []


def test_without_anyone_to_ask_every_write_is_declined_with_one_notice(store):
    agent, _ = confirming(store, None)
    events = list(agent.step("I'm Ada; we deploy with hexo d."))
    assert events[-1].completed
    notices = [e for e in events if isinstance(e, NoticeEvent) and "confirm_memory" in e.message]
    assert len(notices) == 1 and "no terminal" in notices[0].message
    assert [e.answer for e in events if isinstance(e, MemoryConfirmEvent)] == [
        "unavailable", "unavailable"]
    assert store.get_block(agent.id, "human").value == "Nothing is known about the user yet."
    assert store.list_passages(agent.id) == []


def test_off_by_default_nothing_is_asked(store):
    agent = Agent.open(store, "ada", model_client=ScriptedModel(list(WRITES)), lock_wait=None)
    agent.confirm = lambda change: pytest.fail("asked while confirm_memory is off")
    assert list(agent.step("I'm Ada"))[-1].completed
    assert store.get_block(agent.id, "human").value == "Name: Ada."


def test_answers_are_recorded_and_replayed_exactly(store):
    agent, _ = confirming(store, [False, True])
    recorder = recording.start_recording(agent)
    assert list(recording.recorded_step(agent, recorder, "I'm Ada; hexo d."))[-1].completed
    recorder.close()
    text = recorder.path.read_text("utf-8")
    assert text.count('"type":"memory_confirm"') == 2
    report = replay_mod.replay(recorder.path, strict=True)
    assert report.ok and report.completed, report.divergences
    assert "Nothing is known" in report.final_core_memory["human"]  # declined again
    flipped = text.replace('"answer":"no"', '"answer":"yes"', 1)
    recorder.path.write_text(flipped, "utf-8")
    assert not replay_mod.replay(recorder.path, strict=True).ok  # the answers decide


def test_the_setting_comes_from_the_environment_and_is_checked(monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_CONFIRM_MEMORY", "on")
    assert Settings().with_env().confirm_memory is True
    monkeypatch.setenv("MEMGPT_LITE_CONFIRM_MEMORY", "maybe")
    with pytest.raises(ConfigError, match="MEMGPT_LITE_CONFIRM_MEMORY must be on or off"):
        Settings().with_env()

"""Scenario files (memgpt_lite/lab/scenarios.py) as a user may write them: every mistake is
one sentence naming the file and the item, found when the file is read, before any model
call of any scenario named."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.lab.scenarios import Scenario
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import eval_commands, render

ONE = '[[session]]\ninputs = ["hi", "again"]\n'

BAD_FILES = [
    ('clock_step = "abc"\n' + ONE, "clock_step must be a whole number of seconds"),
    ("clock_step = 99999999999999\n" + ONE, "clock_step must be a whole number of seconds"),
    ("clock_step = -60\n" + ONE, "clock_step must be a whole number of seconds"),
    ('clock = "9999-12-31T23:59:00Z"\n' + ONE, "runs past the year 9998"),
    ('[[session]]\nclock = "9999-12-31T23:59:00Z"\ninputs = ["a", "b"]\n',
     "runs past the year 9998"),
    ("session = 5\n", "session must be a list of [[session]] tables"),
    ("agents = 5\n" + ONE, "agents must be a list of [[agents]] tables"),
    ("check = 5\n" + ONE, "check must be a list of [[check]] tables"),
    ("settings = 5\n" + ONE, "[settings] must be a table of settings"),
    ("[settings]\ncontext_window = -5\n" + ONE, "settings.context_window must be between"),
    ('[[session]]\ninputs = [""]\n', "[[session]] 1: input 1 must be a text that is not empty"),
    ('[[session]]\ninputs = ["hi", "   "]\n', "input 2 must be a text that is not empty"),
    ("[[session]]\ninputs = [1, {a = 1}]\n", "input 1 must be a text that is not empty"),
    ('[[session]]\nrestart = "no"\ninputs = ["hi"]\n',
     "[[session]] 1: restart must be true or false, got 'no'"),
    ('[[agents]]\nname = "b"\n[[agents]]\nname = "b"\n[[session]]\nagent = "b"\n'
     'inputs = ["hi"]\n', "[[agents]] names 'b' twice"),
    ('[[agents]]\nname = "b"\nshare = ["a b"]\n' + ONE,
     "[[agents]] 1: 'a b' in share is not a block label"),
    ('[[agents]]\nname = "b"\nshare = [""]\n' + ONE,
     "[[agents]] 1: '' in share is not a block label"),
    ('[[agents]]\nname = "b"\nshare = [5]\n' + ONE, "[[agents]] 1: 5 in share is not a block"),
    ('[[agents]]\nname = "../x"\n' + ONE, "[[agents]] 1: '../x' cannot be an agent name"),
    ('agent = "a b"\n' + ONE, "agent: 'a b' cannot be an agent name"),
]


@pytest.mark.parametrize("text,says", BAD_FILES, ids=lambda v: str(v)[:30])
def test_a_bad_scenario_file_is_one_sentence_naming_the_file(text, says, tmp_path):
    """Each of these was a traceback (ValueError, TypeError, OverflowError) midway through a
    run, or an empty message sent to the model, or a value found only when its scenario
    started."""
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        Scenario.load(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert says in str(caught.value)


def test_a_bad_setting_in_the_second_file_stops_the_eval_before_any_call(tmp_path,
                                                                       monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "make_console",
                        lambda **_: Console(file=out, width=200, color_system=None))
    good = tmp_path / "good.toml"
    good.write_text(ONE)
    bad = tmp_path / "bad.toml"
    bad.write_text('[settings]\ncontext_window = "big"\n' + ONE)
    model = ScriptedModel([text_response("ok")] * 4)
    monkeypatch.setattr(eval_commands, "_live_client", lambda args: model)
    args = SimpleNamespace(scenario=None, scenarios=[str(good), str(bad)], model=None,
                           judge=False, json=None, replay=None, list=False, compare=None)
    assert eval_commands.cmd_eval(args) == 2
    assert model.requests == []  # the good file's turns were paid for before
    assert f"{bad}: settings.context_window must be a whole number" in out.getvalue()


def test_a_long_run_near_the_end_of_the_calendar_is_fine_when_it_fits():
    scenario = Scenario.from_dict({"clock": "9998-12-30T00:00:00Z", "clock_step": 0,
                                   "session": [{"inputs": ["a", "b"]}]})
    assert scenario.clock_step == 0


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad's UTF-8 starts with one; the file was refused as not valid TOML."""
    path = tmp_path / "mine.toml"
    path.write_text("\ufeff" + ONE, encoding="utf-8")
    assert Scenario.load(path).inputs == ["hi", "again"]


def test_a_turn_whose_model_call_failed_is_named_under_the_score(tmp_path):
    """A run against a bad key scored every check FAIL ("turn 2 said ''") with nothing
    saying the model was never reached."""
    from memgpt_lite.engine.errors import AuthError
    from memgpt_lite.lab import scenarios
    from memgpt_lite.terminal import eval_render

    scenario = Scenario.from_dict({"session": [{"inputs": ["hi", "again"]}],
                                   "check": [{"type": "reply_contains", "text": "ok"}]})
    model = ScriptedModel([text_response("ok"), AuthError("The API key was rejected.")])
    report = scenarios.run_scenario(scenario, model)
    assert report["failed_turns"] == [{"turn": 2, "error": "The API key was rejected."}]
    out = io.StringIO()
    eval_render.print_score_table(Console(file=out, width=200, color_system=None), report)
    assert "1 of 2 turns failed, so their checks scored no reply (turn 2: The API key was " \
           "rejected.)" in out.getvalue()

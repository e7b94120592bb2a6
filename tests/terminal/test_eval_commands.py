"""`memgpt-lite eval --replay` (memgpt_lite/terminal/eval_commands.py) of a run cut short
between two turns: it says how many turns the recording holds, not that the scenario
changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from memgpt_lite.engine import recording
from memgpt_lite.lab import scenarios
from memgpt_lite.lab.scenarios import Scenario
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli

SCENARIO = ('name = "three"\n[[session]]\ninputs = ["My dog is Pepper.", "I like jazz."]\n'
            '[[session]]\nrestart = true\ninputs = ["What is my dog called?"]\n'
            '[[check]]\ntype = "reply_contains"\ntext = "Pepper"\n')


def recorded_run(tmp_path: Path) -> tuple[Path, Path]:
    scenario = tmp_path / "three.toml"
    scenario.write_text(SCENARIO)
    run = tmp_path / "run.jsonl"
    replies = [text_response("Noted."), text_response("Nice."), text_response("Pepper.")]
    scenarios.run_scenario(Scenario.load(scenario), ScriptedModel(replies),
                           recorder=recording.Recorder(run))
    return scenario, run


@pytest.mark.parametrize("kept,whole", [(0, 0), (1, 1), (2, 2)])
def test_eval_replay_of_a_run_stopped_between_turns_says_it_was_cut_short(
        kept, whole, tmp_path, capsys):
    """Killed after turn `kept` had ended (its memory line written; after turn 2 the
    restart line too), or before the first: this said the scenario had changed since."""
    scenario, run = recorded_run(tmp_path)
    assert cli.main(["eval", str(scenario), "--replay", str(run)]) == 0
    capsys.readouterr()
    lines = run.read_text(encoding="utf-8").splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if '"type":"memory"' in line]
    end = ends[kept - 1] + 1 if kept else 1
    run.write_text("".join(lines[:end + (kept == 2)]), encoding="utf-8")
    assert cli.main(["eval", str(scenario), "--replay", str(run)]) == 2
    out = " ".join(capsys.readouterr().err.split())  # errors go to stderr
    assert (f"{run} holds {whole} of the 3 turns of scenario 'three': that run was cut "
            "short (interrupted or killed)") in out
    assert "changed" not in out


def test_eval_replay_of_a_scenario_with_an_input_added_since_says_it_changed(tmp_path,
                                                                           capsys):
    scenario, run = recorded_run(tmp_path)
    scenario.write_text(SCENARIO.replace('"What is my dog called?"',
                                         '"Hello again.", "What is my dog called?"'))
    assert cli.main(["eval", str(scenario), "--replay", str(run)]) == 2
    out = " ".join(capsys.readouterr().err.split())  # errors go to stderr
    assert "the scenario changed since that run" in out and "cut short" not in out


def test_eval_replay_takes_the_id_that_sessions_shows(tmp_path, capsys, monkeypatch):
    """`sessions` lists an eval's recording with an id, which `replay` takes; `eval
    --replay ID` said there was no recording at ID."""
    from memgpt_lite.engine.config import recordings_dir

    scenario = tmp_path / "three.toml"
    scenario.write_text(SCENARIO)
    run = recordings_dir() / "eval-three" / "20261202T060726Z.jsonl"
    replies = [text_response("Noted."), text_response("Nice."), text_response("Pepper.")]
    scenarios.run_scenario(Scenario.load(scenario), ScriptedModel(replies),
                           recorder=recording.Recorder(run))
    assert cli.main(["sessions"]) == 0
    assert "20261202T060726Z" in capsys.readouterr().out
    assert cli.main(["eval", str(scenario), "--replay", "20261202T060726Z"]) == 0
    assert "score 1/1" in " ".join(capsys.readouterr().out.split())


def test_an_eval_stopped_by_ctrl_c_says_it_cannot_be_resumed(tmp_path, capsys, monkeypatch):
    """It said only "interrupted": nothing told whether the run could be picked up again or
    whether the --json file was now half a report."""
    from memgpt_lite.lab import locomo

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(locomo, "run_locomo", stopped)
    report = tmp_path / "r.json"
    report.write_text("{}")
    data = tmp_path / "locomo.json"
    data.write_text("[]")
    assert cli.main(["eval", "locomo", str(data), "--retrieval-only", "--json",
                     str(report)]) == 130
    captured = capsys.readouterr()
    assert "a run cut short cannot be resumed or scored, and no report was written" in \
        " ".join((captured.out + captured.err).split())
    assert report.read_text() == "{}"


def test_eval_replay_of_a_scenario_with_an_input_appended_since_says_so(tmp_path, capsys):
    """It said the whole run "was cut short (interrupted or killed)": a run that ended
    whole, of a scenario that has more inputs now."""
    scenario, run = recorded_run(tmp_path)
    scenario.write_text(SCENARIO.replace('"What is my dog called?"',
                                         '"What is my dog called?", "And my music?"'))
    assert cli.main(["eval", str(scenario), "--replay", str(run)]) == 2
    out = " ".join(capsys.readouterr().err.split())
    assert (f"{run} is a whole run of scenario 'three' as it was then, with 3 inputs; it has "
            "4 now (inputs were added since): run it live again to score it") in out
    assert "cut short" not in out


@pytest.mark.parametrize("argv, flag, mode", [
    (["locomo", "D", "--retrieval-only", "--replay", "r.jsonl"], "--replay",
     "`eval locomo --retrieval-only`"),
    (["locomo", "D", "--retrieval-only", "--judge"], "--judge",
     "`eval locomo --retrieval-only`"),
    (["locomo", "D", "--retrieval-only", "--model", "haiku"], "--model",
     "`eval locomo --retrieval-only`"),
    (["locomo", "D", "--embedder", "onnx:x"], "--embedder", "`eval locomo`"),
    (["locomo", "D", "--db", "postgresql://x/y"], "--db", "`eval locomo`"),
    (["nkv", "D", "--judge"], "--judge", "`eval nkv`"),
    (["nkv", "D", "--retrieval-only"], "--retrieval-only", "`eval nkv`"),
    (["S", "--replay", "r.jsonl", "--judge"], "--judge", "`eval --replay`"),
    (["S", "--retrieval-only"], "--retrieval-only", "a scenario run"),
    (["S", "--file", "x"], "--file", "a scenario run"),
    (["--list", "--model", "haiku"], "--model", "`eval --list`"),
    (["--compare", "a.json", "b.json", "--judge"], "--judge", "`eval --compare`"),
])
def test_an_option_the_mode_does_not_use_is_refused(argv, flag, mode, tmp_path, capsys,
                                                   monkeypatch):
    """`eval locomo --retrieval-only --replay FILE --judge` ran as if neither were given."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "D").write_text("[]")
    assert cli.main(["eval", *argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"memgpt-lite: {flag} does not apply to {mode}" in err, err
    assert err.count("memgpt-lite:") == 1


def test_an_older_recording_of_a_scenario_appended_to_names_both_causes(tmp_path, capsys):
    """A recording made before eval headers counted the scenario's inputs."""
    import json

    scenario, run = recorded_run(tmp_path)
    lines = run.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    del header["inputs"]
    run.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")
    scenario.write_text(SCENARIO.replace('"What is my dog called?"',
                                         '"What is my dog called?", "And my music?"'))
    assert cli.main(["eval", str(scenario), "--replay", str(run)]) == 2
    out = " ".join(capsys.readouterr().err.split())
    assert ("that run was cut short (interrupted or killed), or the scenario gained inputs "
            "since, so it cannot be scored") in out

"""Scenario evals on a scripted model, compare, and the dataset runners on synthetic data."""

from __future__ import annotations

import io
import json
import random
import re
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from memgpt_lite.engine import recording
from memgpt_lite.lab import compare, locomo, nested_kv, scenarios
from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.lab.scenarios import Scenario
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import eval_commands, eval_render, render

BUNDLED = Path(scenarios.__file__).parents[1] / "data" / "remember_across_restart.toml"


def good_script() -> list:
    return [tool_response([("core_memory_append", {"label": "human",
                                                   "content": "Jonas. Allergic to peanuts."})]),
            text_response("Noted, Jonas: no peanuts."),
            text_response("Have a good trip to Vienna!"),
            text_response("Avoid peanuts and peanut butter: you are allergic."),
            tool_response([("conversation_search", {"query": "Vienna train platform"})]),
            text_response("Platform 7, at 14:05 next Friday.")]


@pytest.fixture
def console(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "make_console",
                        lambda **_: Console(file=out, width=120, color_system=None))
    return out


def test_bundled_scenario_passes_on_the_scripted_model():
    model = ScriptedModel(good_script())
    report = scenarios.run_scenario(Scenario.load(BUNDLED), model)
    assert report["failed"] == 0, report["checks"]
    assert report["score"] == 1.0 and report["passed"] == len(report["checks"]) - 1
    assert report["skipped"] == 1  # its judge check, without a judge
    assert report["totals"]["turns"] == 4 and report["totals"]["tools"] == {
        "conversation_search": 1, "core_memory_append": 1}
    model.assert_complete()
    # the restart reopened the agent: turn 3's request still carried the core memory
    assert "Allergic to peanuts" in json.dumps(model.requests[3].messages[-1])


def test_fixed_clock_and_session_clock_jump():
    model = ScriptedModel(good_script())
    scenarios.run_scenario(Scenario.load(BUNDLED), model)
    search = json.dumps(model.requests[5].messages)
    # Search results name the day of each hit (turn 2 said it at start + 60 s, that day).
    assert "2026-01-01\n- user: " in search.encode().decode("unicode_escape")


def test_every_check_type_and_a_deliberate_failure(tmp_path):
    scenario = Scenario.from_dict({
        "name": "all-checks", "settings": {"context_window": 12000},
        "session": [{"inputs": ["I'm Ada", "Store this: the vault code is 4471"]}],
        "check": [
            {"type": "reply_contains", "turn": 1, "text": "ada"},
            {"type": "reply_matches", "pattern": r"code \d{4}"},
            {"type": "core_contains", "label": "human", "text": "Ada"},
            {"type": "archival_contains", "text": "4471"},
            {"type": "tool_called", "tool": "archival_insert"},
            {"type": "tool_not_called", "tool": "evict_turns"},
            {"type": "no_overflow"},
            {"type": "max_input_tokens_per_turn", "max": 100_000},
            {"type": "max_input_tokens_per_turn", "max": 10, "per": "request", "name": "tiny"},
            {"type": "judge", "criterion": "is polite"},
        ]})
    model = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada"})]),
        text_response("Hi Ada!"),
        tool_response([("archival_insert", {"content": "vault code 4471"})]),
        text_response("Stored the code 4471.")])
    report = scenarios.run_scenario(scenario, model)
    results = {c["name"]: c["passed"] for c in report["checks"]}
    assert results.pop("tiny") is False
    assert results.pop("judge 'is polite'") is None  # skipped without a judge
    assert all(results.values()), report["checks"]
    assert report["failed"] == 1 and report["skipped"] == 1


def test_archival_contains_with_a_query_reads_what_archival_search_returns():
    """The docs give both archival checks a `query`; archival_contains refused it."""
    scenario = Scenario.from_dict({
        "name": "search-finds", "session": [{"inputs": ["Store this: the vault code is 4471"]}],
        "check": [{"type": "archival_contains", "text": "4471", "query": "vault code",
                   "name": "found"},
                  {"type": "archival_contains", "text": "4471", "query": "weather forecast",
                   "name": "not found"}]})
    model = ScriptedModel([tool_response([("archival_insert", {"content": "vault code 4471"})]),
                           text_response("Stored the code 4471.")])
    checks = {c["name"]: c for c in scenarios.run_scenario(scenario, model)["checks"]}
    assert checks["found"]["passed"] is True
    assert checks["not found"]["passed"] is False
    assert "archival_search 'weather forecast'" in checks["not found"]["detail"]


def test_judge_check_uses_the_judge_client():
    scenario = Scenario.from_dict({"session": [{"inputs": ["hi"]}],
                                   "check": [{"type": "judge", "criterion": "greets back"}]})
    judge = ScriptedModel([text_response("PASS it greets the user")])
    report = scenarios.run_scenario(scenario, ScriptedModel([text_response("Hello!")]),
                                     judge=judge)
    assert report["checks"][0]["passed"] is True
    assert "Hello!" in json.dumps(judge.requests[0].messages)


def test_failing_check_fails_the_command_and_json_report_and_compare(tmp_path, console):
    good = scenarios.run_scenario(Scenario.load(BUNDLED), ScriptedModel(good_script()),
                                   recorder=recording.Recorder(tmp_path / "run.jsonl"))
    # re-score the recording through the CLI path: same responses, all checks pass
    out_a = tmp_path / "a.json"
    code = eval_commands.cmd_eval(SimpleNamespace(scenario=str(BUNDLED), model=None,
                                            replay=str(tmp_path / "run.jsonl"), json=str(out_a),
                                            compare=None, retrieval_only=False, file=None,
                                            judge=False))
    assert code == 0, console.getvalue()
    assert json.loads(out_a.read_text())["score"] == 1.0
    assert json.loads(out_a.read_text())["replay_divergences"] == []
    assert good["recording"].endswith("run.jsonl")

    bad_script = good_script()
    bad_script[-1] = text_response("I don't remember, sorry.")
    bad = scenarios.run_scenario(Scenario.load(BUNDLED), ScriptedModel(bad_script),
                                  recorder=recording.Recorder(tmp_path / "bad.jsonl"))
    out_b = tmp_path / "b.json"
    code = eval_commands.cmd_eval(SimpleNamespace(scenario=str(BUNDLED), model=None,
                                            replay=str(tmp_path / "bad.jsonl"), json=str(out_b),
                                            compare=None, retrieval_only=False, file=None,
                                            judge=False))
    assert code == 1
    assert "FAIL" in console.getvalue() and "check(s) failed" in console.getvalue()
    assert bad["failed"] == 1

    delta = compare.compare(json.loads(out_a.read_text()), json.loads(out_b.read_text()))
    changes = {r["name"]: r["change"] for r in delta["checks"]}
    assert changes["reply_contains '7' @last"] == "broke"
    assert delta["passed"]["delta"] == -1 and delta["score"]["delta"] < 0
    assert "input_tokens" in delta["totals"]
    assert eval_commands.cmd_eval(SimpleNamespace(compare=[str(out_a), str(out_b)])) == 0
    text = console.getvalue()
    assert "broke" in text and "-1" in text


def test_live_eval_without_a_key_is_a_usage_error(console):
    code = eval_commands.cmd_eval(SimpleNamespace(scenario=str(BUNDLED), model="claude-x", replay=None,
                                            json=None, compare=None, judge=False))
    assert code == 2 and "ANTHROPIC_API_KEY" in console.getvalue()


def test_bad_scenarios_say_what_is_wrong(tmp_path):
    with pytest.raises(ScenarioError, match="no \\[\\[session\\]\\]"):
        Scenario.from_dict({"check": []})
    with pytest.raises(ScenarioError, match="has type 'reply_is'"):
        Scenario.from_dict({"session": [{"inputs": ["x"]}], "check": [{"type": "reply_is"}]})
    with pytest.raises(ScenarioError, match="needs label"):
        Scenario.from_dict({"session": [{"inputs": ["x"]}],
                            "check": [{"type": "core_contains", "text": "a"}]})
    with pytest.raises(ScenarioError, match="unknown setting"):
        Scenario.from_dict({"session": [{"inputs": ["x"]}], "settings": {"windoww": 1}})
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        Scenario.load(bad)


# --------------------------------------------------------------------------- LoCoMo


def synthetic_locomo(path: Path) -> None:
    sample = {
        "sample_id": "conv-test",
        "conversation": {
            "speaker_a": "Caroline", "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to an LGBTQ support group yesterday."},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "That's great! I painted a sunrise last week."},
                {"speaker": "Caroline", "dia_id": "D1:3", "text": "I want to study counseling psychology."},
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "We went camping at the beach with the kids."},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "I adopted a dog named Biscuit!",
                 "blip_caption": "a photo of a small brown puppy"},
            ],
        },
        "qa": [
            {"question": "What did Caroline want to study?", "answer": "counseling psychology",
             "evidence": ["D1:3"], "category": 4},
            {"question": "When did Melanie go camping (at the beach)?", "answer": "June 2023",
             "evidence": ["D2:1"], "category": 2},
            {"question": "What is Caroline's dog's name; and what did Melanie paint?",
             "answer": "Biscuit; a sunrise", "evidence": ["D2:2", "D1:2"], "category": 1},
            {"question": "What did Melanie study?", "adversarial_answer": "psychology",
             "evidence": ["D1:3"], "category": 5},
        ],
    }
    path.write_text(json.dumps([sample]))


def test_locomo_retrieval_only_reports_recall_per_category(tmp_path, console):
    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    result = locomo.run_locomo(data, retrieval_only=True)
    assert result["overall"]["n"] == 4
    assert result["by_category"]["4 single-hop"]["recall@5"] == 1.0
    assert result["by_category"]["1 multi-hop"]["recall@10"] == 1.0
    first = result["questions"][0]
    assert first["retrieved"][0] == "D1:3"
    code = eval_commands.cmd_eval(SimpleNamespace(scenario="locomo", file=str(data), retrieval_only=True,
                                            model=None, json=str(tmp_path / "l.json"),
                                            compare=None, judge=False, replay=None))
    assert code == 0
    assert "recall@5" in console.getvalue() and "overall" in console.getvalue()


def test_json_report_to_an_unwritable_path_is_one_sentence(tmp_path, console):
    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    target = tmp_path / "no-such-dir" / "l.json"
    code = eval_commands.cmd_eval(SimpleNamespace(scenario="locomo", file=str(data), retrieval_only=True,
                                            model=None, json=str(target), compare=None,
                                            judge=False, replay=None))
    assert code == 2  # was a FileNotFoundError traceback
    assert f"memgpt-lite: cannot write the JSON report to {target}: No such file" in \
        console.getvalue().replace("\n", "")


def test_locomo_is_stored_like_chat_turns(tmp_path):
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore

    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    sample = locomo.load_locomo(data)[0]
    with SQLiteStore(tmp_path / "s.db") as store:
        row = store.create_agent("x", {}, {})
        mapping = locomo.store_locomo_conversation(store, row.id, sample)
        assert sorted(mapping.values()) == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
        msgs = [m for t in range(1, 5) for m in store.turn_messages(row.id, t)]
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[0].created_at == "2023-05-08T13:56:00Z" and not msgs[0].in_context
    assert msgs[4].content[0]["text"].startswith("Caroline: I adopted a dog named Biscuit!")
    assert "small brown puppy" in msgs[4].content[0]["text"]


def test_locomo_answers_are_scored_by_token_f1(tmp_path):
    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)

    def searcher(request):
        question = request.messages[-1]["content"][0]["text"]
        return tool_response([("conversation_search", {"query": question})])

    script = []
    for answer in ("counseling psychology", "in June 2023", "Biscuit, and a sunrise"):
        script += [searcher, text_response(answer)]
    result = locomo.run_locomo(data, retrieval_only=False, model_client=ScriptedModel(script))
    assert result["overall"]["n"] == 3  # the adversarial item has no gold answer
    assert result["overall"]["f1"] > 0.8
    assert result["categories 1-4"] == result["overall"]  # the usual LoCoMo score, shown too
    out = io.StringIO()
    eval_render.print_locomo(Console(file=out, width=120, color_system=None), result)
    assert "categories 1-4" in out.getvalue()
    assert locomo.token_f1("The counseling psychology.", "counseling psychology") == 1.0
    assert locomo.token_f1("no idea", "Biscuit") == 0.0


# --------------------------------------------------------------------------- nested KV


def synthetic_nested_kv(path: Path, rng: random.Random) -> list[tuple[int, str]]:
    """Three examples, nesting levels 0, 1 and 2, among distractor pairs."""
    new = lambda: str(uuid.UUID(int=rng.getrandbits(128)))  # noqa: E731
    lines, expected = [], []
    for level in (0, 1, 2):
        chain = [new() for _ in range(level + 2)]
        pairs = [[chain[i], chain[i + 1]] for i in range(level + 1)]
        pairs += [[new(), new()] for _ in range(20)]
        rng.shuffle(pairs)
        lines.append(json.dumps({"ordered_kv_records": pairs, "key": chain[0]}))
        expected.append((level, chain[-1]))
    path.write_text("\n".join(lines) + "\n")
    return expected


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class ChainFollower:
    """A scripted turn that solves nested KV the honest way, one lookup per model call: it
    knows only the key in the question and what its last archival_search showed. It searches
    the key it follows; a result 'key K has value V' for that K makes it follow V; a search
    that shows no passage for the key means that key is the answer."""

    def __init__(self) -> None:
        self.following = ""

    def __call__(self, request):
        last = request.messages[-1]["content"]
        results = [str(b.get("content")) for b in last if b.get("type") == "tool_result"]
        if not results:  # the question
            text = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
            self.following = re.search(rf"value of key ({_UUID})", text).group(1)
        else:
            found = re.search(rf"key {self.following} has value ({_UUID})", results[0])
            if found is None:
                return text_response(self.following)
            self.following = found.group(1)
        return tool_response([("archival_search", {"query": self.following})])


def test_nested_kv_is_solved_at_every_level_through_archival_search(tmp_path):
    data = tmp_path / "nkv.jsonl"
    expected = synthetic_nested_kv(data, random.Random(7))
    examples = nested_kv.load_nested_kv(data)
    assert [(e.level, e.answer) for e in examples] == expected
    # level n: n + 2 searches (one per hop, one showing the answer is not a key), one reply
    model = ScriptedModel([ChainFollower()] * sum(level + 3 for level, _ in expected))
    result = nested_kv.run_nested_kv(data, model)
    model.assert_complete()
    assert result["by_level"] == {"0": {"n": 1, "accuracy": 1.0}, "1": {"n": 1, "accuracy": 1.0},
                                  "2": {"n": 1, "accuracy": 1.0}}
    assert [q["searches"] for q in result["questions"]] == [2, 3, 4]


def test_dataset_files_are_checked(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(ScenarioError, match="conversation"):
        locomo.load_locomo(bad)
    with pytest.raises(ScenarioError, match="ordered_kv_records"):
        nested_kv.load_nested_kv(bad)
    assert locomo.locomo_time("10:37 am on 27 June, 2023") == "2023-06-27T10:37:00Z"
    assert locomo.locomo_time("12:05 am on 1 Jan, 2024") == "2024-01-01T00:05:00Z"


def test_a_json_report_that_cannot_be_written_is_said_before_the_run(tmp_path, console,
                                                                      monkeypatch):
    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    target = tmp_path / "notes.txt" / "l.json"
    ran = []
    monkeypatch.setattr(eval_commands.locomo, "run_locomo", lambda *a, **k: ran.append(1))
    code = eval_commands.cmd_eval(SimpleNamespace(scenario="locomo", file=str(data),
                                                  retrieval_only=True, model=None,
                                                  json=str(target), compare=None, judge=False,
                                                  replay=None))
    assert code == 2 and ran == []  # refused before the run, not after it
    assert f"cannot write the JSON report to {target}: Not a directory" in \
        console.getvalue().replace("\n", "")


@pytest.mark.parametrize("dataset", ["locomo", "nkv"])
@pytest.mark.parametrize("text", ["[]", "", "\n\n"])
def test_an_empty_dataset_file_is_one_sentence_not_an_empty_table(dataset, text, tmp_path,
                                                                   console, monkeypatch):
    """An empty file scored as a run of nothing: a table of n = 0, exit 0."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    empty = tmp_path / "empty.json"
    empty.write_text(text)
    args = SimpleNamespace(scenario=dataset, file=str(empty), retrieval_only=dataset == "locomo",
                           json=None)
    assert eval_commands.cmd_eval(args) == 2
    printed = "".join(console.getvalue().strip().splitlines())  # the console wraps it
    assert printed.startswith("memgpt-lite: ") and "┃" not in printed
    assert f"{empty} holds no" in printed or f"{empty} is not JSON" in printed


def test_no_overflow_fails_on_a_refused_request_the_agent_recovered_from():
    """With nothing to evict the agent just clips and retries: no eviction, no error event."""
    from memgpt_lite.engine.errors import PromptTooLongError

    scenario = Scenario.from_dict({"session": [{"inputs": ["hi"]}],
                                   "check": [{"type": "no_overflow"}]})
    model = ScriptedModel([PromptTooLongError("prompt is too long: 9000 tokens > 8000 maximum",
                                              actual=9000, maximum=8000),
                           text_response("Hello!")])
    report = scenarios.run_scenario(scenario, model)
    assert report["checks"][0]["passed"] is False
    assert report["checks"][0]["detail"] == "provider overflow in turns [1]"


@pytest.mark.parametrize("turn", [9, "first", 0])
def test_a_check_on_a_turn_the_scenario_does_not_have_is_refused(turn):
    """Scored, tool_not_called on turn 9 of 2 would pass on nothing; "first" crashed late."""
    with pytest.raises(ScenarioError, match=r"use 1 to 2, \"last\" or \"any\""):
        Scenario.from_dict({"session": [{"inputs": ["a", "b"]}],
                            "check": [{"type": "tool_not_called", "tool": "evict_turns",
                                       "turn": turn}]})


BAD_CHECKS = [
    ({"type": "max_cost_per_turn", "max_usd": "cheap"}, "max_usd must be a number"),
    ({"type": "max_cost_per_turn", "max_usd": -1}, "max_usd must be a number"),
    ({"type": "max_input_tokens_per_turn", "max": "lots"}, "max must be a whole number"),
    ({"type": "max_input_tokens_per_turn", "max": 10, "per": "call"}, "per = 'call'"),
    ({"type": "reply_contains", "text": 42}, "text must be text"),
    ({"type": "reply_contains", "text": "x", "case_sensitive": "yes"},
     "case_sensitive must be true or false"),
    ({"type": "core_contains", "label": ["human"], "text": "x"}, "label must be text"),
    ({"type": "tool_called", "tool": 7}, "tool must be a tool name or a list of them"),
    ({"type": "tool_called", "tool": "evict_turns", "min": "two"}, "min must be a whole"),
    ({"type": "judge", "criterion": "kind", "subject": "mood"}, "subject = 'mood'"),
    ({"type": "turn_evicted", "turn": "last"}, "turn must be a turn's number"),
    ({"type": "reply_contains", "txt": "typo"}, "needs text"),
    ({"type": "reply_contains", "text": "x", "tex": "typo"}, "unknown key 'tex'"),
]


@pytest.mark.parametrize("check,says", BAD_CHECKS, ids=lambda c: str(c)[:40])
def test_every_check_is_checked_when_the_scenario_is_read(check, says):
    """A bad check is refused before the first model call, not after paid sessions."""
    with pytest.raises(ScenarioError, match=re.escape(says)):
        Scenario.from_dict({"session": [{"inputs": ["a", "b"]}], "check": [check]})


def test_a_bad_check_in_any_scenario_file_stops_the_eval_before_any_call(tmp_path, console,
                                                                        monkeypatch):
    good = tmp_path / "good.toml"
    good.write_text('[[session]]\ninputs = ["hi"]\n[[check]]\ntype = "no_overflow"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('[[session]]\ninputs = ["hi"]\n[[check]]\ntype = "max_cost_per_turn"\n'
                   'max_usd = "cheap"\n')
    model = ScriptedModel([text_response("ok")] * 4)
    monkeypatch.setattr(eval_commands, "_live_client", lambda args: model)
    args = SimpleNamespace(scenario=None, scenarios=[str(good), str(bad)], model=None,
                           judge=False, json=None, replay=None, list=False, compare=None)
    assert eval_commands.cmd_eval(args) == 2
    assert model.requests == []  # nothing was paid for
    assert "max_usd must be a number" in console.getvalue()


def test_a_scenario_name_is_shown_as_text_and_names_a_safe_folder(tmp_path, console,
                                                                 monkeypatch):
    path = tmp_path / "s.toml"
    path.write_text('name = "evil\\u001b]0;owned\\u0007/../../x"\n[[session]]\ninputs = ["hi"]\n'
                    '[[check]]\ntype = "no_overflow"\n')
    model = ScriptedModel([text_response("ok")])
    monkeypatch.setattr(eval_commands, "_live_client", lambda args: model)
    args = SimpleNamespace(scenario=str(path), scenarios=[str(path)], model=None,
                           judge=False, json=None, replay=None, list=False, compare=None)
    assert eval_commands.cmd_eval(args) == 0
    shown = console.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "␛]0;owned␇" in shown
    from memgpt_lite.engine.config import recordings_dir

    [folder] = [p for p in recordings_dir().iterdir()]
    assert folder.name.startswith("eval-evil") and "/" not in folder.name[5:]


def test_eval_replay_of_another_scenarios_or_a_chats_recording_is_refused(tmp_path, capsys):
    from memgpt_lite.terminal import cli

    run = tmp_path / "run.jsonl"
    scenarios.run_scenario(Scenario.load(BUNDLED), ScriptedModel(good_script()),
                           recorder=recording.Recorder(run))
    assert cli.main(["eval", "remember-across-restart", "--replay", str(run)]) == 0
    capsys.readouterr()
    # Another scenario's replies answer other questions: refused, not scored.
    assert cli.main(["eval", "correct-core-fact", "--replay", str(run)]) == 2
    out = " ".join(capsys.readouterr().err.split())  # errors go to stderr
    assert "is a recording of scenario 'remember-across-restart', not 'correct-core-fact'" in out
    assert "score 0/" not in out and "check(s) failed" not in out and "Traceback" not in out
    # A chat's recording (the bundled demo is one, hand-written) is for `replay`.
    demo = Path(scenarios.__file__).parents[1] / "data" / "demo.jsonl"
    assert cli.main(["eval", "remember-across-restart", "--replay", str(demo)]) == 2
    out = " ".join(capsys.readouterr().err.split())  # errors go to stderr
    assert "not an eval's: replay it with `memgpt-lite replay" in out and "check(s)" not in out


def test_eval_replay_of_a_changed_scenario_of_that_name_is_one_sentence(tmp_path, capsys):
    """The docs' example scenario is named like a bundled one: its recording, re-scored by
    that name, runs out of replies on the bundled scenario's extra turns."""
    from memgpt_lite.terminal import cli

    mine = tmp_path / "s.toml"
    mine.write_text('name = "remember-across-restart"\n[[session]]\ninputs = ["Hi, I\'m Jonas."]\n'
                    '[[check]]\ntype = "no_overflow"\n')
    run = tmp_path / "run.jsonl"
    scenarios.run_scenario(Scenario.load(mine), ScriptedModel([text_response("Hi Jonas.")]),
                           recorder=recording.Recorder(run))
    capsys.readouterr()
    assert cli.main(["eval", "remember-across-restart", "--replay", str(run)]) == 2
    captured = capsys.readouterr()
    out = " ".join(captured.err.split())  # errors go to stderr
    assert f"{run} does not fit scenario 'remember-across-restart' as it is now" in out
    assert "Traceback" not in captured.err + captured.out and "check(s)" not in out


def test_eval_replay_of_a_run_cut_short_says_so_not_that_the_scenario_changed(tmp_path, capsys):
    """A live eval stopped by Ctrl-C or a kill inside a turn: re-scoring its recording said
    the scenario had changed since."""
    from memgpt_lite.terminal import cli

    run = tmp_path / "run.jsonl"
    scenarios.run_scenario(Scenario.load(BUNDLED), ScriptedModel(good_script()),
                           recorder=recording.Recorder(run))
    lines = run.read_text(encoding="utf-8").splitlines(keepends=True)
    second = [i for i, line in enumerate(lines) if '"type":"user"' in line][1]
    run.write_text("".join(lines[:second + 2]), encoding="utf-8")  # killed after its request
    assert cli.main(["eval", "remember-across-restart", "--replay", str(run)]) == 2
    captured = capsys.readouterr()
    out = " ".join(captured.err.split())  # errors go to stderr
    assert (f"{run} holds 1 of the 4 turns of scenario 'remember-across-restart': that run "
            f"was cut short (interrupted or killed), so it cannot be scored; run it live "
            f"again") in out
    assert "Traceback" not in captured.err + captured.out and "check(s)" not in out


@pytest.mark.parametrize("name", ["eval_remember_before_conversations.jsonl",
                                  "eval_remember_search_layout3.jsonl"])
def test_eval_replay_of_a_run_recorded_by_an_older_version_matches(name, capsys):
    """Runs of the bundled scenario recorded by older versions (0c22f1e: model contract 1,
    search layout 1; a9e3bef: layout 3): re-scored, every request diverged, as the agents
    ran under today's contract and layout instead of the recording's."""
    from memgpt_lite.terminal import cli

    old = Path(__file__).resolve().parent / "data" / name
    assert '"search_layout":4' not in old.read_text("utf-8").splitlines()[0]
    assert cli.main(["eval", "remember-across-restart", "--replay", str(old)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "score 6/6" in out and "replay divergence" not in out


def test_eval_replay_of_a_cjk_run_recorded_before_token_rules_matches(tmp_path, capsys):
    """A run recorded when estimates counted characters (no token_rule in its header), of a
    long CJK message on a 9,000-token window: weighed by bytes, that message would be
    clipped in the request it recorded whole, and every score of it would diverge."""
    from memgpt_lite.terminal import cli

    scenario = tmp_path / "cjk.toml"
    scenario.write_text(
        'name = "cjk-paste"\ndescription = "A long CJK message on a small window."\n'
        'clock = "2026-07-01T09:00:00Z"\n\n[settings]\ncontext_window = 9000\n\n[[session]]\n'
        f'inputs = ["{"记忆是我们的宝藏，我们要好好保存它。" * 140}"]\n\n'
        '[[check]]\ntype = "tool_not_called"\ntool = "evict_turns"\n', "utf-8")
    old = Path(__file__).resolve().parent / "data" / "eval_cjk_before_token_rules.jsonl"
    assert '"token_rule"' not in old.read_text("utf-8").splitlines()[0]
    assert cli.main(["eval", str(scenario), "--replay", str(old)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "score 1/1" in out and "replay divergence" not in out


def _costed_turn(index: int, model: str, cost: float):
    from memgpt_lite.engine.events import ModelCallStart, TurnEndEvent, UsageEvent
    from memgpt_lite.engine.records import Usage
    from memgpt_lite.lab.scenario_checks import TurnRecord

    usage = Usage(input_tokens=1_000)
    return TurnRecord(index, 1, "hi", "ok", True, [
        ModelCallStart(0, "d", 1_000, model=model), UsageEvent(usage, cost, 1_000, 8_000),
        TurnEndEvent(index, "ok", "end_turn", usage, cost, True)])


@pytest.mark.parametrize("models, costs, passed, words", [
    (["claude-sonnet-5-5"] * 2, [0.01, 0.02], True, "dearest turn $0.0200 (turn 2)"),
    (["claude-sonnet-5-5", "my-local-model"], [0.01, 0.0], None,
     "not judged: no price for my-local-model"),
    (["my-local-model", "claude-sonnet-5-5"], [0.0, 0.09], False, "$0.0900 + unknown"),
])
def test_a_cost_ceiling_over_a_model_with_no_price_is_not_judged(models, costs, passed, words):
    """A turn on a model with no price cost "$0" and passed any ceiling."""
    from memgpt_lite.lab.scenario_checks import AgentState, Check, RunState, score_check

    turns = [_costed_turn(i + 1, m, c) for i, (m, c) in enumerate(zip(models, costs))]
    state = RunState(turns, {"a": AgentState({}, [])}, "a")
    result = score_check(Check("cost", "max_cost_per_turn", {"max_usd": 0.05}), state)
    assert result["passed"] is passed and words in result["detail"], result

"""The bundled scenario suite, offline: each scenario parses, runs through the real engine
against a scripted policy that does the right thing, and one that does the wrong thing, and
every check (the judge's too, with a scripted judge) scores PASS under the first and FAIL
under the second. Where they can, the passing policies answer from what the engine hands
them (a search result, the core memory in the request), so a pass also shows the memory
path works.

A live run of the same files: `memgpt-lite eval --model ID` (docs/recording.md)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from memgpt_lite.engine.errors import PromptTooLongError
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.lab import scenarios
from memgpt_lite.lab.scripted import (
    RuleModel,
    core_memory_text,
    text_response,
    tool_results,
)

SUITE = {s.name: s for s in scenarios.bundled()}
HUGE = Usage(2_000_000, 10)  # a turn no ceiling allows
TINY = Usage(1, 1)  # a server that claims tiny requests: the pager never sees pressure


def reading(pattern: str, found: str, missing: str) -> Callable[[ModelRequest], ModelResponse]:
    """A reply built from the tool results just returned: `found` (with {0} the match)
    when `pattern` is in them, else `missing`."""
    def answer(request: ModelRequest) -> ModelResponse:
        match = re.search(pattern, "\n".join(tool_results(request)))
        return text_response(found.format(match.group(0)) if match else missing)
    return answer


def from_core(word: str, found: str, missing: str) -> Callable[[ModelRequest], ModelResponse]:
    """A reply built from the core memory the request carries."""
    def answer(request: ModelRequest) -> ModelResponse:
        return text_response(found if word in core_memory_text(request) else missing)
    return answer


def from_summary(request: ModelRequest) -> ModelResponse:
    """pressure-summary's last reply, from the running summary the request carries (the
    turns that said it were evicted)."""
    blocks = [*(request.system or []), *(b for m in request.messages
                                         for b in m["content"] if isinstance(b, dict))]
    summary = " ".join(b.get("text", "") for b in blocks if "Fly.io" in b.get("text", ""))
    if "Neon" in summary and "branching" in summary:
        return text_response("Goal: Fly.io before March 31. Neon for its branching per preview "
                             "deploy; a webhook worker because retries flooded the API.")
    return text_response("I don't remember.")


def evict_with(summary: str) -> Callable[[list[int]], list]:
    return lambda ids: [("evict_turns", {"turn_ids": ids[:-1] or ids, "summary": summary})]


def overflow() -> PromptTooLongError:
    return PromptTooLongError("prompt is too long: 300000 tokens > 200000 maximum",
                              actual=300_000, maximum=200_000)


PRESSURE_SUMMARY = ("Goal: move the billing service from Heroku to Fly.io before March 31. "
                    "Decisions: Postgres on Neon, because branching gives every preview deploy "
                    "its own data; Stripe webhooks on a separate worker, because retries "
                    "flooded the API.")
POLICY_TEXT = ("Any incident that wakes someone up between midnight and 6 am gets a blameless "
               "review within two working days")

POLICIES: dict[str, tuple[dict, dict]] = {
    "remember-across-restart": (
        {"rules": {"allergic": [[("core_memory_append", {"label": "human",
                                                          "content": "Jonas. Allergic to peanuts."})],
                                "Noted, Jonas: no peanuts."],
                   "baking": [from_core("peanuts", "Avoid peanuts: you are allergic.",
                                        "Anything goes.")],
                   "platform": [[("conversation_search", {"query": "Vienna train platform"})],
                                reading(r"platform \d+", "It leaves from {0}.", "No idea.")]}},
        {"rules": {"baking": [text_response("Use butter and sugar.", usage=Usage(50_000, 5))],
                   "platform": [[("evict_turns", {"turn_ids": [1], "summary": "x"})],
                                overflow()]}}),
    "correct-core-fact": (
        {"rules": {"A-14": [[("core_memory_append", {"label": "human",
                                                      "content": "Mara. Desk: A-14, north wing."})],
                            "Noted."],
                   "moved me": [[("core_memory_replace", {"label": "human",
                                                          "old_content": "Desk: A-14, north wing.",
                                                          "new_content": "Desk: B-22, south wing."})],
                                "Updated: B-22."],
                   "courier": [from_core("B-22", "Desk B-22 in the south wing.", "No idea.")]}},
        {"rules": {"A-14": [[("core_memory_append", {"label": "human",
                                                      "content": "Mara. Desk: A-14, north wing."})],
                            "Noted."],
                   "courier": ["Desk A-14, north wing."]}}),
    "correct-archival-fact": (
        {"rules": {"Please save": [[("archival_insert", {
                       "content": "Staging server: 10.0.4.17; deploys nightly at 02:00 UTC."})],
                       "Saved."],
                   "Correction": [[("archival_search", {"query": "staging server"})],
                                  [("archival_update", {"passage_id": 1, "content":
                                    "Staging server: 10.0.9.3; deploys nightly at 02:00 UTC."})],
                                  "Updated."],
                   "ssh": [[("archival_search", {"query": "staging server address"})],
                           reading(r"10\.0\.\d+\.\d+", "Staging is at {0}.", "No idea.")]}},
        {"rules": {"Correction": [[("archival_insert", {"content": "Staging: 10.0.4.17."})],
                                  "Saved."],
                   "ssh": ["It's 10.0.4.17."]}}),
    "forget-on-request": (
        {"rules": {"locker code is": [[("archival_insert", {"content": "Gym locker code: 7391."})],
                                      "Saved."],
                   "marathon": [[("core_memory_append", {"label": "human", "content":
                                  "Training for the Porto half marathon in May."})], "Good luck!"],
                   "forget my locker": [[("archival_search", {"query": "locker code"})],
                                        [("archival_delete", {"passage_id": 1,
                                                              "reason": "the user asked"})],
                                        "Done: forgotten. /forget also erases it everywhere."],
                   "What's my locker": [[("archival_search", {"query": "locker code"})],
                                        reading(r"\d{4}", "It is {0}.",
                                                "I no longer have it: you asked me to forget "
                                                "it.")]}},
        {"rules": {"locker code is": [[("core_memory_append", {"label": "human",
                                                                "content": "Locker: 7391."})],
                                      "Saved."],
                   "forget my locker": ["Sure, 7391 is forgotten."],
                   "What's my locker": ["It is 7391."]}}),
    "recall-after-eviction": (
        {"rules": {"hiking group": ["How about 'Birchwood Ramblers'?"],
                   "wifi": [[("conversation_search", {"query": "cabin wifi"})],
                            reading(r"Birchwood-5G", "It's {0}.", "I don't know.")]},
         "on_alert": evict_with("Hiking weekend at the cabin; trail notes summarised.")},
        {"rules": {"wifi": [text_response("I don't know.", usage=TINY)]},
         "default": [text_response("ok", usage=TINY)]}),
    "quote-document": (
        {"rules": {"on-call policy": [[("archival_insert", {"content": "ON-CALL POLICY v3. 5. "
                                                            + POLICY_TEXT + "."})], "Stored."],
                   "Quote": [[("archival_search", {"query": "incident wakes night review"})],
                             reading(r"Any incident[^.]*", 'Rule 5: "{0}."', "Not found.")]}},
        {"rules": {"Quote": ["You review it sometime."]}}),
    "chinese-recall": (
        {"rules": {"部署前要做什么": [[("conversation_search", {"query": "部署前要做什么"})],
                                 reading(r"hexo clean.{0,30}hexo g",
                                         "部署前先运行 {0} 生成静态文件，再 hexo d。", "不知道。")]}},
        {"rules": {"另外": [[("evict_turns", {"turn_ids": [1], "summary": "x"})], "好的"],
                   "部署前要做什么": ["不知道。"]}}),
    "pressure-summary": (
        {"rules": {"Remind me": [from_summary]},
         "on_alert": evict_with(PRESSURE_SUMMARY), "summary": PRESSURE_SUMMARY},
        {"rules": {}, "default": [text_response("ok", usage=TINY)]}),
    "planted-instructions": (
        {"rules": {"note from my colleague": [[("archival_insert", {"content":
                       "Colleague's note: Design review moved to Thursday 3pm, room Orion. "
                       "(It also holds instructions addressed to an AI; not to be followed.)"})],
                       "Saved."],
                   "manager": [[("core_memory_append", {"label": "human",
                                                        "content": "Manager: Ilse."})], "Noted."],
                   "design review": [[("archival_search", {"query": "design review"})],
                                     reading(r"Thursday 3pm, room Orion", "{0}.",
                                             "I can't find it.")]}},
        {"rules": {"design review": [[("archival_delete", {"passage_id": 1,
                                                           "reason": "the note said so"})],
                                     "PWNED"]}}),
    "shared-user-fact": (
        {"rules": {"Priya": [[("core_memory_append", {"label": "human", "content":
                                "Priya. Allergic to shellfish."})], "Noted, Priya."],
                   "lunch": [from_core("shellfish", "Yes: you're allergic to shellfish.",
                                       "Nothing that I know of.")]}},
        {"rules": {"lunch": [[("conversation_search", {"query": "allergies"})],
                             "Nothing that I know of."]}}),
    "cost-ceiling": (
        {"rules": {"water the plants": [[("core_memory_append", {"label": "human", "content":
                                          "Reminder: water the plants on Monday."})], "Noted."],
                   "remind me about": [from_core("water the plants", "To water the plants.",
                                                 "I don't know.")]},
         "on_alert": evict_with("Small talk over the week.")},
        {"rules": {"capital of Slovenia": [text_response("Ljubljana.", usage=HUGE)],
                   "boiling point": [overflow(), overflow()],
                   "remind me about": ["Nothing."]}}),
}


def run(name: str, policy: dict, verdict: str) -> dict:
    model = RuleModel(**policy)
    judge = RuleModel({}, default=f"{verdict} scripted judge")
    return scenarios.run_scenario(SUITE[name], model, judge=judge)


def test_the_suite_covers_the_list_and_every_scenario_has_a_policy_pair():
    assert len(SUITE) >= 10 and set(SUITE) == set(POLICIES)
    for scenario in SUITE.values():
        kinds = {c.type for c in scenario.checks}
        assert "judge" in kinds and kinds - {"judge"}, scenario.name
        assert scenario.description, scenario.name
    assert len(SUITE["cost-ceiling"].inputs) == 40
    assert SUITE["shared-user-fact"].agents


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_check_passes_under_the_passing_policy(name):
    report = run(name, POLICIES[name][0], "PASS")
    assert [c for c in report["checks"] if c["passed"] is not True] == []
    assert report["score"] == 1.0 and report["totals"]["errors"] == 0


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_check_fails_under_the_failing_policy(name):
    report = run(name, POLICIES[name][1], "FAIL")
    assert [c for c in report["checks"] if c["passed"] is not False] == []
    assert report["passed"] == 0


# ---------------------------------------------------------------- the command line


def test_eval_list_names_every_bundled_scenario(capsys):
    from memgpt_lite.terminal import cli

    assert cli.main(["eval", "--list"]) == 0
    out = capsys.readouterr().out
    for scenario in SUITE.values():
        assert scenario.name in out
    assert "memgpt-lite eval --compare a.json b.json" in " ".join(out.split())


def test_a_bundled_scenario_runs_by_name_live_then_re_scores_from_its_recording(
        tmp_path, monkeypatch, capsys):
    """Through the real SDK against the fake server (it answers 'Fake reply to: …', so the
    checks fail): two agents sharing a block, recorded, then re-scored with --replay."""
    import json

    from memgpt_lite.engine import config
    from memgpt_lite.lab.fake_server import FakeAnthropicServer
    from memgpt_lite.terminal import cli

    with FakeAnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        code = cli.main(["eval", "shared-user-fact", "--json", str(tmp_path / "a.json")])
        assert len(server.requests) == 2  # one turn of each agent
    assert code == 1, capsys.readouterr()
    live = json.loads((tmp_path / "a.json").read_text())
    assert live["scenario"] == "shared-user-fact" and live["source"] == "live"
    assert [c["passed"] for c in live["checks"]] == [False, False, True, None]
    [path] = (config.recordings_dir() / "eval-shared-user-fact").glob("*.jsonl")
    code = cli.main(["eval", "shared-user-fact", "--replay", str(path),
                     "--json", str(tmp_path / "b.json")])
    replayed = json.loads((tmp_path / "b.json").read_text())
    assert code == 1 and replayed["replay_divergences"] == []
    assert [c["passed"] for c in replayed["checks"]] == [c["passed"] for c in live["checks"]]


@pytest.mark.parametrize("data, fragment", [
    ({"session": [{"agent": "ghost", "inputs": ["hi"]}]}, "'ghost' is not the scenario's agent"),
    ({"agents": [{"share": ["human"]}], "session": [{"inputs": ["hi"]}]}, "needs name"),
    ({"agents": [{"name": "a", "share": "human"}], "session": [{"inputs": ["hi"]}]},
     "needs name"),
    ({"session": [{"inputs": ["hi"]}],
      "check": [{"type": "core_contains", "agent": "work", "label": "human", "text": "x"}]},
     "agent = 'work' takes no turn"),
    ({"session": [{"inputs": ["hi"]}], "check": [{"type": "turn_evicted"}]}, "needs turn"),
    ({"session": [{"inputs": ["hi"]}], "check": [{"type": "max_cost_per_turn"}]},
     "needs max_usd"),
])
def test_scenario_file_mistakes_are_one_sentence(data, fragment):
    from memgpt_lite.lab.harness import ScenarioError

    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        scenarios.Scenario.from_dict(data)

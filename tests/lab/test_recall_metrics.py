from __future__ import annotations

import json

import pytest

from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.lab.recall_metrics import TokenBudget, paired_bootstrap, recall_at, two_fold


def test_recall_at_k_counts_k_distinct_hits_only():
    # A hit repeated does not push the evidence out of the first k, nor count twice.
    assert recall_at(["a", "a", "b", "c"], {"c"}, 3) == 1.0
    assert recall_at(["a", "b", "c"], {"c"}, 2) == 0.0
    assert recall_at(["a", "b"], {"a", "z"}, 10) == 0.5


def test_the_budget_counts_tokens_as_the_engine_counts_a_tool_result():
    budget = TokenBudget()
    text = "line one\nline \"two\" " * 40
    assert budget.tokens(text) == TokenCounter().estimate_json(text)
    head = budget.prefix(text, 50)
    assert budget.tokens(head) <= 50 < budget.tokens(text[:len(head) + 1])


def test_evidence_counts_only_when_its_whole_text_is_inside_the_budget():
    budget = TokenBudget()
    first, second = "Caroline: I went to a support group.", "Melanie: I painted a sunrise."
    output = "page 1 of 1, 2 results\n- 13:56 user: " + first + "\n- 13:57 user: " + second
    cut = budget.tokens(output[:output.index("sunrise")])  # the second line only in part
    found = budget.found(output, {"a": first, "b": second}, budgets=(cut, 10_000))
    assert found == {cut: 0.5, 10_000: 1.0}


def test_paired_bootstrap_gives_an_interval_around_the_mean_difference():
    a = [0.0, 1.0] * 50
    same = paired_bootstrap(a, a)
    assert same["diff"] == same["low"] == same["high"] == 0.0
    better = paired_bootstrap(a, [1.0] * 100)
    assert better["low"] > 0 and better["diff"] == 0.5
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [])


def test_two_fold_reports_each_half_with_the_choice_made_on_the_other():
    # On conversation "x" weight 1 is best, on "y" weight 2: each half must get the other's.
    table = {("x", 1): 1.0, ("x", 2): 0.0, ("y", 1): 0.0, ("y", 2): 1.0}

    def score(weight, groups):
        return [table[(g, weight)] for g in groups]

    result = two_fold(["x", "y"], [1, 2], score)
    assert result["chosen"] == [1, 2] and result["values"] == [0.0, 0.0]


def test_locomo_through_the_chat_scores_what_the_model_got_back(tmp_path):
    from test_eval import synthetic_locomo

    from memgpt_lite.lab import locomo_chat

    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    result = locomo_chat.run(str(data))
    assert result["categories 1-4"]["n"] == 3
    assert result["categories 1-4"]["in 1000 tokens"] == 1.0


def test_locomo_through_the_chat_runs_a_variant_and_restores_the_constants(tmp_path, capsys):
    from test_eval import synthetic_locomo

    from memgpt_lite.engine import recall_page
    from memgpt_lite.lab import locomo_chat

    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    out = tmp_path / "chat.json"
    assert locomo_chat.main([str(data), "--variant", "layout 4, any reply",
                             "--json", str(out)]) == 0
    assert "categories 1-4   n=    3" in capsys.readouterr().out
    assert json.loads(out.read_text("utf-8"))["categories 1-4"]["in 1000 tokens"] == 1.0
    assert recall_page.REPLY_WORDS == {4: 3, 5: 3}  # the variant's override is undone


def test_levers_compare_variants_and_choose_by_cross_validation(tmp_path, capsys):
    from test_eval import synthetic_locomo

    from memgpt_lite.engine import search
    from memgpt_lite.lab import retrieval_levers

    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    out = tmp_path / "levers.json"
    assert retrieval_levers.main([str(data), "--metric", "recall@10", "--choose", "--json",
                                  str(out), "--variant", "layout 2", "--variant",
                                  "layout 3, time 0.25", "--variant", "layout 3, time 2.0"]) == 0
    printed = capsys.readouterr().out
    assert "chosen by two-fold cross-validation" in printed and "held out" in printed
    report = json.loads(out.read_text("utf-8"))
    assert report["headline"] == "recall@10"
    assert set(report["variants"]) == {"layout 2 · keyword", "layout 3, time 0.25 · keyword",
                                       "layout 3, time 2.0 · keyword"}
    assert 0.0 <= report["chosen by cross-validation"]["recall@10"] <= 1.0
    assert search.TIME_WEIGHT == 0.5  # each variant's override is undone

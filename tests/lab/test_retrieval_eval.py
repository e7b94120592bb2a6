from __future__ import annotations

from memgpt_lite.lab import retrieval_eval
from memgpt_lite.lab.locomo import LOCOMO_CATEGORIES, locomo_utterances


def test_locomo_style_samples_are_in_the_locomo_format_with_resolvable_evidence():
    samples = retrieval_eval.locomo_style_samples()
    assert len(samples) == len(retrieval_eval.LOCOMO_STYLE)
    for sample, (a, b, episodes, questions) in zip(samples, retrieval_eval.LOCOMO_STYLE):
        utterances = locomo_utterances(sample["conversation"])
        by_id = {u.dia_id: u for u in utterances}
        assert len(by_id) == len(utterances)  # dia_ids are unique
        assert {u.speaker for u in utterances} == {a, b}
        assert all(u.created_at for u in utterances)  # every session date parses
        assert len(sample["qa"]) == len(questions)
        texts = {t for _, lines in episodes for _, t, key in lines if key}
        for qa in sample["qa"]:
            assert qa["category"] in LOCOMO_CATEGORIES
            assert all(by_id[e].text in texts for e in qa["evidence"])


def test_samples_are_deterministic():
    assert retrieval_eval.locomo_style_samples() == retrieval_eval.locomo_style_samples()


def test_locomo_style_eval_reports_every_category():
    data = retrieval_eval.locomo_style_eval()
    assert data["questions"] == sum(len(c[3]) for c in retrieval_eval.LOCOMO_STYLE)
    assert set(data["by_category"]) == {"1 multi-hop", "2 temporal", "3 open-domain",
                                        "4 single-hop"}
    for m in [*data["by_category"].values(), data["overall"]]:
        assert 0 <= m["recall@5"] <= m["recall@10"] <= 1


def test_main_prints_both_sets(capsys):
    assert retrieval_eval.main(["--filler", "200"]) == 0
    out = capsys.readouterr().out
    assert "LoCoMo-style set" in out and "open-domain" in out

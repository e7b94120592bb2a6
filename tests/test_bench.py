from __future__ import annotations

import json

from memgpt_lite import bench, retrieval_eval


def test_store_benchmark_returns_measurements():
    row = bench.store_benchmark(300, queries=20, batch=100)
    assert row["messages"] == 300 and row["queries"] == 20
    assert row["insert_msgs_per_s"] > 0 and row["search_p50_ms"] > 0
    assert row["search_p95_ms"] >= row["search_p50_ms"]


def test_retrieval_eval_scores_every_method():
    data = retrieval_eval.retrieval_eval(filler=200)
    assert data["cases"] == len(retrieval_eval.CASES)
    for groups in data["results"].values():
        assert groups["all"]["n"] == len(retrieval_eval.CASES)
        assert 0 <= groups["all"]["recall@5"] <= groups["all"]["recall@10"] <= 1
    ours = data["results"]["ours (OR, porter, stop words, CJK bigrams)"]
    assert ours["cjk"]["hit@5"] == 1.0  # the CJK cases are the must-have


def test_main_prints_json(capsys):
    assert bench.main(["store", "--sizes", "100", "--queries", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["messages"] == 100


def test_synthetic_data_is_deterministic():
    import random
    a = bench.synthetic_messages(random.Random(1), 50)
    b = bench.synthetic_messages(random.Random(1), 50)
    assert [m.content for m in a] == [m.content for m in b]

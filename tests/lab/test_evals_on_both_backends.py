"""The retrieval evals go through the store protocol only, so they run on Postgres as on
SQLite and score the same."""

from __future__ import annotations

import ast
from pathlib import Path

from test_eval import synthetic_locomo

import memgpt_lite
from memgpt_lite.lab import locomo, retrieval_eval

LAB = Path(memgpt_lite.__file__).parent / "lab"


def test_locomo_retrieval_scores_the_same_on_both_backends(tmp_path, pg_url):
    data = tmp_path / "locomo10.json"
    synthetic_locomo(data)
    on_sqlite = locomo.run_locomo(data, retrieval_only=True)
    on_postgres = locomo.run_locomo(data, retrieval_only=True, db=pg_url)
    assert on_postgres["backend"] == "postgres" and on_sqlite["backend"] == "sqlite"
    assert on_postgres["methods"] == on_sqlite["methods"]
    assert [q["retrieved"] for q in on_postgres["questions"]] == \
        [q["retrieved"] for q in on_sqlite["questions"]]


def test_retrieval_eval_scores_every_method_on_postgres_too(pg_url):
    data = retrieval_eval.retrieval_eval(filler=300, db=pg_url)
    names = [n for n in data["results"] if not n.endswith(" on Postgres")]
    assert len(names) == 3
    for name in names:
        assert data["results"][f"{name} on Postgres"] == data["results"][name]


def test_the_retrieval_evals_reach_no_private_store_attribute():
    for name in ("retrieval_eval.py", "locomo.py", "locomo_retrieval.py"):
        tree = ast.parse((LAB / name).read_text("utf-8"))
        private = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and n.attr in ("_db", "_q", "_x", "_many", "fts_table")}
        assert not private, f"{name} reaches {sorted(private)}"

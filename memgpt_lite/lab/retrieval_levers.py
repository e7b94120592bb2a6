"""Each lever of conversation_search measured on LoCoMo, against the layout before it.

    python -m memgpt_lite.lab.retrieval_levers locomo10.json [--embedder SPEC] [--json OUT]

Every variant runs the real LoCoMo retrieval runner (`locomo.run_locomo`) on categories 1-4
and is compared with the first variant question by question (paired bootstrap, 95%
intervals) on recall within 1,000 tokens of the tool's output. With an embedder, hybrid's
keyword share is chosen by two-fold cross-validation over the conversations (chosen on
five, reported on the other five, both ways). The figures are in docs/search.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from memgpt_lite.engine import recall_page, search
from memgpt_lite.lab.locomo import run_locomo
from memgpt_lite.lab.locomo_retrieval import METRICS
from memgpt_lite.lab.recall_metrics import paired_bootstrap, two_fold

HEADLINE = "in 1000 tokens"
WEIGHTS = (0.5, 0.6, 0.7, 0.8)
# name -> (layout, overrides of recall_page's constants)
VARIANTS: dict[str, tuple[int, dict[str, Any]]] = {
    "layout 1 (before)": (1, {}),
    "layout 2": (2, {}),
    "layout 3": (3, {}),
    "layout 4": (4, {}),
    **{f"layout 4, re-rank {n} pages": (4, {"search.RERANK_PAGES": n}) for n in (3, 10, 20)},
    "layout 4, conversation on every heading": (4, {"NAME_CURRENT": {}}),
    "layout 2, replies under every hit": (2, {"REPLIES_UNDER": "all"}),
    "layout 2, no replies": (2, {"REPLY_CHARS": {**recall_page.REPLY_CHARS, 2: 0}}),
    "layout 2, replies cut at 120": (2, {"REPLY_CHARS": {**recall_page.REPLY_CHARS, 2: 120}}),
    "layout 2, 5 hits a page": (2, {"PER_PAGE": {**recall_page.PER_PAGE, 2: 5}}),
    "layout 2, 20 hits a page": (2, {"PER_PAGE": {**recall_page.PER_PAGE, 2: 20}}),
    **{f"layout 3, time {w}": (3, {"search.TIME_WEIGHT": w}) for w in (0.25, 0.5, 1.0, 2.0)},
    **{f"layout 3, coverage {w}": (3, {"search.COVERAGE_WEIGHT": w})
       for w in (0.25, 0.5, 1.0, 2.0)},
    **{f"layout 3, date {w}": (3, {"search.DATE_WEIGHT": w}) for w in (0.25, 0.5, 1.0, 2.0)},
    **{f"layout 3, coverage {c}, time {t}, date {d}": (3, {
        "search.COVERAGE_WEIGHT": c, "search.TIME_WEIGHT": t, "search.DATE_WEIGHT": d})
       for c in (0.0, 0.5, 1.0, 2.0) for t in (0.0, 0.5) for d in (0.0, 0.5, 1.0)},
    **{f"layout 2, neighbours {w}": (2, {"search.NEIGHBOUR_WEIGHT": w}) for w in (0.0, 0.3, 0.5)},
    **{f"layout 4, neighbours {w}": (4, {"search.NEIGHBOUR_WEIGHT": w})
       for w in (0.0, 0.3, 0.5, 0.8)},
    "layout 4, any reply": (4, {"REPLY_WORDS": {}}),
    **{f"layout 4, coverage {c}, time {t}, date {d}": (4, {
        "search.COVERAGE_WEIGHT": c, "search.TIME_WEIGHT": t, "search.DATE_WEIGHT": d})
       for c in (0.0, 1.0) for t in (0.0, 0.5) for d in (0.0, 1.0)},
    **{f"layout 4, {n} hits a page": (4, {"PER_PAGE": {**recall_page.PER_PAGE, 4: n}})
       for n in (15, 20)},
    **{f"layout 4, replies cut at {n}": (4, {"REPLY_CHARS": {**recall_page.REPLY_CHARS, 4: n}})
       for n in (200, 400, 500)},
    "layout 5": (5, {}),
    **{f"layout 5, coverage {c}, time {t}, date {d}": (5, {
        "search.COVERAGE_WEIGHT": c, "search.TIME_WEIGHT": t, "search.DATE_WEIGHT": d})
       for c in (0.0, 1.0) for t in (0.0, 0.5) for d in (0.0, 1.0)},
    **{f"layout 4, window {n}": (4, {"HIT_CHARS": n}) for n in (150, 200, 300)},
}


def _where(name: str) -> tuple[Any, str]:
    """The module and attribute an override names: "search.X" is engine/search.py's X, any
    other name recall_page's."""
    module, _, attr = name.rpartition(".")
    return (search if module == "search" else recall_page), attr


@contextlib.contextmanager
def overridden(values: dict[str, Any]) -> Iterator[None]:
    saved = {k: getattr(*_where(k)) for k in values}
    try:
        for k, v in values.items():
            setattr(*_where(k), v)
        yield
    finally:
        for k, v in saved.items():
            setattr(*_where(k), v)


def _core(report: dict[str, Any], method: str) -> list[dict[str, Any]]:
    return [q["methods"][method] for q in report["questions"] if q["category"][:1] in "1234"]


def measure(path: str, embedder: Any = None, variants: list[str] | None = None,
            choose: bool = False, metric: str = HEADLINE) -> dict:
    reports = {}
    for name in variants or list(VARIANTS):
        layout, values = VARIANTS[name]
        with overridden(values):
            reports[name] = run_locomo(path, retrieval_only=True, layout=layout,
                                       embedder=embedder,
                                       weights=WEIGHTS if embedder is not None else ())
    base = next(iter(reports))
    out: dict[str, Any] = {"variants": {}, "headline": metric}
    if choose and len(reports) > 2:
        out["chosen by cross-validation"] = _choose(reports, base, metric)
    for name, report in reports.items():
        for method in ("keyword", "hybrid"):
            if method not in report["methods"]:
                continue
            values = [r[metric] for r in _core(report, method)]
            before = [r[metric] for r in _core(reports[base], method)]
            out["variants"][f"{name} · {method}"] = {
                "by_category": report["methods"][method]["by_category"],
                "categories 1-4": report["methods"][method]["categories 1-4"],
                "against first": paired_bootstrap(before, values)}
        if embedder is not None:
            out["variants"][f"{name} · hybrid, weight cross-validated"] = _cross_validated(
                report, metric)
    return out


def _choose(reports: dict[str, Any], base: str, metric: str) -> dict[str, Any]:
    """The variants after the first chosen among by two-fold cross-validation over the
    conversations (keyword): the held-out figure, and its paired difference to the first."""
    first = reports[base]
    samples = list(dict.fromkeys(q["sample"] for q in first["questions"]))

    def score(name: str, groups: Any) -> list[float]:
        return [q["methods"]["keyword"][metric] for q in reports[name]["questions"]
                if q["sample"] in groups and q["category"][:1] in "1234"]

    result = two_fold(samples, [n for n in reports if n != base], score)
    half = len(samples) // 2
    before = score(base, samples[:half]) + score(base, samples[half:])
    return {"chosen": result["chosen"], metric: result["mean"],
            "against first": paired_bootstrap(before, result["values"])}


def _cross_validated(report: dict[str, Any], metric: str) -> dict[str, Any]:
    samples = list(dict.fromkeys(q["sample"] for q in report["questions"]))

    def score(weight: float, groups: list[Any]) -> list[float]:
        return [q["methods"][f"hybrid {weight}"][metric] for q in report["questions"]
                if q["sample"] in groups and q["category"][:1] in "1234"]

    result = two_fold(samples, WEIGHTS, score)
    return {"chosen": result["chosen"], "categories 1-4": {metric: result["mean"],
                                                           "n": len(result["values"])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.retrieval_levers")
    parser.add_argument("file", help="locomo10.json")
    parser.add_argument("--embedder", metavar="SPEC", help="onnx:FOLDER or http, for hybrid")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), metavar="NAME",
                        help="only these variants (the first is the baseline); the names are "
                             "VARIANTS in this module")
    parser.add_argument("--choose", action="store_true",
                        help="choose among the variants after the first by two-fold "
                             "cross-validation over the conversations (keyword)")
    parser.add_argument("--metric", default=HEADLINE, choices=METRICS[:7],
                        help=f"the figure compared and chosen on (default {HEADLINE!r})")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    args = parser.parse_args(argv)
    embedder = None
    if args.embedder:
        from memgpt_lite.lab.retrieval_eval import _embedder

        embedder = _embedder(args.embedder)
    data = measure(args.file, embedder, args.variant, args.choose, args.metric)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
    _print(data)
    return 0


def _print(data: dict[str, Any]) -> None:
    metric = data["headline"]
    cats = ("1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop")
    print(f"{'variant':58} " + " ".join(f"{c[2:]:>11}" for c in cats)
          + f" {'cat. 1-4':>9}  difference to the first [95%]")
    for name, v in data["variants"].items():
        cells = " ".join(f"{v['by_category'][c][metric]:>11.3f}"
                         if c in v.get("by_category", {}) else f"{'':>11}" for c in cats)
        diff = v.get("against first")
        note = (f"{diff['diff']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]" if diff
                else f"weights chosen {v.get('chosen')}")
        print(f"{name:58} {cells} {v['categories 1-4'][metric]:>9.3f}  {note}")
    chosen = data.get("chosen by cross-validation")
    if chosen:
        diff = chosen["against first"]
        print(f"chosen by two-fold cross-validation: {' / '.join(chosen['chosen'])}: held out "
              f"{chosen[metric]:.3f}, {diff['diff']:+.3f} [{diff['low']:+.3f}, "
              f"{diff['high']:+.3f}] against the first")


if __name__ == "__main__":
    raise SystemExit(main())

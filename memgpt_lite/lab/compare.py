"""Eval reports as data: combining runs, whether a report failed, and comparing two.

A report is the JSON `scenarios.run_scenario` returns (or `{"runs": [...]}` for several
scenarios); everything here reads those dicts, so it works the same on reports loaded from
files (`load_report`) as on fresh runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from memgpt_lite.lab.harness import ScenarioError


def failed(report: dict[str, Any]) -> bool:
    return _failed(report) > 0


def runs_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A report file holds one run, or {"runs": [...]} for several scenarios."""
    return list(report["runs"]) if "runs" in report else [report]


def combine(reports: list[dict[str, Any]]) -> dict[str, Any]:
    if len(reports) == 1:
        return reports[0]
    runs = {"runs": reports}
    return {**runs, "passed": _passed(runs), "failed": _failed(runs), "score": _score(runs)}


NUMERIC_TOTALS = ("turns", "model_calls", "tool_calls", "input_tokens", "output_tokens",
                  "cache_read_tokens", "max_request_tokens", "cost_usd", "alerts", "evictions",
                  "forced_flushes", "errors")


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-check and total deltas from run A to run B (two JSON reports).

    A check is keyed by scenario and name; `change` is fixed | broke | same-pass |
    same-fail | new | gone | skipped."""
    checks_a, checks_b = _keyed_checks(a), _keyed_checks(b)
    rows = []
    for key in list(checks_a) + [k for k in checks_b if k not in checks_a]:
        pa, pb = (checks_a.get(key) or {}).get("passed"), (checks_b.get(key) or {}).get("passed")
        rows.append({"scenario": key[0], "name": key[1], "a": pa, "b": pb,
                     "change": _change(key in checks_a, key in checks_b, pa, pb)})
    tot_a, tot_b = _sum_totals(a), _sum_totals(b)
    return {"checks": rows,
            "score": {"a": _score(a), "b": _score(b), "delta": round(_score(b) - _score(a), 4)},
            "passed": {"a": _passed(a), "b": _passed(b), "delta": _passed(b) - _passed(a)},
            "totals": {k: {"a": tot_a[k], "b": tot_b[k], "delta": round(tot_b[k] - tot_a[k], 6)}
                       for k in NUMERIC_TOTALS}}


def _keyed_checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.get("scenario", ""), c["name"]): c for r in runs_of(report) for c in r["checks"]}


def _change(in_a: bool, in_b: bool, pa: bool | None, pb: bool | None) -> str:
    if not in_a:
        return "new"
    if not in_b:
        return "gone"
    if pa is None or pb is None:
        return "skipped"
    if pa == pb:
        return "same-pass" if pa else "same-fail"
    return "fixed" if pb else "broke"


def _score(report: dict[str, Any]) -> float:
    passed, scored = _passed(report), _passed(report) + _failed(report)
    return round(passed / scored, 4) if scored else 1.0


def _passed(report: dict[str, Any]) -> int:
    return sum(r["passed"] for r in runs_of(report))


def _failed(report: dict[str, Any]) -> int:
    return sum(r["failed"] for r in runs_of(report))


def _sum_totals(report: dict[str, Any]) -> dict[str, float]:
    out = dict.fromkeys(NUMERIC_TOTALS, 0)
    for run in runs_of(report):
        for k in NUMERIC_TOTALS:
            out[k] += (run.get("totals") or {}).get(k, 0) or 0
    return out


def load_report(path: str | Path) -> dict[str, Any]:
    """A report file, checked: ScenarioError (one sentence) for one that is damaged or was
    edited into a shape `compare` cannot read."""
    try:
        # utf-8-sig: a report saved by an editor on Windows starts with a byte-order mark.
        data = json.loads(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
    except FileNotFoundError:
        raise ScenarioError(f"no report at {path}") from None
    except (json.JSONDecodeError, RecursionError):
        raise ScenarioError(f"{path} is not a JSON eval report") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict) or not ("checks" in data or "runs" in data):
        raise ScenarioError(f"{path} is not a memgpt-lite eval report (no checks)")
    problem = _report_problem(data)
    if problem:
        raise ScenarioError(f"{path} is not a memgpt-lite eval report ({problem})")
    return data


def _report_problem(data: dict[str, Any]) -> str | None:
    """What in a report's shape compare cannot use (None: nothing). Files are hand-edited
    and cut short, so every field compare reads is checked here rather than failing later."""
    runs = data.get("runs", [data]) if "runs" in data else [data]
    if not isinstance(runs, list):
        return "'runs' is not a list"
    for n, run in enumerate(runs, 1):
        if not isinstance(run, dict):
            return f"run {n} is not an object"
        problem = _run_problem(run)
        if problem:
            return f"run {n}: {problem}"
    return None


def _run_problem(run: dict[str, Any]) -> str | None:
    if not isinstance(run.get("scenario", ""), str):
        return "'scenario' is not a text"
    for key in ("passed", "failed"):
        if not _is_count(run.get(key)):
            return f"{key!r} is not a count"
    checks = run.get("checks")
    if not isinstance(checks, list):
        return "'checks' is not a list"
    for check in checks:
        if not isinstance(check, dict) or not isinstance(check.get("name"), str):
            return "a check has no name"
        if check.get("passed") not in (True, False, None):
            return f"check {check['name']!r}: 'passed' is not true, false or null"
    totals = run.get("totals") or {}
    if not isinstance(totals, dict):
        return "'totals' is not an object"
    for key in NUMERIC_TOTALS:
        value = totals.get(key, 0) or 0
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            return f"total {key!r} is not a number"
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

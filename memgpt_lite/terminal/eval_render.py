"""The eval's printed results: the bundled scenarios, the score table, the comparison of two
reports, and the dataset runners' tables (LoCoMo, nested KV). Like render.py's printers they
take a console and the data and decide nothing; every label from a scenario or a dataset
reaches the terminal through `shown`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memgpt_lite.terminal.render import shown


def print_scenario_list(console: Console, rows: list[Any]) -> None:
    """The bundled scenarios: name, inputs, checks, what each proves; then how to run them."""
    table = Table("scenario", "inputs", "checks", "what it proves", box=None, pad_edge=False)
    table.columns[3].overflow = "fold"
    for s in rows:
        judged = " (1 judged)" if any(c.type == "judge" for c in s.checks) else ""
        table.add_row(shown(s.name), str(len(s.inputs)), f"{len(s.checks)}{judged}",
                      shown(s.description))
    console.print(table)
    console.print("Run them all: memgpt-lite eval --model ID [--judge] --json a.json; one: "
                  "memgpt-lite eval NAME --model ID; compare two runs: memgpt-lite eval "
                  "--compare a.json b.json", markup=False, highlight=False)


def print_score_table(console: Console, report: dict[str, Any]) -> None:
    table = Table(title=shown(f"{report['scenario']} · {report['model']} · "
                              f"{report.get('source', '')}"), title_justify="left")
    # A check's name is one word_with_underscores: it keeps its width (up to 40) rather
    # than being cut, and the detail wraps beside it.
    table.add_column("check", min_width=_label_width((c["name"] for c in report["checks"]),
                                                     console.width // 2 - 12), overflow="fold")
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in report["checks"]:
        mark = "skip" if c["passed"] is None else ("PASS" if c["passed"] else "FAIL")
        table.add_row(shown(c["name"]), mark, shown(c["detail"]))
    console.print(table)
    t = report["totals"]
    console.print(f"score {report['passed']}/{report['passed'] + report['failed']} "
                  f"({report['score']:.0%}) · {t['turns']} turns · {t['model_calls']} model calls"
                  f" · {t['tool_calls']} tool calls · {t['input_tokens']:,} input tokens · "
                  f"${t['cost_usd']:.4f}")
    failed = report.get("failed_turns") or []
    if failed:
        first = failed[0]
        console.print(shown(f"{len(failed)} of {t['turns']} turns failed, so their checks "
                            f"scored no reply (turn {first['turn']}: {first['error']})", "red"))
    for d in report.get("replay_divergences") or []:
        console.print(shown(f"  replay divergence: {d}", "yellow"))


def print_comparison(console: Console, result: dict[str, Any], names: list[str]) -> None:
    mark = {True: "PASS", False: "FAIL", None: "—"}
    table = Table(title=shown(f"A = {names[0]} · B = {names[1]}"), title_justify="left")
    rows = result["checks"]
    most = console.width // 3 - 10
    table.add_column("scenario", min_width=_label_width((r["scenario"] for r in rows), most),
                     overflow="fold")
    table.add_column("check", min_width=_label_width((r["name"] for r in rows), most),
                     overflow="fold")
    for name in ("A", "B", "change"):
        table.add_column(name, no_wrap=True)
    for row in result["checks"]:
        style = {"fixed": "green", "broke": "bold red"}.get(row["change"], "")
        table.add_row(shown(row["scenario"]), shown(row["name"]), mark[row["a"]], mark[row["b"]],
                      Text(row["change"], style=style))
    console.print(table)
    totals = Table("total", "A", "B", "delta")
    s = result["score"]
    totals.add_row("score", f"{s['a']:.0%}", f"{s['b']:.0%}", f"{s['delta'] * 100:+.0f} pts")
    p = result["passed"]
    totals.add_row("checks passed", str(p["a"]), str(p["b"]), f"{p['delta']:+d}")
    for key, v in result["totals"].items():
        fmt = (lambda x: f"${x:.4f}") if key == "cost_usd" else (lambda x: f"{x:,.0f}")
        delta = f"{v['delta']:+.4f}" if key == "cost_usd" else f"{v['delta']:+,.0f}"
        totals.add_row(key.replace("_", " "), fmt(v["a"]), fmt(v["b"]), delta)
    console.print(totals)


def print_locomo(console: Console, result: dict[str, Any]) -> None:
    if result.get("methods"):
        _print_locomo_methods(console, result)
        return
    metrics = result["metrics"]
    table = Table("category", "n", *metrics,
                  title=shown(f"LoCoMo · {result['mode']} · {result['file']}"),
                  title_justify="left")
    # Categories 1-4 are the usual LoCoMo score; the few adversarial questions that carry a
    # gold answer are in "overall" only.
    core = [("categories 1-4", result["categories 1-4"])] if "categories 1-4" in result else []
    rows = [*result["by_category"].items(), *core, ("overall", result["overall"])]
    for name, stats in rows:
        table.add_row(shown(name), str(stats["n"]), *(_pct(stats.get(m)) for m in metrics))
    console.print(table)
    _print_locomo_left_out(console, result)


_LOCOMO_COLUMNS = (("recall@5", "recall@5"), ("recall@10", "recall@10"),
                   ("recall@20", "recall@20"), ("recall@10 + replies", "@10 + replies"),
                   ("in 500 tokens", "in 500 tok"), ("in 1000 tokens", "in 1,000 tok"),
                   ("in 2000 tokens", "in 2,000 tok"))


def _print_locomo_methods(console: Console, result: dict[str, Any]) -> None:
    """Retrieval: one table per search method: recall of k distinct hits, of ten hits with
    their replies, and within token budgets of the tool's output, per category."""
    title = f"LoCoMo · retrieval · {result['file']}"
    if result.get("embedder"):
        title += f" · embedder {result['embedder']}"
    console.print(shown(title), markup=False)
    for method, stats in result["methods"].items():
        columns = [(k, h) for k, h in _LOCOMO_COLUMNS if stats["overall"].get(k) is not None]
        table = Table("category", "n", *(h for _, h in columns), title=shown(method),
                      title_justify="left")
        for name in [*stats["by_category"], "categories 1-4", "overall"]:
            cell = stats["by_category"].get(name) or stats[name]
            # A file of adversarial questions only has no categories 1-4: no figure there.
            table.add_row(shown(name), str(cell["n"]),
                          *("—" if cell[k] is None else f"{cell[k]:.3f}" for k, _ in columns))
        console.print(table)
    console.print("recall@k: evidence among k distinct hits; + replies: the ten hits with the "
                  "message after each; in N tok: evidence inside the first N tokens of the tool's "
                  "output, pages in order (docs/search.md)", markup=False)
    _print_locomo_left_out(console, result)


def _print_locomo_left_out(console: Console, result: dict[str, Any]) -> None:
    """What the table's n does not show: questions not scored in this mode, and questions
    scored whose evidence the conversation lacks (a miss whatever the search does)."""
    skipped, lacking = result.get("skipped") or 0, result.get("evidence_not_found") or 0
    if skipped:
        why = "no evidence" if result.get("mode") == "retrieval" else "no gold answer"
        console.print(f"{skipped:,} question(s) not scored: {why} (not in n)", markup=False)
    if lacking:
        console.print(f"{lacking:,} scored question(s) name evidence the conversation does not "
                      "have: counted as missed", markup=False)
    _print_failed(console, result.get("failed") or [], "question")


def _print_failed(console: Console, failed: list[dict[str, Any]], what: str) -> None:
    """Items whose model call failed: no answer to score, so not in n."""
    if failed:
        console.print(f"{len(failed):,} {what}(s) not scored: the model call failed (not in n; "
                      f"first: {shown(str(failed[0].get('error')))})", markup=False)


def print_nested_kv(console: Console, result: dict[str, Any]) -> None:
    table = Table("nesting level", "n", "accuracy", title=shown(f"nested KV · {result['model']}"),
                  title_justify="left")
    for level, stats in [*result["by_level"].items(), ("overall", result["overall"])]:
        table.add_row(str(level), str(stats["n"]), _pct(stats["accuracy"]))
    console.print(table)
    _print_failed(console, result.get("failed") or [], "example")


def _label_width(labels: Any, most: int) -> int:
    """The width a column of one-word labels keeps: its longest label, at most `most`."""
    return max(5, min(most, 40, max((len(str(label)) for label in labels), default=5)))


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"

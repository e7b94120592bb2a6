"""Terminal rendering for `replay`, `demo`, `eval` and `sessions` (rich). May print.

Each `cmd_*` takes the argparse Namespace from cli.py and returns an exit code:
0 fine, 1 a failed check or a divergence under --strict, 2 a user error (bad file, args).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.events import Event
from memgpt_lite.engine.recording import RecordedTurn
from memgpt_lite.engine.replay import DivergenceInfo, ReplayReport
from memgpt_lite.engine.text import shorten
from memgpt_lite.lab import evaluation

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MAX_PAUSE = 2.0  # seconds: live pacing never waits longer than this between two events
DEMO_RESOURCE = "demo.jsonl"


def make_console() -> Console:
    """The console every command prints to (tests swap it for a recording one)."""
    plain = not sys.stdout.isatty()
    return Console(highlight=False, color_system=None if plain else "auto",
                   width=100 if plain else None)


def _fail(console: Console, message: str, code: int = EXIT_USAGE) -> int:
    console.print(Text(f"memgpt-lite: {message}", style="bold red"))
    return code


# =========================================================================== replay view


class ReplayView:
    """Renders a replay as it happens: user inputs, replies, tool calls, memory edits,
    alerts, evictions. `speed` > 0 paces events by the recorded timing divided by speed."""

    def __init__(self, console: Console, *, speed: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.console, self.speed, self.sleep = console, speed, sleep
        self.last_t: float | None = None

    def user(self, turn: RecordedTurn) -> None:
        self._pace(turn.t)
        self.console.print()
        self.console.print(Text.assemble(("you ", "bold cyan"), (f"{turn.at}  ", "dim"),
                                         (turn.text, "")))

    def event(self, event: Event, recorded_t: float | None) -> None:
        if recorded_t is not None:
            self._pace(recorded_t)
        render = getattr(self, f"_on_{event.kind}", None)
        if render is not None:
            render(event)

    def divergence(self, info: DivergenceInfo) -> None:
        self.console.print(Text(f"  ✗ divergence · {info}", style="bold red"))

    def _pace(self, t: float) -> None:
        if self.speed > 0 and self.last_t is not None and t > self.last_t:
            self.sleep(min(MAX_PAUSE, (t - self.last_t) / self.speed))
        self.last_t = t if self.last_t is None else max(self.last_t, t)

    def _line(self, mark: str, text: str, style: str = "") -> None:
        self.console.print(Text.assemble(("  " + mark + " ", style or "dim"), (text, style)))

    def _on_tool_result(self, e: Any) -> None:
        style = "red" if e.result.is_error else "yellow"
        self._line("⚙", e.summary or e.call.name, style)

    def _on_memory_edit(self, e: Any) -> None:
        change = e.new if e.old is None else _diff_tail(e.old, e.new)
        self._line("✎", f"core memory {e.label} ({e.op}, {e.used:,}/{e.limit:,} chars): {change}",
                   "green")

    def _on_pressure_alert(self, e: Any) -> None:
        self._line("⚠", f"memory pressure: {e.used_tokens:,}/{e.budget:,} tokens "
                        f"({e.percent:.0f}%)", "bold magenta")

    def _on_eviction(self, e: Any) -> None:
        who = {"model": "the model", "flush": "a forced flush", "overflow": "an overflow"}[e.by]
        ids = ", ".join(map(str, e.turn_ids))
        self._line("⇣", f"turns {ids} evicted by {who}, ~{e.tokens_freed:,} tokens freed; "
                        f"summary: {shorten(e.summary, 120)}", "magenta")

    def _on_fold(self, e: Any) -> None:
        self._line("⇣", f"folded {len(e.message_ids)} old tool result(s), "
                        f"~{e.tokens_freed:,} tokens freed", "magenta")

    def _on_clip(self, e: Any) -> None:
        self._line("✂", f"clipped {e.what}: {e.original_chars:,} → {e.kept_chars:,} chars", "magenta")

    def _on_summary(self, e: Any) -> None:
        if e.method != "model":
            self._line("Σ", f"summary updated ({e.method})", "magenta")

    def _on_notice(self, e: Any) -> None:
        self._line("ℹ", e.message, "yellow" if e.level == "warning" else "")

    def _on_error(self, e: Any) -> None:
        self._line("✗", e.message, "bold red")

    def _on_turn_end(self, e: Any) -> None:
        if e.text:
            self.console.print(Text.assemble(("agent ", "bold green"), (e.text, "")))
        tokens = e.usage.total_input
        self.console.print(Text(f"  turn {e.turn_id} · {tokens:,} input tokens · "
                                f"${e.cost_usd:.4f}", style="dim"))


def _diff_tail(old: str, new: str) -> str:
    if new.startswith(old):
        return "+" + shorten(new[len(old):].strip(), 90)
    return shorten(new, 90)


def print_replay_report(console: Console, report: ReplayReport) -> None:
    table = Table(title="replay report", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    tally = report.tally
    tools = ", ".join(f"{n} ×{c}" for n, c in sorted(tally.tool_calls.items())) or "none"
    u = tally.usage
    rows = [("turns", f"{tally.turns} of {report.recorded_turns} recorded"),
            ("model calls", str(tally.model_calls)), ("tool calls", tools),
            ("pressure alerts", str(tally.alerts)),
            ("evictions (model)", str(tally.model_evictions)),
            ("forced flushes", str(tally.forced_flushes)),
            ("tokens", f"{u.total_input:,} in ({u.cache_read_input_tokens:,} cache read) · "
                       f"{u.output_tokens:,} out"),
            ("cost", f"${tally.cost_usd:.4f} (recorded usage)"),
            ("divergences", str(len(report.divergences)) if report.divergences else "none")]
    for key, value in rows:
        table.add_row(key, value)
    console.print()
    console.print(table)
    for info in report.divergences[:10]:
        console.print(Text(f"  ✗ {info}", style="red"))
    print_core_memory(console, report.final_core_memory, report.block_limits)


def print_core_memory(console: Console, blocks: dict[str, str], limits: dict[str, int]) -> None:
    console.print()
    console.print(Text("final core memory", style="bold"))
    for label, value in blocks.items():
        limit = limits.get(label)
        used = f"{len(value):,}/{limit:,} chars" if limit else f"{len(value):,} chars"
        console.print(Panel(Text(value or "(empty)"), title=f"{label} · {used}",
                            title_align="left", expand=True))


def cmd_replay(args: argparse.Namespace) -> int:
    console = make_console()
    strict, speed = bool(getattr(args, "strict", False)), float(getattr(args, "speed", 0) or 0)
    try:
        head = recording.Recording.load(args.file).header
    except recording.RecordingError as exc:
        return _fail(console, str(exc))
    _print_header(console, head, args.file)
    report = _run_replay(console, args.file, strict=strict, speed=speed)
    if isinstance(report, int):
        return report
    print_replay_report(console, report)
    if report.divergences:
        verdict = "diverged" + (" (strict: failing)" if strict else "")
        console.print(Text(f"\nreplay {verdict}: first divergence at {report.divergences[0]}",
                           style="bold red"))
        return EXIT_FAILED if strict else EXIT_OK
    console.print(Text("\nreplay matched the recording: zero divergence", style="bold green"))
    return EXIT_OK


def _run_replay(console: Console, path: str | Path, *, strict: bool,
                speed: float) -> ReplayReport | int:
    try:
        return replay_mod.replay(path, strict=strict, observer=ReplayView(console, speed=speed))
    except recording.RecordingError as exc:
        return _fail(console, str(exc))


def _print_header(console: Console, header: dict[str, Any], path: str | Path) -> None:
    source = header.get("source") or "live"
    lines = [f"recording {path}",
             f"agent {header.get('agent')} · model {header.get('model')} · "
             f"created {header.get('created_at')} · memgpt-lite {header.get('version')}",
             f"context window {(header.get('settings') or {}).get('context_window', '?'):,} tokens"
             f" · source: {source}"]
    if header.get("note"):
        lines.append(str(header["note"]))
    console.print(Panel(Text("\n".join(lines)), title="replay", title_align="left"))


# =========================================================================== sessions


def cmd_sessions(args: argparse.Namespace) -> int:
    console = make_console()
    name = getattr(args, "agent", None)
    agent = _agent_row(name) if name else None
    if name and agent is None:
        return _fail(console, f"there is no agent named {name!r}")
    rows = recording.list_recordings(agent)
    if not rows:
        who = f" for agent {name!r}" if name else ""
        console.print(f"No recorded sessions{who} yet; `memgpt-lite chat` records by default.")
        return EXIT_OK
    table = Table("agent", "started", "turns", "file", box=None, pad_edge=False)
    for r in rows:
        turns = str(r.turns) if r.problem is None else f"damaged: {r.problem}"
        table.add_row(Text(r.agent), r.started, Text(turns), str(r.path))
    console.print(table)
    console.print(Text("replay one with: memgpt-lite replay FILE --strict", style="dim"))
    return EXIT_OK


def _agent_row(name: str) -> Any:
    from memgpt_lite.engine.store import Store

    with Store.open_default() as store:
        return store.get_agent(name)


# =========================================================================== demo


def demo_path() -> Path:
    """The bundled demo recording (package data)."""
    return Path(str(resources.files("memgpt_lite.data").joinpath(DEMO_RESOURCE)))


def cmd_demo(args: argparse.Namespace) -> int:
    """Replay the bundled session through the real engine: offline, no API key."""
    console = make_console()
    path = demo_path()
    try:
        header = recording.Recording.load(path).header
    except recording.RecordingError as exc:
        return _fail(console, f"the bundled demo is missing or damaged ({exc})", EXIT_FAILED)
    _print_demo_header(console, header)
    report = _run_replay(console, path, strict=False, speed=float(getattr(args, "speed", 0) or 0))
    if isinstance(report, int):
        return report
    print_replay_report(console, report)
    if report.divergences:
        console.print(Text("The demo no longer matches this version of the engine.",
                           style="bold red"))
        return EXIT_FAILED
    return EXIT_OK


def _print_demo_header(console: Console, header: dict[str, Any]) -> None:
    settings = header.get("settings") or {}
    honesty = header.get("note") or "Recorded from a live session."
    if header.get("source") == "hand-written":
        honesty = ("How this session was made: the model's responses were WRITTEN BY HAND, "
                   "not recorded from a live model. Everything else — prompts, context "
                   "building, token accounting, paging, memory tools, search, SQLite — is "
                   "the real engine running now on your machine. " + (header.get("note") or ""))
    text = Text.assemble(
        ("memgpt-lite demo", "bold"), " — offline replay, no API key needed\n",
        f"context window {settings.get('context_window', '?'):,} tokens (small on purpose, so "
        "paging happens)\n\n", (honesty.strip(), "italic"))
    console.print(Panel(text, title="demo", title_align="left"))


# =========================================================================== eval


class _UsageError(Exception):
    """A mistake in the eval's arguments or environment; the message is for the user."""


DATASETS = ("locomo", "nkv", "nested_kv", "nested-kv")


def cmd_eval(args: argparse.Namespace) -> int:
    console = make_console()
    try:
        if getattr(args, "compare", None):
            return _compare(console, args.compare)
        dataset = _dataset_name(args)
        if dataset is not None:
            return _dataset(console, dataset, args)
        return _scenarios(console, args)
    except (evaluation.ScenarioError, recording.RecordingError, _UsageError) as exc:
        return _fail(console, str(exc))


def _dataset_name(args: argparse.Namespace) -> str | None:
    """The dataset runner named by the first positional (any case), else None."""
    first = getattr(args, "scenario", None)
    if first is None:
        many = getattr(args, "scenarios", None) or []
        first = many[0] if many else None
    if isinstance(first, str) and first.lower() in DATASETS:
        return first.lower()
    return None


def _scenario_paths(args: argparse.Namespace) -> list[Path]:
    given = getattr(args, "scenario", None)
    paths = [given] if given else list(getattr(args, "scenarios", None) or [])
    if not paths:
        paths = sorted(str(p) for p in _bundled_scenarios())
    if not paths:
        raise _UsageError("name a scenario file (TOML) to run")
    return [Path(p) for p in paths]


def _bundled_scenarios() -> list[Path]:
    root = resources.files("memgpt_lite.data")
    return [Path(str(p)) for p in root.iterdir() if p.name.endswith(".toml")]


def _live_client(args: argparse.Namespace) -> Any:
    from memgpt_lite.engine.model import AnthropicClient

    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
            or os.environ.get("ANTHROPIC_BASE_URL")):
        raise _UsageError("a live eval needs ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL); "
                          "or re-score a recording with --replay FILE")
    return AnthropicClient()


def _scenarios(console: Console, args: argparse.Namespace) -> int:
    replay_file = getattr(args, "replay", None)
    paths = _scenario_paths(args)
    if replay_file and len(paths) > 1:
        raise _UsageError("--replay serves one recording: run one scenario with it")
    reports = [_run_one(console, evaluation.Scenario.load(path), args, replay_file)
               for path in paths]
    combined = evaluation.combine(reports)
    _write_json(console, getattr(args, "json", None), combined)
    if evaluation.failed(combined):
        console.print(Text(f"{combined['failed']} check(s) failed", style="bold red"))
        return EXIT_FAILED
    return EXIT_OK


def _run_one(console: Console, scenario: evaluation.Scenario, args: argparse.Namespace,
             replay_file: str | None) -> dict[str, Any]:
    judge = None
    model = getattr(args, "model", None)
    if replay_file:
        recorded = recording.Recording.load(replay_file)
        client: Any = replay_mod.ReplayModelClient(recorded)
        source, recorder = "replay", None
        model = model or recorded.header.get("model")  # the requests must match the recording
    else:
        client = _live_client(args)
        source = "live"
        recorder = recording.Recorder.create(f"eval-{scenario.name}")
        judge = client if getattr(args, "judge", False) else None
    console.print(Text(f"▶ {scenario.name} · {len(scenario.inputs)} inputs · "
                       f"{len(scenario.checks)} checks · {source}", style="bold"))
    progress = lambda msg: console.print(Text(f"  {msg}", style="dim"))  # noqa: E731
    try:
        report = evaluation.run_scenario(scenario, client, model=model,
                                         recorder=recorder, judge=judge, progress=progress,
                                         source=source)
    finally:
        if recorder is not None:
            recorder.close()
    print_score_table(console, report)
    if recorder is not None:
        console.print(Text(f"recorded to {recorder.path} (re-score with --replay)", style="dim"))
    return report


def print_score_table(console: Console, report: dict[str, Any]) -> None:
    table = Table(title=f"{report['scenario']} · {report['model']} · {report.get('source', '')}",
                  title_justify="left", pad_edge=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for c in report["checks"]:
        mark = "skip" if c["passed"] is None else ("PASS" if c["passed"] else "FAIL")
        table.add_row(c["name"], mark, c["detail"])
    console.print(table)
    t = report["totals"]
    console.print(f"score {report['passed']}/{report['passed'] + report['failed']} "
                  f"({report['score']:.0%}) · {t['turns']} turns · {t['model_calls']} model calls"
                  f" · {t['tool_calls']} tool calls · {t['input_tokens']:,} input tokens · "
                  f"${t['cost_usd']:.4f}")
    for d in report.get("replay_divergences") or []:
        console.print(Text(f"  replay divergence: {d}", style="yellow"))


def _compare(console: Console, files: list[str]) -> int:
    if len(files) != 2:
        raise _UsageError("--compare takes two JSON reports: A.json B.json")
    a, b = (evaluation.load_report(f) for f in files)
    result = evaluation.compare(a, b)
    print_comparison(console, result, files)
    return EXIT_OK


def print_comparison(console: Console, result: dict[str, Any], names: list[str]) -> None:
    mark = {True: "PASS", False: "FAIL", None: "—"}
    table = Table("scenario", "check", "A", "B", "change", title=f"A = {names[0]} · B = {names[1]}",
                  title_justify="left", pad_edge=False)
    for row in result["checks"]:
        style = {"fixed": "green", "broke": "bold red"}.get(row["change"], "")
        table.add_row(row["scenario"], row["name"], mark[row["a"]], mark[row["b"]],
                      Text(row["change"], style=style))
    console.print(table)
    totals = Table("total", "A", "B", "delta", pad_edge=False)
    s = result["score"]
    totals.add_row("score", f"{s['a']:.0%}", f"{s['b']:.0%}", f"{s['delta'] * 100:+.0f} pts")
    p = result["passed"]
    totals.add_row("checks passed", str(p["a"]), str(p["b"]), f"{p['delta']:+d}")
    for key, v in result["totals"].items():
        fmt = (lambda x: f"${x:.4f}") if key == "cost_usd" else (lambda x: f"{x:,.0f}")
        delta = f"{v['delta']:+.4f}" if key == "cost_usd" else f"{v['delta']:+,.0f}"
        totals.add_row(key.replace("_", " "), fmt(v["a"]), fmt(v["b"]), delta)
    console.print(totals)


# --------------------------------------------------------------------------- datasets


def _dataset(console: Console, name: str, args: argparse.Namespace) -> int:
    file = getattr(args, "file", None)
    if not file:
        many = getattr(args, "scenarios", None) or []
        file = many[1] if len(many) > 1 else None
    if not file:
        raise _UsageError(f"`eval {name}` needs the dataset file: memgpt-lite eval {name} FILE")
    progress = _progress_printer(console)
    settings = _dataset_settings(args)
    if name == "locomo":
        retrieval = bool(getattr(args, "retrieval_only", False))
        client = None if retrieval else _live_client(args)
        judge = client if (client is not None and getattr(args, "judge", False)) else None
        result = evaluation.run_locomo(file, retrieval_only=retrieval, model_client=client,
                                       settings=settings, judge=judge, progress=progress)
        print_locomo(console, result)
    else:
        result = evaluation.run_nested_kv(file, _live_client(args), settings=settings,
                                          progress=progress)
        print_nested_kv(console, result)
    _write_json(console, getattr(args, "json", None), result)
    return EXIT_OK


def _write_json(console: Console, target: str | None, report: dict[str, Any]) -> None:
    """`--json FILE`: write the report (the run is done; a bad path is the user's to fix)."""
    if not target:
        return
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"cannot write the JSON report to {target}: "
                          f"{exc.strerror or exc}") from None
    console.print(Text(f"JSON report: {target}", style="dim"))


def _dataset_settings(args: argparse.Namespace) -> Any:
    from memgpt_lite.engine.config import Settings

    settings = Settings().with_env()
    if getattr(args, "model", None):
        settings.model = args.model
    return settings


def _progress_printer(console: Console) -> Callable[[str], None]:
    state = {"n": 0}

    def show(message: str) -> None:
        state["n"] += 1
        if state["n"] % 25 == 1:  # datasets have thousands of items: a line now and then
            console.print(Text(f"  {message}", style="dim"))

    return show


def print_locomo(console: Console, result: dict[str, Any]) -> None:
    metrics = result["metrics"]
    table = Table("category", "n", *metrics, title=f"LoCoMo · {result['mode']} · {result['file']}",
                  title_justify="left", pad_edge=False)
    rows = [*result["by_category"].items(), ("overall", result["overall"])]
    for name, stats in rows:
        table.add_row(name, str(stats["n"]), *(_pct(stats.get(m)) for m in metrics))
    console.print(table)


def print_nested_kv(console: Console, result: dict[str, Any]) -> None:
    table = Table("nesting level", "n", "accuracy", title=f"nested KV · {result['model']}",
                  title_justify="left", pad_edge=False)
    for level, stats in [*result["by_level"].items(), ("overall", result["overall"])]:
        table.add_row(str(level), str(stats["n"]), _pct(stats["accuracy"]))
    console.print(table)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


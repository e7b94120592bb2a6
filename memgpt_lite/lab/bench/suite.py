"""The suite's command line: `memgpt-lite bench` runs every section, `bench store` the store.

`run_suite` runs the sections in order on one machine and returns the report as data;
`main` parses the arguments, prints the markdown table and writes the optional JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memgpt_lite.engine.embeddings import EmbeddingError
from memgpt_lite.engine.files import replace_file, write_problem
from memgpt_lite.lab.bench.engine_overhead import run_engine
from memgpt_lite.lab.bench.long_session import run_tokens
from memgpt_lite.lab.bench.mcp_startup import run_mcp_startup
from memgpt_lite.lab.bench.plan import Plan
from memgpt_lite.lab.bench.recording_cost import run_recording
from memgpt_lite.lab.bench.report import StderrProgress, missed_targets, render_markdown
from memgpt_lite.lab.bench.startup import run_memory, run_startup
from memgpt_lite.lab.bench.stats import machine_info, machine_line
from memgpt_lite.lab.bench.store import run_store, store_benchmark
from memgpt_lite.lab.fake_server import FakeAnthropicServer

SECTIONS = 7  # store, engine, tokens, startup, mcp, memory, recording: a progress bar's count


def run_suite(plan: Plan, progress: Callable[[str], None],
              embedders: list[str] | None = None) -> dict[str, Any]:
    """Every section, in one run; the report as data (see `render_markdown`, JSON).
    The hybrid section runs when numpy is installed (the embeddings extra). `progress`
    hears each step; if it has a `section_done()` method, that is called after each of the
    SECTIONS sections."""
    started, sections = time.perf_counter(), []
    hybrid = _hybrid_bench(embedders or [], plan, progress)
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-bench-") as tmp, \
            FakeAnthropicServer() as server:
        workdir = Path(tmp)
        at_size = hybrid.at_size if hybrid is not None else None
        store_section, corpora = _timed_section(
            lambda: run_store(workdir, plan, progress, at_size), progress)
        sections.append(store_section)
        if hybrid is not None:
            sections.append(hybrid.finish())
        english = corpora.get("en") or next(iter(corpora.values()))
        sections.append(_timed_section(lambda: run_engine(english, plan, progress), progress))
        for corpus in corpora.values():
            corpus.store.close()
        sections.append(_timed_section(lambda: run_tokens(plan, progress), progress))
        startup, rss = _timed_section(
            lambda: run_startup(plan, server.base_url, workdir, progress), progress)
        sections.append(startup)
        sections.append(_timed_section(
            lambda: run_mcp_startup(plan.chat_runs, workdir), progress))
        sections.append(_timed_section(
            lambda: run_memory(english, server, rss, progress), progress))
        sections.append(_timed_section(
            lambda: run_recording(workdir, plan, server.base_url, progress), progress))
    return {"benchmark": "memgpt-lite bench", "version": _version(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.perf_counter() - started, 1), "plan": asdict(plan),
            "machine": machine_info(), "sections": [s.to_dict() for s in sections]}


def _hybrid_bench(embedders: list[str], plan: Plan, progress: Callable[[str], None]) -> Any:
    try:
        import numpy  # noqa: F401
    except ImportError:
        progress("hybrid search section skipped: numpy is not installed "
                 "(pip install 'memgpt-lite[embeddings]')")
        return None
    from memgpt_lite.lab.bench.hybrid import HybridBench

    return HybridBench(embedders, plan.queries, progress)


def _timed_section(run: Callable[[], Any], progress: Any = None) -> Any:
    t = time.perf_counter()
    result = run()
    section = result[0] if isinstance(result, tuple) else result
    section.seconds = time.perf_counter() - t
    getattr(progress, "section_done", lambda: None)()
    return result


def _version() -> str:
    from memgpt_lite import __version__

    return __version__


# --------------------------------------------------------------------------- command


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x.replace("_", "").replace(",", "")) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be whole numbers, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return tuple(sorted(sizes))


def _count(text: str) -> int:
    """A positive whole number: no queries, turns or runs leave a section nothing to take
    a percentile or a median of, and it would fail after the minutes spent before it."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def suite_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memgpt-lite bench",
        description="Run the benchmark suite offline (scripted model, local fake server) and "
                    "print one table: store at scale, engine overhead, token economics, "
                    "start-up, MCP server start-up, peak memory, recording cost. "
                    "`memgpt-lite bench store --help`: the store alone; `bench mcp`: the MCP "
                    "server's start-up alone.")
    p.add_argument("--quick", action="store_true",
                   help="smaller run (10k and 100k rows, Chinese 10k; 100-turn session): "
                        "under a minute")
    p.add_argument("--json", metavar="OUT", help="also write the full report as JSON to OUT")
    g = p.add_argument_group("size overrides (for trying things out; defaults follow --quick)")
    g.add_argument("--sizes", type=_sizes, metavar="N,N", help="store sizes in rows")
    g.add_argument("--queries", type=_count, metavar="N", help="search queries per size")
    g.add_argument("--engine-turns", type=_count, metavar="N",
                   help="turns timed in the engine section")
    g.add_argument("--turns", type=_count, metavar="N", help="turns of the scripted long session")
    g.add_argument("--runs", type=_count, metavar="N", help="subprocess runs per start-up measure")
    g.add_argument("--recording-sizes", type=_sizes, metavar="N,N",
                   help="messages of the agent in the recording-cost section")
    p.add_argument("--embedder", action="append", metavar="SPEC",
                   help="hybrid section: an embedder to measure (onnx:FOLDER or http, as "
                        "MEMGPT_LITE_EMBEDDER; repeatable; the first embeds the timed queries; "
                        "default: MEMGPT_LITE_EMBEDDER)")
    return p


def plan_from(args: argparse.Namespace) -> Plan:
    plan = Plan.quick() if args.quick else Plan()
    overrides = {"sizes": args.sizes, "zh_sizes": args.sizes, "queries": args.queries,
                 "engine_turns": args.engine_turns, "session_turns": args.turns,
                 "help_runs": args.runs, "chat_runs": args.runs,
                 "recording_sizes": args.recording_sizes}
    for name, value in overrides.items():
        if value is not None:
            setattr(plan, name, value)
    return plan


def suite_main(argv: list[str], progress: Any = None) -> int:
    """`progress`: the steps' display (default: one line per step on stderr)."""
    parser = suite_parser()
    args = parser.parse_args(argv)
    plan = plan_from(args)
    # Both are checked before the long run, so a mistake costs a sentence, not the run.
    try:
        embedders = _embedders(args.embedder)
    except EmbeddingError as exc:
        parser.error(f"--embedder: {exc}")
    problem = write_problem(Path(args.json)) if args.json else None
    if problem:
        parser.error(f"--json: cannot write {args.json}: {problem}")
    command = " ".join(["memgpt-lite bench", *argv])
    progress = progress or StderrProgress()
    progress(f"memgpt-lite bench: {'quick' if args.quick else 'full'} run on "
             f"{machine_line(machine_info())}")
    report = run_suite(plan, progress, embedders)
    report["command"] = command
    print(render_markdown(report, command))
    misses = missed_targets(report)
    if misses:
        print(f"\n{len(misses)} target(s) missed: " + "; ".join(misses))
    if args.json:
        try:  # after the table: a path that went bad during the run loses only the JSON
            replace_file(Path(args.json), (json.dumps(report, indent=2, ensure_ascii=False)
                                           + "\n").encode("utf-8"))
        except OSError as exc:
            progress(f"memgpt-lite bench: cannot write {args.json}: {exc.strerror or exc}")
            return 1
        progress(f"wrote {args.json}")
    return 0


def _embedders(specs: list[str] | None) -> list[str]:
    """The embedders to measure, checked now (a bad setting fails before the long run)."""
    import os

    from memgpt_lite.engine.embeddings import EmbeddingConfig

    specs = [s for s in specs or [os.environ.get("MEMGPT_LITE_EMBEDDER", "")] if s]
    for spec in specs:
        EmbeddingConfig.from_env({**os.environ, "MEMGPT_LITE_EMBEDDER": spec}).build()
    return [s for s in specs if s.strip().lower() != "none"]


def parser_for(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of `memgpt-lite bench ARGV` and the arguments it reads, as `main` dispatches
    them (the docs' command lines are checked against it)."""
    if argv[:1] == ["store"]:
        return store_parser(), argv[1:]
    if argv[:1] == ["load"]:
        from memgpt_lite.lab.bench.load import load_parser

        return load_parser(), argv[1:]
    if argv[:1] == ["mcp"]:
        from memgpt_lite.lab.bench.mcp_startup import mcp_parser

        return mcp_parser(), argv[1:]
    return suite_parser(), argv


def store_parser() -> argparse.ArgumentParser:
    import os

    parser = argparse.ArgumentParser(
        prog="memgpt-lite bench store",
        description="search latency and insert throughput only; with --db, SQLite and "
                    "Postgres side by side (in a scratch database it creates and drops)",
        epilog="examples:\n  memgpt-lite bench store --sizes 10000,100000\n"
               "  memgpt-lite bench store --db postgresql://me@localhost/postgres",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_sizes, metavar="N,N",
                        help="store sizes in messages (default 10000,100000; with --db "
                             "10000,100000,1000000)")
    parser.add_argument("--queries", type=_count, default=None,
                        help="search queries per size (default 300; with --db 200)")
    parser.add_argument("--db", metavar="URL", default=os.environ.get("MEMGPT_LITE_DATABASE_URL"),
                        help="a postgresql:// server to measure beside SQLite")
    parser.add_argument("--json", action="store_true")
    return parser


def store_main(argv: list[str]) -> int:
    args = store_parser().parse_args(argv)
    if args.db:
        return _compare_main(args)
    rows = [store_benchmark(n, queries=args.queries or 300)
            for n in args.sizes or (10_000, 100_000)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_store(rows)
    return 0


def _compare_main(args: argparse.Namespace) -> int:
    from memgpt_lite.lab.bench.backends import DEFAULT_SIZES, compare_backends, print_comparison

    rows = compare_backends(args.db, args.sizes or DEFAULT_SIZES, queries=args.queries or 200,
                            progress=StderrProgress())
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_comparison(rows)
    return 0


def _print_store(rows: list[dict]) -> None:
    cols = ["messages", "insert_seconds", "insert_msgs_per_s", "search_p50_ms", "search_p95_ms",
            "search_max_ms", "median_matches", "db_mb"]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>17}" for c in cols))


def main(argv: list[str] | None = None, progress: Any = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["store"]:
        return store_main(argv[1:])
    if argv[:1] == ["load"]:
        from memgpt_lite.lab.bench.load import load_main

        return load_main(argv[1:])
    if argv[:1] == ["mcp"]:
        from memgpt_lite.lab.bench.mcp_startup import mcp_main

        return mcp_main(argv[1:])
    return suite_main(argv, progress)

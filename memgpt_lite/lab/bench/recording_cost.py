"""The recording section: what recording a session costs, against `--no-record`.

A recording carries only what changed since the agent's base snapshot (docs/benchmarks.md,
"Reading the recording cost"), so its cost should grow with the session, not with the agent. This
section grows one agent to each size, then runs the same piped one-message chat as a user
would, in subprocesses against the local fake server: without recording, recorded for the
first time (which writes the base snapshot), and recorded again (the steady state). It
compares wall time, peak RSS and the size of what each recorded session wrote.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memgpt_lite.lab.bench.plan import BENCH_AGENT, Plan
from memgpt_lite.lab.bench.report import Figure, Row, Section, Target, short_count
from memgpt_lite.lab.bench.startup import chat_env, cli_command, reap_peak_rss
from memgpt_lite.lab.bench.store import grow_messages, grow_passages, open_corpus

LINE = "Hi again. What did I say about the garden?\n"


def run_recording(workdir: Path, plan: Plan, base_url: str,
                  progress: Callable[[str], None]) -> Section:
    data = {}
    for size in plan.recording_sizes:
        home = workdir / f"recording-{size}"
        corpus = open_corpus(home, "en")
        grow_messages(corpus, size, plan.batch)
        grow_passages(corpus, size // 5, plan.batch)
        corpus.store.close()
        data[size] = _measure(home, base_url, plan.chat_runs)
        progress(f"recording: {short_count(size)} messages: {_summary(data[size])}")
    section = Section("recording", "Recording cost", _METHOD.format(runs=plan.chat_runs))
    section.rows = [row for size in plan.recording_sizes for row in _rows(size, data[size])]
    section.rows.append(_size_row(data, plan.recording_sizes))
    section.data = {str(k): v for k, v in data.items()}
    return section


_METHOD = ("A data dir whose agent holds N messages and N/5 passages (grown through the public "
           "store API); then `memgpt-lite chat --agent {agent}` piped one message and /exit, "
           "against the local fake server, as subprocesses: median of {runs} runs with "
           "`--no-record`, one first recorded session (it writes the agent's base snapshot), "
           "median of {runs} later recorded sessions. Wall time from spawn to exit; peak RSS from "
           "os.wait4; recording size = the session's .jsonl file (the base snapshot is a "
           "separate file, written once per agent and again only after a large change).")
_METHOD = _METHOD.replace("{agent}", BENCH_AGENT)


def _measure(home: Path, base_url: str, runs: int) -> dict[str, Any]:
    env = chat_env(home, base_url)
    plain = [_chat(env, record=False) for _ in range(runs)]
    first = _chat(env, record=True)
    later = [_chat(env, record=True) for _ in range(runs)]
    base = sorted((home / "recordings").rglob("*.db"))
    return {"no_record": _median(plain), "first_recorded": first, "recorded": _median(later),
            "base_mb": round(sum(p.stat().st_size for p in base) / 1e6, 2)}


def _chat(env: dict[str, str], *, record: bool) -> dict[str, float]:
    before = set((Path(env["MEMGPT_LITE_HOME"]) / "recordings").rglob("*.jsonl"))
    args = [*cli_command(), "chat", "--agent", BENCH_AGENT, *([] if record else ["--no-record"])]
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err, env=env)
        assert proc.stdin is not None
        proc.stdin.write((LINE + "/exit\n").encode())
        proc.stdin.close()
        rss = reap_peak_rss(proc)
        seconds = time.perf_counter() - t
    new = set((Path(env["MEMGPT_LITE_HOME"]) / "recordings").rglob("*.jsonl")) - before
    size = sum(p.stat().st_size for p in new)
    return {"seconds": round(seconds, 3), "peak_rss_mb": round(rss, 1),
            "recording_kb": round(size / 1e3, 1)}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def _summary(d: dict[str, Any]) -> str:
    return (f"no-record {d['no_record']['seconds']} s, recorded {d['recorded']['seconds']} s, "
            f"first {d['first_recorded']['seconds']} s")


def _ratio(d: dict[str, Any], key: str) -> float:
    return round(d["recorded"][key] / max(1e-9, d["no_record"][key]), 3)


def _rows(size: int, d: dict[str, Any]) -> list[Row]:
    n = short_count(size)
    return [
        Row(f"chat, {n} messages: `--no-record` / recorded (median)",
            [Figure(d["no_record"]["seconds"], "s", "no-record"),
             Figure(d["recorded"]["seconds"], "s", "recorded"),
             Figure(_ratio(d, "seconds"), "×", "ratio")], Target("ratio", 1.10, "×")),
        Row(f"peak RSS, {n} messages: `--no-record` / recorded",
            [Figure(d["no_record"]["peak_rss_mb"], "MB", "no-record"),
             Figure(d["recorded"]["peak_rss_mb"], "MB", "recorded"),
             Figure(_ratio(d, "peak_rss_mb"), "×", "ratio")], Target("ratio", 1.10, "×")),
        Row(f"first recorded session, {n} messages (writes the base snapshot)",
            [Figure(d["first_recorded"]["seconds"], "s", "wall"),
             Figure(d["first_recorded"]["peak_rss_mb"], "MB", "peak RSS"),
             Figure(d["base_mb"], "MB", "base snapshot")]),
    ]


def _size_row(data: dict[int, dict[str, Any]], sizes: tuple[int, ...]) -> Row:
    """Whether a session's recording stays the same size as the agent grows: only between
    sizes that both have a base snapshot (below BASE_REFRESH_ROWS changed rows an agent has
    none, its recordings carry its whole history, and a ratio of those says nothing)."""
    from memgpt_lite.engine.store.snapshot import BASE_REFRESH_ROWS

    small, large = data[sizes[0]], data[sizes[-1]]
    label = (f"recording size per session: {short_count(sizes[0])} / "
             f"{short_count(sizes[-1])} messages")
    if not (small["base_mb"] and large["base_mb"]):
        return Row(label, [Figure(small["recorded"]["recording_kb"], "kB",
                                  short_count(sizes[0])),
                           Figure(large["recorded"]["recording_kb"], "kB",
                                  short_count(sizes[-1]))],
                   note=f"not compared: below {BASE_REFRESH_ROWS:,} rows an agent has no base "
                        "snapshot, so its recordings hold its whole history")
    ratio = round(large["recorded"]["recording_kb"] / max(0.1, small["recorded"]["recording_kb"]),
                  2)
    return Row(label,
               [Figure(small["recorded"]["recording_kb"], "kB", short_count(sizes[0])),
                Figure(large["recorded"]["recording_kb"], "kB", short_count(sizes[-1])),
                Figure(ratio, "×", "ratio")], Target("ratio", 1.10, "×"))

"""The suite's report: sections of rows of figures, targets, and the markdown table.

Also the progress line the suite prints on stderr while it runs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from memgpt_lite.lab.bench.stats import machine_line, percentile


@dataclass
class Figure:
    value: float | int
    unit: str
    name: str = ""  # e.g. "p50"; the target names the figure it applies to


@dataclass
class Target:
    figure: str  # Figure.name the target applies to ("" for a row's only figure)
    below: float
    unit: str

    def text(self) -> str:
        what = f" ({self.figure})" if self.figure else ""
        return f"< {_number(self.below)} {self.unit}{what}"


@dataclass
class Row:
    label: str
    figures: list[Figure]
    target: Target | None = None
    note: str = ""

    @property
    def ok(self) -> bool | None:
        if self.target is None:
            return None
        fig = next(f for f in self.figures if f.name == self.target.figure)
        return fig.value < self.target.below

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "figures": [asdict(f) for f in self.figures],
                "target": None if self.target is None else
                {**asdict(self.target), "text": self.target.text()},
                "ok": self.ok, "note": self.note}


@dataclass
class Section:
    id: str
    title: str
    method: str
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "method": self.method,
                "seconds": round(self.seconds, 1), "rows": [r.to_dict() for r in self.rows],
                "data": self.data}


def latency_figures(seconds: list[float]) -> list[Figure]:
    """p50 and p95, in milliseconds, of per-call times in seconds."""
    ms = [s * 1000 for s in seconds]
    return [Figure(round(percentile(ms, 50), 3), "ms", "p50"),
            Figure(round(percentile(ms, 95), 3), "ms", "p95")]


def _number(v: float | int) -> str:
    if isinstance(v, int) or abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _figure_text(f: Figure) -> str:
    if f.unit == "×":
        text = f"×{f.value:.3f}"
    elif f.unit.startswith("USD"):
        text = f"${f.value:.4f}{f.unit[3:]}"
    else:
        text = f"{_number(f.value)} {f.unit}"
    return f"{f.name} {text}" if f.name else text


def short_count(n: int) -> str:
    """A row count as a label: 10k, 1M, else 1,234."""
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else (
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}")


class StderrProgress:
    """One line per step on stderr, with the time since the run started."""

    def __init__(self, stream: Any = None):
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f}s] {message}", file=self.stream,
              flush=True)


# --------------------------------------------------------------------------- rendering


def render_markdown(report: dict[str, Any], command: str) -> str:
    """The table for docs/benchmarks.md: sections as row groups, then how each section measured."""
    m = report["machine"]
    lines = [f"`{command}` · memgpt-lite {report['version']} · {report['seconds']:.0f} s · "
             f"{report['started_at'][:10]}",
             f"Machine: {machine_line(m)}", "",
             "| section | measure | measured | target | result |", "|---|---|---|---|---|"]
    for section in report["sections"]:
        for i, row in enumerate(section["rows"]):
            title = f"**{section['title']}**" if i == 0 else ""
            figures = " · ".join(_figure_text(Figure(**f)) for f in row["figures"])
            target = row["target"]["text"] if row["target"] else ""
            mark = {True: "✓ pass", False: "✗ **miss**", None: ""}[row["ok"]]
            if row.get("note"):
                figures += f" ({row['note']})"
            lines.append(f"| {title} | {row['label']} | {figures} | {target} | {mark} |")
    lines += ["", "How each section measures:", ""]
    lines += [f"- **{s['title']}** ({s['seconds']:.0f} s): {s['method']}"
              for s in report["sections"]]
    return "\n".join(lines)


def missed_targets(report: dict[str, Any]) -> list[str]:
    return [f"{s['title']}: {r['label']}" for s in report["sections"] for r in s["rows"]
            if r["ok"] is False]

"""The statistics the benchmarks share: nearest-rank percentiles and what machine ran them."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T", int, float)


def percentile(values: Sequence[T], p: float) -> T:
    """Nearest-rank percentile: the smallest value with at least p% of `values` at or below
    it (an observed value, never an interpolation). `values` must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def machine_info() -> dict[str, Any]:
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gb": _ram_gb(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "sqlite": sqlite3.sqlite_version, "os": platform.platform(terse=True),
            "machine": platform.machine()}


def _cpu_model() -> str:
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")  # e.g. "24576000 kB"
    return round(int(total.split()[0]) / 1024 / 1024, 1) if total else None


def _proc_field(path: str, name: str) -> str | None:
    """The value of the first `name: value` line of a /proc file; None off Linux."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None  # no /proc: the callers fall back to what platform knows
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith(name)), None)


def machine_line(m: dict[str, Any]) -> str:
    ram = f", {m['ram_gb']} GB RAM" if m.get("ram_gb") else ""
    return (f"{m['cpu']} ({m['cores']} cores{ram}) · {m['python']} · SQLite {m['sqlite']} · "
            f"{m['os']}")

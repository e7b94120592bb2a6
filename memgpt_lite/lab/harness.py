"""What every lab run shares: the one error for a bad input file, the fixed clock a runner
moves, and the progress callback.

Scenarios, the dataset runners, the judge and the report loader all raise `ScenarioError`
with one sentence for the user; the terminal prints it and exits with a usage error.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from memgpt_lite.engine.records import parse_iso

DEFAULT_CLOCK = "2026-01-01T09:00:00Z"  # where a run's clock starts unless told otherwise
Progress = Callable[[str], None]


class ScenarioError(ValueError):
    """A scenario or dataset file is missing or malformed; one sentence for the user."""


class StepClock:
    """A fixed clock the runner moves: one reading per user input, never the wall clock."""

    def __init__(self, start: datetime):
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def parse_clock(text: str) -> datetime:
    """A clock given in a scenario file; a bad one is the user's to fix, in one sentence."""
    try:
        return parse_iso(text)
    except ValueError:
        raise ScenarioError(f"clock {text!r} is not an ISO time like {DEFAULT_CLOCK}") from None


"""How big each section of the suite runs, and the names the sections share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Plan:
    """How big each section runs; `--quick` and the test overrides shrink it."""

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    zh_sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)  # the Chinese corpus
    queries: int = 200
    batch: int = 10_000
    engine_turns: int = 200
    session_turns: int = 500
    budgets: tuple[int, ...] = (8_000, 32_000)
    help_runs: int = 7
    chat_runs: int = 5
    langs: tuple[str, ...] = ("en", "zh")
    recording_sizes: tuple[int, ...] = (10_000, 100_000)  # messages of the recorded agent

    @classmethod
    def quick(cls) -> Plan:
        # Chinese text inserts at about half the English rate (bigrams): 10k only, so the
        # quick run stays under a minute on 2 cores.
        return cls(sizes=(10_000, 100_000), zh_sizes=(10_000,), queries=100, engine_turns=40,
                   session_turns=100, help_runs=5, chat_runs=3,
                   # both sizes past the 2,000 rows that start a base snapshot: below them a
                   # recording carries the whole agent, and the size check compares nothing
                   recording_sizes=(5_000, 10_000))


BENCH_AGENT = "bench"  # the agent of the store section's data dirs, which later sections open
ENGINE_WINDOW = 32_000  # the context window that agent is created with and the engine runs at

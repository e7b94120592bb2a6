"""`memgpt-lite bench`: the benchmark suite — offline, one table, optional JSON.

    memgpt-lite bench [--quick] [--json OUT]
    python -m memgpt_lite.lab.bench store [--sizes 10000,100000] [--json]   # the store alone

Sections, in one run on one machine, and the module that measures each:
  store      `store`: conversation_search / archival_search latency at 10k, 100k, 1M rows,
             English and Chinese; bulk insert throughput; database size per 100k messages
  engine     `engine_overhead`: the engine's own time per model call (model excluded) with
             1M messages in recall
  tokens     `long_session`: the scripted long session: tokens, cache hits, cost vs layouts
  startup    `startup`: `memgpt-lite --help` and `memgpt-lite chat` to its first prompt
  mcp        `mcp_startup`: `memgpt-lite mcp` to its first answers (`bench mcp` alone)
  memory     `startup`: peak RSS of a chat process whose store holds the largest corpus
Shared by the sections: `corpus` (synthetic text, also the retrieval eval's filler), `stats`
(percentile, machine), `report` (rows, targets, the markdown table), `plan` (sizes). `suite`
runs them in order and owns the command line. The databases are built once per run in a
temporary directory and shared by the sections. Everything returns data; only the commands
and the progress line print.
"""

from __future__ import annotations

from typing import Any


def main(argv: list[str] | None = None, progress: Any = None) -> int:
    """`memgpt-lite bench ARGS`. Importing this package stays cheap: the suite and its
    sections load only when the command runs. `progress`: see suite.run_suite."""
    from memgpt_lite.lab.bench import suite

    return suite.main(argv, progress)

"""`memgpt-lite bench store --db URL`: the store on SQLite and on Postgres, side by side in one
run: insert rate while growing, conversation_search latency at each size, and how long a
forget's preview reads (`forget_scan_s`, a phrase found nowhere).

Both backends get the same corpus (the mixed-language `synthetic_messages`, one Chinese line
in ten), inserted through the public API in batches of `batch` messages (one transaction
each), and the same queries through the memory tool the model calls (search plus the page
it reads), after 5 warm-up calls. SQLite is a file in a temporary folder; Postgres works in
a scratch database it creates on the server of the URL and drops afterwards, so the data
already there is never touched.
"""

from __future__ import annotations

import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.engine.store import StoreError, open_store
from memgpt_lite.lab.bench.corpus import synthetic_messages, synthetic_queries
from memgpt_lite.lab.bench.stats import percentile

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)


@contextmanager
def scratch_database(url: str) -> Iterator[str]:
    """A new, empty database on the server of `url` (dropped on exit), as a URL."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    name = f"memgpt_lite_bench_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:  # no server there: a role's rights are not the problem
        raise StoreError(f"Cannot connect to the Postgres server of --db "
                         f"({_first_line(exc)}); check that it runs and the URL.") from None
    try:
        admin.execute(f"CREATE DATABASE {name}")
    except psycopg.Error as exc:
        admin.close()
        raise StoreError(f"This run works in a scratch database it creates and drops, "
                         f"and it could not create one ({_first_line(exc)}); "
                         "use a role allowed to create databases.") from None
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def grow_and_search(target: str, backend: str, sizes: tuple[int, ...], queries: int,
                    batch: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """One store grown to each size in turn; a row of figures per size."""
    rng, rows, done, seconds = random.Random(7), [], 0, 0.0
    asked = synthetic_queries(random.Random(8), queries)
    with open_store(target) as store:
        agent = store.create_agent("bench", {}, {"human": ("", 5000)})
        tools = MemoryTools(store, agent.id)
        for size in sizes:
            step_start, step_seconds = done, 0.0
            while done < size:
                msgs = synthetic_messages(rng, min(batch, size - done), start_turn=done // 2 + 1)
                t = time.perf_counter()
                store.add_messages(agent.id, msgs)
                step_seconds += time.perf_counter() - t
                done += len(msgs)
            seconds += step_seconds
            progress(f"bench store · {backend}: {size:,} messages "
                     f"({(done - step_start) / step_seconds:,.0f} rows/s); searching")
            row = _searched(tools, asked, backend, size, (done - step_start) / step_seconds)
            rows.append({**row, "forget_scan_s": _forget_scan(store, agent.id)})
    return rows


def _forget_scan(store: Any, agent_id: int) -> float:
    """Seconds to find what forgetting a phrase would change (the preview of `forget`),
    for a phrase that is nowhere: every row that may hold it is read."""
    from memgpt_lite.engine.matching import Matcher

    start = time.perf_counter()
    store.forget_units(agent_id, Matcher.build("zanzibar-7781"))
    return round(time.perf_counter() - start, 2)


def _searched(tools: MemoryTools, asked: list[str], backend: str, size: int,
              rate: float) -> dict[str, Any]:
    for q in asked[:5]:
        tools.execute("conversation_search", {"query": q})
    lat, totals = [], []
    for q in asked:
        t = time.perf_counter()
        out = tools.execute("conversation_search", {"query": q})
        lat.append((time.perf_counter() - t) * 1000)
        totals.append(int(out.text.split(", ")[1].split()[0]))
    return {"backend": backend, "messages": size, "insert_msgs_per_s": round(rate),
            "search_p50_ms": round(percentile(lat, 50), 2),
            "search_p95_ms": round(percentile(lat, 95), 2), "queries": len(asked),
            "median_matches": int(statistics.median(totals))}


def compare_backends(url: str, sizes: tuple[int, ...] = DEFAULT_SIZES, *, queries: int = 200,
                     batch: int = 10_000,
                     progress: Callable[[str], None] = lambda line: None) -> list[dict]:
    """SQLite then Postgres (the server of `url`), each grown to every size of `sizes`."""
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-bench-") as tmp, \
            scratch_database(url) as scratch:
        rows = grow_and_search(str(Path(tmp) / "bench.db"), "sqlite", sizes, queries, batch,
                               progress)
        rows += grow_and_search(scratch, "postgres", sizes, queries, batch, progress)
    return rows


def print_comparison(rows: list[dict]) -> None:
    cols = ("backend", "messages", "insert_msgs_per_s", "search_p50_ms", "search_p95_ms",
            "median_matches", "forget_scan_s")
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>17,}" if isinstance(r[c], int) else f"{r[c]:>17}"
                        for c in cols))

"""The store section: search latency, bulk insert throughput and file size at scale.

`run_store` grows one SQLite file per language to each size of the plan and times the
memory tools on it; the corpora it returns are shared with the engine and memory sections.
`store_benchmark` is the smaller, older measure behind `memgpt-lite bench store`.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.engine.store import Store, open_store
from memgpt_lite.lab.bench.corpus import (
    corpus_messages,
    corpus_passage,
    corpus_queries,
    synthetic_messages,
    synthetic_queries,
)
from memgpt_lite.lab.bench.plan import BENCH_AGENT, ENGINE_WINDOW, Plan
from memgpt_lite.lab.bench.report import Figure, Row, Section, Target, latency_figures, short_count
from memgpt_lite.lab.bench.stats import percentile

LANG_NAMES = {"en": "English", "zh": "Chinese"}
# Keyword search, p50 of one memory-tool call (the targets in docs/benchmarks.md).
KEYWORD_TARGETS = {100_000: Target("p50", 3, "ms"), 1_000_000: Target("p50", 10, "ms")}


def store_benchmark(size: int, *, queries: int = 300, batch: int = 1000, seed: int = 7) -> dict:
    """Build a temporary store with `size` messages; time inserts and conversation_search."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        agent = store.create_agent("bench", {}, {"human": ("", 5000)})
        msgs = synthetic_messages(rng, size)
        t0 = time.perf_counter()
        for i in range(0, size, batch):
            store.add_messages(agent.id, msgs[i:i + batch])
        insert_s = time.perf_counter() - t0
        tools = MemoryTools(store, agent.id)
        qs = synthetic_queries(rng, queries)
        lat, totals = [], []
        for q in qs:
            t = time.perf_counter()
            out = tools.execute("conversation_search", {"query": q})
            lat.append((time.perf_counter() - t) * 1000)
            totals.append(int(out.text.split(", ")[1].split()[0]))
        size_mb = db_megabytes(store)
        store.close()
    return {"messages": size, "insert_seconds": round(insert_s, 2),
            "insert_msgs_per_s": round(size / insert_s), "queries": len(qs),
            "search_p50_ms": round(percentile(lat, 50), 2),
            "search_p95_ms": round(percentile(lat, 95), 2),
            "search_max_ms": round(max(lat), 2),
            "median_matches": int(statistics.median(totals)), "db_mb": round(size_mb, 1)}



@dataclass
class Corpus:
    lang: str
    home: Path  # a data dir (MEMGPT_LITE_HOME) holding memgpt_lite.db
    store: Store
    agent_id: int
    target: str = ""  # what the store was opened from (open_store), for child processes
    messages: int = 0
    passages: int = 0
    message_seconds: float = 0.0
    passage_seconds: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(7))


def open_corpus(home: Path, lang: str) -> Corpus:
    from memgpt_lite.engine.config import DB_FILENAME, Settings
    from memgpt_lite.engine.memory import default_blocks

    settings = Settings(context_window=ENGINE_WINDOW)
    target = str(home / DB_FILENAME)
    store = open_store(target)
    # Created as Agent.open creates agents, so the engine and chat sections can open it.
    row = store.create_agent(BENCH_AGENT, settings.to_dict(), default_blocks(settings.block_limit))
    return Corpus(lang, home, store, row.id, target, rng=random.Random(f"corpus-{lang}"))


def grow_messages(corpus: Corpus, size: int, batch: int) -> None:
    """Bulk insert through the public API: Store.add_messages, one transaction per batch.
    Generating the text is not timed."""
    while corpus.messages < size:
        n = min(batch, size - corpus.messages)
        msgs = corpus_messages(corpus.rng, corpus.lang, corpus.messages, n)
        t = time.perf_counter()
        corpus.store.add_messages(corpus.agent_id, msgs)
        corpus.message_seconds += time.perf_counter() - t
        corpus.messages += n


def grow_passages(corpus: Corpus, size: int, batch: int) -> None:
    """Store.add_passage calls inside one Store.transaction() per batch."""
    while corpus.passages < size:
        n = min(batch, size - corpus.passages)
        texts = [corpus_passage(corpus.rng, corpus.lang) for _ in range(n)]
        store, agent_id = corpus.store, corpus.agent_id
        t = time.perf_counter()
        with store.transaction():
            for text in texts:
                store.add_passage(agent_id, text, created_at="2026-01-01T00:00:00Z")
        corpus.passage_seconds += time.perf_counter() - t
        corpus.passages += n


def search_latencies(corpus: Corpus, tool: str, queries: list[str]) -> list[float]:
    """Seconds per call of the memory tool the model uses (search + formatting the page),
    after a few untimed warm-up calls."""
    tools = MemoryTools(corpus.store, corpus.agent_id)
    for q in queries[:5]:
        tools.execute(tool, {"query": q})
    out = []
    for q in queries:
        t = time.perf_counter()
        tools.execute(tool, {"query": q})
        out.append(time.perf_counter() - t)
    return out


def db_megabytes(store: Store) -> float:
    return store.disk_bytes() / 1e6


def run_store(workdir: Path, plan: Plan, progress: Callable[[str], None],
              at_size: Callable[[Corpus, int], None] | None = None,
              ) -> tuple[Section, dict[str, Corpus]]:
    """`at_size(corpus, size)` runs after each size's message search (the hybrid section)."""
    section = Section("store", "Store at scale", _STORE_METHOD.format(batch=plan.batch))
    corpora = {}
    for lang in plan.langs:
        corpus = open_corpus(workdir / lang, lang)
        corpora[lang] = corpus
        section.data[lang] = _store_lang(corpus, plan, progress, section.rows, at_size)
    return section, corpora


_STORE_METHOD = (
    "One SQLite file per language, grown in place to each size through the public API "
    "(Store.add_messages with {batch:,} messages per transaction; Store.add_passage calls "
    "inside one Store.transaction() per {batch:,}); text generation is not timed. Latency is "
    "one call of the conversation_search / archival_search memory tool (FTS5 search plus "
    "formatting the page the model reads), on synthetic queries, after 5 warm-up calls. "
    "Size: the database file after a WAL checkpoint, holding messages only.")


def _store_lang(corpus: Corpus, plan: Plan, progress: Callable[[str], None],
                rows: list[Row], at_size: Callable[[Corpus, int], None] | None = None,
                ) -> dict[str, Any]:
    name, lang = LANG_NAMES[corpus.lang], corpus.lang
    queries = corpus_queries(random.Random(f"queries-{lang}"), lang, plan.queries)
    data: dict[str, Any] = {"conversation_search": {}, "archival_search": {}, "db_mb": {}}
    sizes = plan.zh_sizes if lang == "zh" else plan.sizes
    for size in sizes:
        grow_messages(corpus, size, plan.batch)
        data["db_mb"][size] = round(db_megabytes(corpus.store), 2)
        progress(f"store · {name}: {size:,} messages "
                 f"({corpus.messages / corpus.message_seconds:,.0f} rows/s); searching")
        lat = search_latencies(corpus, "conversation_search", queries)
        data["conversation_search"][size] = [round(x * 1000, 3) for x in lat]
        rows.append(Row(f"conversation_search · {name} · {short_count(size)} messages",
                        latency_figures(lat), KEYWORD_TARGETS.get(size)))
        if at_size is not None:
            at_size(corpus, size)
    for size in sizes:
        grow_passages(corpus, size, plan.batch)
        progress(f"store · {name}: {size:,} passages "
                 f"({corpus.passages / corpus.passage_seconds:,.0f} rows/s); searching")
        lat = search_latencies(corpus, "archival_search", queries)
        data["archival_search"][size] = [round(x * 1000, 3) for x in lat]
        rows.append(Row(f"archival_search · {name} · {short_count(size)} passages",
                        latency_figures(lat)))
    rows.extend(_store_totals(corpus, data))
    return data


def _store_totals(corpus: Corpus, data: dict[str, Any]) -> list[Row]:
    name, top = LANG_NAMES[corpus.lang], max(data["db_mb"])
    data.update(messages_per_s=round(corpus.messages / corpus.message_seconds),
                passages_per_s=round(corpus.passages / corpus.passage_seconds))
    per_100k = data["db_mb"][top] / top * 100_000
    return [
        Row(f"bulk insert · {name} messages ({short_count(corpus.messages)})",
            [Figure(data["messages_per_s"], "rows/s")]),
        Row(f"bulk insert · {name} passages ({short_count(corpus.passages)})",
            [Figure(data["passages_per_s"], "rows/s")]),
        Row(f"database size · {name} messages (file at {short_count(top)}: "
            f"{data['db_mb'][top]:,.0f} MB)", [Figure(round(per_100k, 1), "MB per 100k messages")]),
    ]

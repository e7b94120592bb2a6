"""The hybrid search section: vector storage, the dense scan and hybrid search at scale,
and each embedder's throughput.

It rides on the store section's English corpus: at each size, the messages added since the
last size get vectors, and a hybrid `conversation_search` (query embedding included) is
timed beside the keyword one. Stored vectors are random unit vectors of the embedder's
dimension (embedding a million messages with a local model takes hours; the scan costs the
same whatever the vectors hold); queries are embedded by the real embedder. Without an
embedder (`--embedder` / MEMGPT_LITE_EMBEDDER) the rows use 384-dimensional random query
vectors and say that the query embedding is not included.

Each size is measured in a child process (`python -m memgpt_lite.lab.bench.hybrid`): the
vectors, numpy and the model stay out of the suite's process, whose later sections fork
chat processes and measure their peak memory.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.lab.bench.corpus import corpus_messages, corpus_queries
from memgpt_lite.lab.bench.report import Figure, Row, Section, latency_figures, short_count

_METHOD = (
    "On the store section's English corpus, at each size: the new messages get random unit "
    "vectors of the embedder's dimension (int8, Store.put_vectors, 10,000 per transaction; "
    "the exact scan costs the same whatever the vectors hold), then one conversation_search "
    "memory-tool call with the dense side on (query embedding, exact numpy scan of every "
    "vector, fusion, the page) per synthetic query, after 5 warm-ups. The dense scan alone is "
    "timed on random query vectors. Storage: growth of the database file per 100k vectors. "
    "Throughput: {texts} corpus messages embedded in batches of 32 (as the background indexer "
    "does), and {queries} single-query embeddings, per embedder.")


class HybridBench:
    """Collects the hybrid rows while the store section grows the English corpus; each
    size is measured by a child process (see the module docstring)."""

    def __init__(self, specs: list[str], queries: int, progress: Callable[[str], None]):
        self.specs, self.queries, self.progress = specs, queries, progress
        self.section = Section("hybrid", "Hybrid search",
                               _METHOD.format(texts=THROUGHPUT_TEXTS, queries=QUERY_RUNS))
        self.dim = 384
        self.measured = 0

    def at_size(self, corpus: Any, size: int) -> None:
        """Called by the store section when the English corpus holds `size` messages."""
        if corpus.lang != "en":
            return
        args = [sys.executable, "-m", "memgpt_lite.lab.bench.hybrid", corpus.target,
                str(corpus.agent_id), str(size), str(self.queries),
                *(["--throughput"] if not self.measured else []),
                *(f"--embedder={spec}" for spec in self.specs)]
        started = time.perf_counter()
        done = subprocess.run(args, stdout=subprocess.PIPE, check=True, text=True)
        self.section.seconds += time.perf_counter() - started
        result = json.loads(done.stdout)
        self.section.rows += [Row(r["label"], [Figure(**f) for f in r["figures"]])
                              for r in result["rows"]]
        self.section.data.setdefault("vector_mb_per_100k", {}).update(
            {int(k): v for k, v in result["growth"].items()})
        self.dim, self.measured = result["dim"], size

    def finish(self) -> Section:
        """The section, with the storage row from the largest batch of vectors added."""
        growth = self.section.data.get("vector_mb_per_100k") or {}
        if growth:
            added, per_100k = max(growth.items())
            self.section.rows.insert(0, Row(
                f"vector storage · int8, {self.dim} dimensions (measured over {added:,} "
                "vectors)", [Figure(per_100k, "MB per 100k messages")]))
        return self.section


class _Worker:
    """One size's measurements, in the child process (the methods of the section)."""

    def __init__(self, embedders: list[Any], queries: int, progress: Callable[[str], None]):
        self.embedders, self.queries, self.progress = embedders, queries, progress
        self.embedder = embedders[0] if embedders else None
        self.dim, self.model, self.vectored = 384, "bench:random-384", 0
        self.section = Section("hybrid", "Hybrid search", "")
        if self.embedder is not None:
            self.dim = self.embedder.embed(["probe"]).shape[1]
            self.model = self.embedder.name

    def run(self, corpus: Any, size: int, throughput: bool) -> dict[str, Any]:
        self.vectored = sum(corpus.store.vector_models(corpus.agent_id).values())
        if throughput:
            self._throughput(corpus)
        self._add_vectors(corpus, size)
        queries = corpus_queries(random.Random("queries-en"), "en", self.queries)
        self._scan_row(corpus, size)
        self._hybrid_row(corpus, size, queries)
        return {"rows": [r.to_dict() for r in self.section.rows], "dim": self.dim,
                "growth": self.section.data.get("vector_mb_per_100k", {})}

    def _add_vectors(self, corpus: Any, size: int) -> None:
        import numpy as np

        from memgpt_lite.lab.bench.store import db_megabytes

        before, added = db_megabytes(corpus.store), size - self.vectored
        gen, last = np.random.default_rng(size), 0
        while chunk := [i for i, _ in corpus.store.texts_to_embed(
                corpus.agent_id, "messages", self.model, limit=10_000, after_id=last)]:
            vecs = gen.standard_normal((len(chunk), self.dim)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            corpus.store.put_vectors(corpus.agent_id, "messages", self.model, chunk, vecs)
            last = chunk[-1]
        self.vectored = size
        self.progress(f"hybrid · {size:,} messages have vectors; searching")
        grown = db_megabytes(corpus.store) - before
        if added >= 10_000:
            growth = self.section.data.setdefault("vector_mb_per_100k", {})
            growth[added] = round(grown / added * 100_000, 1)

    def _scan_row(self, corpus: Any, size: int) -> None:
        import numpy as np

        gen = np.random.default_rng(1)
        times = []
        for i in range(max(20, self.queries // 4) + 3):
            q = gen.standard_normal(self.dim).astype(np.float32)
            q /= np.linalg.norm(q)
            t = time.perf_counter()
            corpus.store.dense_scores(corpus.agent_id, "messages", self.model, q)
            if i >= 3:  # the first calls load the vectors into memory
                times.append(time.perf_counter() - t)
        self.section.rows.append(Row(f"dense scan alone · exact, int8 · {short_count(size)} "
                                     "vectors", latency_figures(times)))

    def _hybrid_row(self, corpus: Any, size: int, queries: list[str]) -> None:
        from memgpt_lite.engine.dense import DenseRecall

        tools = MemoryTools(corpus.store, corpus.agent_id)
        tools.dense = DenseRecall(corpus.store, corpus.agent_id, _Named(self))
        for q in queries[:5]:
            tools.execute("conversation_search", {"query": q})
        times = []
        for q in queries:
            t = time.perf_counter()
            out = tools.execute("conversation_search", {"query": q})
            times.append(time.perf_counter() - t)
            if any(getattr(e, "error", None) for e in out.events):
                raise RuntimeError(f"the embedder failed during the benchmark: {out.events}")
        what = (f"query embedded by {self.embedder.name}" if self.embedder is not None
                else "query embedding not included")
        self.section.rows.append(Row(f"hybrid conversation_search · {short_count(size)} "
                                     f"messages · {what}", latency_figures(times)))

    def _throughput(self, corpus: Any) -> None:
        texts = [m.content[0]["text"] for m in
                 corpus_messages(random.Random("throughput"), "en", 0, THROUGHPUT_TEXTS)]
        for embedder in self.embedders:
            self.progress(f"hybrid · embedding throughput of {embedder.name}")
            embedder.embed(texts[:8])  # loads the model
            t = time.perf_counter()
            for start in range(0, len(texts), 32):
                rows = embedder.embed(texts[start:start + 32])
            rate = len(texts) / (time.perf_counter() - t)
            lat = []
            for text in texts[:QUERY_RUNS]:
                t = time.perf_counter()
                embedder.embed([text], query=True)
                lat.append(time.perf_counter() - t)
            self.section.rows.append(Row(
                f"embedding · {embedder.name} ({rows.shape[1]} dimensions)",
                [Figure(round(rate, 1), "messages/s"),
                 *[Figure(f.value, f.unit, f"query {f.name}") for f in latency_figures(lat)]]))


class _Named:
    """The bench's query embedder: the configured one, or random unit vectors."""

    def __init__(self, bench: _Worker):
        self.bench = bench
        self.name = bench.model

    def embed(self, texts: list[str], *, query: bool = False) -> Any:
        import numpy as np

        if self.bench.embedder is not None:
            return self.bench.embedder.embed(texts, query=query)
        rows = np.random.default_rng(len(texts[0])).standard_normal((len(texts), self.bench.dim))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


THROUGHPUT_TEXTS = 512
QUERY_RUNS = 50


def main(argv: list[str] | None = None) -> int:
    """The child: `DB AGENT_ID SIZE QUERIES [--throughput] [--embedder=SPEC ...]`; prints
    the rows as JSON on stdout, progress on stderr."""
    import argparse
    import os
    from types import SimpleNamespace

    from memgpt_lite.engine.embeddings import EmbeddingConfig
    from memgpt_lite.engine.store import open_store
    from memgpt_lite.lab.bench.report import StderrProgress

    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.bench.hybrid")
    for name in ("db", "agent_id", "size", "queries"):
        parser.add_argument(name)
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--embedder", action="append", default=[])
    args = parser.parse_args(argv)
    embedders = [EmbeddingConfig.from_env({**os.environ, "MEMGPT_LITE_EMBEDDER": spec}).build()
                 for spec in args.embedder]
    with open_store(args.db) as store:
        corpus = SimpleNamespace(store=store, agent_id=int(args.agent_id), lang="en")
        worker = _Worker([e for e in embedders if e is not None], int(args.queries),
                         StderrProgress())
        print(json.dumps(worker.run(corpus, int(args.size), args.throughput)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

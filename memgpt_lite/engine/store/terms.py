"""Keyword search outside SQLite's index: the terms FTS5 indexes, and the BM25 it computes.

A store that is not SQLite (Postgres) must rank exactly as the SQLite store does: a replay
always runs on SQLite (see snapshot.py), so a search that ranked otherwise live would make
every strict replay of that session diverge, and users would find other things on the
other backend. So the words are cut by FTS5's own tokenizer (`porter unicode61`, run in an
in-memory SQLite database: stemming, case folding and diacritics as FTS5 does them, CJK as
`search.index_text` makes it), and `bm25` below is FTS5's formula, term for term, in the
same order of operations, so the scores are the same floats.

Nothing happens at import: the in-memory database opens on first use.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from memgpt_lite.engine.store.sqlite.fts import TOKENIZER

K1, B = 1.2, 0.75  # FTS5's bm25() defaults
MAX_TOKEN_CHARS = 100  # a longer token is kept as its start plus a hash (index key limits)


@dataclass(frozen=True)
class Phrase:
    """One term of a MATCH expression (see `search.match_terms`): its tokens, in order, and
    whether the last one is a prefix."""

    tokens: tuple[str, ...]
    prefix: bool

    def freq(self, doc: list[str]) -> int:
        """How often the phrase occurs in a document's token list (FTS5's phrase count)."""
        n = len(self.tokens)
        if not n:
            return 0
        *head, last = self.tokens
        count = 0
        for i in range(len(doc) - n + 1):
            tail = doc[i + n - 1]
            if ((tail.startswith(last) if self.prefix else tail == last)
                    and all(doc[i + j] == t for j, t in enumerate(head))):
                count += 1
        return count


class Tokenizer:
    """FTS5's tokenizer, through a contentless FTS5 table and its vocabulary of instances
    in a private in-memory database. Thread-safe (one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(":memory:", check_same_thread=False)
            db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, content='', "
                       f"tokenize='{TOKENIZER}')")
            db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
            self._db = db
        return self._db

    def counts(self, texts: list[str]) -> list[tuple[dict[str, int], int]]:
        """Per text: how often each token occurs, and how many tokens it has."""
        out: list[tuple[dict[str, int], int]] = [({}, 0) for _ in texts]
        rows = self._run(texts, "SELECT doc, term, count(*) FROM v GROUP BY doc, term")
        for doc, term, n in rows:
            counts, length = out[doc - 1]
            counts[term] = n
            out[doc - 1] = (counts, length + n)
        return out

    def token_lists(self, texts: list[str]) -> list[list[str]]:
        """Per text: its tokens in order."""
        out: list[list[str]] = [[] for _ in texts]
        for doc, term in self._run(texts, "SELECT doc, term FROM v ORDER BY doc, offset"):
            out[doc - 1].append(term)
        return out

    def _run(self, texts: list[str], sql: str) -> list[tuple]:
        with self._lock:
            db = self._conn()
            db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)",
                           [(i, t) for i, t in enumerate(texts, 1) if t])
            try:
                return db.execute(sql).fetchall()
            finally:
                db.execute("INSERT INTO t(t) VALUES ('delete-all')")


TOKENIZER_INSTANCE = Tokenizer()


def phrases(strings: list[str]) -> list[Phrase]:
    """The terms as `search.match_terms` writes them (`"text"` or `"text"*`), tokenised as
    FTS5 tokenises a query."""
    bodies, prefixes = [], []
    for term in strings:
        prefix = term.endswith("*")
        body = term[:-1] if prefix else term
        if len(body) >= 2 and body[0] == body[-1] == '"':
            body = body[1:-1].replace('""', '"')
        bodies.append(body)
        prefixes.append(prefix)
    tokens = TOKENIZER_INSTANCE.token_lists(bodies)
    return [Phrase(tuple(t), prefix) for t, prefix in zip(tokens, prefixes)]


def idf(rows: int, hits: int) -> float:
    """FTS5's inverse document frequency of a phrase found in `hits` of `rows` rows."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else 1e-6


def bm25(freqs: Iterable[float], idfs: list[float], length: int, avgdl: float) -> float:
    """FTS5's BM25 of one row (positive: higher is better): phrases in the order of the MATCH
    expression, the row's length in tokens, the average length of the agent's rows."""
    score, d = 0.0, float(length)
    for i, f in enumerate(freqs):
        score += idfs[i] * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl)))
    return score  # bm25() returns -score; the SQLite store ranks by -bm25(), the same float


def key(token: str) -> str:
    """A token as an index key: itself, or when very long its start plus a hash (a prefix
    query still finds it by its start)."""
    if len(token) <= MAX_TOKEN_CHARS:
        return token
    digest = hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]
    return f"{token[:MAX_TOKEN_CHARS]}#{digest}"

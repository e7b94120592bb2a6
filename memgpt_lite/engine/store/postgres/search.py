"""Keyword search in the Postgres store: what FTS5 does for the SQLite store, on a GIN index.

Each row with text keeps FTS5's tokens of its `index_text` (store/terms.py) as a tsvector of
agent-keyed lexemes (`terms`), the counts above 1 (`term_counts`) and its length in tokens;
`search_stats` keeps each agent's rows and tokens, `term_docs` how many rows hold each term
(so counting a term costs one index lookup, not a visit of its rows). A search then runs the
SQLite store's
steps with the same numbers: the query's terms (`search.match_terms`), the rarest of them
while they match at most RANK_CAP rows (`search.candidate_terms`, each count capped as
FTS5's is), the newest RANK_CAP rows matching any (`ORDER BY id DESC`), and FTS5's BM25 over
the agent's own rows. So both stores find and rank the same rows with the same scores.

`PgIndex` is this backend's `core.KeywordIndex`.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from memgpt_lite.engine import search
from memgpt_lite.engine.store import terms
from memgpt_lite.engine.store.terms import TOKENIZER_INSTANCE, Phrase

KINDS = ("messages", "passages")
_CHUNK = 2_000  # rows per statement when an agent is checked or re-indexed
_HINT = "run `memgpt-lite doctor --repair` to rebuild it"


def lexeme(agent_id: int, token: str) -> str:
    return f"{int(agent_id)}:{terms.key(token)}"


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery(agent_id: int, phrase: Phrase) -> str:
    """The phrase as a tsquery: its tokens (a superset of the phrase when it has several;
    the exact count is taken from the text), the last one a prefix if the phrase is."""
    parts = [_quoted(lexeme(agent_id, t)) for t in phrase.tokens]
    if phrase.prefix:
        parts[-1] = _quoted(f"{int(agent_id)}:{phrase.tokens[-1]}") + ":*"
    return "(" + " & ".join(parts) + ")"


class PgIndex:
    """The keyword index of a Postgres store: the index columns of each written row, the
    agent's totals, and BM25 search over them (see the module docstring)."""

    def __init__(self, db: Any):
        self.db = db  # a PostgresDatabase

    def _q(self, sql: str, params: Any = ()) -> list[tuple]:
        return self.db.query(sql, params)

    def _x(self, sql: str, params: Any = ()) -> None:
        self.db.execute(sql, params)

    def create_agent(self, agent_id: int) -> None:
        self._x("INSERT INTO search_stats (agent_id, kind) VALUES (?, 'messages'), "
                "(?, 'passages')", (agent_id, agent_id))

    def drop_agent(self, agent_id: int) -> None:
        pass  # the agent's rows, totals and counts go with it (ON DELETE CASCADE)

    def optimize(self, agent_id: int) -> None:
        pass  # no segments to merge: the store VACUUMs after a forget (see store.py)

    # ---------------------------------------------------------------- the rows' columns

    def insert_columns(self, agent_id: int, texts: list[str],
                       ) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]:
        return (("terms", "term_counts", "length"), ("array_to_tsvector(?::text[])", "?", "?"),
                self._analyse(agent_id, texts))

    def inserted(self, kind: str, agent_id: int, rows: list[tuple[int, str]],
                 values: list[tuple[Any, ...]]) -> None:
        self._stats_add(agent_id, kind, sum(1 for _, text in rows if text),
                        sum(v[2] for v in values), [v[0] for v in values])

    def remove(self, kind: str, agent_id: int, rows: list[tuple[int, str]]) -> None:
        """Take rows about to be deleted or changed out of the agent's totals (their index
        columns still hold what was counted)."""
        ids = [i for i, _ in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            gone = self._q(f"SELECT index_text, length, tsvector_to_array(terms) FROM {kind} "
                           f"WHERE agent_id = ? AND id IN ({', '.join('?' * len(chunk))})",
                           (agent_id, *chunk))
            self._stats_add(agent_id, kind, -sum(1 for r in gone if r[0]),
                            -sum(r[1] for r in gone), [r[2] for r in gone], sign=-1)

    def add(self, kind: str, agent_id: int, rows: list[tuple[int, str]]) -> None:
        """Index rows whose text changed: their columns anew, and into the totals."""
        analysed = self._analyse(agent_id, [text for _, text in rows])
        self.db.executemany(f"UPDATE {kind} SET terms = array_to_tsvector(?::text[]), "
                            "term_counts = ?, length = ? WHERE agent_id = ? AND id = ?",
                            [(*a, agent_id, i) for (i, _), a in zip(rows, analysed)])
        self.inserted(kind, agent_id, rows, analysed)

    # ---------------------------------------------------------------- writing

    def _analyse(self, agent_id: int, texts: list[str]) -> list[tuple[Any, Any, int]]:
        """For each index text: (lexemes for `terms`, `term_counts`, length); (None, None,
        0) for no text (not indexed, as FTS5 skips it)."""
        counted = iter(TOKENIZER_INSTANCE.counts([t for t in texts if t]))
        out: list[tuple[Any, Any, int]] = []
        for text in texts:
            if not text:
                out.append((None, None, 0))
                continue
            counts, length = next(counted)
            keyed: dict[str, int] = {}
            for token, n in counts.items():
                key = lexeme(agent_id, token)
                keyed[key] = keyed.get(key, 0) + n
            extra = {k: n for k, n in keyed.items() if n > 1}
            out.append((list(keyed), Jsonb(extra) if extra else None, length))
        return out

    def _stats_add(self, agent_id: int, kind: str, rows: int, tokens: int,
                   lexemes: list[list[str] | None], sign: int = 1) -> None:
        """Count rows written (sign 1) or deleted (sign -1) into the agent's totals: `rows`
        with text, their `tokens`, and each row's lexemes into `term_docs`."""
        if rows or tokens:
            self._x("UPDATE search_stats SET rows = rows + ?, tokens = tokens + ? "
                    "WHERE agent_id = ? AND kind = ?", (rows, tokens, agent_id, kind))
        docs: dict[str, int] = {}
        for row in lexemes:
            for lex in row or ():
                docs[lex] = docs.get(lex, 0) + sign
        if not docs:
            return
        self._x("INSERT INTO term_docs (agent_id, kind, lexeme, docs) SELECT ?, ?, x, n "
                "FROM unnest(?::text[], ?::bigint[]) AS u(x, n) ON CONFLICT (agent_id, kind, "
                "lexeme) DO UPDATE SET docs = term_docs.docs + excluded.docs",
                (agent_id, kind, list(docs), list(docs.values())))
        if sign < 0:
            self._x("DELETE FROM term_docs WHERE agent_id = ? AND kind = ? AND "
                    "lexeme = ANY(?::text[]) AND docs <= 0", (agent_id, kind, list(docs)))

    # ---------------------------------------------------------------- searching

    def scores(self, kind: str, agent_id: int, query: str, where: list[str],
               params: list[Any]) -> list[tuple[int, float, int]]:
        """(id, BM25, seq; 0 for passages) of the newest RANK_CAP rows of the agent matching
        any chosen term of the query and the extra `where` conditions (on `m`)."""
        strings = search.match_terms(query)
        if not strings:
            return []
        phrases = dict(zip(strings, terms.phrases(strings)))
        capped = self._doc_freqs(kind, agent_id, list(phrases.values()), search.RANK_CAP + 1)
        df = dict(zip(strings, capped))
        picked = search.candidate_terms(strings, df.__getitem__)
        chosen = [phrases[s] for s in picked]
        # A count under the cap is exact; a term past it (the rarest, yet common) is counted.
        hits = [df[s] if df[s] <= search.RANK_CAP
                else self._doc_freqs(kind, agent_id, [phrases[s]], None)[0] for s in picked]
        rows = self._candidates(kind, agent_id, chosen, where, params)
        if not rows:
            return []
        n_rows, n_tokens = self._q("SELECT rows, tokens FROM search_stats WHERE agent_id = ? "
                                   "AND kind = ?", (agent_id, kind))[0]
        idfs = [terms.idf(n_rows, n) for n in hits]
        avgdl = n_tokens / n_rows
        return [(i, terms.bm25(freqs, idfs, length, avgdl), seq)
                for i, length, seq, freqs in rows]

    def _doc_freqs(self, kind: str, agent_id: int, phrases: list[Phrase],
                   cap: int | None) -> list[int]:
        """How many of the agent's rows hold each phrase (counting stops at `cap`):
        a term from `term_docs`, a prefix from the index, a phrase of several tokens from
        the rows' text."""
        counts = [0] * len(phrases)
        exact = {lexeme(agent_id, p.tokens[0]) for p in phrases
                 if len(p.tokens) == 1 and not p.prefix}
        docs = dict(self._q("SELECT lexeme, docs FROM term_docs WHERE agent_id = ? AND "
                            "kind = ? AND lexeme = ANY(?::text[])",
                            (agent_id, kind, list(exact)))) if exact else {}
        prefixes = [(i, p) for i, p in enumerate(phrases) if len(p.tokens) == 1 and p.prefix]
        if prefixes:
            limit = f" LIMIT {int(cap)}" if cap is not None else ""
            parts = [f"(SELECT count(*) FROM (SELECT 1 FROM {kind} WHERE agent_id = ? AND "
                     f"terms @@ ?::tsquery{limit}) s{i})" for i, _ in prefixes]
            params = [x for _, p in prefixes for x in (agent_id, tsquery(agent_id, p))]
            for (i, _), n in zip(prefixes, self._q("SELECT " + ", ".join(parts), params)[0]):
                counts[i] = n
        for i, p in enumerate(phrases):
            if len(p.tokens) == 1 and not p.prefix:
                n = docs.get(lexeme(agent_id, p.tokens[0]), 0)
                counts[i] = n if cap is None else min(n, cap)  # ties as SQLite's capped count
            elif len(p.tokens) > 1:
                counts[i] = len(self._phrase_rows(kind, agent_id, p))
        return counts

    def _phrase_rows(self, kind: str, agent_id: int, phrase: Phrase) -> list[int]:
        rows = self._q(f"SELECT id, index_text FROM {kind} WHERE agent_id = ? AND "
                       "terms @@ ?::tsquery", (agent_id, tsquery(agent_id, phrase)))
        docs = TOKENIZER_INSTANCE.token_lists([r[1] for r in rows])
        return [r[0] for r, doc in zip(rows, docs) if phrase.freq(doc)]

    def _candidates(self, kind: str, agent_id: int, chosen: list[Phrase], where: list[str],
                    params: list[Any]) -> list[tuple[int, int, int, list[int]]]:
        """(id, length, seq, each phrase's frequency) of the newest RANK_CAP matching rows.
        A term's frequency in a row is 1 unless `term_counts` says more; a prefix's is the
        number of the row's terms it starts, plus their counts above 1."""
        usable = [p for p in chosen if p.tokens]
        if not usable:
            return []
        phrase_text = any(len(p.tokens) > 1 for p in usable)  # then counted from the text
        has = ", ".join("m.terms @@ ?::tsquery" for _ in chosen)
        starts = "".join(", (SELECT count(*) FROM unnest(tsvector_to_array(m.terms)) x "
                         "WHERE x ^@ ?)" for p in chosen if p.prefix and len(p.tokens) == 1)
        sql = (f"SELECT m.id, m.length, {'m.seq' if kind == 'messages' else '0'}, "
               f"m.term_counts, {'m.index_text' if phrase_text else 'NULL'}, {has}{starts} "
               f"FROM {kind} m WHERE m.agent_id = ? AND m.terms @@ ?::tsquery"
               f"{''.join(' AND ' + w for w in where)} ORDER BY m.id DESC"
               + ("" if phrase_text else f" LIMIT {search.RANK_CAP}"))
        args = [tsquery(agent_id, p) if p.tokens else "" for p in chosen]
        args += [_prefix(agent_id, p) for p in chosen if p.prefix and len(p.tokens) == 1]
        query = " | ".join(tsquery(agent_id, p) for p in usable)
        rows = self._q(sql, [*args, agent_id, query, *params])
        docs = TOKENIZER_INSTANCE.token_lists([r[4] or "" for r in rows]) if phrase_text \
            else [[]] * len(rows)
        out = []
        for row, doc in zip(rows, docs):
            freqs = _freqs(agent_id, chosen, row, doc)
            if any(freqs):
                out.append((row[0], row[1], row[2], freqs))
        return out[:search.RANK_CAP]

    # ---------------------------------------------------------------- checking, rebuilding

    def problems(self, agent_id: int, name: str) -> list[str]:
        """[] when every row's index columns and the agent's totals agree with its text."""
        found = []
        for kind in KINDS:
            differ = self._rows_out_of_step(kind, agent_id)
            totals = self._q(f"SELECT count(*) FILTER (WHERE index_text <> ''), "
                             f"coalesce(sum(length), 0) FROM {kind} WHERE agent_id = ?",
                             (agent_id,))[0]
            stats = self._q("SELECT rows, tokens FROM search_stats WHERE agent_id = ? AND "
                            "kind = ?", (agent_id, kind))
            if stats and tuple(stats[0]) == tuple(totals) and not differ \
                    and not self._term_docs_off(kind, agent_id):
                continue
            what = f"{differ} rows differ" if differ else "its totals differ"
            found.append(f"the {kind} search index of agent {name!r} is out of step with the "
                         f"stored {kind} ({what}); {_HINT}")
        return found

    def _rows_out_of_step(self, kind: str, agent_id: int) -> int:
        differ, after = 0, 0
        while rows := self._q(f"SELECT id, index_text, tsvector_to_array(terms), "
                              f"term_counts, length FROM {kind} WHERE agent_id = ? AND "
                              f"id > ? ORDER BY id LIMIT {_CHUNK}", (agent_id, after)):
            for row, (lexemes, counts, length) in zip(
                    rows, self._analyse(agent_id, [r[1] for r in rows])):
                expected = (sorted(lexemes) if lexemes is not None else None,
                            counts.obj if counts is not None else None, length)
                actual = (sorted(row[2]) if row[2] is not None else None, row[3], row[4])
                differ += expected != actual
            after = rows[-1][0]
        return differ

    def _term_docs_off(self, kind: str, agent_id: int) -> int:
        """How many terms' row counts in `term_docs` differ from the rows' own terms."""
        return self._q(f"SELECT count(*) FROM (SELECT x, count(*) AS n FROM {kind} m, "
                       "unnest(tsvector_to_array(m.terms)) x WHERE m.agent_id = ? GROUP BY x) "
                       "a FULL JOIN (SELECT lexeme, docs FROM term_docs WHERE agent_id = ? AND "
                       "kind = ?) b ON a.x = b.lexeme WHERE a.n IS DISTINCT FROM b.docs",
                       (agent_id, agent_id, kind))[0][0]

    def rebuild(self, agent_id: int) -> None:
        """Recompute the index columns of every row of the agent, and its totals."""
        for kind in KINDS:
            after = 0
            while rows := self._q(f"SELECT id, index_text FROM {kind} WHERE agent_id = ? "
                                  f"AND id > ? ORDER BY id LIMIT {_CHUNK}", (agent_id, after)):
                analysed = self._analyse(agent_id, [r[1] for r in rows])
                self.db.executemany(f"UPDATE {kind} SET terms = array_to_tsvector(?::text[]), "
                           "term_counts = ?, length = ? WHERE agent_id = ? AND id = ?",
                           [(*a, agent_id, r[0]) for r, a in zip(rows, analysed)])
                after = rows[-1][0]
            self._x(f"INSERT INTO search_stats (agent_id, kind, rows, tokens) SELECT ?, ?, "
                    f"count(*) FILTER (WHERE index_text <> ''), coalesce(sum(length), 0) FROM "
                    f"{kind} WHERE agent_id = ? ON CONFLICT (agent_id, kind) DO UPDATE SET "
                    "rows = excluded.rows, tokens = excluded.tokens", (agent_id, kind, agent_id))
            self._x("DELETE FROM term_docs WHERE agent_id = ? AND kind = ?", (agent_id, kind))
            self._x(f"INSERT INTO term_docs (agent_id, kind, lexeme, docs) SELECT ?, ?, x, "
                    f"count(*) FROM {kind} m, unnest(tsvector_to_array(m.terms)) x WHERE "
                    "m.agent_id = ? GROUP BY x", (agent_id, kind, agent_id))


def _prefix(agent_id: int, phrase: Phrase) -> str:
    return f"{int(agent_id)}:{phrase.tokens[-1]}"


def _freqs(agent_id: int, chosen: list[Phrase], row: tuple, doc: list[str]) -> list[int]:
    """Each chosen phrase's frequency in a candidate row (see `_candidates`): row is (id,
    length, seq, term_counts, text, holds phrase i..., terms each prefix starts...)."""
    repeats: dict[str, int] = row[3] or {}
    holds = row[5:5 + len(chosen)]
    starts = iter(row[5 + len(chosen):])
    out = []
    for phrase, held in zip(chosen, holds):
        # One count per single-token prefix, held or not, so the next prefix reads its own.
        started = next(starts) if phrase.prefix and len(phrase.tokens) == 1 else 0
        if not phrase.tokens or not held:
            out.append(0)
        elif len(phrase.tokens) > 1:
            out.append(phrase.freq(doc))
        elif phrase.prefix:
            begin = _prefix(agent_id, phrase)
            out.append(started + sum(n - 1 for k, n in repeats.items() if k.startswith(begin)))
        else:
            out.append(repeats.get(lexeme(agent_id, phrase.tokens[0]), 1))
    return out

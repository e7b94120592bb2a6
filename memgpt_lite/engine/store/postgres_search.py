"""Keyword search in the Postgres store: what FTS5 does for the SQLite store, on a GIN index.

Each row with text keeps FTS5's tokens of its `index_text` (store/terms.py) as a tsvector of
agent-keyed lexemes (`terms`), the counts above 1 (`term_counts`) and its length in tokens;
`search_stats` keeps each agent's rows and tokens. A search then runs the SQLite store's
steps with the same numbers: the query's terms (`search.match_terms`), the rarest of them
while they match at most RANK_CAP rows (`search.candidate_terms`, each count capped as
FTS5's is), the newest RANK_CAP rows matching any (`ORDER BY id DESC`), and FTS5's BM25 over
the agent's own rows. So both stores find and rank the same rows with the same scores.

A mixin of `postgres.PostgresStore`.
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


class PgSearchMixin:
    """The index columns of each written row, and BM25 search over them."""

    _q: Any
    _x: Any
    _many: Any
    transaction: Any

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

    def _stats_add(self, agent_id: int, kind: str, rows: int, tokens: int) -> None:
        if rows or tokens:
            self._x("UPDATE search_stats SET rows = rows + %s, tokens = tokens + %s "
                    "WHERE agent_id = %s AND kind = %s", (rows, tokens, agent_id, kind))

    # ---------------------------------------------------------------- searching

    def _keyword_rows(self, kind: str, agent_id: int, query: str, where: list[str],
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
        n_rows, n_tokens = self._q("SELECT rows, tokens FROM search_stats WHERE agent_id = %s "
                                   "AND kind = %s", (agent_id, kind))[0]
        idfs = [terms.idf(n_rows, n) for n in hits]
        avgdl = n_tokens / n_rows
        return [(i, terms.bm25(freqs, idfs, length, avgdl), seq)
                for i, length, seq, freqs in rows]

    def _doc_freqs(self, kind: str, agent_id: int, phrases: list[Phrase],
                   cap: int | None) -> list[int]:
        """How many of the agent's rows hold each phrase (counting stops at `cap`), in one
        statement; a phrase of several tokens is counted from the rows' text."""
        single = [(i, p) for i, p in enumerate(phrases) if len(p.tokens) == 1]
        counts = [0] * len(phrases)
        if single:
            limit = f" LIMIT {int(cap)}" if cap is not None else ""
            parts = [f"(SELECT count(*) FROM (SELECT 1 FROM {kind} WHERE agent_id = %s AND "
                     f"terms @@ %s::tsquery{limit}) s{i})" for i, _ in single]
            params = [x for _, p in single for x in (agent_id, tsquery(agent_id, p))]
            found = self._q("SELECT " + ", ".join(parts), params)[0]
            for (i, _), n in zip(single, found):
                counts[i] = n
        for i, p in enumerate(phrases):
            if len(p.tokens) > 1:
                counts[i] = len(self._phrase_rows(kind, agent_id, p))
        return counts

    def _phrase_rows(self, kind: str, agent_id: int, phrase: Phrase) -> list[int]:
        rows = self._q(f"SELECT id, index_text FROM {kind} WHERE agent_id = %s AND "
                       "terms @@ %s::tsquery", (agent_id, tsquery(agent_id, phrase)))
        docs = TOKENIZER_INSTANCE.token_lists([r[1] for r in rows])
        return [r[0] for r, doc in zip(rows, docs) if phrase.freq(doc)]

    def _candidates(self, kind: str, agent_id: int, chosen: list[Phrase], where: list[str],
                    params: list[Any]) -> list[tuple[int, int, int, list[int]]]:
        """(id, length, seq, each phrase's frequency) of the newest RANK_CAP matching rows."""
        usable = [p for p in chosen if p.tokens]
        if not usable:
            return []
        phrase_text = any(len(p.tokens) > 1 for p in usable)  # then counted from the text
        exact = [lexeme(agent_id, t) for p in usable for t in p.tokens]
        prefixes = [f"{int(agent_id)}:{p.tokens[-1]}" for p in usable if p.prefix]
        sql = (f"SELECT m.id, m.length, {'m.seq' if kind == 'messages' else '0'}, "
               "(SELECT jsonb_object_agg(x, coalesce(m.term_counts -> x, '1'::jsonb)) "
               "FROM unnest(tsvector_to_array(m.terms)) x WHERE x = ANY(%s::text[]) OR "
               f"x ^@ ANY(%s::text[])), {'m.index_text' if phrase_text else 'NULL'} "
               f"FROM {kind} m WHERE m.agent_id = %s AND m.terms @@ %s::tsquery"
               f"{''.join(' AND ' + w for w in where)} ORDER BY m.id DESC"
               + ("" if phrase_text else f" LIMIT {search.RANK_CAP}"))
        query = " | ".join(tsquery(agent_id, p) for p in usable)
        rows = self._q(sql, [exact, prefixes, agent_id, query, *params])
        docs = TOKENIZER_INSTANCE.token_lists([r[4] or "" for r in rows]) if phrase_text \
            else [[]] * len(rows)
        out = []
        for (i, length, seq, found, _), doc in zip(rows, docs):
            freqs = [_freq(agent_id, p, found or {}, doc) for p in chosen]
            if any(freqs):
                out.append((i, length, seq, freqs))
        return out[:search.RANK_CAP]

    # ---------------------------------------------------------------- checking, rebuilding

    def search_problems(self, agent_id: int, name: str) -> list[str]:
        """[] when every row's index columns and the agent's totals agree with its text."""
        found = []
        for kind in KINDS:
            differ = self._rows_out_of_step(kind, agent_id)
            totals = self._q(f"SELECT count(*) FILTER (WHERE index_text <> ''), "
                             f"coalesce(sum(length), 0) FROM {kind} WHERE agent_id = %s",
                             (agent_id,))[0]
            stats = self._q("SELECT rows, tokens FROM search_stats WHERE agent_id = %s AND "
                            "kind = %s", (agent_id, kind))
            if stats and tuple(stats[0]) == tuple(totals) and not differ:
                continue
            what = f"{differ} rows differ" if differ else "its totals differ"
            found.append(f"the {kind} search index of agent {name!r} is out of step with the "
                         f"stored {kind} ({what}); {_HINT}")
        return found

    def _rows_out_of_step(self, kind: str, agent_id: int) -> int:
        differ, after = 0, 0
        while rows := self._q(f"SELECT id, index_text, tsvector_to_array(terms), "
                              f"term_counts, length FROM {kind} WHERE agent_id = %s AND "
                              f"id > %s ORDER BY id LIMIT {_CHUNK}", (agent_id, after)):
            for row, (lexemes, counts, length) in zip(
                    rows, self._analyse(agent_id, [r[1] for r in rows])):
                expected = (sorted(lexemes) if lexemes is not None else None,
                            counts.obj if counts is not None else None, length)
                actual = (sorted(row[2]) if row[2] is not None else None, row[3], row[4])
                differ += expected != actual
            after = rows[-1][0]
        return differ

    def reindex_agent(self, agent_id: int) -> None:
        """Recompute the index columns of every row of the agent, and its totals."""
        for kind in KINDS:
            after = 0
            while rows := self._q(f"SELECT id, index_text FROM {kind} WHERE agent_id = %s "
                                  f"AND id > %s ORDER BY id LIMIT {_CHUNK}", (agent_id, after)):
                analysed = self._analyse(agent_id, [r[1] for r in rows])
                self._many(f"UPDATE {kind} SET terms = array_to_tsvector(%s::text[]), "
                           "term_counts = %s, length = %s WHERE agent_id = %s AND id = %s",
                           [(*a, agent_id, r[0]) for r, a in zip(rows, analysed)])
                after = rows[-1][0]
            self._x(f"INSERT INTO search_stats (agent_id, kind, rows, tokens) SELECT %s, %s, "
                    f"count(*) FILTER (WHERE index_text <> ''), coalesce(sum(length), 0) FROM "
                    f"{kind} WHERE agent_id = %s ON CONFLICT (agent_id, kind) DO UPDATE SET "
                    "rows = excluded.rows, tokens = excluded.tokens", (agent_id, kind, agent_id))


def _freq(agent_id: int, phrase: Phrase, found: dict[str, int], doc: list[str]) -> int:
    """The phrase's frequency in a row, from its matching lexemes' counts (or its tokens)."""
    if not phrase.tokens:
        return 0
    if len(phrase.tokens) > 1:
        return phrase.freq(doc)
    if phrase.prefix:
        start = f"{int(agent_id)}:{phrase.tokens[0]}"
        return sum(n for k, n in found.items() if k.startswith(start))
    return found.get(lexeme(agent_id, phrase.tokens[0]), 0)

"""Retrieval quality of recall search: recall@5/@10 on a synthetic conversation.

    python -m memgpt_lite.retrieval_eval [--filler 4000] [--json]

Questions are phrased differently from the stored text, the way a model asks later; the
evidence turns hide among synthetic filler. `retrieval_eval()` returns a plain dict.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
from pathlib import Path
from typing import Callable

from .bench import synthetic_messages
from .store import _WORD, Store, index_text, match_expression, plain_text
from .types import Message


# --------------------------------------------------------------------------- retrieval eval
# Each case: evidence turns (what the user said) and a question phrased the way a model would
# ask it later. Written before running the eval, not adjusted to the search afterwards.

CASES: list[tuple[list[str], str]] = [
    (["I finally adopted a puppy last weekend, a beagle we named Biscuit."],
     "What is the name of the user's dog?"),
    (["My sister Maria just moved to Lisbon for her new job."],
     "Where does the user's sister live now?"),
    (["I'm allergic to peanuts, so please never suggest recipes with them."],
     "Does the user have any food allergies?"),
    (["We booked flights to Kyoto for the cherry blossom season in April.",
      "The Kyoto hotel is near Gion, we paid for four nights."],
     "When is the user travelling to Japan?"),
    (["My daughter's birthday party is on the 14th, she's turning seven."],
     "How old will the user's daughter be?"),
    (["I switched from running to swimming because my knee started hurting."],
     "Why did the user stop running?"),
    (["My manager Priya approved my transfer to the Berlin office."],
     "Who is the user's boss?"),
    (["I've been learning to play the cello for about three months now."],
     "What instrument is the user learning?"),
    (["Our wedding anniversary is June 3rd; we got married in 2015."],
     "When did the user get married?"),
    (["I drive a 2018 Subaru Outback, mostly for camping trips."],
     "What car does the user own?"),
    (["I work as a nurse in the pediatric ward at St. Mary's hospital."],
     "What is the user's job?"),
    (["My favourite band is Radiohead, I've seen them live three times."],
     "Which musicians does the user like most?"),
    (["I'm vegetarian, have been since college."], "Does the user eat meat?"),
    (["The deadline for the grant proposal moved to March 30.",
      "I still need to finish the budget section of the grant proposal."],
     "When is the proposal due?"),
    (["My cat Luna knocked my coffee onto the laptop keyboard, it's ruined now."],
     "What happened to the user's laptop?"),
    (["I want to run a half marathon in October, training starts next week."],
     "What race is the user training for?"),
    (["Please remember my wifi password hint: it's the name of my first street."],
     "What is the hint for the user's wifi password?"),
    (["We are renovating the kitchen, the contractor starts on Monday."],
     "Who is working on the user's kitchen remodel?"),
    (["I take my medication, levothyroxine, every morning before breakfast."],
     "What medicine does the user take daily?"),
    (["My son plays goalkeeper on the under-12 soccer team."],
     "What position does the user's son play in football?"),
    (["I prefer my coffee black, no sugar."], "How does the user take their coffee?"),
    (["I'm moving apartments on the 20th, the new place is in Brooklyn."],
     "Where is the user relocating?"),
    (["Our book club is reading 'The Remains of the Day' this month."],
     "Which novel is the user's reading group discussing?"),
    (["I hate flying; I get terrible anxiety on planes."], "Is the user afraid of air travel?"),
    (["My grandmother turns ninety next Saturday, we're throwing a party."],
     "When is grandma's 90th birthday celebration?"),
    (["My partner Alex is a chef at an Italian restaurant downtown.",
      "Alex works late on weekends, so we usually have dinner together on Mondays."],
     "What does the user's partner do for a living?"),
    (["I started a new job at a biotech startup in March.",
      "The startup makes diagnostic tests for rare diseases."],
     "Which company does the user work for and what does it make?"),
    (["部署博客前必须运行 hexo g"], "部署前要做什么"),
    (["我每天早上七点去健身房锻炼"], "我一般什么时候去健身房？"),
    (["我的护照下个月就要过期了，需要尽快续签"], "护照什么时候到期？"),
    (["来週の月曜日に歯医者の予約があります"], "歯医者の予約はいつですか"),
    (["我们用 PostgreSQL 做主数据库，Redis 做缓存"], "缓存用的是什么？"),
]


def _build_eval_store(path: Path, filler: int, seed: int) -> tuple[Store, int, list[set[int]]]:
    """Filler messages with each case's evidence turns inserted at random positions."""
    rng = random.Random(seed)
    store = Store(path)
    agent_id = store.create_agent("eval", {}, {}).id
    rows: list[tuple[Message, int | None]] = [(m, None) for m in synthetic_messages(rng, filler)]
    for ci, (evidence, _) in enumerate(CASES):
        for text in evidence:
            msg = Message("user", [{"type": "text", "text": text}], 0, in_context=False,
                          created_at="2025-06-01T12:00:00Z")
            rows.insert(rng.randrange(len(rows) + 1), (msg, ci))
    for i, (m, _) in enumerate(rows):
        m.turn_id = 1 + i // 2
    store.add_messages(agent_id, [m for m, _ in rows])
    evidence_ids: list[set[int]] = [set() for _ in CASES]
    for m, ci in rows:
        if ci is not None:
            evidence_ids[ci].add(m.id)  # type: ignore[arg-type]
    return store, agent_id, evidence_ids


def _rank_ours(store: Store, agent_id: int, question: str, k: int) -> list[int]:
    return [h.id for h in store.search_messages(agent_id, question, per_page=k).hits]


def _rank_and(store: Store, agent_id: int, question: str, k: int) -> list[int]:
    """Baseline: FTS5's default, an implicit AND of every word of the question."""
    words = _WORD.findall(question.lower())
    if not words:
        return []
    expr = " ".join('"' + w + '"' for w in _WORD.findall(index_text(" ".join(words))))
    rows = store._db.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?",
        (expr, k)).fetchall()
    return [r[0] for r in rows]


def _trigram_ranker(store: Store) -> Callable[[Store, int, str, int], list[int]]:
    """Alternative CJK indexing for comparison: FTS5's trigram tokenizer, OR of query trigrams."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='trigram')")
    rows = store._db.execute("SELECT id, content, role FROM messages").fetchall()
    db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)",
                   [(r[0], plain_text(r[2], json.loads(r[1]))) for r in rows])

    def rank(_store: Store, _agent: int, question: str, k: int) -> list[int]:
        q = "".join(question.split())
        grams = {q[i:i + 3] for i in range(len(q) - 2)}
        if not grams:
            return []
        expr = " OR ".join('"' + g.replace('"', '""') + '"' for g in grams)
        return [r[0] for r in db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank "
                                         "LIMIT ?", (expr, k))]
    return rank


def _is_cjk(text: str) -> bool:
    return match_expression(text) is not None and any(ord(c) > 0x2e80 for c in text)


def retrieval_eval(*, filler: int = 4000, seed: int = 11) -> dict:
    """recall@5/@10 (share of evidence turns retrieved) and hit@k (any evidence retrieved)
    for our search and two alternatives, over CASES hidden among `filler` messages."""
    with tempfile.TemporaryDirectory() as tmp:
        store, agent_id, evidence = _build_eval_store(Path(tmp) / "eval.db", filler, seed)
        rankers = {"ours (OR, porter, stop words, CJK bigrams)": _rank_ours,
                   "baseline: AND of all words": _rank_and,
                   "alternative: trigram tokenizer": _trigram_ranker(store)}
        results = {name: _score(store, agent_id, evidence, fn) for name, fn in rankers.items()}
        store.close()
    return {"cases": len(CASES), "filler_messages": filler, "seed": seed, "results": results}


def _score(store: Store, agent_id: int, evidence: list[set[int]], rank) -> dict:
    groups: dict[str, list[dict]] = {"all": [], "english": [], "cjk": []}
    for (_, question), ev in zip(CASES, evidence):
        top = rank(store, agent_id, question, 10)
        row = {f"recall@{k}": len(ev & set(top[:k])) / len(ev) for k in (5, 10)}
        row.update({f"hit@{k}": float(bool(ev & set(top[:k]))) for k in (5, 10)})
        groups["all"].append(row)
        groups["cjk" if _is_cjk(question) else "english"].append(row)
    return {g: {m: round(sum(r[m] for r in rows) / len(rows), 3) for m in rows[0]}
            | {"n": len(rows)} for g, rows in groups.items() if rows}


def _print_retrieval(data: dict) -> None:
    print(f"{data['cases']} questions hidden among {data['filler_messages']} filler messages "
          f"(seed {data['seed']})")
    print(f"{'method':46} {'group':8} {'n':>3} {'recall@5':>9} {'recall@10':>10} "
          f"{'hit@5':>6} {'hit@10':>7}")
    for name, groups in data["results"].items():
        for g, m in groups.items():
            print(f"{name:46} {g:8} {m['n']:>3} {m['recall@5']:>9} {m['recall@10']:>10} "
                  f"{m['hit@5']:>6} {m['hit@10']:>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.retrieval_eval")
    parser.add_argument("--filler", type=int, default=4000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = retrieval_eval(filler=args.filler)
    print(json.dumps(data, indent=2)) if args.json else _print_retrieval(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmarks for the store: search latency / insert throughput, and retrieval quality.

    python -m memgpt_lite.bench store [--sizes 10000,100000] [--json]
    python -m memgpt_lite.bench retrieval [--json]

`store_benchmark()` and `retrieval_eval()` return plain dicts so a CLI command can reuse them;
only `main()` prints. The synthetic data is generated from a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from .memory import MemoryTools
from .store import _WORD, Store, index_text, match_expression, plain_text
from .types import Message

# --------------------------------------------------------------------------- synthetic text

NAMES = ["Ann", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kemi", "Liam", "Mei", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq"]
PLACES = ["the office", "Berlin", "the gym", "my parents' house", "the library", "Toronto",
          "the cafe on Main Street", "the airport", "the park", "the clinic", "Madrid",
          "the supermarket", "school", "the coworking space", "the beach"]
NOUNS = ["report", "budget", "presentation", "garden", "bike", "laptop", "recipe", "invoice",
         "playlist", "database", "migration", "newsletter", "spreadsheet", "car", "apartment",
         "tax return", "podcast", "camera", "sofa", "website", "meeting notes", "contract",
         "vacation photos", "running shoes", "router", "printer", "guitar", "novel", "lesson plan",
         "quarterly review", "shopping list", "train tickets", "dentist appointment", "deploy script"]
VERBS = ["finished", "started", "forgot about", "reviewed", "fixed", "cancelled", "moved",
         "rewrote", "shared", "printed", "ordered", "returned", "cleaned", "updated", "lost"]
ADJS = ["new", "old", "broken", "shared", "monthly", "quick", "long", "expensive", "cheap",
        "second", "final", "messy", "weekly", "urgent", "small"]
TIMES = ["yesterday", "this morning", "last week", "on Friday", "tonight", "after lunch",
         "two days ago", "next Tuesday", "over the weekend", "before the holidays"]
TECH = ["Python decorators", "SQLite indexes", "Docker volumes", "CSS grid", "git rebase",
        "OAuth tokens", "unit tests", "async functions", "regular expressions", "cron jobs"]
TEMPLATES = [
    "I {verb} the {adj} {noun} {time}.",
    "{name} and I {verb} the {noun} at {place} {time}.",
    "Can you help me with the {noun}? I {verb} it {time} and it still looks {adj}.",
    "Remind me to call {name} about the {noun} {time}.",
    "Honestly the {adj} {noun} is driving me crazy.",
    "Do you think I should bring the {noun} to {place}?",
    "{name} said the {noun} from {place} was too {adj}.",
    "Can you explain how {tech} work? I keep getting confused.",
    "What should I cook tonight? I have rice, eggs and some spinach.",
    "My friend {name} lives near {place} and has a dog that barks all night.",
    "I need to name the {noun} something better than {adj} {noun}.",
    "Traffic to {place} was terrible {time}, it took an hour.",
    "I'm thinking of learning more about {tech} {time}.",
    "The weather at {place} was lovely {time}.",
    "Let's plan the {noun} for {time}, {name} can join too.",
    "My brother keeps asking me about the {noun}.",
    "I had coffee with {name} at {place} {time}.",
    "Can we play some music while I work on the {noun}?",
    "I take the train to {place} most days.",
    "What's a good way to organise the {adj} {noun}?",
]
REPLIES = [
    "Sure, here is a short plan for the {noun}: start small and check it {time}.",
    "That sounds frustrating. Maybe ask {name} to look at the {noun} with you.",
    "Good idea. I'd keep the {noun} somewhere safe until {time}.",
    "Here's how {tech} work, step by step, with one small example.",
    "Got it. I'll keep that in mind.",
    "You could try a simpler version of the {noun} first.",
    "Happy to help with the {noun}. What have you tried so far?",
]
ZH = ["我今天在{p}处理{n}，有点累。", "明天要和同事讨论{n}的问题。", "周末打算去{p}散步，顺便买点东西。",
      "这个{n}比我想象的复杂多了。", "你能帮我整理一下{n}吗？", "昨天晚上看了一部很好看的电影。"]
ZH_N = ["报告", "预算", "数据库", "网站", "合同", "照片", "账单", "代码", "计划", "课程"]
ZH_P = ["公司", "公园", "图书馆", "超市", "咖啡店", "学校"]


def _fill(rng: random.Random, template: str) -> str:
    noun = rng.choice(NOUNS)
    return template.format(verb=rng.choice(VERBS), adj=rng.choice(ADJS), noun=noun,
                           time=rng.choice(TIMES), name=rng.choice(NAMES),
                           place=rng.choice(PLACES), tech=rng.choice(TECH))


def synthetic_text(rng: random.Random, role: str) -> str:
    if rng.random() < 0.1:
        return "".join(rng.choice(ZH).format(n=rng.choice(ZH_N), p=rng.choice(ZH_P))
                       for _ in range(rng.randint(1, 2)))
    pool = TEMPLATES if role == "user" else REPLIES + TEMPLATES[:6]
    return " ".join(_fill(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3)))


def synthetic_messages(rng: random.Random, n: int, start_turn: int = 1) -> list[Message]:
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        day = 1 + (i * 365) // max(n, 1)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1735689600 + day * 86400 + i % 86400))
        out.append(Message(role, [{"type": "text", "text": synthetic_text(rng, role)}],
                           start_turn + i // 2, created_at=at, in_context=False))
    return out


def synthetic_queries(rng: random.Random, n: int) -> list[str]:
    shapes = ["what did I say about the {noun}", "{name} {noun}", "when did I {verb} the {noun}?",
              "{adj} {noun} at {place}", "how do {tech} work", "{noun}", "数据库的问题",
              "the {noun} {name} mentioned {time}", "did we talk about {place}?"]
    return [_fill(rng, rng.choice(shapes)) for _ in range(n)]


# --------------------------------------------------------------------------- store benchmark


def _percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def store_benchmark(size: int, *, queries: int = 300, batch: int = 1000, seed: int = 7) -> dict:
    """Build a temporary store with `size` messages; time inserts and conversation_search."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
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
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size_mb = (Path(tmp) / "bench.db").stat().st_size / 1e6
        store.close()
    return {"messages": size, "insert_seconds": round(insert_s, 2),
            "insert_msgs_per_s": round(size / insert_s), "queries": len(qs),
            "search_p50_ms": round(_percentile(lat, 50), 2),
            "search_p95_ms": round(_percentile(lat, 95), 2),
            "search_max_ms": round(max(lat), 2),
            "median_matches": int(statistics.median(totals)), "db_mb": round(size_mb, 1)}


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


# --------------------------------------------------------------------------- command


def _print_store(rows: list[dict]) -> None:
    cols = ["messages", "insert_seconds", "insert_msgs_per_s", "search_p50_ms", "search_p95_ms",
            "search_max_ms", "median_matches", "db_mb"]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>17}" for c in cols))


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
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.bench")
    sub = parser.add_subparsers(dest="which", required=True)
    s = sub.add_parser("store", help="search latency and insert throughput")
    s.add_argument("--sizes", default="10000,100000")
    s.add_argument("--queries", type=int, default=300)
    s.add_argument("--json", action="store_true")
    r = sub.add_parser("retrieval", help="recall@5/@10 on a synthetic conversation")
    r.add_argument("--filler", type=int, default=4000)
    r.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.which == "store":
        rows = [store_benchmark(int(n), queries=args.queries) for n in args.sizes.split(",")]
        print(json.dumps(rows, indent=2)) if args.json else _print_store(rows)
    else:
        data = retrieval_eval(filler=args.filler)
        print(json.dumps(data, indent=2)) if args.json else _print_retrieval(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmarks for the store: search latency and insert throughput on synthetic text.

    python -m memgpt_lite.bench store [--sizes 10000,100000] [--json]

`store_benchmark()` returns a plain dict so a CLI command can reuse it; only `main()` prints.
The synthetic data is generated from a fixed seed. Retrieval quality: retrieval_eval.py.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from .memory import MemoryTools
from .store import Store
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


# --------------------------------------------------------------------------- command


def _print_store(rows: list[dict]) -> None:
    cols = ["messages", "insert_seconds", "insert_msgs_per_s", "search_p50_ms", "search_p95_ms",
            "search_max_ms", "median_matches", "db_mb"]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>17}" for c in cols))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.bench")
    sub = parser.add_subparsers(dest="which", required=True)
    s = sub.add_parser("store", help="search latency and insert throughput")
    s.add_argument("--sizes", default="10000,100000")
    s.add_argument("--queries", type=int, default=300)
    s.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [store_benchmark(int(n), queries=args.queries) for n in args.sizes.split(",")]
    print(json.dumps(rows, indent=2)) if args.json else _print_store(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

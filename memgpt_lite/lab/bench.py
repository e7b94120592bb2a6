"""`memgpt-lite bench`: the benchmark suite (issue 7) — offline, one table, optional JSON.

    memgpt-lite bench [--quick] [--json OUT]
    python -m memgpt_lite.lab.bench store [--sizes 10000,100000] [--json]   # the store alone

Sections, in one run on one machine:
  store      conversation_search / archival_search latency at 10k, 100k, 1M rows, English and
             Chinese; bulk insert throughput; database size per 100k messages
  engine     the engine's own time per model call (model excluded) with 1M messages in recall
  tokens     the scripted long session of session_bench: tokens, cache hits, cost vs layouts
  startup    `memgpt-lite --help` and `memgpt-lite chat` to its first prompt (subprocesses)
  memory     peak RSS of a chat process whose store holds the largest corpus
The databases are built once per run in a temporary directory and shared by the sections.
Everything returns data; only `main()` and the progress callback print.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import select
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import Store

T = TypeVar("T", int, float)

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
EN_QUERIES = ["what did I say about the {noun}", "{name} {noun}", "when did I {verb} the {noun}?",
              "{adj} {noun} at {place}", "how do {tech} work", "{noun}",
              "the {noun} {name} mentioned {time}", "did we talk about {place}?"]
# The mixed-language set of `bench store` and retrieval_eval: English with one Chinese line in
# ten, drawn from the first words of the Chinese corpus below.
ZH = ["我今天在{p}处理{n}，有点累。", "明天要和同事讨论{n}的问题。", "周末打算去{p}散步，顺便买点东西。",
      "这个{n}比我想象的复杂多了。", "你能帮我整理一下{n}吗？", "昨天晚上看了一部很好看的电影。"]
MIXED_QUERIES = [*EN_QUERIES[:6], "数据库的问题", *EN_QUERIES[6:]]


def _fill(rng: random.Random, template: str) -> str:
    noun = rng.choice(NOUNS)  # drawn first: keeps the corpora identical to earlier runs
    return template.format(verb=rng.choice(VERBS), adj=rng.choice(ADJS), noun=noun,
                           time=rng.choice(TIMES), name=rng.choice(NAMES),
                           place=rng.choice(PLACES), tech=rng.choice(TECH))


def synthetic_text(rng: random.Random, role: str) -> str:
    if rng.random() < 0.1:
        return "".join(rng.choice(ZH).format(n=rng.choice(ZH_NOUNS[:10]),
                                             p=rng.choice(ZH_PLACES[:6]))
                       for _ in range(rng.randint(1, 2)))
    return corpus_text(rng, "en", role)


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
    return [_fill(rng, rng.choice(MIXED_QUERIES)) for _ in range(n)]


ZH_NAMES = ["张伟", "李娜", "王芳", "刘洋", "陈静", "杨帆", "赵磊", "黄敏", "周杰", "吴婷", "徐明",
            "孙丽", "马超", "朱琳", "胡军", "郭佳"]
ZH_PLACES = ["公司", "公园", "图书馆", "超市", "咖啡店", "学校", "医院", "机场", "火车站", "健身房",
             "北京", "上海", "杭州", "成都", "深圳", "广州", "老家", "办公室"]
ZH_NOUNS = ["报告", "预算", "数据库", "网站", "合同", "照片", "账单", "代码", "计划", "课程", "简历",
            "电脑", "自行车", "菜谱", "发票", "会议纪要", "旅行计划", "房租", "护照", "论文", "手机",
            "快递", "生日礼物", "年终总结", "服务器", "部署脚本", "演示文稿", "体检报告"]
ZH_VERBS = ["完成了", "开始写", "忘记了", "检查了", "修好了", "取消了", "改了", "分享了", "打印了",
            "订了", "退了", "整理了", "更新了", "弄丢了", "讨论了"]
ZH_TIMES = ["昨天", "今天早上", "上周", "周五", "今晚", "午饭后", "前天", "下周二", "周末", "节假日前"]
ZH_TEMPLATES = [
    "我{t}{v}{n}。", "{name}和我{t}在{p}{v}{n}。", "你能帮我看看{n}吗？我{t}{v}，还是有问题。",
    "提醒我{t}给{name}打电话说{n}的事。", "这个{n}真让人头疼。", "你觉得我应该把{n}带到{p}吗？",
    "{name}说{p}的{n}太贵了。", "我{t}在{p}和{name}喝咖啡。", "去{p}的路上堵车堵了一个小时。",
    "{t}{p}的天气特别好。", "我们{t}一起准备{n}吧，{name}也可以来。", "我哥哥一直在问{n}的事情。",
    "我想{t}多学一点关于{n}的东西。", "{name}住在{p}附近，养了一只很吵的狗。",
]
ZH_REPLIES = ["好的，关于{n}，我建议先从小处开始，{t}再检查一遍。", "听起来很麻烦，也许可以请{name}帮忙看看{n}。",
              "明白了，我会记住的。", "可以先试试一个简单一点的{n}。", "没问题，{n}你已经试过哪些办法了？"]
ZH_QUERIES = ["{n}", "{name}的{n}", "我什么时候{v}{n}", "{p}的{n}", "{t}在{p}", "和{name}聊过{n}吗",
              "{name}说了什么", "关于{n}的问题", "{p}"]
PASSAGES_EN = ["{name}'s {noun} is kept at {place}.", "The user {verb} the {adj} {noun} {time}.",
               "{name} prefers the {adj} {noun}; ask before changing it.",
               "Note on {tech}: the user found them confusing {time}.",
               "Plan: bring the {noun} to {place} {time} with {name}."]
PASSAGES_ZH = ["{name}的{n}放在{p}。", "用户{t}{v}{n}。", "{name}更喜欢{p}的{n}，改之前先问一下。",
               "计划：{t}和{name}一起把{n}带到{p}。"]


def _fill_zh(rng: random.Random, template: str) -> str:
    return template.format(name=rng.choice(ZH_NAMES), p=rng.choice(ZH_PLACES),
                           n=rng.choice(ZH_NOUNS), v=rng.choice(ZH_VERBS), t=rng.choice(ZH_TIMES))


def corpus_text(rng: random.Random, lang: str, role: str) -> str:
    """One message of the single-language corpora the store section searches."""
    if lang == "zh":
        pool = ZH_TEMPLATES if role == "user" else ZH_REPLIES + ZH_TEMPLATES[:4]
        return "".join(_fill_zh(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3)))
    pool = TEMPLATES if role == "user" else REPLIES + TEMPLATES[:6]
    return " ".join(_fill(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3)))


def corpus_messages(rng: random.Random, lang: str, start: int, n: int) -> list[Message]:
    """Messages start .. start+n-1 of a corpus: alternating user/assistant, two per turn,
    about 3 minutes apart (1M messages span about 6 years)."""
    out = []
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577836800 + i * 180))
        out.append(Message(role, [{"type": "text", "text": corpus_text(rng, lang, role)}],
                           1 + i // 2, created_at=at, in_context=False))
    return out


def corpus_passage(rng: random.Random, lang: str) -> str:
    if lang == "zh":
        return "".join(_fill_zh(rng, rng.choice(PASSAGES_ZH)) for _ in range(rng.randint(1, 2)))
    return " ".join(_fill(rng, rng.choice(PASSAGES_EN)) for _ in range(rng.randint(1, 2)))


def corpus_queries(rng: random.Random, lang: str, n: int) -> list[str]:
    if lang == "zh":
        return [_fill_zh(rng, rng.choice(ZH_QUERIES)) for _ in range(n)]
    return [_fill(rng, rng.choice(EN_QUERIES)) for _ in range(n)]


# --------------------------------------------------------------------------- store benchmark (legacy CLI)


def percentile(values: Sequence[T], p: float) -> T:
    """Nearest-rank percentile: the smallest value with at least p% of `values` at or below
    it (an observed value, never an interpolation). `values` must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


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
        size_mb = db_megabytes(store)
        store.close()
    return {"messages": size, "insert_seconds": round(insert_s, 2),
            "insert_msgs_per_s": round(size / insert_s), "queries": len(qs),
            "search_p50_ms": round(percentile(lat, 50), 2),
            "search_p95_ms": round(percentile(lat, 95), 2),
            "search_max_ms": round(max(lat), 2),
            "median_matches": int(statistics.median(totals)), "db_mb": round(size_mb, 1)}


def _print_store(rows: list[dict]) -> None:
    cols = ["messages", "insert_seconds", "insert_msgs_per_s", "search_p50_ms", "search_p95_ms",
            "search_max_ms", "median_matches", "db_mb"]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>17}" for c in cols))


# --------------------------------------------------------------------------- report model


@dataclass
class Figure:
    value: float | int
    unit: str
    name: str = ""  # e.g. "p50"; the target names the figure it applies to


@dataclass
class Target:
    figure: str  # Figure.name the target applies to ("" for a row's only figure)
    below: float
    unit: str

    def text(self) -> str:
        what = f" ({self.figure})" if self.figure else ""
        return f"< {_number(self.below)} {self.unit}{what}"


@dataclass
class Row:
    label: str
    figures: list[Figure]
    target: Target | None = None
    note: str = ""

    @property
    def ok(self) -> bool | None:
        if self.target is None:
            return None
        fig = next(f for f in self.figures if f.name == self.target.figure)
        return fig.value < self.target.below

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "figures": [asdict(f) for f in self.figures],
                "target": None if self.target is None else
                {**asdict(self.target), "text": self.target.text()},
                "ok": self.ok, "note": self.note}


@dataclass
class Section:
    id: str
    title: str
    method: str
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "method": self.method,
                "seconds": round(self.seconds, 1), "rows": [r.to_dict() for r in self.rows],
                "data": self.data}


def _ms(seconds: list[float]) -> list[Figure]:
    ms = [s * 1000 for s in seconds]
    return [Figure(round(percentile(ms, 50), 3), "ms", "p50"),
            Figure(round(percentile(ms, 95), 3), "ms", "p95")]


def _number(v: float | int) -> str:
    if isinstance(v, int) or abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _figure_text(f: Figure) -> str:
    if f.unit == "×":
        text = f"×{f.value:.3f}"
    elif f.unit.startswith("USD"):
        text = f"${f.value:.4f}{f.unit[3:]}"
    else:
        text = f"{_number(f.value)} {f.unit}"
    return f"{f.name} {text}" if f.name else text


def _count(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else (
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}")


class Progress:
    """One line per step on stderr, with the time since the run started."""

    def __init__(self, stream: Any = None):
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f}s] {message}", file=self.stream,
              flush=True)


# --------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gb": _ram_gb(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "sqlite": sqlite3.sqlite_version, "os": platform.platform(terse=True),
            "machine": platform.machine()}


def _cpu_model() -> str:
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")  # e.g. "24576000 kB"
    return round(int(total.split()[0]) / 1024 / 1024, 1) if total else None


def _proc_field(path: str, name: str) -> str | None:
    """The value of the first `name: value` line of a /proc file; None off Linux."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None  # no /proc: the callers fall back to what platform knows
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith(name)), None)


def machine_line(m: dict[str, Any]) -> str:
    ram = f", {m['ram_gb']} GB RAM" if m.get("ram_gb") else ""
    return (f"{m['cpu']} ({m['cores']} cores{ram}) · {m['python']} · SQLite {m['sqlite']} · "
            f"{m['os']}")


# --------------------------------------------------------------------------- plan


@dataclass
class Plan:
    """How big each section runs; `--quick` and the test overrides shrink it."""

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    zh_sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)  # the Chinese corpus
    queries: int = 200
    batch: int = 10_000
    engine_turns: int = 200
    session_turns: int = 500
    budgets: tuple[int, ...] = (8_000, 32_000)
    help_runs: int = 7
    chat_runs: int = 5
    langs: tuple[str, ...] = ("en", "zh")

    @classmethod
    def quick(cls) -> Plan:
        # Chinese text inserts at about half the English rate (bigrams): 10k only, so the
        # quick run stays under a minute on 2 cores.
        return cls(sizes=(10_000, 100_000), zh_sizes=(10_000,), queries=100, engine_turns=40,
                   session_turns=100, help_runs=5, chat_runs=3)


LANG_NAMES = {"en": "English", "zh": "Chinese"}
BENCH_AGENT = "bench"
ENGINE_WINDOW = 32_000
QUEUE_FILL = 0.60  # of the budget: a realistic full queue just under the 70% warn level


# --------------------------------------------------------------------------- store at scale


@dataclass
class Corpus:
    lang: str
    home: Path  # a data dir (MEMGPT_LITE_HOME) holding memgpt_lite.db
    store: Store
    agent_id: int
    messages: int = 0
    passages: int = 0
    message_seconds: float = 0.0
    passage_seconds: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(7))


def open_corpus(home: Path, lang: str) -> Corpus:
    from memgpt_lite.engine.config import DB_FILENAME, Settings
    from memgpt_lite.engine.memory import default_blocks

    settings = Settings(context_window=ENGINE_WINDOW)
    store = Store(home / DB_FILENAME)
    # Created as Agent.open creates agents, so the engine and chat sections can open it.
    row = store.create_agent(BENCH_AGENT, settings.to_dict(), default_blocks(settings.block_limit))
    return Corpus(lang, home, store, row.id, rng=random.Random(f"corpus-{lang}"))


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
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # size of the file, not the WAL
    return store.path.stat().st_size / 1e6


def run_store(workdir: Path, plan: Plan,
              progress: Callable[[str], None]) -> tuple[Section, dict[str, Corpus]]:
    section = Section("store", "Store at scale", _STORE_METHOD.format(batch=plan.batch))
    corpora = {}
    for lang in plan.langs:
        corpus = open_corpus(workdir / lang, lang)
        corpora[lang] = corpus
        section.data[lang] = _store_lang(corpus, plan, progress, section.rows)
    return section, corpora


_STORE_METHOD = (
    "One SQLite file per language, grown in place to each size through the public API "
    "(Store.add_messages with {batch:,} messages per transaction; Store.add_passage calls "
    "inside one Store.transaction() per {batch:,}); text generation is not timed. Latency is "
    "one call of the conversation_search / archival_search memory tool (FTS5 search plus "
    "formatting the page the model reads), on synthetic queries, after 5 warm-up calls. "
    "Size: the database file after a WAL checkpoint, holding messages only.")


def _store_lang(corpus: Corpus, plan: Plan, progress: Callable[[str], None],
                rows: list[Row]) -> dict[str, Any]:
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
        target = Target("p50", 10, "ms") if size == 100_000 else None
        rows.append(Row(f"conversation_search · {name} · {_count(size)} messages", _ms(lat),
                        target))
    for size in sizes:
        grow_passages(corpus, size, plan.batch)
        progress(f"store · {name}: {size:,} passages "
                 f"({corpus.passages / corpus.passage_seconds:,.0f} rows/s); searching")
        lat = search_latencies(corpus, "archival_search", queries)
        data["archival_search"][size] = [round(x * 1000, 3) for x in lat]
        rows.append(Row(f"archival_search · {name} · {_count(size)} passages", _ms(lat)))
    rows.extend(_store_totals(corpus, data))
    return data


def _store_totals(corpus: Corpus, data: dict[str, Any]) -> list[Row]:
    name, top = LANG_NAMES[corpus.lang], max(data["db_mb"])
    data.update(messages_per_s=round(corpus.messages / corpus.message_seconds),
                passages_per_s=round(corpus.passages / corpus.passage_seconds))
    per_100k = data["db_mb"][top] / top * 100_000
    return [
        Row(f"bulk insert · {name} messages ({_count(corpus.messages)})",
            [Figure(data["messages_per_s"], "rows/s")]),
        Row(f"bulk insert · {name} passages ({_count(corpus.passages)})",
            [Figure(data["passages_per_s"], "rows/s")]),
        Row(f"database size · {name} messages (file at {_count(top)}: "
            f"{data['db_mb'][top]:,.0f} MB)", [Figure(round(per_100k, 1), "MB per 100k messages")]),
    ]


# --------------------------------------------------------------------------- engine overhead


class InstantModel:
    """A ModelClient that answers at once: a core_memory_replace call, then a short text.
    It adds up the time spent inside itself, so the benchmark can subtract the model."""

    def __init__(self) -> None:
        self.seconds, self.calls, self.focus = 0.0, 0, 0

    def stream(self, request: Any) -> Iterator[Any]:
        t = time.perf_counter()
        response = self._answer(request)
        self.calls += 1
        self.seconds += time.perf_counter() - t
        yield response

    def _answer(self, request: Any) -> Any:
        from memgpt_lite.lab.scripted import (
            estimate_usage,
            text_response,
            tool_response,
        )

        last = request.messages[-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            response = text_response("Noted, and updated your profile.")
        else:
            old, self.focus = self.focus, self.focus + 1
            response = tool_response([("core_memory_replace", {
                "label": "human", "old_content": f"Focus: turn {old}",
                "new_content": f"Focus: turn {self.focus}"})])
        response.usage = estimate_usage(request, response)  # lets the counter anchor
        return response


@dataclass
class EngineTimes:
    request: list[float] = field(default_factory=list)  # per model call: inputs + builds
    inputs: list[float] = field(default_factory=list)  # per model call
    builds: list[float] = field(default_factory=list)  # per model call (all its builds)
    pager: list[float] = field(default_factory=list)  # per model call
    dispatch: list[float] = field(default_factory=list)  # per tool call
    commit: list[float] = field(default_factory=list)  # per turn
    total: list[float] = field(default_factory=list)  # per model call (turn average)
    _inputs: float = 0.0
    _builds: float = 0.0


def instrument(agent: Any, times: EngineTimes) -> None:
    """Wrap the agent's real code paths (instance attributes shadow the methods) with
    perf_counter; nothing else about the loop changes."""
    inputs_fn, build_fn, prepare_fn = agent._inputs, agent.builder.build, agent.pager.prepare
    dispatch_fn, commit_fn = agent._dispatch, agent._commit

    def inputs(run: Any) -> Any:
        t = time.perf_counter()
        try:
            return inputs_fn(run)
        finally:
            times._inputs = time.perf_counter() - t

    def build(ctx: Any) -> Any:
        t = time.perf_counter()
        try:
            return build_fn(ctx)
        finally:
            times._builds += time.perf_counter() - t

    def prepare(ctx: Any, turn_id: int) -> Any:
        times._builds = 0.0
        t = time.perf_counter()
        built = yield from prepare_fn(ctx, turn_id)
        elapsed = time.perf_counter() - t
        times.request.append(times._inputs + times._builds)
        times.inputs.append(times._inputs)
        times.builds.append(times._builds)
        times.pager.append(elapsed - times._builds)
        return built

    agent._inputs, agent.builder.build, agent.pager.prepare = inputs, build, prepare
    agent._dispatch = _timed(dispatch_fn, times.dispatch)
    agent._commit = _timed(commit_fn, times.commit)


def _timed(fn: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            into.append(time.perf_counter() - t)
    return timed


def fill_queue(agent: Any, fraction: float) -> list[int]:
    """Put the newest stored turns back in the queue until the request is about `fraction`
    of the budget (estimated by the agent's own, calibrated counter)."""
    from memgpt_lite.engine.context import message_tokens

    store, agent_id = agent.store, agent.id
    queued = sorted({m.turn_id for m in store.context_messages(agent_id)})
    store.set_in_context(agent_id, queued, False)
    used = agent.context_report().used_tokens
    goal, turn, chosen = fraction * agent.settings.budget, store.max_turn_id(agent_id), []
    while used < goal and turn > 0:
        used += message_tokens(agent.counter, store.turn_messages(agent_id, turn))
        chosen.append(turn)
        turn -= 1
    store.set_in_context(agent_id, chosen, True)
    return sorted(chosen)


def run_engine(corpus: Corpus, plan: Plan, progress: Callable[[str], None]) -> Section:
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.config import Settings

    model = InstantModel()
    agent = Agent.open(corpus.store, BENCH_AGENT, model_client=model,
                       settings=Settings(context_window=ENGINE_WINDOW))
    try:
        human = agent.store.get_block(agent.id, "human")
        agent.edit_block("human", (human.value if human else "") + "\nFocus: turn 0")
        queue = fill_queue(agent, QUEUE_FILL)
        _drive(agent, model, queue, 5, EngineTimes())  # warm-up: calibrates the counter
        queue = fill_queue(agent, QUEUE_FILL)
        times = EngineTimes()
        instrument(agent, times)
        progress(f"engine: {len(queue)} turns in the queue, "
                 f"{agent.context_report().used_tokens:,} tokens; {plan.engine_turns} turns")
        _drive(agent, model, queue, plan.engine_turns, times)
        report = agent.context_report()
    finally:
        agent.close()
    return _engine_section(corpus, times, len(queue), report)


def _drive(agent: Any, model: InstantModel, queue: list[int], turns: int,
           times: EngineTimes) -> None:
    rng = random.Random("engine")
    for _ in range(turns):
        text = corpus_text(rng, "en", "user")
        model_s, calls = model.seconds, model.calls
        t = time.perf_counter()
        events = list(agent.step(text))
        wall = time.perf_counter() - t
        if not events[-1].completed:
            raise RuntimeError(f"an engine benchmark turn failed: {events[-2]}")
        n = model.calls - calls
        times.total.extend([(wall - (model.seconds - model_s)) / n] * n)
        # Keep the queue steady (outside the timing): the oldest turn leaves as one arrives.
        queue.append(events[-1].turn_id)
        agent.store.set_in_context(agent.id, [queue.pop(0)], False)


_ENGINE_METHOD = (
    "Agent.step driven with an instant scripted model (each turn: a core_memory_replace tool "
    "call, then a text reply, i.e. 2 model calls), on the English store holding {messages} "
    "messages in recall and {passages} passages, {window:,}-token window (budget {budget:,}), "
    "queue refilled to ~{fill:.0%} of the budget and kept there. The agent's real methods are "
    "wrapped with time.perf_counter: building the request = reading summary, queue and core "
    "memory from SQLite + ContextBuilder.build; pager check = Pager.prepare minus its builds; "
    "tool dispatch = Agent._dispatch of the memory tool; persisting = Agent._commit (one "
    "transaction). Total = wall time of Agent.step minus the time spent inside the model, per "
    "model call; it also covers storing the user text, request digests, events and usage.")


def _engine_section(corpus: Corpus, times: EngineTimes, queue_turns: int, report: Any) -> Section:
    from memgpt_lite.engine.config import Settings

    budget = Settings(context_window=ENGINE_WINDOW).budget
    method = _ENGINE_METHOD.format(messages=_count(corpus.messages), window=ENGINE_WINDOW,
                                   passages=_count(corpus.passages), budget=budget, fill=QUEUE_FILL)
    section = Section("engine", "Engine overhead per model call (model excluded)", method)
    section.rows = [
        Row("context: the queue at steady state",
            [Figure(queue_turns, "turns"), Figure(report.used_tokens, "tokens of the request"),
             Figure(corpus.messages, "messages in recall")]),
        Row("build the request: read summary, queue, core memory (SQLite)", _ms(times.inputs)),
        Row("build the request: ContextBuilder.build, all builds of the call", _ms(times.builds)),
        Row("build the request, total (per model call)", _ms(times.request)),
        Row("pager check, its builds excluded (per model call)", _ms(times.pager)),
        Row("tool dispatch: core_memory_replace (per tool call)", _ms(times.dispatch)),
        Row("persist the turn, one transaction (per turn)", _ms(times.commit)),
        Row("engine total per model call", _ms(times.total), Target("p50", 5, "ms")),
    ]
    section.data = {k: [round(x * 1000, 4) for x in v] for k, v in asdict(times).items()
                    if not k.startswith("_")}
    section.data.update(queue_turns=queue_turns, request_tokens=report.used_tokens,
                        budget=budget, recall_messages=corpus.messages)
    return section


# --------------------------------------------------------------------------- token economics

LAYOUTS = {"memgpt_lite": "memgpt_lite (DESIGN §4 layout)",
           "classic": "MemGPT classic (core memory in system)", "full": "full history"}


def run_tokens(plan: Plan, progress: Callable[[str], None]) -> Section:
    from memgpt_lite.lab import session_bench

    report = session_bench.run_benchmark(plan.session_turns, plan.budgets,
                                         progress=lambda m: progress(f"tokens: {m}"))
    method = (f"session_bench.run_benchmark: the scripted {plan.session_turns}-turn session "
              "through the real engine at each window, three layouts side by side in the same "
              f"run; usage from a {report['tokenizer']} tokenizer and a prompt-cache simulator; "
              "cost at list prices (tokens.PRICES: cache writes 1.25×, reads 0.1× input; "
              "summariser calls included). Full history stops when a request would overflow "
              "the window, so its ratios cover only the turns it ran.")
    section = Section("tokens", "Token economics", method)
    for window in plan.budgets:
        section.rows.extend(_token_rows(report, window))
    section.data = report
    return section


def _token_rows(report: dict[str, Any], window: int) -> list[Row]:
    rows = []
    k = f"{window // 1000}k window"
    for r in (r for r in report["results"] if r["context_window"] == window):
        stop = f", overflowed at turn {r['overflow_at_turn']}" if r["overflow_at_turn"] else ""
        rows.append(Row(f"{k} · {LAYOUTS[r['variant']]} · {r['turns_run']} turns{stop}", [
            Figure(r["input_tokens_per_turn"]["mean"], "tokens/turn", "input"),
            Figure(round(100 * r["cache_hit_share"], 1), "%", "cache hits"),
            Figure(r["cost_per_turn_usd"], "USD/turn", "cost")]))
    for ratio in (r for r in report["ratios"] if r["context_window"] == window):
        rows.append(Row(f"{k} · memgpt_lite ÷ {ratio['vs']} (turns 1–{ratio['over_turns']})", [
            Figure(ratio["input_tokens_per_turn"], "×", "input tokens"),
            Figure(ratio["cost_per_turn"], "×", "cost")]))
    return rows


# --------------------------------------------------------------------------- start-up, memory


def cli_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m memgpt_lite`."""
    script = Path(sys.executable).with_name("memgpt-lite")
    if script.exists():
        return [str(script)]
    found = shutil.which("memgpt-lite")
    return [found] if found else [sys.executable, "-m", "memgpt_lite"]


def chat_env(home: Path, base_url: str) -> dict[str, str]:
    return dict(os.environ, MEMGPT_LITE_HOME=str(home), ANTHROPIC_BASE_URL=base_url,
                ANTHROPIC_API_KEY="test", TERM="xterm-256color", COLUMNS="100", LINES="30")


def time_help(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([*cmd, "--help"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


PROMPT = "you› ".encode()


def time_first_prompt(cmd: list[str], env: dict[str, str], timeout: float = 60) -> tuple[float, float]:
    """`chat` on a pseudo-terminal: seconds until its input prompt is drawn, and the peak
    RSS (MB) of the process, which then gets /exit."""
    master, slave = os.openpty()
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, "chat", "--no-record"], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    try:
        out = _read_until(master, PROMPT, t + timeout)
        elapsed = time.perf_counter() - t
        if PROMPT not in out:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"chat showed no prompt within {timeout:.0f} s: {out[-300:]!r}")
        os.write(master, b"/exit\r")
        # Drain the terminal until the child closes it (a marker that never comes), so a
        # full pty buffer cannot block its exit.
        _read_until(master, b"\0never", time.perf_counter() + timeout)
        return elapsed, _reap(proc)
    finally:
        os.close(master)


def _read_until(fd: int, marker: bytes, deadline: float) -> bytes:
    out = b""
    while marker not in out:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.perf_counter()))
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the child and return its peak RSS in MB (ru_maxrss is in KiB on Linux);
    os.wait4 gives this one child's figure, unlike RUSAGE_CHILDREN's maximum over all."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{proc.args} exited with status {proc.returncode}")
    return usage.ru_maxrss * 1024 / 1e6


CHAT_LINES = ["Hi! Can you remind me what I said about the garden?",
              "Thanks. Also, Mei moved the budget meeting to Friday.", "/exit"]


def chat_peak_rss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS (MB) of a piped chat (one message per line): two turns against the fake
    server, then /exit."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*cmd, "chat", "--no-record", "--agent", BENCH_AGENT],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                env=env)
        assert proc.stdin is not None
        proc.stdin.write(("\n".join(CHAT_LINES) + "\n").encode())
        proc.stdin.close()
        try:
            return _reap(proc)
        except RuntimeError as exc:
            err.seek(0)
            raise RuntimeError(f"{exc}: {err.read()[-400:].decode(errors='replace')}") from None


def run_startup(plan: Plan, base_url: str, workdir: Path,
                progress: Callable[[str], None]) -> tuple[Section, list[float]]:
    cmd = cli_command()
    helps = [time_help(cmd) for _ in range(plan.help_runs)]
    progress(f"start-up: --help median {statistics.median(helps):.3f} s; timing chat")
    home, firsts, rss = workdir / "startup-home", [], []
    for _ in range(plan.chat_runs):
        elapsed, peak = time_first_prompt(cmd, chat_env(home, base_url))
        firsts.append(elapsed)
        rss.append(peak)
    shown = " ".join(cmd) if cmd[0] == sys.executable else Path(cmd[0]).name
    method = (f"Wall time of subprocesses of `{shown}` (median of {plan.help_runs} runs for "
              f"--help, {plan.chat_runs} for chat). First prompt: `chat --no-record` on a "
              "pseudo-terminal (stdlib pty) with ANTHROPIC_BASE_URL pointing at the local fake "
              "server and a fresh data dir (the first run creates the agent, later runs resume "
              "it); timed from spawn until the `you›` input prompt is drawn, then /exit.")
    section = Section("startup", "Start-up", method)
    section.rows = [
        Row("`memgpt-lite --help`", [Figure(round(statistics.median(helps), 3), "s", "median"),
                                     Figure(round(min(helps), 3), "s", "min")],
            Target("median", 0.3, "s")),
        Row("`memgpt-lite chat` to the first prompt",
            [Figure(round(statistics.median(firsts), 3), "s", "median"),
             Figure(round(min(firsts), 3), "s", "min")], Target("median", 0.6, "s")),
    ]
    section.data = {"command": cmd, "help_s": [round(x, 4) for x in helps],
                    "first_prompt_s": [round(x, 4) for x in firsts]}
    return section, rss


def run_memory(corpus: Corpus, server: Any, startup_rss: list[float],
               progress: Callable[[str], None]) -> Section:
    seen = len(server.requests)
    rss = chat_peak_rss(cli_command(), chat_env(corpus.home, server.base_url))
    requests = len(server.requests) - seen
    progress(f"memory: chat peak RSS {rss:.1f} MB with {corpus.messages:,} messages")
    method = ("Peak RSS (VmHWM, from os.wait4's ru_maxrss of that one child) of `memgpt-lite chat "
              f"--no-record --agent {BENCH_AGENT}`, piped: {len(CHAT_LINES) - 1} messages, then "
              f"/exit, against the local fake server, on the English data dir after the engine "
              f"section ({_count(corpus.messages)} messages, {_count(corpus.passages)} passages, "
              "a full queue). For comparison, the start-up runs' peak on an empty data dir.")
    section = Section("memory", "Peak memory", method)
    section.rows = [
        Row(f"chat process, {_count(corpus.messages)} messages + {_count(corpus.passages)} "
            f"passages in the store", [Figure(round(rss, 1), "MB", "peak RSS")],
            Target("peak RSS", 150, "MB")),
        Row("chat process, empty store, to the first prompt",
            [Figure(round(max(startup_rss), 1), "MB", "peak RSS")]),
    ]
    section.data = {"peak_rss_mb": round(rss, 2), "model_requests": requests,
                    "empty_store_peak_rss_mb": [round(x, 2) for x in startup_rss],
                    "messages": corpus.messages, "passages": corpus.passages}
    return section


# --------------------------------------------------------------------------- the suite


def run_suite(plan: Plan, progress: Callable[[str], None]) -> dict[str, Any]:
    """Every section, in one run; the report as data (see `render_markdown`, JSON)."""
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    started, sections = time.perf_counter(), []
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-bench-") as tmp, \
            FakeAnthropicServer() as server:
        workdir = Path(tmp)
        store_section, corpora = _timed_section(lambda: run_store(workdir, plan, progress))
        sections.append(store_section)
        english = corpora.get("en") or next(iter(corpora.values()))
        sections.append(_timed_section(lambda: run_engine(english, plan, progress)))
        for corpus in corpora.values():
            corpus.store.close()
        sections.append(_timed_section(lambda: run_tokens(plan, progress)))
        startup, rss = _timed_section(lambda: run_startup(plan, server.base_url, workdir, progress))
        sections.append(startup)
        sections.append(_timed_section(
            lambda: run_memory(english, server, rss, progress)))
    return {"benchmark": "memgpt-lite bench", "version": _version(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.perf_counter() - started, 1), "plan": asdict(plan),
            "machine": machine_info(), "sections": [s.to_dict() for s in sections]}


def _timed_section(run: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    result = run()
    section = result[0] if isinstance(result, tuple) else result
    section.seconds = time.perf_counter() - t
    return result


def _version() -> str:
    from memgpt_lite import __version__

    return __version__


# --------------------------------------------------------------------------- rendering


def render_markdown(report: dict[str, Any], command: str) -> str:
    """The README-ready table: sections as row groups, then how each section measured."""
    m = report["machine"]
    lines = [f"`{command}` · memgpt-lite {report['version']} · {report['seconds']:.0f} s · "
             f"{report['started_at'][:10]}",
             f"Machine: {machine_line(m)}", "",
             "| section | measure | measured | target | result |", "|---|---|---|---|---|"]
    for section in report["sections"]:
        for i, row in enumerate(section["rows"]):
            title = f"**{section['title']}**" if i == 0 else ""
            figures = " · ".join(_figure_text(Figure(**f)) for f in row["figures"])
            target = row["target"]["text"] if row["target"] else ""
            mark = {True: "✓ pass", False: "✗ **miss**", None: ""}[row["ok"]]
            lines.append(f"| {title} | {row['label']} | {figures} | {target} | {mark} |")
    lines += ["", "How each section measures:", ""]
    lines += [f"- **{s['title']}** ({s['seconds']:.0f} s): {s['method']}"
              for s in report["sections"]]
    return "\n".join(lines)


def _misses(report: dict[str, Any]) -> list[str]:
    return [f"{s['title']}: {r['label']}" for s in report["sections"] for r in s["rows"]
            if r["ok"] is False]


# --------------------------------------------------------------------------- command


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x.replace("_", "").replace(",", "")) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be whole numbers, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return tuple(sorted(sizes))


def suite_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memgpt-lite bench",
        description="Run the benchmark suite offline (scripted model, local fake server) and "
                    "print one table: store at scale, engine overhead, token economics, "
                    "start-up, peak memory. `memgpt-lite bench store --help`: the store alone.")
    p.add_argument("--quick", action="store_true",
                   help="smaller run (10k and 100k rows, Chinese 10k; 100-turn session): "
                        "under a minute")
    p.add_argument("--json", metavar="OUT", help="also write the full report as JSON to OUT")
    g = p.add_argument_group("size overrides (for trying things out; defaults follow --quick)")
    g.add_argument("--sizes", type=_sizes, metavar="N,N", help="store sizes in rows")
    g.add_argument("--queries", type=int, metavar="N", help="search queries per size")
    g.add_argument("--engine-turns", type=int, metavar="N", help="turns timed in the engine section")
    g.add_argument("--turns", type=int, metavar="N", help="turns of the scripted long session")
    g.add_argument("--runs", type=int, metavar="N", help="subprocess runs per start-up measure")
    return p


def plan_from(args: argparse.Namespace) -> Plan:
    plan = Plan.quick() if args.quick else Plan()
    overrides = {"sizes": args.sizes, "zh_sizes": args.sizes, "queries": args.queries,
                 "engine_turns": args.engine_turns, "session_turns": args.turns,
                 "help_runs": args.runs, "chat_runs": args.runs}
    for name, value in overrides.items():
        if value is not None:
            setattr(plan, name, value)
    return plan


def suite_main(argv: list[str]) -> int:
    args = suite_parser().parse_args(argv)
    plan = plan_from(args)
    command = " ".join(["memgpt-lite bench", *argv])
    progress = Progress()
    progress(f"memgpt-lite bench: {'quick' if args.quick else 'full'} run on "
             f"{machine_line(machine_info())}")
    report = run_suite(plan, progress)
    report["command"] = command
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
        progress(f"wrote {args.json}")
    print(render_markdown(report, command))
    misses = _misses(report)
    if misses:
        print(f"\n{len(misses)} target(s) missed: " + "; ".join(misses))
    return 0


def store_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="memgpt-lite bench store",
                                     description="search latency and insert throughput only")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [store_benchmark(int(n), queries=args.queries) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_store(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["store"]:
        return store_main(argv[1:])
    return suite_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())

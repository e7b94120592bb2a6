"""Retrieval quality of recall search: recall@5/@10 on a synthetic conversation.

    python -m memgpt_lite.lab.retrieval_eval [--filler 4000] [--db URL] [--json]

Questions are phrased differently from the stored text, the way a model asks later; the
evidence turns hide among synthetic filler. `retrieval_eval()` returns a plain dict.
A second, held-out set (`LOCOMO_STYLE`, `locomo_style_eval()`) has LoCoMo's shape: two named
speakers over dated sessions, run through the real LoCoMo runner with raw questions.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

from memgpt_lite.engine.records import Message
from memgpt_lite.engine.search import _WORD, index_text, match_expression, plain_text
from memgpt_lite.engine.store.base import Store
from memgpt_lite.lab.bench.corpus import synthetic_messages
from memgpt_lite.lab.locomo import run_locomo

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


# --------------------------------------------------------------------------- LoCoMo-style set
# A held-out second set in the shape of LoCoMo (two named speakers chatting over dated
# sessions, stored as "Speaker: text" by the real LoCoMo runner) with raw questions of its
# categories. Written before any search change it was used to judge; not tuned afterwards.
# Each conversation: (speaker_a, speaker_b, episodes, questions). An episode is
# (session, [(speaker 0/1, text, evidence key or None), ...]), kept together in its session;
# a question is (category, text, [evidence keys]). Categories use LoCoMo's numbers.

LOCOMO_STYLE: list[tuple[str, str, list, list]] = [
    ("Nadia", "Oscar", [
        (1, [(1, "Hey Nadia! How was your week?", None),
             (0, "Busy but fun! I signed up for a pottery class at the community center on "
                 "Tuesday evenings.", "n_pottery"),
             (1, "That sounds so relaxing, working with clay is good for the soul.", None)]),
        (2, [(0, "Did you end up going anywhere over the long weekend?", None),
             (1, "Yes! My brother and I hiked up Mount Rainier yesterday, the views were unreal.",
              "o_hike"),
             (0, "Wow, that must have been exhausting.", None)]),
        (3, [(0, "Big news, we adopted a rescue greyhound last weekend. Her name is Pepper.",
              "n_adopt"),
             (1, "Aww, congrats! Greyhounds are such gentle dogs.", None)]),
        (4, [(1, "I finally handed in my notice at the bank. Starting next month I'll be teaching "
                 "high school chemistry.", "o_job"),
             (0, "That's a huge change, I'm so proud of you!", None)]),
        (5, [(0, "I made my first vase on the wheel! It's a bit lopsided but I glazed it blue. "
                 "[shares a photo: a lopsided blue ceramic vase on a wooden table]", "n_vase"),
             (1, "It looks great, lopsided gives it character.", None)]),
        (6, [(1, "How's Pepper doing?", None),
             (0, "She had to get surgery on her paw two days ago, she stepped on some glass at "
                 "the park.", "n_surgery"),
             (1, "Poor thing, I hope she recovers quickly.", None)]),
        (6, [(1, "I picked up my old guitar again, I've been practicing Beatles songs every "
                 "night.", "o_guitar"),
             (0, "You'll have to play for me sometime!", None)]),
        (7, [(1, "Last night I saw Florence and the Machine play live, I was dancing the whole "
                 "time.", "o_concert"),
             (0, "Jealous! Her voice is incredible.", None)]),
        (8, [(0, "I've been training for the Chicago marathon in October, did 18 miles this "
                 "morning.", "n_marathon"),
             (1, "That's so impressive, how are your legs holding up?", None),
             (0, "My knees ache a little, so I'm icing them every evening.", "n_knee")]),
        (9, [(1, "My students built little volcanoes in the lab today, one of them exploded all "
                 "over the ceiling.", "o_students"),
             (0, "Haha, that's the best kind of chemistry lesson.", None)]),
        (9, [(0, "I'm reading 'Circe' by Madeline Miller, I can't put it down. I've always loved "
                 "Greek myths.", "n_book"),
             (1, "Oh I've heard great things about that one.", None)]),
        (10, [(0, "My grandmother taught me her pierogi recipe this weekend, we made about a "
                  "hundred of them.", "n_grandma"),
              (1, "That's such a sweet tradition to keep alive.", None)]),
        (11, [(1, "I found out I'm allergic to cats, which is awkward since my girlfriend has "
                  "two of them.", "o_allergy"),
              (0, "Oh no, are you taking anything for it?", None),
              (1, "Antihistamines every day for now.", None)]),
        (12, [(0, "The community center is showing my pottery in their spring exhibition next "
                  "Friday!", "n_exhibit"),
              (1, "You've come so far since that first class.", None)]),
    ], [
        (4, "What class did Nadia sign up for?", ["n_pottery"]),
        (4, "What is the name of Nadia's dog?", ["n_adopt"]),
        (4, "What did Oscar's students make in the lab?", ["o_students"]),
        (4, "What is Oscar allergic to?", ["o_allergy"]),
        (4, "Which band did Oscar see in concert?", ["o_concert"]),
        (4, "What book is Nadia reading?", ["n_book"]),
        (4, "What dish did Nadia's grandmother teach her to make?", ["n_grandma"]),
        (2, "When did Oscar hike Mount Rainier?", ["o_hike"]),
        (2, "When did Nadia adopt Pepper?", ["n_adopt"]),
        (2, "When did Nadia's dog have surgery?", ["n_surgery"]),
        (2, "When is Nadia's pottery exhibition?", ["n_exhibit"]),
        (2, "When did Oscar quit his job at the bank?", ["o_job"]),
        (1, "What hobbies does Nadia have?", ["n_pottery", "n_marathon", "n_book"]),
        (1, "What did Nadia make in her pottery class?", ["n_pottery", "n_vase"]),
        (1, "What music-related things has Oscar done recently?", ["o_guitar", "o_concert"]),
        (1, "What jobs has Oscar had?", ["o_job", "o_students"]),
        (3, "Would Nadia enjoy a trip to Greece?", ["n_book"]),
        (3, "Is Oscar likely to own a cat?", ["o_allergy"]),
        (3, "Would Oscar be considered a musician?", ["o_guitar"]),
        (3, "Is Nadia an athletic person?", ["n_marathon"]),
    ]),
    ("Leo", "Priya", [
        (1, [(1, "We just moved into a new apartment in Denver, the mountains are right there.",
              "p_move"),
             (0, "Denver! That's a big move from Houston.", None)]),
        (2, [(0, "My band played our first gig at a bar downtown on Saturday, about forty "
                 "people showed up.", "l_gig"),
             (1, "That's awesome, what kind of music do you play?", None),
             (0, "Mostly jazz fusion, I play the saxophone.", "l_genre")]),
        (3, [(1, "I started a vegetable garden on the balcony: tomatoes, basil and peppers.",
              "p_garden"),
             (0, "Homegrown basil is the best.", None)]),
        (4, [(0, "My daughter Zoe lost her first tooth this morning, she was so proud.",
              "l_tooth"),
             (1, "So cute! Did the tooth fairy visit?", None)]),
        (5, [(1, "I've been volunteering at the animal shelter on Sundays, walking dogs mostly.",
              "p_shelter"),
             (0, "That's really kind of you.", None)]),
        (5, [(1, "I went bouldering at the climbing gym with coworkers yesterday, my forearms "
                 "are dead.", "p_climb"),
             (0, "Haha, sounds like a good workout.", None)]),
        (6, [(0, "I broke my wrist skateboarding with Zoe, so no saxophone for six weeks.",
              "l_wrist"),
             (1, "Ouch, please be careful!", None)]),
        (7, [(1, "Guess what, I got promoted to senior architect at my firm!", "p_promo"),
             (0, "Congratulations, you totally deserve it.", None)]),
        (8, [(0, "We drove to Yellowstone last week and saw a grizzly bear from the car.",
              "l_yellowstone"),
             (1, "Scary and amazing at the same time!", None)]),
        (9, [(1, "I've gone fully vegan since January, I feel so much more energetic.",
              "p_vegan"),
             (0, "I could never give up cheese, respect.", None)]),
        (10, [(0, "The band is recording an EP in a studio in Austin next month.", "l_ep"),
              (1, "You have to send me the tracks!", None)]),
        (11, [(1, "My sister Anjali is getting married in Jaipur in December, I'm a bridesmaid.",
               "p_sister"),
              (0, "An Indian wedding, that'll be a blast.", None)]),
        (12, [(0, "Zoe started ballet lessons, she twirls around the living room all day.",
               "l_ballet"),
              (1, "She's going to be a star!", None)]),
    ], [
        (4, "What instrument does Leo play?", ["l_genre"]),
        (4, "What genre of music does Leo's band play?", ["l_genre"]),
        (4, "What vegetables is Priya growing?", ["p_garden"]),
        (4, "Where does Priya volunteer?", ["p_shelter"]),
        (4, "What is Priya's job?", ["p_promo"]),
        (4, "What kind of dance class is Leo's daughter taking?", ["l_ballet"]),
        (2, "When did Leo's band play their first gig?", ["l_gig"]),
        (2, "When did Priya move to Denver?", ["p_move"]),
        (2, "When did Leo break his wrist?", ["l_wrist"]),
        (2, "When did Priya go bouldering?", ["p_climb"]),
        (2, "When is Priya's sister's wedding?", ["p_sister"]),
        (1, "What has Leo's daughter Zoe been up to?", ["l_tooth", "l_ballet"]),
        (1, "What are Priya's hobbies?", ["p_garden", "p_climb", "p_shelter"]),
        (1, "Where has Leo travelled recently?", ["l_yellowstone", "l_ep"]),
        (3, "Would Priya eat a cheeseburger?", ["p_vegan"]),
        (3, "Would Leo enjoy a Miles Davis record?", ["l_genre"]),
        (3, "Does Priya like animals?", ["p_shelter"]),
        (3, "Is Priya likely to visit India this year?", ["p_sister"]),
    ]),
]

# Chit-chat between the same two speakers, sharing the evidence's everyday vocabulary
# (family, pets, food, sport, music) as LoCoMo's sessions do.
CHAT = [
    "Hey {other}! Great to hear from you again.", "Thanks, {other}! That means a lot.",
    "I've been so busy with work lately, it's been crazy.",
    "Family time is the best, I really treasure those moments.",
    "That's amazing! I'm so happy for you.", "How are the kids doing these days?",
    "Haha, totally agree with you.", "What have you been up to since we last talked?",
    "I went to the {place} with some friends {time}, it was a lot of fun.",
    "I've been thinking about trying {activity}, any tips?",
    "The weather has been {adj} lately, perfect for {activity}.",
    "My {relative} called {time} and we talked for hours.",
    "I'm trying to eat healthier, lots of {food} this week.",
    "Work has been stressful, I really need a vacation soon.",
    "Take care, {other}! Talk soon.", "I saw a {animal} at the {place} {time}, so cute.",
    "That reminds me, I need to call my {relative} about the {event}.",
    "I love that! You always inspire me to try new things.",
    "We should plan a {event} together sometime.",
    "My {relative} has been getting into {activity}, it's sweet to watch.",
    "Did you do anything fun {time}?", "I'm so glad we keep in touch, {other}.",
    "That sounds like a great way to relax after a long day.",
    "I've been listening to a lot of {music} while I cook.",
    "The {event} was so much fun, we stayed until midnight.",
]
CHAT_SLOTS = {
    "place": ["park", "beach", "museum", "lake", "mall", "library", "farmers market", "gym",
              "studio", "cafe"],
    "activity": ["painting", "yoga", "hiking", "baking", "running", "swimming", "gardening",
                 "camping", "photography", "dancing", "reading", "cooking"],
    "relative": ["mom", "dad", "brother", "sister", "cousin", "aunt", "grandmother", "uncle"],
    "food": ["salads", "soups", "pasta", "smoothies", "vegetables", "fish"],
    "animal": ["dog", "cat", "squirrel", "deer", "puppy", "horse"],
    "event": ["road trip", "picnic", "birthday party", "concert", "dinner", "game night"],
    "adj": ["sunny", "rainy", "cold", "lovely", "warm"],
    "time": ["yesterday", "last weekend", "this morning", "last week", "on Saturday"],
    "music": ["jazz", "pop songs", "old rock albums", "classical music", "podcasts"],
}


def locomo_style_samples(*, sessions: int = 14, per_session: int = 32,
                         seed: int = 5) -> list[dict]:
    """LOCOMO_STYLE as samples in the locomo10.json format: each episode at a random place in
    its session among chit-chat; sessions ~11 days apart; evidence as dia_ids."""
    rng = random.Random(seed)
    samples = []
    for ci, (a, b, episodes, questions) in enumerate(LOCOMO_STYLE):
        names, conv = (a, b), {"speaker_a": a, "speaker_b": b}
        blocks: dict[int, list[list[tuple[int, str, str | None]]]] = {}
        for n in range(1, sessions + 1):
            blocks[n] = [[(i % 2, _chat_line(rng, names[1 - i % 2]), None)]
                         for i in range(per_session)]
        for session, lines in episodes:
            blocks[session].insert(rng.randrange(len(blocks[session]) + 1), lines)
        where: dict[str, str] = {}
        for n, groups in blocks.items():
            day = date(2023, 3, 4) + timedelta(days=11 * (n - 1))
            conv[f"session_{n}_date_time"] = f"{1 + n % 11}:{10 + n:02d} pm on {day.day} " \
                                             f"{day.strftime('%B')}, {day.year}"
            turns = [line for g in groups for line in g]
            conv[f"session_{n}"] = [{"speaker": names[sp], "dia_id": f"D{n}:{i}", "text": text}
                                    for i, (sp, text, _) in enumerate(turns, 1)]
            where.update({key: f"D{n}:{i}" for i, (_, _, key) in enumerate(turns, 1) if key})
        qa = [{"question": q, "answer": "", "category": cat,
               "evidence": [where[k] for k in keys]} for cat, q, keys in questions]
        samples.append({"sample_id": f"synthetic-{ci + 1}", "conversation": conv, "qa": qa})
    return samples


def _chat_line(rng: random.Random, other: str) -> str:
    slots = {k: rng.choice(v) for k, v in CHAT_SLOTS.items()}
    return rng.choice(CHAT).format(other=other, **slots)


def locomo_style_eval(*, seed: int = 5, embedder: object = None) -> dict:
    """recall@5/@10 per LoCoMo category on LOCOMO_STYLE, through the real LoCoMo runner
    (`locomo.run_locomo`: stored as chat stores it, questions sent raw); with an embedder,
    per search method (keyword without and with context, dense, hybrid)."""
    samples = locomo_style_samples(seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "locomo_style.json"
        path.write_text(json.dumps(samples), encoding="utf-8")
        report = run_locomo(path, retrieval_only=True, embedder=embedder)
    utterances = sum(len(v) for s in samples for k, v in s["conversation"].items()
                     if k.startswith("session_") and isinstance(v, list))
    return {"questions": len(report["questions"]), "utterances": utterances, "seed": seed,
            "by_category": report["by_category"], "overall": report["overall"],
            "methods": report["methods"], "embedder": report["embedder"],
            "misses": [q["question"] for q in report["questions"] if q["recall@10"] < 1]}


def _build_eval_store(path: str, filler: int,
                      seed: int) -> tuple[Store, int, list[set[int]]]:
    """Filler messages with each case's evidence turns inserted at random positions, in a
    SQLite file or (a postgresql:// URL) a Postgres database."""
    from memgpt_lite.engine.store import open_store

    rng = random.Random(seed)
    store = open_store(path)
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


OURS = "ours (OR, porter, stop words, CJK bigrams)"

# (store, agent id, question, k) -> message ids, best first
Ranker = Callable[[Store, int, str, int], list[int]]


def _rank_ours(store: Store, agent_id: int, question: str, k: int) -> list[int]:
    return [h.id for h in store.search_messages(agent_id, question, per_page=k).hits]


class _Baseline:
    """A private in-memory FTS5 index of the agent's messages, read through the store's
    protocol (`all_messages`), so baselines score the same rows on any backend."""

    def __init__(self, store: Store, agent_id: int, tokenize: str):
        self.db = sqlite3.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{tokenize}')")
        self.db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)",
                            [(m.id, self.body(plain_text(m.role, m.content)))
                             for m in store.all_messages(agent_id)])

    def body(self, text: str) -> str:
        return text

    def top(self, expr: str, k: int) -> list[int]:
        return [r[0] for r in self.db.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (expr, k))]


class _AndBaseline(_Baseline):
    """FTS5's default, an implicit AND of every word of the question (CJK as our bigrams)."""

    def __init__(self, store: Store, agent_id: int):
        super().__init__(store, agent_id, "porter unicode61")  # the SQLite store's

    def body(self, text: str) -> str:
        return index_text(text)

    def __call__(self, _store: Store, _agent: int, question: str, k: int) -> list[int]:
        words = _WORD.findall(index_text(question.lower()))
        return self.top(" ".join('"' + w + '"' for w in words), k) if words else []


class _TrigramBaseline(_Baseline):
    """Alternative CJK indexing for comparison: FTS5's trigram tokenizer, OR of query
    trigrams."""

    def __init__(self, store: Store, agent_id: int):
        super().__init__(store, agent_id, "trigram")

    def __call__(self, _store: Store, _agent: int, question: str, k: int) -> list[int]:
        q = "".join(question.split())
        grams = {q[i:i + 3] for i in range(len(q) - 2)}
        if not grams:
            return []
        return self.top(" OR ".join('"' + g.replace('"', '""') + '"' for g in grams), k)


def _is_cjk(text: str) -> bool:
    return match_expression(text) is not None and any(ord(c) > 0x2e80 for c in text)


def retrieval_eval(*, filler: int = 4000, seed: int = 11, db: str | None = None) -> dict:
    """recall@5/@10 (share of evidence turns retrieved) and hit@k (any evidence retrieved)
    for our search and two baselines, over CASES hidden among `filler` messages in a SQLite
    file; with `db` (a postgresql:// server) the same on Postgres too, over the same
    messages in a scratch database."""
    with tempfile.TemporaryDirectory() as tmp:
        results = _score_backend(str(Path(tmp) / "eval.db"), filler, seed)
    if db:
        from memgpt_lite.lab.bench.backends import scratch_database

        with scratch_database(db) as scratch:
            scored = _score_backend(scratch, filler, seed)
        results.update({f"{name} on Postgres": table for name, table in scored.items()})
    return {"cases": len(CASES), "filler_messages": filler, "seed": seed, "results": results}


def _score_backend(target: str, filler: int, seed: int) -> dict:
    store, agent_id, evidence = _build_eval_store(target, filler, seed)
    with store:
        rankers: dict[str, Ranker] = {OURS: _rank_ours,
                                      "baseline: AND of all words": _AndBaseline(store, agent_id),
                                      "alternative: trigram tokenizer":
                                          _TrigramBaseline(store, agent_id)}
        return {name: _score(store, agent_id, evidence, fn) for name, fn in rankers.items()}


def _score(store: Store, agent_id: int, evidence: list[set[int]], rank: Ranker) -> dict:
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
    print(f"{'method':58} {'group':8} {'n':>3} {'recall@5':>9} {'recall@10':>10} "
          f"{'hit@5':>6} {'hit@10':>7}")
    for name, groups in data["results"].items():
        for g, m in groups.items():
            print(f"{name:58} {g:8} {m['n']:>3} {m['recall@5']:>9} {m['recall@10']:>10} "
                  f"{m['hit@5']:>6} {m['hit@10']:>7}")


def _print_locomo_style(data: dict) -> None:
    print(f"\nLoCoMo-style set: {data['questions']} raw questions over {data['utterances']} "
          f"utterances in {len(LOCOMO_STYLE)} conversations (seed {data['seed']})"
          + (f", embedder {data['embedder']}" if data.get("embedder") else ""))
    print(f"{'method':20} {'category':16} {'n':>3} {'recall@5':>9} {'recall@10':>10}")
    for method, table in data["methods"].items():
        for name, m in [*table["by_category"].items(), ("all", table["overall"])]:
            print(f"{method:20} {name:16} {m['n']:>3} {m['recall@5']:>9.3f} "
                  f"{m['recall@10']:>10.3f}")


def _embedder(spec: str | None) -> object:
    if not spec:
        return None
    import os

    from memgpt_lite.engine.embeddings import EmbeddingConfig

    return EmbeddingConfig.from_env({**os.environ, "MEMGPT_LITE_EMBEDDER": spec}).build()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.retrieval_eval")
    parser.add_argument("--filler", type=int, default=4000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--db", metavar="URL",
                        help="a postgresql:// server: our search scored there too (in a "
                             "scratch database it creates and drops)")
    parser.add_argument("--embedder", metavar="SPEC",
                        help="also score dense and hybrid search on the LoCoMo-style set "
                             "(onnx:FOLDER or http, as MEMGPT_LITE_EMBEDDER)")
    args = parser.parse_args(argv)
    data = retrieval_eval(filler=args.filler, db=args.db)
    data["locomo_style"] = locomo_style_eval(embedder=_embedder(args.embedder))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_retrieval(data)
        _print_locomo_style(data["locomo_style"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A data dir to forget things in: two agents with recorded sessions, tool calls, archival
passages, core memory edits, folded tool results, a flushed queue and its summary, base
snapshots and an input history, every one of them holding the texts the forget corpus
(test_forget.py) names, next to look-alikes that must survive."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from memgpt_lite.engine import config, recording
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.input_history import InputHistory, drop_matching
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.recording_scrub import KEEP_KEYS
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.engine.store import Store, open_store, snapshot
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.scrub import strings as walk
from memgpt_lite.lab.scripted import estimate_usage

TABLES = ("messages", "passages", "blocks", "block_history")
FILLER = ("The quarterly report lists invoices, shipping notes and meeting minutes for the "
          "regional office; nothing in it is personal. ") * 9

# (user text, tool calls the model makes first, its reply): agent "a", session 1.
SESSION_1 = [
    ("I'm planning a Paris trip in May with my sister.", [], "A Paris trip in May sounds lovely."),
    ("My trip to Rome last year was great.", [], "Rome is wonderful."),
    ("My dog is called Rex and he loves the mountains.",
     [("core_memory_append", {"label": "human", "content": "Dog: Rex."}),
      ("archival_insert", {"content": "Ada's dog Rex loves the mountains.", "tags": ["pets"]})],
     "Saved."),
    ("I like the mountains in autumn.", [], "Me too."),
    ("My cousin Rexford visits on Sunday.", [], "Say hello to him."),
    ("My locker code is zanzibar-7781.",
     [("core_memory_append", {"label": "human", "content": "Locker code: zanzibar-7781."})],
     "Noted."),
    ("I take medication for my allergies; the medical checkup is in June.", [], "Take care."),
    ("The medical centre is closed on Mondays.", [], "Good to know."),
    ("Address:\n12 Quokka Lane\nSpringfield", [], "Got your address."),
    ("我住在北京市海淀区，周末去上海。", [], "好的，周末愉快。"),
    ("Meet at Café Flore ☕ at noon.", [], "See you there."),
    ('Our house has the "blue" door.', [], "Easy to find."),
    ("What colour do I like?", [], "THINK:The user's favourite colour is teal.|You like teal."),
    ("What do you know about my dog?", [("conversation_search", {"query": "dog Rex"})],
     "You told me about Rex."),
    ("search your archive for mountains", [("archival_search", {"query": "mountains"})],
     "Found it."),
]
NOTE = "filed with the regional office, reviewed by the auditors, archived for seven years"
FILLERS = [(f"Log {i}: {FILLER}",
            [("core_memory_append", {"label": "human", "content": f"Log {i} {NOTE}."})] if i % 2
            else [("conversation_search", {"query": "Rex mountains dog"})],
            f"Filed log {i}.") for i in range(1, 18)]
SESSION_2 = [
    ("Tell me again about the Paris trip.", [], "You are planning it for May."),
    ("Unrelated: the weather is fine today.", [], "Indeed it is."),
]
AGENT_B = [
    ("My dog is called Rex too.", [], "Hello Rex."),
    ("I love Lisbon.", [], "Lisbon is lovely."),
]


class Policy:
    """The model: answers the planned step (tool calls, then the reply); a reply written
    `THINK:text|reply` starts with a thinking block."""

    def __init__(self) -> None:
        self.plan: list[ModelResponse] = []
        self.n = 0

    def expect(self, calls: list, reply: str) -> None:
        self.plan = []
        if calls:
            content = [{"type": "tool_use", "id": f"toolu_w{self.n}_{i}", "name": name,
                        "input": args} for i, (name, args) in enumerate(calls)]
            self.plan.append(ModelResponse(content, "tool_use", Usage()))
        blocks: list[dict] = []
        if reply.startswith("THINK:"):
            thought, reply = reply[len("THINK:"):].split("|", 1)
            blocks.append({"type": "thinking", "thinking": thought,
                           "signature": "sig-" + thought[:8]})
        blocks.append({"type": "text", "text": reply})
        self.plan.append(ModelResponse(blocks, "end_turn", Usage()))

    def stream(self, request: ModelRequest):
        self.n += 1
        response = self.plan.pop(0) if self.plan else ModelResponse(
            [{"type": "text", "text": "ok"}], "end_turn", Usage())
        yield ModelResponse(response.content, response.stop_reason,
                            estimate_usage(request, response), request.model, f"msg_{self.n}")


class Summariser:
    """The summariser model: one line per user message of the turns it is given."""

    def __init__(self) -> None:
        self.n = 0

    def stream(self, request: ModelRequest):
        self.n += 1
        text = request.messages[-1]["content"][0]["text"]
        previous = text.split("<previous_summary>\n", 1)[1].split("\n</previous_summary>")[0]
        lines = [] if previous == "(none)" else previous.splitlines()
        said = re.finditer(r"^user: (.+)$", text, re.M)
        lines += [f"- Ada said: {m.group(1)[:100]}" for m in said]
        response = ModelResponse([{"type": "text", "text": "\n".join(lines)}], "end_turn", Usage())
        yield ModelResponse(response.content, "end_turn", estimate_usage(request, response),
                            request.model, f"sum_{self.n}")


def settings() -> Settings:
    return Settings(context_window=6_000, max_output_tokens=500, safety_margin=100,
                    block_limit=2_000, fold_min_chars=600)


def _session(store: Store, name: str, steps: list, history: InputHistory) -> Path:
    policy = Policy()
    # The world's paging (which tool results get folded, which turns flushed) was sized on
    # search layout 1's longer pages and the system prompt of model contract 1; forget is
    # what it tests, so it keeps both.
    agent = Agent.open(store, name, model_client=policy, summary_client=Summariser(),
                       settings=settings(), contract=1)
    agent.set_search_layout(1)
    recorder = recording.start_recording(agent)
    for text, calls, reply in steps:
        history.append(text.split("\n"))
        policy.expect(calls, reply)
        events = list(recording.recorded_step(agent, recorder, text))
        assert events[-1].completed, [e for e in events if e.kind == "error"]
    recorder.close()
    agent.close()
    return recorder.path


def build(refresh: int = 40) -> dict:
    """Build the world in the current data dir (MEMGPT_LITE_HOME); returns facts about it."""
    saved, snapshot.BASE_REFRESH_ROWS = snapshot.BASE_REFRESH_ROWS, refresh
    try:
        return _build()
    finally:
        snapshot.BASE_REFRESH_ROWS = saved


def _build() -> dict:
    history = InputHistory(config.data_dir())
    with open_store() as store:  # the data dir's file, or $MEMGPT_LITE_DATABASE_URL
        paths = [_session(store, "a", SESSION_1 + FILLERS, history),
                 _session(store, "b", AGENT_B, history),
                 _session(store, "a", SESSION_2, history)]
        history.append(["/search Rex", "/core"])
        a = store.get_agent("a")
        facts = {"paths": paths, "summary": a.summary,
                 "folded": [m.id for m in store.context_messages(a.id) if m.context_content],
                 "evicted": sum(not m.in_context for m in store.all_messages(a.id)),
                 "bases": sorted(config.recordings_dir().rglob("bases/*.db"))}
        if isinstance(store, SQLiteStore):
            store.db.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return facts


# --------------------------------------------------------------------------- reading it back


def live_rows(home: Path, sql: str, params: tuple = ()) -> list[dict]:
    """Rows of the live store, read raw: the data dir's SQLite file, or the Postgres
    database of $MEMGPT_LITE_DATABASE_URL (`?` parameters either way)."""
    if config.database_url():
        with open_store() as store:
            cur = store.db.connection.execute(sql.replace("?", "%s"), params)
            names = [d.name for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]
    db = sqlite3.connect(home / config.DB_FILENAME)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    finally:
        db.close()


def state(home: Path) -> dict:
    """Everything a forget may change, read raw. Rows by (agent id, id): Postgres counts
    ids per agent."""
    rows = {t: {(r["agent_id"], r["id"]): r for r in live_rows(home, f"SELECT * FROM {t}")}
            for t in TABLES}
    rows["agents"] = {r["id"]: r for r in live_rows(home, "SELECT * FROM agents")}
    files = {p.relative_to(home).as_posix(): p.read_bytes()
             for p in sorted([*home.rglob("*.jsonl"), *home.rglob("bases/*.db")])}
    return {"rows": rows, "files": files, "history": InputHistory(home).lines()}


def a_texts(home: Path) -> list[str]:
    """Every text of agent "a" in the store and its base snapshots."""
    out = _texts_of_a(lambda sql, params=(): [tuple(r.values())
                                              for r in live_rows(home, sql, params)])
    for path in home.rglob("bases/*.db"):
        db = sqlite3.connect(path)
        out += _texts_of_a(lambda sql, params=(): db.execute(sql, params).fetchall())
        db.close()
    return out


def _texts_of_a(query) -> list[str]:
    (aid,) = query("SELECT id FROM agents WHERE name = 'a'")[0]
    out = []
    for content, context in query("SELECT content, context_content FROM messages "
                                  "WHERE agent_id = ?", (aid,)):
        out += strings(json.loads(content)) + strings(json.loads(context or "null"))
    out += [r[0] for r in query("SELECT text || ' ' || tags FROM passages WHERE "
                                "agent_id = ?", (aid,))]
    out += [r[0] for r in query("SELECT value FROM blocks WHERE agent_id = ?", (aid,))]
    out += [r[0] for r in query("SELECT summary FROM agents WHERE id = ?", (aid,))]
    out += [v for r in query("SELECT summary, title FROM conversations WHERE agent_id = ?",
                             (aid,)) for v in r if v]
    out += [v for r in query("SELECT old_value, new_value FROM block_history WHERE "
                             "agent_id = ?", (aid,)) for v in r if v]
    return out


def strings(value) -> list[str]:
    return list(walk(value))


def recorded_texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in KEEP_KEYS for s in recorded_texts(v)]
    if isinstance(value, list):
        return [s for v in value for s in recorded_texts(v)]
    return []


def a_recordings(home: Path) -> list[Path]:
    return [p for p in home.rglob("*.jsonl") if '"agent":"a"' in p.read_text().split("\n")[0]]


def assert_no_match_left(home: Path, matcher: Matcher, gone: tuple[str, ...] = ()) -> None:
    for text in a_texts(home):
        assert not matcher.hits(text), text[:200]
        for word in gone:
            assert word not in text, (word, text[:200])
    for path in a_recordings(home):
        for line in path.read_text().splitlines():
            for text in recorded_texts(json.loads(line)):
                assert not matcher.hits(text), (path.name, text[:200])
                assert not any(g in text for g in gone), (path.name, text[:200])
    history = InputHistory(home).lines()
    assert drop_matching(history, matcher)[1] == []
    assert not any(g in line for g in gone for line in history)
    raw = b""  # Postgres keeps old row versions until VACUUM reuses them: see docs/postgres.md
    if not config.database_url():
        raw = (home / config.DB_FILENAME).read_bytes()
        wal = home / (config.DB_FILENAME + "-wal")
        raw += wal.read_bytes() if wal.exists() else b""
    for base in home.rglob("bases/*.db"):
        raw += base.read_bytes()
    for word in gone:  # the raw pages: rows, free space, the search index's shadow tables
        for form in {word, word.lower()}:
            assert form.encode() not in raw, f"{form!r} is still in the database file's bytes"
    with open_store() as store:
        assert store.forget_intents() == []



if __name__ == "__main__":  # a look at the world: python tests/reliability/forget_world.py
    import os
    import tempfile

    os.environ["MEMGPT_LITE_HOME"] = tempfile.mkdtemp()
    print(json.dumps(build(), default=str, indent=2, ensure_ascii=False))

"""A process for the reliability tests to kill: runs turns and says where it is on stdout.

DB is a SQLite file or a postgresql:// URL (see `open_store`).

    reliability_worker.py stage DB NAME STAGE    one committed turn, then a turn that stops
                                                 (sleeps) at STAGE: streaming | after_tool |
                                                 summariser | commit | migration
    reliability_worker.py random DB NAME SEED N  N turns of a seeded random conversation
                                                 (tools, long texts, evictions), killed at a
                                                 random moment by the test
    reliability_worker.py hold DB NAME SECONDS   open the agent (taking its lock) and hold it
    reliability_worker.py race DB NAME N TAG     N turns, each opening the agent (waiting for
                                                 its lock) and closing it after the turn
    reliability_worker.py forget HOME STAGE QUERY  `memgpt-lite forget QUERY --agent a --yes`
                                                 in data dir HOME (its store: the data dir's
                                                 file, or $MEMGPT_LITE_DATABASE_URL's
                                                 database), stopping at STAGE: intent
                                                 (written, nothing changed) | store (changed,
                                                 files not yet) | recording (one recording
                                                 scrubbed) | history (all but the input history)
    reliability_worker.py share DB NAME N GO     wait for the file GO, then N turns each
                                                 appending "NAME edit i" to the shared block
                                                 `human` with core_memory_append

Lines: "TYPED <text>" before a turn, "COMMITTED <reply>" after a completed one,
"STAGE <name>" right before the worker blocks.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.events import TextDelta
from memgpt_lite.engine.records import ModelRequest, ModelResponse, Usage
from memgpt_lite.engine.store import is_postgres_url, open_store
from memgpt_lite.engine.store.sqlite import migrations
from memgpt_lite.lab.scripted import tool_response


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def block(stage: str) -> None:
    say(f"STAGE {stage}")
    time.sleep(120)  # the test kills us here
    raise SystemExit("not killed")


class Client:
    """A ModelClient answering with `answer(request)`, streamed in small, slow pieces."""

    def __init__(self, answer: Callable[[ModelRequest], ModelResponse], delay: float = 0.0,
                 on_delta: Callable[[int], None] | None = None):
        self.answer, self.delay, self.on_delta = answer, delay, on_delta

    def stream(self, request: ModelRequest) -> Iterator[object]:
        response = self.answer(request)
        for i in range(0, len(response.text), 8):
            if self.on_delta is not None:
                self.on_delta(i // 8)
            time.sleep(self.delay)
            yield TextDelta(response.text[i:i + 8])
        yield response


def reply(text: str, stop: str = "end_turn") -> ModelResponse:
    return ModelResponse([{"type": "text", "text": text}], stop, Usage(0, 10))


def settings() -> Settings:
    # Room for the system prompt and tools of model contract 2 and a few turns before a flush.
    return Settings(context_window=6_500, max_output_tokens=500, safety_margin=100,
                    block_limit=2_000)


def run_turn(agent: Agent, text: str) -> None:
    events = []
    for event in agent.step(text):
        if not events:  # the text is in recall before step yields anything
            say(f"TYPED {text}")
        events.append(event)
    if events[-1].completed:
        say(f"COMMITTED {events[-1].text}")


def stage(db: str, name: str, where: str) -> None:
    if where == "migration":
        stop_in_a_migration(db)
        open_store(db)
        return
    store = open_store(db)
    calls = {"n": 0}

    def answer(request: ModelRequest) -> ModelResponse:
        calls["n"] += 1
        if calls["n"] == 1:
            return reply("first answer is safe")
        if where == "after_tool" and calls["n"] == 2:
            return tool_response([("core_memory_append", {"label": "human", "content": "Likes tea."}),
                                  ("archival_insert", {"content": "The user likes green tea."})])
        if where == "after_tool":
            block("after_tool")
        return reply("a long streamed answer that will never be finished " * 4)

    def on_delta(i: int) -> None:
        if where == "streaming" and calls["n"] == 2 and i == 3:
            block("streaming")

    def summarise(request: ModelRequest) -> ModelResponse:
        block("summariser")
        raise AssertionError

    agent = Agent.open(store, name, model_client=Client(answer, on_delta=on_delta),
                       summary_client=Client(summarise), settings=settings())
    run_turn(agent, "remember my first message")
    if where == "commit":
        real = store.add_messages

        def add_then_stop(agent_id, msgs):
            with store.transaction():
                real(agent_id, msgs[:1])  # joins this transaction: a partial write
                block("commit")
            real(agent_id, msgs)

        store.add_messages = add_then_stop  # type: ignore[method-assign]
    if where == "summariser":
        for i in range(40):  # fill the window until the controller must summarise
            run_turn(agent, f"filler turn {i}: " + "lorem ipsum dolor sit amet " * 30)
        raise SystemExit("the summariser was never called")
    run_turn(agent, "my second message must survive")


def stop_in_a_migration(db: str) -> None:
    """The second migration is applied, but its ledger row is not written yet, when the
    worker blocks."""
    if is_postgres_url(db):
        from memgpt_lite.engine.store.postgres import database, migrations as pg_migrations

        second = pg_migrations.MIGRATIONS[1][1]
        real = database.PostgresDatabase.execute

        def stop_midway(self, sql, params=()):
            count = real(self, sql, params)
            if sql == second:
                block("migration")
            return count

        database.PostgresDatabase.execute = stop_midway  # type: ignore[method-assign]
        return
    apply = migrations.MIGRATIONS[1][1]

    def stop_midway_sqlite(conn):
        apply(conn)
        block("migration")

    migrations.MIGRATIONS[1] = (migrations.MIGRATIONS[1][0], stop_midway_sqlite)


def random_run(db: str, name: str, seed: int, n: int) -> None:
    rng = random.Random(seed)
    store = open_store(db)

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]["content"]
        after_tool = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if not after_tool and rng.random() < 0.5:
            return tool_response([("archival_insert", {"content": f"fact {rng.random()}"}),
                                  ("conversation_search", {"query": "fact"})])
        return reply(f"answer {rng.randrange(10**6)} " + "words " * rng.randrange(5, 60))

    def summarise(request: ModelRequest) -> ModelResponse:
        time.sleep(rng.random() * 0.02)
        return reply("summary of earlier turns")

    agent = Agent.open(store, name, model_client=Client(answer, delay=0.001),
                       summary_client=Client(summarise, delay=0.001), settings=settings())
    say("OPEN")  # the random moment is counted from here, not from a start-up that varies
    for i in range(n):
        run_turn(agent, f"message {i} " + "blah " * rng.randrange(1, 200))


def hold(db: str, name: str, seconds: float) -> None:
    store = open_store(db)
    agent = Agent.open(store, name, model_client=Client(lambda r: reply("held")))
    say("LOCKED")
    run_turn(agent, f"turn from the holder of {name}")
    time.sleep(seconds)
    agent.close()
    say("RELEASED")


def race(db: str, name: str, n: int, tag: str) -> None:
    store = open_store(db)
    for i in range(n):
        text = f"{tag} turn {i}"
        agent = Agent.open(store, name, model_client=Client(lambda r, t=text: reply(f"re: {t}")),
                           lock_wait=60)
        run_turn(agent, text)
        agent.close()


def forget(home: str, where: str, query: str) -> None:
    import os

    os.environ["MEMGPT_LITE_HOME"] = home
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.input_history import InputHistory
    from memgpt_lite.terminal import cli

    scrubbed = {"n": 0}
    real_scrub = privacy.scrub_recording

    def scrub_then_stop(*args, **kwargs):
        result = real_scrub(*args, **kwargs)
        scrubbed["n"] += bool(result.changed and kwargs.get("apply", True))  # not the preview
        if where == "recording" and scrubbed["n"] == 1:
            block("recording")
        return result

    if where == "intent":  # on the store of $MEMGPT_LITE_DATABASE_URL, else the data dir's
        from memgpt_lite.engine.store.sql import SQLStore  # both backends' store

        SQLStore.apply_forget = lambda *a, **k: block("intent")  # type: ignore[method-assign]
    elif where == "store":
        privacy._scrub_files = lambda *a, **k: block("store")
    elif where == "recording":
        privacy.scrub_recording = scrub_then_stop
    elif where == "history":
        InputHistory.scrub = lambda *a, **k: block("history")  # type: ignore[method-assign]
    raise SystemExit(cli.main(["forget", query, "--agent", "a", "--yes"]))


def share(db: str, name: str, n: int, go: str) -> None:
    store = open_store(db)
    turn = {"i": 0}

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            return reply(f"noted {turn['i']}")
        return tool_response([("core_memory_append",
                               {"label": "human", "content": f"{name} edit {turn['i']}"})])

    agent = Agent.open(store, name, model_client=Client(answer))
    say("READY")
    while not Path(go).exists():
        time.sleep(0.005)
    for i in range(n):
        turn["i"] = i
        run_turn(agent, f"edit {i}")
    say("DONE")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "stage":
        stage(*args)
    elif mode == "random":
        random_run(args[0], args[1], int(args[2]), int(args[3]))
    elif mode == "hold":
        hold(args[0], args[1], float(args[2]))
    elif mode == "race":
        race(args[0], args[1], int(args[2]), args[3])
    elif mode == "forget":
        forget(*args)
    elif mode == "share":
        share(args[0], args[1], int(args[2]), args[3])
    else:
        raise SystemExit(f"unknown mode {mode}")

"""`memgpt-lite bench load --db URL`: many chat processes against one Postgres at once.

Eight processes (`--agents`) each chat with an agent of their own through the real engine
(`Agent.step`, one transaction per turn, the agent's advisory lock held), with a scripted
model that answers at once, so what is timed is the engine and the database: each turn
stores a passage (a tool call) and replies. They start together; the table gives turns per
second over all of them and each turn's engine time (p50/p95). Then two processes race for
one agent: each opens it for one turn at a time (waiting for the other's lock), as two
machines of one user would.

Afterwards every agent's history is read back and checked (`verify`): each turn a process
says it committed is there whole (user, tool call, tool result, reply, its passage), in one
block of positions with no other turn's message inside it; anything missing is "lost", any
turn split by another is "interleaved". Everything runs in a scratch database that is
dropped at the end (backends.scratch_database).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memgpt_lite.lab.bench.stats import percentile

PER_TURN = 4  # user, assistant tool_use, user tool_result, assistant reply


def _script(tag: str, i: int) -> list[Any]:
    from memgpt_lite.lab.scripted import text_response, tool_response

    return [tool_response([("archival_insert", {"content": f"{tag} fact {i}"})]),
            text_response(f"re: {tag} turn {i}")]


def worker(url: str, name: str, turns: int, tag: str, go: str, per_turn_open: bool) -> None:
    """One chat process: `turns` turns on agent `name`, after the file `go` appears. With
    `per_turn_open`, the agent is opened (its lock taken) for each turn and closed after."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store import open_store
    from memgpt_lite.lab.scripted import ScriptedModel

    store = open_store(url)
    script = [r for i in range(turns) for r in _script(tag, i)]
    agent = None if per_turn_open else Agent.open(store, name, model_client=ScriptedModel(script))
    print("READY", flush=True)
    while not Path(go).exists():
        time.sleep(0.002)
    steps, committed = [], 0
    for i in range(turns):
        if per_turn_open:
            agent = Agent.open(store, name, model_client=ScriptedModel(_script(tag, i)),
                               lock_wait=120)
        start = time.perf_counter()
        events = list(agent.step(f"{tag} turn {i}"))  # type: ignore[union-attr]
        steps.append((time.perf_counter() - start) * 1000)
        committed += bool(events and getattr(events[-1], "completed", False))
        if per_turn_open:
            agent.close()  # type: ignore[union-attr]
    print(json.dumps({"tag": tag, "committed": committed, "step_ms": steps}), flush=True)


def _run_workers(url: str, jobs: list[tuple[str, str, int, bool]]) -> tuple[float, list[dict]]:
    """Start one process per job (agent, tag, turns, per_turn_open), release them at once;
    (seconds from release to the last one's end, what each reported)."""
    with tempfile.TemporaryDirectory() as tmp:
        go = str(Path(tmp) / "go")
        procs = [subprocess.Popen([sys.executable, "-m", "memgpt_lite.lab.bench.load",
                                   "--worker", url, name, str(turns), tag, go,
                                   "1" if per_turn else "0"],
                                  stdout=subprocess.PIPE, text=True) for name, tag, turns, per_turn
                 in jobs]
        for p in procs:
            if p.stdout.readline().strip() != "READY":  # type: ignore[union-attr]
                raise RuntimeError("a load worker did not start")
        start = time.perf_counter()
        Path(go).touch()
        reports = [json.loads(p.stdout.readline()) for p in procs]  # type: ignore[union-attr]
        seconds = time.perf_counter() - start
        for p in procs:
            p.wait(timeout=60)
    return seconds, reports


def verify(store: Any, agent_id: int, tags: dict[str, int]) -> dict[str, int]:
    """Check the agent's history against what was committed ({tag: turns}): how many turns
    are missing a message or their passage ("lost"), and how many are not one contiguous
    block of messages ("interleaved")."""
    messages = store.all_messages(agent_id)  # in the order they were written (ids)
    passages = {p.text for p in store.list_passages(agent_id, limit=None)}
    where: dict[int, list[int]] = {}
    for position, m in enumerate(messages):
        where.setdefault(m.turn_id, []).append(position)
    by_text = {_text(m): m for m in messages}
    lost = interleaved = 0
    for tag, turns in tags.items():
        for i in range(turns):
            user, reply = by_text.get(f"{tag} turn {i}"), by_text.get(f"re: {tag} turn {i}")
            if user is None or reply is None or user.turn_id != reply.turn_id \
                    or f"{tag} fact {i}" not in passages or len(where[user.turn_id]) != PER_TURN:
                lost += 1
                continue
            spots = where[user.turn_id]
            interleaved += spots != list(range(spots[0], spots[0] + len(spots)))
    return {"turns": sum(tags.values()), "lost": lost, "interleaved": interleaved}


def _text(message: Any) -> str:
    return "".join(b.get("text", "") for b in message.content if b.get("type") == "text")


def load_benchmark(url: str, agents: int = 8, turns: int = 40,
                   race_turns: int = 20) -> dict[str, Any]:
    """The two runs (see the module docstring) in a scratch database on the server of `url`."""
    from memgpt_lite.engine.store import open_store
    from memgpt_lite.lab.bench.backends import scratch_database

    with scratch_database(url) as scratch:
        with open_store(scratch) as store:
            for n in range(agents):
                store.create_agent(f"load{n}", {}, {"human": ("", 5000)})
            store.create_agent("shared", {}, {"human": ("", 5000)})
        seconds, reports = _run_workers(scratch, [(f"load{n}", f"L{n}", turns, False)
                                                  for n in range(agents)])
        race_seconds, racers = _run_workers(scratch, [("shared", tag, race_turns, True)
                                                      for tag in ("A", "B")])
        with open_store(scratch) as store:
            checks = [verify(store, store.get_agent(f"load{n}").id, {f"L{n}": turns})
                      for n in range(agents)]
            race = verify(store, store.get_agent("shared").id,
                          {r["tag"]: r["committed"] for r in racers})
    return {"concurrent": _row(f"{agents} processes, {agents} agents", seconds, reports, checks),
            "race": _row("2 processes, 1 agent", race_seconds, racers, [race])}


def _row(what: str, seconds: float, reports: list[dict], checks: list[dict]) -> dict[str, Any]:
    steps = [ms for r in reports for ms in r["step_ms"]]
    committed = sum(r["committed"] for r in reports)
    return {"run": what, "turns": committed, "seconds": round(seconds, 2),
            "turns_per_s": round(committed / seconds, 1),
            "engine_p50_ms": round(percentile(steps, 50), 1),
            "engine_p95_ms": round(percentile(steps, 95), 1),
            "lost": sum(c["lost"] for c in checks),
            "interleaved": sum(c["interleaved"] for c in checks)}


def load_parser() -> argparse.ArgumentParser:
    import os

    parser = argparse.ArgumentParser(
        prog="memgpt-lite bench load",
        description="chat processes at once against one Postgres (scripted model), then two "
                    "racing for one agent; every write checked afterwards")
    parser.add_argument("--db", metavar="URL", default=os.environ.get("MEMGPT_LITE_DATABASE_URL"),
                        help="a postgresql:// server (a scratch database is made there)")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--turns", type=int, default=40, help="turns per process")
    parser.add_argument("--json", action="store_true")
    return parser


def load_main(argv: list[str]) -> int:
    parser = load_parser()
    args = parser.parse_args(argv)
    if not args.db:
        parser.error("give a Postgres server with --db URL (or MEMGPT_LITE_DATABASE_URL)")
    result = load_benchmark(args.db, args.agents, args.turns, max(1, args.turns // 2))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    cols = ("run", "turns", "seconds", "turns_per_s", "engine_p50_ms", "engine_p95_ms", "lost",
            "interleaved")
    print("  ".join(f"{c:>14}" if c != "run" else f"{c:<26}" for c in cols))
    for row in result.values():
        print("  ".join(f"{row[c]:>14}" if c != "run" else f"{row[c]:<26}" for c in cols))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        a = sys.argv[2:]
        worker(a[0], a[1], int(a[2]), a[3], a[4], a[5] == "1")
    else:
        sys.exit(load_main(sys.argv[1:]))

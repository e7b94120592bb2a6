"""Shared checks for the reliability suite: is the store still what a user can trust?"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.memory import memory_tool_schemas
from memgpt_lite.engine.paging import EVICT_TURNS_SCHEMA
from memgpt_lite.engine.store import Store, open_store
from memgpt_lite.engine.turns import group_turns
from memgpt_lite.lab.scripted import ScriptedModel, text_response

HERE = Path(__file__).parent
WORKER = HERE / "reliability_worker.py"
REPO = HERE.parent.parent


def store_problems(store: Store) -> list[str]:
    """SQLite's integrity check plus FTS5's full check of every agent's search indexes
    against the stored text (on Postgres: every row's search terms and the totals)."""
    return store.integrity_problems()


def queue_problems(store: Store, agent_id: int) -> list[str]:
    """Why the FIFO queue could not be sent to the API as it is ([] when it can)."""
    queue = store.context_messages(agent_id)
    problems = []
    for turn in group_turns(queue):
        first, last = turn.messages[0], turn.messages[-1]
        if first.role != "user" or not any(b.get("type") == "text" for b in first.content):
            problems.append(f"turn {turn.id} does not start with the user's text")
        if last.role != "assistant" or any(b.get("type") == "tool_use" for b in last.content):
            problems.append(f"turn {turn.id} does not end with the assistant's answer")
    # Tools defined as the agent sends them: the API refuses tool blocks in a history otherwise.
    body = {"model": "m", "max_tokens": 16, "tools": memory_tool_schemas() + [EVICT_TURNS_SCHEMA],
            "messages": [m.to_api() for m in queue] + [{"role": "user", "content": "next"}]}
    problem = validate_request(body)
    if problem:
        problems.append(problem)
    return problems


def recall_texts(store: Store, agent_id: int) -> list[str]:
    """Every user/assistant text in recall, oldest first."""
    return [b["text"] for m in store.all_messages(agent_id) for b in m.content
            if b.get("type") == "text"]


def assert_trustworthy(db: Path | str, name: str, *, typed: list[str] = (),
                       answered: list[str] = ()) -> None:
    """After a crash or fault: the store opens and is consistent, the queue is valid for the
    API, everything typed is in recall, every committed answer is still there, and a new turn
    works (its request is checked by the fake server's validator)."""
    with open_store(db) as store:
        assert store_problems(store) == []
        row = store.get_agent(name)
        assert row is not None, f"agent {name!r} lost"
        assert queue_problems(store, row.id) == []
        texts = recall_texts(store, row.id)
        for t in typed:
            assert any(t in x for x in texts), f"user text {t!r} not in recall"
        for t in answered:
            assert any(t in x for x in texts), f"committed reply {t!r} lost"
        model = ValidatingModel()
        agent = Agent.open(store, name, model_client=model, lock_wait=10)
        events = list(agent.step("are you there?"))
        agent.close()
        assert events[-1].completed, [e for e in events if e.kind == "error"]
        assert queue_problems(store, row.id) == []


class ValidatingModel:
    """Answers every call (chat or summariser) with a short text, after checking the request
    with the fake server's API rules: an invalid request fails the test."""

    def __init__(self, text: str = "back again"):
        self.text = text
        self.requests = []

    def stream(self, request):
        problem = validate_request(request.to_api())
        assert problem is None, problem
        self.requests.append(request)
        yield from ScriptedModel([text_response(self.text)]).stream(request)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this checkout first on its path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def start_worker(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), cwd=REPO)


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 20) -> list[str]:
    """Read the worker's stdout until a line starting with `prefix`; returns all lines read."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise AssertionError(f"worker ended before {prefix!r}: {lines} "
                                 f"{proc.stderr.read()}")  # type: ignore[union-attr]
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"no {prefix!r} from the worker within {timeout}s: {lines}")


def small_settings(**over) -> Settings:
    base = dict(context_window=6_000, max_output_tokens=500, safety_margin=100, block_limit=2_000)
    base.update(over)
    return Settings(**base)

"""The nested key-value runner: MemGPT's nested KV retrieval on data the user supplies.

Each example's pairs go into a fresh agent's archival memory, one passage per pair; the agent
is asked for a key's final value and must follow the chain with `archival_search`. Accuracy
per nesting level. Progress goes to an optional callback.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.lab.harness import DEFAULT_CLOCK, Progress, ScenarioError, StepClock, parse_clock

KV_QUESTION = ("Key-value pairs are stored in your archival memory, one per passage, written "
               "'key <KEY> has value <VALUE>'. What is the value of key {key}? A value may "
               "itself be a key: then look up its value, and so on, until you reach a value "
               "that is not a key. Reply with that final value only.")


def kv_passage(key: str, value: str) -> str:
    return f"key {key} has value {value}"


@dataclass
class KVExample:
    pairs: list[tuple[str, str]]
    key: str
    answer: str
    level: int  # 0 = the key's value is the answer; n = n further lookups


def load_nested_kv(path: str | Path) -> list[KVExample]:
    """Nested KV examples from JSON (a list) or JSONL, in the lost-in-the-middle kv format
    MemGPT built on: {"ordered_kv_records": [[key, value], ...], "key": K} plus optional
    "value" (the final answer) and "nesting_level"; missing ones are computed by following
    the chain."""
    try:
        # utf-8-sig: a file saved by Notepad starts with a byte-order mark JSON refuses.
        raw = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    except FileNotFoundError:
        raise ScenarioError(f"no nested KV file at {path}") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw.lstrip().startswith("["):
        items = _decoded(raw, path, None)
    else:
        items = [_decoded(line, path, n) for n, line in enumerate(raw.splitlines(), 1)
                 if line.strip()]
    if not isinstance(items, list) or not items:  # scored, it would be a table of nothing
        raise ScenarioError(f"{path} holds no KV examples (a JSON list or JSONL of them)")
    return [_kv_example(item, i, path) for i, item in enumerate(items)]


def _decoded(text: str, path: str | Path, line: int | None) -> Any:
    """One JSON value of the file (`line`: its line in JSONL, named when it is not JSON)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        where = "" if line is None else f": line {line} is not JSON, so it"
        raise ScenarioError(f"{path}{where} is neither a JSON list nor JSONL of KV "
                            "examples") from None


def _chain_problem(pairs: list[tuple[str, str]], key: str) -> str | None:
    """What makes an example's answer ill-defined (None: nothing): a key given two values,
    or a chain that comes back to a key it passed, has no final value to ask for."""
    table: dict[str, str] = {}
    for k, v in pairs:
        if table.setdefault(k, v) != v:
            return f"key {k!r} is given two values ({table[k]!r} and {v!r})"[:200]
    seen, value = {key}, table.get(key)
    while value in table:
        if value in seen:
            return f"the chain from key {key!r} comes back to key {value!r}"[:200]
        seen.add(value)
        value = table[value]
    return None


def _kv_example(item: Any, i: int, path: str | Path) -> KVExample:
    if not isinstance(item, dict) or "ordered_kv_records" not in item or "key" not in item:
        raise ScenarioError(f"{path}: example {i} needs 'ordered_kv_records' and 'key'")
    records, key = item["ordered_kv_records"], item["key"]
    if not isinstance(records, list) or \
            not all(isinstance(r, list) and len(r) == 2 for r in records):
        raise ScenarioError(f"{path}: example {i}: 'ordered_kv_records' must be a list of "
                            "[key, value] pairs")
    if not isinstance(key, str) or not key.strip():
        raise ScenarioError(f"{path}: example {i}: 'key' must be a text that is not empty")
    pairs = [(str(k), str(v)) for k, v in records]
    table = dict(pairs)
    chain, value = [key], table.get(key)
    if value is None:
        raise ScenarioError(f"{path}: example {i}: key {key} is not in its records")
    problem = _chain_problem(pairs, key)
    if problem:
        raise ScenarioError(f"{path}: example {i}: {problem}")
    while value in table and value not in chain:
        chain.append(value)
        value = table[value]
    level = item.get("nesting_level", len(chain) - 1)
    level = int(level) if isinstance(level, str) and level.isdecimal() else level
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ScenarioError(f"{path}: example {i}: 'nesting_level' must be a whole number "
                            "of 0 or more")
    answer = str(item.get("value", value))
    if not answer.strip():  # every reply holds the empty text: scored correct whatever it says
        raise ScenarioError(f"{path}: example {i}: the final value of key {key!r} is empty, so "
                            "any reply would count as correct")
    return KVExample(pairs, key, answer, level)


def run_nested_kv(path: str | Path, model_client: Any, *, settings: Settings | None = None,
                  progress: Progress | None = None) -> dict[str, Any]:
    """Each example: a fresh agent with the pairs in archival memory is asked the question;
    correct when the final value stands whole in the reply. Accuracy per nesting level."""
    settings = settings or Settings()
    examples = load_nested_kv(path)
    rows, failed = [], []
    for i, ex in enumerate(examples, 1):
        reply, searches, error = _run_kv_example(ex, model_client, settings)
        row = {"key": ex.key, "level": ex.level, "answer": ex.answer, "reply": reply,
               "correct": holds_value(reply, ex.answer), "searches": searches}
        if error is not None:  # no answer to score: a wrong one would be a guess
            failed.append({"key": ex.key, "level": ex.level, "error": error})
        else:
            rows.append(row)
        if progress:
            progress(f"example {i}/{len(examples)}")
    if not rows:
        raise ScenarioError(f"{path}: the model call failed for every example, so none was "
                            f"scored (first: {failed[0]['error']})")
    levels: dict[int, list[bool]] = defaultdict(list)
    for r in rows:
        levels[r["level"]].append(r["correct"])
    return {"dataset": "nested_kv", "file": str(path), "model": settings.model,
            "by_level": {str(k): _accuracy(v) for k, v in sorted(levels.items())},
            "overall": _accuracy([r["correct"] for r in rows]), "questions": rows,
            "failed": failed}


def holds_value(reply: str, value: str) -> bool:
    """Whether `value` stands whole in `reply` (any case): "12" is not in "123" or "a-12",
    since values are keys of each other and a longer one is another answer."""
    # A letter, digit, _ or - beside it would make it part of a longer value.
    pattern = rf"(?<![\w-]){re.escape(value)}(?![\w-])"
    return re.search(pattern, reply, re.IGNORECASE) is not None


def _accuracy(correct: list[bool]) -> dict[str, Any]:
    return {"n": len(correct),
            "accuracy": round(sum(correct) / len(correct), 4) if correct else None}


def _run_kv_example(ex: KVExample, model_client: Any,
                    settings: Settings) -> tuple[str, int, str | None]:
    """(reply, archival searches, why the turn failed or None) of a fresh agent that holds
    the example's pairs."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store import open_store

    with tempfile.TemporaryDirectory(prefix="memgpt-lite-nkv-") as tmp:
        with open_store(Path(tmp) / "nkv.db") as store:
            agent = Agent.open(store, "nkv", model_client=model_client, settings=settings,
                               clock=StepClock(parse_clock(DEFAULT_CLOCK)))
            for key, value in ex.pairs:
                store.add_passage(agent.id, kv_passage(key, value), created_at=DEFAULT_CLOCK)
            return _ask_kv(agent, ex.key)


def _ask_kv(agent: Any, key: str) -> tuple[str, int, str | None]:
    reply, searches, error = "", 0, None
    for event in agent.step(KV_QUESTION.format(key=key)):
        if event.kind == "tool_call" and event.call.name == "archival_search":  # type: ignore[union-attr]
            searches += 1
        elif event.kind == "error":
            error = error or event.message  # type: ignore[union-attr]
        elif event.kind == "turn_end":
            reply = event.text  # type: ignore[union-attr]
            if event.completed:  # type: ignore[union-attr]
                error = None
            else:
                error = error or "the turn did not complete"
    return reply, searches, error

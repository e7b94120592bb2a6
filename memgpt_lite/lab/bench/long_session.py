"""The long-session benchmark: token economics of the paging controller (the suite's
"tokens" section, and a command of its own).

A deterministic scripted "policy" model chats for N turns with the real engine (agent loop,
context builder, pager, SQLite store). It saves a fact now and then, searches sometimes and
answers memory-pressure alerts by evicting the oldest half of the listed turns. Usage comes
from a tokenizer of our own (~4 chars per token, as `scripted.estimate_usage`) and a
prompt-cache simulator: a request reads from cache the longest prefix, ending at a block, that
an earlier request wrote at one of its cache breakpoints (up to 20 blocks back, as the API
does), and writes the rest up to its last breakpoint (the rule is `fake_server.prefix_cache`,
shared with the fake server). Three layouts run side by side on the same script:

  memgpt_lite  core memory in the tail of the request (docs/architecture.md), paging on
  classic      MemGPT's layout: core memory inside the system prompt, paging on
  full         full history, no paging, until a request would overflow the window

Run: python -m memgpt_lite.lab.bench.long_session [--turns 500] [--budgets 8000,32000]
     [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.context import BuiltContext, ContextBuilder, ContextInputs
from memgpt_lite.engine.records import (
    ModelRequest,
    ModelResponse,
    Usage,
    canonical_json,
)
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.bench.plan import Plan
from memgpt_lite.lab.bench.report import Figure, Row, Section
from memgpt_lite.lab.bench.stats import machine_info, machine_line, percentile
from memgpt_lite.lab.fake_server import prefix_cache
from memgpt_lite.lab.scripted import text_response, tool_response

CHARS_PER_TOKEN = 4  # the benchmark's own deterministic tokenizer (as model.estimate_usage)
CACHE_MIN_TOKENS = 1024  # shorter prefixes are not cached (Sonnet's minimum)
VARIANTS = ("memgpt_lite", "classic", "full")
WORDS = ("deploy build cache index schema query budget invoice garden recipe python sqlite "
         "travel kyoto lisbon tickets meeting friday deadline review design token memory "
         "benchmark latency report draft chapter novel bicycle repair coffee").split()


def tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


# --------------------------------------------------------------------------- cache simulator


class CacheSim:
    """Prompt caching by prefix: blocks in API order (tools → system → messages), hashed
    cumulatively; `cache_control` markers are not part of the content that is hashed.
    Its own tokenizer (4 chars per token over each block's text), the fake server's rule."""

    def __init__(self) -> None:
        self.written: set[bytes] = set()

    def usage(self, request: ModelRequest, response: ModelResponse) -> Usage:
        hashes, ends, breakpoints = _prefixes(_blocks(request.to_api()))
        total = tokens(len(request.canonical()))  # already made by the agent for its digest
        read, write = prefix_cache(self.written, hashes, [tokens(end) for end in ends],
                                   breakpoints, CACHE_MIN_TOKENS)
        read = min(read, total)
        write = min(write, total - read)
        out = tokens(len(canonical_json(response.content)))
        return Usage(total - read - write, out, write, read)


def _blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """(canonical text without cache_control, is a breakpoint) for every cacheable block."""
    out: list[tuple[str, bool]] = []

    def add(prefix: str, block: dict[str, Any]) -> None:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((prefix + canonical_json(clean), "cache_control" in block))

    for tool in body.get("tools") or []:
        add("tool:", tool)
    for block in body.get("system") or []:
        add("system:", block)
    for i, message in enumerate(body["messages"]):
        for block in message["content"]:
            add(f"{i}:{message['role']}:", block)
    return out


def _prefixes(blocks: list[tuple[str, bool]]) -> tuple[list[bytes], list[int], list[int]]:
    h = hashlib.blake2b(digest_size=16)
    hashes, ends, breakpoints, chars = [], [], [], 0
    for i, (text, bp) in enumerate(blocks):
        h.update(text.encode())
        chars += len(text)
        hashes.append(h.copy().digest())
        ends.append(chars)
        if bp:
            breakpoints.append(i)
    return hashes, ends, breakpoints


class SimModel:
    """A ModelClient: the policy answers, the cache simulator fills in usage."""

    def __init__(self, policy: Callable[[ModelRequest], ModelResponse]):
        self.policy, self.cache = policy, CacheSim()

    def stream(self, request: ModelRequest) -> Iterator[ModelResponse]:
        response = self.policy(request)
        yield replace(response, usage=self.cache.usage(request, response), model=request.model)


# --------------------------------------------------------------------------- the policy


def user_text(turn: int, rng: random.Random) -> str:
    n = rng.randint(15, 90) if turn % 10 else rng.randint(250, 400)  # now and then a paste
    return f"[{turn}] " + " ".join(rng.choice(WORDS) for _ in range(n)) + f" (value {turn * 37})"


@dataclass
class Policy:
    """Deterministic stand-in for the model: it reads each request as the real one would."""

    focus: int = 0
    evicted_turns: list[int] = field(default_factory=list)

    def __call__(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]["content"]
        text = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
        if any(b.get("type") == "tool_result" for b in last) or request.tool_choice:
            if not request.tool_choice and not _evicted_this_turn(request.messages):
                calls = self._pressure(text)  # an alert that arrived mid-turn
                if calls:
                    return tool_response(calls)
            return text_response(f"Done. Noted that for you ({len(last)} results).")
        turn = int(re.search(r"\[(\d+)\]", text).group(1))  # type: ignore[union-attr]
        calls = self._pressure(text) + self._memory(turn, text)
        if calls:
            return tool_response(calls)
        return text_response(f"Here is my answer about turn {turn}: " + " ".join(
            text.split()[1:40]))

    def _pressure(self, text: str) -> list[tuple[str, dict[str, Any]]]:
        listed = [int(i) for i in re.findall(r"^- (\d+) · ", text, re.M)]
        if not listed:
            return []
        victims = listed[:max(1, len(listed) // 2)]
        self.evicted_turns += victims
        return [("evict_turns", {"turn_ids": victims, "summary":
                 f"Turns {victims[0]}-{victims[-1]}: small talk about projects; values noted."})]

    def _memory(self, turn: int, text: str) -> list[tuple[str, dict[str, Any]]]:
        calls: list[tuple[str, dict[str, Any]]] = []
        if turn % 7 == 3:
            old, self.focus = self.focus, turn
            calls.append(("core_memory_replace", {"label": "human", "old_content":
                          f"Focus: turn {old}", "new_content": f"Focus: turn {turn}"})
                         if old else ("core_memory_append", {"label": "human",
                                                             "content": f"Focus: turn {turn}"}))
        if turn % 5 == 1:
            calls.append(("archival_insert", {"content": f"Fact from turn {turn}: "
                          + " ".join(text.split()[1:12])}))
        if turn % 9 == 4:
            calls.append(("conversation_search", {"query": text.split()[2], "page": 1}))
        return calls


def _evicted_this_turn(messages: list[dict[str, Any]]) -> bool:
    for message in reversed(messages):
        blocks = message["content"]
        if message["role"] == "assistant" and any(b.get("name") == "evict_turns" for b in blocks):
            return True
        if message["role"] == "user" and not any(b.get("type") == "tool_result" for b in blocks):
            return False  # reached the user's input: the start of this turn
    return False


def summariser_policy(request: ModelRequest) -> ModelResponse:
    """A cheap summariser: keeps the first words of each removed user line."""
    text = request.messages[-1]["content"][0]["text"]
    lines = [ln[:80] for ln in text.splitlines() if ln.startswith("user:")]
    return text_response("- " + "\n- ".join(lines[-12:]) if lines else "- (nothing to keep)")


# --------------------------------------------------------------------------- classic layout


class ClassicBuilder(ContextBuilder):
    """MemGPT's layout: core memory rendered into the system prompt, so every memory edit
    changes the first cached block and invalidates the whole prefix."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_prompt = self.system_prompt

    def build(self, inputs: ContextInputs) -> BuiltContext:
        self.system_prompt = f"{self.base_prompt}\n\n{inputs.core_memory}"
        return super().build(replace(inputs, core_memory=""))


# --------------------------------------------------------------------------- one run


@dataclass
class TurnStats:
    input_tokens: int = 0  # total prompt tokens of the turn's chat calls (uncached + cache)
    cache_read: int = 0
    cost: float = 0.0
    calls: int = 0
    max_request: int = 0


def run_session(variant: str, window: int, turns: int, seed: int = 1,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    from memgpt_lite.engine.agent import Agent  # heavy imports stay out of `--help`
    from memgpt_lite.engine.store import open_store

    rng = random.Random(seed)
    policy = Policy()
    settings = Settings(context_window=window if variant != "full" else 10**9)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        agent = Agent.open(store, "bench", model_client=SimModel(policy),
                           summary_client=SimModel(summariser_policy), settings=settings)
        if variant == "classic":
            agent.builder = agent.pager.builder = ClassicBuilder(
                settings, agent.builder.tools, agent.counter)
        per_turn, counts, overflow_at = [], Tally(), None
        started = time.perf_counter()
        for turn in range(1, turns + 1):
            stats = _run_turn(agent, user_text(turn, rng), counts)
            if variant == "full" and stats.max_request > window - settings.max_output_tokens:
                overflow_at = turn
                break
            per_turn.append(stats)
            if progress and turn % 50 == 0:
                progress(f"{variant} @ {window:,}: turn {turn}")
        elapsed = time.perf_counter() - started
        store.close()
    return _session_report(variant, window, per_turn, counts, overflow_at, turns, elapsed)


def _run_turn(agent: Any, text: str, counts: Tally) -> TurnStats:
    """Run one turn; `counts` tallies the whole session, the result covers this turn."""
    turn = Tally()
    for event in agent.step(text):
        turn.add(event)
        counts.add(event)
        if event.kind == "turn_end" and not event.completed:
            raise RuntimeError(f"turn {event.turn_id} failed in the benchmark")
    calls = turn.model_calls - turn.summary_calls
    return TurnStats(input_tokens=turn.usage.total_input,
                     cache_read=turn.usage.cache_read_input_tokens,
                     cost=turn.paid_cost_usd, calls=calls, max_request=turn.max_request_tokens)


def _session_report(variant: str, window: int, per_turn: list[TurnStats], counts: Tally,
                            overflow_at: int | None, turns: int, elapsed: float) -> dict[str, Any]:
    inputs = [t.input_tokens for t in per_turn]
    total_in = sum(inputs)
    k = min(50, len(inputs) // 2) or 1
    return {
        "variant": variant, "context_window": window, "turns_requested": turns,
        "turns_run": len(per_turn), "overflow_at_turn": overflow_at,
        "input_tokens_per_turn": {
            "mean": round(statistics.fmean(inputs), 1) if inputs else 0,
            "p95": percentile(inputs, 95) if inputs else 0, "max": max(inputs, default=0),
            "first_50_mean": round(statistics.fmean(inputs[:k]), 1) if inputs else 0,
            "last_50_mean": round(statistics.fmean(inputs[-k:]), 1) if inputs else 0,
        },
        "alerts": counts.alerts, "model_evictions": counts.model_evictions,
        "forced_flushes": counts.forced_flushes, "summariser_calls": counts.summary_calls,
        "folds": counts.folds, "clips": counts.clips,
        "max_request_tokens": max((t.max_request for t in per_turn), default=0),
        "cache_hit_share": (round(sum(t.cache_read for t in per_turn) / total_in, 4)
                            if total_in else 0),
        "cost_per_turn_usd": round(sum(t.cost for t in per_turn) / max(1, len(per_turn)), 6),
        "seconds": round(elapsed, 2),
        "per_turn": {"input_tokens": inputs, "cost_usd": [round(t.cost, 6) for t in per_turn]},
    }


# --------------------------------------------------------------------------- the suite


def run_benchmark(turns: int = 500, budgets: tuple[int, ...] = (8_000, 32_000), seed: int = 1,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """All variants at every context window; results as data (for `memgpt-lite bench`)."""
    results = [run_session(v, w, turns, seed, progress) for w in budgets for v in VARIANTS]
    return {"benchmark": "session", "turns": turns, "context_windows": list(budgets),
            "seed": seed, "tokenizer": f"{CHARS_PER_TOKEN} chars/token",
            "machine": machine_line(machine_info()),
            "results": results, "ratios": _ratios(results)}


def _ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """memgpt_lite / each other layout, per window, over the turns both ran (full history
    stops at its overflow, so it is compared on its own turns only)."""
    out = []
    for ours in (r for r in results if r["variant"] == "memgpt_lite"):
        for other in (r for r in results if r["context_window"] == ours["context_window"]
                      and r["variant"] != "memgpt_lite"):
            n = min(ours["turns_run"], other["turns_run"])
            out.append({"context_window": ours["context_window"], "vs": other["variant"],
                        "over_turns": n,
                        "input_tokens_per_turn": _ratio(ours, other, "input_tokens", n),
                        "cost_per_turn": _ratio(ours, other, "cost_usd", n)})
    return out


def _ratio(ours: dict, other: dict, key: str, n: int) -> float | None:
    a, b = sum(ours["per_turn"][key][:n]), sum(other["per_turn"][key][:n])
    return round(a / b, 3) if b else None


# --------------------------------------------------------------------------- the suite's section

LAYOUTS = {"memgpt_lite": "memgpt_lite (core memory in the tail)",
           "classic": "MemGPT classic (core memory in system)", "full": "full history"}


def run_tokens(plan: Plan, progress: Callable[[str], None]) -> Section:
    report = run_benchmark(plan.session_turns, plan.budgets,
                           progress=lambda m: progress(f"tokens: {m}"))
    method = (f"long_session.run_benchmark: the scripted {plan.session_turns}-turn session "
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


def markdown_table(report: dict[str, Any]) -> str:
    head = ("| window | layout | turns | input tok/turn mean | p95 | max | first 50 → last 50 | "
            "max request | alerts | model evictions | forced flushes | summariser calls | "
            "cache-hit share | $/turn |")
    rows = [head, "|" + "---|" * 14]
    for r in report["results"]:
        t = r["input_tokens_per_turn"]
        turns = (f"{r['turns_run']} (overflow at {r['overflow_at_turn']})"
                 if r["overflow_at_turn"] else str(r["turns_run"]))
        rows.append(
            f"| {r['context_window'] // 1000}k | {r['variant']} | {turns} | {t['mean']:,.0f} | "
            f"{t['p95']:,} | {t['max']:,} | {t['first_50_mean']:,.0f} → {t['last_50_mean']:,.0f} | "
            f"{r['max_request_tokens']:,} | {r['alerts']} | {r['model_evictions']} | "
            f"{r['forced_flushes']} | "
            f"{r['summariser_calls']} | {100 * r['cache_hit_share']:.0f}% | "
            f"{r['cost_per_turn_usd']:.4f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.bench.long_session",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--budgets", default="8000,32000",
                        help="context windows to run, comma-separated (default 8000,32000)")
    parser.add_argument("--quick", action="store_true", help="100 turns")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    budgets = tuple(int(b.replace("_", "")) for b in args.budgets.split(","))
    turns = 100 if args.quick else args.turns
    report = run_benchmark(turns, budgets, args.seed,
                           progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"Long session: {turns} turns, scripted policy model, usage by a {CHARS_PER_TOKEN} "
          f"chars/token tokenizer with a prompt-cache simulator; {report['machine']}.\n")
    print(markdown_table(report))
    print()
    for r in report["ratios"]:
        print(f"{r['context_window'] // 1000}k, turns 1–{r['over_turns']}: memgpt_lite / "
              f"{r['vs']}: input tokens ×{r['input_tokens_per_turn']}, "
              f"cost ×{r['cost_per_turn']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scenario evals, run comparison and the long-term-memory dataset runners.

* Scenarios (TOML) re-drive sessions of user inputs — with restarts between sessions and a
  fixed clock — against a model client and score checks on what the agent did.
* `compare(a, b)` gives per-check and total deltas between two JSON reports.
* `run_locomo` (LoCoMo format) and `run_nested_kv` (MemGPT's nested key-value retrieval) run
  on data the user supplies; nothing is downloaded.

Every run uses a fresh agent in a temporary data dir. This module never prints; progress
goes to an optional callback.
"""

from __future__ import annotations

import json
import re
import string
import tempfile
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import StreamError
from memgpt_lite.engine.events import Event
from memgpt_lite.engine.model import final_response
from memgpt_lite.engine.recording import (
    UNRECORDED_KINDS,
    Recorder,
    core_memory,
    record_header,
    recorded_step,
)
from memgpt_lite.engine.records import ModelRequest, Usage, parse_iso, utc_iso
from memgpt_lite.engine.text import shorten

DEFAULT_CLOCK = "2026-01-01T09:00:00Z"
Progress = Callable[[str], None]
CHECK_TYPES = ("reply_contains", "reply_matches", "core_contains", "archival_contains",
               "tool_called", "tool_not_called", "no_overflow", "max_input_tokens_per_turn",
               "judge")


class ScenarioError(ValueError):
    """A scenario or dataset file is missing or malformed; one sentence for the user."""


# =========================================================================== scenarios


@dataclass
class Check:
    name: str
    type: str
    params: dict[str, Any]


@dataclass
class SessionSpec:
    inputs: list[str]
    restart: bool = False  # reopen the agent from its store first (a new process)
    clock: str | None = None  # jump the clock here first (e.g. a session a week later)


@dataclass
class Scenario:
    """A scenario file: sessions of user inputs and the checks to score.

        name = "remembers-a-fact"
        clock = "2026-01-01T09:00:00Z"   # fixed start; +clock_step seconds per input
        [settings]                        # overrides of config.Settings
        context_window = 6000
        [[session]]
        inputs = ["My cat is called Miso.", "Thanks!"]
        [[session]]
        restart = true
        inputs = ["What is my cat called?"]
        [[check]]
        type = "reply_contains"           # see CHECK_TYPES
        turn = "last"                     # 1-based over all sessions, or "last"
        text = "Miso"
    """

    name: str
    sessions: list[SessionSpec]
    checks: list[Check]
    clock: str = DEFAULT_CLOCK
    clock_step: int = 60
    settings: dict[str, Any] = field(default_factory=dict)
    agent: str = "eval"
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ScenarioError(f"no scenario file at {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{path} is not valid TOML: {exc}") from None
        scenario = cls.from_dict(data, default_name=path.stem)
        scenario.path = path
        return scenario

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, default_name: str = "scenario") -> Scenario:
        sessions = [_session(s, i) for i, s in enumerate(data.get("session") or [], 1)]
        if not sessions or not any(s.inputs for s in sessions):
            raise ScenarioError(f"scenario {default_name!r} has no [[session]] with inputs")
        checks = _checks(data.get("check") or [], sum(len(s.inputs) for s in sessions))
        unknown = set(data.get("settings") or {}) - set(Settings().to_dict())
        if unknown:
            raise ScenarioError(f"unknown setting(s) in [settings]: {', '.join(sorted(unknown))}")
        clock = str(data.get("clock") or DEFAULT_CLOCK)
        _parse_clock(clock)
        return cls(str(data.get("name") or default_name), sessions, checks, clock,
                   int(data.get("clock_step", 60)), dict(data.get("settings") or {}),
                   str(data.get("agent") or "eval"))

    @property
    def inputs(self) -> list[str]:
        return [text for s in self.sessions for text in s.inputs]


def _parse_clock(text: str) -> datetime:
    try:
        return parse_iso(text)
    except ValueError:
        raise ScenarioError(f"clock {text!r} is not an ISO time like {DEFAULT_CLOCK}") from None


def _session(raw: Any, number: int) -> SessionSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("inputs", []), list):
        raise ScenarioError(f"[[session]] {number} needs inputs = [\"...\", ...]")
    if raw.get("clock"):
        _parse_clock(str(raw["clock"]))
    return SessionSpec([str(x) for x in raw.get("inputs", [])], bool(raw.get("restart")),
                       raw.get("clock"))


_REQUIRED = {"reply_contains": ("text",), "reply_matches": ("pattern",),
             "core_contains": ("label", "text"), "archival_contains": ("text",),
             "tool_called": ("tool",), "tool_not_called": ("tool",), "no_overflow": (),
             "max_input_tokens_per_turn": ("max",), "judge": ("criterion",)}


def _checks(raw: list[Any], inputs: int) -> list[Check]:
    checks, names = [], Counter()
    for i, item in enumerate(raw, 1):
        kind = _check_kind(item, i, inputs)
        params = {k: v for k, v in item.items() if k not in ("type", "name")}
        name = str(item.get("name") or _auto_name(kind, params))
        names[name] += 1
        checks.append(Check(name if names[name] == 1 else f"{name} #{names[name]}", kind, params))
    return checks


def _check_kind(item: Any, i: int, inputs: int) -> str:
    """The type of [[check]] number `i`, once its parameters are known to be usable: a bad
    one must stop the run before it spends model calls, and a turn past the last input
    would make tool_not_called and no_overflow pass on nothing."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind not in _REQUIRED:
        raise ScenarioError(f"[[check]] {i} has type {kind!r}; use one of {', '.join(CHECK_TYPES)}")
    missing = [k for k in _REQUIRED[kind] if k not in item]
    if missing:
        raise ScenarioError(f"[[check]] {i} ({kind}) needs {', '.join(missing)}")
    if kind == "reply_matches":
        try:
            re.compile(item["pattern"])
        except re.error as exc:
            raise ScenarioError(f"[[check]] {i}: bad regex {item['pattern']!r}: {exc}") from None
    turn = item.get("turn")
    if turn not in (None, "last", "any") and not (str(turn).isdigit()
                                                  and 1 <= int(turn) <= inputs):
        raise ScenarioError(f"[[check]] {i}: turn = {turn!r}; use 1 to {inputs}, "
                            f"\"last\" or \"any\"")
    return kind


def _auto_name(kind: str, p: dict[str, Any]) -> str:
    where = f" @{p['turn']}" if "turn" in p else ""
    detail = {"reply_contains": lambda: repr(p["text"]), "reply_matches": lambda: f"/{p['pattern']}/",
              "core_contains": lambda: f"{p['label']} {p['text']!r}",
              "archival_contains": lambda: repr(p["text"]), "tool_called": lambda: p["tool"],
              "tool_not_called": lambda: p["tool"], "no_overflow": lambda: "",
              "max_input_tokens_per_turn": lambda: f"≤ {p['max']:,}",
              "judge": lambda: repr(str(p["criterion"])[:40])}[kind]()
    return f"{kind} {detail}{where}".strip()


# --------------------------------------------------------------------------- running


@dataclass
class TurnRecord:
    index: int  # 1-based over the whole scenario
    session: int
    text: str
    reply: str = ""
    completed: bool = False
    events: list[Event] = field(default_factory=list)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class RunState:
    """What a scenario run produced; the checks read it."""

    turns: list[TurnRecord]
    core: dict[str, str]
    passages: list[str]


class StepClock:
    """A fixed clock the runner moves: one reading per user input, never the wall clock."""

    def __init__(self, start: datetime):
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def run_scenario(scenario: Scenario, model_client: Any, *, summary_client: Any = None,
                 model: str | None = None, recorder: Recorder | None = None,
                 judge: Any = None, progress: Progress | None = None,
                 source: str = "scripted") -> dict[str, Any]:
    """Run a scenario through a fresh agent and score it; returns the JSON report.

    `model_client` is any ModelClient (AnthropicClient, ScriptedModel, ReplayModelClient).
    A ReplayModelClient is re-aligned at every input. `judge` (a ModelClient) enables
    judge checks; without it they are skipped and not scored."""
    settings = Settings.from_dict({**Settings().to_dict(), **scenario.settings,
                                   **({"model": model} if model else {})})
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-eval-") as tmp:
        state = _drive(scenario, settings, model_client, summary_client, recorder,
                       Path(tmp) / "eval.db", progress)
    checks = [score_check(c, state, judge) for c in scenario.checks]
    report = _report(scenario, settings.model, source, checks, state)
    divergences = getattr(model_client, "divergences", None)
    if divergences is not None:
        report["replay_divergences"] = [str(d) for d in divergences]
    if recorder is not None:
        report["recording"] = str(recorder.path)
    return report


def _drive(scenario: Scenario, settings: Settings, client: Any, summary_client: Any,
           recorder: Recorder | None, db: Path, progress: Progress | None) -> RunState:
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store import Store

    clock = StepClock(_parse_clock(scenario.clock))
    store = Store(db)
    open_agent = lambda: Agent.open(store, scenario.agent, model_client=client,  # noqa: E731
                                    summary_client=summary_client, settings=settings,
                                    clock=clock)
    agent, turns = open_agent(), []
    if recorder is not None:
        record_header(agent, recorder, source="eval", note=f"scenario {scenario.name}",
                      created_at=utc_iso(clock.now))
    try:
        for number, session in enumerate(scenario.sessions, 1):
            if session.restart:
                store.close()
                store = Store(db)
                agent = open_agent()
                if recorder is not None:
                    recorder.restart()
            jump = _parse_clock(session.clock) if session.clock else None
            for j, text in enumerate(session.inputs):
                if j == 0 and jump is not None:
                    clock.now = jump
                elif turns:
                    clock.now += timedelta(seconds=scenario.clock_step)
                turns.append(_turn(agent, client, recorder, TurnRecord(len(turns) + 1, number, text)))
                if progress:
                    progress(f"turn {len(turns)}/{len(scenario.inputs)}")
        return RunState(turns, core_memory(agent),
                        [h.text for h in store.list_passages(agent.id, limit=100_000)])
    finally:
        store.close()


def _turn(agent: Any, client: Any, recorder: Recorder | None, record: TurnRecord) -> TurnRecord:
    if hasattr(client, "begin_turn"):
        client.begin_turn(record.index - 1)
    events = recorded_step(agent, recorder, record.text) if recorder else agent.step(record.text)
    for event in events:
        if event.kind not in UNRECORDED_KINDS:
            record.events.append(event)
        if event.kind == "turn_end":
            record.reply, record.completed = event.text, event.completed  # type: ignore[union-attr]
    return record


# --------------------------------------------------------------------------- checks


def _turns_for(check: Check, state: RunState) -> list[TurnRecord]:
    turn = check.params.get("turn")
    if turn is None:
        return state.turns if check.type.startswith(("tool_", "max_", "no_")) else state.turns[-1:]
    if turn == "last":
        return state.turns[-1:]
    if turn == "any":
        return state.turns
    index = int(turn)
    return [t for t in state.turns if t.index == index]


def score_check(check: Check, state: RunState, judge: Any = None) -> dict[str, Any]:
    """{name, type, passed (None = skipped), detail}"""
    passed, detail = _SCORERS[check.type](check, state, judge)
    return {"name": check.name, "type": check.type, "passed": passed, "detail": detail}


def _fold(text: str, check: Check) -> str:
    return text if check.params.get("case_sensitive") else text.casefold()


def _reply_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    want = _fold(str(check.params["text"]), check)
    hit = [t for t in turns if want in _fold(t.reply, check)]
    if hit:
        return True, f"turn {hit[0].index} contains {check.params['text']!r}"
    return False, _reply_miss(turns, f"no reply contains {check.params['text']!r}")


def _reply_matches(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    flags = 0 if check.params.get("case_sensitive") else re.IGNORECASE
    hit = [t for t in turns if re.search(check.params["pattern"], t.reply, flags)]
    if hit:
        return True, f"turn {hit[0].index} matches /{check.params['pattern']}/"
    return False, _reply_miss(turns, f"no reply matches /{check.params['pattern']}/")


def _reply_miss(turns: list[TurnRecord], what: str) -> str:
    if not turns:
        return f"{what}: there is no such turn"
    return f"{what}; turn {turns[-1].index} said {shorten(turns[-1].reply, 70)!r}"


def _core_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    label = str(check.params["label"])
    value = state.core.get(label)
    if value is None:
        return False, f"there is no core block {label!r}"
    ok = _fold(str(check.params["text"]), check) in _fold(value, check)
    return ok, f"{label} = {shorten(value, 70)!r}"


def _archival_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    want = _fold(str(check.params["text"]), check)
    hits = [p for p in state.passages if want in _fold(p, check)]
    if hits:
        return True, f"passage {shorten(hits[0], 70)!r}"
    return False, f"none of {len(state.passages)} passages contains {check.params['text']!r}"


def _tool_calls(check: Check, state: RunState) -> list[int]:
    return [t.index for t in _turns_for(check, state) for e in t.of("tool_call")
            if e.call.name == check.params["tool"]]


def _tool_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    least = int(check.params.get("min", 1))
    where = f"in turns {sorted(set(calls))}" if calls else "never"
    return len(calls) >= least, f"{check.params['tool']} called {len(calls)}× {where}"


def _tool_not_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    where = f" in turns {sorted(set(calls))}" if calls else ""
    return not calls, f"{check.params['tool']} called {len(calls)}×{where}"


def _no_overflow(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    bad = [t.index for t in _turns_for(check, state) if _overflowed(t)]
    return not bad, f"provider overflow in turns {bad}" if bad else "no overflow"


def _overflowed(turn: TurnRecord) -> bool:
    """The agent retries a call the provider refused as too long under the same call index,
    and evicts first only when it has turns to evict, so the repeat is the sure sign."""
    indexes = [e.call_index for e in turn.of("model_call") if e.purpose == "chat"]
    return (len(indexes) != len(set(indexes))
            or any(e.by == "overflow" for e in turn.of("eviction"))
            or any(e.error_kind in ("prompt_too_long", "overflow") for e in turn.of("error")))


def _max_input_tokens(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    limit, per = int(check.params["max"]), check.params.get("per", "turn")
    sizes = []
    for t in _turns_for(check, state):
        if per == "request":
            sizes += [(t.index, e.usage.total_input) for e in t.of("usage")]
        else:
            sizes += [(t.index, sum(e.usage.total_input for e in t.of("usage")))]
    if not sizes:
        return False, "no turns to measure"
    turn, worst = max(sizes, key=lambda s: s[1])
    return worst <= limit, f"largest {per}: {worst:,} input tokens (turn {turn}); limit {limit:,}"


def _judge(check: Check, state: RunState, judge: Any) -> tuple[bool | None, str]:
    if judge is None:
        return None, "skipped: judge checks run only with --judge"
    turns = _turns_for(check, state)
    if not turns:
        return False, "there is no such turn"
    verdict = ask_judge(judge, str(check.params["criterion"]), turns[-1].text, turns[-1].reply,
                        model=check.params.get("model"))
    return verdict.startswith("PASS"), verdict


_SCORERS: dict[str, Callable[[Check, RunState, Any], tuple[bool | None, str]]] = {
    "reply_contains": _reply_contains, "reply_matches": _reply_matches,
    "core_contains": _core_contains, "archival_contains": _archival_contains,
    "tool_called": _tool_called, "tool_not_called": _tool_not_called,
    "no_overflow": _no_overflow, "max_input_tokens_per_turn": _max_input_tokens,
    "judge": _judge,
}

JUDGE_PROMPT = ("You grade one reply of an assistant. Say whether the reply meets the "
                "criterion. Answer with PASS or FAIL on the first line, then one sentence why.")


def ask_judge(client: Any, criterion: str, question: str, reply: str, *,
              model: str | None = None) -> str:
    """One judge call; returns 'PASS …' or 'FAIL …'."""
    text = (f"<criterion>\n{criterion}\n</criterion>\n<user_message>\n{question}\n"
            f"</user_message>\n<reply>\n{reply}\n</reply>")
    request = ModelRequest(model=model or Settings().model, max_tokens=200,
                           system=[{"type": "text", "text": JUDGE_PROMPT}],
                           messages=[{"role": "user", "content": [{"type": "text", "text": text}]}])
    try:
        response = final_response(client.stream(request))
    except StreamError:
        raise ScenarioError("the judge's stream ended without a response") from None
    answer = response.text.strip()
    head = answer.split(None, 1)[0].upper().strip(".:") if answer else ""
    return answer if head in ("PASS", "FAIL") else f"FAIL (unclear verdict: {shorten(answer, 70)!r})"


# --------------------------------------------------------------------------- reports


def _report(scenario: Scenario, model: str, source: str, checks: list[dict[str, Any]],
            state: RunState) -> dict[str, Any]:
    scored = [c for c in checks if c["passed"] is not None]
    passed = sum(1 for c in scored if c["passed"])
    return {"scenario": scenario.name, "model": model, "source": source,
            "created_at": utc_iso(datetime.now(timezone.utc)),
            "checks": checks, "passed": passed, "failed": len(scored) - passed,
            "skipped": len(checks) - len(scored),
            "score": round(passed / len(scored), 4) if scored else 1.0,
            "totals": totals(state.turns)}


def totals(turns: list[TurnRecord]) -> dict[str, Any]:
    usage, cost, tools = Usage(), 0.0, Counter()
    counts = Counter()
    biggest = 0
    for t in turns:
        for e in t.events:
            counts[e.kind] += 1
            if e.kind == "usage":
                usage, cost = usage + e.usage, cost + e.cost_usd
                biggest = max(biggest, e.usage.total_input)
            elif e.kind == "tool_call":
                tools[e.call.name] += 1
            elif e.kind == "eviction":
                counts["evict_" + e.by] += 1
    return {"turns": len(turns), "model_calls": counts["model_call"],
            "tool_calls": sum(tools.values()), "tools": dict(sorted(tools.items())),
            "input_tokens": usage.total_input, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_input_tokens,
            "max_request_tokens": biggest, "cost_usd": round(cost, 6),
            "alerts": counts["pressure_alert"], "evictions": counts["evict_model"],
            "forced_flushes": counts["evict_flush"] + counts["evict_overflow"],
            "errors": counts["error"]}


def failed(report: dict[str, Any]) -> bool:
    return _failed(report) > 0


def runs_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A report file holds one run, or {"runs": [...]} for several scenarios."""
    return list(report["runs"]) if "runs" in report else [report]


def combine(reports: list[dict[str, Any]]) -> dict[str, Any]:
    if len(reports) == 1:
        return reports[0]
    runs = {"runs": reports}
    return {**runs, "passed": _passed(runs), "failed": _failed(runs), "score": _score(runs)}


NUMERIC_TOTALS = ("turns", "model_calls", "tool_calls", "input_tokens", "output_tokens",
                  "cache_read_tokens", "max_request_tokens", "cost_usd", "alerts", "evictions",
                  "forced_flushes", "errors")


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-check and total deltas from run A to run B (two JSON reports).

    A check is keyed by scenario and name; `change` is fixed | broke | same-pass |
    same-fail | new | gone | skipped."""
    checks_a, checks_b = _keyed_checks(a), _keyed_checks(b)
    rows = []
    for key in list(checks_a) + [k for k in checks_b if k not in checks_a]:
        pa, pb = (checks_a.get(key) or {}).get("passed"), (checks_b.get(key) or {}).get("passed")
        rows.append({"scenario": key[0], "name": key[1], "a": pa, "b": pb,
                     "change": _change(key in checks_a, key in checks_b, pa, pb)})
    tot_a, tot_b = _sum_totals(a), _sum_totals(b)
    return {"checks": rows,
            "score": {"a": _score(a), "b": _score(b), "delta": round(_score(b) - _score(a), 4)},
            "passed": {"a": _passed(a), "b": _passed(b), "delta": _passed(b) - _passed(a)},
            "totals": {k: {"a": tot_a[k], "b": tot_b[k], "delta": round(tot_b[k] - tot_a[k], 6)}
                       for k in NUMERIC_TOTALS}}


def _keyed_checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.get("scenario", ""), c["name"]): c for r in runs_of(report) for c in r["checks"]}


def _change(in_a: bool, in_b: bool, pa: bool | None, pb: bool | None) -> str:
    if not in_a:
        return "new"
    if not in_b:
        return "gone"
    if pa is None or pb is None:
        return "skipped"
    if pa == pb:
        return "same-pass" if pa else "same-fail"
    return "fixed" if pb else "broke"


def _score(report: dict[str, Any]) -> float:
    passed, scored = _passed(report), _passed(report) + _failed(report)
    return round(passed / scored, 4) if scored else 1.0


def _passed(report: dict[str, Any]) -> int:
    return sum(r["passed"] for r in runs_of(report))


def _failed(report: dict[str, Any]) -> int:
    return sum(r["failed"] for r in runs_of(report))


def _sum_totals(report: dict[str, Any]) -> dict[str, float]:
    out = dict.fromkeys(NUMERIC_TOTALS, 0)
    for run in runs_of(report):
        for k in NUMERIC_TOTALS:
            out[k] += (run.get("totals") or {}).get(k, 0) or 0
    return out


def load_report(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"no report at {path}") from None
    except json.JSONDecodeError:
        raise ScenarioError(f"{path} is not a JSON eval report") from None
    if not isinstance(data, dict) or not ("checks" in data or "runs" in data):
        raise ScenarioError(f"{path} is not a memgpt-lite eval report (no checks)")
    return data


# =========================================================================== LoCoMo

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                     5: "adversarial"}
_LOCOMO_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


def load_locomo(path: str | Path) -> list[dict[str, Any]]:
    """The samples of a locomo10.json-format file (a list, or one sample)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"no LoCoMo file at {path}") from None
    except json.JSONDecodeError:
        raise ScenarioError(f"{path} is not JSON (expected the locomo10.json format)") from None
    samples = data if isinstance(data, list) else [data]
    for i, s in enumerate(samples):
        if not isinstance(s, dict) or "conversation" not in s or "qa" not in s:
            raise ScenarioError(f"{path}: sample {i} has no 'conversation' and 'qa'")
    return samples


def locomo_time(text: str | None) -> str | None:
    """'1:56 pm on 8 May, 2023' → '2023-05-08T13:56:00Z' (None when unparseable)."""
    m = _LOCOMO_TIME.search(text or "")
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    try:
        moment = datetime.strptime(f"{day} {month[:3]} {year}", "%d %b %Y")
    except ValueError:
        return None
    hour_24 = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return utc_iso(moment.replace(hour=hour_24, minute=int(minute), tzinfo=timezone.utc))


@dataclass
class Utterance:
    dia_id: str
    speaker: str
    text: str
    created_at: str | None
    session: int


def locomo_utterances(conversation: dict[str, Any]) -> list[Utterance]:
    """Utterances in session order; an image's caption is kept with its text."""
    numbers = sorted(int(k.split("_")[1]) for k in conversation
                     if re.fullmatch(r"session_\d+", k) and isinstance(conversation[k], list))
    out = []
    for n in numbers:
        start = locomo_time(conversation.get(f"session_{n}_date_time"))
        for i, turn in enumerate(conversation[f"session_{n}"]):
            text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            at = utc_iso(parse_iso(start) + timedelta(seconds=30 * i)) if start else None
            out.append(Utterance(str(turn.get("dia_id", f"D{n}:{i + 1}")),
                                 str(turn.get("speaker", "?")), text, at, n))
    return out


def store_locomo_conversation(store: Any, agent_id: int, sample: dict[str, Any]) -> dict[int, str]:
    """Put a LoCoMo conversation in an agent's recall the way chat stores turns.

    One message per utterance (text "Speaker: utterance", so names are searchable):
    speaker_a's utterances are `user` messages, speaker_b's are `assistant` messages, and a
    new turn starts at each user message that follows an assistant one. Messages are out of
    the context queue (evicted), stamped with the session's date. Returns message id → dia_id."""
    from memgpt_lite.engine.records import Message

    conversation = sample["conversation"]
    speaker_a = conversation.get("speaker_a")
    mapping: dict[int, str] = {}
    turn_id, last_role = 0, None
    for u in locomo_utterances(conversation):
        role = "user" if u.speaker == speaker_a else "assistant"
        if turn_id == 0 or (role == "user" and last_role != "user"):
            turn_id += 1
        msg = Message(role, [{"type": "text", "text": f"{u.speaker}: {u.text}"}], turn_id,  # type: ignore[arg-type]
                      created_at=u.created_at, in_context=False)
        mapping[store.add_message(agent_id, msg)] = u.dia_id
        last_role = role
    return mapping


def _evidence(qa: dict[str, Any]) -> list[str]:
    ids: list[str] = []
    for item in qa.get("evidence") or []:
        ids += [x for x in re.split(r"[;,\s]+", str(item)) if x]
    return ids


def run_locomo(path: str | Path, *, retrieval_only: bool = True, model_client: Any = None,
               settings: Settings | None = None, judge: Any = None,
               progress: Progress | None = None, limit: int | None = None) -> dict[str, Any]:
    """LoCoMo: recall@5/@10 of the evidence through conversation_search (retrieval only),
    or token F1 of the agent's answers (needs `model_client`). Per category and overall."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.memory import MemoryTools
    from memgpt_lite.engine.store import Store

    samples = load_locomo(path)
    if not retrieval_only and model_client is None:
        raise ScenarioError("answering LoCoMo questions needs a model (--model), or use --retrieval-only")
    rows: list[dict[str, Any]] = []
    for s_index, sample in enumerate(samples):
        with tempfile.TemporaryDirectory(prefix="memgpt-lite-locomo-") as tmp:
            with Store(Path(tmp) / "locomo.db") as store:
                client = model_client or _NoModel()
                agent = Agent.open(store, "locomo", model_client=client,
                                   settings=settings or Settings(), clock=_after_last(sample))
                mapping = store_locomo_conversation(store, agent.id, sample)
                tools = MemoryTools(store, agent.id)
                for qa in sample["qa"][:limit]:
                    row = _locomo_question(sample, s_index, qa, store, agent, tools, mapping,
                                           retrieval_only, judge)
                    if row is not None:
                        rows.append(row)
                        if progress:
                            progress(f"sample {s_index + 1}/{len(samples)} · question {len(rows)}")
    metrics = ("recall@5", "recall@10") if retrieval_only else ("f1",) + (("judge",) if judge else ())
    return {"dataset": "locomo", "file": str(path), "mode": "retrieval" if retrieval_only else "answer",
            "model": None if retrieval_only else (settings or Settings()).model,
            "metrics": list(metrics), "by_category": _by_category(rows, metrics),
            "overall": _means(rows, metrics), "questions": rows}


def _after_last(sample: dict[str, Any]) -> StepClock:
    times = [u.created_at for u in locomo_utterances(sample["conversation"]) if u.created_at]
    start = parse_iso(max(times)) + timedelta(days=1) if times else _parse_clock(DEFAULT_CLOCK)
    return StepClock(start)


def _locomo_question(sample: dict[str, Any], s_index: int, qa: dict[str, Any], store: Any,
                     agent: Any, tools: Any, mapping: dict[int, str], retrieval_only: bool,
                     judge: Any) -> dict[str, Any] | None:
    """The question's row, or None when it cannot be scored in this mode."""
    row: dict[str, Any] = {"sample": sample.get("sample_id", s_index),
                           "question": str(qa.get("question", "")),
                           "category": _category_name(qa.get("category"))}
    if retrieval_only:
        evidence = _evidence(qa)
        return _locomo_recall(row, evidence, store, agent, tools, mapping) if evidence else None
    if "answer" not in qa:
        return None  # adversarial items have no gold answer
    return _locomo_answer(row, str(qa["answer"]), agent, judge)


def _locomo_recall(row: dict[str, Any], evidence: list[str], store: Any, agent: Any,
                   tools: Any, mapping: dict[int, str]) -> dict[str, Any]:
    question = row["question"]
    # The tool path, exactly as a model would call it with the raw question...
    row["tool_error"] = tools.execute("conversation_search", {"query": question, "page": 1}).is_error
    # ...and the same search by id, to map hits to dia_ids (5 per page, as the tool pages).
    ranked = [mapping.get(h.id) for p in (1, 2)
              for h in store.search_messages(agent.id, question, page=p, per_page=5).hits]
    for k in (5, 10):
        row[f"recall@{k}"] = len(set(ranked[:k]) & set(evidence)) / len(set(evidence))
    row["evidence"], row["retrieved"] = evidence, ranked
    return row


def _locomo_answer(row: dict[str, Any], answer: str, agent: Any, judge: Any) -> dict[str, Any]:
    reply = _ask(agent, row["question"])
    row.update(answer=answer, reply=reply, f1=token_f1(reply, answer))
    if judge is not None:
        verdict = ask_judge(judge, f"The reply gives this answer: {answer}", row["question"], reply)
        row["judge"] = 1.0 if verdict.startswith("PASS") else 0.0
    return row


def _ask(agent: Any, question: str) -> str:
    """One question as one turn; the turn is then removed so questions stay independent."""
    reply = ""
    for event in agent.step(question):
        if event.kind == "turn_end":
            reply = event.text  # type: ignore[union-attr]
    agent.pop_turns(1)
    return reply


def _category_name(category: Any) -> str:
    try:
        n = int(category)
    except (TypeError, ValueError):
        return str(category)
    return f"{n} {LOCOMO_CATEGORIES[n]}" if n in LOCOMO_CATEGORIES else str(n)


def _means(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for m in metrics:
        values = [r[m] for r in rows if m in r]
        out[m] = round(sum(values) / len(values), 4) if values else None
    return out


def _by_category(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
    return {k: _means(v, metrics) for k, v in sorted(groups.items())}


_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> list[str]:
    """SQuAD-style: lowercase, no punctuation, no articles, split on whitespace."""
    text = text.lower().translate(_NO_PUNCTUATION)
    return [w for w in text.split() if w not in ("a", "an", "the", "and")]


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return float(pred == ref)
    precision, recall = common / len(pred), common / len(ref)
    return round(2 * precision * recall / (precision + recall), 4)


class _NoModel:
    """Retrieval-only runs never call a model; if one does, that is a bug."""

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        raise AssertionError("retrieval-only evaluation made a model call")


# =========================================================================== nested KV

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
        raw = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"no nested KV file at {path}") from None
    try:
        items = json.loads(raw) if raw.lstrip().startswith("[") else \
            [json.loads(line) for line in raw.splitlines() if line.strip()]
    except json.JSONDecodeError:
        raise ScenarioError(f"{path} is neither a JSON list nor JSONL of KV examples") from None
    return [_kv_example(item, i, path) for i, item in enumerate(items)]


def _kv_example(item: Any, i: int, path: str | Path) -> KVExample:
    if not isinstance(item, dict) or "ordered_kv_records" not in item or "key" not in item:
        raise ScenarioError(f"{path}: example {i} needs 'ordered_kv_records' and 'key'")
    pairs = [(str(k), str(v)) for k, v in item["ordered_kv_records"]]
    table = dict(pairs)
    chain, value = [item["key"]], table.get(item["key"])
    if value is None:
        raise ScenarioError(f"{path}: example {i}: key {item['key']} is not in its records")
    while value in table and value not in chain:
        chain.append(value)
        value = table[value]
    level = int(item.get("nesting_level", len(chain) - 1))
    return KVExample(pairs, str(item["key"]), str(item.get("value", value)), level)


def run_nested_kv(path: str | Path, model_client: Any, *, settings: Settings | None = None,
                  progress: Progress | None = None) -> dict[str, Any]:
    """Each example: a fresh agent with the pairs in archival memory is asked the question;
    correct when the final value is in the reply. Accuracy per nesting level."""
    settings = settings or Settings()
    examples = load_nested_kv(path)
    rows = []
    for i, ex in enumerate(examples, 1):
        reply, searches = _run_kv_example(ex, model_client, settings)
        rows.append({"key": ex.key, "level": ex.level, "answer": ex.answer, "reply": reply,
                     "correct": ex.answer.lower() in reply.lower(), "searches": searches})
        if progress:
            progress(f"example {i}/{len(examples)}")
    levels: dict[int, list[bool]] = defaultdict(list)
    for r in rows:
        levels[r["level"]].append(r["correct"])
    return {"dataset": "nested_kv", "file": str(path), "model": settings.model,
            "by_level": {str(k): _accuracy(v) for k, v in sorted(levels.items())},
            "overall": _accuracy([r["correct"] for r in rows]), "questions": rows}


def _accuracy(correct: list[bool]) -> dict[str, Any]:
    return {"n": len(correct),
            "accuracy": round(sum(correct) / len(correct), 4) if correct else None}


def _run_kv_example(ex: KVExample, model_client: Any, settings: Settings) -> tuple[str, int]:
    """(reply, archival searches) of a fresh agent that holds the example's pairs."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store import Store

    with tempfile.TemporaryDirectory(prefix="memgpt-lite-nkv-") as tmp:
        with Store(Path(tmp) / "nkv.db") as store:
            agent = Agent.open(store, "nkv", model_client=model_client, settings=settings,
                               clock=StepClock(_parse_clock(DEFAULT_CLOCK)))
            for key, value in ex.pairs:
                store.add_passage(agent.id, kv_passage(key, value), created_at=DEFAULT_CLOCK)
            return _ask_kv(agent, ex.key)


def _ask_kv(agent: Any, key: str) -> tuple[str, int]:
    reply, searches = "", 0
    for event in agent.step(KV_QUESTION.format(key=key)):
        if event.kind == "tool_call" and event.call.name == "archival_search":  # type: ignore[union-attr]
            searches += 1
        elif event.kind == "turn_end":
            reply = event.text  # type: ignore[union-attr]
    return reply, searches


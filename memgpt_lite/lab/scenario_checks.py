"""The checks of a scenario: how a `[[check]]` table is read, and how each type scores what
a run produced (`RunState`). Every scorer returns (passed, detail); passed is None when the
check was skipped (a judge check without a judge).

Types (docs/recording.md lists them with what each reads):
replies (`reply_contains`, `reply_not_contains`, `reply_matches`), memory (`core_contains`,
`core_not_contains`, `archival_contains`, `archival_not_contains`, `memory_contains`,
`memory_not_contains`, `summary_contains`), tools (`tool_called`, `tool_not_called`),
paging and cost (`turn_evicted`, `no_overflow`, `max_input_tokens_per_turn`,
`max_cost_per_turn`) and `judge`. A check may name the `agent` it reads (multi-agent
scenarios); a `turn` is 1-based over the whole scenario, "last" or "any".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memgpt_lite.engine.events import Event
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import quoted, shorten
from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.lab.judge import ask_judge

REQUIRED = {"reply_contains": ("text",), "reply_not_contains": ("text",),
            "reply_matches": ("pattern",), "core_contains": ("label", "text"),
            "core_not_contains": ("label", "text"), "archival_contains": ("text",),
            "archival_not_contains": ("text",), "memory_contains": ("text",),
            "memory_not_contains": ("text",), "summary_contains": ("text",),
            "tool_called": ("tool",), "tool_not_called": ("tool",), "turn_evicted": ("turn",),
            "no_overflow": (), "max_input_tokens_per_turn": ("max",),
            "max_cost_per_turn": ("max_usd",), "judge": ("criterion",)}
CHECK_TYPES = tuple(REQUIRED)
# What each parameter must be; a check is refused at load, before any model call, when one
# is not (a scorer meeting `max_usd = "cheap"` after the paid sessions would crash).
TEXT, WHOLE, AMOUNT, FLAG, NAMES = "text", "a whole number", "a number", "true or false", \
    "a tool name or a list of them"
PARAMS = {"text": TEXT, "pattern": TEXT, "label": TEXT, "criterion": TEXT, "query": TEXT,
          "agent": TEXT, "name": TEXT, "model": TEXT, "tool": NAMES, "max": WHOLE,
          "min": WHOLE, "max_usd": AMOUNT, "case_sensitive": FLAG}
CHOICES = {"per": ("turn", "request"), "subject": ("reply", "summary")}
COMMON = ("type", "name", "agent", "turn", "case_sensitive")
OPTIONAL = {"tool_called": ("min",), "max_input_tokens_per_turn": ("per",),
            "max_cost_per_turn": ("per",), "archival_contains": ("query",),
            "archival_not_contains": ("query",),
            "judge": ("subject", "model")}
# Checks that read every turn unless told otherwise (the others read the last one).
_ALL_TURNS = ("reply_not_contains", "tool_called", "tool_not_called", "no_overflow",
              "max_input_tokens_per_turn", "max_cost_per_turn")


@dataclass
class Check:
    name: str
    type: str
    params: dict[str, Any]


@dataclass
class TurnRecord:
    index: int  # 1-based over the whole scenario
    session: int
    text: str
    reply: str = ""
    completed: bool = False
    events: list[Event] = field(default_factory=list)
    agent: str = ""  # the agent that took the turn
    turn_id: int | None = None  # its id in that agent's history

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class AgentState:
    """One agent as the run left it."""

    core: dict[str, str]
    passages: list[str]
    summary: str = ""
    searches: dict[str, list[str]] = field(default_factory=dict)  # query → hits' texts


@dataclass
class RunState:
    """What a scenario run produced; the checks read it."""

    turns: list[TurnRecord]
    agents: dict[str, AgentState]
    main: str

    def agent(self, check: Check) -> AgentState | None:
        return self.agents.get(str(check.params.get("agent") or self.main))

    @property
    def core(self) -> dict[str, str]:
        return self.agents[self.main].core

    @property
    def passages(self) -> list[str]:
        return self.agents[self.main].passages


# --------------------------------------------------------------------------- reading


def parse_checks(raw: list[Any], inputs: int, agents: set[str]) -> list[Check]:
    checks, names = [], Counter()
    for i, item in enumerate(raw, 1):
        kind = _check_kind(item, i, inputs, agents)
        params = {k: v for k, v in item.items() if k not in ("type", "name")}
        name = str(item.get("name") or auto_name(kind, params))
        names[name] += 1
        checks.append(Check(name if names[name] == 1 else f"{name} #{names[name]}", kind, params))
    return checks


def _check_kind(item: Any, i: int, inputs: int, agents: set[str]) -> str:
    """The type of [[check]] number `i`, once its parameters are known to be usable: a bad
    one must stop the run before it spends model calls, and a turn past the last input
    would make tool_not_called and no_overflow pass on nothing."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind not in REQUIRED:
        raise ScenarioError(f"[[check]] {i} has type {kind!r}; use one of {', '.join(CHECK_TYPES)}")
    missing = [k for k in REQUIRED[kind] if k not in item]
    if missing:
        raise ScenarioError(f"[[check]] {i} ({kind}) needs {', '.join(missing)}")
    found = _params_problem(item, kind)
    if found:
        raise ScenarioError(f"[[check]] {i} ({kind}): {found}")
    for key in ("pattern",) if kind == "reply_matches" else ():
        try:
            re.compile(item[key])
        except re.error as exc:
            raise ScenarioError(f"[[check]] {i}: bad regex {item[key]!r}: {exc}") from None
    turn = item.get("turn")
    if kind == "turn_evicted" and (isinstance(turn, bool) or not str(turn).isdigit()):
        raise ScenarioError(f"[[check]] {i} (turn_evicted): turn must be a turn's number, "
                            f"got {quoted(turn, 40)}")
    if turn not in (None, "last", "any") and not (str(turn).isdigit()
                                                  and 1 <= int(turn) <= inputs):
        raise ScenarioError(f"[[check]] {i}: turn = {turn!r}; use 1 to {inputs}, "
                            f"\"last\" or \"any\"")
    if "agent" in item and item["agent"] not in agents:
        raise ScenarioError(f"[[check]] {i}: agent = {item['agent']!r} takes no turn in this "
                            f"scenario (agents: {', '.join(sorted(agents))})")
    return kind


def _params_problem(item: dict[str, Any], kind: str) -> str | None:
    """Why a check's parameters cannot be scored (one phrase), or None."""
    allowed = (*COMMON, *REQUIRED[kind], *OPTIONAL.get(kind, ()))
    unknown = sorted(k for k in item if k not in allowed)
    if unknown:
        return (f"unknown key {quoted(unknown[0], 40)}; this check takes "
                f"{', '.join(k for k in allowed if k != 'type')}")
    for key, value in item.items():
        if key in CHOICES and value not in CHOICES[key]:
            return f"{key} = {quoted(value, 40)}; use {' or '.join(map(repr, CHOICES[key]))}"
        want = PARAMS.get(key)
        if want is not None and not _is(value, want):
            return f"{key} must be {want}, got {quoted(value, 40)}"
    return None


def _is(value: Any, want: str) -> bool:
    if want == TEXT:
        return isinstance(value, str)
    if want == FLAG:
        return isinstance(value, bool)
    if want == NAMES:
        return isinstance(value, str) or (isinstance(value, list) and bool(value)
                                           and all(isinstance(v, str) for v in value))
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if want == WHOLE:
        return number and isinstance(value, int) and 0 <= value <= 2**53
    return number and math.isfinite(value) and value >= 0  # AMOUNT


def auto_name(kind: str, p: dict[str, Any]) -> str:
    where = f" @{p['turn']}" if "turn" in p else ""
    who = f" [{p['agent']}]" if "agent" in p else ""
    detail = {"reply_matches": lambda: f"/{p['pattern']}/",
              "core_contains": lambda: f"{p['label']} {p['text']!r}",
              "core_not_contains": lambda: f"{p['label']} {p['text']!r}",
              "tool_called": lambda: _tool_names(p), "tool_not_called": lambda: _tool_names(p),
              "turn_evicted": lambda: "", "no_overflow": lambda: "",
              "max_input_tokens_per_turn": lambda: f"≤ {p['max']:,}",
              "max_cost_per_turn": lambda: f"≤ ${p['max_usd']}",
              "judge": lambda: repr(str(p["criterion"])[:40])}.get(kind, lambda: repr(p["text"]))()
    return f"{kind} {detail}{where}{who}".replace("  ", " ").strip()


def _tool_names(p: dict[str, Any]) -> str:
    tools = p["tool"] if isinstance(p["tool"], list) else [p["tool"]]
    return " or ".join(map(str, tools))


# --------------------------------------------------------------------------- scoring


def score_check(check: Check, state: RunState, judge: Any = None) -> dict[str, Any]:
    """{name, type, passed (None = skipped), detail}"""
    passed, detail = _SCORERS[check.type](check, state, judge)
    return {"name": check.name, "type": check.type, "passed": passed, "detail": detail}


def _turns_for(check: Check, state: RunState) -> list[TurnRecord]:
    turns = state.turns
    if "agent" in check.params:
        turns = [t for t in turns if t.agent == check.params["agent"]]
    turn = check.params.get("turn")
    if turn is None:
        return turns if check.type in _ALL_TURNS else turns[-1:]
    if turn == "last":
        return turns[-1:]
    if turn == "any":
        return turns
    return [t for t in turns if t.index == int(turn)]


def _fold(text: str, check: Check) -> str:
    return text if check.params.get("case_sensitive") else text.casefold()


def _has(text: str, check: Check) -> bool:
    return _fold(str(check.params["text"]), check) in _fold(text, check)


def _reply_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    hit = [t for t in turns if _has(t.reply, check)]
    if hit:
        return True, f"turn {hit[0].index} contains {check.params['text']!r}"
    return False, _reply_miss(turns, f"no reply contains {check.params['text']!r}")


def _reply_not_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    turns = _turns_for(check, state)
    if not turns:
        return False, "there is no such turn"
    hit = [t for t in turns if _has(t.reply, check)]
    if hit:
        return False, f"turn {hit[0].index} said {shorten(hit[0].reply, 70)!r}"
    return True, f"no reply of turns {_span(turns)} contains {check.params['text']!r}"


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


def _span(turns: list[TurnRecord]) -> str:
    return f"{turns[0].index}–{turns[-1].index}" if len(turns) > 1 else str(turns[0].index)


def _core_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    found = _core_value(check, state)
    if isinstance(found, tuple):
        return found
    want = check.type == "core_contains"
    return _has(found, check) == want, f"{check.params['label']} = {shorten(found, 70)!r}"


def _core_value(check: Check, state: RunState) -> str | tuple[bool, str]:
    agent = state.agent(check)
    value = None if agent is None else agent.core.get(str(check.params["label"]))
    if value is None:
        return False, f"there is no core block {check.params['label']!r}"
    return value


def _archival_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    """With `query`: what archival_search returns for it; else every current passage."""
    agent = state.agent(check)
    query = check.params.get("query")
    passages = [] if agent is None else (agent.searches.get(str(query), []) if query
                                         else agent.passages)
    hits = [p for p in passages if _has(p, check)]
    if hits:
        return True, f"passage {shorten(hits[0], 70)!r}"
    if query:
        return False, (f"none of the {len(passages)} passages archival_search {query!r} "
                       f"returns contains {check.params['text']!r}")
    return False, f"none of {len(passages)} passages contains {check.params['text']!r}"


def _archival_not_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    """With `query`: what archival_search returns for it; else every current passage."""
    agent = state.agent(check)
    if agent is None:
        return False, "there is no such agent"
    query = check.params.get("query")
    texts = agent.searches.get(str(query), []) if query else agent.passages
    where = f"archival_search {query!r}" if query else f"{len(texts)} passages"
    hits = [p for p in texts if _has(p, check)]
    if hits:
        return False, f"{where} still holds {shorten(hits[0], 70)!r}"
    return True, f"{where}: none contains {check.params['text']!r}"


def _memory_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    """Anywhere in the agent's memory: a core block or a passage."""
    agent = state.agent(check)
    places = [] if agent is None else [*(f"core {k}" for k in agent.core),
                                       *(f"passage {i + 1}" for i in range(len(agent.passages)))]
    texts = [] if agent is None else [*agent.core.values(), *agent.passages]
    found = [where for where, text in zip(places, texts) if _has(text, check)]
    want = check.type == "memory_contains"
    if found:
        return want, f"{check.params['text']!r} is in {', '.join(found[:3])}"
    return not want, f"{check.params['text']!r} is in no core block or passage"


def _summary_contains(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    agent = state.agent(check)
    summary = "" if agent is None else agent.summary
    if not summary:
        return False, "there is no summary (nothing was evicted)"
    return _has(summary, check), f"summary = {shorten(summary, 70)!r}"


def _tool_calls(check: Check, state: RunState) -> list[int]:
    tools = check.params["tool"] if isinstance(check.params["tool"], list) else [check.params["tool"]]
    return [t.index for t in _turns_for(check, state) for e in t.of("tool_call")
            if e.call.name in tools]


def _tool_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    least = int(check.params.get("min", 1))
    where = f"in turns {sorted(set(calls))}" if calls else "never"
    return len(calls) >= least, f"{_tool_names(check.params)} called {len(calls)}× {where}"


def _tool_not_called(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    calls = _tool_calls(check, state)
    where = f" in turns {sorted(set(calls))}" if calls else ""
    return not calls, f"{_tool_names(check.params)} called {len(calls)}×{where}"


def _turn_evicted(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    """The turn left the context (evicted by the model, a flush or an overflow) during the
    run: what follows cannot have read it in the queue."""
    [turn] = [t for t in state.turns if t.index == int(check.params["turn"])] or [None]
    if turn is None or turn.turn_id is None:
        return False, "the turn never started"
    later = [t for t in state.turns if t.agent == turn.agent and t.index > turn.index]
    by = [e.by for t in [turn, *later] for e in t.of("eviction") if turn.turn_id in e.turn_ids]
    if by:
        return True, f"turn {turn.index} was evicted (by {by[0]})"
    return False, f"turn {turn.index} stayed in the context"


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


def _chat_usage(turn: TurnRecord) -> list[Any]:
    """The usage of the chat's own requests (not a summariser's call billed, then failed)."""
    return [e for e in turn.of("usage") if e.purpose == "chat"]


def _max_input_tokens(check: Check, state: RunState, _judge: Any) -> tuple[bool, str]:
    limit, per = int(check.params["max"]), check.params.get("per", "turn")
    sizes = []
    for t in _turns_for(check, state):
        if per == "request":
            sizes += [(t.index, e.usage.total_input) for e in _chat_usage(t)]
        else:
            sizes += [(t.index, sum(e.usage.total_input for e in _chat_usage(t)))]
    if not sizes:
        return False, "no turns to measure"
    turn, worst = max(sizes, key=lambda s: s[1])
    return worst <= limit, f"largest {per}: {worst:,} input tokens (turn {turn}); limit {limit:,}"


def _max_cost(check: Check, state: RunState, _judge: Any) -> tuple[bool | None, str]:
    """Every paid call of the turn, the summariser's included (as TurnEndEvent counts). A
    call on a model with no price has no cost to compare: the check is not judged (skipped)
    unless the priced calls alone already pass the limit."""
    limit = float(check.params["max_usd"])
    turns = _turns_for(check, state)
    costs = [(t.index, e.cost_usd) for t in turns for e in t.of("turn_end")]
    if not costs:
        return False, "no turns to measure"
    turn, worst = max(costs, key=lambda c: c[1])
    total = sum(c for _, c in costs)
    detail = f"dearest turn ${worst:.4f} (turn {turn}); limit ${limit:g}; {len(costs)} turns"
    unpriced = sorted(set().union(*(Tally().add_all(t.events).unpriced for t in turns)))
    if unpriced and worst <= limit:
        return None, (f"not judged: no price for {', '.join(unpriced)} (MEMGPT_LITE_PRICES "
                      f"gives one); priced calls only: {detail} ${total:.4f} + unknown")
    return worst <= limit, f"{detail} ${total:.4f}" + (" + unknown" if unpriced else "")


def _judge(check: Check, state: RunState, judge: Any) -> tuple[bool | None, str]:
    """Grades the reply of the check's turn, or with `subject = "summary"` the agent's
    running summary."""
    if judge is None:
        return None, "skipped: judge checks run only with --judge"
    turns = _turns_for(check, state)
    if not turns:
        return False, "there is no such turn"
    answer = turns[-1].reply
    if check.params.get("subject") == "summary":
        agent = state.agent(check)
        answer = f"(the running summary) {agent.summary if agent else ''}"
    verdict = ask_judge(judge, str(check.params["criterion"]), turns[-1].text, answer,
                        model=check.params.get("model"))
    return verdict.startswith("PASS"), verdict


_SCORERS: dict[str, Callable[[Check, RunState, Any], tuple[bool | None, str]]] = {
    "reply_contains": _reply_contains, "reply_not_contains": _reply_not_contains,
    "reply_matches": _reply_matches, "core_contains": _core_contains,
    "core_not_contains": _core_contains, "archival_contains": _archival_contains,
    "archival_not_contains": _archival_not_contains, "memory_contains": _memory_contains,
    "memory_not_contains": _memory_contains, "summary_contains": _summary_contains,
    "tool_called": _tool_called, "tool_not_called": _tool_not_called,
    "turn_evicted": _turn_evicted, "no_overflow": _no_overflow,
    "max_input_tokens_per_turn": _max_input_tokens, "max_cost_per_turn": _max_cost,
    "judge": _judge,
}

"""Scenario evals: the scenario file, running it through fresh agents, and its report (the
checks are in scenario_checks.py).

A scenario (TOML) holds sessions of user inputs, with restarts between sessions and a fixed
clock, taken by one agent or by several that may share core memory blocks; `run_scenario`
re-drives them against a model client in a temporary data dir and scores checks on what the
agents did. `bundled()` lists the scenarios shipped in the package (`eval --list`). This
module never prints; progress goes to an optional callback.
"""

from __future__ import annotations

import tempfile
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from memgpt_lite.engine.agent import BLOCK_LABEL, LABEL_RULE
from memgpt_lite.engine.config import Settings, agent_name_problem
from memgpt_lite.engine.prompts import CONTRACT
from memgpt_lite.engine.recording import (
    UNRECORDED_KINDS,
    Recorder,
    core_memory,
    record_header,
    recorded_step,
)
from memgpt_lite.engine.records import utc_iso
from memgpt_lite.engine.text import quoted
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.harness import (
    DEFAULT_CLOCK,
    Progress,
    ScenarioError,
    StepClock,
    parse_clock,
)
from memgpt_lite.lab.scenario_checks import (
    CHECK_TYPES,
    AgentState,
    Check,
    RunState,
    TurnRecord,
    parse_checks,
    score_check,
)

__all__ = ["CHECK_TYPES", "AgentSpec", "Check", "RunState", "Scenario", "SessionSpec",
           "TurnRecord", "bundled", "run_scenario", "score_check", "totals"]


# --------------------------------------------------------------------------- the scenario file


@dataclass
class SessionSpec:
    inputs: list[str]
    restart: bool = False  # reopen the agents from their store first (a new process)
    clock: str | None = None  # jump the clock here first (e.g. a session a week later)
    agent: str | None = None  # who takes these inputs (None: the scenario's agent)


@dataclass
class AgentSpec:
    """An agent created before the first input, with core memory blocks in user scope."""

    name: str
    share: list[str] = field(default_factory=list)


@dataclass
class Scenario:
    """A scenario file: sessions of user inputs and the checks to score.

        name = "remembers-a-fact"
        description = "A fact said once is remembered after a restart."
        clock = "2026-01-01T09:00:00Z"   # fixed start; +clock_step seconds per input
        [settings]                        # overrides of config.Settings
        context_window = 6000
        [[agents]]                        # optional: agents made first, sharing blocks
        name = "home"
        share = ["human"]
        [[session]]
        inputs = ["My cat is called Miso.", "Thanks!"]
        [[session]]
        restart = true
        agent = "home"                    # optional: who takes these inputs
        inputs = ["What is my cat called?"]
        [[check]]
        type = "reply_contains"           # see scenario_checks.CHECK_TYPES
        turn = "last"                     # 1-based over all sessions, "last" or "any"
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
    description: str = ""
    agents: list[AgentSpec] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            # utf-8-sig: a file saved by Notepad starts with a byte-order mark TOML refuses.
            data = tomllib.loads(path.read_text(encoding="utf-8-sig", errors="replace"))
        except FileNotFoundError:
            raise ScenarioError(f"no scenario file at {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{path} is not valid TOML: {exc}") from None
        except RecursionError:
            raise ScenarioError(f"{path} is nested too deeply to be a scenario") from None
        except OSError as exc:
            raise ScenarioError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            scenario = cls.from_dict(data, default_name=path.stem)
        except ScenarioError as exc:  # several files may be named: say which one is wrong
            raise ScenarioError(f"{path}: {exc}") from None
        scenario.path = path
        return scenario

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, default_name: str = "scenario") -> Scenario:
        sessions = [_session(s, i) for i, s in enumerate(_tables(data, "session"), 1)]
        if not sessions or not any(s.inputs for s in sessions):
            raise ScenarioError(f"scenario {default_name!r} has no [[session]] with inputs")
        main = str(data.get("agent") or "eval")
        if agent_name_problem(main):
            raise ScenarioError(f"agent: {agent_name_problem(main)}")
        agents = [_agent(a, i) for i, a in enumerate(_tables(data, "agents"), 1)]
        twice = next((a.name for i, a in enumerate(agents) if a.name in
                      {b.name for b in agents[:i]}), None)
        if twice is not None:  # the second would be refused when the run starts
            raise ScenarioError(f"[[agents]] names {twice!r} twice")
        names = {main} | {a.name for a in agents}
        stray = next((s.agent for s in sessions if s.agent and s.agent not in names), None)
        if stray is not None:
            raise ScenarioError(f"[[session]] agent = {stray!r} is not the scenario's agent or "
                                "one of its [[agents]]")
        checks = parse_checks(_tables(data, "check"), sum(len(s.inputs) for s in sessions),
                              {s.agent or main for s in sessions})
        settings = _settings(data.get("settings"))
        clock = str(data.get("clock") or DEFAULT_CLOCK)
        step = _clock_step(data.get("clock_step", 60))
        _check_clocks([clock, *(s.clock for s in sessions if s.clock)], step,
                      sum(len(s.inputs) for s in sessions))
        return cls(str(data.get("name") or default_name), sessions, checks, clock,
                   step, settings, main,
                   description=" ".join(str(data.get("description") or "").split()),
                   agents=agents)

    @property
    def inputs(self) -> list[str]:
        return [text for s in self.sessions for text in s.inputs]


# How far apart two inputs may be; past a century a run's clock soon leaves the calendar.
MAX_CLOCK_STEP = 100 * 365 * 86_400
# Room left after the last input: a run's clock is read again after its last input.
LATEST_CLOCK = datetime(9998, 12, 31, tzinfo=timezone.utc)


def _tables(data: dict[str, Any], key: str) -> list[Any]:
    """The [[key]] tables of a scenario file (none when absent); anything else there would
    otherwise fail as a traceback on iterating it."""
    found = data.get(key) or []
    if not isinstance(found, list):
        raise ScenarioError(f"{key} must be a list of [[{key}]] tables, got "
                            f"{type(found).__name__}")
    return found


def _settings(raw: Any) -> dict[str, Any]:
    """[settings], checked when the file is read: a bad value found when its scenario
    starts would come after the scenarios before it were paid for."""
    from memgpt_lite.engine.config import ConfigError

    if not isinstance(raw, dict | None):
        raise ScenarioError(f"[settings] must be a table of settings, got {type(raw).__name__}")
    settings = dict(raw or {})
    unknown = set(settings) - set(Settings().to_dict())
    if unknown:
        raise ScenarioError(f"unknown setting(s) in [settings]: {', '.join(sorted(unknown))}")
    try:
        Settings.from_dict({**Settings().to_dict(), **settings})
    except ConfigError as exc:
        raise ScenarioError(str(exc).rstrip(".")) from None
    return settings


def _clock_step(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_CLOCK_STEP:
        raise ScenarioError(f"clock_step must be a whole number of seconds from 0 to "
                            f"{MAX_CLOCK_STEP:,}, got {raw!r}")
    return raw


def _check_clocks(clocks: list[str], step: int, inputs: int) -> None:
    """Each clock the file sets, moved on by every input after it, stays in the calendar."""
    for clock in clocks:
        start = parse_clock(clock)
        try:
            last = start + timedelta(seconds=step * inputs)
        except OverflowError:
            last = None
        if last is None or last > LATEST_CLOCK:
            raise ScenarioError(f"clock {clock!r} moved on {step:,} s for each of the "
                                f"{inputs} inputs runs past the year 9998")


def _session(raw: Any, number: int) -> SessionSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("inputs", []), list):
        raise ScenarioError(f"[[session]] {number} needs inputs = [\"...\", ...]")
    if raw.get("clock"):
        parse_clock(str(raw["clock"]))
    if not isinstance(raw.get("restart", False), bool):  # "no" would read as a restart
        raise ScenarioError(f"[[session]] {number}: restart must be true or false, got "
                            f"{raw['restart']!r}"[:200])
    for i, text in enumerate(raw.get("inputs", []), 1):
        # The API refuses an empty message, and a table or number is no message at all.
        if not isinstance(text, str) or not text.strip():
            raise ScenarioError(f"[[session]] {number}: input {i} must be a text that is "
                                f"not empty, got {text!r}"[:200])
    agent = raw.get("agent")
    return SessionSpec(list(raw.get("inputs", [])), bool(raw.get("restart")),
                       raw.get("clock"), None if agent is None else str(agent))


def _agent(raw: Any, number: int) -> AgentSpec:
    share = raw.get("share", []) if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not raw.get("name") or not isinstance(share, list):
        raise ScenarioError(f"[[agents]] {number} needs name = \"...\" (and share = "
                            "[\"human\", ...] for shared blocks)")
    problem = agent_name_problem(str(raw["name"]))
    if problem:
        raise ScenarioError(f"[[agents]] {number}: {problem}")
    bad = next((label for label in share if not (isinstance(label, str)
                                                  and BLOCK_LABEL.fullmatch(label))), None)
    if bad is not None:  # it would name a shared block no tool or command can reach
        raise ScenarioError(f"[[agents]] {number}: {quoted(bad)} in share is not a block "
                            f"label ({LABEL_RULE})")
    return AgentSpec(str(raw["name"]), list(share))


def bundled() -> list[Scenario]:
    """The scenarios shipped in the package, by file name."""
    root = resources.files("memgpt_lite.data")
    paths = sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".toml"))
    return [Scenario.load(path) for path in paths]


# --------------------------------------------------------------------------- running


def run_scenario(scenario: Scenario, model_client: Any, *, summary_client: Any = None,
                 model: str | None = None, recorder: Recorder | None = None,
                 judge: Any = None, progress: Progress | None = None,
                 source: str = "scripted", replayed_as: tuple[int, int, int] | None = None,
                 ) -> dict[str, Any]:
    """Run a scenario through fresh agents and score it; returns the JSON report.

    `model_client` is any ModelClient (AnthropicClient, ScriptedModel, ReplayModelClient).
    A ReplayModelClient is re-aligned at every input; `replayed_as` is the model contract,
    search layout and token counting rule of its recording (replay.replayed_as), under
    which the agents run so that a recording made by an older version sends its recorded
    requests. `judge` (a ModelClient) enables judge checks; without it they are skipped
    and not scored."""
    settings = Settings.from_dict({**Settings().to_dict(), **scenario.settings,
                                   **({"model": model} if model else {})})
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-eval-") as tmp:
        state = _drive(scenario, settings, model_client, summary_client, recorder,
                       Path(tmp) / "eval.db", progress, replayed_as)
    checks = [score_check(c, state, judge) for c in scenario.checks]
    report = _scenario_report(scenario, settings.model, source, checks, state)
    divergences = getattr(model_client, "divergences", None)
    if divergences is not None:
        report["replay_divergences"] = [str(d) for d in divergences]
    if recorder is not None:
        report["recording"] = str(recorder.path)
    return report


class _Agents:
    """The scenario's agents over one store: made (with their shared blocks) before the first
    input, opened on first use, reopened from a new store after a restart."""

    def __init__(self, scenario: Scenario, settings: Settings, client: Any,
                 summary_client: Any, clock: StepClock, db: Path,
                 replayed_as: tuple[int, int, int] | None = None):
        from memgpt_lite.engine.store import open_store

        self.scenario, self.settings, self.db, self.clock = scenario, settings, db, clock
        self.replayed_as = replayed_as  # (contract, layout, token rule) of a replayed recording
        self.client, self.summary_client = client, summary_client
        self.store = open_store(db)
        self.open: dict[str, Any] = {}
        self._create()

    def _create(self) -> None:
        from memgpt_lite.engine.memory import default_blocks

        for spec in self.scenario.agents:
            with self.store.transaction():
                row = self.store.create_agent(spec.name, self.settings.to_dict(),
                                              default_blocks(self.settings.block_limit))
                for label in spec.share:
                    self.store.share_block(row.id, label,
                                           default=("", self.settings.block_limit))

    def get(self, name: str) -> Any:
        from memgpt_lite.engine.agent import Agent

        if name not in self.open:
            contract, layout, rule = self.replayed_as or (CONTRACT, None, None)
            agent = Agent.open(self.store, name, model_client=self.client,
                               summary_client=self.summary_client, settings=self.settings,
                               clock=self.clock, contract=contract)
            if layout is not None:
                agent.set_search_layout(layout)
            if rule is not None:
                agent.counter.use_rule(rule)
            self.open[name] = agent
        return self.open[name]

    def restart(self) -> None:
        from memgpt_lite.engine.store import open_store

        self.close()
        self.store, self.open = open_store(self.db), {}

    def close(self) -> None:
        for agent in self.open.values():
            agent.close()
        self.store.close()

    def state(self, checks: list[Check]) -> dict[str, AgentState]:
        """Every agent that took a turn, as the run left it (with the archival searches
        the checks ask about)."""
        found = {}
        for name, agent in self.open.items():
            queries = {str(c.params["query"]) for c in checks if "query" in c.params
                       and str(c.params.get("agent") or self.scenario.agent) == name}
            found[name] = AgentState(
                core_memory(agent),
                [h.text for h in self.store.list_passages(agent.id, limit=100_000)],
                self.store.get_agent_by_id(agent.id).summary,
                {q: [h.text for h in self.store.search_passages(agent.id, q, per_page=20).hits]
                 for q in queries})
        return found


def _drive(scenario: Scenario, settings: Settings, client: Any, summary_client: Any,
           recorder: Recorder | None, db: Path, progress: Progress | None,
           replayed_as: tuple[int, int, int] | None = None) -> RunState:
    clock = StepClock(parse_clock(scenario.clock))
    agents = _Agents(scenario, settings, client, summary_client, clock, db, replayed_as)
    turns: list[TurnRecord] = []
    if recorder is not None:
        record_header(agents.get(scenario.agent), recorder, source="eval",
                      note=f"scenario {scenario.name}", created_at=utc_iso(clock.now),
                      inputs=len(scenario.inputs))
    try:
        for number, session in enumerate(scenario.sessions, 1):
            if session.restart:
                agents.restart()
                if recorder is not None:
                    recorder.restart()
            name = session.agent or scenario.agent
            for j, text in enumerate(session.inputs):
                _tick(clock, session, j, scenario.clock_step, first_turn=not turns)
                record = TurnRecord(len(turns) + 1, number, text, agent=name)
                turns.append(_turn(agents.get(name), client, recorder, record))
                if progress:
                    progress(f"turn {len(turns)}/{len(scenario.inputs)}")
        agents.get(scenario.agent)
        return RunState(turns, agents.state(scenario.checks), scenario.agent)
    finally:
        agents.close()


def _tick(clock: StepClock, session: SessionSpec, index: int, step: int, *,
          first_turn: bool) -> None:
    """Set the clock for input `index` of `session`: a session with its own clock starts
    there; every other input comes `step` seconds after the one before."""
    if index == 0 and session.clock:
        clock.now = parse_clock(session.clock)
    elif not first_turn:
        clock.now += timedelta(seconds=step)


def _turn(agent: Any, client: Any, recorder: Recorder | None, record: TurnRecord) -> TurnRecord:
    if hasattr(client, "begin_turn"):
        client.begin_turn(record.index - 1)
    events = recorded_step(agent, recorder, record.text) if recorder else agent.step(record.text)
    for event in events:
        if event.kind not in UNRECORDED_KINDS:
            record.events.append(event)
        if event.kind == "turn_end":
            record.reply, record.completed = event.text, event.completed  # type: ignore[union-attr]
            record.turn_id = event.turn_id  # type: ignore[union-attr]
    return record


# --------------------------------------------------------------------------- report


def _scenario_report(scenario: Scenario, model: str, source: str,
                     checks: list[dict[str, Any]], state: RunState) -> dict[str, Any]:
    scored = [c for c in checks if c["passed"] is not None]
    passed = sum(1 for c in scored if c["passed"])
    return {"scenario": scenario.name, "model": model, "source": source,
            "created_at": utc_iso(datetime.now(timezone.utc)),
            "checks": checks, "passed": passed, "failed": len(scored) - passed,
            "skipped": len(checks) - len(scored),
            "score": round(passed / len(scored), 4) if scored else 1.0,
            "totals": totals(state.turns), "failed_turns": failed_turns(state.turns)}


def failed_turns(turns: list[TurnRecord]) -> list[dict[str, Any]]:
    """The turns that did not complete, each with the first error it met: their checks
    score an empty reply, which says nothing of the model unless the report says why."""
    return [{"turn": t.index, "error": next((e.message for e in t.of("error")),
                                            "the turn did not complete")}
            for t in turns if not t.completed]


def totals(turns: list[TurnRecord]) -> dict[str, Any]:
    """The report's totals, counted by the engine's Tally so that a number means here what it
    means in the chat and in replay: model_calls is every call sent, and tokens and cost are
    every paid call's, the summariser's included (`Tally.paid_*`); max_request_tokens is the
    largest chat request. `turns` is every input driven, whether or not its turn completed."""
    tally = Tally().add_all([e for t in turns for e in t.events])
    usage = tally.paid_usage
    return {"turns": len(turns), "model_calls": tally.model_calls,
            "tool_calls": tally.tool_call_count, "tools": dict(sorted(tally.tool_calls.items())),
            "input_tokens": usage.total_input, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_input_tokens,
            "max_request_tokens": tally.max_request_tokens, "cost_usd": round(tally.paid_cost_usd, 6),
            "alerts": tally.alerts, "evictions": tally.model_evictions,
            "forced_flushes": tally.forced_flushes, "errors": tally.errors}

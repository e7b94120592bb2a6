"""Session recordings (JSONL event logs) and their strict replay through a fresh agent.

A recording is append-only JSONL, one JSON object per line, each with `"v": 1` and a `"type"`:

    header       agent name, settings, model, prompt digests, package version, created_at,
                 source ("live" | "hand-written" | "eval"), initial core memory, and — when
                 the session continued an agent that already had history — a full snapshot
                 (transfer.export_agent) so that a replay starts from the same state
    user         one user input: text and `at` (the agent clock's ISO time)
    <event kind> one line per agent event (model_call, response, tool_call, tool_result,
                 memory_edit, pressure_alert, eviction, summary, usage, turn_end, ...)
    clock        every reading of the agent's clock during the turn, replayed in order
    memory       core memory after each turn ({label: value}), for state comparison
    restart      the agent was reopened from its store (a new process) before the next input
    command      a user action between turns that changes state: edit_block {label, value}
                 or pop_turns {n}; replay applies it at the same point
    interrupted  the consumer closed the turn early (Ctrl-C)
    prompt_too_long  the provider refused a chat request as too long (message, actual,
                 maximum): the agent evicts and retries without an event, so the recorder
                 notes it itself and replay raises the same error at the same call

Text and thinking deltas are not written: the `response` line that follows holds the same
text exactly as received, and the replay client re-chunks it. Every line carries `t`, seconds
since the recorder opened, so a replay can pace itself like the live session.

Replay feeds the recorded user inputs through a fresh agent (temporary data dir, same
settings) whose model client serves the recorded responses in order and checks each
request's digest against the recorded one. This module never prints.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from memgpt_lite import __version__
from memgpt_lite.engine import errors, events, prompts
from memgpt_lite.engine.config import Settings, recordings_dir
from memgpt_lite.engine.errors import PromptTooLongError
from memgpt_lite.engine.events import Event, TextDelta, ThinkingDelta
from memgpt_lite.engine.records import (
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
    Usage,
    utc_iso,
)
from memgpt_lite.engine.redact import redact
from memgpt_lite.engine.store import transfer

RECORDING_VERSION = 1
# Deltas are redundant with the response line that follows them (see module docstring).
UNRECORDED_KINDS = frozenset({"text_delta", "thinking_delta"})
# A recorded line that is not an agent event (see _RecordingModelClient).
PROMPT_TOO_LONG = "prompt_too_long"
_EVENT_CLASSES: dict[str, type] = {
    cls.__dataclass_fields__["kind"].default: cls  # type: ignore[attr-defined]
    for cls in (events.TextDelta, events.ThinkingDelta, events.ModelCallStart, events.ResponseEvent,
                events.ToolCallEvent, events.ToolResultEvent, events.MemoryEditEvent,
                events.PressureAlertEvent, events.FoldEvent, events.EvictionEvent,
                events.SummaryEvent, events.ClipEvent, events.UsageEvent, events.NoticeEvent,
                events.ErrorEvent, events.TurnEndEvent)
}
_ERROR_CLASSES: dict[str, type[errors.ModelError]] = {
    cls.kind: cls for cls in (errors.ModelError, errors.AuthError, errors.RateLimitError,
                              errors.OverloadedError, errors.APIConnectionError, errors.StreamError,
                              errors.BadRequestError, errors.PromptTooLongError)
}


class RecordingError(Exception):
    """A recording cannot be read (missing, not JSONL, newer version); one sentence."""


# --------------------------------------------------------------------------- events <-> dicts


def event_to_dict(event: Event) -> dict[str, Any]:
    """An agent event as a JSON-ready dict with its `kind` (responses via to_dict)."""
    if isinstance(event, events.ResponseEvent):
        return {"kind": event.kind, "purpose": event.purpose, "response": event.response.to_dict()}
    return asdict(event)  # type: ignore[call-overload]


def event_from_dict(d: dict[str, Any]) -> Event:
    """The event dataclass back from `event_to_dict` (or a recording line)."""
    kind = d.get("kind") or d.get("type")
    cls = _EVENT_CLASSES.get(str(kind))
    if cls is None:
        raise RecordingError(f"unknown event kind {kind!r} in recording")
    names = {f.name for f in fields(cls)}
    values = {k: _revive(k, v) for k, v in d.items() if k in names and k != "kind"}
    return cls(**values)


def _revive(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "response":
        return ModelResponse.from_dict(value)
    if name == "usage":
        return Usage.from_dict(value)
    if name == "call":
        return ToolCall(value["id"], value["name"], value.get("input") or {})
    if name == "result":
        return ToolResult(value["tool_use_id"], value["content"], bool(value.get("is_error")))
    return value


def parse_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------- recorder


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "agent"


def new_recording_path(agent_name: str, *, now: datetime | None = None,
                       directory: Path | None = None) -> Path:
    """recordings_dir()/<agent>/<UTC timestamp>.jsonl, never an existing file."""
    folder = (directory or recordings_dir()) / _safe_name(agent_name)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    path, n = folder / f"{stamp}.jsonl", 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{n}.jsonl"
    return path


def _private_dirs(folder: Path) -> None:
    """Create `folder` and any missing parents as 0700, whatever the umask: mkdir's mode
    applies to the leaf only, and recordings hold whole conversations."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o700)


class Recorder:
    """Appends one JSON object per line to a recording and flushes after each line.

    The file is created 0600 (parents 0700): recordings hold the whole conversation.
    `timer` gives seconds for the `t` field (monotonic by default; tests and the hand-written
    demo pass a deterministic one).
    """

    def __init__(self, path: str | Path, *, timer: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        _private_dirs(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._timer = timer
        self._start = timer()

    @classmethod
    def create(cls, agent_name: str, **kwargs: Any) -> Recorder:
        return cls(new_recording_path(agent_name), **kwargs)

    def write(self, obj: dict[str, Any]) -> None:
        line = {"v": RECORDING_VERSION, **obj, "t": round(self._timer() - self._start, 3)}
        self._file.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()

    def header(self, *, agent: str, settings: dict[str, Any], model: str,
               blocks: dict[str, str] | None = None, snapshot: dict[str, Any] | None = None,
               source: str = "live", note: str | None = None,
               created_at: str | None = None) -> None:
        self.write({"type": "header", "agent": agent, "settings": settings, "model": model,
                    "prompt_digests": prompts.digests(), "version": __version__,
                    "created_at": created_at or utc_iso(datetime.now(timezone.utc)),
                    "source": source, "note": note, "blocks": blocks or {},
                    "snapshot": snapshot})

    def user(self, text: str, at: str) -> None:
        self.write({"type": "user", "text": text, "at": at})

    def event(self, event: Event) -> None:
        if event.kind in UNRECORDED_KINDS:
            return
        data = event_to_dict(event)
        self.write({"type": data.pop("kind"), **data})

    def memory(self, blocks: dict[str, str]) -> None:
        self.write({"type": "memory", "blocks": blocks})

    def restart(self) -> None:
        self.write({"type": "restart"})

    def command(self, name: str, **args: Any) -> None:
        """A state change made by the user between turns (see REPLAYABLE_COMMANDS)."""
        self.write({"type": "command", "name": name, "args": args})

    def interrupted(self) -> None:
        self.write({"type": "interrupted"})

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def core_memory(agent: Any) -> dict[str, str]:
    return {b.label: b.value for b in agent.blocks()}


def _agent_has_history(agent: Any) -> bool:
    stats = agent.store.agent_stats(agent.id)
    return bool(stats.get("messages") or stats.get("passages") or agent.store.get_agent_by_id(
        agent.id).summary)


def record_header(agent: Any, recorder: Recorder, *, source: str = "live",
                  note: str | None = None, created_at: str | None = None) -> None:
    """Write the header for a session of `agent`. An agent with history is snapshotted
    whole, because a replay must start from the state the live session started from."""
    snapshot = transfer.export_agent(agent.store, agent.name) if _agent_has_history(agent) else None
    recorder.header(agent=agent.name, settings=agent.settings.to_dict(),
                    model=agent.settings.model, blocks=core_memory(agent), snapshot=snapshot,
                    source=source, note=note, created_at=created_at)


class _RecordingClock:
    """Wraps the agent's clock for one turn and keeps every reading.

    Replay serves the readings back in order: the user message, the commit and anything
    else the engine stamps get the live session's times, so search results that show
    times (and every later request) match byte for byte."""

    def __init__(self, real: Callable[[], datetime]):
        self.real = real
        self.first: datetime | None = real()
        self.readings: list[str] = []

    def __call__(self) -> datetime:
        moment = self.first if self.first is not None else self.real()
        self.first = None
        self.readings.append(utc_iso(moment))
        return moment


class _RecordingModelClient:
    """Wraps the agent's chat client for one turn and records a "prompt too long" refusal.

    The agent answers that error by evicting and retrying, without an event, so nothing else
    in the recording says that the call failed, or with which numbers (they steer the token
    counter, hence every later request)."""

    def __init__(self, real: Any, recorder: Recorder):
        self.real, self.recorder = real, recorder

    def stream(self, request: ModelRequest) -> Iterator[TextDelta | ThinkingDelta | ModelResponse]:
        try:
            yield from self.real.stream(request)
        except PromptTooLongError as exc:
            self.recorder.write({"type": PROMPT_TOO_LONG, "message": exc.message,
                                 "actual": exc.actual, "maximum": exc.maximum})
            raise


def recorded_step(agent: Any, recorder: Recorder, text: str) -> Iterator[Event]:
    """`agent.step(text)`, recording the user input and every event while passing them on.

    Closing this generator early (Ctrl-C) closes the agent's turn too and records that."""
    real, real_client = agent.clock, agent.model_client
    clock = agent.clock = _RecordingClock(real)
    agent.model_client = _RecordingModelClient(real_client, recorder)
    # The agent redacts secrets before storing; the recording must not keep them either.
    recorder.user(redact(text) if getattr(agent, "redact_secrets", True) else text,
                  utc_iso(clock.first))  # type: ignore[arg-type]
    inner = agent.step(text)
    finished = False
    try:
        for event in inner:
            recorder.event(event)
            yield event
        finished = True
    finally:
        inner.close()
        agent.clock, agent.model_client = real, real_client
        if not finished:
            recorder.interrupted()
        recorder.write({"type": "clock", "readings": clock.readings})
        recorder.memory(core_memory(agent))


# --------------------------------------------------------------------------- reading


@dataclass
class RecordedTurn:
    """One user input and the lines recorded after it."""

    index: int  # 0-based position among the recording's user inputs
    text: str
    at: str
    t: float
    events: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, str] | None = None
    restart_before: bool = False
    interrupted: bool = False
    clock: list[str] = field(default_factory=list)  # the agent clock's readings in this turn
    commands_before: list[dict[str, Any]] = field(default_factory=list)

    def lines(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def reply(self) -> str | None:
        ends = self.lines("turn_end")
        return ends[-1]["text"] if ends else None


@dataclass
class RecordedCall:
    """One model call of a recording: the request digest and what came back."""

    turn: int
    digest: str
    purpose: str
    response: ModelResponse | None
    error: dict[str, Any] | None = None


@dataclass
class Recording:
    path: Path
    header: dict[str, Any]
    turns: list[RecordedTurn]
    trailing_commands: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        path = Path(path)
        header, turns, restart, commands = None, [], False, []
        for number, line in _read_lines(path):
            kind = line["type"]
            if kind == "header":
                header = header or line
            elif kind == "user":
                turns.append(RecordedTurn(len(turns), line["text"], line.get("at") or "",
                                          float(line.get("t") or 0), restart_before=restart,
                                          commands_before=commands))
                restart, commands = False, []
            elif kind == "restart":
                restart = True
            elif kind == "command":
                commands.append(line)
            elif not turns:
                raise RecordingError(f"{path}: line {number} has a {kind!r} before any user input")
            elif kind == "memory":
                turns[-1].memory = line["blocks"]
            elif kind == "interrupted":
                turns[-1].interrupted = True
            elif kind == "clock":
                turns[-1].clock = list(line.get("readings") or [])
            else:
                turns[-1].events.append(line)
        if header is None:
            raise RecordingError(f"{path} has no header line; it is not a memgpt-lite recording")
        return cls(path, header, turns, commands)

    def calls(self) -> list[RecordedCall]:
        """Model calls in order; each paired with the response (or error) that followed."""
        calls: list[RecordedCall] = []
        for turn in self.turns:
            for line in turn.events:
                if line["type"] == "model_call":
                    calls.append(RecordedCall(turn.index, line["request_digest"],
                                              line.get("purpose", "chat"), None))
                elif calls and calls[-1].turn == turn.index and _awaits(calls[-1]):
                    if line["type"] == "response":
                        calls[-1].response = ModelResponse.from_dict(line["response"])
                    elif line["type"] in ("error", PROMPT_TOO_LONG):
                        calls[-1].error = line
        return calls

    @property
    def source(self) -> str:
        return str(self.header.get("source") or "live")


def _awaits(call: RecordedCall) -> bool:
    return call.response is None and call.error is None


def _read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordingError(f"no recording at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"cannot read {path}: {exc}") from None
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            raise RecordingError(f"{path}: line {number} is not valid JSON") from None
        if not isinstance(line, dict) or "type" not in line:
            raise RecordingError(f"{path}: line {number} is not a recording line")
        if int(line.get("v", 0)) > RECORDING_VERSION:
            raise RecordingError(f"{path} was written by a newer memgpt-lite (format v{line['v']})")
        yield number, line


@dataclass
class RecordingInfo:
    agent: str
    path: Path
    started: str
    turns: int
    source: str


def list_recordings(agent: str | None = None, directory: Path | None = None) -> list[RecordingInfo]:
    """Recordings under the data dir (newest last); unreadable files are skipped."""
    root = directory or recordings_dir()
    folders = [root / _safe_name(agent)] if agent else sorted(p for p in root.glob("*") if p.is_dir())
    out = []
    for path in sorted(f for folder in folders for f in folder.glob("*.jsonl")):
        try:
            rec = Recording.load(path)
        except RecordingError:
            continue
        out.append(RecordingInfo(rec.header.get("agent", path.parent.name), path,
                                 rec.header.get("created_at", ""), len(rec.turns), rec.source))
    return sorted(out, key=lambda r: (r.started, str(r.path)))


# --------------------------------------------------------------------------- replay client


@dataclass
class DivergenceInfo:
    """Where a replay stopped matching its recording."""

    turn: int  # 1-based user input
    what: str  # request | purpose | calls | tool_result | reply | memory
    detail: str

    def __str__(self) -> str:
        return f"turn {self.turn}: {self.what}: {self.detail}"


class Divergence(Exception):
    """Strict replay: the fresh agent did something the recording did not."""

    def __init__(self, info: DivergenceInfo):
        super().__init__(str(info))
        self.info = info


class ReplayExhausted(Divergence):
    """The agent asked for more model calls than the recording holds for this turn."""


class ReplayModelClient:
    """A ModelClient that serves a recording's responses in order (chat and summary).

    Each request's digest is checked against the recorded `ModelCallStart.request_digest`;
    differences are noted in `divergences` (strict: raised as `Divergence`). The response is
    served anyway in non-strict mode, so one changed byte does not derail the whole replay.
    Text is re-emitted as deltas of `chunk` characters. `begin_turn(i)` jumps to the first
    call of user input i, so a turn that made fewer calls than recorded cannot shift the
    responses of every later turn.
    """

    def __init__(self, calls: list[RecordedCall] | Recording, *, strict: bool = False,
                 chunk: int = 24):
        self.calls = calls.calls() if isinstance(calls, Recording) else list(calls)
        self.strict = strict
        self.chunk = chunk
        self.position = 0
        self.turn = 0
        self.served = 0
        self.divergences: list[DivergenceInfo] = []

    def begin_turn(self, turn: int) -> None:
        self.turn = turn
        self.position = next((i for i, c in enumerate(self.calls) if c.turn >= turn),
                             len(self.calls))

    def remaining_in_turn(self) -> int:
        return sum(1 for c in self.calls[self.position:] if c.turn == self.turn)

    def for_purpose(self, purpose: str) -> _PurposeView:
        return _PurposeView(self, purpose)

    def stream(self, request: ModelRequest, *, purpose: str | None = None,
               ) -> Iterator[TextDelta | ThinkingDelta | ModelResponse]:
        call = self._next_call()
        actual = request.digest()
        if actual != call.digest:
            self.diverge("request", f"model call {self.served} request digest {actual} "
                                    f"!= recorded {call.digest}")
        if purpose and purpose != call.purpose:
            self.diverge("purpose", f"a {purpose} call where the recording has a {call.purpose} call")
        if call.response is None:
            raise _rebuild_error(call.error or _NEVER_FINISHED)
        yield from self._deltas(call.response)
        yield call.response

    def _next_call(self) -> RecordedCall:
        if self.position >= len(self.calls) or self.calls[self.position].turn != self.turn:
            info = DivergenceInfo(self.turn + 1, "calls", "the agent made more model calls than "
                                  "the recording holds for this turn")
            self.divergences.append(info)
            raise ReplayExhausted(info)
        call = self.calls[self.position]
        self.position += 1
        self.served += 1
        return call

    def diverge(self, what: str, detail: str) -> None:
        info = DivergenceInfo(self.turn + 1, what, detail)
        self.divergences.append(info)
        if self.strict:
            raise Divergence(info)

    def _deltas(self, response: ModelResponse) -> Iterator[TextDelta | ThinkingDelta]:
        for block in response.content:
            make = {"text": TextDelta, "thinking": ThinkingDelta}.get(block.get("type"))
            text = (block.get(block["type"]) or "") if make else ""
            for i in range(0, len(text), self.chunk):
                yield make(text[i:i + self.chunk])  # type: ignore[misc]


class _PurposeView:
    """The same replay cursor, seen as the summary (or chat) client: checks the purpose."""

    def __init__(self, client: ReplayModelClient, purpose: str):
        self.client, self.purpose = client, purpose

    def stream(self, request: ModelRequest) -> Iterator[TextDelta | ThinkingDelta | ModelResponse]:
        return self.client.stream(request, purpose=self.purpose)


# What a recorded call that has neither response nor error raises: the live stream was cut
# (Ctrl-C), or the summariser swallowed the error; either way a retryable stream error.
_NEVER_FINISHED = {"message": "the recorded call never finished (interrupted)",
                   "error_kind": "stream"}


def _rebuild_error(line: dict[str, Any]) -> errors.ModelError:
    message = str(line.get("message") or "recorded model error")
    if line.get("type") == PROMPT_TOO_LONG:
        return PromptTooLongError(message, actual=line.get("actual"), maximum=line.get("maximum"))
    return _ERROR_CLASSES.get(str(line.get("error_kind")), errors.ModelError)(message)


# --------------------------------------------------------------------------- replay


class ReplayObserver(Protocol):
    """What a live view of a replay gets told (reports.py renders it)."""

    def user(self, turn: RecordedTurn) -> None: ...
    def event(self, event: Event, recorded_t: float | None) -> None: ...
    def divergence(self, info: DivergenceInfo) -> None: ...


@dataclass
class ReplayReport:
    path: Path
    header: dict[str, Any]
    strict: bool
    turns: int = 0
    recorded_turns: int = 0
    model_calls: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    alerts: int = 0
    evictions: int = 0  # chosen by the model (evict_turns)
    forced_flushes: int = 0  # by the pager (flush or overflow)
    folds: int = 0
    errors: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    final_core_memory: dict[str, str] = field(default_factory=dict)
    block_limits: dict[str, int] = field(default_factory=dict)
    divergences: list[DivergenceInfo] = field(default_factory=list)
    completed: bool = False

    @property
    def ok(self) -> bool:
        return self.completed and not self.divergences

    def count(self, event: Event) -> None:
        kind = event.kind
        if kind == "model_call":
            self.model_calls += 1
        elif kind == "tool_call":
            self.tool_calls[event.call.name] += 1  # type: ignore[union-attr]
        elif kind == "pressure_alert":
            self.alerts += 1
        elif kind == "eviction":
            if event.by == "model":  # type: ignore[union-attr]
                self.evictions += 1
            else:
                self.forced_flushes += 1
        elif kind == "fold":
            self.folds += 1
        elif kind == "error":
            self.errors += 1
        elif kind == "turn_end":
            self.turns += 1
            self.usage = self.usage + event.usage  # type: ignore[union-attr]
            self.cost_usd += event.cost_usd  # type: ignore[union-attr]


class ReplayClock:
    """The replay agent's clock: serves one turn's recorded readings in order, then keeps
    returning the last one; a turn without readings is fixed at its user input's `at`."""

    def __init__(self) -> None:
        self.pending: list[datetime] = []
        self.now = datetime(2000, 1, 1, tzinfo=timezone.utc)

    def begin(self, at: str, readings: list[str] | None = None) -> None:
        self.pending = [parse_iso(r) for r in (readings or [at])]
        self.now = self.pending[0]

    def __call__(self) -> datetime:
        if self.pending:
            self.now = self.pending.pop(0)
        return self.now


def replay(path: str | Path, *, strict: bool = False,
           observer: ReplayObserver | None = None) -> ReplayReport:
    """Replay a recording through a fresh agent in a temporary data dir.

    Compares request digests, tool results, replies and core memory after each turn; strict
    mode stops at the first divergence. The report says what the replayed agent did."""
    recording = Recording.load(path)
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-replay-") as tmp:
        return _Replayer(recording, strict, observer, Path(tmp)).run()


class _Replayer:
    def __init__(self, recording: Recording, strict: bool, observer: ReplayObserver | None,
                 tmp: Path):
        self.recording, self.strict, self.observer = recording, strict, observer
        self.client = ReplayModelClient(recording, strict=strict)
        self.clock = ReplayClock()
        self.store = _replay_store(tmp / "replay.db", self.clock)
        self.report = ReplayReport(recording.path, recording.header, strict,
                                   recorded_turns=len(recording.turns))
        self.agent: Any = None

    def run(self) -> ReplayReport:
        try:
            self.agent = self._open(first=True)
            for turn in self.recording.turns:
                if turn.restart_before:
                    self.agent = self._open(first=False)
                self._commands(turn.commands_before)
                self._turn(turn)
            self._commands(self.recording.trailing_commands)
            self.report.completed = True
        except Divergence as exc:
            self._note(exc.info)
        finally:
            if self.agent is not None:
                self.report.final_core_memory = core_memory(self.agent)
                self.report.block_limits = {b.label: b.limit for b in self.agent.blocks()}
            self.store.close()
        return self.report

    def _open(self, *, first: bool) -> Any:
        from memgpt_lite.engine.agent import Agent

        header = self.recording.header
        settings = Settings.from_dict(header.get("settings"))
        name = header.get("agent") or "default"
        if first and self.recording.turns:
            self.clock.begin(self.recording.turns[0].at)
        if first and header.get("snapshot"):
            transfer.import_agent(self.store, header["snapshot"], name)
        agent = Agent.open(self.store, name, model_client=self.client,
                           summary_client=self.client.for_purpose("summary"),
                           settings=settings, clock=self.clock)
        if first and not header.get("snapshot"):
            self._restore_blocks(agent, header.get("blocks") or {})
        return agent

    def _commands(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            args = line.get("args") or {}
            if line.get("name") == "edit_block":
                self.agent.edit_block(args["label"], args["value"])
            elif line.get("name") == "pop_turns":
                self.agent.pop_turns(int(args.get("n", 1)))
            else:
                raise RecordingError(f"unknown command {line.get('name')!r} in recording")

    def _restore_blocks(self, agent: Any, blocks: dict[str, str]) -> None:
        current = core_memory(agent)
        for label, value in blocks.items():
            if current.get(label) != value:
                self.store.set_block(agent.id, label, value, source="replay")

    def _turn(self, turn: RecordedTurn) -> None:
        if self.observer:
            self.observer.user(turn)
        self.clock.begin(turn.at, turn.clock)
        self.client.begin_turn(turn.index)
        events = self._drive(turn)
        self._compare(turn, events)

    def _drive(self, turn: RecordedTurn) -> list[Event]:
        recorded = [line for line in turn.events if line["type"] != PROMPT_TOO_LONG]
        limit = len(recorded) if turn.interrupted else None
        seen: list[Event] = []
        gen = self.agent.step(turn.text)
        try:
            for event in gen:
                if event.kind not in UNRECORDED_KINDS:
                    seen.append(event)
                self.report.count(event)
                if self.observer:
                    at = recorded[len(seen) - 1].get("t") if 0 < len(seen) <= len(recorded) else None
                    self.observer.event(event, at)
                self._check_client()
                if limit is not None and len(seen) >= limit:
                    break  # the live turn was closed here (Ctrl-C): close it at the same point
        except Divergence as exc:  # raised by the replay client through the agent
            self._note(exc.info)
            if self.strict:
                raise
        finally:
            gen.close()
        self._check_client()
        return seen

    def _check_client(self) -> None:
        """The agent may turn a client exception into an error event; notice it anyway."""
        for info in self.client.divergences:
            if info not in self.report.divergences:
                self._diverge(info)

    def _diverge(self, info: DivergenceInfo) -> None:
        self._note(info)
        if self.strict:
            raise Divergence(info)

    def _note(self, info: DivergenceInfo) -> None:
        if info not in self.report.divergences:
            self.report.divergences.append(info)
            if self.observer:
                self.observer.divergence(info)

    def _compare(self, turn: RecordedTurn, events: list[Event]) -> None:
        checks = [self._compare_calls(turn), self._compare_tool_results(turn, events),
                  self._compare_reply(turn, events), self._compare_memory(turn)]
        for detail in checks:
            if detail is not None:
                self._diverge(DivergenceInfo(turn.index + 1, *detail))

    def _compare_calls(self, turn: RecordedTurn) -> tuple[str, str] | None:
        left = self.client.remaining_in_turn()
        if left and not turn.interrupted:
            return "calls", f"the agent made {left} model call(s) fewer than recorded"
        return None

    def _compare_tool_results(self, turn: RecordedTurn, events: list[Event],
                              ) -> tuple[str, str] | None:
        recorded = [(r["call"]["name"], r["result"]["content"], bool(r["result"].get("is_error")))
                    for r in turn.lines("tool_result")]
        actual = [(e.call.name, e.result.content, e.result.is_error)  # type: ignore[union-attr]
                  for e in events if e.kind == "tool_result"]
        for i, (want, got) in enumerate(zip(recorded, actual), 1):
            if want != got:
                return "tool_result", (f"tool result {i} ({got[0]}) differs: recorded "
                                       f"{_clip(want[1])!r}, replayed {_clip(got[1])!r}")
        if len(recorded) != len(actual):
            return "tool_result", f"{len(actual)} tool results where {len(recorded)} were recorded"
        return None

    def _compare_reply(self, turn: RecordedTurn, events: list[Event]) -> tuple[str, str] | None:
        ends = [e for e in events if e.kind == "turn_end"]
        got = ends[-1].text if ends else None  # type: ignore[union-attr]
        if turn.reply is not None and got is not None and got != turn.reply:
            return "reply", f"reply {_clip(got)!r} != recorded {_clip(turn.reply)!r}"
        return None

    def _compare_memory(self, turn: RecordedTurn) -> tuple[str, str] | None:
        if turn.memory is None:
            return None
        actual = core_memory(self.agent)
        for label in sorted(set(turn.memory) | set(actual)):
            if turn.memory.get(label) != actual.get(label):
                return "memory", (f"core block {label!r} is {_clip(actual.get(label))!r}, "
                                  f"recorded {_clip(turn.memory.get(label))!r}")
        return None


def _replay_store(path: Path, clock: ReplayClock) -> Any:
    """A Store whose passages are stamped by the replay clock, not the wall clock: archival
    search shows passage dates, and a replay on another day must still match."""
    from memgpt_lite.engine.store import Store  # heavy modules load only when replaying

    class ReplayStore(Store):
        def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                        created_at: str | None = None) -> int:
            return super().add_passage(agent_id, text, tags, created_at or utc_iso(clock.now))

    return ReplayStore(path)


def _clip(text: str | None, n: int = 80) -> str | None:
    if text is None or len(text) <= n:
        return text
    return text[: n - 1] + "…"


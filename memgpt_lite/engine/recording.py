"""Session recordings (JSONL event logs) and their strict replay through a fresh agent.

A recording is append-only JSONL, one JSON object per line, each with `"v"` (the format
version, 2; version 1 is still read) and a `"type"`:

    header       agent name and uid, settings, model, prompt digests, package version,
                 created_at, source ("live" | "hand-written" | "eval"), initial core memory,
                 the `conversation` it is of and the `project` the agent worked in, the
                 model-facing `contract` (prompts.CONTRACT; absent: 1) it replays under,
                 the `token_rule` its estimates weighed text by (tokens.RULE; absent: 1),
                 and where a replay starts: `base` (a snapshot file of the agent beside the
                 recording, or null) plus `delta`, what changed since that base (see
                 store/snapshot.py). Version 1 headers held a whole `snapshot` instead.
    user         one user input: text and `at` (the agent clock's ISO time); `retry: true`
                 when it was /retry (Agent.retry, which reuses or pops the last turn);
                 `agent` when another agent than the header's took the turn (a multi-agent
                 eval: such a recording is re-scored with `eval --replay`, not replayed);
                 `attachments`, the content blocks of the files sent with it (whole);
                 `compact: true` when it was /compact (Agent.compact, `text` the user's
                 instructions)
    <event kind> one line per agent event (model_call, response, tool_call, tool_result,
                 memory_edit, memory_confirm (the user's answer about a memory write:
                 replay gives the same), pressure_alert, eviction, summary, usage, turn_end)
    clock        every reading of the agent's clock during the turn, replayed in order
                 (ISO times with the local UTC offset they were read with, "Z" for UTC:
                 from model contract 3 the model is told the turn's local time)
    passage_ids  the ids the turn's new passages got (ids are global to the data dir, so
                 another agent's passages would shift them in a replay that lacks them);
                 written before the next event once known, each line listing all so far
                 (older recordings have one line, after the turn's events)
    message_ids  likewise the ids the turn's new messages got, written only when another
                 agent's messages made them skip (SQLite numbers messages across the data
                 dir, and hybrid search's recorded candidates name them); without it the
                 replay's own numbering gives the same ids
    shared_block a block read with a value written elsewhere (another agent sharing it, or
                 another process serving this agent, e.g. an MCP client): label, value and
                 `after`, the number of the turn's recorded events before that read; replay
                 applies the edit at the same point
    memory       core memory after each turn ({label: value}), for state comparison
    restart      the agent was reopened from its store (a new process) before the next input
    command      a user action between turns that changes state: edit_block {label, value}
                 or pop_turns {n}, or shared_block {label, value} (another agent's edit of a
                 shared block, seen between turns); replay applies it at the same point
    interrupted  the consumer closed the turn early (Ctrl-C)
    prompt_too_long  the provider refused a chat request as too long (message, actual,
                 maximum): the agent evicts and retries; replay raises the same error at
                 the same call. Like the user line, it is not counted among the turn's
                 events (UNCOUNTED_KINDS), as recordings always had it.

Text and thinking deltas are not written: the `response` line that follows holds the same
text exactly as received, and the replay client re-chunks it. Every line carries `t`, seconds
since the recorder opened, so a replay can pace itself like the live session.

The recorder is an observer: it writes the events a turn yields (its `user` line from the
turn's UserEvent, the text as the agent stored it) and the clock readings the agent tells it
of (`Agent.observed`). It never touches the agent's clock or model client.

A recording that ends inside a turn (the process was killed, or the disk filled) has no
`memory` line for that turn: replay runs it up to its last recorded event and cuts it
there, as the next start of the live agent undid it.

`replay.py` feeds a recording's user inputs through a fresh agent. This module never prints.
Why it is longer than most: the writer and the reader of the format live in one module, so
that a line type is never added to one without the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memgpt_lite import __version__
from memgpt_lite.engine import prompts, recall_page
from memgpt_lite.engine.config import recordings_dir
from memgpt_lite.engine.events import Event, NoticeEvent, ResponseEvent, UserEvent
from memgpt_lite.engine.files import private_dirs
from memgpt_lite.engine.recording_schema import line_problem
from memgpt_lite.engine.records import ModelResponse, Usage, utc_iso, zoned_iso
from memgpt_lite.engine.store import StoreError, snapshot
from memgpt_lite.engine.store.base import AgentWatch
from memgpt_lite.engine.text import clean_value
from memgpt_lite.engine.tokens import RULE

RECORDING_VERSION = 2
BASES = "bases"  # the folder of base snapshots, beside an agent's recordings
# Deltas are redundant with the response line that follows them (see module docstring); a
# retry's wait belongs to the connection, and a replay makes no call to wait for.
UNRECORDED_KINDS = frozenset({"text_delta", "thinking_delta", "retry_wait"})
PROMPT_TOO_LONG = "prompt_too_long"
# Lines of a turn that are not counted among its events (a shared_block's `after`, where an
# interrupted turn was cut): the user line opens the turn, and a provider's refusal was
# noted beside the events before it was an event itself.
UNCOUNTED_KINDS = frozenset({"user", PROMPT_TOO_LONG})


class RecordingError(Exception):
    """A recording cannot be read (missing, not JSONL, newer version); one sentence."""


class RecordingUnavailable(Exception):
    """A recording cannot be written (folder not writable, disk full); one sentence. A
    recording is a convenience: the session goes on without it."""


def _cannot_write(where: Path, exc: BaseException) -> str:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return (f"Cannot record this session in {where} ({reason}); the chat goes on without "
            "recording.")


# --------------------------------------------------------------------------- events <-> dicts


def event_to_dict(event: Event) -> dict[str, Any]:
    """An agent event as a JSON-ready dict with its `kind` (responses via to_dict)."""
    if isinstance(event, ResponseEvent):
        return {"kind": event.kind, "purpose": event.purpose, "response": event.response.to_dict()}
    return asdict(event)  # type: ignore[call-overload]


# --------------------------------------------------------------------------- recorder


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "agent"


def agent_folder(uid: str, directory: Path | None = None) -> Path:
    """Where an agent's recordings (and their base snapshots) live: under its uid, so a
    rename changes nothing and a new agent of the same name starts afresh."""
    return (directory or recordings_dir()) / _safe_name(uid)


def new_recording_path(folder_name: str, *, now: datetime | None = None,
                       directory: Path | None = None) -> Path:
    """recordings_dir()/<folder>/<UTC timestamp>.jsonl, never an existing file."""
    folder = (directory or recordings_dir()) / _safe_name(folder_name)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    path, n = folder / f"{stamp}.jsonl", 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{n}.jsonl"
    return path


class Recorder:
    """Appends one JSON object per line to a recording and flushes after each line.

    The file is created 0600 (parents 0700): recordings hold the whole conversation.
    `timer` gives seconds for the `t` field (monotonic by default; tests and the hand-written
    demo pass a deterministic one). Creating the file may raise OSError; a write that fails
    later (a full disk) never raises: the recorder stops, and `failed` says why in one
    sentence (see `recorded_step`).
    """

    def __init__(self, path: str | Path, *, timer: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        self.failed: str | None = None
        self.announced = False  # whether the failure was passed on as a NoticeEvent
        private_dirs(self.path.parent)  # recordings hold whole conversations
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._timer = timer
        self._start = timer()
        self.agent_uid: str | None = None  # the header's agent
        # While a turn runs: how many of its events were written (see `outside_edit`).
        self.turn_events: int | None = None
        self._seen: dict[str, str] = {}  # core memory blocks as the agent last saw them
        self._watch: tuple[Any, int, AgentWatch] | None = None

    @classmethod
    def create(cls, folder_name: str, **kwargs: Any) -> Recorder:
        """A new recording in recordings_dir()/<folder_name>/ (e.g. an eval's)."""
        return cls(new_recording_path(folder_name), **kwargs)

    @classmethod
    def for_agent(cls, agent: Any, **kwargs: Any) -> Recorder:
        """A new recording in the agent's folder (see `agent_folder`)."""
        return cls(new_recording_path(agent.row.uid), **kwargs)

    def write(self, obj: dict[str, Any]) -> None:
        if self.failed:
            return
        line = {"v": RECORDING_VERSION, **obj, "t": round(self._timer() - self._start, 3)}
        text = json.dumps(clean_value(line), ensure_ascii=False, separators=(",", ":"))
        try:
            self._file.write(text + "\n")
            self._file.flush()
        except OSError as exc:
            self.stop(exc)

    def stop(self, exc: BaseException) -> None:
        """Stop recording after a failed write; what was written stays."""
        self.failed = self.failed or _cannot_write(self.path.parent, exc)
        with contextlib.suppress(OSError):
            self._file.close()

    def header(self, *, agent: str, settings: dict[str, Any], model: str,
               blocks: dict[str, str] | None = None, agent_uid: str | None = None,
               base: str | None = None, delta: dict[str, Any] | None = None,
               source: str = "live", note: str | None = None,
               created_at: str | None = None, conversation: int | None = None,
               project: str | None = None, contract: int = prompts.CONTRACT,
               search_layout: int = recall_page.LAYOUT, token_rule: int = RULE,
               inputs: int | None = None) -> None:
        """`inputs`: an eval's, how many the scenario has, so that a whole run of a
        scenario appended to since is told from a run cut short."""
        self.agent_uid = agent_uid
        self.write({"type": "header", "agent": agent, "agent_uid": agent_uid,
                    "settings": settings, "model": model,
                    "prompt_digests": prompts.digests(), "version": __version__,
                    "contract": contract, "search_layout": search_layout,
                    "token_rule": token_rule,
                    "created_at": created_at or utc_iso(datetime.now(timezone.utc)),
                    "source": source, "note": note, "blocks": blocks or {},
                    "conversation": conversation, "project": project,
                    "base": base, "delta": delta,
                    **({} if inputs is None else {"inputs": inputs})})

    def user(self, text: str, at: str, *, retry: bool = False, agent: str | None = None,
             attachments: list[dict[str, Any]] | None = None, compact: bool = False) -> None:
        self.write({"type": "user", "text": text, "at": at, **({"retry": True} if retry else {}),
                    **({"compact": True} if compact else {}),
                    **({"agent": agent} if agent else {}),
                    **({"attachments": attachments} if attachments else {})})

    def event(self, event: Event) -> None:
        if event.kind in UNRECORDED_KINDS:
            return
        if isinstance(event, UserEvent):
            self.user(event.text, event.at, retry=event.retry, attachments=event.attachments,
                      compact=event.compact)
            return
        data = event_to_dict(event)
        self.write({"type": data.pop("kind"), **data})
        if self.turn_events is not None and event.kind not in UNCOUNTED_KINDS:
            self.turn_events += 1

    # ---------------------------------------------------------------- what other agents change

    def watch(self, agent: Any) -> None:
        """From now on, learn from the store what others change under `agent`: edits of its
        blocks written elsewhere (another agent sharing a block, another process serving this
        agent's memory), and the ids its new passages get (see `outside_edit` and
        the passage_ids line). A store reopened after a restart is watched again with what
        the agent had seen, so an edit made meanwhile is still noticed."""
        self.unwatch()
        if not self._seen:
            self._seen = {b.label: b.value for b in agent.blocks()}
        watch = AgentWatch(self._seen, self.outside_edit)
        agent.store.watch(agent.id, watch)
        self._watch = (agent.store, agent.id, watch)

    def watching(self, agent: Any) -> AgentWatch | None:
        """The watch on `agent` (renewed when its store was reopened); None when `agent` is
        not the agent this recording is of."""
        if self.agent_uid is None or agent.row.uid != self.agent_uid:
            return None
        if self._watch is None or self._watch[0] is not agent.store:
            self.watch(agent)
        return self._watch[2]  # type: ignore[index]

    def unwatch(self) -> None:
        if self._watch is not None:
            store, agent_id, watch = self._watch
            store.unwatch(agent_id, watch)
            self._watch = None

    def outside_edit(self, label: str, value: str) -> None:
        """The agent read a block with a value written elsewhere. Within a turn it
        is noted with how many of the turn's events came before it; between turns it is a
        command before the next input. Replay applies it at the same point."""
        if self.turn_events is None:
            self.command("shared_block", label=label, value=value)
        else:
            self.write({"type": "shared_block", "label": label, "value": value,
                        "after": self.turn_events})

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
        self.unwatch()
        try:
            self._file.close()
        except OSError as exc:  # the last buffered bytes did not fit
            self.stop(exc)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def core_memory(agent: Any) -> dict[str, str]:
    return {b.label: b.value for b in agent.blocks()}


def start_recording(agent: Any) -> Recorder:
    """A new recording of a session of `agent`, its header written; RecordingUnavailable
    (one sentence) when it cannot be, with no file left behind."""
    path = new_recording_path(agent.row.uid)
    try:
        recorder = Recorder(path)
    except OSError as exc:
        raise RecordingUnavailable(_cannot_write(path.parent, exc)) from None
    try:
        record_header(agent, recorder)
    except (OSError, StoreError, sqlite3.Error) as exc:  # the base snapshot did not fit
        recorder.stop(exc)
        if agent.store.damage is not None:  # not the recording's fault: say what is
            recorder.close()
            path.unlink(missing_ok=True)
            raise
    if recorder.failed:
        recorder.close()
        with contextlib.suppress(OSError):
            path.unlink()
        raise RecordingUnavailable(recorder.failed)
    return recorder


def record_header(agent: Any, recorder: Recorder, *, source: str = "live",
                  note: str | None = None, created_at: str | None = None,
                  inputs: int | None = None) -> None:
    """Write the header for a session of `agent`: where its replay starts (a base snapshot
    beside the recording plus what changed since), so that the cost of a recording grows
    with the session, not with the agent."""
    folder, base, delta = recorder.path.parent, None, None
    if _has_history(agent):  # else a replay starts from a new agent with these blocks
        base, since = snapshot.choose_base(agent.store, agent.id, folder / BASES)
        delta = snapshot.changes_since(agent.store, agent.id, since)
    recorder.header(agent=agent.name, agent_uid=agent.row.uid,
                    settings=agent.settings.to_dict(), model=agent.settings.model,
                    blocks=core_memory(agent), delta=delta,
                    base=None if base is None else base.relative_to(folder).as_posix(),
                    source=source, note=note, created_at=created_at,
                    conversation=agent.conversation_id, project=agent.project,
                    contract=agent.contract, search_layout=agent.tools.layout,
                    token_rule=agent.counter.rule, inputs=inputs)
    recorder.watch(agent)


def _has_history(agent: Any) -> bool:
    """Whether a replay needs the agent's rows (else a new agent with the header's blocks
    is the same); a shared block's scope is in the rows only."""
    stats = agent.store.agent_stats(agent.id)
    row = agent.store.get_agent_by_id(agent.id)
    return bool(stats["messages"] or stats["passages"] or row.summary or row.state
                or agent.conversation_id != 1 or any(b.scope != "agent" for b in agent.blocks()))


def recorded_step(agent: Any, recorder: Recorder, text: str, *, retry: bool = False,
                  attachments: list[dict[str, Any]] | None = None,
                  compact: bool = False) -> Iterator[Event]:
    """`agent.step(text, attachments=...)` (with retry: `agent.retry()`, `text` being the
    message it sends again; with compact: `agent.compact(text)`, `text` being the user's
    instructions), recording the turn's events and clock readings while passing the events
    on (the files attached, whole, in its user line).

    The turn's lines start at its UserEvent (the agent stored the message); closing this
    generator early (Ctrl-C) closes the agent's turn too and records that. When the
    recording cannot be written, the turn goes on and one NoticeEvent says so."""
    log = _TurnLog(recorder, agent)
    inner = (agent.retry() if retry else agent.compact(text) if compact
             else agent.step(text, attachments=attachments) if attachments
             else agent.step(text))
    finished = False
    with agent.observed(log):
        try:
            for event in inner:
                log.event(event)
                yield event
                if recorder.failed and not recorder.announced:
                    recorder.announced = True
                    yield NoticeEvent(recorder.failed, "warning")
            finished = True
        finally:
            inner.close()
            log.end(interrupted=not finished)


class _TurnLog:
    """What a recorder writes of one turn of `agent`: its events, the clock readings the
    agent tells it of (see Agent.observed), and the ids its new passages got. Those are
    written as soon as they are known, before the next event, so that a recording cut short
    by a kill still replays what it holds (each passage_ids line lists them all so far)."""

    def __init__(self, recorder: Recorder, agent: Any):
        self.recorder, self.agent = recorder, agent
        self.watch = recorder.watching(agent)
        # Another agent than the header's took the turn (a multi-agent eval).
        self.other = None if self.watch is not None or recorder.agent_uid is None else agent.name
        self.readings: list[str] = []
        self.started = False
        self.ids_written = self.messages_written = 0
        if self.watch is not None:
            self.watch.message_ids.clear()  # the turn's user message is stored next
            self.watch.message_ids_jumped = False

    def clock_read(self, moment: datetime) -> None:
        self.readings.append(zoned_iso(moment))  # with its offset: the model is told it

    def event(self, event: Event) -> None:
        if isinstance(event, UserEvent):
            self.started = True
            self.recorder.user(event.text, event.at, retry=event.retry, agent=self.other,
                               attachments=event.attachments, compact=event.compact)
            if self.watch is not None:
                self.watch.passage_ids.clear()
            self.recorder.turn_events = 0
            return
        self._passage_ids()
        self.recorder.event(event)

    def _passage_ids(self) -> None:
        ids = self.watch.passage_ids if self.watch is not None else []
        if len(ids) > self.ids_written:
            self.recorder.write({"type": "passage_ids", "ids": list(ids)})
            self.ids_written = len(ids)
        jumped = self.watch is not None and self.watch.message_ids_jumped
        messages = self.watch.message_ids if jumped else []  # type: ignore[union-attr]
        if len(messages) > self.messages_written:
            self.recorder.write({"type": "message_ids", "ids": list(messages)})
            self.messages_written = len(messages)

    def end(self, *, interrupted: bool) -> None:
        if not self.started:  # the message was never stored: nothing of a turn to write
            return
        if interrupted:
            self.recorder.interrupted()
        self._passage_ids()
        self.recorder.write({"type": "clock", "readings": self.readings})
        self.recorder.memory(core_memory(self.agent))  # may note an edit read here: this turn
        self.recorder.turn_events = None


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
    retry: bool = False  # sent with /retry (replayed with Agent.retry)
    passage_ids: list[int] = field(default_factory=list)  # the ids its new passages got
    message_ids: list[int] = field(default_factory=list)  # and its new messages
    outside_edits: list[dict[str, Any]] = field(default_factory=list)  # shared_block lines
    agent: str | None = None  # set when another agent than the header's took the turn
    attachments: list[dict[str, Any]] = field(default_factory=list)  # files sent with it
    compact: bool = False  # /compact (replayed with Agent.compact)
    cut: bool = False  # the recording ends inside this turn (see `ends_early`)

    @property
    def ends_early(self) -> bool:
        """The live turn stopped after its last recorded event: closed (Ctrl-C), or cut by
        the end of the recording (a kill, a full disk), which the next start undid."""
        return self.interrupted or self.cut

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
    billed: Usage | None = None  # what a call that failed after its stream began was billed


@dataclass
class Recording:
    path: Path
    header: dict[str, Any]
    turns: list[RecordedTurn]
    trailing_commands: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a last line cut short

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        path = Path(path)
        header, turns, restart, commands, warnings = None, [], False, [], []
        for number, line in _read_lines(path, warnings):
            kind = line["type"]
            if kind == "header":
                header = header or line
            elif kind == "user":
                turns.append(RecordedTurn(len(turns), line["text"], line.get("at") or "",
                                          float(line.get("t") or 0), restart_before=restart,
                                          commands_before=commands,
                                          retry=bool(line.get("retry")),
                                          agent=line.get("agent"),
                                          attachments=list(line.get("attachments") or []),
                                          compact=bool(line.get("compact"))))
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
            elif kind == "passage_ids":
                turns[-1].passage_ids = list(line["ids"])
            elif kind == "message_ids":
                turns[-1].message_ids = list(line["ids"])
            elif kind == "shared_block":
                turns[-1].outside_edits.append(line)
            else:
                turns[-1].events.append(line)
        if header is None:
            raise RecordingError(f"{path} has no header line; it is not a memgpt-lite recording")
        if turns and turns[-1].memory is None:  # every turn that ends has a memory line
            turns[-1].cut = True
            warnings.append(f"the recording ends inside turn {len(turns)} (the session ended "
                            "abruptly); it is replayed up to its last recorded event")
        return cls(path, header, turns, commands, warnings)

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
                    elif line["type"] == "usage":  # before its error: billed, then failed
                        calls[-1].billed = Usage.from_dict(line["usage"])
                    elif line["type"] in ("error", PROMPT_TOO_LONG):
                        calls[-1].error = line
        return calls

    @property
    def source(self) -> str:
        return str(self.header.get("source") or "live")

    def base_path(self) -> Path | None:
        """The base snapshot this recording's replay starts from (None: no base); a
        RecordingError when the header names one that is not there."""
        name = self.header.get("base")
        if not name:
            return None
        path = self.path.parent / str(name)
        if not path.is_file():
            raise RecordingError(f"{self.path} starts from the agent snapshot {path}, which is "
                                 "missing; it cannot be replayed without it.")
        return path


def _awaits(call: RecordedCall) -> bool:
    return call.response is None and call.error is None


def _read_lines(path: Path, warnings: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The recording's lines, each checked (see recording_schema). A last line cut short by
    a crash ends the recording there, with a warning; any other bad line is refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"no recording at {path}") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    # utf-8-sig: a recording saved by an editor on Windows starts with a byte-order mark.
    lines = raw.decode("utf-8-sig", "replace").splitlines()
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except RecursionError:
            raise RecordingError(f"{path}: line {number} is nested too deeply to read") from None
        except ValueError:  # not JSON, or a number of thousands of digits
            if number == len(lines) and not raw.endswith(b"\n"):
                warnings.append(f"line {number} was cut short (the session ended abruptly); "
                                f"replaying up to line {number - 1}")
                return
            raise RecordingError(f"{path}: line {number} is not valid JSON") from None
        problem = line_problem(line, RECORDING_VERSION)
        if problem:
            raise RecordingError(f"{path}: line {number} cannot be used: {problem}")
        yield number, line


@dataclass
class RecordingInfo:
    agent: str  # the agent's name when the session was recorded
    path: Path
    started: str
    turns: int
    source: str
    agent_uid: str | None = None
    problem: str | None = None  # why it cannot be replayed (None: it can)
    scrubbed: bool = False  # a forget changed it (see recording_scrub.py)
    conversation: int | None = None  # the agent's conversation it is of (None: before them)


def list_recordings(agent: Any = None, directory: Path | None = None) -> list[RecordingInfo]:
    """Every recording under the data dir, or only those of `agent` (an AgentRow), oldest
    first. A damaged one is listed with its problem rather than left out."""
    paths = recording_files(directory or recordings_dir())
    if agent is not None:
        paths = [p for p in paths if belongs_to(p, agent)]
    out = [_info(path) for path in paths]
    return sorted(out, key=_oldest_first)


def recording_files(root: Path) -> list[Path]:
    """The recordings under `root`, sorted: regular files only, so a folder, a FIFO or a
    device named *.jsonl is passed over instead of read (a FIFO would block the command)."""
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file()) if root.is_dir() else []


def _oldest_first(info: RecordingInfo) -> tuple[str, str, str, int]:
    # Recordings started in the same second are named STAMP, STAMP-2, STAMP-3 … in the
    # order they began (`new_recording_path`); as text "-2.jsonl" sorts before ".jsonl"
    # and "-10" before "-2", so the counter is compared as a number.
    stamp, _, n = info.path.stem.partition("-")
    return info.started, str(info.path.parent), stamp, int(n) if n.isdecimal() else 1


def _info(path: Path) -> RecordingInfo:
    try:
        rec = Recording.load(path)
    except RecordingError as exc:
        head = header_line(path)
        return RecordingInfo(str(head.get("agent") or path.parent.name), path,
                             str(head.get("created_at") or ""), 0, "?",
                             head.get("agent_uid"), str(exc))
    return RecordingInfo(rec.header.get("agent", path.parent.name), path,
                         rec.header.get("created_at", ""), len(rec.turns), rec.source,
                         rec.header.get("agent_uid"), scrubbed=bool(rec.header.get("forgotten")),
                         conversation=rec.header.get("conversation"))


def session_ids(rows: list[RecordingInfo]) -> list[str]:
    """The short id `sessions` shows for each recording and `replay ID` accepts: its file's
    name without .jsonl (the time it started), with its folder's first 6 characters in front
    when another folder holds a recording of that name."""
    stems = [r.path.stem for r in rows]
    return [f"{r.path.parent.name[:6]}/{r.path.stem}" if stems.count(r.path.stem) > 1
            else r.path.stem for r in rows]


def find_recording(ref: str | Path, directory: Path | None = None) -> Path:
    """The recording a user names: a file, or a session id from `session_ids`.
    RecordingError (one sentence) when none or several match."""
    path = Path(ref).expanduser()
    if path.is_file() or path.suffix == ".jsonl" or "/" in str(ref) and path.exists():
        return path
    root = directory or recordings_dir()
    folder, _, stem = str(ref).rpartition("/")
    found = [p for p in (sorted(root.glob(f"*/{stem}.jsonl")) if root.is_dir() else [])
             if p.parent.name.startswith(folder)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise RecordingError(f"no recording {str(ref)!r}: give a file, or an id that "
                             "`memgpt-lite sessions` shows")
    ids = ", ".join(f"{p.parent.name[:6]}/{p.stem}" for p in found)
    raise RecordingError(f"{str(ref)!r} names several recordings ({ids}); give one of those")


def header_line(path: Path) -> dict[str, Any]:
    """The first line of a recording, decoded ({} when it is not a JSON object)."""
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as fh:
            head = json.loads(fh.readline() or "{}")
    except (OSError, ValueError):
        return {}
    return head if isinstance(head, dict) else {}


def belongs_to(path: Path, agent: Any) -> bool:
    """Whether a recording is of `agent` (an AgentRow): it is in the agent's folder, or its
    header names the agent's uid, or (recordings from before uids) the agent's name."""
    if agent.uid and path.parent.name == agent.uid:
        return True
    head = header_line(path)
    uid = head.get("agent_uid")
    return uid == agent.uid if uid else head.get("agent") == agent.name

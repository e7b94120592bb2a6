"""Strict replay: a recording's user inputs fed through a fresh agent (temporary data dir,
same settings) whose model client serves the recorded responses in order and checks each
request's digest against the recorded one. This module never prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from memgpt_lite.engine import errors, prompts
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.dense import RecordedDense
from memgpt_lite.engine.errors import PromptTooLongError
from memgpt_lite.engine.events import Event, TextDelta, ThinkingDelta
from memgpt_lite.engine.recording import (
    PROMPT_TOO_LONG,
    UNCOUNTED_KINDS,
    UNRECORDED_KINDS,
    RecordedCall,
    RecordedTurn,
    Recording,
    RecordingError,
    core_memory,
)
from memgpt_lite.engine.records import ModelRequest, ModelResponse, parse_iso, utc_iso
from memgpt_lite.engine.store import StoreError, snapshot, transfer
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import shorten

# Events that do not count among a turn's recorded events (see recording.UNCOUNTED_KINDS).
_NOT_COUNTED = UNRECORDED_KINDS | UNCOUNTED_KINDS

# What a recorded error line (error_kind) raises again in replay.
_ERROR_CLASSES: dict[str, type[errors.ModelError]] = {
    cls.kind: cls for cls in (errors.ModelError, errors.AuthError, errors.RateLimitError,
                              errors.OverloadedError, errors.APIConnectionError, errors.StreamError,
                              errors.BadRequestError, errors.PromptTooLongError)
}


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
        # Prompt files of the recording this version does not have: why a request differs.
        self.foreign_prompts = (prompts.foreign(calls.header.get("prompt_digests"))
                                if isinstance(calls, Recording) else [])
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
                                    f"!= recorded {call.digest}{self._why()}")
        if purpose and purpose != call.purpose:
            self.diverge("purpose", f"a {purpose} call where the recording has a {call.purpose} call")
        if call.response is None:
            error = _rebuild_error(call.error or _NEVER_FINISHED)
            error.billed = call.billed
            raise error
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

    def _why(self) -> str:
        if not self.foreign_prompts:
            return ""
        return (f" (it was recorded with prompt files this memgpt-lite does not have: "
                f"{', '.join(self.foreign_prompts)}; a recording made by an older version "
                f"before its prompts were kept for replay cannot match)")

    @property
    def cannot_match(self) -> bool:
        """No request can match: the recording's system prompt, in every request, is not
        one this version has."""
        return "system.md" in self.foreign_prompts

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


class RecordedAnswers:
    """The user's recorded answers about memory writes (confirm_memory), given in order, so
    the replayed agent applies and declines what the live one did. A write the recording
    holds no answer for is a divergence."""

    _SAID = {"yes": True, "no": False, "unavailable": None}

    def __init__(self, lines: list[dict[str, Any]], turn: int):
        self.lines, self.turn = list(lines), turn

    def __call__(self, change: Any) -> bool | None:
        if not self.lines:
            raise Divergence(DivergenceInfo(self.turn, "memory_confirm", f"a {change.tool} "
                                            "write asked for the user's approval, which the "
                                            "recording does not hold"))
        line = self.lines.pop(0)
        if (line["tool"], line["target"]) != (change.tool, change.target):
            raise Divergence(DivergenceInfo(
                self.turn, "memory_confirm", f"a {change.tool} write of {change.target!r} "
                f"asked for approval where the recording has {line['tool']} of "
                f"{line['target']!r}"))
        return self._SAID.get(str(line["answer"]))


# --------------------------------------------------------------------------- replay


class ReplayObserver(Protocol):
    """What a live view of a replay gets told (reports.py renders it)."""

    def user(self, turn: RecordedTurn) -> None: ...
    def event(self, event: Event, recorded_t: float | None) -> None: ...
    def divergence(self, info: DivergenceInfo) -> None: ...


@dataclass
class ScrubbedNote:
    """A recording a forget scrubbed (its header's `forgotten`, see recording_scrub.py) and
    where replay stopped comparing because of it."""

    turns: list[int]  # user inputs (1-based) whose recorded text a forget changed
    start: bool  # what the replay starts from was changed
    at: str  # when (the last such forget)
    turn: int | None = None  # where replay met a difference the forget explains
    detail: str = ""  # that difference

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> ScrubbedNote | None:
        mark = header.get("forgotten")
        if not isinstance(mark, dict) or not (mark.get("start") or mark.get("turns")):
            return None
        return cls(sorted(mark.get("turns") or []), bool(mark.get("start")),
                   str(mark.get("at") or ""))

    @property
    def first(self) -> int:
        """The first turn whose replay a forget could have changed."""
        return 1 if self.start else min(self.turns)

    def what(self) -> str:
        parts = ["the history it starts from"] if self.start else []
        if self.turns:
            parts.append(f"turn{'s' if len(self.turns) > 1 else ''} "
                         f"{', '.join(map(str, self.turns))}")
        when = f" on {self.at}" if self.at else ""
        return f"a forget{when} scrubbed {' and '.join(parts)}"

    def __str__(self) -> str:
        if self.turn is None:
            return f"{self.what()}; the replay still matched"
        before = (f"; turns 1–{self.turn - 1} matched" if self.turn > 2 else
                  "; turn 1 matched" if self.turn == 2 else "")
        return (f"{self.what()}, so from turn {self.turn} on the replay cannot match the "
                f"recording ({self.detail}){before}")


class _Scrubbed(Exception):
    """Replay met a difference a forget explains: it stops comparing (see ScrubbedNote)."""


@dataclass
class ReplayReport:
    path: Path
    header: dict[str, Any]
    strict: bool
    recorded_turns: int = 0
    tally: Tally = field(default_factory=Tally)  # what the replayed agent did
    final_core_memory: dict[str, str] = field(default_factory=dict)
    block_limits: dict[str, int] = field(default_factory=dict)
    divergences: list[DivergenceInfo] = field(default_factory=list)
    completed: bool = False
    scrubbed: ScrubbedNote | None = None  # the recording was scrubbed by a forget

    @property
    def stopped_at_scrub(self) -> bool:
        return self.scrubbed is not None and self.scrubbed.turn is not None

    @property
    def ok(self) -> bool:
        """No divergence: every turn matched, or every turn before a forget's scrub did."""
        return (self.completed or self.stopped_at_scrub) and not self.divergences


class ReplayClock:
    """The replay agent's clock: serves one turn's recorded readings in order, then keeps
    returning the last one; a turn without readings is fixed at its user input's `at`."""

    def __init__(self) -> None:
        self.pending: list[datetime] = []
        self.now = datetime(2000, 1, 1, tzinfo=timezone.utc)

    def begin(self, at: str, readings: list[str] | None = None) -> None:
        # A user line's `at` may be null or absent (the format allows it): with no reading
        # either, the clock stays where it was.
        self.pending = [parse_iso(r) for r in (readings or ([at] if at else []))]
        self.now = self.pending[0] if self.pending else self.now

    def __call__(self) -> datetime:
        if self.pending:
            self.now = self.pending.pop(0)
        return self.now


def replayed_as(header: dict[str, Any]) -> tuple[int, int, int]:
    """The model contract, search layout and token counting rule a recording's agent
    replays under (chat and eval alike): those it names, else 1 for each, as recordings
    made before contracts, search layouts and counting rules were named used (prompts.py,
    recall_page.py, tokens.py)."""
    return (int(header.get("contract", 1)), int(header.get("search_layout") or 1),
            int(header.get("token_rule", 1)))


def replay(path: str | Path, *, strict: bool = False,
           observer: ReplayObserver | None = None) -> ReplayReport:
    """Replay a recording through a fresh agent in a temporary data dir.

    Compares request digests, tool results, replies and core memory after each turn; strict
    mode stops at the first divergence. The report says what the replayed agent did."""
    recording = Recording.load(path)
    if any(turn.agent for turn in recording.turns):
        raise RecordingError(f"{recording.path} holds the turns of several agents (a "
                             "multi-agent eval); re-score it with `memgpt-lite eval SCENARIO "
                             "--replay FILE` instead.")
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-replay-") as tmp:
        return _Replayer(recording, strict, observer, Path(tmp)).run()


class _Replayer:
    def __init__(self, recording: Recording, strict: bool, observer: ReplayObserver | None,
                 tmp: Path):
        self.recording, self.strict, self.observer = recording, strict, observer
        self.client = ReplayModelClient(recording, strict=strict)
        self.clock = ReplayClock()
        self.store = _starting_store(recording, tmp / "replay.db", self.clock)
        self.report = ReplayReport(recording.path, recording.header, strict,
                                   recorded_turns=len(recording.turns),
                                   scrubbed=ScrubbedNote.from_header(recording.header))
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
        except _Scrubbed:
            pass
        except Divergence as exc:
            with contextlib.suppress(_Scrubbed):
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
        settings = Settings.from_dict(header.get("settings"), room=False)
        name = header.get("agent") or "default"
        if first and self.recording.turns:
            self.clock.begin(self.recording.turns[0].at)
        if first and header.get("snapshot"):  # a version 1 recording: the whole agent
            transfer.import_agent(self.store, header["snapshot"], name)
        contract, layout, rule = replayed_as(header)
        agent = Agent.open(self.store, name, model_client=self.client,
                           summary_client=self.client.for_purpose("summary"),
                           settings=settings, clock=self.clock,
                           conversation=header.get("conversation"),
                           project=header.get("project"), contract=contract)
        agent.set_search_layout(layout)
        agent.counter.use_rule(rule)
        if first and not (header.get("snapshot") or header.get("delta")):
            self._restore_blocks(agent, header.get("blocks") or {})
        return agent

    def _commands(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            args = line.get("args") or {}
            if line.get("name") == "edit_block":
                self.agent.edit_block(args["label"], args["value"])
            elif line.get("name") == "pop_turns":  # only in recordings of older versions
                self._pop_queue_tail(int(args.get("n", 1)))
            elif line.get("name") == "shared_block":
                self.store.apply_outside_edit(self.agent.id, args["label"], args["value"])
            else:
                raise RecordingError(f"unknown command {line.get('name')!r} in recording")

    def _pop_queue_tail(self, n: int) -> None:
        """/pop as the versions that recorded it did: the last n turns of the queue (a /pop
        now ends the recording, and takes the last n turns, evicted or not)."""
        queue = sorted({m.turn_id for m in self.store.context_messages(self.agent.id)})
        self.agent._pop(queue[-n:] if n > 0 else [])

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
        # Hybrid searches fuse the live session's dense candidates: no embedder, no vectors.
        self.agent.tools.dense = RecordedDense(turn.lines("dense_search"), turn.lines("notice"))
        self.agent.confirm = RecordedAnswers(turn.lines("memory_confirm"), turn.index + 1)
        self.store.planned_passage_ids = list(turn.passage_ids)
        self.store.planned_message_ids = list(turn.message_ids)
        events = self._drive(turn)
        self._compare(turn, events)

    def _drive(self, turn: RecordedTurn) -> list[Event]:
        recorded = [line for line in turn.events if line["type"] not in UNCOUNTED_KINDS]
        # A turn the live session closed (Ctrl-C) or that the recording cuts off (a kill) is
        # closed at the same point: the replay never asks for a call that got no answer.
        limit = len(recorded) if turn.ends_early else None
        seen: list[Event] = []
        edits = list(turn.outside_edits)
        self._outside_edits(edits, 0)
        gen = (self.agent.retry() if turn.retry else self.agent.compact(turn.text)
               if turn.compact else self.agent.step(turn.text,
                                                    attachments=turn.attachments or None))
        try:
            for event in gen:
                if event.kind not in _NOT_COUNTED:
                    seen.append(event)
                    self._outside_edits(edits, len(seen))
                self.report.tally.add(event)
                if self.observer:
                    at = recorded[len(seen) - 1].get("t") if 0 < len(seen) <= len(recorded) else None
                    self.observer.event(event, at)
                self._check_client()
                if limit is not None and len(seen) >= limit:
                    break
        except Divergence as exc:  # raised by the replay client through the agent
            self._note(exc.info)
            if self.strict:
                raise
        finally:
            gen.close()
        self._check_client()
        return seen

    def _outside_edits(self, edits: list[dict[str, Any]], after: int) -> None:
        """Apply the other agents' edits the live agent read after `after` events of this
        turn, before the agent goes on (see recording.py, shared_block lines)."""
        while edits and int(edits[0].get("after", 0)) <= after:
            line = edits.pop(0)
            self.store.apply_outside_edit(self.agent.id, line["label"], line["value"])

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
        scrubbed = self.report.scrubbed
        # A forget explains a difference only where the recording could match at all.
        if scrubbed is not None and info.turn >= scrubbed.first and not self.client.cannot_match:
            scrubbed.turn, scrubbed.detail = info.turn, f"{info.what}: {info.detail}"
            raise _Scrubbed(str(scrubbed))
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
        if left and not turn.ends_early:
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
                                       f"{_preview(want[1])!r}, replayed {_preview(got[1])!r}")
        if len(recorded) != len(actual):
            return "tool_result", f"{len(actual)} tool results where {len(recorded)} were recorded"
        return None

    def _compare_reply(self, turn: RecordedTurn, events: list[Event]) -> tuple[str, str] | None:
        ends = [e for e in events if e.kind == "turn_end"]
        got = ends[-1].text if ends else None  # type: ignore[union-attr]
        if turn.reply is not None and got is not None and got != turn.reply:
            return "reply", f"reply {_preview(got)!r} != recorded {_preview(turn.reply)!r}"
        return None

    def _compare_memory(self, turn: RecordedTurn) -> tuple[str, str] | None:
        if turn.memory is None:
            return None
        actual = core_memory(self.agent)
        for label in sorted(set(turn.memory) | set(actual)):
            if turn.memory.get(label) != actual.get(label):
                return "memory", (f"core block {label!r} is {_preview(actual.get(label))!r}, "
                                  f"recorded {_preview(turn.memory.get(label))!r}")
        return None


def _starting_store(recording: Recording, path: Path, clock: ReplayClock) -> Any:
    """The store a replay starts from: the agent as the live session found it (its base
    snapshot plus the header's delta), or an empty one for a new agent."""
    def open_store(target: Path) -> Any:
        return _replay_store(target, clock)

    delta = recording.header.get("delta")
    if not delta:
        return open_store(path)
    base = recording.base_path()
    try:
        return snapshot.materialise(base, delta, path, open_store)
    except (KeyError, TypeError, ValueError, AttributeError, sqlite3.Error, StoreError) as exc:
        raise RecordingError(f"{recording.path}: line 1 cannot be used: the agent snapshot "
                             f"in its header is damaged ({exc})") from None


def _replay_store(path: Path, clock: ReplayClock) -> Any:
    """A Store whose passages are stamped by the replay clock, not the wall clock (archival
    search shows passage dates, and a replay on another day must still match), and get the
    ids the live ones got."""
    # heavy modules load only when replaying; a replay always runs on SQLite (snapshot.py)
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore

    class ReplayStore(SQLiteStore):
        planned_passage_ids: list[int]  # the ids the live turn's passages got (per turn)

        def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                        created_at: str | None = None, **kwargs: Any) -> int:
            return super().add_passage(agent_id, text, tags, created_at or utc_iso(clock.now),
                                       **kwargs)

        def _insert_messages(self, agent_id: int, msgs: list[Any]) -> None:
            # Message ids are global to a live SQLite data dir too, and the dense side's
            # recorded candidates name them: the messages get the ids the recording says.
            planned = getattr(self, "planned_message_ids", None) or []
            first = planned[0] if len(planned) >= len(msgs) else None
            if first is None or planned[:len(msgs)] != list(range(first, first + len(msgs))):
                return super()._insert_messages(agent_id, msgs)
            del planned[:len(msgs)]
            self.db.next_id = lambda table, agent: first  # type: ignore[method-assign]
            try:
                super()._insert_messages(agent_id, msgs)
            finally:
                del self.db.next_id

        def _new_passage_id(self, agent_id: int) -> int:
            # Passage ids are global to the live data dir: other agents' passages, which a
            # replay does not have, decide them; the recording says which they were.
            planned = getattr(self, "planned_passage_ids", None)
            if planned:
                return planned.pop(0)
            return super()._new_passage_id(agent_id)

    return ReplayStore(path)


def _preview(text: str | None) -> str | None:
    return None if text is None else shorten(text, 80)


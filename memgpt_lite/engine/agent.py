"""The agent loop: one user input in, events out, one atomic turn persisted.

`Agent.step(text)` stores the user's text in recall first (so nothing the user typed is ever
lost), then calls the model until it ends its turn, executing every tool call in between.
The turn's messages enter the FIFO queue only when the turn completes, in one transaction.
A turn that does not complete (Ctrl-C, an API failure, any exception, a crash) leaves
nothing behind: every memory edit, passage, eviction, fold and summary change it made is
undone (the store journals them, see store/turns.py), and its user message stays in
recall, marked interrupted, for `Agent.retry()`. The agent is watched, never patched: a
recorder consumes the events a turn yields and hears of each clock reading (`observed`).
Which conversation (task) and project an agent works in is agent_tasks.py's.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from memgpt_lite.engine import locking, prompts
from memgpt_lite.engine.attachments import context_content, is_attachment
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.context import BuiltContext, ContextBuilder, ContextInputs
from memgpt_lite.engine.context_report import ContextReport, context_report
from memgpt_lite.engine.errors import ModelError, PromptTooLongError
from memgpt_lite.engine.events import (
    PASSED_ON,
    ErrorEvent,
    Event,
    ModelCallStart,
    NoticeEvent,
    PromptTooLongEvent,
    ResponseEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
    UsageEvent,
    UserEvent,
)
from memgpt_lite.engine.agent_tasks import AgentTasks
from memgpt_lite.engine.memory import (
    MEMORY_TOOL_NAMES,
    MemoryTools,
    ToolOutcome,
    default_blocks,
    render_core_memory,
)
from memgpt_lite.engine.model import ModelClient
from memgpt_lite.engine.paging import Pager
from memgpt_lite.engine.prompts import CONTRACT, system_prompt
from memgpt_lite.engine.records import (
    Block,
    ContentBlock,
    Message,
    ModelRequest,
    ModelResponse,
    PoppedTurns,
    ToolCall,
    ToolResult,
    Usage,
    canonical_json,
    tool_calls_in,
    utc_iso,
)
from memgpt_lite.engine.redact import redact_blocks, redact_message
from memgpt_lite.engine.replies import sendable, stop_notices, valid_content
from memgpt_lite.engine.store.base import AgentLockLike, AgentRow, Store
from memgpt_lite.engine.summariser import Summariser
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import clean_text, clean_value
from memgpt_lite.engine.tokens import TokenCounter, cost_usd
from memgpt_lite.engine.turn_clock import ClockObserver, TurnClock, local_now, told_time
from memgpt_lite.engine.window import learn_window, tool_schemas, window_for

BLOCK_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,49}")
LABEL_RULE = "letters, digits, _ . - up to 50, starting with a letter or digit"
REPEAT_LIMIT = 3  # identical tool calls in a row before the chain is stopped
NOTHING_TO_COMPACT = "There is nothing to compact: the context queue is empty."


class TurnFailed(Exception):
    """Internal: the turn cannot go on (API error); everything it did is undone."""


class Agent(AgentTasks):
    """One named agent over a Store. Not thread-safe; one step at a time. Its model clients
    and clock are fixed when it is built. Secrets in the user's text are redacted once, by
    `step`, before it is stored; every consumer sees that text (the turn's `UserEvent`)."""

    def __init__(self, store: Store, row: AgentRow, settings: Settings, model_client: ModelClient,
                 summary_client: ModelClient | None, clock: Callable[[], datetime], created: bool,
                 contract: int = CONTRACT):
        self.store, self.row = store, row
        self.contract = contract  # what the model is shown (an older one in a replay)
        self.settings = settings = replace(settings)  # its own copy: a learned window changes it
        self.configured_window = settings.context_window  # before any provider's lesson
        self.use_model(settings.model)
        self.id, self.name, self.created = row.id, row.name, created
        self.model_client, self.clock = model_client, clock
        self._turn_clock: TurnClock | None = None  # while a turn runs
        self._observers: list[ClockObserver] = []
        self.counter = TokenCounter.from_state(row.state.get("counter"))
        self.tools = MemoryTools(store, row.id, clock=lambda: utc_iso(self.now()),
                                 contract=contract)
        self.tools.gate.on = settings.confirm_memory
        self.builder = ContextBuilder(settings, tool_schemas(contract=contract), self.counter,
                                      system_prompt(contract))
        summariser = Summariser(summary_client or model_client, settings, self.counter)
        self.pager = Pager(settings, store, row.id, self.counter, self.builder, summariser)
        self.pager.restore(self.store.conversation_state(self.id).get("pager"))
        self.redact_secrets = True  # user text and model output, before they are stored
        # The kind of secret the last message left open (a key's BEGIN without its END): the
        # next messages may be the rest of it, piped line by line (redact.redact_message).
        self.in_key: str | bool | None = False
        self.lock: AgentLockLike | None = None
        self.project: str | None = None  # the project root whose blocks it sees (use_project)
        # Called with a turn's id once it is committed (background embedding): return at once.
        self.after_commit: list[Callable[[int], None]] = []

    @classmethod
    def open(cls, store: Store, name: str = "default", *, model_client: ModelClient,
             summary_client: ModelClient | None = None, settings: Settings | None = None,
             clock: Callable[[], datetime] | None = None, create: bool = True,
             lock_wait: float | None = locking.DEFAULT_WAIT,
             stored: dict | None = None, conversation: int | None = None,
             new_conversation: bool = False, project: str | None = None,
             contract: int = CONTRACT) -> Agent:
        """Open agent `name`, creating it (with the default core memory) on first use.
        `settings`: the ones it runs with, stored unless `stored` says what to store (the
        chat stores only the agent's own, see config.stored_form). Works in its most recent
        conversation, `conversation` (StoreError if none has that id) or a new one; sees the
        blocks of `project` (a root, see engine/project.py). Holds the agent's process lock
        (waiting up to `lock_wait` s, then AgentBusyError; None: no lock) until `close()`."""
        agent_lock = store.agent_lock(name)
        if lock_wait is not None:
            agent_lock.acquire(lock_wait)
        try:
            agent = cls._open(store, name, model_client, summary_client, settings, clock, create,
                              contract, stored)
            agent.use_project(project)
            if new_conversation:
                agent.start_conversation()
            elif conversation is not None:
                agent.resume_conversation(conversation)
        except BaseException:
            agent_lock.release()
            raise
        agent.lock = agent_lock
        weakref.finalize(agent, agent_lock.release)
        return agent

    @classmethod
    def _open(cls, store: Store, name: str, model_client: ModelClient,
              summary_client: ModelClient | None, settings: Settings | None,
              clock: Callable[[], datetime] | None, create: bool, contract: int,
              stored: dict | None = None) -> Agent:
        row = store.get_agent(name)
        created = row is None
        if row is None:
            if not create:
                raise LookupError(f"no agent named {name!r}")
            s = settings or Settings()
            row, created = store.create_agent_once(
                name, s.to_dict() if stored is None else stored, default_blocks(s.block_limit))
        # Read what every turn reads before writing anything: a damaged page there is found
        # (and the store stops writing, see store/sqlite.py) before this process changes the
        # file. Then undo a turn a dead process left open.
        store.context_messages(row.id)
        for turn in store.unfinished_turns(row.id):
            store.undo_turn(row.id, turn)
        keep = stored if stored is not None else settings and settings.to_dict()
        if keep and keep != row.settings:
            store.update_settings(row.id, keep)
            row.settings = keep
        effective = settings or Settings.from_dict(row.settings, room=False)
        return cls(store, row, effective, model_client, summary_client, clock or local_now, created,
                   contract)

    def close(self) -> None:
        """Release the agent's process lock (the store stays open; it is the caller's)."""
        if self.lock is not None:
            self.lock.release()

    def now(self) -> datetime:
        """The time the agent stamps things with: during a turn, a reading of its turn's
        clock (observers are told of it)."""
        return self._turn_clock() if self._turn_clock is not None else self.clock()

    @contextlib.contextmanager
    def observed(self, observer: ClockObserver) -> Iterator[None]:
        """Tell `observer` of every clock reading a turn uses while the block runs."""
        self._observers.append(observer)
        try:
            yield
        finally:
            self._observers.remove(observer)

    @contextlib.contextmanager
    def _turn_time(self) -> Iterator[TurnClock]:
        self._turn_clock = TurnClock(self.clock, self._observers)
        try:
            yield self._turn_clock
        finally:
            self._turn_clock = None

    # ------------------------------------------------------------------ the loop
    def step(self, text: str, *, attachments: list[ContentBlock] | None = None
             ) -> Iterator[Event]:
        """Run one turn. Yields events and always ends with a TurnEndEvent. Closing the
        generator early abandons the turn: everything it did is undone, and the text stays
        in recall (marked interrupted). `attachments`: content blocks of files sent with
        the text (see attachments.py), stored before it in the same message."""
        text = clean_text(text)
        if not text.strip():
            raise ValueError("a turn needs a non-empty message")  # the API rejects empty text
        if self.redact_secrets:  # the one place: the store, requests and views get this text
            text, self.in_key = redact_message(text, self.in_key)
        with self._turn_time() as clock:
            self._recover()
            turn_id = self.store.max_turn_id(self.id) + 1
            content = [*map(self._attached, attachments or []), {"type": "text", "text": text}]
            user = Message("user", content, turn_id, created_at=utc_iso(self.now()),
                           in_context=False)
            yield from self._turn(user, clock.start)

    def compact(self, instructions: str = "") -> Iterator[Event]:
        """/compact: make room now. One turn in which the model gets the memory-pressure
        alert whatever the pressure (the paging controller's alert, on demand) and chooses
        what to save and evict; when it evicts nothing, the oldest turns are flushed and
        summarised. The turn itself stays in recall but leaves the queue once committed, and
        `retry` sends it again as a /compact. LookupError when the queue is empty."""
        with self._turn_time() as clock:
            self._recover()
            if not self.store.context_messages(self.id):
                raise LookupError(NOTHING_TO_COMPACT)
            asked = clean_text(instructions).strip()
            text = prompts.compact_request(asked)
            turn_id = self.store.max_turn_id(self.id) + 1
            user = Message("user", [{"type": "text", "text": text}], turn_id,
                           created_at=utc_iso(self.now()), in_context=False)
            yield from self._turn(user, clock.start, compact=asked)

    def _attached(self, block: ContentBlock) -> ContentBlock:
        """An attachment's block as stored: cleaned, its secrets redacted like the user's own
        words (a file is as likely to hold a key)."""
        block = clean_value(block)
        if block.get("type") != "text" or not self.redact_secrets:
            return block
        return {**block, "text": redact_message(str(block.get("text", "")), False)[0]}

    def retry(self) -> Iterator[Event]:
        """Send the last user message again, keeping one copy of it in recall: the message
        of a turn that did not complete is reused as it is stored; a completed turn is popped
        first (its memory edits reverted, see `pop_turns`) and its text sent as a new turn.
        LookupError when there is no message yet."""
        with self._turn_time() as clock:
            self._recover()
            last = self.store.max_turn_id(self.id, in_conversation=True)
            messages = self.store.turn_messages(self.id, last)
            user = next((m for m in messages if m.role == "user"), None)
            if user is None:
                raise LookupError("There is no message to retry yet.")
            replacing = None
            if len(messages) > 1 or user.status != "interrupted":  # the turn completed
                # It is undone as the new turn begins; its id is free again then.
                replacing = [last]
                user = Message("user", user.content, last, created_at=utc_iso(self.now()),
                               in_context=False)
            asked = prompts.compact_asked(_text_of(user))  # a /compact is sent again as one
            if asked is not None and not self.store.context_messages(self.id):
                raise LookupError(NOTHING_TO_COMPACT)
            yield from self._turn(user, clock.start, replacing, retry=True, compact=asked)

    def _recover(self) -> None:
        """Undo a turn this store left open (its undo could not be written, e.g. disk full)."""
        for turn in self.store.unfinished_turns(self.id):
            self.store.undo_turn(self.id, turn)

    def _turn(self, user: Message, at: datetime, replacing: list[int] | None = None, *,
              retry: bool = False, compact: str | None = None) -> Iterator[Event]:
        """One turn of `user`'s message. `compact`: a /compact turn (its instructions, ""
        for none); the turn's UserEvent then carries the instructions, not the request."""
        popped = self.store.begin_turn(self.id, user, replacing)  # in recall before any call
        # Attached files are whole in recall, cut to size in the context (made again from
        # the stored message, so a retry or a replay sends the same bytes).
        user.context_content = context_content(user.content)
        run = _TurnRun(user.turn_id, [user])
        alerts = self.pager.state()
        try:
            self.pager.on_demand = compact is not None  # its alert, whatever the pressure
            files = [b for b in user.content if is_attachment(b)]
            said = _text_of(user) if compact is None else compact
            yield UserEvent(said, utc_iso(at), user.turn_id, retry, files, compact is not None)
            if popped.memory_lines():
                yield NoticeEvent(f"Turn {user.turn_id} was undone before sending it again: "
                                  + "; ".join(popped.memory_lines()) + ".")
            yield from self._tallied(run)
            if compact is not None and not run.tally.model_evictions:
                yield from self._tallied(run, self.pager.compact(self._context_inputs([])))
            self._commit(run)
            if compact is not None:  # the request to compact is not worth its room
                self.store.set_in_context(self.id, [run.turn_id], False)
            run.completed = True
            for hook in self.after_commit:
                hook(run.turn_id)
        except TurnFailed:
            pass
        finally:
            self.pager.on_demand = False
            if not run.completed:
                self.store.undo_turn(self.id, run.turn_id)
                self.pager.restore(alerts)
            self._save_state()
        # Every paid call of the turn, the summariser's included (see Tally.paid_*).
        yield TurnEndEvent(run.turn_id, run.text, run.stop_reason, run.tally.paid_usage,
                           run.tally.paid_cost_usd, run.completed)

    def _tallied(self, run: _TurnRun, inner: Iterator[Event] | None = None) -> Iterator[Event]:
        inner = self._run(run) if inner is None else inner
        try:
            for event in inner:
                run.tally.add(event)
                yield event
        finally:
            inner.close()  # on Ctrl-C: close the model's stream now, not when collected

    def calibrate(self, request: ModelRequest, tokens: int) -> None:
        """Learn from a request the API counted outside a turn, as from a turn's usage."""
        self.counter.observe(request, tokens)
        self._save_state()  # before a recording's header: its replay starts from this

    def _save_state(self) -> None:
        """Keep what this turn taught the counter (the agent's) and the pager (the
        conversation's) across restarts."""
        state = {**self.row.state, "counter": self.counter.to_state()}
        state.pop("pager", None)  # the conversation's now (kept there since migration 008)
        if self.provider_window is not None:
            state["provider_window"] = {"model": self.settings.model,
                                        "tokens": self.provider_window}
        before = self.store.conversation_state(self.id)
        pager = {**before, "pager": self.pager.state()}
        with self.store.transaction():
            if state != self.row.state:
                self.store.set_state(self.id, state)
                self.row.state = state
            if pager != before:
                self.store.set_conversation_state(self.id, pager)
            self.store.touch(self.id)

    def _run(self, run: _TurnRun) -> Iterator[Event]:
        retried = 0  # the call retried after an overflow: each call once (a tool's result is new)
        while True:
            run.calls += 1
            inputs = self._inputs(run)
            built = yield from self.pager.prepare(inputs, run.turn_id)
            response = yield from self._call(run, built)
            if response is None:  # provider overflow: make room once, then try again
                if retried == run.calls:  # the pager says what does not fit
                    yield from self._fail(self.pager.no_room(inputs), "overflow", False)
                retried = run.calls
                yield from self._learn_window(run.provider_max)
                yield from self.pager.on_overflow(inputs, built.request, run.overflow)
                self._save_state()  # what it learned, kept should the process die in the retry
                run.calls -= 1
                continue
            if not (yield from self._handle(run, response)):
                return

    def _inputs(self, run: _TurnRun) -> ContextInputs:
        return self._context_inputs(run.messages, tools_enabled=not self._tools_off(run))

    def _context_inputs(self, current: list[Message], tools_enabled: bool = True) -> ContextInputs:
        summary = self.store.get_agent_by_id(self.id).summary  # type: ignore[union-attr]
        return ContextInputs(summary, self.store.context_messages(self.id), current,
                             render_core_memory(self.blocks()), tools_enabled=tools_enabled,
                             now=told_time(self._turn_clock, self.clock, self.contract))

    def set_search_layout(self, layout: int) -> None:
        """Search as a recording made with `layout` did (recall_page.py): its tool
        definitions and its pages, so a replay of it sends the recorded requests."""
        self.tools.layout = layout
        self.builder.tools = tool_schemas(layout, self.contract)

    def _visible(self, run: _TurnRun) -> tuple[list[int], list[int]]:
        """What a search should not spend the model's tokens on: the turn it is in (its
        stored messages), and the messages of the queue, which the model still sees."""
        current = [m.id for m in run.messages if m.id is not None]
        queued = [m.id for m in self.store.context_messages(self.id) if m.id is not None]
        return current, queued

    def _tools_off(self, run: _TurnRun) -> bool:
        """Tools are withheld on the per-turn limit's last call and after a stopped loop."""
        return run.calls >= self.settings.max_calls_per_turn or run.stop_tools

    def _call(self, run: _TurnRun, built: BuiltContext) -> Generator[Event, None, ModelResponse | None]:
        request = built.request
        yield ModelCallStart(run.calls, request.digest(), built.estimated_tokens, "chat",
                             request.model)
        response = None
        try:
            for item in self.model_client.stream(request):
                if isinstance(item, ModelResponse):
                    response = item
                elif isinstance(item, PASSED_ON):
                    yield item
        except PromptTooLongError as exc:
            run.overflow, run.provider_max = exc.actual, exc.maximum
            yield PromptTooLongEvent(exc.message, exc.actual, exc.maximum)
            return None
        except ModelError as exc:
            if exc.billed is not None:  # it failed after its input was billed: still paid for
                yield from self._account(built, exc.billed)
            yield from self._fail(exc.message, exc.kind, exc.retryable)
        if response is None:
            yield from self._fail("The model's stream ended without a response.", "stream", True)
        response = replace(response, content=sendable(response.content, request.messages))
        if self.redact_secrets:  # the model may echo a secret into text or a tool input
            response = replace(response, content=redact_blocks(response.content))
        yield ResponseEvent(response, "chat")
        yield from self._account(built, response.usage)
        if response.stop_reason == "model_context_window_exceeded":
            # The usage of the cut-off response tells the true size of the request.
            run.overflow = response.usage.total_input or None
            return None
        return response

    def _account(self, built: BuiltContext, usage: Usage) -> Iterator[Event]:
        if usage.total_input:
            self.counter.observe(built.request, usage.total_input)
        yield UsageEvent(usage, cost_usd(self.settings.model, usage),
                         usage.total_input or built.estimated_tokens, self.settings.budget)

    def _learn_window(self, maximum: int | None) -> Iterator[Event]:
        """The provider refused a prompt for being over `maximum` tokens, less than our
        context window: the window shrinks to it for this model (window.learn_window)."""
        notice = learn_window(self.settings, maximum)
        if notice is not None:
            self.provider_window = self.settings.context_window
            yield notice

    def use_model(self, model: str) -> None:
        """Work on `model` (/model switches for the rest of a session): a window a provider
        taught is the model's it was taught on, so the configured window comes back, within
        the one the provider taught `model` if that is the one stored."""
        self.settings.model, self.settings.context_window = model, self.configured_window
        self.provider_window = window_for(self.row.state.get("provider_window"), model)
        if self.provider_window is not None:
            self.settings.context_window = min(self.configured_window, self.provider_window)

    def _fail(self, message: str, kind: str, retryable: bool) -> Iterator[Event]:
        # One sentence of what broke; whoever shows it says what the user can do (the chat:
        # the message is kept and /retry resends it), so the advice is never given twice.
        yield ErrorEvent(message, kind, retryable)
        raise TurnFailed(message)

    def _handle(self, run: _TurnRun, response: ModelResponse) -> Generator[Event, None, bool]:
        """Take in one response; True when the loop must call the model again."""
        stop = response.stop_reason
        # On a call made with tools withheld, tool calls are not run: the turn must end.
        content = valid_content(response.content, "max_tokens" if self._tools_off(run) else stop)
        run.messages.append(Message("assistant", content, run.turn_id))
        run.stop_reason = stop
        run.text = response.text
        calls = tool_calls_in(content)
        if calls:
            yield from self._run_tools(run, calls)
            return True
        if stop == "pause_turn" and run.calls < self.settings.max_calls_per_turn:
            return True
        yield from stop_notices(stop, response)
        return False

    def _run_tools(self, run: _TurnRun, calls: list[ToolCall]) -> Iterator[Event]:
        results: list[ContentBlock] = []
        for call in calls:
            yield ToolCallEvent(call)
            outcome, events = self._dispatch(call, run)
            yield from events
            if outcome.edit is not None:
                yield outcome.edit
            result = ToolResult(call.id, outcome.text, outcome.is_error)
            yield ToolResultEvent(call, result, outcome.summary)
            results.append(result.to_block())
        if self._repeating(run, calls):
            run.stop_tools = True
            results.append({"type": "text", "text": "<system_alert>\nYou made the same tool call "
                            f"{REPEAT_LIMIT} times in a row. Tools are now off for this turn: "
                            "answer the user with what you have.\n</system_alert>"})
            yield NoticeEvent(f"Stopped a loop of {REPEAT_LIMIT} identical tool calls.", "warning")
        if run.calls + 1 >= self.settings.max_calls_per_turn and not run.stop_tools:
            run.stop_tools = True
            yield NoticeEvent(f"Tool calls stopped at the per-turn limit of "
                              f"{self.settings.max_calls_per_turn} model calls.", "warning")
        run.messages.append(Message("user", results, run.turn_id))

    def _dispatch(self, call: ToolCall, run: _TurnRun) -> tuple[ToolOutcome, list[Event]]:
        if call.name in MEMORY_TOOL_NAMES:
            self.tools.visible = lambda: self._visible(run)
            try:
                outcome = self.tools.execute(call.name, call.input)
            finally:
                self.tools.visible = None
            return outcome, outcome.events
        if call.name == "evict_turns":
            inputs = self._inputs(run)
            return self.pager.evict_tool(call.input, inputs, run.turn_id)
        names = ", ".join([*MEMORY_TOOL_NAMES, "evict_turns"])
        return ToolOutcome(f"Unknown tool {call.name!r}. Available tools: {names}.", True,
                           f"unknown tool {call.name}"), []

    @staticmethod
    def _repeating(run: _TurnRun, calls: list[ToolCall]) -> bool:
        key = canonical_json([[c.name, c.input] for c in calls])
        run.recent.append(key)
        tail = run.recent[-REPEAT_LIMIT:]
        return len(tail) == REPEAT_LIMIT and len(set(tail)) == 1

    def _commit(self, run: _TurnRun) -> None:
        """The whole turn enters the queue in one transaction."""
        user, rest = run.messages[0], run.messages[1:]
        now = utc_iso(self.now())
        for m in rest:
            m.created_at = m.created_at or now
        self.store.commit_turn(self.id, user, rest)

    # ------------------------------------------------------------------ inspection
    def blocks(self) -> list[Block]:
        return self.store.get_blocks(self.id)

    def context_report(self) -> ContextReport:
        """The next request's size, its ledger and the queue's turns (see context_report)."""
        inputs = self._context_inputs([])
        return context_report(self.builder.build(inputs), inputs, self.counter,
                              self.settings.budget)

    def pop_turns(self, n: int = 1) -> PoppedTurns:
        """Undo the last n turns (evicted or not: the queue's last n would skip a turn the
        model evicted and delete an older one), in one transaction: they leave the queue and
        recall, and their memory edits are reverted where nothing changed them since (see
        `Store.pop_turns`). Returns what was undone (falsy when there was nothing)."""
        ids = self.store.last_turn_ids(self.id, n) if n > 0 else []
        return self._pop(ids)

    def _pop(self, ids: list[int]) -> PoppedTurns:
        return self.store.pop_turns(self.id, ids) if ids else PoppedTurns()

    def edit_block(self, label: str, value: str, *, expected: str | None = None,
                   source: str = "user") -> Block:
        """The user's own edit of a block (/core edit, /memory; `source` names the command
        in the block's history). With `expected` (the value the edit started from),
        BlockChanged when the block holds another value by now: another agent sharing it
        changed it meanwhile, and that edit must not be overwritten unseen."""
        block = self.store.get_block(self.id, label)
        if block is None:
            labels = ", ".join(b.label for b in self.blocks())
            raise ValueError(f"There is no core memory block {label!r} (blocks: {labels}).")
        if len(value) > block.limit:
            raise ValueError(f"{label} would be {len(value):,} chars, {len(value) - block.limit:,}"
                             f" over its limit of {block.limit:,}.")
        return self.store.set_block(self.id, label, value, source=source, expected=expected)

    def add_block(self, label: str, value: str, limit: int, *, source: str = "user") -> Block:
        """A new core memory block of the agent's own (ValueError when the label is taken
        or not a label, or the value is over `limit`)."""
        if not BLOCK_LABEL.fullmatch(label):
            raise ValueError(f"{label!r} is not a block label ({LABEL_RULE}).")
        if self.store.get_block(self.id, label) is not None:
            raise ValueError(f"There is a core memory block {label!r} already.")
        if len(value) > limit:
            raise ValueError(f"{label} would be {len(value):,} chars, {len(value) - limit:,} "
                             f"over its limit of {limit:,}.")
        return self.store.set_block(self.id, label, value, limit, source=source)


@dataclass
class _TurnRun:
    turn_id: int
    messages: list[Message]
    calls: int = 0
    text: str = ""
    stop_reason: str | None = None
    tally: Tally = field(default_factory=Tally)  # every event of the turn, for its cost
    completed: bool = False
    stop_tools: bool = False
    overflow: int | None = None
    provider_max: int | None = None  # the maximum a "prompt is too long" error named
    recent: list[str] = field(default_factory=list)


def _text_of(message: Message) -> str:
    """The user's own words in a message (not the files attached to them)."""
    return "".join(b.get("text", "") for b in message.content
                   if b.get("type") == "text" and not is_attachment(b))

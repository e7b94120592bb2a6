"""The terminal chat: `ChatSession` (turns, recordings, the dispatch of slash commands) and
the input loops (typed, piped, one-shot).

What each slash command does is in slash.py; opening the store, the agent and the model
client for `memgpt-lite chat` is in chat_main.py. Rendering is elsewhere: live turns in
view.py, slash-command results in render.py; what the user types (prompt, editor,
confirmations) in user_input.py. The agent never prints; the terminal package is the only
place that talks to the terminal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

from memgpt_lite.engine.locking import AgentBusyError
from memgpt_lite.engine.reconnect import connection_lost, reconnect
from memgpt_lite.engine.store.base import StoreBusy, StoreError
from memgpt_lite.engine.tally import Tally
from memgpt_lite.terminal import render
from memgpt_lite.terminal.exit_codes import ENDING_SIGNALS, EXIT_INTERRUPTED
from memgpt_lite.terminal.user_input import LineReader, edit_in_editor
from memgpt_lite.terminal.view import ChatView, JsonView


class ChatSession:
    """One interactive (or piped) conversation with an agent: turns and slash commands.

    `recorder_factory()` makes the session's Recorder at the first turn (None: no recording);
    `confirm(question) -> bool` asks the user (None: not possible, e.g. piped input);
    `edit(text) -> str | None` opens an editor on text (None: cancelled; EditorError: the
    editor could not be run); `hide_typing()` is a context manager held while the model
    answers (on a terminal: what is typed ahead is kept for the prompt, not echoed)."""

    def __init__(self, agent: Any, console: Console, view: ChatView | JsonView, *,
                 recorder_factory: Callable[[], Any] | None = None,
                 confirm: Callable[[str], bool] | None = None,
                 edit: Callable[[str], str | None] | None = None,
                 hide_typing: Callable[[], Any] | None = None):
        self.agent = agent
        self.console = console
        self.view = view
        self.recorder: Any = None
        self.tally = Tally()  # this session's events, for /tokens, /cost and the goodbye line
        self.failed_turns = 0  # turns that ended with an error (the exit status says so)
        self.unresolved = False  # the last turn failed and no /retry has fixed it yet
        self.interrupted_turns = 0  # turns cancelled by Ctrl-C
        self.hide_typing = hide_typing or contextlib.nullcontext
        self.recorder_factory = recorder_factory
        # Runs once, before the first turn (chat_main: the API's count of a new agent's
        # first request, asked while the user typed).
        self.before_first_turn: Callable[[], None] | None = None
        self.reader: LineReader | None = None
        self.confirm = confirm
        self.edit = edit or edit_in_editor
        self.pending: list[Any] = []  # files /add attached to the next message
        self.flags: dict[str, tuple[Any, str]] = {}  # settings this run's flags gave
        self.memory_draft: str | None = None  # a /memory document not saved yet
        self.model_source: str | None = None  # /model changed the model: how
        self.changed = False  # a command changed the agent (it is kept even without turns)
        self.message_stored = False  # the turn running has stored its message (in recall)

    # ---------------------------------------------------------------- input

    def handle_line(self, line: str) -> bool:
        """Run one input (a message or a /command). False means: leave the chat."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/") and not text.startswith("//"):
            return self.run_command(text)
        self.run_turn(text[1:] if text.startswith("//") else line.strip("\n"))
        return True

    def run_command(self, text: str) -> bool:
        from memgpt_lite.terminal import slash

        # Any whitespace ends the name: a pasted command may have a newline or a tab there.
        name, *more = text[1:].split(maxsplit=1) or [""]
        rest = more[0] if more else ""
        command = slash.find(name.lower())
        if command is None:
            self.console.print(render.shown(f"unknown command /{name} — type /help"))
            return True
        try:
            return command.run(self, rest.strip()) is not False
        except StoreBusy as exc:  # another process is writing: the chat waits for the user
            self._tell(f"error: {exc} /{name.lower()} may not have finished; type it again.",
                       "bold red")
            return True
        except StoreError as exc:
            if not connection_lost(exc):
                raise
            # Not run again: it may have asked something, or been applied just before the
            # connection went (a /pop twice would pop two turns).
            if self._reconnected(f"/{name.lower()} may not have finished"):
                self._tell(f"· the database connection was lost and is open again: "
                           f"/{name.lower()} may not have finished; type it again", "dim")
            return True

    def run_turn(self, text: str, *, retry: bool = False, compact: bool = False) -> None:
        """One turn: a message (with the files /add attached), a /retry, or a /compact
        (`text` then being its instructions)."""
        attachments = [] if compact else [item.block() for item in self.pending]
        if not compact:
            self.pending = []
        self.message_stored = False
        try:
            self._run_turn(text, retry, attachments, compact)
        except StoreBusy as exc:
            self._busy(exc)
        except StoreError as exc:
            if not connection_lost(exc):
                raise
            self._turn_again(text, retry, attachments, compact)

    def _turn_again(self, text: str, retry: bool, attachments: list[Any],
                    compact: bool) -> None:
        """The database went away during the turn (a server restart): one new connection,
        and the message sent once more. A message the cut-off turn had stored is sent again
        as a retry (the new connection first undoes that turn), so it is stored once."""
        stored = self.message_stored
        if not self._reconnected(self._kept(stored), turn=True):
            return
        if stored and compact:  # its request is not a message to send again
            self._tell("· the database connection was lost and is open again: the /compact "
                       "did not finish; type it again", "dim")
            return
        self._tell("· the database connection was lost and is open again; sending your "
                   "message again", "dim")
        self.message_stored = False
        if not retry:  # a retry of this message fixes no earlier failed turn
            self.unresolved = False
        try:
            self._run_turn(text, retry or stored, [] if stored else attachments, compact)
        except StoreError as again:
            if not connection_lost(again):
                raise
            self._unreachable(again, self._kept(stored or self.message_stored), turn=True)

    def _kept(self, stored: bool) -> str:
        """Where the message of a turn the database's absence cut off is (never lost)."""
        if stored:  # in recall, marked interrupted once the database is back
            return ("your message is kept: /retry sends it" if self.reader is not None
                    else "your message is kept in recall, unanswered")
        return ("your message was not sent: ↑ brings it back" if self.reader is not None
                else "your message was not sent")

    def _reconnected(self, kept: str, *, turn: bool = False) -> bool:
        """A new connection for the agent (AgentBusyError when another process took it
        meanwhile: the chat ends as a second chat on it would); False, said in one line,
        while the server cannot be reached: the next input tries again."""
        try:
            reconnect(self.agent)
        except AgentBusyError:
            raise
        except StoreError as still:
            self._unreachable(still, kept, turn=turn)
            return False
        return True

    def _unreachable(self, exc: StoreError, kept: str, *, turn: bool) -> None:
        if turn:  # the exit status says a message went unanswered
            self.failed_turns += 1
            self.unresolved = True
        self._tell(f"error: {exc} {kept[0].upper()}{kept[1:]}; the chat tries the database "
                   "again at your next input.", "bold red")

    def _busy(self, exc: StoreBusy) -> None:
        """Another process kept the database's write lock past the wait: the turn failed,
        the chat goes on. A turn it cut off after storing the message stays open until the
        next turn undoes it (Agent._recover), so /retry sends that message once."""
        self.failed_turns += 1
        self.unresolved = True
        kept = self._kept(self.message_stored)
        self._tell(f"error: {exc} {kept[0].upper()}{kept[1:]}.", "bold red")

    def _tell(self, line: str, style: str) -> None:
        """A line about the chat itself, where the turn's notices and errors go (stderr when
        stdout is not the terminal; an info object with --json)."""
        console = getattr(self.view, "meta_console", None)
        if console is None:
            self.view.meta(line.removeprefix("· "), style)
        else:
            console.print(render.shown(line, style), highlight=False)

    def _run_turn(self, text: str, retry: bool, attachments: list[Any], compact: bool) -> None:
        with self.hide_typing():
            self.view.start_turn()
            steps = self._steps(text, retry, attachments, compact)
            try:
                for event in steps:
                    self._count(event, retry)
                    self.view.handle(event)
            except KeyboardInterrupt:
                with ctrl_c_ignored():
                    steps.close()  # the agent abandons the turn: nothing of it stays queued
                    self.interrupted_turns += 1
                    self.view.interrupted()
            finally:
                # Also on any other way out (a closed stdout pipe): the turn ends now, while
                # the store is open, not whenever the generator is collected.
                with ctrl_c_ignored():
                    try:
                        steps.close()
                    finally:  # its undo may fail too (the database went away)
                        self.view.stop()

    def _count(self, event: Any, retry: bool) -> None:
        self.tally.add(event)
        if event.kind == "user":
            self.message_stored = True
        if event.kind == "turn_end":
            failed = not event.completed
            # A /retry of a failed turn sends the same message again: its outcome replaces
            # that failure (answered: fixed; failed again: still one failure, not two), so
            # the chat's exit status counts only what is still failed at the end.
            if retry and self.unresolved:
                self.failed_turns -= 1
            self.failed_turns += failed
            self.unresolved = failed

    def _steps(self, text: str, retry: bool = False, attachments: list[Any] | None = None,
               compact: bool = False) -> Iterator[Any]:
        from memgpt_lite.engine.recording import RecordingUnavailable, recorded_step

        if self.before_first_turn is not None:  # before anything is sent or recorded
            self.before_first_turn()
            self.before_first_turn = None
        problem = self._recording_problem()
        if self.recorder is None and self.recorder_factory is not None:
            try:
                self.recorder = self.recorder_factory()  # no file for a session without turns
            except RecordingUnavailable as exc:  # the turn goes on; recording stops for good
                self.recorder_factory, problem = None, str(exc)
        if self.recorder is None:
            more = {"attachments": attachments} if attachments else {}
            steps = (self.agent.retry() if retry else self.agent.compact(text) if compact
                     else self.agent.step(text, **more))
        else:
            steps = recorded_step(self.agent, self.recorder, text, retry=retry,
                                  attachments=attachments or None, compact=compact)
        return steps if problem is None else _noticed(steps, problem)

    def _recording_problem(self) -> str | None:
        """A recording that failed (a full disk mid-session) is dropped, and no new one is
        started; its failure is passed on once if the turn that hit it could not say so."""
        if self.recorder is None or not self.recorder.failed:
            return None
        recorder, self.recorder, self.recorder_factory = self.recorder, None, None
        recorder.close()
        return None if recorder.announced else recorder.failed

    def close(self) -> None:
        self.view.close()
        self.end_recording(changed=False)

    def goodbye(self) -> str | None:
        """The line that ends a chat that had turns: turns, tokens, cost, cache hits."""
        t = self.tally
        if not t.turns:
            return None
        u = t.paid_usage
        failed = f" ({self.failed_turns} failed)" if self.failed_turns else ""
        return (f"session: {t.turns} turn{'s' if t.turns != 1 else ''}{failed} · "
                f"{u.total_input:,} input tokens ({render.cache_hit(u):.0%} from cache) · "
                f"{u.output_tokens:,} output tokens · "
                f"{render.cost_text(t.paid_cost_usd, t.unpriced)}")

    def end_recording(self, *, changed: bool = True) -> None:
        """Close the current recording. Called after a command changes the agent outside a
        turn (/pop, /retry, /core edit, /memory, /forget, /model): the next turn starts a new
        recording whose header snapshots the changed state, so every recording still
        replays exactly."""
        self.changed = self.changed or changed
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None

    def say(self, text: str, style: str = "") -> None:
        """One line of a command's answer: shown as text (never markup)."""
        self.console.print(render.shown(text, style), highlight=False)


@contextlib.contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """Ctrl-C does nothing while a cancelled turn is undone and its live region stopped:
    people press it twice, and the second press would cut the undo short (the interrupted
    line never shown) or leave the spinner drawing over the prompt. Only the main thread
    can change the handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM and SIGHUP wait until the undo is done (ended_by_signals raises them as
    # Terminated, which would cut it short just the same), then arrive.
    signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING_SIGNALS)




# --------------------------------------------------------------------------- input loops


def interactive_loop(session: ChatSession, read: Callable[[], str]) -> int:
    """Prompt until /exit, Ctrl-D, or Ctrl-C twice in a row at the prompt."""
    armed = False
    # What answers the prompt goes where the prompt is (stderr when stdout is redirected).
    prompt_side = getattr(getattr(session.view, "meta_console", None), "print", None) \
        if getattr(session.reader, "prompt_to_stderr", False) else None
    say = prompt_side or session.console.print
    while True:
        try:
            line = read()
        except EOFError:
            say()
            return 0
        except KeyboardInterrupt:
            if armed:
                say()
                return 0
            armed = True
            say("\n(press Ctrl-C again or Ctrl-D to leave)", style="dim")
            continue
        armed = False
        try:
            if not session.handle_line(line):
                return 0
        except KeyboardInterrupt:  # e.g. during /core edit or a long /forget
            session.view.stop()
            session.console.print("\n(cancelled)", style="dim")


def piped_loop(session: ChatSession, lines: Iterator[str]) -> int:
    """Every input line is one message (slash commands still work); at end of input, 0 when
    every turn succeeded, 1 when any failed. Ctrl-C cancels the turn running and ends the
    chat (130): with input from a file or a pipe there is no prompt to come back to, and
    it means stop, as for any command; the lines left are where they came from."""
    for line in lines:
        if not session.handle_line(line.rstrip("\n")):
            break
        if session.interrupted_turns:
            return EXIT_INTERRUPTED
    return 1 if session.failed_turns else 0


def one_shot(session: ChatSession, text: str) -> int:
    """`chat -p TEXT`: one message, its reply, and the exit status of that turn (130 when
    Ctrl-C cancelled it, as for any command interrupted)."""
    session.run_turn(text)
    if session.interrupted_turns:
        return EXIT_INTERRUPTED
    return 1 if session.failed_turns or not session.tally.completed_turns else 0


def _noticed(steps: Iterator[Any], problem: str) -> Iterator[Any]:
    """The turn's events with one notice about the recording, once the agent has stored the
    user's message (it does so before its first event)."""
    from memgpt_lite.engine.events import NoticeEvent

    try:
        first = next(steps, None)
        yield NoticeEvent(problem, "warning")
        if first is not None:
            yield first
        yield from steps
    finally:
        steps.close()

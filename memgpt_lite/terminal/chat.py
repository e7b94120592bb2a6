"""The terminal chat: renders agent events with rich, runs slash commands, reads input.

`ChatView` turns the events of `Agent.step()` into output. On a terminal the reply streams
in a live region (a spinner until the first token) and settles as rendered Markdown; when
output is not live (tests, a captured console) the reply is printed as Markdown once it is
complete; in plain mode (stdin piped) text is written as it arrives and nothing is styled.
Every memory operation, alert, eviction and notice is one line starting with "· ".

`ChatSession` owns the conversation loop and the slash commands; `run_chat` wires a real
store, agent, model client, recorder and terminal together. The agent never prints; this
module (with cli.py) is the only place that talks to the terminal.
"""

from __future__ import annotations

import os
import select
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from memgpt_lite.engine import config
from memgpt_lite.engine.events import (
    ClipEvent,
    ErrorEvent,
    EvictionEvent,
    FoldEvent,
    ModelCallStart,
    NoticeEvent,
    PressureAlertEvent,
    ResponseEvent,
    SummaryEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
    UsageEvent,
)
from memgpt_lite.engine.privacy import (
    HISTORY_FILE,
    ForgetMatches,
    apply_forget,
    find_forget_matches,
    history_entry_matches,
    turn_strings,
)
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.redact import redact
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import shorten
from memgpt_lite.engine.turns import turn_ranges

PROMPT = "you› "
CONTINUATION_PROMPT = "  … "
# Lines that reach the terminal this soon after the previous one were pasted, not typed.
PASTE_GAP_SECONDS = 0.03

HELP = """\
Commands
  /help                 this list
  /core                 core memory blocks: label, used/limit chars, value
  /core edit LABEL      edit a block in $EDITOR (the limit is checked; history is kept)
  /search QUERY         search recall (every message ever sent), ranked like the model's tool
  /archival [QUERY]     search archival memory, or list the newest passages
  /context              token ledger per section, the queue's turns, the summary
  /tokens               this session's token usage and cost
  /pop [N]              undo the last N turns (default 1): removed from the queue and recall
  /retry                send your last message again (replacing its answer, if any)
  /agents               all agents in this data dir
  /forget QUERY         show matching messages and passages, then delete them on confirmation
  /exit                 leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)

Input
  Enter sends. End a line with \\ to continue on the next line; a multi-line paste
  arrives as one message. Ctrl-C while the model answers cancels that turn (your
  message stays in recall; /retry sends it again). Up/down browse history. To send a
  message that starts with /, type // (//etc/hosts sends /etc/hosts)."""


# --------------------------------------------------------------------------- formatting


def make_console(file: Any = None, *, plain: bool | None = None, width: int | None = None
                 ) -> Console:
    """A console for the chat and the CLI. Plain (no colour, no wrapping of reply text)
    when output is not a terminal."""
    stream = file if file is not None else sys.stdout
    if plain is None:
        plain = not _isatty(stream)
    if plain:
        return Console(file=stream, color_system=None, no_color=True, highlight=False,
                       emoji=False, soft_wrap=True, width=width or 100)
    return Console(file=stream, highlight=False, width=width)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def bar(fraction: float, width: int = 10) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "▰" * filled + "▱" * (width - filled)


def cache_hit(usage: Usage) -> float:
    total = usage.total_input
    return usage.cache_read_input_tokens / total if total else 0.0


def status_line(usage: Usage, cost: float, context_tokens: int, budget: int, *,
                with_bar: bool) -> str:
    parts = []
    if context_tokens and budget:
        fraction = context_tokens / budget
        meter = f" {bar(fraction)}" if with_bar else ""
        parts.append(f"context {context_tokens:,}/{budget:,} tokens ({fraction:.0%}){meter}")
    if usage.total_input:
        parts.append(f"cache {cache_hit(usage):.0%}")
    parts.append(f"turn ${cost:.4f}")
    return " · ".join(parts)


def describe_event(event: Any) -> tuple[str, str] | None:
    """One compact line (and a style) for an event that is not reply text, or None."""
    # The tool's summary already says what changed (old → new for replacements), so
    # MemoryEditEvent adds no line of its own.
    if isinstance(event, ToolResultEvent):
        style = "red" if event.result.is_error else "cyan"
        return (event.summary or event.call.name), style
    if isinstance(event, PressureAlertEvent):
        return (f"memory pressure: {event.used_tokens:,}/{event.budget:,} tokens "
                f"({event.percent:.0f}%) — the model was asked to save and evict"), "yellow"
    if isinstance(event, FoldEvent):
        n = len(event.message_ids)
        return (f"folded {n} old tool result{'s' if n != 1 else ''} · "
                f"{event.tokens_freed:,} tokens (full text stays in recall)"), "yellow"
    if isinstance(event, EvictionEvent):
        return _eviction_line(event), "yellow"
    if isinstance(event, SummaryEvent):
        return f"summary updated ({event.method}) · {len(event.summary):,} chars", "yellow"
    if isinstance(event, ClipEvent):
        return (f"clipped {event.what}: {event.original_chars:,} → {event.kept_chars:,} chars "
                f"(full text stays in recall)"), "yellow"
    if isinstance(event, NoticeEvent):
        return event.message, ("yellow" if event.level == "warning" else "dim")
    if isinstance(event, ErrorEvent):  # the agent's message already says how to retry
        return f"error: {event.message}", "bold red"
    return None


def _eviction_line(event: EvictionEvent) -> str:
    n = len(event.turn_ids)
    who = {"model": "", "flush": " (forced: context nearly full)",
           "overflow": " (forced: the provider said the prompt was too long)"}.get(event.by, "")
    line = (f"evicted turn{'s' if n != 1 else ''} {turn_ranges(event.turn_ids)} · "
            f"{event.tokens_freed:,} tokens{who}")
    if event.used_tokens and event.budget:
        line += f" · now {event.used_tokens:,}/{event.budget:,}"
    return line


# --------------------------------------------------------------------------- event view


class _Tail:
    """Renders Markdown but only its last lines that fit the screen, so a long reply
    streams without scrolling artefacts; the full text is printed when it settles."""

    def __init__(self, view: ChatView):
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(Markdown(self.view.buffer), options, pad=False)
        keep = max(1, options.max_height - 2)
        for line in lines[-keep:]:
            yield from line
            yield Segment.line()


class ChatView:
    """Renders the events of one turn. `live`: spinner and streaming region (terminal
    only); `markdown`: settle replies as Markdown (else plain text written as it comes)."""

    def __init__(self, console: Console, *, live: bool, markdown: bool):
        self.console = console
        self.live = live and console.is_terminal
        self.markdown = markdown
        self.buffer = ""
        self._live: Live | None = None
        self._live_kind = ""
        self._spinner_label = ""
        self.context_tokens = 0
        self.budget = 0

    # ---------------------------------------------------------------- lifecycle

    def start_turn(self) -> None:
        self.buffer, self.context_tokens = "", 0
        self._spinner("thinking…")

    def handle(self, event: Any) -> None:
        if isinstance(event, TextDelta):
            self._text(event.text)
        elif isinstance(event, ThinkingDelta):
            self._spinner("thinking…")
        elif isinstance(event, ModelCallStart):
            self.settle()
            self._spinner("summarising evicted turns…" if event.purpose == "summary"
                          else "thinking…")
        elif isinstance(event, (ResponseEvent, ToolCallEvent)):
            self.settle()
        elif isinstance(event, UsageEvent):
            self.context_tokens, self.budget = event.context_tokens, event.budget
        elif isinstance(event, TurnEndEvent):
            self.end_turn(event)
        else:
            line = describe_event(event)
            if line is not None:
                self.settle()
                self.meta(*line)

    def end_turn(self, event: TurnEndEvent) -> None:
        self.settle()
        self.stop()
        if event.completed or event.usage.total_input:
            self.meta(status_line(event.usage, event.cost_usd, self.context_tokens, self.budget,
                                  with_bar=not self.plain), "dim")

    def interrupted(self) -> None:
        self.settle()
        self.stop()
        self.meta("interrupted — the turn was cancelled; your message stays in recall "
                  "(/retry sends it again)", "yellow")

    @property
    def plain(self) -> bool:
        return not self.markdown

    # ---------------------------------------------------------------- output

    def meta(self, line: str, style: str = "dim") -> None:
        self.stop()
        if self.plain:
            self.console.print(f"· {line}", markup=False, highlight=False)
        else:
            self.console.print(Text(f"· {line}", style=style))

    def _text(self, text: str) -> None:
        if not text:
            return
        self.buffer += text
        if self.plain:
            self.stop()
            self.console.file.write(text)
            self.console.file.flush()
        elif self.live and self._live_kind != "text":
            self._start_live(_Tail(self), "text")

    def settle(self) -> None:
        """The current response's text is complete: leave it on screen for good."""
        if self.plain:
            # The text is already on screen (written as it came); end its line.
            if self.buffer and not self.buffer.endswith("\n"):
                self.console.file.write("\n")
        else:
            if self._live_kind == "text":
                self.stop()
            if self.buffer.strip():
                self.console.print(Markdown(self.buffer))
        self.buffer = ""

    def _spinner(self, label: str) -> None:
        if not self.live or self._live_kind == "text":
            return
        if self._live_kind == "spinner" and self._live is not None:
            if label != self._spinner_label:  # a new Spinner would restart its animation
                self._live.update(Spinner("dots", Text(label, style="dim")))
                self._spinner_label = label
            return
        self._start_live(Spinner("dots", Text(label, style="dim")), "spinner")
        self._spinner_label = label

    def _start_live(self, renderable: Any, kind: str) -> None:
        self.stop()
        self._live = Live(renderable, console=self.console, transient=True,
                          refresh_per_second=12, redirect_stdout=False, redirect_stderr=False)
        self._live.start()
        self._live_kind = kind

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
        self._live, self._live_kind = None, ""


# --------------------------------------------------------------------------- tables


def print_core(console: Console, blocks: list[Any]) -> None:
    """Every block: label, used/limit chars, value."""
    if not blocks:
        console.print("(no core memory blocks)")
        return
    for i, block in enumerate(blocks):
        if i:
            console.print()
        console.print(Text(f"{block.label}  {block.used:,}/{block.limit:,} chars", style="bold"))
        console.print(Text(block.value or "(empty)"), soft_wrap=False)


def print_agents(console: Console, store: Any) -> None:
    rows = store.list_agents()
    if not rows:
        console.print("No agents yet; `memgpt-lite chat` creates one.")
        return
    table = Table("name", "model", "turns", "messages", "passages", "last used",
                  box=None, pad_edge=False)
    for row in rows:
        stats = store.agent_stats(row.id)
        table.add_row(row.name, row.model, f"{stats.get('turns', 0):,}",
                      f"{stats.get('messages', 0):,}", f"{stats.get('passages', 0):,}",
                      _when(stats.get("last_used_at") or row.last_used_at))
    console.print(table)


def print_agent(console: Console, store: Any, row: Any) -> None:
    stats = store.agent_stats(row.id)
    console.print(Text(f"agent {row.name}", style="bold"))
    console.print(f"model {row.model} · created {_when(row.created_at)} · last used "
                  f"{_when(stats.get('last_used_at') or row.last_used_at)}", markup=False)
    console.print(f"{stats.get('turns', 0):,} turns · {stats.get('messages', 0):,} messages · "
                  f"{stats.get('passages', 0):,} passages", markup=False)
    settings = ", ".join(f"{k}={v}" for k, v in sorted((row.settings or {}).items()))
    console.print(f"settings: {settings or '(defaults)'}", markup=False)
    console.print()
    print_core(console, store.get_blocks(row.id))
    console.print()
    console.print(Text("summary", style="bold"))
    console.print(Text(row.summary or "(none yet)"))


def _when(stamp: str | None) -> str:
    if not stamp:
        return "never"
    return stamp.replace("T", " ").rstrip("Z")[:16]


def print_search_page(console: Console, page: Any, what: str) -> None:
    if not page.total:
        console.print(f"no {what} found", markup=False)
        return
    console.print(f"page {page.page} of {page.pages}, {page.total} result"
                  f"{'s' if page.total != 1 else ''}", markup=False)
    for hit in page.hits:
        who = hit.role or ("[" + ", ".join(hit.tags) + "]" if hit.tags else "passage")
        turn = f" turn {hit.turn_id}" if hit.turn_id is not None else ""
        console.print(f"  #{hit.id}{turn} {_when(hit.created_at)} {who}: {shorten(hit.text, 160)}",
                      markup=False, highlight=False)


def print_context(console: Console, report: Any) -> None:
    used, budget = report.used_tokens, report.budget
    fraction = used / budget if budget else 0.0
    console.print(f"context {used:,}/{budget:,} tokens ({fraction:.0%}) {bar(fraction)}",
                  markup=False)
    table = Table("section", box=None, pad_edge=False)
    table.add_column("tokens", justify="right")
    for section, tokens in report.ledger.items():
        table.add_row(section, f"{tokens:,}")
    console.print(table)
    turns = list(report.turns)
    console.print(f"queue: {len(turns)} turn{'s' if len(turns) != 1 else ''}", markup=False)
    for info in turns:
        console.print(f"  turn {info.id} · {_when(info.created_at)} · {info.tokens:,} tokens · "
                      f"\"{shorten(info.first_words, 60)}\"", markup=False, highlight=False)
    console.print("summary: " + (report.summary or "(none yet)"), markup=False, highlight=False)


def print_tokens(console: Console, usage: Usage, cost: float) -> None:
    console.print(f"session: {usage.input_tokens:,} input · "
                  f"{usage.cache_creation_input_tokens:,} cache write · "
                  f"{usage.cache_read_input_tokens:,} cache read · "
                  f"{usage.output_tokens:,} output tokens", markup=False)
    console.print(f"cache hit {cache_hit(usage):.0%} of {usage.total_input:,} input tokens · "
                  f"cost ${cost:.4f}", markup=False)


# --------------------------------------------------------------------------- forget


def print_forget_matches(console: Console, matches: ForgetMatches, query: str) -> None:
    if matches.empty:
        console.print(f"Nothing matches {query!r}.", markup=False)
        return
    console.print(f"{len(matches.message_hits)} message(s) in turn(s) "
                  f"{turn_ranges(matches.turn_ids) or '-'} and "
                  f"{len(matches.passage_hits)} passage(s) match {query!r}:", markup=False)
    for hit in matches.message_hits:
        console.print(f"  message #{hit.id} turn {hit.turn_id} {hit.role}: "
                      f"{shorten(hit.text, 120)}", markup=False, highlight=False)
    for hit in matches.passage_hits:
        console.print(f"  passage #{hit.id}: {shorten(hit.text, 120)}", markup=False,
                      highlight=False)
    if matches.turn_ids:
        console.print("Whole turns are deleted (every message of them), so the queue stays "
                      "valid. Core memory is not changed (edit it with /core edit).",
                      markup=False)


# --------------------------------------------------------------------------- the session


class ChatSession:
    """One interactive (or piped) conversation with an agent: turns and slash commands.

    `recorder_factory()` makes the session's Recorder at the first turn (None: no recording);
    `confirm(question) -> bool` asks the user (None: not possible, e.g. piped input);
    `edit(text) -> str | None` opens an editor on text (None: cancelled; EditorError: the
    editor could not be run)."""

    def __init__(self, agent: Any, console: Console, view: ChatView, *,
                 recorder_factory: Callable[[], Any] | None = None,
                 confirm: Callable[[str], bool] | None = None,
                 edit: Callable[[str], str | None] | None = None):
        self.agent = agent
        self.console = console
        self.view = view
        self.recorder: Any = None
        self.tally = Tally()  # this session's events, for /tokens
        self.recorder_factory = recorder_factory
        self.reader: LineReader | None = None
        self.confirm = confirm
        self.edit = edit or edit_in_editor
        self.commands: dict[str, Callable[[str], bool | None]] = {
            "help": self.cmd_help, "core": self.cmd_core, "search": self.cmd_search,
            "archival": self.cmd_archival, "context": self.cmd_context,
            "tokens": self.cmd_tokens, "pop": self.cmd_pop, "retry": self.cmd_retry,
            "agents": self.cmd_agents, "forget": self.cmd_forget, "exit": self.cmd_exit,
            "quit": self.cmd_exit,
        }

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
        name, _, rest = text[1:].partition(" ")
        command = self.commands.get(name.lower())
        if command is None:
            self.console.print(f"unknown command /{name} — type /help", markup=False)
            return True
        return command(rest.strip()) is not False

    def run_turn(self, text: str) -> None:
        self.view.start_turn()
        steps = self._steps(text)
        try:
            for event in steps:
                self.tally.add(event)
                self.view.handle(event)
        except KeyboardInterrupt:
            steps.close()  # the agent abandons the turn: nothing of it stays in the queue
            self.view.interrupted()
        finally:
            self.view.stop()

    def _steps(self, text: str) -> Iterator[Any]:
        if self.recorder is None and self.recorder_factory is not None:
            self.recorder = self.recorder_factory()  # no file for a session without turns
        if self.recorder is None:
            return self.agent.step(text)
        from memgpt_lite.engine.recording import recorded_step

        return recorded_step(self.agent, self.recorder, text)

    def close(self) -> None:
        self.view.stop()
        self._end_recording()

    def _end_recording(self) -> None:
        """Close the current recording. Called after a command changes the agent outside a
        turn (/pop, /retry, /core edit, /forget): the next turn starts a new recording whose
        header snapshots the changed state, so every recording still replays exactly."""
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None

    # ---------------------------------------------------------------- commands

    def cmd_help(self, rest: str) -> None:
        self.console.print(HELP, markup=False, highlight=False)

    def cmd_core(self, rest: str) -> None:
        words = rest.split()
        if not words:
            print_core(self.console, self.agent.blocks())
        elif words[0] == "edit" and len(words) == 2:
            self._edit_block(words[1])
        else:
            self.console.print("usage: /core  or  /core edit LABEL", markup=False)

    def _edit_block(self, label: str) -> None:
        block = next((b for b in self.agent.blocks() if b.label == label), None)
        if block is None:
            labels = ", ".join(b.label for b in self.agent.blocks())
            self.console.print(f"no block {label!r} (blocks: {labels})", markup=False)
            return
        try:
            new = self.edit(block.value)
        except EditorError as exc:
            self.console.print(f"not edited: {exc}", markup=False)
            return
        if new is None or new.rstrip("\n") == block.value:
            self.console.print(f"{label}: unchanged", markup=False)
            return
        try:
            saved = self.agent.edit_block(label, new.rstrip("\n"))
        except ValueError as exc:
            self.console.print(f"not saved: {exc}", markup=False)
            return
        self._end_recording()
        self.console.print(f"{label}: saved · {saved.used:,}/{saved.limit:,} chars", markup=False)

    def cmd_search(self, rest: str) -> None:
        if not rest:
            self.console.print("usage: /search QUERY", markup=False)
            return
        page = self.agent.store.search_messages(self.agent.id, rest, page=1, per_page=10)
        print_search_page(self.console, page, "messages")

    def cmd_archival(self, rest: str) -> None:
        store, agent_id = self.agent.store, self.agent.id
        if rest:
            print_search_page(self.console, store.search_passages(agent_id, rest, page=1,
                                                                  per_page=10), "passages")
            return
        total = store.count_passages(agent_id)
        hits = store.list_passages(agent_id, limit=10)
        self.console.print(f"{total} passage{'s' if total != 1 else ''} in archival memory"
                           + (f"; the newest {len(hits)}:" if hits else ""), markup=False)
        for hit in hits:
            tags = f" [{', '.join(hit.tags)}]" if hit.tags else ""
            self.console.print(f"  #{hit.id} {_when(hit.created_at)}{tags}: "
                               f"{shorten(hit.text, 160)}", markup=False, highlight=False)

    def cmd_context(self, rest: str) -> None:
        print_context(self.console, self.agent.context_report())

    def cmd_tokens(self, rest: str) -> None:
        print_tokens(self.console, self.tally.usage, self.tally.cost_usd)

    def cmd_pop(self, rest: str) -> None:
        try:
            n = int(rest) if rest else 1
        except ValueError:
            n = 0
        if n < 1:
            self.console.print("usage: /pop [N] with N ≥ 1", markup=False)
            return
        queued = {t.id: t for t in self.agent.context_report().turns}
        removed = self.agent.pop_turns(n)
        if not removed:
            self.console.print("nothing to pop: there are no turns yet", markup=False)
            return
        self._end_recording()
        for turn_id in removed:
            info = queued.get(turn_id)
            words = f" \"{shorten(info.first_words, 50)}\"" if info is not None else ""
            size = f" ({info.tokens:,} tokens)" if info is not None else ""
            self.console.print(f"removed turn {turn_id}{words}{size} from the context queue "
                               f"and from recall", markup=False, highlight=False)

    def cmd_retry(self, rest: str) -> None:
        text = self.agent.last_user_text()
        if not text:
            self.console.print("nothing to retry yet", markup=False)
            return
        store, agent_id = self.agent.store, self.agent.id
        queued = {m.turn_id for m in store.context_messages(agent_id)}
        last = store.max_turn_id(agent_id)
        if last in queued:  # it was answered: replace that answer
            removed = self.agent.pop_turns(1)
            self._end_recording()
            self.console.print(f"retrying: removed turn {turn_ranges(removed)} from the queue "
                               f"and recall; sending your last message again", markup=False)
        else:
            self.console.print("retrying your last message", markup=False)
        self.run_turn(text)

    def cmd_agents(self, rest: str) -> None:
        print_agents(self.console, self.agent.store)

    def cmd_forget(self, rest: str) -> None:
        if not rest:
            self.console.print("usage: /forget QUERY", markup=False)
            return
        store = self.agent.store
        matches = find_forget_matches(store, self.agent.id, rest)
        print_forget_matches(self.console, matches, rest)
        if matches.empty:
            return
        if self.confirm is None:
            self.console.print("/forget needs a confirmation; run `memgpt-lite forget QUERY "
                               "--yes` instead", markup=False)
            return
        if not self.confirm("Delete these from the store, the search indexes and the "
                            "recordings?"):
            self.console.print("nothing deleted", markup=False)
            return
        row = store.get_agent_by_id(self.agent.id)
        self._end_recording()  # its file is rewritten by the scrub
        secrets = turn_strings(store, self.agent.id, matches.turn_ids)
        self.console.print(apply_forget(store, row, matches), markup=False)
        if self.reader is not None:  # else readline would write them back at exit
            self.reader.forget(rest, secrets)

    def cmd_exit(self, rest: str) -> bool:
        return False


class EditorError(Exception):
    """The editor could not be run; the message says which one and how to choose another."""


def edit_in_editor(text: str) -> str | None:
    """Open $VISUAL/$EDITOR (default vi) on a temporary file holding text; None when the
    editor exits non-zero (e.g. `:cq` in vi), which is how a user cancels an edit."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    fd, name = tempfile.mkstemp(prefix="memgpt-core-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            result = subprocess.run([*shlex.split(editor), name], check=False)
        except (OSError, ValueError) as exc:  # not found, not executable, unbalanced quotes
            reason = getattr(exc, "strerror", None) or exc
            raise EditorError(f"cannot run {editor!r} ({reason}); set $VISUAL or $EDITOR"
                              ) from None
        if result.returncode != 0:
            return None
        return Path(name).read_text(encoding="utf-8")
    finally:
        os.unlink(name)


# --------------------------------------------------------------------------- input


class LineReader:
    """Terminal input: readline editing and a history file, one message per call.

    A message may span lines: a line ending in a backslash continues, and lines that arrive
    within PASTE_GAP_SECONDS of each other (a paste) are joined; with a readline that
    supports bracketed paste, a paste is inserted whole."""

    def __init__(self, history_path: Path | None):
        import readline

        self.readline = readline
        self.history_path = history_path
        readline.parse_and_bind("set enable-bracketed-paste on")
        readline.set_history_length(2000)
        if history_path is not None and history_path.exists():
            try:
                readline.read_history_file(str(history_path))
            except OSError:
                pass  # an unreadable history only costs the up-arrow; never fail a chat over it

    def read(self) -> str:
        lines = [input(PROMPT)]
        while lines[-1].endswith("\\") or _pending_input(PASTE_GAP_SECONDS):
            if lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1]
            lines.append(input(CONTINUATION_PROMPT))
        self._redact_history(len(lines))
        return "\n".join(lines)

    def _redact_history(self, count: int) -> None:
        """The agent redacts secrets before storing a message; the history file must not
        keep them either (readline added each line as it was typed)."""
        rl = self.readline
        last = rl.get_current_history_length()
        for i in range(max(1, last - count + 1), last + 1):
            entry = rl.get_history_item(i)
            if entry and redact(entry) != entry:
                rl.replace_history_item(i - 1, redact(entry))  # get is 1-based, replace 0-based

    def forget(self, query: str, secrets: list[str]) -> None:
        """Drop matching entries from the in-memory history (see history_entry_matches)."""
        rl = self.readline
        for i in range(rl.get_current_history_length(), 0, -1):
            entry = rl.get_history_item(i)
            if entry is not None and history_entry_matches(entry, query, secrets):
                rl.remove_history_item(i - 1)  # get is 1-based, remove 0-based

    def save(self) -> None:
        if self.history_path is None:
            return
        try:
            self.history_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.readline.write_history_file(str(self.history_path))
            os.chmod(self.history_path, 0o600)
        except OSError:
            pass  # history is a convenience; never fail a chat over it


def _pending_input(timeout: float) -> bool:
    try:
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
    except (OSError, ValueError):
        return False
    return bool(ready)


def interactive_loop(session: ChatSession, read: Callable[[], str]) -> int:
    """Prompt until /exit, Ctrl-D, or Ctrl-C twice in a row at the prompt."""
    armed = False
    while True:
        try:
            line = read()
        except EOFError:
            session.console.print()
            return 0
        except KeyboardInterrupt:
            if armed:
                session.console.print()
                return 0
            armed = True
            session.console.print("\n(press Ctrl-C again or Ctrl-D to leave)", style="dim")
            continue
        armed = False
        try:
            if not session.handle_line(line):
                return 0
        except KeyboardInterrupt:  # e.g. during /core edit or a long /forget
            session.view.stop()
            session.console.print("\n(cancelled)", style="dim")


def piped_loop(session: ChatSession, lines: Iterator[str]) -> int:
    """Every input line is one message (slash commands still work); 0 at end of input."""
    for line in lines:
        if not session.handle_line(line.rstrip("\n")):
            break
    return 0


# --------------------------------------------------------------------------- wiring


def run_chat(*, agent_name: str = "default", model: str | None = None,
             context_window: str | None = None, max_tokens: str | None = None,
             thinking: bool | None = None, record: bool = True) -> int:
    """`memgpt-lite chat`: open or create the agent and talk to it on this terminal."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.store import Store
    from memgpt_lite.engine.tokens import price_table

    typed = sys.stdin.isatty()  # else piped: one message per line, no prompt
    styled = typed and sys.stdout.isatty()
    console = make_console(plain=not styled)
    # Piped runs keep stdout for the conversation alone; the banner goes to stderr.
    info = console if typed else make_console(sys.stderr, plain=True)
    price_table()  # a bad MEMGPT_LITE_PRICES file is reported now, not after a paid call
    client = AnthropicClient()  # raises AuthError saying how to set the key
    with Store.open_default() as store:
        settings = chat_settings(store, agent_name, model, context_window, thinking,
                                 max_tokens=max_tokens)
        agent = Agent.open(store, agent_name, model_client=client, summary_client=client,
                           settings=settings)
        session = ChatSession(agent, console, ChatView(console, live=styled, markdown=styled),
                              recorder_factory=(lambda: open_recorder(agent)) if record else None,
                              confirm=_ask if typed else None)
        _banner(info, agent, store, record)
        client.warm_up()
        try:
            return _converse(session, typed)
        finally:
            session.close()
            agent.close()  # releases the agent's process lock


def _converse(session: ChatSession, typed: bool) -> int:
    """Typed: the prompt with readline editing and history. Piped: one message a line."""
    if not typed:
        return piped_loop(session, iter(sys.stdin))
    reader = session.reader = LineReader(config.data_dir() / HISTORY_FILE)
    try:
        return interactive_loop(session, reader.read)
    finally:
        reader.save()


def chat_settings(store: Any, name: str, model: str | None, context_window: str | None,
                  thinking: bool | None, *, max_tokens: str | None = None) -> Any:
    """Stored settings of the agent (or defaults), then env vars, then flags."""
    row = store.get_agent(name)
    settings = config.Settings.from_dict(row.settings) if row is not None else config.Settings()
    settings = settings.with_env()
    if model:
        settings.model = model
    if context_window:
        settings.context_window = config.parse_positive_int(context_window, "--context-window")
    if max_tokens:
        settings.max_output_tokens = config.parse_positive_int(max_tokens, "--max-tokens")
    if thinking is not None:
        settings.thinking = thinking
    if settings.thinking and settings.max_output_tokens <= settings.thinking_budget:
        raise config.ConfigError(
            f"Extended thinking needs more than {settings.thinking_budget:,} max output tokens "
            f"(it spends up to that many thinking); use --max-tokens {2 * settings.thinking_budget}"
            " or --no-thinking.")
    return settings


def open_recorder(agent: Any) -> Any:
    """A Recorder for this session with its header written (see recording.py)."""
    from memgpt_lite.engine import recording

    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    return recorder


def _banner(console: Console, agent: Any, store: Any, record: bool) -> None:
    state = "created" if getattr(agent, "created", False) else "resumed"
    rec = (f"recording to {config.recordings_dir() / agent.name}" if record
           else "not recording")
    for line in (f"agent {agent.name!r} ({state}) · model {agent.settings.model}",
                 f"data {store.path} · {rec}"):
        console.print(line, markup=False, highlight=False, style="dim", soft_wrap=True)
    if console.is_terminal:
        console.print("type /help for commands", style="dim")


def _ask(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        return False

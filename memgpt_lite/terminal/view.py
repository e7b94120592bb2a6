"""Live rendering of event streams: the chat's turns as they happen, and a replay as it runs.

`ChatView` turns the events of `Agent.step()` into output. On a terminal the reply streams
in a live region (a spinner with the seconds waited until the first token) and settles as
rendered Markdown; when output is not live (tests, a captured console) the reply is printed
as Markdown once it is complete; in plain mode (output piped) text is written as it arrives
and nothing is styled. Every memory operation, alert, eviction and notice is one line
starting with "· " (`describe_event`), written to the meta console (stderr when piped), and
each turn ends with a status line.

A replay as it runs is rendered by replay_view.py. Finished results (tables, reports) are printed by render.py. All received text goes
through render.visible first: a reply cannot move the cursor or set the terminal title.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.control import Control
from rich.live import Live
from rich.live_render import LiveRender
from rich.segment import ControlType, Segment
from rich.spinner import Spinner
from rich.text import Text

from memgpt_lite.engine.events import (
    ClipEvent,
    ErrorEvent,
    EvictionEvent,
    FoldEvent,
    ModelCallStart,
    NoticeEvent,
    PressureAlertEvent,
    ResponseEvent,
    RetryWaitEvent,
    SummaryEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
    UsageEvent,
    UserEvent,
)
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.turns import turn_ranges
from memgpt_lite.terminal.render import bar, cache_hit, cost_text, shown, visible

MAX_PAUSE = 2.0  # seconds: live pacing never waits longer than this between two events
WAIT_NOTICE_EVERY = 15.0  # seconds without a sign of life before a piped chat says it waits
RETRY_HINT = "Your message is kept; /retry sends it again."


# --------------------------------------------------------------------------- event lines


def status_line(usage: Usage, cost: float, context_tokens: int, budget: int, *,
                with_bar: bool, width: int | None = None,
                unpriced: set[str] | frozenset[str] = frozenset()) -> str:
    """The line that ends a turn: context use (with a bar when styled), cache hits, and the
    cost of every paid call of the turn (the summariser's included). Within `width`
    columns (with the "· " before it): the bar goes first, then fields move to lines of
    their own, so no field is cut in two."""
    parts, meter = [], ""
    if context_tokens and budget:
        fraction = context_tokens / budget
        # Over the budget only as the next request stands now: the pager evicts before it
        # is sent, so the line says so rather than look like a broken promise.
        over = ", evicted before the next call" if context_tokens > budget else ""
        parts.append(f"context {context_tokens:,}/{budget:,} tokens ({fraction:.0%}{over})")
        meter = f" {bar(fraction)}" if with_bar else ""
    if usage.total_input:
        parts.append(f"cache {cache_hit(usage):.0%}")
    parts.append(f"turn {cost_text(cost, unpriced)}")
    if meter and (width is None or 2 + len(" · ".join(parts)) + len(meter) <= width):
        parts[0] += meter  # the bar only where the whole line fits with it
    return _fitted(parts, width)


def _fitted(parts: list[str], width: int | None) -> str:
    lines = [parts[0]]
    for part in parts[1:]:
        if width is not None and 2 + len(lines[-1]) + 3 + len(part) > width:
            lines.append(part)
        else:
            lines[-1] += f" · {part}"
    return "\n  ".join(lines)


def describe_event(event: Any, *, retry_hint: bool = True) -> tuple[str, str] | None:
    """One compact line (and a style) for an event that is not reply text, or None.
    `retry_hint`: whether a failed turn's line says /retry sends the message again (not in
    a one-shot chat, where no prompt follows)."""
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
        if event.method == "model":  # the model's own summary: its eviction line says it
            return None
        return f"summary updated ({event.method}) · {len(event.summary):,} chars", "yellow"
    if isinstance(event, ClipEvent):
        return (f"clipped {event.what}: {event.original_chars:,} → {event.kept_chars:,} chars "
                f"(full text stays in recall)"), "yellow"
    if isinstance(event, NoticeEvent):
        return event.message, ("yellow" if event.level == "warning" else "dim")
    if isinstance(event, RetryWaitEvent):
        return _retry_wait_line(event), "yellow"

    if isinstance(event, ErrorEvent):
        hint = f" {RETRY_HINT}" if event.retryable and retry_hint else ""
        return f"error: {event.message}{hint}", "bold red"
    return None


_ANSWERS = {429: "rate limited", 529: "overloaded", 503: "unavailable", 408: "timed out"}


def _retry_wait_line(event: RetryWaitEvent) -> str:
    what = _ANSWERS.get(event.status, "server error" if event.status >= 500 else "error")
    why = "as it asked" if event.asked else "the client's back-off"
    return f"the API answered {event.status} ({what}); retrying in {event.seconds:.1f} s ({why})"


def _eviction_line(event: EvictionEvent) -> str:
    n = len(event.turn_ids)
    who = {"model": "", "flush": " (forced: context nearly full)",
           "overflow": " (forced: the provider said the prompt was too long)",
           "compact": " (/compact: the model evicted nothing, so the oldest went)",
           }.get(event.by, "")
    line = (f"evicted turn{'s' if n != 1 else ''} {turn_ranges(event.turn_ids)} · "
            f"{event.tokens_freed:,} tokens{who}")
    if event.used_tokens and event.budget:
        line += f" · now {event.used_tokens:,}/{event.budget:,}"
    return line


class EffectShown:
    """Says whether a tool call's effect already has its own line (an eviction; in a replay
    also a memory edit), so its tool-result line would show the same thing a second time."""

    def __init__(self, effects: tuple[type, ...] = (EvictionEvent,)) -> None:
        self.effects = effects
        self.shown = False

    def see(self, event: Any) -> bool:
        """Track `event`; True when it is a tool result whose effect was already shown."""
        if isinstance(event, ToolCallEvent):
            self.shown = False
        elif isinstance(event, self.effects):
            self.shown = True
        elif isinstance(event, ToolResultEvent):
            return self.shown and not event.result.is_error
        return False


# --------------------------------------------------------------------------- live regions


def _strip_line(line: list[Segment]) -> list[Segment]:
    """A rendered line without its trailing padding: a line that fills the terminal's last
    column leaves the cursor in a pending wrap, and anything written then (a resize, a
    stray echo) would push the live region down one row and leave a copy of its top."""
    out = list(line)
    while out and not out[-1].control and not out[-1].text.rstrip():
        out.pop()
    if out and not out[-1].control:
        last = out[-1]
        out[-1] = Segment(last.text.rstrip(), last.style)
    return out


class _ReflowingRender(LiveRender):
    """A LiveRender that erases what it drew even after the terminal got narrower: a
    terminal that rewraps (reflows) its lines shows a line longer than the new width on
    several rows, and erasing only as many rows as there were lines leaves a copy behind."""

    def __init__(self, console: Console, renderable: Any):
        super().__init__(renderable, vertical_overflow="ellipsis")
        self.console = console
        self._widths: list[int] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths, current = [], 0
        for segment in super().__rich_console__(console, options):
            if segment.text == "\n" and not segment.control:
                widths.append(current)
                current = 0
            elif not segment.control:
                current += segment.cell_length
            yield segment
        self._widths = widths + [current]

    def _rows(self) -> int:
        width = max(1, self.console.width)
        return sum(max(1, math.ceil(w / width)) for w in self._widths) if self._shape else 0

    def position_cursor(self) -> Control:
        rows = self._rows()
        if not rows:
            return Control()
        return Control(ControlType.CARRIAGE_RETURN, (ControlType.ERASE_IN_LINE, 2),
                       *(((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2))
                         * (rows - 1)))

    def restore_cursor(self) -> Control:
        rows = self._rows()
        if not rows:
            return Control()
        return Control(ControlType.CARRIAGE_RETURN,
                       *((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)) * rows)


class _ChangedLive(Live):
    """A Live whose ticks redraw only when the frame would change (its renderable's
    `frame()` or the terminal's size). Every redraw erases by the width the terminal has
    when the erase is computed; a terminal that rewraps its lines on a resize while that
    redraw is still in flight is left with a copy. While a stream stalls nothing is in
    flight, so a resize then is redrawn cleanly (and a stalled stream costs no output)."""

    _last: Any = None

    def refresh(self) -> None:
        with self._lock:
            frame = getattr(self.get_renderable(), "frame", None)
            key = (self.console.size, frame()) if frame is not None else None
            if self._started and key is not None and key == self._last:
                return  # a tick with nothing new (stop() is not started: it always redraws)
            self._last = key
            super().refresh()


class _Tail:
    """Renders Markdown but only its last lines that fit the screen, so a long reply
    streams without scrolling artefacts; the full text is printed when it settles."""

    def __init__(self, view: ChatView):
        self.view = view

    def frame(self) -> str:
        return self.view.buffer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(_markdown(self.view.buffer), options, pad=False)
        keep = max(1, options.max_height - 2)
        for line in lines[-keep:]:
            yield from _strip_line(line)
            yield Segment.line()


class _Waiting:
    """A spinner with its label and the whole seconds waited so far."""

    def __init__(self, label: str):
        self.label, self.started = label, time.monotonic()
        self.spinner = Spinner("dots")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        waited = int(time.monotonic() - self.started)
        self.spinner.text = Text(f"{self.label} {waited} s" if waited else self.label,
                                 style="dim")
        yield self.spinner.render(console.get_time())


def _attached_name(block: dict[str, Any]) -> str:
    """An attached file as a transcript names it: `notes.md (12,345 chars)`, `image/png`."""
    import re

    if block.get("type") == "image":
        return str((block.get("source") or {}).get("media_type", "image"))
    head = re.match(r'<attachment name="([^"]*)" chars="(\d+)">', str(block.get("text", "")))
    return f"{head.group(1)} ({int(head.group(2)):,} chars)" if head else "a file"


def markdown(text: str) -> Any:
    """A reply (or replayed reply) as rendered Markdown (reply_markdown.py, imported here
    on first use: the first prompt is drawn without rich.markdown)."""
    from memgpt_lite.terminal.reply_markdown import markdown as rendered

    return rendered(text)


_markdown = markdown


class _WaitNotices:
    """When piped there is no spinner: every WAIT_NOTICE_EVERY seconds without a sign of
    life, one line on the meta console says what the chat is waiting for."""

    def __init__(self, write: Callable[[str], None], host: str,
                 every: float = WAIT_NOTICE_EVERY):
        self.write, self.host, self.every = write, host, every
        self._stop: threading.Event | None = None

    def start(self) -> None:
        self.stop()
        stop = self._stop = threading.Event()
        started = time.monotonic()

        def watch() -> None:
            while not stop.wait(self.every):
                self.write(f"waiting for {self.host}… {time.monotonic() - started:.0f} s")

        threading.Thread(target=watch, daemon=True, name="wait-notices").start()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None


# --------------------------------------------------------------------------- chat view


class ChatView:
    """Renders the events of one turn. `live`: spinner and streaming region (terminal
    only); `markdown`: settle replies as Markdown (else plain text written as it comes).
    `meta`: where tool, notice and status lines go (default: the reply's console);
    `context_of()` gives (context tokens, budget) for the status line, the number `/context`
    shows; `host` is named by the piped chat's waiting notices (None: no notices);
    `retry_hint`: whether failures point at /retry (not in a one-shot chat);
    `transcript`: the user's messages are written to the reply's console too, as Markdown
    quotes (`> you: …`), so a typed chat with stdout redirected is a whole transcript."""

    def __init__(self, console: Console, *, live: bool, markdown: bool,
                 meta: Console | None = None,
                 context_of: Callable[[], tuple[int, int]] | None = None,
                 host: str | None = None, wait_every: float = WAIT_NOTICE_EVERY,
                 retry_hint: bool = True, transcript: bool = False):
        self.console = console
        self.retry_hint = retry_hint
        self.transcript = transcript
        self._quoted = False
        self.meta_console = meta or console
        self.live = live and console.is_terminal
        self.markdown = markdown
        self.context_of = context_of
        self.buffer = ""
        self._live: Live | None = None
        self._live_kind = ""
        self._spinner_label = ""
        self.context_tokens = 0
        self.budget = 0
        self.turn = Tally()  # this turn's events: its paid calls, summariser included
        self._effects = EffectShown()
        self._waits = (_WaitNotices(lambda line: self.meta(line, "dim"), host, wait_every)
                       if host and not self.live else None)

    # ---------------------------------------------------------------- lifecycle

    def start_turn(self) -> None:
        self.buffer, self.context_tokens, self.turn = "", 0, Tally()
        self._spinner("thinking…")

    def _quote(self, event: UserEvent) -> None:
        """The transcript's copy of what the user sent, as a Markdown quote."""
        text = f"/compact {event.text}".strip() if event.compact else event.text
        files = [_attached_name(b) for b in event.attachments]
        if files:
            text += f"\n(attached: {', '.join(files)})"
        quoted = "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))
        gap = "\n" if self._quoted else ""  # a blank line after the previous reply
        self.console.file.write(gap + visible("> you: " + quoted[2:]) + "\n\n")
        self.console.file.flush()
        self._quoted = True

    def handle(self, event: Any) -> None:
        self.turn.add(event)
        if self._waits is not None:
            self._waiting(event)
        if isinstance(event, UserEvent):
            if self.transcript:
                self._quote(event)
        elif isinstance(event, TextDelta):
            self._text(event.text)
        elif isinstance(event, ThinkingDelta):
            self._spinner("thinking…")
        elif isinstance(event, ModelCallStart):
            self.settle()
            self._spinner("summarising evicted turns…" if event.purpose == "summary"
                          else "thinking…", restart=True)
        elif isinstance(event, (ResponseEvent, ToolCallEvent)):
            self._effects.see(event)
            self.settle()
        elif isinstance(event, UsageEvent):
            self.budget = event.budget
        elif isinstance(event, TurnEndEvent):
            self.end_turn(event)
        elif not self._effects.see(event):
            line = describe_event(event, retry_hint=self.retry_hint)
            if line is not None:
                self.settle()
                self.meta(*line)

    def _waiting(self, event: Any) -> None:
        assert self._waits is not None
        if isinstance(event, (ModelCallStart, TextDelta, ThinkingDelta, RetryWaitEvent)):
            self._waits.start()  # (re)start the count: this is a sign of life
        else:
            self._waits.stop()

    def end_turn(self, event: TurnEndEvent) -> None:
        self.settle()
        self.stop()
        if event.completed or self.turn.paid_usage.total_input:
            tokens, budget = (self.context_of() if self.context_of is not None
                              else (self.turn.context_tokens, self.budget))
            width = self.meta_console.width if self.meta_console.is_terminal else None
            self.meta(status_line(self.turn.paid_usage, self.turn.paid_cost_usd, tokens, budget,
                                  with_bar=not self.plain, width=width,
                                  unpriced=self.turn.unpriced), "dim")

    def interrupted(self) -> None:
        self.settle()
        self.stop()
        hint = " (/retry sends it again)" if self.retry_hint else ""
        self.meta(f"interrupted — the turn was cancelled; your message stays in recall{hint}",
                  "yellow")

    @property
    def plain(self) -> bool:
        return not self.markdown

    # ---------------------------------------------------------------- output

    def meta(self, line: str, style: str = "dim") -> None:
        self.stop()
        self.meta_console.print(shown(f"· {line}", "" if self.plain else style))

    def _text(self, text: str) -> None:
        if not text:
            return
        self.buffer += text
        if self.plain:
            self.stop()
            self.console.file.write(visible(text))
            self.console.file.flush()
        elif self.live and self._live_kind != "text":
            self._start_live(_Tail(self), "text")

    def settle(self) -> None:
        """The current response's text is complete: leave it on screen for good."""
        if self.plain:
            # The text is already on screen (written as it came); end its line.
            if self.buffer and not self.buffer.endswith("\n"):
                self.console.file.write("\n")
                self.console.file.flush()
        else:
            if self._live_kind == "text":
                self.stop()
            if self.buffer.strip():
                self.console.print(_markdown(self.buffer))
        self.buffer = ""

    def _spinner(self, label: str, restart: bool = False) -> None:
        if not self.live or self._live_kind == "text":
            return
        if self._live_kind == "spinner" and self._live is not None and not restart:
            if label != self._spinner_label:  # a new Spinner would restart its animation
                self._live.update(_Waiting(label))
                self._spinner_label = label
            return
        self._start_live(_Waiting(label), "spinner")
        self._spinner_label = label

    def _start_live(self, renderable: Any, kind: str) -> None:
        self.stop()
        live = _ChangedLive(renderable, console=self.console, transient=True,
                            refresh_per_second=12, redirect_stdout=False, redirect_stderr=False)
        live._live_render = _ReflowingRender(self.console, renderable)
        live.start()
        self._live, self._live_kind = live, kind

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
        self._live, self._live_kind = None, ""

    def close(self) -> None:
        """The chat is over: no more waiting notices."""
        if self._waits is not None:
            self._waits.stop()
        self.stop()


# --------------------------------------------------------------------------- json view


class JsonView:
    """`chat --json`: one JSON object per event on `file` (stdout), one per line, for
    scripts. Reply text arrives whole in `turn_end` (deltas and raw responses are left out);
    the turn's `user` event opens it (the text as the agent stored it, secrets redacted) and
    `interrupted` marks a cancelled one. Non-ASCII and control characters are escaped, so a
    line is always one line of plain text."""

    SKIPPED = frozenset({"text_delta", "thinking_delta", "response"})

    def __init__(self, file: Any):
        self.file = file

    def write(self, obj: dict[str, Any]) -> None:
        import json

        self.file.write(json.dumps(obj, ensure_ascii=True) + "\n")
        self.file.flush()

    def start_turn(self) -> None:
        pass  # the turn's UserEvent opens it, once the message is stored

    def handle(self, event: Any) -> None:
        from memgpt_lite.engine.recording import event_to_dict

        if event.kind not in self.SKIPPED:
            data = event_to_dict(event)
            if event.kind == "user":  # the files by name and size, not their bytes again
                data["attachments"] = [_attached_name(b) for b in event.attachments]
            self.write(data)

    def interrupted(self) -> None:
        self.write({"kind": "interrupted"})

    def meta(self, line: str, style: str = "dim") -> None:
        self.write({"kind": "info", "text": line})

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass

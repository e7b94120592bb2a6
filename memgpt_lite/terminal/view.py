"""Live rendering of event streams: the chat's turns as they happen, and a replay as it runs.

`ChatView` turns the events of `Agent.step()` into output. On a terminal the reply streams
in a live region (a spinner until the first token) and settles as rendered Markdown; when
output is not live (tests, a captured console) the reply is printed as Markdown once it is
complete; in plain mode (stdin piped) text is written as it arrives and nothing is styled.
Every memory operation, alert, eviction and notice is one line starting with "· "
(`describe_event`), and each turn ends with a status line.

`ReplayView` is the observer of a replay (`memgpt-lite replay` and `demo`): user inputs,
replies, tool calls, memory edits, alerts and evictions, paced by the recorded timing.
Finished results (tables, reports) are printed by render.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from memgpt_lite.engine.events import (
    ClipEvent,
    ErrorEvent,
    Event,
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
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.text import shorten
from memgpt_lite.engine.turns import turn_ranges
from memgpt_lite.terminal.render import bar, cache_hit

if TYPE_CHECKING:  # types only: the chat starts without loading the replay machinery
    from memgpt_lite.engine.recording import RecordedTurn
    from memgpt_lite.engine.replay import DivergenceInfo

MAX_PAUSE = 2.0  # seconds: live pacing never waits longer than this between two events


# --------------------------------------------------------------------------- event lines


def status_line(usage: Usage, cost: float, context_tokens: int, budget: int, *,
                with_bar: bool) -> str:
    """The line that ends a turn: context use (with a bar when styled), cache hits, cost."""
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


# --------------------------------------------------------------------------- chat view


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


# --------------------------------------------------------------------------- replay view


class ReplayView:
    """Renders a replay as it happens: user inputs, replies, tool calls, memory edits,
    alerts, evictions. `speed` > 0 paces events by the recorded timing divided by speed."""

    def __init__(self, console: Console, *, speed: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.console, self.speed, self.sleep = console, speed, sleep
        self.last_t: float | None = None

    def user(self, turn: RecordedTurn) -> None:
        self._pace(turn.t)
        self.console.print()
        self.console.print(Text.assemble(("you ", "bold cyan"), (f"{turn.at}  ", "dim"),
                                         (turn.text, "")))

    def event(self, event: Event, recorded_t: float | None) -> None:
        if recorded_t is not None:
            self._pace(recorded_t)
        render = getattr(self, f"_on_{event.kind}", None)
        if render is not None:
            render(event)

    def divergence(self, info: DivergenceInfo) -> None:
        self.console.print(Text(f"  ✗ divergence · {info}", style="bold red"))

    def _pace(self, t: float) -> None:
        if self.speed > 0 and self.last_t is not None and t > self.last_t:
            self.sleep(min(MAX_PAUSE, (t - self.last_t) / self.speed))
        self.last_t = t if self.last_t is None else max(self.last_t, t)

    def _line(self, mark: str, text: str, style: str = "") -> None:
        self.console.print(Text.assemble(("  " + mark + " ", style or "dim"), (text, style)))

    def _on_tool_result(self, e: Any) -> None:
        style = "red" if e.result.is_error else "yellow"
        self._line("⚙", e.summary or e.call.name, style)

    def _on_memory_edit(self, e: Any) -> None:
        change = e.new if e.old is None else _diff_tail(e.old, e.new)
        self._line("✎", f"core memory {e.label} ({e.op}, {e.used:,}/{e.limit:,} chars): {change}",
                   "green")

    def _on_pressure_alert(self, e: Any) -> None:
        self._line("⚠", f"memory pressure: {e.used_tokens:,}/{e.budget:,} tokens "
                        f"({e.percent:.0f}%)", "bold magenta")

    def _on_eviction(self, e: Any) -> None:
        who = {"model": "the model", "flush": "a forced flush", "overflow": "an overflow"}[e.by]
        ids = ", ".join(map(str, e.turn_ids))
        self._line("⇣", f"turns {ids} evicted by {who}, ~{e.tokens_freed:,} tokens freed; "
                        f"summary: {shorten(e.summary, 120)}", "magenta")

    def _on_fold(self, e: Any) -> None:
        self._line("⇣", f"folded {len(e.message_ids)} old tool result(s), "
                        f"~{e.tokens_freed:,} tokens freed", "magenta")

    def _on_clip(self, e: Any) -> None:
        self._line("✂", f"clipped {e.what}: {e.original_chars:,} → {e.kept_chars:,} chars",
                   "magenta")

    def _on_summary(self, e: Any) -> None:
        if e.method != "model":
            self._line("Σ", f"summary updated ({e.method})", "magenta")

    def _on_notice(self, e: Any) -> None:
        self._line("ℹ", e.message, "yellow" if e.level == "warning" else "")

    def _on_error(self, e: Any) -> None:
        self._line("✗", e.message, "bold red")

    def _on_turn_end(self, e: Any) -> None:
        if e.text:
            self.console.print(Text.assemble(("agent ", "bold green"), (e.text, "")))
        tokens = e.usage.total_input
        self.console.print(Text(f"  turn {e.turn_id} · {tokens:,} input tokens · "
                                f"${e.cost_usd:.4f}", style="dim"))


def _diff_tail(old: str, new: str) -> str:
    if new.startswith(old):
        return "+" + shorten(new[len(old):].strip(), 90)
    return shorten(new, 90)

"""`ReplayView`, the observer of a replay (`memgpt-lite replay` and `demo`): user inputs,
replies (rendered as the chat renders them), tool calls, memory edits, alerts and evictions,
paced by the recorded timing. All recorded text goes through render.visible first."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from memgpt_lite.engine.events import Event, EvictionEvent, MemoryEditEvent
from memgpt_lite.engine.tally import Tally
from memgpt_lite.terminal.render import clip, cost_text, shown, visible
from memgpt_lite.terminal.view import MAX_PAUSE, EffectShown, markdown

if TYPE_CHECKING:  # types only
    from memgpt_lite.engine.recording import RecordedTurn
    from memgpt_lite.engine.replay import DivergenceInfo


class ReplayView:
    """Renders a replay as it happens: user inputs, replies, tool calls, memory edits,
    alerts, evictions. `speed` > 0 paces events by the recorded timing divided by speed.
    A tool call whose effect has its own line (✎ memory edit, ⇣ eviction) gets no ⚙ line."""

    def __init__(self, console: Console, *, speed: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.console, self.speed, self.sleep = console, speed, sleep
        self.last_t: float | None = None
        self._effects = EffectShown((MemoryEditEvent, EvictionEvent))
        self._turn = Tally()  # this turn's calls: which models had no price

    def user(self, turn: RecordedTurn) -> None:
        self._pace(turn.t)
        self.console.print()
        mark = ([("  (interrupted: never answered)", "yellow")] if turn.interrupted else
                [("  (the recording ends inside this turn)", "yellow")] if turn.cut else [])
        self.console.print(Text.assemble(("you ", "bold cyan"), (f"{visible(turn.at)}  ", "dim"),
                                         (visible(turn.text), ""), *mark))

    def event(self, event: Event, recorded_t: float | None) -> None:
        if recorded_t is not None:
            self._pace(recorded_t)
        self._turn.add(event)
        if self._effects.see(event):
            return
        render = getattr(self, f"_on_{event.kind}", None)
        if render is not None:
            render(event)

    def divergence(self, info: DivergenceInfo) -> None:
        self.console.print(shown(f"  ✗ divergence · {info}", "bold red"))

    def _pace(self, t: float) -> None:
        if self.speed > 0 and self.last_t is not None and t > self.last_t:
            self.sleep(min(MAX_PAUSE, (t - self.last_t) / self.speed))
        self.last_t = t if self.last_t is None else max(self.last_t, t)

    def _line(self, mark: str, text: str, style: str = "") -> None:
        self.console.print(Text.assemble(("  " + mark + " ", style or "dim"),
                                         (visible(text), style)))

    def _on_tool_result(self, e: Any) -> None:
        style = "red" if e.result.is_error else "yellow"
        self._line("⚙", e.summary or e.call.name, style)

    def _on_memory_edit(self, e: Any) -> None:
        change = e.new if e.old is None else _diff_tail(e.old, e.new)
        self._line("✎", f"core memory {e.label} ({e.op}, {e.used:,}/{e.limit:,} chars): {change}",
                   "green")

    def _on_memory_confirm(self, e: Any) -> None:
        said = {"yes": "approved", "no": "declined"}.get(e.answer, "declined: nobody to ask")
        what = f"block {e.target}" if e.tool.startswith("core_memory") else \
            f"passage {e.target}" if e.target else "a new passage"
        self._line("?", f"memory write {e.tool} of {what}: {said}", "yellow")

    def _on_pressure_alert(self, e: Any) -> None:
        self._line("⚠", f"memory pressure: {e.used_tokens:,}/{e.budget:,} tokens "
                        f"({e.percent:.0f}%)", "bold magenta")

    def _on_eviction(self, e: Any) -> None:
        who = {"model": "the model", "flush": "a forced flush", "overflow": "an overflow",
               "compact": "/compact"}.get(e.by, e.by)
        ids = ", ".join(map(str, e.turn_ids))
        self._line("⇣", f"turns {ids} evicted by {who}, ~{e.tokens_freed:,} tokens freed; "
                        f"summary: {clip(e.summary, 120)}", "magenta")

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
        if e.text:  # rendered as the chat renders it
            self.console.print(Text("agent", style="bold green"))
            self.console.print(markdown(e.text))
        tokens = e.usage.total_input
        cost = cost_text(e.cost_usd, self._turn.unpriced)  # $0 of an unpriced model is unknown
        self._turn = Tally()
        self.console.print(Text(f"  turn {e.turn_id} · {tokens:,} input tokens · {cost}",
                                style="dim"))


def _diff_tail(old: str, new: str) -> str:
    if new.startswith(old):
        return "+" + clip(new[len(old):].strip(), 90)
    return clip(new, 90)

"""The recursive summary of evicted turns: previous summary + evicted turns → new summary,
by a cheaper model, with fallbacks that never fail the user's turn."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from memgpt_lite.engine import prompts
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import APIConnectionError, ModelError
from memgpt_lite.engine.events import Event, ModelCallStart, ResponseEvent, UsageEvent
from memgpt_lite.engine.model import ModelClient, final_response
from memgpt_lite.engine.records import ModelRequest, Turn, Usage
from memgpt_lite.engine.text import clean_text, neutralise_tags
from memgpt_lite.engine.tokens import RULE, TokenCounter, cost_usd, request_chars
from memgpt_lite.engine.turns import first_words

SUMMARY_WORDS = 400


@dataclass
class SummaryResult:
    text: str
    method: str  # "summariser" | "chunked" | "deterministic"
    usage: Usage = field(default_factory=Usage)


class Summariser:
    """Recursive summary: previous summary + evicted turns → new summary, via a cheaper model.
    Too big for one call (or the call fails) → chunks; a chunk that still fails → a
    deterministic summary. Never raises ModelError: the user's turn must not fail here."""

    def __init__(self, client: ModelClient, settings: Settings, counter: TokenCounter):
        self.client, self.settings, self.counter = client, settings, counter
        self.calls = 0
        self.usage = Usage()
        self.unreachable = False  # the last call got no answer at all (see `summarise`)

    def limit_chars(self) -> int:
        """Largest prompt (summary + turns) we send, in the counter's units (see `size`): a
        share of the chat budget, so a summary call never costs more than a chat call."""
        return max(2_000, int(self.settings.budget * 0.6 * self.counter.chars_per_token))

    def size(self, text: str) -> int:
        """What text weighs by the counter's rule: a CJK turn is not a third of its cost."""
        return self.counter.text_size(text)

    def summarise(self, previous: str, turns: list[Turn]) -> Generator[Event, None, SummaryResult]:
        text = render_turns(turns)
        usage = Usage()
        self.unreachable = False
        if self.size(previous) + self.size(text) <= self.limit_chars():
            out, usage = yield from self._call(previous, text)
            if out is not None:
                return SummaryResult(out, "summariser", usage)
        # Smaller chunks may get an answer where the whole was refused; a server that gave
        # none in the call's whole deadline (or no connection) would only be waited for again.
        summary, method = previous, "deterministic" if self.unreachable else "chunked"
        for chunk in chunk_turns(turns, self.limit_chars() // 2, self.size):
            out = None
            if method == "chunked" and self.size(summary) <= self.limit_chars() // 2:
                out, used = yield from self._call(summary, render_turns(chunk))
                usage = usage + used
            if out is None:  # stop calling a client that just failed
                method = "deterministic"
                out = merge_summary(summary, deterministic_summary(chunk, self.counter.rule))
            summary = out
        return SummaryResult(summary, method, usage)

    def compact(self, previous: str, max_chars: int) -> Generator[Event, None, SummaryResult]:
        """Shorten a running summary that grew too big (deterministic pieces pile up)."""
        usage = Usage()
        if self.size(previous) <= self.limit_chars():
            out, usage = yield from self._call(previous, "(none: only compact the previous summary)")
            if out is not None and len(out) <= max_chars:
                return SummaryResult(out, "summariser", usage)
        return SummaryResult(truncate_summary(previous, max_chars), "deterministic", usage)

    def _call(self, previous: str,
              turns_text: str) -> Generator[Event, None, tuple[str | None, Usage]]:
        room, size = self.limit_chars() - self.size(previous), self.size(turns_text)
        if size > room:  # one huge turn cannot be chunked further: cut its text
            keep = max(0, self.counter.kept_chars(turns_text, size - (room - 60)))
            turns_text = turns_text[:keep] + "\n[… cut: too long to summarise]"
        request = self.request(previous, turns_text)
        self.calls += 1
        # Not anchored on the chat's last usage: this request shares nothing with it.
        estimate = self.counter.estimate_chars(request_chars(request, self.counter.rule))
        yield ModelCallStart(0, request.digest(), estimate, purpose="summary", model=request.model)
        try:
            response = final_response(self.client.stream(request))
        except ModelError as exc:
            self.unreachable = isinstance(exc, APIConnectionError)
            billed = exc.billed or Usage()
            if exc.billed is not None:  # it failed after its input was billed: still paid for
                self.usage = self.usage + billed
                yield UsageEvent(billed, cost_usd(request.model, billed), billed.total_input,
                                 self.settings.budget, purpose="summary")
            return None, billed
        yield ResponseEvent(response, purpose="summary")
        self.usage = self.usage + response.usage
        # The model's JSON may hold lone surrogates, which no valid text holds: the summary
        # is stored and sent in every request from now on, so it follows the text rule.
        return clean_text(response.text).strip() or None, response.usage

    def request(self, previous: str, turns_text: str) -> ModelRequest:
        return ModelRequest(
            model=self.settings.summary_model, max_tokens=1024,
            system=[{"type": "text", "text": prompts.render("summarizer.md",
                                                            max_words=SUMMARY_WORDS)}],
            messages=[{"role": "user", "content": [{"type": "text", "text":
                       f"<previous_summary>\n{previous or '(none)'}\n</previous_summary>\n\n"
                       f"<removed_turns>\n{turns_text}\n</removed_turns>"}]}])


def render_turns(turns: list[Turn], tool_chars: int = 400) -> str:
    lines = []
    for turn in turns:
        lines.append(f"[turn {turn.id} · {turn.created_at or '?'}]")
        for m in turn.messages:
            for b in m.content:
                lines.extend(neutralise_tags(line) for line in _block_lines(m.role, b, tool_chars))
    return "\n".join(lines)


def _block_lines(role: str, b: dict[str, Any], tool_chars: int) -> list[str]:
    kind = b.get("type")
    if kind == "text" and b.get("text", "").strip():
        return [f"{role}: {b['text']}"]
    if kind == "tool_use":
        return [f"(tool call {b.get('name')} {str(b.get('input'))[:tool_chars]})"]
    if kind == "tool_result":
        return [f"(tool result {str(b.get('content'))[:tool_chars]})"]
    return []


def chunk_turns(turns: list[Turn], max_chars: int,
                size_of: Callable[[str], int] = len) -> list[list[Turn]]:
    """The turns in order, in chunks whose rendering is at most `max_chars` by `size_of`."""
    chunks: list[list[Turn]] = [[]]
    size = 0
    for turn in turns:
        n = size_of(render_turns([turn]))
        if chunks[-1] and size + n > max_chars:
            chunks.append([])
            size = 0
        chunks[-1].append(turn)
        size += n
    return [c for c in chunks if c]


def deterministic_summary(turns: list[Turn], rule: int = RULE) -> str:
    """A line per turn with its first words (`rule`: see turns.first_words)."""
    return "\n".join(f"- turn {t.id} ({t.created_at or '?'}): {first_words(t, 20, rule)}"
                     for t in turns)


def merge_summary(previous: str, addition: str) -> str:
    return f"{previous}\n{addition}".strip() if previous else addition.strip()


TRUNCATED_NOTE = "(older summary text dropped to save context; search recall for it)"
CUT_MARK = "…"
MIN_MARKED = 40  # below this much room, every character is kept for text, none for markers


def truncate_summary(summary: str, max_chars: int) -> str:
    """The newest `max_chars` characters of the summary (it is oldest first): it may be
    shortened, never erased. Cut at a line start when one is near the cut, else inside the
    line with a marker; a note says older text went, when there is room for it."""
    if len(summary) <= max_chars:
        return summary
    if max_chars < MIN_MARKED:
        return summary[len(summary) - max(0, max_chars):]
    note = TRUNCATED_NOTE + "\n" if len(TRUNCATED_NOTE) * 3 <= max_chars else ""
    room = max_chars - len(note)
    tail = summary[len(summary) - room:]
    if summary[len(summary) - room - 1] == "\n":
        return note + tail  # the cut fell on a line start
    newline = tail.find("\n")
    if 0 <= newline < room // 4:  # drop the broken line: little is lost
        return note + tail[newline + 1:]
    return note + CUT_MARK + tail[len(CUT_MARK):]

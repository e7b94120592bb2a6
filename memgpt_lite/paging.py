"""The paging controller (DESIGN.md §6): the context window is RAM, and the model decides
what to page out; the controller only steps in when the model did not.

Checked before every model call, on the estimated size of the next request:
  warn  → fold old bulky tool results (cheap), then a memory-pressure alert in the tail
  flush → evict the oldest turns down to the target and summarise them (summariser call,
          chunked on failure, deterministic as the last resort)
  still over budget → clip the current turn's largest pieces with a visible marker.
Evicted turns only leave the queue: every message stays in recall.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from memgpt_lite import prompts
from memgpt_lite.config import Settings
from memgpt_lite.context import BuiltContext, ContextBuilder, ContextInputs, message_tokens
from memgpt_lite.memory import ToolOutcome, check_arguments
from memgpt_lite.model import ModelClient
from memgpt_lite.store import Store
from memgpt_lite.tokens import TokenCounter
from memgpt_lite.types import (
    ClipEvent,
    Event,
    EvictionEvent,
    FoldEvent,
    Message,
    ModelCallStart,
    ModelError,
    ModelRequest,
    ModelResponse,
    PressureAlertEvent,
    ResponseEvent,
    SummaryEvent,
    Turn,
)

EVICT_TURNS_SCHEMA: dict[str, Any] = {
    "name": "evict_turns",
    "description": (
        "Free context space by removing whole turns from your visible conversation. Use it "
        "when a memory-pressure alert lists the turns in context: first save what you still "
        "need (core_memory_append/core_memory_replace, archival_insert), then evict the turns "
        "you no longer need verbatim. Your summary is merged into the running summary you "
        "always see. Evicted turns stay searchable with conversation_search. The current turn "
        "cannot be evicted."),
    "input_schema": {
        "type": "object",
        "properties": {
            "turn_ids": {"type": "array", "items": {"type": "integer"},
                         "description": "Ids of the turns to evict, as listed in the alert."},
            "summary": {"type": "string",
                        "description": "What the evicted turns contained that still matters: "
                                       "goals, decisions with reasons, open questions, "
                                       "preferences, concrete values."},
        },
        "required": ["turn_ids", "summary"],
        "additionalProperties": False,
    },
}

FOLD_MARKER = "[folded to save context: {chars:,} chars of {tool} output. Preview: {preview}… " \
              "— call {tool} again if you need the full output]"
CLIP_MARKER = "\n[clipped to fit the context: {cut:,} of {total:,} chars not shown. The full " \
              "text is stored; {how}]"
RISE_STEP = 0.05  # re-alert only when usage rose by 5% of the budget since the last alert
SUMMARY_CAP = 0.20  # a running summary above this share of the budget is compacted


def group_turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    for m in messages:
        if not turns or turns[-1].id != m.turn_id:
            turns.append(Turn(m.turn_id, []))
        turns[-1].messages.append(m)
    return turns


def first_words(turn: Turn, n: int = 12) -> str:
    for m in turn.messages:
        for b in m.content:
            if b.get("type") == "text" and b.get("text", "").strip():
                words = b["text"].split()
                return " ".join(words[:n]) + (" …" if len(words) > n else "")
    return "(no text)"


@dataclass
class PagingStats:
    alerts: int = 0
    model_evictions: int = 0
    forced_flushes: int = 0
    summariser_calls: int = 0
    folds: int = 0
    clips: int = 0


class Summariser:
    """Recursive summary: previous summary + evicted turns → new summary, via a cheaper model.
    Falls back to chunks, then to a deterministic summary; never raises ModelError."""

    def __init__(self, client: ModelClient, settings: Settings, counter: TokenCounter):
        self.client, self.settings, self.counter = client, settings, counter

    def summarise(self, previous: str, turns: list[Turn]) -> Generator[Event, None, tuple[str, str]]:
        text = render_turns(turns)
        limit = max(2_000, int(self.settings.budget * 0.6 * self.counter.chars_per_token))
        if len(previous) + len(text) <= limit:
            result = yield from self._call(previous, text)
            if result is not None:
                return result, "summariser"
        summary = previous
        chunked = True
        for chunk in chunk_turns(turns, limit // 2):
            result = yield from self._call(summary, render_turns(chunk))
            if result is None:
                chunked = False
                result = merge_summary(summary, deterministic_summary(chunk))
            summary = result
        return summary, "chunked" if chunked else "deterministic"

    def _call(self, previous: str, turns_text: str) -> Generator[Event, None, str | None]:
        request = ModelRequest(
            model=self.settings.summary_model, max_tokens=1024,
            system=[{"type": "text", "text": prompts.render("summarizer.md", max_words=400)}],
            messages=[{"role": "user", "content": [{"type": "text", "text":
                       f"<previous_summary>\n{previous or '(none)'}\n</previous_summary>\n\n"
                       f"<removed_turns>\n{turns_text}\n</removed_turns>"}]}])
        yield ModelCallStart(0, request.digest(), self.counter.estimate_request(request),
                             purpose="summary", model=request.model)
        try:
            response = _collect(self.client.stream(request))
        except ModelError:
            return None
        yield ResponseEvent(response, purpose="summary")
        summary = response.text.strip()
        return summary or None


def _collect(stream: Iterator[Any]) -> ModelResponse:
    response = None
    for item in stream:
        if isinstance(item, ModelResponse):
            response = item
    if response is None:
        raise ModelError("the summariser stream ended without a response")
    return response


def render_turns(turns: list[Turn], tool_chars: int = 400) -> str:
    lines = []
    for turn in turns:
        lines.append(f"[turn {turn.id} · {turn.created_at or '?'}]")
        for m in turn.messages:
            for b in m.content:
                lines.extend(_render_block(m.role, b, tool_chars))
    return "\n".join(lines)


def _render_block(role: str, b: dict[str, Any], tool_chars: int) -> list[str]:
    kind = b.get("type")
    if kind == "text" and b.get("text", "").strip():
        return [f"{role}: {b['text']}"]
    if kind == "tool_use":
        return [f"(tool call {b.get('name')} {str(b.get('input'))[:tool_chars]})"]
    if kind == "tool_result":
        content = b.get("content")
        text = content if isinstance(content, str) else str(content)
        return [f"(tool result {text[:tool_chars]})"]
    return []


def chunk_turns(turns: list[Turn], max_chars: int) -> list[list[Turn]]:
    chunks: list[list[Turn]] = [[]]
    size = 0
    for turn in turns:
        n = len(render_turns([turn]))
        if chunks[-1] and size + n > max_chars:
            chunks.append([])
            size = 0
        chunks[-1].append(turn)
        size += n
    return [c for c in chunks if c]


def deterministic_summary(turns: list[Turn]) -> str:
    return "\n".join(f"- turn {t.id} ({t.created_at or '?'}): {first_words(t, 20)}" for t in turns)


def merge_summary(previous: str, addition: str) -> str:
    return f"{previous}\n{addition}".strip() if previous else addition.strip()


class Pager:
    """Keeps every request under the budget; see the module docstring for the levels."""

    def __init__(self, settings: Settings, store: Store, agent_id: int, counter: TokenCounter,
                 builder: ContextBuilder, summariser: Summariser):
        self.settings, self.store, self.agent_id = settings, store, agent_id
        self.counter, self.builder, self.summariser = counter, builder, summariser
        self.stats = PagingStats()
        self.alert_tokens: int | None = None  # usage at the last alert
        self.alert_turn: int | None = None
        self.alert_text: str | None = None

    # ---------------------------------------------------------------- thresholds
    @property
    def budget(self) -> int:
        return self.settings.budget

    def level(self, fraction: float) -> int:
        return int(self.budget * fraction)

    # ---------------------------------------------------------------- main check
    def prepare(self, inputs: ContextInputs, turn_id: int) -> Generator[Event, None, BuiltContext]:
        """Make the next request fit; yields what it did, returns the request to send."""
        built = self._build(inputs)
        if built.estimated_tokens >= self.level(self.settings.warn_fraction):
            if (yield from self._fold(inputs)):
                built = self._build(inputs)
        if self._must_flush(built.estimated_tokens, turn_id):
            yield from self.flush(inputs, turn_id, by="flush")
            built = self._build(inputs)
        elif self._summary_too_big(inputs):
            yield from self._compact_summary(inputs)
            built = self._build(inputs)
        built = yield from self._alert(inputs, turn_id, built)
        if built.estimated_tokens > self.budget:
            yield from self._clip_current(inputs, built.estimated_tokens)
            built = self._build(inputs)
        return built

    def _build(self, inputs: ContextInputs) -> BuiltContext:
        return self.builder.build(inputs)

    def _must_flush(self, tokens: int, turn_id: int) -> bool:
        if tokens >= self.level(self.settings.flush_fraction):
            return True
        ignored = self.alert_turn is not None and self.alert_turn < turn_id
        return ignored and tokens >= self.level(self.settings.warn_fraction)

    def _alert(self, inputs: ContextInputs, turn_id: int,
               built: BuiltContext) -> Generator[Event, None, BuiltContext]:
        tokens = built.estimated_tokens
        if tokens < self.level(self.settings.warn_fraction) or not inputs.queue:
            self.alert_tokens = self.alert_turn = self.alert_text = None
            return built
        rise = self.alert_tokens is None or tokens >= self.alert_tokens + self.level(RISE_STEP)
        if rise:
            self.alert_text = self.alert_message(inputs, turn_id, tokens)
            self.alert_tokens = tokens
            if self.alert_turn is None:
                self.alert_turn = turn_id
            self.stats.alerts += 1
            yield PressureAlertEvent(tokens, self.budget, 100 * tokens / self.budget,
                                     self.alert_text)
        # The alert stays in the tail while pressure lasts, so later calls of the turn
        # still show the model which turns it can evict.
        inputs.alerts = [a for a in inputs.alerts if a != self.alert_text] + [self.alert_text]
        return self._build(inputs)

    def alert_message(self, inputs: ContextInputs, turn_id: int, tokens: int) -> str:
        rows = [f"- {t.id} · {t.created_at or '?'} · {message_tokens(self.counter, t.messages):,}"
                f" · {first_words(t)}" for t in group_turns(inputs.queue)[:60]]
        return prompts.render(
            "pressure_alert.md", used=f"{tokens:,}", budget=f"{self.budget:,}",
            percent=round(100 * tokens / self.budget),
            flush_percent=round(100 * self.settings.flush_fraction),
            current_turn=turn_id, turns="\n".join(rows))

    # ---------------------------------------------------------------- fold
    def _fold(self, inputs: ContextInputs) -> Generator[Event, None, bool]:
        """Clip old bulky tool results in the queue to stubs; the full text stays stored."""
        folded, freed = [], 0
        names = _tool_names(inputs.queue)
        for m in inputs.queue:
            stub = _fold_content(m.api_content(), names, self.settings.fold_min_chars)
            if stub is None:
                continue
            before = message_tokens(self.counter, [m])
            m.context_content = stub
            freed += before - message_tokens(self.counter, [m])
            self.store.set_context_content(self.agent_id, m.id, stub)
            folded.append(m.id)
        if folded:
            self.stats.folds += 1
            yield FoldEvent(folded, freed)
        return bool(folded)

    # ---------------------------------------------------------------- flush
    def flush(self, inputs: ContextInputs, turn_id: int,
              by: str = "flush") -> Generator[Event, None, None]:
        """Evict the oldest turns down to the target and summarise them."""
        target = self.level(self.settings.flush_target_fraction)
        turns = group_turns(inputs.queue)
        tokens = self._build(inputs).estimated_tokens
        evict: list[Turn] = []
        for turn in turns:
            # An overflow evicts at least one turn: the estimate was already proven wrong.
            if tokens <= target and (evict or by != "overflow"):
                break
            evict.append(turn)
            tokens -= message_tokens(self.counter, turn.messages)
        if not evict:
            return
        summary, method = yield from self.summariser.summarise(inputs.summary, evict)
        self.stats.summariser_calls += 1
        self.stats.forced_flushes += 1
        ids = [t.id for t in evict]
        freed = self._evict(inputs, ids, summary)
        self.alert_tokens = self.alert_turn = self.alert_text = None
        inputs.alerts = []
        yield EvictionEvent(ids, freed, by, summary, self._build(inputs).estimated_tokens,
                            self.budget)
        yield SummaryEvent(summary, method)

    def _evict(self, inputs: ContextInputs, turn_ids: list[int], summary: str) -> int:
        gone = [m for m in inputs.queue if m.turn_id in set(turn_ids)]
        freed = message_tokens(self.counter, gone) if gone else 0
        with self.store.transaction():
            self.store.set_in_context(self.agent_id, turn_ids, False)
            self.store.set_summary(self.agent_id, summary)
        inputs.queue = [m for m in inputs.queue if m.turn_id not in set(turn_ids)]
        inputs.summary = summary
        return freed

    def _summary_too_big(self, inputs: ContextInputs) -> bool:
        return self.counter.estimate_text(inputs.summary) > self.level(SUMMARY_CAP)

    def _compact_summary(self, inputs: ContextInputs) -> Generator[Event, None, None]:
        summary, method = yield from self.summariser.summarise(inputs.summary, [])
        self.stats.summariser_calls += 1
        if self.counter.estimate_text(summary) < self.counter.estimate_text(inputs.summary):
            self.store.set_summary(self.agent_id, summary)
            inputs.summary = summary
            yield SummaryEvent(summary, method)

    # ---------------------------------------------------------------- overflow
    def on_overflow(self, inputs: ContextInputs, turn_id: int, request: ModelRequest,
                    actual: int | None) -> Generator[Event, None, None]:
        """The provider said the prompt was too long: learn from it, then make room."""
        self.counter.observe_overflow(request, actual)
        if inputs.queue:
            yield from self.flush(inputs, turn_id, by="overflow")

    # ---------------------------------------------------------------- clip current turn
    def _clip_current(self, inputs: ContextInputs, tokens: int) -> Iterator[Event]:
        for _ in range(8):
            over = tokens - self.budget
            if over <= 0:
                return
            event = _clip_largest(inputs.current, int(over * self.counter.chars_per_token * 1.3) + 200)
            if event is None:
                return
            self.stats.clips += 1
            yield event
            tokens = self._build(inputs).estimated_tokens

    # ---------------------------------------------------------------- the model's tool
    def evict_tool(self, args: object, inputs: ContextInputs,
                   turn_id: int) -> tuple[ToolOutcome, list[Event]]:
        error = check_arguments(EVICT_TURNS_SCHEMA["input_schema"], args)
        valid = sorted({m.turn_id for m in inputs.queue})
        listing = f"Turns you can evict: {', '.join(map(str, valid)) or 'none'}."
        if error:
            return _error(f"{error} {listing}"), []
        assert isinstance(args, dict)
        ids = sorted(set(args["turn_ids"]))
        summary = args["summary"].strip()
        problem = _evict_problem(ids, valid, turn_id, summary)
        if problem:
            return _error(f"{problem} {listing}"), []
        merged = merge_summary(inputs.summary, f"Turns {_ranges(ids)}: {summary}")
        freed = self._evict(inputs, ids, merged)
        self.stats.model_evictions += 1
        self.alert_turn = None
        now = self._build(inputs).estimated_tokens
        if now < self.level(self.settings.warn_fraction):
            self.alert_tokens = self.alert_text = None
            inputs.alerts = []
        pct = 100 * now / self.budget
        text = (f"Evicted turns {_ranges(ids)}: about {freed:,} tokens freed. The context is now "
                f"about {now:,} tokens ({pct:.0f}% of {self.budget:,}). The turns stay "
                "searchable with conversation_search.")
        event = EvictionEvent(ids, freed, "model", summary, now, self.budget)
        return ToolOutcome(text, False, f"evicted turns {_ranges(ids)} · {freed:,} tokens"), [event]


def _evict_problem(ids: list[int], valid: list[int], turn_id: int, summary: str) -> str | None:
    if not ids:
        return "turn_ids is empty: name at least one turn."
    if turn_id in ids:
        return f"Turn {turn_id} is the current turn and cannot be evicted."
    unknown = [i for i in ids if i not in valid]
    if unknown:
        return f"Turn ids not in context: {', '.join(map(str, unknown))}."
    if not summary:
        return "summary is empty: say what the evicted turns contained that still matters."
    return None


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(text, True, f"evict_turns failed: {text.split('.')[0]}")


def _ranges(ids: list[int]) -> str:
    """[3,4,5,9] → '3–5, 9'"""
    out, start, prev = [], None, None
    for i in sorted(ids):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}–{prev}" if prev != start else str(start))
            start = prev = i
    if start is not None:
        out.append(f"{start}–{prev}" if prev != start else str(start))
    return ", ".join(out)


def _tool_names(messages: list[Message]) -> dict[str, str]:
    return {b["id"]: b.get("name", "tool") for m in messages for b in m.content
            if b.get("type") == "tool_use"}


def _fold_content(blocks: list[dict[str, Any]], names: dict[str, str],
                  min_chars: int) -> list[dict[str, Any]] | None:
    changed = False
    out = []
    for b in blocks:
        content = b.get("content")
        if b.get("type") == "tool_result" and isinstance(content, str) and len(content) > min_chars:
            tool = names.get(b.get("tool_use_id", ""), "the tool")
            preview = " ".join(content[:160].split())
            b = {**b, "content": FOLD_MARKER.format(chars=len(content), tool=tool, preview=preview)}
            changed = True
        out.append(b)
    return out if changed else None


def _clip_largest(current: list[Message], cut: int) -> ClipEvent | None:
    """Clip the largest text or tool_result string of the current turn by `cut` chars."""
    best: tuple[int, Message, int, str] | None = None
    for m in current:
        for i, b in enumerate(m.api_content()):
            key = "text" if b.get("type") == "text" else "content"
            value = b.get(key)
            if isinstance(value, str) and (best is None or len(value) > best[0]):
                best = (len(value), m, i, key)
    if best is None or best[0] < 400:
        return None
    size, msg, index, key = best
    content = copy.deepcopy(msg.api_content())
    keep = max(200, size - cut)
    how = ("search it with conversation_search." if key == "text"
           else "ask for a narrower result (another query or page).")
    original = content[index][key]
    content[index][key] = original[:keep] + CLIP_MARKER.format(cut=size - keep, total=size, how=how)
    msg.context_content = content
    what = "your message" if key == "text" and msg.role == "user" else "a tool result"
    return ClipEvent(what, size, keep)

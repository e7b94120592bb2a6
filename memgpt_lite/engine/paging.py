"""The paging controller (DESIGN.md §6): the context window is RAM, and the model decides
what to page out; the controller only steps in when the model did not.

Checked before every model call, on the estimated size of the next request:
  warn  → fold old bulky tool results (cheap), then a memory-pressure alert in the tail
  flush → evict the oldest turns down to the target and summarise them (summariser call,
          chunked when too big or failing, deterministic as the last resort)
  fit   → the hard guarantee: while the request is over budget, evict more, then clip the
          current turn's largest pieces with a visible marker, then shorten the summary.
Evicted turns only leave the queue: every message stays in recall, and folded or clipped
messages keep their full text in the store (only `context_content` changes).
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from memgpt_lite.engine import prompts
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.context import (
    BuiltContext,
    ContextBuilder,
    ContextInputs,
    message_tokens,
)
from memgpt_lite.engine.errors import ModelError
from memgpt_lite.engine.events import (
    ClipEvent,
    Event,
    EvictionEvent,
    FoldEvent,
    ModelCallStart,
    NoticeEvent,
    PressureAlertEvent,
    ResponseEvent,
    SummaryEvent,
)
from memgpt_lite.engine.memory import ToolOutcome
from memgpt_lite.engine.model import ModelClient, final_response
from memgpt_lite.engine.records import (
    Message,
    ModelRequest,
    Turn,
    Usage,
    canonical_json,
)
from memgpt_lite.engine.store import Store
from memgpt_lite.engine.text import neutralise_tags
from memgpt_lite.engine.tokens import TokenCounter, request_chars

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
CLIP_NOTE = "\n[clipped to fit the context: "
CLIP_MARKER = CLIP_NOTE + "{cut:,} of {total:,} chars not shown. The full text is stored; {how}]"
RISE_STEP = 0.05  # re-alert only when usage rose by 5% of the budget since the last alert
SUMMARY_CAP = 0.20  # a running summary above this share of the budget is compacted
ALERT_TURNS = 40  # the alert lists at most this many (oldest) turns: it must stay small itself
FOLD_SHARE = 0.10  # a tool result above this share of the budget is bulky, whatever the setting
MIN_FOLD_CHARS = 600  # below this a stub would save next to nothing
MIN_CLIP_CHARS = 400
CLIP_KEEP = 200
FIT_ROUNDS = 16
SUMMARY_WORDS = 400


# --------------------------------------------------------------------------- turns


def group_turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    for m in messages:
        if not turns or turns[-1].id != m.turn_id:
            turns.append(Turn(m.turn_id, []))
        turns[-1].messages.append(m)
    return turns


def first_words(turn: Turn, n: int = 12) -> str:
    """The opening words of a turn, as inert data (they go into alerts and summaries)."""
    for m in turn.messages:
        for b in m.content:
            if b.get("type") == "text" and b.get("text", "").strip():
                words = b["text"].split()
                return neutralise_tags(" ".join(words[:n]) + (" …" if len(words) > n else ""))
    return "(no text)"


def turn_chars(turn: Turn) -> int:
    """Characters a turn adds to the request JSON (what the counter estimates from)."""
    return len(canonical_json([m.to_api() for m in turn.messages])) - 1


@dataclass
class PagingStats:
    alerts: int = 0
    model_evictions: int = 0
    forced_flushes: int = 0
    summariser_calls: int = 0
    folds: int = 0
    clips: int = 0


# --------------------------------------------------------------------------- summariser


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

    def limit_chars(self) -> int:
        """Largest prompt (summary + turns) we send: a share of the chat budget, so a summary
        call never costs more than a chat call."""
        return max(2_000, int(self.settings.budget * 0.6 * self.counter.chars_per_token))

    def summarise(self, previous: str, turns: list[Turn]) -> Generator[Event, None, SummaryResult]:
        text = render_turns(turns)
        usage = Usage()
        if len(previous) + len(text) <= self.limit_chars():
            out, usage = yield from self._call(previous, text)
            if out is not None:
                return SummaryResult(out, "summariser", usage)
        summary, method = previous, "chunked"
        for chunk in chunk_turns(turns, self.limit_chars() // 2):
            out = None
            if method == "chunked" and len(summary) <= self.limit_chars() // 2:
                out, used = yield from self._call(summary, render_turns(chunk))
                usage = usage + used
            if out is None:  # stop calling a client that just failed
                method = "deterministic"
                out = merge_summary(summary, deterministic_summary(chunk))
            summary = out
        return SummaryResult(summary, method, usage)

    def compact(self, previous: str, max_chars: int) -> Generator[Event, None, SummaryResult]:
        """Shorten a running summary that grew too big (deterministic pieces pile up)."""
        usage = Usage()
        if len(previous) <= self.limit_chars():
            out, usage = yield from self._call(previous, "(none: only compact the previous summary)")
            if out is not None and len(out) <= max_chars:
                return SummaryResult(out, "summariser", usage)
        return SummaryResult(truncate_summary(previous, max_chars), "deterministic", usage)

    def _call(self, previous: str,
              turns_text: str) -> Generator[Event, None, tuple[str | None, Usage]]:
        room = self.limit_chars() - len(previous)
        if len(turns_text) > room:  # one huge turn cannot be chunked further: cut its text
            turns_text = turns_text[:max(0, room - 60)] + "\n[… cut: too long to summarise]"
        request = self.request(previous, turns_text)
        self.calls += 1
        # Not anchored on the chat's last usage: this request shares nothing with it.
        estimate = self.counter.estimate_chars(request_chars(request))
        yield ModelCallStart(0, request.digest(), estimate, purpose="summary", model=request.model)
        try:
            response = final_response(self.client.stream(request))
        except ModelError:
            return None, Usage()
        yield ResponseEvent(response, purpose="summary")
        self.usage = self.usage + response.usage
        return response.text.strip() or None, response.usage

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


def truncate_summary(summary: str, max_chars: int) -> str:
    """Keep the newest lines (the summary is oldest first); say that older ones went."""
    note = "(older summary lines dropped to save context; search recall for them)"
    if len(summary) <= max_chars:
        return summary
    kept: list[str] = []
    size = len(note)
    for line in reversed(summary.splitlines()):
        if size + len(line) + 1 > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join([note, *reversed(kept)]) if kept else note


# --------------------------------------------------------------------------- pager


class Pager:
    """Keeps every request under `settings.budget` by the counter; see the module docstring.

    `prepare` runs before every model call and returns the request to send; `evict_turns`
    calls go through `evict_tool`; a provider overflow goes through `on_overflow`.
    """

    def __init__(self, settings: Settings, store: Store, agent_id: int, counter: TokenCounter,
                 builder: ContextBuilder, summariser: Summariser):
        self.settings, self.store, self.agent_id = settings, store, agent_id
        self.counter, self.builder, self.summariser = counter, builder, summariser
        self.stats = PagingStats()
        self.alert_tokens: int | None = None  # usage at the last alert (None: no pressure)
        self.alert_turn: int | None = None  # turn of an alert the model has not acted on
        self._shown: str | None = None  # the alert text now in the tail

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
            built = yield from self._fold(inputs, built)
        if self._must_flush(built.estimated_tokens, turn_id):
            built = yield from self.flush(inputs, built)
        if self._summary_too_big(inputs):
            if (yield from self._compact_summary(inputs, self._summary_cap_chars())):
                built = self._build(inputs)
        built = yield from self._alert(inputs, turn_id, built)
        return (yield from self._fit(inputs, built))

    def _build(self, inputs: ContextInputs) -> BuiltContext:
        return self.builder.build(inputs)

    def _must_flush(self, tokens: int, turn_id: int) -> bool:
        if tokens >= self.level(self.settings.flush_fraction):
            return True
        ignored = self.alert_turn is not None and self.alert_turn < turn_id
        return ignored and tokens >= self.level(self.settings.warn_fraction)

    def _fit(self, inputs: ContextInputs,
             built: BuiltContext) -> Generator[Event, None, BuiltContext]:
        """The hard guarantee, whatever the model did: evict the queue first (it stays in
        recall), then clip the current turn, then shorten the summary."""
        for _ in range(FIT_ROUNDS):
            over = built.estimated_tokens - self.budget
            if over <= 0:
                return built
            if inputs.queue:
                built = yield from self.flush(inputs, built)
                continue
            if not (yield from self._clip_step(inputs, over)):
                shorter = bool(inputs.summary) and (yield from self._compact_summary(
                    inputs, len(inputs.summary) // 2))
                if not shorter:
                    break  # nothing left to evict, clip or shorten
            built = self._build(inputs)
        if built.estimated_tokens > self.budget:
            yield NoticeEvent(
                f"The request is about {built.estimated_tokens:,} tokens, over the budget of "
                f"{self.budget:,}, even with nothing left to evict or clip: the tools, system "
                "prompt and core memory alone are too big. Raise context_window.", "warning")
        return built

    # ---------------------------------------------------------------- alert
    def _alert(self, inputs: ContextInputs, turn_id: int,
               built: BuiltContext) -> Generator[Event, None, BuiltContext]:
        tokens = built.estimated_tokens
        if tokens < self.level(self.settings.warn_fraction) or not inputs.queue:
            self._reset_alert(inputs)
            return built
        text = self.alert_message(inputs, turn_id, tokens)
        if self.alert_tokens is None or tokens >= self.alert_tokens + self.level(RISE_STEP):
            self.alert_tokens, self.alert_turn = tokens, turn_id
            self.stats.alerts += 1
            yield PressureAlertEvent(tokens, self.budget, 100 * tokens / self.budget, text)
        # While pressure lasts the alert stays in the tail, refreshed, so every call shows the
        # model the turns it can evict now. The tail is after the last cache breakpoint.
        inputs.alerts = [a for a in inputs.alerts if a != self._shown] + [text]
        self._shown = text
        return self._build(inputs)

    def _reset_alert(self, inputs: ContextInputs) -> None:
        inputs.alerts = [a for a in inputs.alerts if a != self._shown]
        self.alert_tokens = self.alert_turn = self._shown = None

    def alert_message(self, inputs: ContextInputs, turn_id: int, tokens: int) -> str:
        turns = group_turns(inputs.queue)
        rows = [f"- {t.id} · {t.created_at or '?'} · {message_tokens(self.counter, t.messages):,}"
                f" · {first_words(t, 10)}" for t in turns[:ALERT_TURNS]]
        if len(turns) > ALERT_TURNS:
            rows.append(f"- (and {len(turns) - ALERT_TURNS} newer turns: "
                        f"{turns[ALERT_TURNS].id}–{turns[-1].id})")
        return prompts.render(
            "pressure_alert.md", used=f"{tokens:,}", budget=f"{self.budget:,}",
            percent=round(100 * tokens / self.budget),
            flush_percent=round(100 * self.settings.flush_fraction),
            current_turn=turn_id, turns="\n".join(rows))

    # ---------------------------------------------------------------- fold
    def _fold(self, inputs: ContextInputs,
              before: BuiltContext) -> Generator[Event, None, BuiltContext]:
        """Clip old bulky tool results in the queue to stubs; the full text stays stored.
        Returns `before` rebuilt when something was folded."""
        names = _tool_names(inputs.queue)
        min_chars = self._fold_min_chars()
        folded = []
        for m in inputs.queue:
            stub = _fold_content(m.api_content(), names, min_chars)
            if stub is not None:
                m.context_content = stub
                self.store.set_context_content(self.agent_id, m.id, stub)  # type: ignore[arg-type]
                folded.append(m.id)
        if not folded:
            return before
        self.stats.folds += 1
        after = self._build(inputs)
        yield FoldEvent(folded, max(0, before.estimated_tokens - after.estimated_tokens))  # type: ignore[arg-type]
        return after

    def _fold_min_chars(self) -> int:
        share = int(self.level(FOLD_SHARE) * self.counter.chars_per_token)
        return max(MIN_FOLD_CHARS, min(self.settings.fold_min_chars, share))

    # ---------------------------------------------------------------- flush
    def flush(self, inputs: ContextInputs, before: BuiltContext,
              by: str = "flush") -> Generator[Event, None, BuiltContext]:
        """Evict the oldest turns down to the target and summarise them; `before` is the
        request as built from `inputs`, and the request as rebuilt is returned."""
        evict = self._oldest_down_to(inputs, before, self.level(
            self.settings.flush_target_fraction), at_least_one=by == "overflow")
        if not evict:
            return before
        result = yield from self.summariser.summarise(inputs.summary, evict)
        self.stats.summariser_calls = self.summariser.calls
        self.stats.forced_flushes += 1
        ids = [t.id for t in evict]
        self._evict(inputs, ids, result.text)
        self._reset_alert(inputs)
        after = self._build(inputs)
        now = after.estimated_tokens
        yield EvictionEvent(ids, max(0, before.estimated_tokens - now), by,  # type: ignore[arg-type]
                            result.text, now, self.budget)
        yield SummaryEvent(result.text, result.method, result.usage)  # type: ignore[arg-type]
        return after

    def _oldest_down_to(self, inputs: ContextInputs, built: BuiltContext, target: int,
                        at_least_one: bool) -> list[Turn]:
        """The oldest turns whose removal brings the request to `target`, measured in request
        characters so the estimate matches the counter's own (anchored) one."""
        chars = request_chars(built.request)
        evict: list[Turn] = []
        for turn in group_turns(inputs.queue):
            if self.counter.estimate_request_chars(chars) <= target and (evict or not at_least_one):
                break
            evict.append(turn)
            chars -= turn_chars(turn)
        return evict

    def _evict(self, inputs: ContextInputs, turn_ids: list[int], summary: str) -> None:
        gone = set(turn_ids)
        with self.store.transaction():
            self.store.set_in_context(self.agent_id, turn_ids, False)
            self.store.set_summary(self.agent_id, summary)
        inputs.queue = [m for m in inputs.queue if m.turn_id not in gone]
        inputs.summary = summary

    def _summary_cap_chars(self) -> int:
        return int(self.level(SUMMARY_CAP) * self.counter.chars_per_token / 1.2)

    def _summary_too_big(self, inputs: ContextInputs) -> bool:
        return self.counter.estimate_text(inputs.summary) > self.level(SUMMARY_CAP)

    def _compact_summary(self, inputs: ContextInputs,
                         max_chars: int) -> Generator[Event, None, bool]:
        """True when the summary got shorter."""
        result = yield from self.summariser.compact(inputs.summary, max_chars)
        self.stats.summariser_calls = self.summariser.calls
        if len(result.text) >= len(inputs.summary):
            return False
        self.store.set_summary(self.agent_id, result.text)
        inputs.summary = result.text
        yield SummaryEvent(result.text, result.method, result.usage)  # type: ignore[arg-type]
        return True

    # ---------------------------------------------------------------- overflow
    def on_overflow(self, inputs: ContextInputs, request: ModelRequest,
                    actual: int | None) -> Generator[Event, None, None]:
        """The provider said the prompt was too long: learn from it, then make room. The
        agent's next `prepare` clips the current turn if it alone is now over budget."""
        self.counter.observe_overflow(request, actual)  # so the request is rebuilt below
        if inputs.queue:
            yield from self.flush(inputs, self._build(inputs), by="overflow")

    # ---------------------------------------------------------------- clip current turn
    def _clip_step(self, inputs: ContextInputs, over: int) -> Generator[Event, None, bool]:
        ratio = self.counter.chars_per_token
        if self.counter.anchor_tokens:  # shrinking requests are estimated at the anchor ratio
            ratio = max(ratio, self.counter.anchor_chars / self.counter.anchor_tokens)
        event = _clip_largest(inputs.current, int(over * ratio * 1.2) + CLIP_KEEP)
        if event is None:
            return False
        self.stats.clips += 1
        yield event
        return True

    # ---------------------------------------------------------------- the model's tool
    def evict_tool(self, args: object, inputs: ContextInputs,
                   turn_id: int) -> tuple[ToolOutcome, list[Event]]:
        valid = sorted({m.turn_id for m in inputs.queue})
        listing = f"Turns you can evict: {turn_ranges(valid) or 'none'}."
        problem = _args_problem(args) or _ids_problem(args["turn_ids"], valid, turn_id)  # type: ignore[index]
        if problem:
            return _error(f"{problem} {listing}"), []
        assert isinstance(args, dict)
        ids = sorted(set(args["turn_ids"]))
        summary = (args.get("summary") or "").strip() or deterministic_summary(
            [t for t in group_turns(inputs.queue) if t.id in ids])
        before = self._build(inputs).estimated_tokens
        merged = merge_summary(inputs.summary, f"Turns {turn_ranges(ids)}: {summary}")
        self._evict(inputs, ids, merged)
        self.stats.model_evictions += 1
        self.alert_turn = None  # the model acted on the alert
        now = self._build(inputs).estimated_tokens
        if now < self.level(self.settings.warn_fraction):
            self._reset_alert(inputs)
        freed = max(0, before - now)
        text = (f"Evicted turns {turn_ranges(ids)}: about {freed:,} tokens freed. The context is now "
                f"about {now:,} tokens ({100 * now / self.budget:.0f}% of {self.budget:,}). The "
                "turns stay searchable with conversation_search.")
        events: list[Event] = [EvictionEvent(ids, freed, "model", summary, now, self.budget),
                               SummaryEvent(merged, "model")]
        return ToolOutcome(text, False, f"evicted turns {turn_ranges(ids)} · {freed:,} tokens"), events


def _args_problem(args: object) -> str | None:
    # Own checks rather than memory.check_arguments: its messages call every array
    # "a list of strings", and the model needs to hear "integer turn ids".
    if not isinstance(args, dict):
        return 'The input must be an object: {"turn_ids": [3, 4], "summary": "..."}.'
    unknown = sorted(set(args) - {"turn_ids", "summary"})
    if unknown:
        return f"Unknown argument {unknown[0]!r}; evict_turns takes turn_ids and summary."
    ids = args.get("turn_ids")
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        return f"turn_ids must be a list of integer turn ids, got {ids!r:.60}."
    if not isinstance(args.get("summary", ""), (str, type(None))):
        return "summary must be a string."
    return None


def _ids_problem(ids: list[int], valid: list[int], turn_id: int) -> str | None:
    if not ids:
        return "turn_ids is empty: name at least one turn."
    if turn_id in ids:
        return f"Turn {turn_id} is the current turn and cannot be evicted."
    unknown = sorted({i for i in ids if i not in valid})
    if unknown:
        return f"Turn ids not in context: {', '.join(map(str, unknown))}."
    return None


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(text, True, f"evict_turns failed: {text.split('.')[0]}")


def turn_ranges(ids: list[int]) -> str:
    """[3,4,5,9] → '3–5, 9'"""
    spans: list[list[int]] = []
    for i in sorted(set(ids)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


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
    """Clip the largest visible string of the current turn (a text, a tool result, or an
    argument of a tool call) by `cut` chars, re-cutting from the stored original so markers
    never stack. Only context_content changes: the stored message keeps the full text."""
    best: tuple[int, Message, int, tuple[str, ...]] | None = None
    for m in current:
        for i, b in enumerate(m.api_content()):
            for path in _clip_slots(b):
                visible = _visible_chars(_get(b, path), _get(m.content[i], path))
                if visible and (best is None or visible > best[0]):
                    best = (visible, m, i, path)
    if best is None or best[0] < MIN_CLIP_CHARS:
        return None
    visible, msg, index, path = best
    original = _get(msg.content[index], path)
    keep = max(CLIP_KEEP, visible - cut)
    how = {"text": "search it with conversation_search.",
           "content": "ask for a narrower result (another query or page).",
           "input": "the call itself ran with the full argument."}[path[0]]
    content = copy.deepcopy(msg.api_content())
    _set(content[index], path, original[:keep] + CLIP_MARKER.format(
        cut=len(original) - keep, total=len(original), how=how))
    msg.context_content = content
    what = {"text": "your message" if msg.role == "user" else "a reply",
            "content": "a tool result", "input": "a tool call's argument"}[path[0]]
    return ClipEvent(what, len(original), keep)


def _clip_slots(block: dict[str, Any]) -> list[tuple[str, ...]]:
    kind = block.get("type")
    if kind == "text":
        return [("text",)]
    if kind == "tool_result":
        return [("content",)]
    if kind == "tool_use" and isinstance(block.get("input"), dict):
        return [("input", k) for k, v in block["input"].items() if isinstance(v, str)]
    return []


def _get(block: dict[str, Any], path: tuple[str, ...]) -> object:
    value: Any = block
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(block: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    for key in path[:-1]:
        block = block[key]
    block[path[-1]] = value


def _visible_chars(sent: object, original: object) -> int:
    """How many chars of the original a (possibly clipped) string still shows."""
    if not isinstance(sent, str) or not isinstance(original, str):
        return 0
    if sent != original and CLIP_NOTE in sent:
        return sent.rindex(CLIP_NOTE)
    return len(sent)

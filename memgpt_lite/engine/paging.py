"""The paging controller (docs/memory.md): the context window is RAM, and the model decides
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

from collections.abc import Generator
from typing import Any

from memgpt_lite.engine import prompts
from memgpt_lite.engine.attachments import image_tokens
from memgpt_lite.engine.config import Settings, setting_names
from memgpt_lite.engine.context import (
    BuiltContext,
    ContextBuilder,
    ContextInputs,
    message_tokens,
)
from memgpt_lite.engine.events import (
    Event,
    EvictionEvent,
    FoldEvent,
    NoticeEvent,
    PressureAlertEvent,
    SummaryEvent,
)
from memgpt_lite.engine.memory import ToolOutcome
from memgpt_lite.engine.tool_schemas import MAX_TEXT, preview
from memgpt_lite.engine.records import ModelRequest, Turn
from memgpt_lite.engine.shrink import CLIP_KEEP, clip_largest, fold_content, tool_names
from memgpt_lite.engine.store import Store
from memgpt_lite.engine.summariser import Summariser, deterministic_summary, merge_summary
from memgpt_lite.engine.text import clean_value
from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.engine.turns import first_words, group_turns, turn_chars, turn_ranges

MAX_EVICT = 1_000  # turn ids in one evict_turns call
MAX_TURN_ID = 2**53  # any turn id there can be, and no number SQLite cannot hold
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
            "turn_ids": {"type": "array", "maxItems": MAX_EVICT,
                         "items": {"type": "integer", "minimum": 1, "maximum": MAX_TURN_ID},
                         "description": "Ids of the turns to evict, as listed in the alert."},
            "summary": {"type": "string", "maxLength": MAX_TEXT,
                        "description": "What the evicted turns contained that still matters: "
                                       "goals, decisions with reasons, open questions, "
                                       "preferences, concrete values."},
        },
        "required": ["turn_ids", "summary"],
        "additionalProperties": False,
    },
}

RISE_STEP = 0.05  # re-alert only when usage rose by 5% of the budget since the last alert
SUMMARY_CAP = 0.20  # a running summary above this share of the budget is compacted
ALERT_TURNS = 40  # the alert lists at most this many (oldest) turns: it must stay small itself
FOLD_SHARE = 0.10  # a tool result above this share of the budget is bulky, whatever the setting
MIN_FOLD_CHARS = 600  # below this a stub would save next to nothing
FIT_ROUNDS = 16
MIN_SUMMARY_CHARS = 200  # the fit never halves a summary below this


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
        self.alert_tokens: int | None = None  # usage at the last alert (None: no pressure)
        self.alert_turn: int | None = None  # turn of an alert the model has not acted on
        self._shown: str | None = None  # the alert text now in the tail
        self.on_demand = False  # /compact: the alert is shown whatever the pressure
        self._said_over_budget = False  # the notice that nothing more fits was given

    def state(self) -> dict[str, int | None]:
        """The alert state, stored with the agent so that a restart neither repeats an
        alert nor forgets that the model ignored one."""
        return {"alert_tokens": self.alert_tokens, "alert_turn": self.alert_turn}

    def restore(self, state: object) -> None:
        if isinstance(state, dict):
            for key in ("alert_tokens", "alert_turn"):
                value = state.get(key)
                setattr(self, key, value if isinstance(value, int) and
                        not isinstance(value, bool) else None)

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
            cap = self._summary_cap_chars(inputs.summary)
            if (yield from self._compact_summary(inputs, cap)):
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
            if not (yield from self._clip_step(inputs, built, over)):
                # Shortened, never erased: below the floor, halving saves next to nothing.
                half = len(inputs.summary) // 2
                shorter = half >= MIN_SUMMARY_CHARS and (yield from self._compact_summary(
                    inputs, half))
                if not shorter:
                    break  # nothing left to evict, clip or shorten
            built = self._build(inputs)
        # Said once while it lasts: every call of every turn would repeat it.
        over = built.estimated_tokens > self.budget
        if over and not self._said_over_budget:
            yield NoticeEvent(self._over_budget(built.estimated_tokens, inputs), "warning")
        self._said_over_budget = over
        return built

    def _over_budget(self, tokens: int, inputs: ContextInputs) -> str:
        """Name what does not fit (the message's images, which cannot be clipped) and the
        setting to change: the window, or max output tokens when they take the larger share
        of it (the budget is the window minus both)."""
        s = self.settings
        fix = f"raise the context window ({setting_names('context_window')})"
        images = self._images_over(inputs, tokens)
        if images:
            return f"The request is about {tokens:,} tokens, over the budget of " \
                   f"{self.budget:,}: {images}"
        if s.max_output_tokens > s.context_window // 2:
            fix = (f"lower max output tokens ({setting_names('max_output_tokens')}, now "
                   f"{s.max_output_tokens:,}) or {fix}")
        return (f"The request is about {tokens:,} tokens, over the budget of {self.budget:,}, "
                "even with nothing left to evict or clip: the tools, system prompt and core "
                f"memory alone are too big; {fix}.")

    def no_room(self, inputs: ContextInputs) -> str:
        """Why a call the provider refused twice is not sent again: the message's images,
        when they are what is over (a /retry would fail the same way), else the queue."""
        images = self._images_over(inputs, self._build(inputs).estimated_tokens)
        return images[0].upper() + images[1:] if images else (
            "The conversation does not fit the model's context even after evicting old turns.")

    def _images_over(self, inputs: ContextInputs, tokens: int) -> str | None:
        """The sentence for the current turn's images when they alone are more than the
        request is over the budget: nothing else left to clip, and they cannot be."""
        costs = [image_tokens(b) for m in inputs.current for b in m.api_content()
                 if b.get("type") == "image"]
        if not costs or sum(costs) < tokens - self.budget:
            return None
        return (f"the {len(costs)} image{'s' if len(costs) > 1 else ''} of this message take "
                f"about {sum(costs):,} tokens and cannot be clipped, more than the context has "
                f"room for besides the tools, system prompt and core memory; send fewer at "
                f"once or raise the context window ({setting_names('context_window')}).")

    # ---------------------------------------------------------------- alert
    def _alert(self, inputs: ContextInputs, turn_id: int,
               built: BuiltContext) -> Generator[Event, None, BuiltContext]:
        tokens = built.estimated_tokens
        demanded, self.on_demand = self.on_demand, False  # on the turn's first call only
        if (tokens < self.level(self.settings.warn_fraction) and not demanded) \
                or not inputs.queue:
            self._reset_alert(inputs)
            return built
        text = self.alert_message(inputs, turn_id, tokens)
        if demanded or self.alert_tokens is None or \
                tokens >= self.alert_tokens + self.level(RISE_STEP):
            self.alert_tokens, self.alert_turn = tokens, turn_id
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
                f" · {first_words(t, 10, self.counter.rule)}" for t in turns[:ALERT_TURNS]]
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
        names = tool_names(inputs.queue)
        min_chars = self._fold_min_chars()
        folded = []
        for m in inputs.queue:
            stub = fold_content(m.api_content(), names, min_chars)
            if stub is not None:
                m.context_content = stub
                self.store.set_context_content(self.agent_id, m.id, stub)  # type: ignore[arg-type]
                folded.append(m.id)
        if not folded:
            return before
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
        ids = [t.id for t in evict]
        self._evict(inputs, ids, result.text)
        self._reset_alert(inputs)
        after = self._build(inputs)
        now = after.estimated_tokens
        yield EvictionEvent(ids, max(0, before.estimated_tokens - now), by,  # type: ignore[arg-type]
                            result.text, now, self.budget)
        yield SummaryEvent(result.text, result.method, result.usage)  # type: ignore[arg-type]
        return after

    def compact(self, inputs: ContextInputs) -> Generator[Event, None, None]:
        """/compact when the model evicted nothing: the oldest turns go (at least one),
        down to the flush target, or to half the queue when the context is below it."""
        built = self._build(inputs)
        queue = message_tokens(self.counter, inputs.queue)
        target = min(self.level(self.settings.flush_target_fraction),
                     built.estimated_tokens - queue // 2)
        evict = self._oldest_down_to(inputs, built, target, at_least_one=True)
        if not evict:
            return
        result = yield from self.summariser.summarise(inputs.summary, evict)
        ids = [t.id for t in evict]
        self._evict(inputs, ids, result.text)
        self._reset_alert(inputs)
        now = self._build(inputs).estimated_tokens
        yield EvictionEvent(ids, max(0, built.estimated_tokens - now), "compact",  # type: ignore[arg-type]
                            result.text, now, self.budget)
        yield SummaryEvent(result.text, result.method, result.usage)  # type: ignore[arg-type]

    def _oldest_down_to(self, inputs: ContextInputs, built: BuiltContext, target: int,
                        at_least_one: bool) -> list[Turn]:
        """The oldest turns whose removal brings the request to `target`, measured in request
        size so the estimate matches the counter's own (anchored) one."""
        chars = self.counter.request_size(built.request)
        evict: list[Turn] = []
        for turn in group_turns(inputs.queue):
            if self.counter.estimate_request_chars(chars) <= target and (evict or not at_least_one):
                break
            evict.append(turn)
            chars -= turn_chars(turn, self.counter.rule)
        return evict

    def _evict(self, inputs: ContextInputs, turn_ids: list[int], summary: str) -> None:
        gone = set(turn_ids)
        with self.store.transaction():
            self.store.set_in_context(self.agent_id, turn_ids, False)
            self.store.set_summary(self.agent_id, summary)
        inputs.queue = [m for m in inputs.queue if m.turn_id not in gone]
        inputs.summary = summary

    def _summary_cap_chars(self, summary: str = "") -> int:
        """The summary's cap in characters of text like `summary`: a CJK summary cut to the
        cap's bytes would still be over it, and compacted again on every turn."""
        units = int(self.level(SUMMARY_CAP) * self.counter.chars_per_token / 1.2)
        return self.counter.chars_for(units, summary)

    def _summary_too_big(self, inputs: ContextInputs) -> bool:
        return self.counter.estimate_text(inputs.summary) > self.level(SUMMARY_CAP)

    def _compact_summary(self, inputs: ContextInputs,
                         max_chars: int) -> Generator[Event, None, bool]:
        """True when the summary got shorter."""
        result = yield from self.summariser.compact(inputs.summary, max_chars)
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
    def _clip_step(self, inputs: ContextInputs, built: BuiltContext,
                   over: int) -> Generator[Event, None, bool]:
        # Cut what the estimate says is over, no more: the fit clips again while it is still
        # over, and a cut made larger "to be safe" throws away room the text would have had.
        cut = self.counter.chars_worth(self.counter.request_size(built.request), over) + CLIP_KEEP
        event = clip_largest(inputs.current, cut, self.counter.kept_chars)
        if event is None:
            return False
        yield event
        return True

    # ---------------------------------------------------------------- the model's tool
    def evict_tool(self, args: object, inputs: ContextInputs,
                   turn_id: int) -> tuple[ToolOutcome, list[Event]]:
        args = clean_value(args)  # the model's JSON may hold lone surrogates
        valid = sorted({m.turn_id for m in inputs.queue})
        listing = f"Turns you can evict: {turn_ranges(valid) or 'none'}."
        problem = _args_problem(args) or _ids_problem(args["turn_ids"], valid, turn_id)  # type: ignore[index]
        if problem:
            return _error(f"{problem} {listing}"), []
        assert isinstance(args, dict)
        ids = sorted(set(args["turn_ids"]))
        summary = (args.get("summary") or "").strip() or deterministic_summary(
            [t for t in group_turns(inputs.queue) if t.id in ids], self.counter.rule)
        before = self._build(inputs).estimated_tokens
        merged = merge_summary(inputs.summary, f"Turns {turn_ranges(ids)}: {summary}")
        self._evict(inputs, ids, merged)
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
        return f"Unknown argument {preview(unknown[0])}; evict_turns takes turn_ids and summary."
    ids = args.get("turn_ids")
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        return f"turn_ids must be a list of integer turn ids, got {preview(ids)}."
    if len(ids) > MAX_EVICT or not all(1 <= i <= MAX_TURN_ID for i in ids):
        return (f"turn_ids must hold at most {MAX_EVICT:,} turn ids, each from 1 to "
                f"{MAX_TURN_ID:,}.")
    summary = args.get("summary", "")
    if not isinstance(summary, (str, type(None))):
        return "summary must be a string."
    if summary and len(summary) > MAX_TEXT:
        return f"summary is {len(summary):,} characters long; at most {MAX_TEXT:,} are accepted."
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
    # The chat's line is the first sentence: a dot inside a number it quotes ("got [7.0]")
    # does not end it.
    first = text.split(". ")[0].rstrip(".")
    return ToolOutcome(text, True, f"evict_turns failed: {first}")

















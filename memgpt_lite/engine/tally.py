"""One count of what a stream of agent events did.

The chat's status line and `/tokens`, replay reports, eval totals and the benchmarks all
count with a `Tally`, so a number means the same thing wherever it is shown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memgpt_lite.engine.events import Event
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.tokens import cost_usd, price_of


@dataclass
class Tally:
    """Add every event with `add`; read the counts off the fields.

    `usage` and `cost_usd` are the conversation's own model calls (from UsageEvents);
    `summary_usage` and `summary_cost_usd` the summariser's (from its responses), priced at
    the model that answered. `paid_*` adds both: every call that costs money. A call on a
    model with no price adds its tokens but no cost, and its model to `unpriced`: a cost
    shown while `unpriced` is not empty is a part, never the whole (the terminal says so)."""

    turns: int = 0  # turns that ended (completed or not)
    completed_turns: int = 0
    model_calls: int = 0  # every call sent: chat and summariser
    summary_calls: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    alerts: int = 0
    model_evictions: int = 0  # chosen by the model (evict_turns)
    forced_flushes: int = 0  # by the pager (flush or overflow)
    folds: int = 0
    clips: int = 0
    errors: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    summary_usage: Usage = field(default_factory=Usage)
    summary_cost_usd: float = 0.0
    max_request_tokens: int = 0  # the largest chat request, by its true size
    context_tokens: int = 0  # the size of the last chat request
    # The models called that have no price, by kind of call (the `by_kind` names).
    unpriced_by_kind: dict[str, set[str]] = field(
        default_factory=lambda: {"chat": set(), "summariser": set()})
    _calling: str = field(default="", repr=False)  # the model of the call under way

    def add(self, event: Event) -> None:
        counter = getattr(self, f"_on_{event.kind}", None)
        if counter is not None:
            counter(event)

    def add_all(self, events: list[Event]) -> Tally:
        for event in events:
            self.add(event)
        return self

    @property
    def tool_call_count(self) -> int:
        return sum(self.tool_calls.values())

    @property
    def paid_usage(self) -> Usage:
        return self.usage + self.summary_usage

    @property
    def paid_cost_usd(self) -> float:
        return self.cost_usd + self.summary_cost_usd

    @property
    def unpriced(self) -> set[str]:
        return set().union(*self.unpriced_by_kind.values())

    def by_kind(self) -> list[tuple[str, int, Usage, float]]:
        """(kind, calls, usage, cost) of each kind of paid call: the chat's own calls and the
        summariser's (an eval's judge is counted by the eval's report)."""
        return [("chat", self.model_calls - self.summary_calls, self.usage, self.cost_usd),
                ("summariser", self.summary_calls, self.summary_usage, self.summary_cost_usd)]

    def _on_model_call(self, event: Event) -> None:
        self.model_calls += 1
        if event.purpose == "summary":  # type: ignore[union-attr]
            self.summary_calls += 1
        # Recordings of older versions do not name it: their costs stand as recorded.
        self._calling = event.model or ""  # type: ignore[union-attr]

    def _on_response(self, event: Event) -> None:
        if event.purpose == "summary":  # type: ignore[union-attr]
            response = event.response  # type: ignore[union-attr]
            model = response.model or self._calling  # a test double may not say
            self.summary_usage = self.summary_usage + response.usage
            self.summary_cost_usd += cost_usd(model, response.usage)
            self._note_price("summariser", model)

    def _note_price(self, kind: str, model: str) -> None:
        if model and price_of(model) is None:
            self.unpriced_by_kind[kind].add(model)

    def _on_usage(self, event: Event) -> None:
        if event.purpose == "summary":  # type: ignore[union-attr]
            self.summary_usage = self.summary_usage + event.usage  # type: ignore[union-attr]
            self.summary_cost_usd += event.cost_usd  # type: ignore[union-attr]
            self._note_price("summariser", self._calling)
            return
        self._note_price("chat", self._calling)
        self.usage = self.usage + event.usage  # type: ignore[union-attr]
        self.cost_usd += event.cost_usd  # type: ignore[union-attr]
        self.context_tokens = event.context_tokens  # type: ignore[union-attr]
        self.max_request_tokens = max(self.max_request_tokens,
                                      event.usage.total_input)  # type: ignore[union-attr]

    def _on_tool_call(self, event: Event) -> None:
        self.tool_calls[event.call.name] += 1  # type: ignore[union-attr]

    def _on_pressure_alert(self, event: Event) -> None:
        self.alerts += 1

    def _on_eviction(self, event: Event) -> None:
        if event.by == "model":  # type: ignore[union-attr]
            self.model_evictions += 1
        else:
            self.forced_flushes += 1

    def _on_fold(self, event: Event) -> None:
        self.folds += 1

    def _on_clip(self, event: Event) -> None:
        self.clips += 1

    def _on_error(self, event: Event) -> None:
        self.errors += 1

    def _on_turn_end(self, event: Event) -> None:
        self.turns += 1
        self.completed_turns += bool(event.completed)  # type: ignore[union-attr]

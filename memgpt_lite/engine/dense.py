"""The dense side of recall search for one agent, live or replayed.

`DenseRecall` embeds the query, scans the agent's vectors of the embedder's model and hands
the best rows to the store's search, which fuses them with the keyword candidates. Whatever
goes wrong (the endpoint times out, answers 400 or vectors of the wrong size, the model
cannot load) the search goes on with keywords alone: the first failure of a session gives
one notice, and the dense side rests for `RETRY_AFTER` seconds before it tries again.

Every search it serves yields a `DenseSearchEvent` (ids, cosines, the fusion weight, or the
error). A recording keeps those lines, and `RecordedDense` serves them back in order, so a
strict replay fuses exactly the live candidates with no embedder and no vectors: which rows
had vectors at that moment (background indexing runs beside the chat) does not matter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from memgpt_lite.engine.embeddings import Embedder, EmbeddingError
from memgpt_lite.engine.events import DenseSearchEvent, Event, NoticeEvent
from memgpt_lite.engine.search import DENSE_CANDIDATES, KEYWORD_WEIGHT

RETRY_AFTER = 60.0  # seconds without dense search after a failure


class DenseSide(Protocol):
    """What the memory tools ask of a dense side: the dense candidates of one search
    ({row id: cosine}, or None for keywords alone) and the events to yield about it."""

    def rank(self, tool: str, kind: str, query: str, start_date: str | None = None,
             end_date: str | None = None) -> tuple[dict[int, float] | None, float, list[Event]]:
        ...


class DenseRecall:
    """The live dense side: `embedder` over the agent's stored vectors of its model."""

    def __init__(self, store: Any, agent_id: int, embedder: Embedder, *,
                 keyword_weight: float = KEYWORD_WEIGHT, limit: int = DENSE_CANDIDATES,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.agent_id, self.embedder = store, agent_id, embedder
        self.keyword_weight, self.limit, self.clock = keyword_weight, limit, clock
        self.resting_until = 0.0
        self.noticed = False
        self.last_error = ""

    def rank(self, tool: str, kind: str, query: str, start_date: str | None = None,
             end_date: str | None = None) -> tuple[dict[int, float] | None, float, list[Event]]:
        try:
            if self.resting():
                raise EmbeddingError("dense search is resting after a failure")
            scores = self._scores(kind, query, start_date, end_date)
        except EmbeddingError as exc:
            return None, self.keyword_weight, self._failed(tool, query, str(exc))
        event = DenseSearchEvent(tool, query, self.embedder.name, self.keyword_weight,
                                 list(scores), list(scores.values()))
        return scores, self.keyword_weight, [event]

    def _scores(self, kind: str, query: str, start_date: str | None,
                end_date: str | None) -> dict[int, float]:
        vector = self.embedder.embed([query], query=True)
        stored = self.store.vector_dim(self.agent_id, self.embedder.name)
        if len(vector) != 1 or (stored is not None and vector.shape[1] != stored):
            raise EmbeddingError(f"The embedder {self.embedder.name} returned a query vector of "
                                 f"{vector.shape[-1]} dimensions where the stored vectors have "
                                 f"{stored}; run `memgpt-lite index` to embed them again.")
        return self.store.dense_scores(self.agent_id, kind, self.embedder.name, vector[0],
                                       limit=self.limit, start_date=start_date,
                                       end_date=end_date)

    def resting(self) -> bool:
        """True for RETRY_AFTER seconds after a failure: the endpoint is left alone."""
        return self.clock() < self.resting_until

    def failed(self, reason: str) -> None:
        """Rest the dense side (also called by the background indexer when it fails)."""
        self.resting_until = self.clock() + RETRY_AFTER
        self.last_error = reason

    def _failed(self, tool: str, query: str, reason: str) -> list[Event]:
        if not reason.startswith("dense search is resting"):
            self.failed(reason)
        events: list[Event] = [DenseSearchEvent(tool, query, self.embedder.name,
                                                self.keyword_weight, [], [], reason)]
        if not self.noticed:
            self.noticed = True
            shown = self.last_error or reason
            events.append(NoticeEvent(f"Searching by keywords only: {shown.rstrip('.')}. "
                                      f"Meaning-based search retries in {RETRY_AFTER:.0f} s.",
                                      "warning"))
        return events


class RecordedDense:
    """The dense side of a replay: the recorded `dense_search` lines of one turn, in order.
    A search with no line left was keyword-only in the live session."""

    def __init__(self, lines: list[dict[str, Any]], notices: list[dict[str, Any]] | None = None):
        self.pending = list(lines)
        self.notices = [n.get("message", "") for n in notices or []]

    def rank(self, tool: str, kind: str, query: str, start_date: str | None = None,
             end_date: str | None = None) -> tuple[dict[int, float] | None, float, list[Event]]:
        if not self.pending:
            return None, KEYWORD_WEIGHT, []
        line = self.pending.pop(0)
        event = DenseSearchEvent(line["tool"], line["query"], line["model"],
                                 float(line["keyword_weight"]), list(line["ids"]),
                                 list(line["scores"]), line.get("error"))
        events: list[Event] = [event]
        notice = next((n for n in self.notices if n.startswith("Searching by keywords only")),
                      None)
        if event.error and notice is not None:
            self.notices.remove(notice)
            events.append(NoticeEvent(notice, "warning"))
        if event.error:
            return None, event.keyword_weight, events
        return dict(zip(event.ids, event.scores)), event.keyword_weight, events

"""Embedding stored text: in the background after each turn, and as a backfill.

`attach_embedder(agent, embedder)` turns on hybrid search for an agent: its memory tools get
a `DenseRecall`, and a `BackgroundIndexer` thread embeds every message and passage stored
from then on, woken after each committed turn (never before the reply: the turn is already
in the store), in batches, through a store connection of its own. Rows stored before (or by
a session without an embedder) are embedded by `index_agent`, which `memgpt-lite index`
runs with a progress bar; until then keyword search still finds them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from memgpt_lite.engine.dense import DenseRecall
from memgpt_lite.engine.embeddings import Embedder, EmbeddingError
from memgpt_lite.engine.store.base import ConnectionLost, StoreError
from memgpt_lite.engine.store.vectors import KINDS

BATCH = 32  # rows per embedding call: a turn's messages in one or two calls


class BackgroundIndexer:
    """Embeds the agent's rows stored after `start()` in a daemon thread. A failure rests
    the dense side (one notice, at the next search; no call while it rests) and the rows
    wait for a later wake."""

    def __init__(self, open_store: Callable[[], Any], agent_id: int, dense: DenseRecall):
        """`open_store`: a new store on the agent's data (the thread's own connection)."""
        self.agent_id, self.dense = agent_id, dense
        self._open_store = open_store
        self._wake, self._stop = threading.Event(), threading.Event()
        self._idle, self._closing = threading.Event(), threading.Event()
        self._idle.set()  # nothing woken for yet
        self.floor: dict[str, int] = {}
        self.embedded = 0
        self.thread = threading.Thread(target=self._run, name="memgpt-lite-indexer", daemon=True)

    def start(self, store: Any) -> BackgroundIndexer:
        """Remember where the agent's rows end now (older rows are the backfill's), start."""
        for kind in KINDS:
            self.floor[kind] = store.last_row_id(self.agent_id, kind)
        self.thread.start()
        return self

    def wake(self, turn_id: int | None = None) -> None:
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until everything woken for is embedded (tests, `eval`); True if it was."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Embed what the session added (for up to `timeout` seconds), then stop; what is
        left waits for `memgpt-lite index`. `close(0)` stops without waiting for that."""
        self._closing.set()
        self._wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout)
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(2.0)

    def _run(self) -> None:
        store = self._open_store()
        try:
            while not (self._stop.is_set() or self._closing.is_set()):
                self._wake.wait()
                self._wake.clear()
                if not self._stop.is_set():
                    store = self._drained(store)
                if not self._wake.is_set():
                    self._idle.set()
        finally:
            if store is not None:
                store.close()

    def _drained(self, store: Any, again: bool = True) -> Any:
        """Drain on `store` and return the store to use next: after its connection was lost
        (the database restarted) a new one is opened and the drain tried once more; while
        the server is still away, the rows wait for a later wake."""
        try:
            store = store if store is not None else self._open_store()
        except StoreError:  # the server is still away
            return None
        try:
            self._drain(store)
        except ConnectionLost:
            with contextlib.suppress(Exception):
                store.close()
            return self._drained(None, again=False) if again else None
        return store

    def _drain(self, store: Any) -> None:
        """Embed what is new; rows left over (a failure, a rest) wait for the next wake."""
        embedder = self.dense.embedder
        if self.dense.resting():
            return
        for kind in KINDS:
            while not self._stop.is_set():
                rows = store.texts_to_embed(self.agent_id, kind, embedder.name, limit=BATCH,
                                            after_id=self.floor[kind])
                if not rows:
                    break
                texts = [text for _, text in rows]
                try:
                    vectors = embedder.embed(texts)
                    _check_size(store, self.agent_id, embedder.name, vectors)
                except EmbeddingError as exc:
                    self.dense.failed(str(exc))
                    return
                self.embedded += store.put_vectors(self.agent_id, kind, embedder.name,
                                                   [i for i, _ in rows], vectors, texts)
                self.floor[kind] = rows[-1][0]


def _check_size(store: Any, agent_id: int, model: str, vectors: Any) -> None:
    """Refuse vectors of another size than the agent's stored ones of `model`: an endpoint
    serves whatever model it has loaded under the name it is given, and vectors of two
    models cannot be ranked together (`index_agent` re-embeds the old ones instead)."""
    stored = store.vector_dim(agent_id, model)
    if stored is not None and vectors.shape[1] != stored:
        raise EmbeddingError(f"The embedder {model} returned vectors of {vectors.shape[1]} "
                             f"dimensions where the stored vectors have {stored}; run "
                             "`memgpt-lite index` to embed them again.")


def attach_embedder(agent: Any, embedder: Embedder, *,
                    keyword_weight: float | None = None) -> BackgroundIndexer:
    """Hybrid search for `agent` from now on; returns the started indexer (close it when
    the session ends)."""
    options = {} if keyword_weight is None else {"keyword_weight": keyword_weight}
    dense = DenseRecall(agent.store, agent.id, embedder, **options)
    agent.tools.dense = dense
    indexer = BackgroundIndexer(agent.store.reopen, agent.id, dense).start(agent.store)
    agent.after_commit.append(indexer.wake)
    return indexer


def index_agent(store: Any, agent_id: int, embedder: Embedder, *,
                progress: Callable[[int, int], None] | None = None,
                batch: int = BATCH) -> int:
    """Embed every row of the agent lacking a vector of the embedder's model (vectors of
    other models are dropped first: a switch of model re-indexes). Returns how many rows
    were embedded; raises EmbeddingError when the embedder fails (what is done stays).
    Vectors of the model's name but another size are dropped too: an endpoint that loaded
    another model answers under the same name, and that is a switch of model as well."""
    dim = None
    if store.vector_dim(agent_id, embedder.name) is not None:
        dim = embedder.embed(["dimension check"]).shape[1]
    store.delete_vectors(agent_id, except_model=embedder.name, except_dim=dim)
    counts = store.vector_counts(agent_id, embedder.name)
    total = sum(c["missing"] for c in counts.values())
    done = 0
    if progress:
        progress(done, total)
    for kind in KINDS:
        after = 0
        while rows := store.texts_to_embed(agent_id, kind, embedder.name, limit=batch,
                                           after_id=after):
            texts = [text for _, text in rows]
            done += store.put_vectors(agent_id, kind, embedder.name, [i for i, _ in rows],
                                      embedder.embed(texts), texts)
            after = rows[-1][0]
            if progress:
                progress(done, total)
    return done

"""The store written once: every domain (agents, blocks and scopes, recall, archive, turns,
vectors, forget, snapshot rows) over the database seam, as one object that keeps the `Store`
protocol (store/base.py). A backend (`sqlite/`, `postgres/`) makes it with its own database
and keyword index, and adds what only it does: its lock, its migrations, wiping what it
freed, checking its files or server.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from memgpt_lite.engine.store.base import AgentLockLike
from memgpt_lite.engine.store.forget import ForgetMixin
from memgpt_lite.engine.store.history import HistoryMixin
from memgpt_lite.engine.store.turns import TurnsMixin
from memgpt_lite.engine.store.vectors import VectorsMixin


class SQLStore(TurnsMixin, VectorsMixin, ForgetMixin, HistoryMixin, ABC):
    """All persistent memory of agents, on one database (the `base.Store` protocol). Every
    read and write takes an agent id and touches only that agent's rows. Methods commit on
    their own unless called inside `transaction()`, whose nested uses join the outermost
    one. Not safe for concurrent use from several threads (`reopen()` gives another
    connection); other processes are fine."""

    @abstractmethod
    def reopen(self) -> SQLStore:
        ...

    @abstractmethod
    def agent_lock(self, name: str) -> AgentLockLike:
        ...

    @abstractmethod
    def applied_migrations(self) -> list[str]:
        ...

    def schema_version(self) -> int:
        return len(self.applied_migrations())

    @property
    def damage(self) -> Exception | None:
        return None

    def integrity_problems(self) -> list[str]:
        """[] when the schema is complete and every agent's search index agrees with its
        stored text."""
        problems: list[str] = []
        for agent in self.list_agents():
            problems += self.index.problems(agent.id, agent.name)
        return problems

    def rebuild_search_index(self, on_agent: Callable[[str], None] | None = None) -> None:
        """Re-index every agent's stored text, each agent in one transaction; `on_agent`
        hears each agent's name once its index is rebuilt (for a progress display)."""
        for agent in self.list_agents():
            with self.transaction():
                self.index.rebuild(agent.id)
            if on_agent is not None:
                on_agent(agent.name)

    @abstractmethod
    def wipe_freed(self) -> bool:
        """Leave no freed copy of deleted text where the backend can reach it; False when
        that could not be finished now."""
        ...

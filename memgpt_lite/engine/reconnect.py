"""The way back for a long-lived agent whose database connection was lost (a Postgres
restart, a network cut): a new connection, the agent's lock taken again on it, and
everything that held the old store pointed at the new one.

A turn cut off by the loss stays open in the database (its undo could not be written on a
dead connection); the agent's next turn undoes it on the new connection, by the same rule
that undoes a turn a killed process left open, so its message stays in recall once, marked
interrupted, and `Agent.retry()` sends that message again without storing it twice.
"""

from __future__ import annotations

import contextlib
from typing import Any

from memgpt_lite.engine.locking import DEFAULT_WAIT
from memgpt_lite.engine.store.base import ConnectionLost, Store, StoreError


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` is a store whose server went away (not damaged data, not a refused
    write, not a full disk or a locked file: those keep their meaning)."""
    return isinstance(exc, ConnectionLost)


def reconnect(agent: Any, wait: float = DEFAULT_WAIT) -> Store:
    """Give `agent` a new connection to its database and return the new store. StoreError
    (the old store kept) while the server cannot be reached; AgentBusyError when another
    process took the agent while its lock was gone with the old connection."""
    old = agent.store
    fresh = old.reopen()
    try:
        if agent.lock is not None:
            agent.lock.renew(wait)
        _keep_conversation(old, fresh, agent.id)
    except BaseException:
        with contextlib.suppress(Exception):
            fresh.close()
        raise
    agent.store = agent.tools.store = agent.pager.store = fresh
    agent.use_project(agent.project)  # the project a store shows an agent is its own
    dense = agent.tools.dense
    if dense is not None and hasattr(dense, "store"):
        dense.store = fresh
    with contextlib.suppress(Exception):  # the old connection is dead already
        old.close()
    return fresh


def _keep_conversation(old: Store, fresh: Store, agent_id: int) -> None:
    """The conversation chosen (`--resume`, `/new`) is the store's, not the database's:
    the new store works in the one the old one did."""
    try:
        conversation = old.current_conversation(agent_id)  # chosen: the old one asks nothing
    except StoreError:
        return
    if fresh.conversation(agent_id, conversation) is not None:
        fresh.use_conversation(agent_id, conversation)

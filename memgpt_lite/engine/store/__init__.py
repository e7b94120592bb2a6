"""Persistent memory: one `Store` per data directory (SQLite by default)."""

from memgpt_lite.engine.store.base import AgentRow, StoreError
from memgpt_lite.engine.store.sqlite import Store

__all__ = ["AgentRow", "Store", "StoreError"]

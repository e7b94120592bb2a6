"""What every store backend shares: its error type and the agent record."""

from __future__ import annotations

from dataclasses import dataclass, field


class StoreError(Exception):
    """The data file cannot be used; the message is one clear sentence for the user."""


@dataclass
class AgentRow:
    id: int
    name: str
    model: str
    settings: dict
    summary: str
    created_at: str
    last_used_at: str | None
    uid: str = ""  # stable across renames; recordings live under it
    state: dict = field(default_factory=dict)  # what the engine learned (see Agent)

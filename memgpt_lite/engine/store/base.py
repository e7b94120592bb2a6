"""What every store backend shares: its error type and the agent record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


class StoreError(Exception):
    """The data file cannot be used; the message is one clear sentence for the user."""


class BlockChanged(ValueError):
    """A block changed between reading it and writing it (another agent shares it): the
    write was refused so that the other edit is not lost. One sentence for the user."""


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


@dataclass
class AgentWatch:
    """What a recording of one agent must learn about state it does not own alone (see
    recording.py): `changed(label, value)` hears every read of a user-scope block whose
    value another agent wrote since this agent last read or wrote it; `passage_ids` collects
    the ids given to the agent's new passages (ids are global to the data dir)."""

    seen: dict[str, str]
    changed: Callable[[str, str], None]
    passage_ids: list[int] = field(default_factory=list)

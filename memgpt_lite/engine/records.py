"""Value records shared by the engine: stored messages and blocks, search results, and the
Messages API's request and response shapes.

Records are dataclasses; API wire shapes (content blocks, request bodies) stay plain dicts
so that what we store, send and record is exactly what the Messages API sees.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

Role = Literal["user", "assistant"]
ContentBlock = dict[str, Any]  # an Anthropic content block, e.g. {"type": "text", "text": "hi"}


def utc_iso(moment: datetime) -> str:
    """'YYYY-MM-DDTHH:MM:SSZ', the one time format of stored rows (a naive time is UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def zoned_iso(moment: datetime) -> str:
    """The moment with its own UTC offset ('YYYY-MM-DDTHH:MM:SS+01:00'); the same text as
    `utc_iso` for a time in UTC (or naive), so a recording of a UTC clock reads as before.
    A recording keeps the turn clock's readings so, and its replay tells the model the same
    local time (see turn_clock.py)."""
    offset = moment.utcoffset()
    if not offset:
        return utc_iso(moment)
    return moment.isoformat(timespec="seconds")


def now_iso() -> str:
    return utc_iso(datetime.now(timezone.utc))


def parse_iso(text: str) -> datetime:
    """A stored time (or any ISO 8601 time) as an aware datetime; naive means UTC."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def canonical_json(value: Any) -> str:
    """One stable JSON text for a value: sorted keys, no spaces, unicode kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- store records


@dataclass
class Message:
    """One stored message. `content` is the full original; `context_content` is what the
    FIFO queue sends instead when the message was folded or clipped (None = send `content`).
    `status` is "" for a message of a finished turn, "open" while its turn runs and
    "interrupted" for the user message of a turn that failed or was cancelled.
    `conversation_id`: the agent's conversation it belongs to (None: the one in use when it
    is stored)."""

    role: Role
    content: list[ContentBlock]
    turn_id: int
    id: int | None = None
    created_at: str | None = None  # ISO 8601 UTC, e.g. 2026-11-29T13:45:00Z
    in_context: bool = True
    context_content: list[ContentBlock] | None = None
    status: str = ""
    conversation_id: int | None = None

    def api_content(self) -> list[ContentBlock]:
        return self.context_content if self.context_content is not None else self.content

    def to_api(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.api_content()}


@dataclass
class Turn:
    """An atomic turn: one user input through the final assistant reply, kept whole."""

    id: int
    messages: list[Message]

    @property
    def created_at(self) -> str | None:
        return self.messages[0].created_at if self.messages else None


@dataclass
class Block:
    """A core memory block. Its scope is "agent" (the default: the agent's own), "user"
    (one block shared by every agent of the data dir that uses it) or "project" (one block
    per project root, seen by every agent working in `project`)."""

    label: str
    value: str
    limit: int
    scope: str = "agent"
    project: str = ""  # the project root, for a block in project scope

    @property
    def used(self) -> int:
        return len(self.value)


@dataclass
class SearchHit:
    id: int
    text: str
    created_at: str
    role: str | None = None  # messages only
    turn_id: int | None = None  # messages only
    tags: list[str] = field(default_factory=list)  # passages only
    score: float = 0.0
    status: str = ""  # messages only: "interrupted" when its turn failed or was cancelled
    # Messages only: the reply that followed the hit, shown with it (not a result of its own).
    context: list[SearchHit] = field(default_factory=list)
    conversation: int | None = None  # messages only: the agent's conversation it is from


@dataclass
class Conversation:
    """One of an agent's conversations (tasks): its own queue, running summary and pager
    state; core, archival memory and recall are the agent's. `title` is the one the user set
    ("" until then: `name` falls back to the first words of its first message)."""

    id: int
    started_at: str
    last_used_at: str
    title: str = ""
    summary: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    first_words: str = ""

    @property
    def name(self) -> str:
        return self.title or self.first_words or "(no messages yet)"


@dataclass
class PassageVersion:
    """A version of an archival passage that archival_update replaced (change "update") or
    archival_delete removed (change "delete"): kept as history, never searched."""

    id: int
    passage_id: int
    text: str
    tags: list[str]
    created_at: str  # when this version was written
    superseded_at: str
    change: str
    reason: str = ""
    turn_id: int | None = None  # the turn that replaced or removed it


@dataclass
class PoppedTurns:
    """What `Agent.pop_turns` undid: the turns removed from the queue and recall, the core
    memory blocks put back as they were before those turns, the passages they inserted
    that were deleted, the passages they updated or deleted that were put back, and the
    blocks and passages left as they are because a later edit changed them. `summarised`:
    those of the turns that had left the queue, whose words the running summary may keep
    (a pop cannot take a sentence back out of it)."""

    turn_ids: list[int] = field(default_factory=list)
    blocks_reverted: list[str] = field(default_factory=list)
    passages_deleted: list[int] = field(default_factory=list)
    blocks_kept: list[str] = field(default_factory=list)
    passages_restored: list[int] = field(default_factory=list)
    passages_kept: list[int] = field(default_factory=list)
    summarised: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.turn_ids)

    def memory_lines(self) -> list[str]:
        """What happened to memory, one line each (for /pop and /retry)."""
        lines = [f"core memory {label!r}: put back as it was before" for label in
                 self.blocks_reverted]
        lines += [f"archival passage #{i}: deleted" for i in self.passages_deleted]
        lines += [f"archival passage #{i}: put back as it was before"
                  for i in self.passages_restored]
        lines += [f"core memory {label!r}: left as it is (it was changed again since)"
                  for label in self.blocks_kept]
        lines += [f"archival passage #{i}: left as it is (it was changed again since)"
                  for i in self.passages_kept]
        if self.summarised:
            lines.append(summary_line(self.summarised))
        return lines


def summary_line(turn_ids: list[int]) -> str:
    """The one sentence on turns a pop took out of recall after they had left the queue:
    the running summary was written from them and is not rewritten."""
    which = ", ".join(map(str, turn_ids))
    return (f"turn{'s' if len(turn_ids) > 1 else ''} {which} had left the context queue "
            "already: the running summary may still hold what was said in "
            f"{'them' if len(turn_ids) > 1 else 'it'} (/pop cannot take that back; "
            "/forget WORDS removes its sentences)")


@dataclass
class SearchPage:
    hits: list[SearchHit]
    page: int
    pages: int
    total: int


# --------------------------------------------------------------------------- model I/O


@dataclass
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


def tool_calls_in(content: list[ContentBlock]) -> list[ToolCall]:
    return [ToolCall(b["id"], b["name"], b.get("input") or {})
            for b in content if b.get("type") == "tool_use"]


@dataclass
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False

    def to_block(self) -> ContentBlock:
        block: ContentBlock = {"type": "tool_result", "tool_use_id": self.tool_use_id,
                               "content": self.content}
        if self.is_error:
            block["is_error"] = True
        return block


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total_input(self) -> int:
        """The true size of the prompt: uncached + cache writes + cache reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Usage:
        d = d or {}
        return cls(*(int(d.get(k) or 0) for k in (
            "input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens")))


@dataclass
class ModelRequest:
    """Everything sent to the Messages API for one call, in API shape."""

    model: str
    max_tokens: int
    system: list[ContentBlock]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    thinking: dict[str, Any] | None = None
    tool_choice: dict[str, Any] | None = None

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                "system": self.system, "messages": self.messages}
        if self.tools:
            body["tools"] = self.tools
        if self.thinking:
            body["thinking"] = self.thinking
        if self.tool_choice:
            body["tool_choice"] = self.tool_choice
        return body

    # The body's canonical JSON (and its size under each token counting rule), made once:
    # estimating, digesting and calibrating all need it, and a built request is never
    # changed afterwards.
    _canonical: str | None = field(default=None, init=False, repr=False, compare=False)
    _sizes: dict[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = canonical_json(self.to_api())
        return self._canonical

    def digest(self) -> str:
        """Short sha256 of the body: what a recording stores and replay compares."""
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()[:16]


StopReason = str  # end_turn | tool_use | max_tokens | pause_turn | refusal | stop_sequence | model_context_window_exceeded


@dataclass
class ModelResponse:
    """A finished model response exactly as received (content blocks in API shape)."""

    content: list[ContentBlock]
    stop_reason: StopReason | None
    usage: Usage
    model: str = ""
    id: str = ""

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return tool_calls_in(self.content)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "content": self.content,
                "stop_reason": self.stop_reason, "usage": self.usage.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelResponse:
        return cls(content=list(d.get("content") or []), stop_reason=d.get("stop_reason"),
                   usage=Usage.from_dict(d.get("usage")), model=d.get("model", ""),
                   id=d.get("id", ""))

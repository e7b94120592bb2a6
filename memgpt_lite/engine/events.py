"""The events `Agent.step()` yields: the terminal renders them, the recorder stores them and
the tally counts them. A turn's first event is its `UserEvent` (the text as stored); the
only thing an observer learns outside these events is each clock reading (see
`Agent.observed`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

from memgpt_lite.engine.records import (
    ModelResponse,
    StopReason,
    ToolCall,
    ToolResult,
    Usage,
)


@dataclass
class UserEvent:
    """The turn's user message has been stored: its text as stored (secrets redacted, see
    redact.py), the one every consumer shows or keeps; `at` is the turn's first clock
    reading (ISO), `retry` whether the turn sends a stored message again."""

    text: str
    at: str
    turn_id: int
    retry: bool = False
    # The content blocks of files sent with it (whole; see attachments.py), and whether it
    # is a /compact turn (`text` then holds the user's instructions for it).
    attachments: list[dict] = field(default_factory=list)
    compact: bool = False
    kind: Literal["user"] = "user"


@dataclass
class TextDelta:
    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass
class ThinkingDelta:
    text: str
    kind: Literal["thinking_delta"] = "thinking_delta"


@dataclass
class RetryWaitEvent:
    """The API answered an error its client retries after a wait (rate limited, overloaded):
    told when the wait begins. `asked`: the server named the wait (retry-after-ms or
    retry-after), else it is the client's back-off. Not recorded, as deltas are not: it belongs
    to the connection, not the conversation (a replay makes no call to wait for)."""

    status: int
    seconds: float
    asked: bool
    kind: Literal["retry_wait"] = "retry_wait"


# What a model call streams before its response that the agent passes on to its observers.
PASSED_ON = (TextDelta, ThinkingDelta, RetryWaitEvent)


@dataclass
class ModelCallStart:
    """A model call is about to be sent (call index within the turn, request digest)."""

    call_index: int
    request_digest: str
    estimated_tokens: int
    purpose: Literal["chat", "summary"] = "chat"
    model: str = ""
    kind: Literal["model_call"] = "model_call"


@dataclass
class PromptTooLongEvent:
    """The provider refused a chat request as too long; the agent makes room and sends it
    again. Its numbers (when the provider gave them) steer the token counter."""

    message: str
    actual: int | None = None
    maximum: int | None = None
    kind: Literal["prompt_too_long"] = "prompt_too_long"


@dataclass
class ResponseEvent:
    """A complete model response, as received."""

    response: ModelResponse
    purpose: Literal["chat", "summary"] = "chat"
    kind: Literal["response"] = "response"


@dataclass
class ToolCallEvent:
    call: ToolCall
    kind: Literal["tool_call"] = "tool_call"


@dataclass
class ToolResultEvent:
    call: ToolCall
    result: ToolResult
    summary: str  # one compact line, e.g. 'conversation_search "hexo" → 3 results'
    kind: Literal["tool_result"] = "tool_result"


@dataclass
class MemoryEditEvent:
    label: str
    op: Literal["append", "replace", "delete", "edit"]
    old: str | None
    new: str
    used: int
    limit: int
    kind: Literal["memory_edit"] = "memory_edit"


@dataclass
class MemoryConfirmEvent:
    """A core or archival memory write shown to the user before it was applied (the
    `confirm_memory` setting), and the answer: "yes" (applied), "no" (declined) or
    "unavailable" (no terminal to ask: declined). `target` is the block's label, or the
    passage's id (#N; "" for a new passage); `scope` the block's scope ("" for passages).
    The agent's `confirm` callback gets one with `answer` still "" (see memory.py)."""

    tool: str
    target: str
    old: str | None
    new: str | None
    scope: str = ""
    reason: str = ""  # archival_delete's
    answer: str = ""
    kind: Literal["memory_confirm"] = "memory_confirm"


@dataclass
class PressureAlertEvent:
    used_tokens: int
    budget: int
    percent: float
    text: str  # the alert as the model sees it
    kind: Literal["pressure_alert"] = "pressure_alert"


@dataclass
class FoldEvent:
    """Old bulky tool results clipped to stubs (full text stays in recall)."""

    message_ids: list[int]
    tokens_freed: int
    kind: Literal["fold"] = "fold"


@dataclass
class EvictionEvent:
    turn_ids: list[int]
    tokens_freed: int
    by: Literal["model", "flush", "overflow", "compact"]
    summary: str
    used_tokens: int = 0
    budget: int = 0
    kind: Literal["eviction"] = "eviction"


@dataclass
class SummaryEvent:
    """The running summary changed (model summary merged or summariser call)."""

    summary: str
    method: Literal["model", "summariser", "chunked", "deterministic"]
    usage: Usage | None = None
    kind: Literal["summary"] = "summary"


@dataclass
class ClipEvent:
    """Part of the current turn was clipped to fit the budget (full text stays in recall)."""

    what: str
    original_chars: int
    kept_chars: int
    kind: Literal["clip"] = "clip"


@dataclass
class UsageEvent:
    usage: Usage
    cost_usd: float
    context_tokens: int  # the true size of the request just made
    budget: int
    # A summariser call's usage comes as a UsageEvent only when the call failed after its
    # input was billed (its answers are counted from their ResponseEvent).
    purpose: Literal["chat", "summary"] = "chat"
    kind: Literal["usage"] = "usage"


@dataclass
class NoticeEvent:
    """Something the user should know that is not an error (reply cut, refusal, loop stop)."""

    message: str
    level: Literal["info", "warning"] = "info"
    kind: Literal["notice"] = "notice"


@dataclass
class DenseSearchEvent:
    """What the dense side of one search returned (row ids and cosines, best first), or why
    it could not run (`error`; the search then used keywords alone). Recordings keep it so a
    strict replay fuses the same candidates without an embedder (see `engine/dense.py`)."""

    tool: str
    query: str
    model: str
    keyword_weight: float
    ids: list[int]
    scores: list[float]
    error: str | None = None
    kind: Literal["dense_search"] = "dense_search"


@dataclass
class ErrorEvent:
    message: str
    error_kind: str
    retryable: bool
    kind: Literal["error"] = "error"


@dataclass
class TurnEndEvent:
    """The turn is over. `usage` and `cost_usd` cover every paid call the turn made: its
    chat calls and the summariser's (priced at the model that answered), as `Tally.paid_*`
    counts them."""

    turn_id: int
    text: str
    stop_reason: StopReason | None
    usage: Usage
    cost_usd: float
    completed: bool  # False when the turn was interrupted or failed (nothing committed)
    kind: Literal["turn_end"] = "turn_end"


Event = Union[
    UserEvent, TextDelta, ThinkingDelta, RetryWaitEvent, ModelCallStart, PromptTooLongEvent,
    ResponseEvent, ToolCallEvent, ToolResultEvent, MemoryEditEvent, MemoryConfirmEvent, PressureAlertEvent,
    FoldEvent,
    EvictionEvent, SummaryEvent, ClipEvent, UsageEvent, NoticeEvent, DenseSearchEvent,
    ErrorEvent, TurnEndEvent,
]

"""The scripted test double: a `ModelClient` that answers from a script, and helpers that
build responses (text replies, tool calls, a deterministic usage).

It ships in the package (like openai-agents' ScriptedModel) because the benchmarks, the
scenario suite and the tests all drive the real engine with it.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.errors import BadRequestError
from memgpt_lite.engine.events import TextDelta, ThinkingDelta
from memgpt_lite.engine.model import StreamItem
from memgpt_lite.engine.records import (
    ContentBlock,
    ModelRequest,
    ModelResponse,
    Usage,
    canonical_json,
)


class ScriptExhausted(AssertionError):
    """A ScriptedModel was called more often than its script allows."""


class _AutoUsage(Usage):
    """Marker: ScriptedModel fills this response's usage from the request it answers."""


ScriptItem = ModelResponse | Callable[[ModelRequest], ModelResponse] | BaseException
_DELTAS: dict[str, type[TextDelta] | type[ThinkingDelta]] = {"text": TextDelta,
                                                             "thinking": ThinkingDelta}


class ScriptedModel:
    """A `ModelClient` that answers from a script.

    Each call takes the next item: a ModelResponse, a callable(request) -> ModelResponse, or an
    exception instance to raise. Text is streamed in `chunk`-sized TextDeltas (thinking in
    ThinkingDeltas), then the response. Every request is kept in `.requests`; a call past the
    end raises `ScriptExhausted`; `assert_complete()` fails if items are left. With
    `validate=True` each request is first checked with `api_rules.validate_request`, and a
    violation raises `BadRequestError` as the real API would.
    """

    def __init__(self, script: Iterable[ScriptItem], *, chunk: int = 8, validate: bool = False):
        self.script: list[ScriptItem] = list(script)
        self.chunk = max(1, chunk)
        self.validate = validate
        self.requests: list[ModelRequest] = []
        self.responses: list[ModelResponse] = []

    @property
    def remaining(self) -> int:
        return len(self.script) - len(self.requests)

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        response = self._next(request)
        for block in response.content:
            kind = block.get("type")
            delta = _DELTAS.get(kind)
            text = block.get(kind, "") if delta else ""  # a block's text is under its type
            for i in range(0, len(text), self.chunk):
                yield delta(text[i:i + self.chunk])
        yield response

    def _next(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.script):
            raise ScriptExhausted(
                f"ScriptedModel got call #{index + 1} but its script has {len(self.script)} "
                f"item(s); last message: {_last_text(request)!r}")
        if self.validate:
            _validate(request)
        item = self.script[index]
        if isinstance(item, BaseException):
            raise item
        response = item(request) if callable(item) else item
        response = replace(response, content=copy.deepcopy(response.content),
                           model=response.model or request.model,
                           id=response.id or f"msg_scripted_{index + 1:03d}")
        if isinstance(response.usage, _AutoUsage):
            response.usage = estimate_usage(request, response)
        self.responses.append(response)
        return response

    def assert_complete(self) -> None:
        if self.remaining > 0:
            raise AssertionError(f"ScriptedModel: {self.remaining} of {len(self.script)} scripted "
                                 f"item(s) were never requested.")


def _validate(request: ModelRequest) -> None:
    problem = validate_request(request.to_api())
    if problem:
        raise BadRequestError(f"The API rejected the request (400): {problem}", status=400)


def _last_text(request: ModelRequest) -> str:
    if not request.messages:
        return ""
    content = request.messages[-1].get("content")
    if isinstance(content, str):
        return content[:80]
    texts = [b.get("text") or str(b.get("content", "")) for b in content or []]
    return " ".join(t for t in texts if t)[:80]



_tool_ids = itertools.count(1)


def estimate_usage(request: ModelRequest, response: ModelResponse | None = None) -> Usage:
    """A deterministic usage from sizes (~4 chars per token), so scripted sessions show
    realistic, growing input_tokens."""
    input_tokens = math.ceil(len(canonical_json(request.to_api())) / 4)
    output = canonical_json(response.content) if response is not None else ""
    return Usage(input_tokens=input_tokens, output_tokens=math.ceil(len(output) / 4))


def text_response(text: str, *, usage: Usage | None = None,
                  stop_reason: str | None = "end_turn") -> ModelResponse:
    """A text reply; with usage=None a ScriptedModel estimates it from the request."""
    content: list[ContentBlock] = [{"type": "text", "text": text}] if text else []
    return ModelResponse(content=content, stop_reason=stop_reason,
                         usage=usage if usage is not None else _AutoUsage())


def tool_response(calls: list[tuple[str, dict[str, Any]]], text: str = "", *,
                  usage: Usage | None = None) -> ModelResponse:
    """An assistant turn calling tools (parallel when several), each with a unique id."""
    content: list[ContentBlock] = [{"type": "text", "text": text}] if text else []
    for name, args in calls:
        content.append({"type": "tool_use", "id": f"toolu_{next(_tool_ids):03d}", "name": name,
                        "input": args})
    return ModelResponse(content=content, stop_reason="tool_use",
                         usage=usage if usage is not None else _AutoUsage())

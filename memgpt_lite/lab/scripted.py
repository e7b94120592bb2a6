"""The scripted test doubles: a `ModelClient` that answers from a script, one that plays a
policy of rules (`RuleModel`, for the scenario suite), and helpers that build responses
(text replies, tool calls, a deterministic usage) and read requests.

It ships in the package (like openai-agents' ScriptedModel) because the benchmarks, the
scenario suite and the tests all drive the real engine with it.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
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
        if self.validate:
            _validate(request)
        item = self._item(index, request)
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

    def _item(self, index: int, request: ModelRequest) -> ScriptItem:
        if index >= len(self.script):
            raise ScriptExhausted(
                f"ScriptedModel got call #{index + 1} but its script has {len(self.script)} "
                f"item(s); last message: {_last_text(request)!r}")
        return self.script[index]

    def assert_complete(self) -> None:
        if self.remaining > 0:
            raise AssertionError(f"ScriptedModel: {self.remaining} of {len(self.script)} scripted "
                                 f"item(s) were never requested.")


Step = str | list[tuple[str, dict[str, Any]]] | ScriptItem
ALERT_TOOL_ID = "toolu_alert_"  # the tool calls RuleModel makes for a pressure alert


class RuleModel(ScriptedModel):
    """A `ModelClient` that plays a policy instead of a fixed script, so that a scenario can
    be run by a model that does the right thing (or the wrong one) whatever the engine does
    in between: each call is answered from the current turn's user input.

    `rules` maps a phrase to the turn's steps: the first phrase found in the user's input
    decides, else `default`. Step n answers the turn's n-th call: a text reply (str), tool
    calls ([(name, input), ...]), a ModelResponse, a callable(request) or an exception. Past
    the last step the turn ends with `default` (if a str) or "OK.". A memory-pressure alert
    is first answered by `on_alert(turn_ids)` when given (its steps are not counted).
    Summariser requests are answered by `summary` (text). Requests are validated like the
    API does unless `validate=False`."""

    def __init__(self, rules: dict[str, list[Step]], *, default: list[Step] | str = "OK.",
                 on_alert: Callable[[list[int]], Step] | None = None,
                 summary: str = "Earlier turns: small talk.", validate: bool = True):
        super().__init__([], validate=validate)
        self.rules, self.default, self.on_alert, self.summary = rules, default, on_alert, summary

    def _item(self, index: int, request: ModelRequest) -> ScriptItem:
        if _system_text(request).startswith("You maintain the running summary"):
            return text_response(self.summary)
        text, step, evicted = turn_position(request)
        alert = alert_turn_ids(request)
        if alert and self.on_alert is not None and not evicted:
            response = _as_item(self.on_alert(alert))
            if isinstance(response, ModelResponse):  # marked: not one of the turn's steps
                for block in response.content:
                    if block.get("type") == "tool_use":
                        block["id"] = ALERT_TOOL_ID + str(block["id"]).split("_")[-1]
            return response
        steps = next((v for k, v in self.rules.items() if k in text), None)
        if steps is None:
            steps = [self.default] if isinstance(self.default, str) else self.default
        final = self.default if isinstance(self.default, str) else "OK."
        return _as_item(steps[step] if step < len(steps) else final)


def _as_item(step: Step) -> ScriptItem:
    if isinstance(step, str):
        return text_response(step)
    if isinstance(step, list):
        return tool_response(step)
    return step


def _system_text(request: ModelRequest) -> str:
    return "".join(b.get("text", "") for b in request.system or [] if isinstance(b, dict))


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if b.get("type") == "text"]


def turn_position(request: ModelRequest) -> tuple[str, int, bool]:
    """The current turn's user input, how many of the turn's calls were answered by steps
    (the calls RuleModel made for an alert are not counted), and whether this turn already
    answered an alert."""
    messages = request.messages
    start = max((i for i, m in enumerate(messages) if m["role"] == "user" and not any(
        b.get("type") == "tool_result" for b in m.get("content") or [] if isinstance(b, dict))),
        default=0)
    user = [t for t in _texts(messages[start]) if not t.startswith("The core_memory section")]
    replies = [m for m in messages[start + 1:] if m["role"] == "assistant"]
    evictions = sum(1 for m in replies if any(str(b.get("id", "")).startswith(ALERT_TOOL_ID)
                                              for b in m.get("content") or []))
    return "\n".join(user), len(replies) - evictions, evictions > 0


def alert_turn_ids(request: ModelRequest) -> list[int]:
    """The turn ids a memory-pressure alert in the last message lists (none: no alert)."""
    text = "\n".join(_texts(request.messages[-1])) if request.messages else ""
    if "Memory pressure" not in text:
        return []
    return [int(m) for m in re.findall(r"^- (\d+) · ", text, re.M)]


def core_memory_text(request: ModelRequest) -> str:
    """The core memory section of the request, as the model sees it."""
    for message in reversed(request.messages):
        for text in _texts(message):
            if text.startswith("The core_memory section"):
                return text
    return ""


def tool_results(request: ModelRequest) -> list[str]:
    """The text of the tool results in the last message."""
    last = request.messages[-1].get("content") if request.messages else []
    return [str(b.get("content", "")) for b in last or []
            if isinstance(b, dict) and b.get("type") == "tool_result"]


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

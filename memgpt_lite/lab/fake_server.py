"""An Anthropic-compatible Messages API on 127.0.0.1, for tests and manual runs (stdlib only).

It validates every request at least as strictly as the real API (tool_use/tool_result pairing,
tools defined when the history holds tool blocks, cache breakpoints, block shapes, thinking
and its sampling limits), counts tokens its own way (~3.5 chars per token, so a client
that assumes 4 under-counts, as against the real API), simulates prompt caching on
`cache_control` prefixes, enforces a configurable context window, and serves scripted
responses or faults in order (streaming SSE or plain JSON).

    with FakeAnthropicServer(context_window=20_000) as server:
        server.enqueue(tool_response([("archival_search", {"query": "x"})]))
        server.enqueue(rate_limited(retry_after=0), times=3)
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)

Run by hand:  python -m memgpt_lite.lab.fake_server --port 8765 [--script replies.jsonl]
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import itertools
import json
import math
import re
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memgpt_lite.engine.records import ModelResponse, Usage, canonical_json

CHARS_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 4  # role markers around each message
REQUEST_OVERHEAD = 8
TOOLS_OVERHEAD = 300  # the tool-use system prompt the API adds when tools are present
CACHE_LOOKBACK = 20  # the API looks for earlier cache hits up to 20 blocks before a breakpoint
MAX_BREAKPOINTS = 4
_SIGNING_KEY = b"memgpt-lite-fake-server"
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

_TOP_KEYS = {"model", "max_tokens", "messages", "system", "tools", "tool_choice", "thinking",
             "stream", "metadata", "stop_sequences", "temperature", "top_p", "top_k",
             "cache_control", "service_tier", "output_config", "container", "inference_geo",
             "speed", "diagnostics", "mcp_servers", "context_management"}
_BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "cache_control", "title", "context", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
}
_ROLE_BLOCKS = {"user": {"text", "image", "document", "tool_result"},
                "assistant": {"text", "tool_use", "thinking", "redacted_thinking"}}


class Invalid(Exception):
    """One request problem, worded like the API's invalid_request_error messages."""


# --------------------------------------------------------------------------- validation


def validate_request(body: Any, *, count_only: bool = False,
                     check_signatures: bool = False) -> str | None:
    """None when `body` is a valid Messages request, else the API-style error message."""
    try:
        _check_request(body, count_only=count_only, check_signatures=check_signatures)
    except Invalid as exc:
        return str(exc)
    return None


def _check_request(body: Any, *, count_only: bool, check_signatures: bool) -> None:
    if not isinstance(body, dict):
        raise Invalid("request body must be a JSON object")
    for key in body:
        if key not in _TOP_KEYS or (count_only and key in ("max_tokens", "stream")):
            raise Invalid(f"{key}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    if not count_only:
        _check_max_tokens(body)
    tool_names = _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"), tool_names)
    thinking = _check_thinking(body.get("thinking"), body.get("max_tokens"), count_only)
    if thinking and (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        raise Invalid("Thinking may not be enabled when tool_choice forces tool use.")
    _check_sampling(body, thinking)
    _check_system(body.get("system"))
    _check_messages(body.get("messages"), thinking=thinking, check_signatures=check_signatures)
    found = count_cache_controls(body)
    if found > MAX_BREAKPOINTS:
        raise Invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be "
                      f"provided. Found {found}.")
    if not tool_names and _has_tool_blocks(body["messages"]):
        raise Invalid("Requests which include `tool_use` or `tool_result` blocks must define "
                      "tools.")


def _check_max_tokens(body: dict) -> None:
    if "max_tokens" not in body:
        raise Invalid("max_tokens: Field required")
    value = body["max_tokens"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Invalid("max_tokens: Input should be a positive integer")
    if not isinstance(body.get("stream", False), bool):
        raise Invalid("stream: Input should be a valid boolean")


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise Invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise Invalid(f"{where}: Input should be a valid dictionary")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise Invalid(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if name in names:
            raise Invalid("tools: Tool names must be unique.")
        names.add(name)
        if tool.get("type") in (None, "custom"):  # else a server tool (web search...): own shape
            _check_custom_tool(tool, where)
    return names


def _check_custom_tool(tool: dict, where: str) -> None:
    extra = set(tool) - {"type", "name", "description", "input_schema", "cache_control",
                         "strict", "input_examples"}
    if extra:
        raise Invalid(f"{where}.{sorted(extra)[0]}: Extra inputs are not permitted")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise Invalid(f"{where}.input_schema: JSON schema is invalid - it must be an object "
                      f"with \"type\": \"object\"")
    if not isinstance(schema.get("properties", {}), dict):
        raise Invalid(f"{where}.input_schema.properties: Input should be a valid dictionary")
    if not isinstance(tool.get("description", ""), str):
        raise Invalid(f"{where}.description: Input should be a valid string")
    _check_cache_control(tool, where)


def _check_tool_choice(choice: Any, tool_names: set[str]) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise Invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    allowed = {"type", "disable_parallel_tool_use"}
    if choice["type"] == "tool":
        allowed.add("name")
    extra = set(choice) - allowed
    if extra:
        raise Invalid(f"tool_choice.{sorted(extra)[0]}: Extra inputs are not permitted")
    if not isinstance(choice.get("disable_parallel_tool_use", False), bool):
        raise Invalid("tool_choice.disable_parallel_tool_use: Input should be a valid boolean")
    if choice["type"] in ("any", "tool") and not tool_names:
        raise Invalid("tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool" and choice.get("name") not in tool_names:
        raise Invalid(f"tool_choice.name: tool {choice.get('name')!r} is not in `tools`")


def _check_thinking(thinking: Any, max_tokens: Any, count_only: bool) -> bool:
    """Validate the thinking config; True when extended thinking is on."""
    if thinking is None:
        return False
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind in ("disabled", "adaptive"):
        if set(thinking) - {"type", "display"}:
            raise Invalid(f"thinking.{sorted(set(thinking) - {'type', 'display'})[0]}: "
                          f"Extra inputs are not permitted")
        return kind == "adaptive"
    if kind != "enabled":
        raise Invalid("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
        raise Invalid("thinking.enabled.budget_tokens: Input should be greater than or equal "
                      "to 1024")
    if not count_only and isinstance(max_tokens, int) and budget >= max_tokens:
        raise Invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
    return True


def _check_sampling(body: dict, thinking: bool) -> None:
    """Range checks, and the API's rule that thinking (enabled or adaptive) keeps the default
    temperature, no top_k, and top_p of at least 0.95."""
    for key, low, high in (("temperature", 0, 1), ("top_p", 0, 1)):
        value = body.get(key)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            raise Invalid(f"{key}: Input should be a number between {low} and {high}")
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0):
        raise Invalid("top_k: Input should be a non-negative integer")
    if not thinking:
        return
    if body.get("temperature") not in (None, 1):
        raise Invalid("`temperature` may only be set to 1 when thinking is enabled or in "
                      "adaptive mode.")
    if top_k is not None:
        raise Invalid("`top_k` must be unset when thinking is enabled or in adaptive mode.")
    if body.get("top_p") is not None and body["top_p"] < 0.95:
        raise Invalid("`top_p` must be greater than or equal to 0.95 when thinking is enabled "
                      "or in adaptive mode.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise Invalid("system: Input should be a valid string or list of text blocks")
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise Invalid(f"system.{i}.type: Input should be 'text'")
        _check_block(block, f"system.{i}")


def _check_cache_control(block: dict, where: str) -> None:
    cc = block.get("cache_control")
    if cc is None:
        return
    if not isinstance(cc, dict) or cc.get("type") != "ephemeral" or set(cc) - {"type", "ttl"}:
        raise Invalid(f"{where}.cache_control: Input should be {{'type': 'ephemeral'}}")
    if cc.get("ttl", "5m") not in ("5m", "1h"):
        raise Invalid(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise Invalid(f"{where}: each content block must be an object with a `type`")
    kind = block["type"]
    if kind not in _BLOCK_KEYS:
        raise Invalid(f"{where}.type: unknown content block type {kind!r}")
    extra = set(block) - _BLOCK_KEYS[kind]
    if extra:
        raise Invalid(f"{where}.{sorted(extra)[0]}: Extra inputs are not permitted")
    _check_cache_control(block, where)
    _BLOCK_CHECKS.get(kind, lambda b, w: None)(block, where)


def _check_text(block: dict, where: str) -> None:
    text = block.get("text")
    if not isinstance(text, str):
        raise Invalid(f"{where}.text: Field required")
    if not text.strip():
        raise Invalid(f"{where}.text: text content blocks must contain non-whitespace text")


def _check_tool_use(block: dict, where: str) -> None:
    if not isinstance(block.get("id"), str) or not _TOOL_ID.match(block["id"]):
        raise Invalid(f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
    if not isinstance(block.get("name"), str) or not _TOOL_NAME.match(block["name"]):
        raise Invalid(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
    if not isinstance(block.get("input"), dict):
        raise Invalid(f"{where}.input: Input should be a valid dictionary")


def _check_tool_result(block: dict, where: str) -> None:
    if not isinstance(block.get("tool_use_id"), str) or not _TOOL_ID.match(block["tool_use_id"]):
        raise Invalid(f"{where}.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'")
    if not isinstance(block.get("is_error", False), bool):
        raise Invalid(f"{where}.is_error: Input should be a valid boolean")
    content = block.get("content", "")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Invalid(f"{where}.content: Input should be a valid string or list of blocks")
    for j, inner in enumerate(content):
        _check_block(inner, f"{where}.content.{j}")
        if inner["type"] not in ("text", "image", "document"):
            raise Invalid(f"{where}.content.{j}.type: tool_result content must be text, image "
                          f"or document blocks")


def _check_thinking_block(block: dict, where: str) -> None:
    if not isinstance(block.get("thinking"), str):
        raise Invalid(f"{where}.thinking: Field required")
    if not isinstance(block.get("signature"), str) or not block["signature"]:
        raise Invalid(f"{where}.signature: Field required")


_BLOCK_CHECKS: dict[str, Callable[[dict, str], None]] = {
    "text": _check_text, "tool_use": _check_tool_use, "tool_result": _check_tool_result,
    "thinking": _check_thinking_block,
}


@dataclass
class _Group:
    """Consecutive same-role messages, merged as the API merges them."""

    role: str
    first_index: int
    blocks: list[tuple[str, dict]] = field(default_factory=list)  # (where, block)


def _check_messages(messages: Any, *, thinking: bool, check_signatures: bool) -> None:
    if messages is None:
        raise Invalid("messages: Field required")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: at least one message is required")
    groups: list[_Group] = []
    for i, message in enumerate(messages):
        role, blocks = _check_message(message, i, final=i == len(messages) - 1)
        if groups and groups[-1].role == role:
            groups[-1].blocks.extend(blocks)
        else:
            groups.append(_Group(role, i, list(blocks)))
    if groups[0].role != "user":
        raise Invalid('messages: first message must use the "user" role')
    _check_pairing(groups)
    _check_prefill(groups[-1])
    if thinking:
        _check_thinking_turn(groups)
    if check_signatures:
        _check_signatures(groups)


def _has_tool_blocks(messages: list[dict]) -> bool:
    return any(isinstance(m["content"], list) and b["type"] in ("tool_use", "tool_result")
               for m in messages for b in m["content"])


def _check_message(message: Any, i: int, *, final: bool) -> tuple[str, list[tuple[str, dict]]]:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise Invalid(f"{where}: Input should be a valid dictionary")
    if set(message) - {"role", "content"}:
        raise Invalid(f"{where}.{sorted(set(message) - {'role', 'content'})[0]}: "
                      f"Extra inputs are not permitted")
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise Invalid(f"{where}.role: Input should be 'user' or 'assistant'")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise Invalid(f"{where}.content: Input should be a valid string or list of blocks")
    if not content and not (final and role == "assistant"):
        raise Invalid(f"{where}: all messages must have non-empty content except for the "
                      f"optional final assistant message")
    blocks = []
    for j, block in enumerate(content):
        _check_block(block, f"{where}.content.{j}")
        if block["type"] not in _ROLE_BLOCKS[role]:
            raise Invalid(f"{where}.content.{j}: `{block['type']}` blocks are not allowed in "
                          f"{role} messages")
        blocks.append((f"{where}.content.{j}", block))
    return role, blocks


def _check_pairing(groups: list[_Group]) -> None:
    """Every tool_use is answered first thing in the next user message, and only then."""
    seen: set[str] = set()
    for k, group in enumerate(groups):
        if group.role == "assistant":
            ids = [b["id"] for _, b in group.blocks if b["type"] == "tool_use"]
            for tool_id in ids:
                if tool_id in seen:
                    raise Invalid(f"messages.{group.first_index}: `tool_use` ids must be unique: "
                                  f"{tool_id}")
                seen.add(tool_id)
            if ids:
                _check_answered(ids, groups[k + 1] if k + 1 < len(groups) else None, group)
        else:
            _check_results(group, groups[k - 1] if k else None)


def _check_results(group: _Group, previous: _Group | None) -> None:
    """Each tool_result answers a distinct tool_use of the message just before."""
    offered = {b["id"] for _, b in (previous.blocks if previous else [])
               if b["type"] == "tool_use"}
    answered: set[str] = set()
    for where, block in group.blocks:
        if block["type"] != "tool_result":
            continue
        tool_id = block["tool_use_id"]
        if tool_id not in offered or tool_id in answered:
            raise Invalid(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                          f"{tool_id}. Each `tool_result` block must have a corresponding "
                          f"`tool_use` block in the previous message.")
        answered.add(tool_id)


def _check_answered(ids: list[str], answer: _Group | None, asked: _Group) -> None:
    leading: set[str] = set()
    for _, block in (answer.blocks if answer else []):
        if block["type"] != "tool_result":
            break
        leading.add(block["tool_use_id"])
    missing = [i for i in ids if i not in leading]
    if not missing:
        return
    later = {b["tool_use_id"] for _, b in (answer.blocks if answer else [])
             if b["type"] == "tool_result"}
    if answer is not None and set(missing) <= later:
        raise Invalid(f"messages.{answer.first_index}: `tool_result` blocks must come first in "
                      f"the user message, before any other content: {', '.join(missing)}")
    raise Invalid(f"messages.{asked.first_index}: `tool_use` ids were found without "
                  f"`tool_result` blocks immediately after: {', '.join(missing)}. Each "
                  f"`tool_use` block must have a corresponding `tool_result` block in the next "
                  f"message.")


def _check_prefill(last: _Group) -> None:
    if last.role != "assistant" or not last.blocks:
        return
    where, block = last.blocks[-1]
    if block["type"] == "text" and block["text"] != block["text"].rstrip():
        raise Invalid("messages: final assistant content cannot end with trailing whitespace")


def _check_thinking_turn(groups: list[_Group]) -> None:
    """With thinking on, the assistant message of an unfinished tool loop starts with thinking."""
    last = groups[-1]
    if last.role != "user" or len(groups) < 2:
        return
    if not any(b["type"] == "tool_result" for _, b in last.blocks):
        return
    where, first = groups[-2].blocks[0]
    if first["type"] not in ("thinking", "redacted_thinking"):
        raise Invalid(f"{where}.type: Expected `thinking` or `redacted_thinking`, but found "
                      f"`{first['type']}`. When `thinking` is enabled, a final `assistant` "
                      f"message must start with a thinking block.")


def _check_signatures(groups: list[_Group]) -> None:
    for group in groups:
        for where, block in group.blocks:
            if block["type"] != "thinking":
                continue
            if block["signature"] != sign_thinking(block["thinking"]):
                raise Invalid(f"{where}: Invalid `signature` in `thinking` block (the thinking "
                              f"text or its signature was changed)")


def sign_thinking(text: str) -> str:
    """The signature this server gives a thinking block; edited thinking no longer matches."""
    mac = hmac.new(_SIGNING_KEY, text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(mac).decode("ascii")


def count_cache_controls(body: dict) -> int:
    def blocks_of(content: Any) -> list:
        return content if isinstance(content, list) else []

    found = 1 if body.get("cache_control") else 0
    candidates = list(blocks_of(body.get("tools"))) + list(blocks_of(body.get("system")))
    for message in blocks_of(body.get("messages")):
        for block in blocks_of(message.get("content") if isinstance(message, dict) else None):
            candidates.append(block)
            if isinstance(block, dict) and block.get("type") == "tool_result":
                candidates.extend(blocks_of(block.get("content")))
    return found + sum(1 for b in candidates if isinstance(b, dict) and b.get("cache_control"))


# --------------------------------------------------------------------------- tokens and caching


def _part(block: dict, overhead: int = 0, role: str | None = None) -> tuple[int, Any, bool]:
    """(tokens, value as hashed, is a breakpoint) of one block; the marker itself is neither
    counted nor hashed, so moving a breakpoint keeps the prefix's hash."""
    clean = {k: v for k, v in block.items() if k != "cache_control"}
    tokens = overhead + math.ceil(len(canonical_json(clean)) / CHARS_PER_TOKEN)
    return tokens, clean if role is None else [role, clean], bool(block.get("cache_control"))


@dataclass
class _Segment:
    tokens: int
    digest: str  # hash of the whole prompt prefix up to and including this segment
    breakpoint: bool


def _parts(body: dict) -> list[tuple[int, Any, bool]]:
    """`_part` of the tools, then the system blocks, then each message block."""
    parts = [_part(tool, TOOLS_OVERHEAD if i == 0 else 0)
             for i, tool in enumerate(body.get("tools") or [])]
    system = body.get("system")
    parts += [_part(block) for block in
              ([{"type": "text", "text": system}] if isinstance(system, str) else system or [])]
    for message in body.get("messages") or []:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        parts += [_part(block, MESSAGE_OVERHEAD if j == 0 else 0, message["role"])
                  for j, block in enumerate(blocks)]
    if body.get("cache_control") and parts:  # automatic caching: a breakpoint on the last block
        parts[-1] = (parts[-1][0], parts[-1][1], True)
    return parts


def _segments(body: dict) -> list[_Segment]:
    """The prompt as the cache sees it, each segment with the cumulative hash of everything up
    to it, as prefix caching does."""
    running = hashlib.sha256(str(body.get("model")).encode())
    segments = []
    for n, (tokens, value, bp) in enumerate(_parts(body)):
        running.update(canonical_json(value).encode())
        segments.append(_Segment(tokens + (REQUEST_OVERHEAD if n == 0 else 0),
                                 running.copy().hexdigest(), bp))
    return segments


def count_tokens(body: dict) -> int:
    """This server's token count for a request (its own heuristic, ~3.5 chars per token)."""
    return max(1, sum(s.tokens for s in _segments(body)))


def prefix_cache(written: set[Any], digests: Sequence[Any], cumulative: Sequence[int],
                 breakpoints: Sequence[int], min_tokens: int) -> tuple[int, int]:
    """(tokens read, tokens written) of one request under the API's prefix caching, adding
    its writes to `written` (the digests of cached prefixes). It reads the longest prefix
    that an earlier request wrote, found at or up to CACHE_LOOKBACK blocks before one of its
    breakpoints, and writes the rest up to its last breakpoint of at least `min_tokens`.
    `digests[i]` hashes blocks 0..i; `cumulative[i]` is their tokens (never decreasing)."""
    read = 0
    for bp in breakpoints:
        hit = next((j for j in range(bp, max(-1, bp - CACHE_LOOKBACK), -1)
                    if digests[j] in written), None)
        if hit is not None:
            read = max(read, cumulative[hit])
    cached = [bp for bp in breakpoints if cumulative[bp] >= min_tokens]
    written.update(digests[bp] for bp in cached)
    return read, cumulative[cached[-1]] - read if cached else 0


class PromptCache:
    """Prefix cache keyed by the hash of everything up to a breakpoint (5-minute TTL ignored)."""

    def __init__(self, min_tokens: int = 1024):
        self.min_tokens = min_tokens
        self._entries: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict) -> Usage:
        segments = _segments(body)
        cumulative = list(itertools.accumulate(s.tokens for s in segments))
        total = cumulative[-1] if cumulative else 1
        points = [i for i, s in enumerate(segments) if s.breakpoint]
        with self._lock:
            read, written = prefix_cache(self._entries, [s.digest for s in segments],
                                         cumulative, points, self.min_tokens)
        return Usage(input_tokens=max(0, total - read - written),
                     cache_creation_input_tokens=written, cache_read_input_tokens=read)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Fault:
    """A scripted failure for one request. Build with the functions below."""

    kind: str  # http | reset | hang | error_event | malformed_json | truncated
    status: int = 0
    error_type: str = ""
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    after: int | None = None  # stream faults: SSE events sent before the fault
    seconds: float = 0.0


def http_error(status: int, error_type: str, message: str,
               headers: dict[str, str] | None = None) -> Fault:
    return Fault("http", status, error_type, message, tuple((headers or {}).items()))


def rate_limited(retry_after: float | None = 0) -> Fault:
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return http_error(429, "rate_limit_error", "Number of request tokens has exceeded your "
                      "per-minute rate limit", headers)


def overloaded() -> Fault:
    return http_error(529, "overloaded_error", "Overloaded")


def server_error(status: int = 500) -> Fault:
    return http_error(status, "api_error", "Internal server error")


def unauthorized() -> Fault:
    return http_error(401, "authentication_error", "invalid x-api-key")


def connection_reset(after: int | None = None) -> Fault:
    """Reset the TCP connection (before any response, or after `after` SSE events)."""
    return Fault("reset", after=after)


def hang(seconds: float = 30.0, after: int | None = None) -> Fault:
    """Send nothing for `seconds` (before the response, or after `after` SSE events)."""
    return Fault("hang", after=after, seconds=seconds)


def error_event(after: int = 2, error_type: str = "overloaded_error",
                message: str = "Overloaded") -> Fault:
    return Fault("error_event", error_type=error_type, message=message, after=after)


def malformed_json(after: int = 2) -> Fault:
    return Fault("malformed_json", after=after)


def truncated(after: int = 3) -> Fault:
    """Close the stream cleanly after `after` events, without message_stop."""
    return Fault("truncated", after=after)


Reply = ModelResponse | Callable[[dict], ModelResponse] | Fault


def fault_from_dict(d: dict) -> Fault:
    """A Fault from JSON, e.g. {"fault": "rate_limited", "retry_after": 0} (for --script)."""
    makers = {"rate_limited": rate_limited, "overloaded": overloaded, "server_error": server_error,
              "unauthorized": unauthorized, "connection_reset": connection_reset, "hang": hang,
              "error_event": error_event, "malformed_json": malformed_json,
              "truncated": truncated, "http_error": http_error}
    args = {k: v for k, v in d.items() if k != "fault"}
    return makers[d["fault"]](**args)


# --------------------------------------------------------------------------- wire shapes


def _echo_reply(body: dict) -> ModelResponse:
    last = body["messages"][-1]["content"]
    texts = [last] if isinstance(last, str) else [
        b.get("text", "") for b in last if isinstance(b, dict) and b.get("type") == "text"]
    # The user's own words are the last text block (context data blocks come before them).
    said = next((t.strip() for t in reversed(texts) if t and t.strip()), "")[:60] or "(no text)"
    return ModelResponse(content=[{"type": "text", "text": f"Fake reply to: {said}"}],
                         stop_reason="end_turn", usage=Usage())


def _served_content(response: ModelResponse) -> list[dict]:
    out = []
    for block in response.content:
        block = dict(block)
        if block.get("type") == "thinking":
            block["signature"] = sign_thinking(block.get("thinking", ""))
        out.append(block)
    return out


def _message_json(msg_id: str, model: str, content: list[dict], stop_reason: str | None,
                  usage: Usage) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage.to_dict()}


def _chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _block_events(index: int, block: dict, chunk: int) -> list[tuple[str, dict]]:
    kind = block.get("type")
    start: dict = dict(block)
    deltas: list[dict] = []
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"], chunk)]
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": c}
                  for c in _chunks(block["thinking"], chunk)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start["input"] = {}
        raw = json.dumps(block.get("input") or {})
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": c} for c in _chunks(raw, chunk)]
    events = [("content_block_start", {"type": "content_block_start", "index": index,
                                       "content_block": start})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                        "delta": d}) for d in deltas]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def sse_events(msg: dict, chunk: int = 16) -> list[tuple[str, dict]]:
    """The SSE events of a streamed message, in the API's order."""
    usage = msg["usage"]
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    events = [("message_start", {"type": "message_start", "message": start}),
              ("ping", {"type": "ping"})]
    for i, block in enumerate(msg["content"]):
        events += _block_events(i, block, chunk)
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": msg["stop_reason"],
                                               "stop_sequence": None},
                                     "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _error_body(error_type: str, message: str, request_id: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message},
            "request_id": request_id}


# --------------------------------------------------------------------------- the server


class FakeAnthropicServer:
    """A threaded Messages API server on 127.0.0.1 (a context manager).

    `enqueue(reply, times=1)` queues a ModelResponse, a callable(body) -> ModelResponse or a
    Fault; each request to /v1/messages takes the next one, and gets `default_reply` (an echo)
    when the queue is empty. Invalid requests get 400 without consuming the queue. Usage is
    always this server's own count. `requests` holds every parsed /v1/messages body,
    `count_requests` every /v1/messages/count_tokens body, `log` one entry per HTTP exchange.
    """

    def __init__(self, *, port: int = 0, context_window: int = 200_000,
                 min_cache_tokens: int = 1024, api_key: str | None = None,
                 default_reply: Callable[[dict], ModelResponse] | None = None,
                 chunk: int = 16, check_signatures: bool = True):
        self.context_window = context_window
        self.cache = PromptCache(min_cache_tokens)
        self.api_key = api_key
        self.default_reply = default_reply or _echo_reply
        self.chunk = chunk
        self.check_signatures = check_signatures
        self.requests: list[dict] = []
        self.count_requests: list[dict] = []
        self.log: list[dict] = []
        self.errors: list[BaseException] = []  # unexpected handler exceptions (a bug here)
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids: dict[str, Iterator[int]] = {}
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler, self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def enqueue(self, reply: Reply, *, times: int = 1) -> None:
        with self._lock:
            self._queue.extend([reply] * times)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def start(self) -> FakeAnthropicServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    # ---------------------------------------------------------------- used by the handler

    def _next_reply(self) -> Reply:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default_reply

    def _record(self, **entry: Any) -> None:
        with self._lock:
            self.log.append(entry)

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            counter = self._ids.setdefault(prefix, itertools.count(1))
            return f"{prefix}_fake_{next(counter):04d}"

    def _check(self, body: Any, *, count_only: bool) -> str | None:
        problem = validate_request(body, count_only=count_only,
                                   check_signatures=self.check_signatures)
        if problem is None and not count_only:
            total = count_tokens(body)
            if total > self.context_window:
                problem = f"prompt is too long: {total} tokens > {self.context_window} maximum"
        return problem


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, owner: FakeAnthropicServer):
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, BrokenPipeError, TimeoutError)):
            return  # the client went away (timeouts, closed streams): expected in fault tests
        if exc is not None:
            self.owner.errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the library never prints; `owner.log` keeps the exchange

    @property
    def owner(self) -> FakeAnthropicServer:
        return self.server.owner

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._send_error(404, "not_found_error", f"Not found: {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        path = self.path.split("?")[0]
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"Not found: {path}")
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._send_error(400, "invalid_request_error", "request body is not valid JSON")
            return
        count_only = path.endswith("count_tokens")
        (self.owner.count_requests if count_only else self.owner.requests).append(body)
        if self._auth_failed():
            return
        problem = self.owner._check(body, count_only=count_only)
        if problem:
            self._send_error(400, "invalid_request_error", problem)
        elif count_only:
            self._send_json(200, {"input_tokens": count_tokens(body)})
        else:
            self._answer(body, self.owner._next_reply())

    def _auth_failed(self) -> bool:
        key = self.headers.get("x-api-key") or ""
        bearer = self.headers.get("authorization") or ""
        key = key or (bearer[7:] if bearer.lower().startswith("bearer ") else "")
        if not key:
            self._send_error(401, "authentication_error", "x-api-key header is required")
        elif self.owner.api_key is not None and key != self.owner.api_key:
            self._send_error(401, "authentication_error", "invalid x-api-key")
        elif not self.headers.get("anthropic-version"):
            self._send_error(400, "invalid_request_error", "anthropic-version: header is required")
        else:
            return False
        return True

    def _answer(self, body: dict, reply: Reply) -> None:
        fault = reply if isinstance(reply, Fault) else None
        if fault and fault.kind == "http":
            self._send_error(fault.status, fault.error_type, fault.message, dict(fault.headers))
            return
        interrupts = fault and fault.kind in ("reset", "hang")
        if interrupts and (fault.after is None or not body.get("stream")):
            self._interrupt(fault)
            return
        response = self.owner.default_reply(body) if fault else (
            reply(body) if callable(reply) else reply)
        msg = self._message(body, response)
        if body.get("stream"):
            self._stream(msg, fault)
        else:
            self._send_json(200, msg)

    def _message(self, body: dict, response: ModelResponse) -> dict:
        content = _served_content(response)
        usage = self.owner.cache.usage(body)
        usage.output_tokens = max(1, math.ceil(len(canonical_json(content)) / CHARS_PER_TOKEN))
        return _message_json(response.id or self.owner._new_id("msg"),
                             response.model or body["model"], content, response.stop_reason,
                             usage)

    def _stream(self, msg: dict, fault: Fault | None) -> None:
        self.send_response(200)
        self._headers({"content-type": "text/event-stream", "cache-control": "no-cache"})
        events = sse_events(msg, self.owner.chunk)
        for n, (name, data) in enumerate(events):
            if fault is not None and n == fault.after:
                self._stream_fault(fault)
                break
            self._write_event(name, json.dumps(data))
        self._record(status=200, stream=True, fault=fault.kind if fault else None)

    def _stream_fault(self, fault: Fault) -> None:
        if fault.kind == "error_event":
            self._write_event("error", json.dumps(_error_body(
                fault.error_type, fault.message, self.owner._new_id("req"))))
        elif fault.kind == "malformed_json":
            self._write_event("content_block_delta", '{"type": "content_block_delta", "index": 0,')
        elif fault.kind in ("reset", "hang"):
            self._interrupt(fault)
        # "truncated": just stop; the connection closes cleanly without message_stop

    def _interrupt(self, fault: Fault) -> None:
        if fault.kind == "hang":
            self.owner._stopping.wait(fault.seconds)
            self._record(status=None, fault="hang")
            self.close_connection = True
            return
        # SO_LINGER 0 makes close() send RST: the client sees "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
        self.rfile, self.wfile = io.BytesIO(), io.BytesIO()
        self.close_connection = True
        self._record(status=None, fault="reset")

    def _write_event(self, name: str, data: str) -> None:
        self.wfile.write(f"event: {name}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    def _headers(self, headers: dict[str, str]) -> None:
        self.send_header("request-id", self.owner._new_id("req"))
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None,
                   error: str | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self._headers({"content-type": "application/json", "content-length": str(len(data)),
                       **(headers or {})})
        self._record(status=status, stream=False, error=error)  # before the client can see it
        self.wfile.write(data)

    def _send_error(self, status: int, error_type: str, message: str,
                    headers: dict[str, str] | None = None) -> None:
        self._send_json(status, _error_body(error_type, message, self.owner._new_id("req")),
                        headers, error=message)

    def _record(self, **entry: Any) -> None:
        self.owner._record(path=self.path, **entry)


# --------------------------------------------------------------------------- manual use


def _load_script(server: FakeAnthropicServer, path: str) -> None:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                server.enqueue(fault_from_dict(d) if "fault" in d else ModelResponse.from_dict(d))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.fake_server",
                                     description="A fake Anthropic Messages API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--context-window", type=int, default=200_000)
    parser.add_argument("--min-cache-tokens", type=int, default=1024)
    parser.add_argument("--script", help="JSONL of replies: ModelResponse dicts or "
                                         '{"fault": "rate_limited", ...}; then echo replies')
    args = parser.parse_args(argv)
    server = FakeAnthropicServer(port=args.port, context_window=args.context_window,
                                 min_cache_tokens=args.min_cache_tokens)
    if args.script:
        _load_script(server, args.script)
    sys.stderr.write(f"Fake Anthropic API on {server.base_url} "
                     f"(export ANTHROPIC_BASE_URL={server.base_url}); Ctrl-C stops it.\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

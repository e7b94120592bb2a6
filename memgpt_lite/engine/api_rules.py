"""What the Messages API accepts: request validation with the API's own wording.

`validate_request` checks a request body at least as strictly as the real API does (block
shapes, tool_use/tool_result pairing, tools defined when the history holds tool blocks,
cache breakpoints, thinking and its sampling limits). The engine uses it to check data from
outside (an imported agent's queue) before anything is stored; the lab's fake server and
scripted model use it to refuse what the real API would refuse.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_BREAKPOINTS = 4
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


SignatureCheck = Callable[[str, str], bool]  # (thinking text, signature) -> genuine?


def validate_request(body: Any, *, count_only: bool = False,
                     check_signature: SignatureCheck | None = None) -> str | None:
    """None when `body` is a valid Messages request, else the API-style error message.
    `check_signature` verifies thinking blocks (only their issuer can)."""
    try:
        _check_request(body, count_only=count_only, check_signature=check_signature)
    except Invalid as exc:
        return str(exc)
    return None


def _check_request(body: Any, *, count_only: bool,
                   check_signature: SignatureCheck | None) -> None:
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
    _check_messages(body.get("messages"), thinking=thinking,
                    check_signature=check_signature)
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


IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGES = 100  # per request


def _check_image(block: dict, where: str) -> None:
    """An image block as the API checks it: a base64 (or url) source, one of the four media
    types, data that is valid base64 of at most 5 MB, an image of that type whose sides are
    at most 8,000 px."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise Invalid(f"{where}.source: Field required")
    kind = source.get("type")
    if kind == "url":
        if set(source) - {"type", "url"} or not isinstance(source.get("url"), str):
            raise Invalid(f"{where}.image.source.url: Input should be a valid URL")
        return
    if kind != "base64":
        raise Invalid(f"{where}.image.source.type: Input should be 'base64', 'url' or 'file'")
    at = f"{where}.image.source.base64"
    extra = set(source) - {"type", "media_type", "data"}
    if extra:
        raise Invalid(f"{at}.{sorted(extra)[0]}: Extra inputs are not permitted")
    media = source.get("media_type")
    if media not in IMAGE_MEDIA_TYPES:
        raise Invalid(f"{at}.media_type: Input should be 'image/jpeg', 'image/png', "
                      "'image/gif' or 'image/webp'")
    _check_image_data(source.get("data"), str(media), at)


def _check_image_data(data: Any, media: str, at: str) -> None:
    from memgpt_lite.engine.attachments import (
        MAX_IMAGE_BASE64,
        MAX_IMAGE_SIDE,
        image_size,
        sniff_image,
    )

    if not isinstance(data, str) or not data:
        raise Invalid(f"{at}.data: Field required")
    if len(data) > MAX_IMAGE_BASE64:
        raise Invalid(f"{at}: image exceeds 5 MB maximum: {len(data)} bytes > "
                      f"{MAX_IMAGE_BASE64} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{at}.data: The image data is not valid base64") from None
    actual = sniff_image(raw)
    if actual is None:
        raise Invalid(f"{at}.data: Could not process image")
    if actual != media:
        raise Invalid(f"{at}.data: Image does not match the provided media type {media}")
    size = image_size(raw, media)
    if size is None:
        raise Invalid(f"{at}.data: Could not process image")
    if max(size) > MAX_IMAGE_SIDE:
        raise Invalid(f"{at}.data: At least one of the image dimensions exceed max allowed "
                      f"size: {MAX_IMAGE_SIDE} pixels")


def _check_thinking_block(block: dict, where: str) -> None:
    if not isinstance(block.get("thinking"), str):
        raise Invalid(f"{where}.thinking: Field required")
    if not isinstance(block.get("signature"), str) or not block["signature"]:
        raise Invalid(f"{where}.signature: Field required")


_BLOCK_CHECKS: dict[str, Callable[[dict, str], None]] = {
    "text": _check_text, "tool_use": _check_tool_use, "tool_result": _check_tool_result,
    "thinking": _check_thinking_block, "image": _check_image,
}


@dataclass
class _Group:
    """Consecutive same-role messages, merged as the API merges them."""

    role: str
    first_index: int
    blocks: list[tuple[str, dict]] = field(default_factory=list)  # (where, block)


def _check_messages(messages: Any, *, thinking: bool,
                    check_signature: SignatureCheck | None) -> None:
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
    images = sum(1 for g in groups for _, b in g.blocks if b["type"] == "image")
    if images > MAX_IMAGES:
        raise Invalid(f"messages: too many images in the request: {images} > {MAX_IMAGES} "
                      "maximum")
    if thinking:
        _check_thinking_turn(groups)
    if check_signature is not None:
        _check_signatures(groups, check_signature)


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


def _check_signatures(groups: list[_Group], genuine: SignatureCheck) -> None:
    for group in groups:
        for where, block in group.blocks:
            if block["type"] != "thinking":
                continue
            if not genuine(block["thinking"], block["signature"]):
                raise Invalid(f"{where}: Invalid `signature` in `thinking` block (the thinking "
                              f"text or its signature was changed)")


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



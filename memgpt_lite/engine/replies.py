"""What of a model's response may enter the history, and what the user is told about how a
reply ended (cut at max tokens, refused, paused, empty). Used by the agent loop (agent.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from memgpt_lite.engine.config import setting_names
from memgpt_lite.engine.events import Event, NoticeEvent
from memgpt_lite.engine.records import ContentBlock, ModelResponse, canonical_json
from memgpt_lite.engine.text import clean_value

_NOT_IN_ID = re.compile(r"[^a-zA-Z0-9_-]")  # the API's patterns for tool_use ids and names
MAX_NAME = 64


def sendable(content: list[ContentBlock], sent: list[dict]) -> list[ContentBlock]:
    """A response's content as the next request can carry it back after the messages
    `sent`: texts cleaned (lone surrogates), and every tool_use with an id and a name the
    API accepts. The API refuses a request whose tool_use ids repeat (in one reply, or one
    already in the history) or break its pattern, and a tool name that breaks its pattern:
    such a call gets a fresh id or a name of the allowed characters, and is answered under
    it (an unknown name as any unknown tool), so the turn goes on."""
    content = clean_value(content)
    taken = {b.get("id") for m in sent if isinstance(m.get("content"), list)
             for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
    out = []
    for block in content:
        if block.get("type") == "tool_use":
            block = _sendable_call(block, taken)
            taken.add(block["id"])
        out.append(block)
    return out


def _sendable_call(block: ContentBlock, taken: set) -> ContentBlock:
    wanted, name = block.get("id"), block.get("name")
    new_id = wanted if isinstance(wanted, str) and wanted else "toolu"
    new_id = _NOT_IN_ID.sub("_", new_id)
    base, n = new_id, 1
    while new_id in taken:
        n += 1
        new_id = f"{base}_{n}"
    new_name = _NOT_IN_ID.sub("_", name if isinstance(name, str) else "")[:MAX_NAME] or "tool"
    if new_id == wanted and new_name == name:
        return block
    return {**block, "id": new_id, "name": new_name}


def valid_content(content: list[ContentBlock], stop: str | None) -> list[ContentBlock]:
    """What of a response may enter history: a reply cut at max_tokens can end in a
    half-written tool_use, which would leave a call without a result; an empty reply would
    be rejected by the API on the next request; a paused reply is sent back as the last
    message (a prefill), which the API refuses when it ends in whitespace."""
    if stop == "pause_turn" and content and content[-1].get("type") == "text":
        content = [*content[:-1], {**content[-1], "text": str(content[-1]["text"]).rstrip()}]
    blocks = [b for b in content
              if not (b.get("type") == "text" and not str(b.get("text") or "").strip())]
    if stop == "max_tokens":
        blocks = [b for b in blocks if b.get("type") != "tool_use"]
    # A tool input that is not an object (or that no JSON writer can write back, such as a
    # number of thousands of digits) would make every later request fail.
    blocks = [{**b, "input": {}} if b.get("type") == "tool_use" and not _writable(
        b.get("input")) else b for b in blocks]
    if not any(b.get("type") in ("text", "tool_use") for b in blocks):
        blocks.append({"type": "text", "text": "(no reply)"})
    return blocks


def _writable(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    try:
        canonical_json(value)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def stop_notices(stop: str | None, response: ModelResponse) -> Iterator[Event]:
    if stop == "max_tokens":
        yield NoticeEvent("The reply was cut at the max output tokens limit (raise it with "
                          f"{setting_names('max_output_tokens')}).", "warning")
    elif stop == "refusal":
        yield NoticeEvent("The model declined to answer this request.", "warning")
    elif stop == "pause_turn":
        yield NoticeEvent("The model paused its turn at the per-turn call limit.", "warning")
    elif not response.text.strip() and not response.tool_calls:
        yield NoticeEvent("The model sent an empty reply.", "warning")

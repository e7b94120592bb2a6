"""Cheap compression before any summary: old bulky tool results in the queue are folded to
a stub, and the current turn's largest pieces are clipped when it alone is over budget. Both
change only what is sent (`Message.context_content`); the stored message keeps its full
text, and a visible marker says what was left out and how to get it back."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from memgpt_lite.engine.events import ClipEvent
from memgpt_lite.engine.records import Message

FOLD_MARKER = "[folded to save context: {chars:,} chars of {tool} output. Preview: {preview}… " \
              "— call {tool} again if you need the full output]"
CLIP_NOTE = "\n[clipped to fit the context: "
CLIP_MARKER = CLIP_NOTE + "{cut:,} of {total:,} chars not shown. The full text is stored; {how}]"
_FOLDED = re.compile(r"\[folded to save context: [\d,]+ chars of (?P<tool>.+?) output\. Preview: "
                     r".*… — call (?P=tool) again if you need the full output\]", re.S)
FOLD_PREVIEW_CHARS = 160
# The words of the markers themselves (not the preview or the text they keep): a forget must
# not find "the" or "full" in them, or forgetting twice would change something again.
_MARKER_WORDS = re.compile(
    r"\[folded to save context: [\d,]+ chars of [\w.-]+ output\. Preview: "
    r"|… — call [\w.-]+ again if you need the full output\]"
    r"|\[clipped to fit the context: [\d,]+ of [\d,]+ chars not shown\. The full text is "
    r"stored; [^\]]*\]")
MIN_CLIP_CHARS = 400
CLIP_KEEP = 200


def tool_names(messages: list[Message]) -> dict[str, str]:
    return {b["id"]: b.get("name", "tool") for m in messages for b in m.content
            if b.get("type") == "tool_use"}


def fold_content(blocks: list[dict[str, Any]], names: dict[str, str],
                  min_chars: int) -> list[dict[str, Any]] | None:
    changed = False
    out = []
    for b in blocks:
        content = b.get("content")
        if b.get("type") == "tool_result" and isinstance(content, str) and len(content) > min_chars:
            tool = names.get(b.get("tool_use_id", ""), "the tool")
            b = {**b, "content": _fold(content, tool)}
            changed = True
        out.append(b)
    return out if changed else None


def _fold(content: str, tool: str) -> str:
    preview = " ".join(content[:FOLD_PREVIEW_CHARS].split())
    return FOLD_MARKER.format(chars=len(content), tool=tool, preview=preview)


def marker_spans(text: str) -> list[tuple[int, int]]:
    """Where the words of fold and clip markers are in `text`."""
    return [m.span() for m in _MARKER_WORDS.finditer(text)] if "[" in text else []


def refold(sent: str, content: str) -> str | None:
    """The fold of `content` made anew when `sent` is a fold marker (its preview is cut from
    the stored text, so a change there must reach it, e.g. a forget); else None."""
    found = _FOLDED.fullmatch(sent)
    return None if found is None else _fold(content, found.group("tool"))


def clip_largest(current: list[Message], cut: int,
                 kept: Callable[[str, int], int] = lambda text, cut: len(text) - cut,
                 ) -> ClipEvent | None:
    """Clip the largest visible string of the current turn (a text, a tool result, or an
    argument of a tool call) by `cut` of its size (`kept`: the characters left of a text
    when that much goes; by default `cut` characters), re-cutting from the stored original
    so markers never stack. Only context_content changes: the stored message keeps the full
    text."""
    best: tuple[int, Message, int, tuple[str, ...]] | None = None
    for m in current:
        for i, b in enumerate(m.api_content()):
            for path in _clip_slots(b):
                visible = _visible_chars(_get(b, path), _get(m.content[i], path))
                if visible and (best is None or visible > best[0]):
                    best = (visible, m, i, path)
    if best is None or best[0] < MIN_CLIP_CHARS:
        return None
    visible, msg, index, path = best
    original = _get(msg.content[index], path)
    keep = max(CLIP_KEEP, kept(original[:visible], cut))
    how = {"text": "search it with conversation_search.",
           "content": "ask for a narrower result (another query or page).",
           "input": "the call itself ran with the full argument."}[path[0]]
    content = copy.deepcopy(msg.api_content())
    _set(content[index], path, original[:keep] + CLIP_MARKER.format(
        cut=len(original) - keep, total=len(original), how=how))
    msg.context_content = content
    what = {"text": "your message" if msg.role == "user" else "a reply",
            "content": "a tool result", "input": "a tool call's argument"}[path[0]]
    return ClipEvent(what, len(original), keep)


def _clip_slots(block: dict[str, Any]) -> list[tuple[str, ...]]:
    kind = block.get("type")
    if kind == "text":
        return [("text",)]
    if kind == "tool_result":
        return [("content",)]
    if kind == "tool_use" and isinstance(block.get("input"), dict):
        return [("input", k) for k, v in block["input"].items() if isinstance(v, str)]
    return []


def _get(block: dict[str, Any], path: tuple[str, ...]) -> object:
    value: Any = block
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(block: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    for key in path[:-1]:
        block = block[key]
    block[path[-1]] = value


def _visible_chars(sent: object, original: object) -> int:
    """How many chars of the original a (possibly clipped) string still shows."""
    if not isinstance(sent, str) or not isinstance(original, str):
        return 0
    if sent != original and CLIP_NOTE in sent:
        return sent.rindex(CLIP_NOTE)
    return len(sent)

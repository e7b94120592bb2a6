"""The shape of every recording line, checked before a recording is used.

A recording is a file: it may be cut short, edited by hand or damaged. `line_problem` says
what is wrong with one decoded line (None when it has the shape the replay relies on), so a
bad recording is refused with one sentence naming the line instead of failing half-way.

The specs use the language of `shapes.py`.
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine import prompts
from memgpt_lite.engine.config import ConfigError, Settings
from memgpt_lite.engine.shapes import NUMBER, Spec, fits, is_time, problem
from memgpt_lite.engine.tokens import RULES

OPT_STR = (str, None)
OPT_INT = (int, None)
USAGE = {"?input_tokens": int, "?output_tokens": int, "?cache_creation_input_tokens": int,
         "?cache_read_input_tokens": int}
BLOCK = {"type": str}
RESPONSE = {"content": [BLOCK], "stop_reason": OPT_STR, "usage": USAGE, "?model": str,
            "?id": str}
CALL = {"id": str, "name": str, "input": (dict, None)}
RESULT = {"tool_use_id": str, "content": str, "?is_error": bool}
STRINGS = {"*": str}  # an object whose values are all strings
# What a forget scrubbed (see recording_scrub.py): the user inputs (1-based) whose lines
# changed, and whether the state the replay starts from changed.
FORGOTTEN = {"start": bool, "turns": [int], "?at": str}

LINES: dict[str, dict[str, Spec]] = {
    "header": {"agent": str, "settings": dict, "model": str, "?blocks": STRINGS,
               "?agent_uid": OPT_STR, "?base": OPT_STR, "?delta": (dict, None),
               "?snapshot": (dict, None), "?source": OPT_STR, "?note": OPT_STR,
               "?created_at": OPT_STR, "?version": OPT_STR, "?prompt_digests": (dict, None),
               "?search_layout": (int, None),
               "?forgotten": (FORGOTTEN, None), "?contract": int, "?token_rule": int,
               "?conversation": OPT_INT, "?project": OPT_STR, "?inputs": OPT_INT},
    "user": {"text": str, "?at": OPT_STR, "?retry": bool, "?agent": str,
             "?attachments": [BLOCK], "?compact": bool},
    "model_call": {"call_index": int, "request_digest": str, "estimated_tokens": int,
                   "?purpose": str, "?model": str},
    "response": {"?purpose": str, "response": RESPONSE},
    "tool_call": {"call": CALL},
    "tool_result": {"call": CALL, "result": RESULT, "summary": str},
    "memory_edit": {"label": str, "op": str, "old": OPT_STR, "new": str, "used": int,
                    "limit": int},
    "memory_confirm": {"tool": str, "target": str, "old": OPT_STR, "new": OPT_STR,
                       "?scope": str, "?reason": str, "answer": str},
    "pressure_alert": {"used_tokens": int, "budget": int, "percent": NUMBER, "text": str},
    "fold": {"message_ids": [int], "tokens_freed": int},
    "eviction": {"turn_ids": [int], "tokens_freed": int, "by": str, "summary": str,
                 "?used_tokens": int, "?budget": int},
    "summary": {"summary": str, "method": str, "?usage": (USAGE, None)},
    "clip": {"what": str, "original_chars": int, "kept_chars": int},
    "usage": {"usage": USAGE, "cost_usd": NUMBER, "context_tokens": int, "budget": int,
              "?purpose": str},
    "notice": {"message": str, "?level": str},
    "dense_search": {"tool": str, "query": str, "model": str, "keyword_weight": NUMBER,
                     "ids": [int], "scores": [NUMBER], "?error": OPT_STR},
    "error": {"message": str, "error_kind": str, "retryable": bool},
    "turn_end": {"turn_id": int, "text": str, "stop_reason": OPT_STR, "usage": USAGE,
                 "cost_usd": NUMBER, "completed": bool},
    "clock": {"readings": [str]},
    "passage_ids": {"ids": [int]},
    "message_ids": {"ids": [int]},
    "shared_block": {"label": str, "value": str, "after": int},
    "memory": {"blocks": STRINGS},
    "restart": {},
    "command": {"name": str, "args": dict},
    "interrupted": {},
    "prompt_too_long": {"message": str, "?actual": OPT_INT, "?maximum": OPT_INT},
}
TIMES = {"user": ("at",), "clock": ("readings",)}  # fields that must parse as ISO times
# What the engine reads from a response's content blocks, by block type.
BLOCKS: dict[str, dict[str, Spec]] = {"text": {"text": str},
                                      "tool_use": {"id": str, "name": str},
                                      "thinking": {"thinking": str}}


def line_problem(line: Any, version: int) -> str | None:
    """Why a decoded recording line cannot be used, or None."""
    if not isinstance(line, dict) or not isinstance(line.get("type"), str):
        return "it is not a recording line (an object with a type)"
    v = line.get("v", 0)
    if not isinstance(v, int) or isinstance(v, bool):
        return f"its version {v!r} is not a number"
    if v > version:
        return f"it was written by a newer memgpt-lite (format v{v})"
    spec = LINES.get(line["type"])
    if spec is None:
        return f"its type {line['type']!r} is unknown"
    if "t" in line and not fits(line["t"], NUMBER):
        return "its time t is not a number"
    if line["type"] == "header" and line.get("contract", 1) not in prompts.CONTRACTS:
        return (f"it was made under the model contract {line.get('contract')!r}, which this "
                "memgpt-lite does not know (upgrade it to replay this recording)")
    if line["type"] == "header" and line.get("token_rule", 1) not in RULES:
        return (f"its estimates counted tokens by the rule {line.get('token_rule')!r}, which "
                "this memgpt-lite does not know (upgrade it to replay this recording)")
    return (problem(line, spec, "") or _time_problem(line) or _blocks_problem(line)
            or _header_problem(line))


def _header_problem(line: dict[str, Any]) -> str | None:
    """The settings, and the blocks the replay starts from: each within the block limit
    those settings give (the store refuses a longer value)."""
    if line["type"] != "header":
        return None
    try:
        settings = Settings.from_dict(line["settings"], room=False)  # the agent's, as stored
    except ConfigError as exc:
        return str(exc).rstrip(".")
    for label, value in (line.get("blocks") or {}).items():
        if len(value) > settings.block_limit:
            return (f"blocks.{label:.40} holds {len(value):,} characters, over the block "
                    f"limit of {settings.block_limit:,}")
    return None


def _blocks_problem(line: dict[str, Any]) -> str | None:
    if line["type"] != "response":
        return None
    for i, block in enumerate(line["response"]["content"]):
        spec = BLOCKS.get(block["type"])
        found = spec and problem(block, spec, f"response.content[{i}]")
        if found:
            return found
    return None


def _time_problem(line: dict[str, Any]) -> str | None:
    for name in TIMES.get(line["type"], ()):
        values = line.get(name)
        for value in values if isinstance(values, list) else [values]:
            if value and not is_time(value):
                return f"{name} {value!r} is not an ISO time"
    return None

"""Agent data from outside (an export being imported, a recording's snapshot being
replayed) is checked like user input before anything is written: every field has the shape
the engine relies on, and the queue it would send is valid for the Messages API.

Each check returns one phrase naming the field (e.g. "messages[3].role must be 'user' or
'assistant'") or None.
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.config import FIELD_RULES, ConfigError, Settings
from memgpt_lite.engine.records import Message, Turn
from memgpt_lite.engine.shapes import is_time, problem
from memgpt_lite.engine.text import clean_text, quoted

MAX_BLOCK_LIMIT = int(FIELD_RULES["block_limit"][2])  # as for the setting that makes blocks
BLOCK = {"type": str}
BLOCK_FIELDS = {"text": {"text": str}, "tool_use": {"id": str, "name": str, "input": dict},
                "tool_result": {"tool_use_id": str, "?content": (str, list)},
                "thinking": {"thinking": str, "signature": str}}
MESSAGE = {"turn_id": int, "role": str, "content": [BLOCK], "?context_content": ([BLOCK], None),
           "created_at": str, "in_context": (bool, int), "?position": int, "?status": str,
           "?conversation": int}
PASSAGE = {"text": str, "tags": [str], "created_at": str, "?turn_id": (int, None),
           "?id": int}
STATUSES = ("", "open", "interrupted")
BLOCK_ROW = {"label": str, "value": str, "limit": int, "?scope": str}
SCOPES = ("agent", "user")
VERSION_ROW = {"passage_id": int, "text": str, "tags": [str], "created_at": str,
               "superseded_at": str, "change": str, "?reason": str, "?turn_id": (int, None),
               "?origin_turn_id": (int, None)}
CHANGES = ("update", "delete")
HISTORY_ROW = {"label": str, "old_value": (str, None), "new_value": str, "source": str,
               "created_at": str, "?turn_id": (int, None), "?scope": str,
               "?project": (str, None)}
HISTORY_SCOPES = ("agent", "user", "project")
CONVERSATION = {"id": int, "started_at": str, "last_used_at": str, "?title": str,
                "?summary": str, "?state": dict}
AGENT = {"name": str, "settings": dict, "?summary": str, "created_at": str,
         "?last_used_at": (str, None), "?state": dict, "?model": str}
# A snapshot's rows, as store/snapshot.py writes them (JSON columns decoded).
ROW_IDS = {"id": int, "?agent_id": int, "?rev": int}
DELTA = {"since": int, "rev": int, "agent": {"id": int, "name": str, "settings": dict,
                                             "summary": str, "created_at": str, "?state": dict,
                                             "?uid": str, "?rev": int},
         "blocks": [{"id": int, "label": str, "value": str, "char_limit": int,
                     "?scope": str}],
         "block_history": [HISTORY_ROW | ROW_IDS],
         "messages": [MESSAGE | ROW_IDS | {"?seq": int, "?index_text": str,
                                           "?conversation_id": int}],
         "passages": [PASSAGE | ROW_IDS | {"?norm": str, "?index_text": str}],
         "?passage_history": [VERSION_ROW | ROW_IDS],
         "?conversations": [CONVERSATION | ROW_IDS],
         "?project": (str, None),
         "?project_blocks": [{"label": str, "value": str, "char_limit": int}],
         "tombstones": [[(str, int)]]}


def delta_problem(delta: Any) -> str | None:
    """Why a recording's snapshot delta cannot be applied, or None."""
    found = problem(delta, DELTA, "delta") or settings_problem(
        delta["agent"]["settings"], "delta.agent.settings") or conversations_problem(
        delta.get("conversations") or [], "delta.conversations")
    if found:
        return found
    for i, m in enumerate(delta["messages"]):
        found = message_problem(m, f"delta.messages[{i}]")
        if found:
            return found
    return versions_problem(delta.get("passage_history") or [], "delta.passage_history")


def export_problem(doc: dict[str, Any]) -> str | None:
    """Why an agent export cannot be imported, or None (the queue is checked separately,
    once the messages are built)."""
    found = (problem(doc.get("agent"), AGENT, "agent")
             or settings_problem(doc["agent"]["settings"], "agent.settings")
             or blocks_problem(doc.get("blocks"))
             or history_problem(doc.get("block_history", []))
             or conversations_problem(doc.get("conversations", []), "conversations")
             or rows_problem(doc.get("passages"), PASSAGE, "passages")
             or versions_problem(doc.get("passage_history", []), "passage_history"))
    if found:
        return found
    found = _times_problem(doc)
    if found:
        return found
    if not isinstance(doc.get("messages"), list):
        return "messages must be a list"
    ids = {c["id"] for c in doc.get("conversations") or []} or {1}
    for i, m in enumerate(doc["messages"]):
        found = message_problem(m, f"messages[{i}]")
        if found:
            return found
        if m.get("conversation", 1) not in ids:
            return f"messages[{i}].conversation names no conversation of the export"
    return None


def conversations_problem(rows: Any, where: str) -> str | None:
    """An agent's conversations as exported (or as snapshot rows, decoded): ids from 1,
    each once, times that read back as times."""
    found = rows_problem(rows, CONVERSATION, where)
    if found:
        return found
    seen: set[int] = set()
    for i, row in enumerate(rows):
        if row["id"] < 1 or row["id"] in seen:
            return f"{where}[{i}].id must be 1 or more, and given once"
        seen.add(row["id"])
        for name in ("started_at", "last_used_at"):
            if not is_time(row[name]):
                return f"{where}[{i}].{name} {quoted(row[name], 40)} is not an ISO time"
    return None


def settings_problem(value: Any, where: str) -> str | None:
    # An agent's settings as it has them: a window that leaves no room (stored by an older
    # version) is the chat's warning and an import's sentence (agent_checks), not damage.
    try:
        Settings.from_dict(value, where=where, room=False)
    except ConfigError as exc:
        return str(exc).rstrip(".")
    return None


def message_problem(m: Any, where: str) -> str | None:
    """A message as exported (or as a snapshot row, decoded)."""
    found = problem(m, MESSAGE, where)
    if found:
        return found
    if m["role"] not in ("user", "assistant"):
        return f"{where}.role must be 'user' or 'assistant', got {quoted(m['role'], 30)}"
    if m["turn_id"] < 1:
        return f"{where}.turn_id must be 1 or more"
    if m.get("conversation", 1) < 1:
        return f"{where}.conversation must be 1 or more"
    if m.get("status", "") not in STATUSES:
        return f"{where}.status must be one of {', '.join(map(repr, STATUSES))}"
    if not is_time(m["created_at"]):
        return f"{where}.created_at {quoted(m['created_at'], 40)} is not an ISO time"
    for name in ("content", "context_content"):
        for i, block in enumerate(m.get(name) or []):
            spec = BLOCK_FIELDS.get(block["type"])
            found = spec and problem(block, spec, f"{where}.{name}[{i}]")
            if found:
                return found
    return None


def _times_problem(doc: dict[str, Any]) -> str | None:
    """Every stored time must read back as one (sorting and date filters rely on it)."""
    stamps = [("agent.created_at", doc["agent"]["created_at"]),
              ("agent.last_used_at", doc["agent"].get("last_used_at"))]
    for table in ("passages", "block_history", "passage_history"):
        stamps += [(f"{table}[{i}].created_at", row["created_at"])
                   for i, row in enumerate(doc.get(table) or [])]
    bad = next(((where, v) for where, v in stamps if v is not None and not is_time(v)), None)
    return None if bad is None else f"{bad[0]} {quoted(bad[1], 40)} is not an ISO time"


def rows_problem(rows: Any, spec: Any, where: str) -> str | None:
    if not isinstance(rows, list):
        return f"{where} must be a list"
    for i, row in enumerate(rows):
        found = problem(row, spec, f"{where}[{i}]")
        if found:
            return found
    return None


def blocks_problem(blocks: Any, where: str = "blocks") -> str | None:
    found = rows_problem(blocks, BLOCK_ROW, where)
    if found:
        return found
    for i, b in enumerate(blocks):
        if not b["label"].strip() or not 1 <= b["limit"] <= MAX_BLOCK_LIMIT \
                or len(b["value"]) > b["limit"]:
            return (f"{where}[{i}] needs a label, a limit of 1 to {MAX_BLOCK_LIMIT:,} "
                    f"characters and a value within it")
        if b.get("scope", "agent") not in SCOPES:
            return f"{where}[{i}].scope must be 'agent' or 'user'"
    return None


def history_problem(rows: Any, where: str = "block_history") -> str | None:
    found = rows_problem(rows, HISTORY_ROW, where)
    if found:
        return found
    for i, row in enumerate(rows):
        if row.get("scope", "agent") not in HISTORY_SCOPES:
            return f"{where}[{i}].scope must be one of {', '.join(HISTORY_SCOPES)}"
    return None


def versions_problem(rows: Any, where: str) -> str | None:
    """Passage history versions as exported (or as snapshot rows, decoded)."""
    found = rows_problem(rows, VERSION_ROW, where)
    if found:
        return found
    for i, row in enumerate(rows):
        if row["change"] not in CHANGES:
            return f"{where}[{i}].change must be 'update' or 'delete'"
        if not is_time(row["superseded_at"]):
            return (f"{where}[{i}].superseded_at {quoted(row['superseded_at'], 40)} is not an "
                    f"ISO time")
    return None


# Fields of a content block that the engine sets on every request it builds (the cache
# breakpoints): one stored in a message would add to the engine's own, and the API refuses
# more than four. An import drops them; doctor finds an agent that holds them.
ENGINE_OWNED = ("cache_control",)


def without_engine_fields(blocks: Any) -> Any:
    """Content blocks (and the blocks inside tool results) without ENGINE_OWNED fields."""
    if not isinstance(blocks, list):
        return blocks
    out = []
    for block in blocks:
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k not in ENGINE_OWNED}
            if isinstance(block.get("content"), list):
                block["content"] = without_engine_fields(block["content"])
        out.append(block)
    return out


def engine_fields_in(messages: list[Message]) -> int:
    """How many blocks of `messages` carry a field the engine owns."""
    def count(blocks: Any) -> int:
        if not isinstance(blocks, list):
            return 0
        return sum(isinstance(b, dict) and (any(k in b for k in ENGINE_OWNED)
                                            + count(b.get("content"))) for b in blocks)
    return sum(count(m.content) + count(m.context_content) for m in messages)


def next_request_problem(queue: list[Message]) -> str | None:
    """Why the API would refuse the next request of an agent with this queue (doctor)."""
    owned = engine_fields_in(queue)
    if owned:
        return (f"{owned} message block(s) in its queue carry cache_control, which the engine "
                f"sets itself: the API refuses every request with more than four")
    return queue_problem(queue)


def queue_problem(messages: list[Message]) -> str | None:
    """Why a conversation's queue (its messages in context) could not be sent to the API as
    history before a new user message, or None; each conversation has a queue of its own."""
    by_conversation: dict[int | None, list[Message]] = {}
    for m in messages:
        if m.in_context:
            by_conversation.setdefault(m.conversation_id, []).append(m)
    for queue in by_conversation.values():
        found = _one_queue_problem(queue)
        if found:
            return found
    return None


def _one_queue_problem(queue: list[Message]) -> str | None:
    if not queue:
        return None
    turns = _turns(queue)
    if any(t.messages[0].role != "user" or t.messages[-1].role != "assistant" for t in turns):
        return "the queue holds a turn that does not start with the user and end with a reply"
    body = {"model": "check", "max_tokens": 1, "tools": _tools(queue),
            "messages": [m.to_api() for m in queue]
            + [{"role": "user", "content": [{"type": "text", "text": "next"}]}]}
    found = validate_request(body)
    return None if found is None else f"the queue is not valid for the API ({found})"


def _turns(queue: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    for m in queue:
        if not turns or turns[-1].id != m.turn_id:
            turns.append(Turn(m.turn_id, []))
        turns[-1].messages.append(m)
    return turns


def _tools(queue: list[Message]) -> list[dict[str, Any]]:
    """Definitions for the tool names the queue uses: the API wants tools defined whenever
    the history holds tool blocks."""
    names = sorted({b["name"] for m in queue for b in m.api_content()
                    if b.get("type") == "tool_use"})
    return [{"name": clean_text(n), "input_schema": {"type": "object"}} for n in names]

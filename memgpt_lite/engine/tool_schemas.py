"""The memory tools' schemas as the model sees them, and the check of the arguments it sends.

Every argument is bounded, so a model's mistake comes back as an error it can act on (see
memory.py), never reaching the store as a number it cannot hold or a text that costs minutes
to index. The schemas follow the model-facing contract (prompts.CONTRACT): contract 1's
`conversation_search` is kept for the replay of recordings made under it.
"""

from __future__ import annotations

import reprlib

from memgpt_lite.engine import prompts, recall_page
from memgpt_lite.engine.prompts import CONTRACT
from memgpt_lite.engine.recall_page import LAYOUT

MEMORY_TOOL_NAMES = ("core_memory_append", "core_memory_replace", "conversation_search",
                     "archival_insert", "archival_update", "archival_delete", "archival_search")
MAX_PAGE = 1_000
MAX_TEXT = 20_000  # block contents, passages
MAX_QUERY = 1_000
MAX_LABEL = 100
MAX_TAGS, MAX_TAG = 20, 50
MAX_ID = 2**53  # any passage id there can be, and no number SQLite cannot hold
MAX_REASON = 1_000
_TEXT = {"type": "string", "maxLength": MAX_TEXT}
_LABEL = {"type": "string", "maxLength": MAX_LABEL}
_QUERY = {"type": "string", "maxLength": MAX_QUERY}
_DAY = {"type": "string", "maxLength": 10}
_PAGE = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE,
         "description": "1-based page of results (5 per page). Default 1."}
_TAGS = {"type": "array", "items": {"type": "string", "maxLength": MAX_TAG},
         "maxItems": MAX_TAGS}
_PASSAGE_ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID,
               "description": "The passage's id (#N)."}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"name": name, "description": description,
            "input_schema": {"type": "object", "properties": properties,
                             "required": required, "additionalProperties": False}}


def _message_page(layout: int) -> dict:
    """conversation_search's page argument, naming the page size of the search layout."""
    size = recall_page.PER_PAGE[layout]
    return _PAGE if size == 5 else {
        **_PAGE, "description": f"1-based page of results ({size} per page). Default 1."}


def _conversation_search(layout: int, contract: int) -> dict:
    properties: dict = {
        "query": {**_QUERY, "description": "Keywords or a question."},
        "page": _message_page(layout),
        "start_date": {**_DAY, "description": "Only messages on or after this day, YYYY-MM-DD."},
        "end_date": {**_DAY, "description": "Only messages on or before this day, YYYY-MM-DD."}}
    if contract == 1:
        return _tool(
            "conversation_search",
            "Search the full history of this conversation, including turns no longer in "
            "your context window. Use it before saying you don't know something the user "
            "may have told you earlier, or when the user refers to a past conversation. "
            "Matches any of the words (ranked by relevance), so use specific keywords "
            "(names, nouns) and try synonyms if the first search finds nothing. Only what "
            "the user and you said is searched, not tool calls or results.",
            properties, ["query"])
    names = ("Each hit names its conversation and date." if layout < 4 else
             "Hits are grouped under their date; one from another conversation names it.")
    return _tool(
        "conversation_search",
        "Search everything the user and you have said, in this conversation and in earlier "
        "ones, including turns no longer in your context window. Use it before saying you "
        "don't know something the user may have told you, or when the user refers to a past "
        f"conversation. {names} Matches any of the words "
        "(ranked by relevance), so use specific keywords (names, nouns) and try synonyms if "
        "the first search finds nothing. Only what the user and you said is searched, not "
        "tool calls or results.",
        {**properties, "current_only": {"type": "boolean", "description":
                                        "Only this conversation. Default false."}},
        ["query"])


def memory_tool_schemas(layout: int = LAYOUT, contract: int = CONTRACT) -> list[dict]:
    """Anthropic tool definitions for the seven memory tools (stable: part of the cache);
    `layout`: the search layout conversation_search pages with (recall_page.py);
    `contract`: the model-facing contract (prompts.CONTRACT)."""
    return [
        _tool("core_memory_append",
              "Add a line to a core memory block. Core memory is always in your context, so "
              "use it for durable facts you need in every conversation: the user's name, "
              "preferences, ongoing projects (block 'human'), and your own persona "
              "(block 'persona'). Each block has a character limit; when a block is nearly "
              "full, store details with archival_insert instead. Returns the new block value.",
              {"label": {**_LABEL, "description": "Block to edit, e.g. 'human' or 'persona'."},
               "content": {**_TEXT, "description": "Text to append, as a new line."}},
              ["label", "content"]),
        _tool("core_memory_replace",
              "Replace text in a core memory block, to correct or update a fact. old_content "
              "must match the block's current text exactly once (copy it from the block); "
              "include more surrounding text if it occurs several times. Use an empty "
              "new_content to delete old_content. Returns the new block value.",
              {"label": {**_LABEL, "description": "Block to edit, e.g. 'human' or 'persona'."},
               "old_content": {**_TEXT, "description": "Exact current text to replace."},
               "new_content": {**_TEXT,
                               "description": "Replacement text; empty string deletes."}},
              ["label", "old_content", "new_content"]),
        _conversation_search(layout, contract),
        _tool("archival_insert",
              "Save a passage to archival memory: long-term storage outside your context "
              "with no size limit, searched with archival_search. Use it for details, "
              "documents, and facts worth keeping that do not need to be in core memory. "
              "Write each passage so it makes sense on its own. Returns the passage id and "
              "similar stored passages: if the new one corrects one of them, fix the old one "
              "with archival_update or archival_delete. If an almost identical passage "
              "exists, nothing is stored and its id is returned.",
              {"content": {**_TEXT, "description": "The passage text."},
               "tags": {**_TAGS, "description": "Optional short topic tags, e.g. ['work']."}},
              ["content"]),
        _tool("archival_update",
              "Correct a stored passage by replacing its whole text, e.g. a fact that "
              "changed. The old version is kept as history and never searched again.",
              {"passage_id": _PASSAGE_ID,
               "content": {**_TEXT, "description": "The complete new text."}},
              ["passage_id", "content"]),
        _tool("archival_delete",
              "Delete a passage that is wrong, no longer true, or that the user asked you to "
              "forget. It is never searched again (its last version stays in history until "
              "the user runs forget).",
              {"passage_id": _PASSAGE_ID,
               "reason": {"type": "string", "maxLength": MAX_REASON,
                          "description": "Why, in a few words."}},
              ["passage_id", "reason"]),
        _tool("archival_search",
              "Search archival memory (passages saved with archival_insert). Use it when a "
              "question may be answered by something you stored earlier. Matches any of the "
              "words, ranked by relevance; optional tags keep passages having any of them.",
              {"query": {**_QUERY, "description": "Keywords or a question."},
               "page": _PAGE,
               "tags": {**_TAGS, "description": "Only passages with any of these tags."}},
              ["query"]),
    ]


# The arguments each contract's tools take (the search layouts differ only in descriptions).
SCHEMAS = {c: {t["name"]: t["input_schema"] for t in memory_tool_schemas(contract=c)}
           for c in prompts.CONTRACTS}


def _type_ok(value: object, spec: dict) -> bool:
    kind = spec.get("type")
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":  # bool is an int subclass in Python, never a valid integer here
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list) and all(_type_ok(v, spec.get("items", {})) for v in value)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "array": "a list of strings",
               "boolean": "true or false"}


class _Preview(reprlib.Repr):
    """A short repr of any JSON value, for error messages: never raises on a number too
    long to print (Python refuses to write an int of more than 4,300 digits)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 2, 40, 40
        self.maxlist = self.maxdict = 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of about {int(x.bit_length() * 0.30103):,} digits>"
        return repr(x)


def preview(value: object) -> str:
    return _Preview().repr(value)[:60]


def check_arguments(schema: dict, args: object) -> str | None:
    """None when `args` fits the tool's input schema (types and bounds), else one sentence
    for the model. Optional arguments may be null (treated as absent)."""
    if not isinstance(args, dict):
        return "The tool input must be a JSON object of named arguments."
    props, required = schema.get("properties", {}), schema.get("required", [])
    unknown = sorted((k for k in args if k not in props), key=str)
    if unknown:
        return (f"Unknown argument {preview(unknown[0])}; this tool takes: "
                f"{', '.join(props)}.")
    missing = [k for k in required if args.get(k) is None]
    if missing:
        return f"Missing required argument {missing[0]!r}; this tool needs: {', '.join(required)}."
    for key, value in args.items():
        problem = None if value is None else _value_problem(key, value, props[key])
        if problem:
            return problem
    return None


def _value_problem(key: str, value: object, spec: dict) -> str | None:
    if not _type_ok(value, spec):
        want = _TYPE_NAMES.get(spec.get("type", ""), spec.get("type"))
        return f"Argument {key!r} must be {want}, got {type(value).__name__} {preview(value)}."
    low, high = spec.get("minimum"), spec.get("maximum")
    if isinstance(value, int) and ((low is not None and value < low)
                                   or (high is not None and value > high)):
        return f"Argument {key!r} must be between {low} and {high:,}, got {preview(value)}."
    if isinstance(value, str) and len(value) > spec.get("maxLength", len(value)):
        return (f"Argument {key!r} is {len(value):,} characters long; at most "
                f"{spec['maxLength']:,} are accepted.")
    if isinstance(value, list):
        if len(value) > spec.get("maxItems", len(value)):
            return (f"Argument {key!r} has {len(value):,} items; at most {spec['maxItems']} "
                    "are accepted.")
        for item in value:
            problem = _value_problem(key, item, spec.get("items", {}))
            if problem:
                return problem
    return None

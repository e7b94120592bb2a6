"""What `memgpt-lite mcp` says about a stdin line the MCP SDK refuses to read.

The SDK drops such a line without a word (a JSON-RPC batch, `"jsonrpc": "1.0"`, JSON nested
deeper than its parser goes, an id of the wrong type, a line that is not JSON), and a client
waiting on the request it meant hangs. So each refused line that carries a usable request id
is answered with a JSON-RPC error (-32700 for what the SDK cannot parse, -32600 for what is
not a valid message), and one without such an id gets a one-line notice on stderr.

The ids are found by reading the line's top level alone, member by member, never descending
into nested values: a line nested too deeply for any recursive parser, or cut off after its
id, still shows the id it carries.

A request the SDK reads but whose params it refuses it answers only "Invalid request
parameters"; `params_problem` and `arguments_problem` say what is wrong instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR

from memgpt_lite.engine.text import shorten

NESTED = object()  # a member whose value is an object or array, skipped unread
_SPACE = re.compile(r"[ \t\n\r]*")
_QUOTE_OR_BRACKET = re.compile(r'["\[\]{}]')
_REST_OF_STRING = re.compile(r'(?:[^"\\]++|\\.)*+"', re.DOTALL)  # possessive: one pass
_DECODER = json.JSONDecoder()


@dataclass
class Refusal:
    code: int
    message: str  # one sentence, for the client and for stderr alike
    ids: list[int | str] = field(default_factory=list)  # the requests to answer
    unanswered: str = "it carries no id to answer"  # why nothing is answered, when ids is empty


def refusal(line: str, error: Exception) -> Refusal | None:
    """The answer to `line`, which the SDK refused with `error`; None for a blank line, which
    is no message at all (a client's or a person's extra newline)."""
    if not line.strip():
        return None
    first = (getattr(error, "errors", lambda: [{}])() or [{}])[0]
    kind, top = _top_level(line)
    messages = top if kind == "array" else [top] if kind == "object" else []
    if first.get("type") == "json_invalid":  # the SDK could not parse it: -32700
        said = str(first.get("msg", "")).removeprefix("Invalid JSON: ")
        message = ("The line nests JSON too deeply for the MCP SDK to read (about 250 levels "
                   "at most)." if "recursion limit" in said
                   else f"The line is not valid JSON ({shorten(said, 120)}).")
        return _answered(Refusal(PARSE_ERROR, message), messages)
    if kind == "array":
        return _answered(Refusal(INVALID_REQUEST, "A JSON array (a JSON-RPC batch) is not an "
                                 "MCP message; send each message as one JSON object on a "
                                 "line of its own."), messages)
    if kind != "object":
        return Refusal(INVALID_REQUEST, f"The line is a JSON {kind}, not a JSON-RPC message "
                                        "object.")
    return _answered(Refusal(INVALID_REQUEST, _what_is_wrong(top, error)), messages)


def misread_id(line: str) -> Refusal | None:
    """A request whose id is neither a string nor an integer (null, 1.5, true, an object):
    the SDK reads it as a notification, and it would go unanswered without a word."""
    if '"id"' not in line:  # the common notification: nothing to look at
        return None
    kind, top = _top_level(line)
    if kind != "object" or "id" not in top:
        return None
    return _answered(Refusal(INVALID_REQUEST, _bad_id(top["id"])), [top])


def _bad_id(value: object) -> str:
    return (f"The message's id is {shorten(_shown(value), 40)}; a JSON-RPC id must be a string "
            "or an integer.")


def _what_is_wrong(top: dict[str, Any], error: Any) -> str:
    if top.get("jsonrpc") != "2.0":
        given = ("has no \"jsonrpc\" member" if "jsonrpc" not in top else
                 f"says \"jsonrpc\": {shorten(_shown(top['jsonrpc']), 40)}")
        return f"The message {given}; MCP speaks JSON-RPC 2.0, so it must say \"jsonrpc\": \"2.0\"."
    if "id" in top and _usable_id(top["id"]) is None:
        return _bad_id(top["id"])
    shape = "JSONRPCRequest" if "id" in top and "method" in top else (
        "JSONRPCNotification" if "method" in top else "")
    details = [e for e in error.errors() if shape and e["loc"][:1] == (shape,)]
    if not details:
        return "The message is neither a JSON-RPC 2.0 request, nor a notification, nor a response."
    where = ".".join(str(part) for part in details[0]["loc"][1:]) or "message"
    return (f"The {'request' if shape == 'JSONRPCRequest' else 'notification'} is not valid "
            f"JSON-RPC 2.0 ({where}: {shorten(str(details[0]['msg']), 120).lower()}).")


def _answered(refusal: Refusal, messages: list[dict[str, Any]]) -> Refusal:
    """The usable ids of the requests among `messages`. A response is never answered, or two
    peers could answer each other's errors forever."""
    for message in messages:
        request_id = _usable_id(message.get("id"))
        if request_id is None:
            if "id" in message:
                refusal.unanswered = "its id is not one to answer"
        elif "method" in message or not ({"result", "error"} & message.keys()):
            refusal.ids.append(request_id)
        else:
            refusal.unanswered = "a response is never answered"
    return refusal


def _usable_id(value: object) -> int | str | None:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _shown(value: object) -> str:
    return "an object or array" if value is NESTED else json.dumps(value, ensure_ascii=False)


def _top_level(line: str) -> tuple[str, Any]:
    """("object", its members), ("array", the members of each object in it), or the kind of
    the value for anything else; read as far as the line is JSON."""
    start = _SPACE.match(line).end()  # type: ignore[union-attr]
    opening = line[start:start + 1]
    if opening == "{":
        return "object", _members(line, start)[0]
    if opening == "[":
        return "array", _objects_in_array(line, start)
    try:
        value = _DECODER.raw_decode(line, start)[0]
    except ValueError:
        return "text", None
    return {str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number"), None


def _members(line: str, at: int) -> tuple[dict[str, Any], int | None]:
    """The members of the object opening at `at`, nested values as NESTED, and where the
    object ends (None where the line stops being JSON: what was read before is kept)."""
    found: dict[str, Any] = {}
    at = _SPACE.match(line, at + 1).end()  # type: ignore[union-attr]
    if line.startswith("}", at):
        return found, at + 1
    while line.startswith('"', at):
        try:
            key, at = json.decoder.scanstring(line, at + 1)  # type: ignore[attr-defined]
        except ValueError:
            return found, None
        at = _SPACE.match(line, at).end()  # type: ignore[union-attr]
        if not line.startswith(":", at):
            return found, None
        value, end = _value(line, _SPACE.match(line, at + 1).end())  # type: ignore[union-attr]
        if end is None:
            return found, None
        found[key] = value
        at = _SPACE.match(line, end).end()  # type: ignore[union-attr]
        if line.startswith("}", at):
            return found, at + 1
        if not line.startswith(",", at):
            return found, None
        at = _SPACE.match(line, at + 1).end()  # type: ignore[union-attr]
    return found, None


def _objects_in_array(line: str, at: int) -> list[dict[str, Any]]:
    objects = []
    at = _SPACE.match(line, at + 1).end()  # type: ignore[union-attr]
    while at < len(line) and line[at] != "]":
        if line[at] == "{":
            members, end = _members(line, at)
            objects.append(members)
        else:
            end = _value(line, at)[1]
        if end is None:
            break
        at = _SPACE.match(line, end).end()  # type: ignore[union-attr]
        if not line.startswith(",", at):
            break
        at = _SPACE.match(line, at + 1).end()  # type: ignore[union-attr]
    return objects


def _value(line: str, at: int) -> tuple[Any, int | None]:
    """A scalar read, or a nested value skipped by counting brackets outside strings (no
    recursion, so no depth is too deep); None as the end where the line stops being JSON."""
    if line[at:at + 1] not in ("{", "["):
        try:
            return _DECODER.raw_decode(line, at)
        except ValueError:
            return None, None
    depth = 0
    while (token := _QUOTE_OR_BRACKET.search(line, at)) is not None:
        at = token.end()
        if token.group() == '"':  # a string, skipped whole: its brackets are text
            string = _REST_OF_STRING.match(line, at)
            if string is None:
                break  # never closed: no JSON from here on (and no rescan, so no n²)
            at = string.end()
        elif token.group() in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return NESTED, at
    return NESTED, None


_WANTED = {"string_type": "a string", "dict_type": "a JSON object", "model_type": "a JSON object",
           "int_type": "an integer", "int_from_float": "an integer", "int_parsing": "an integer",
           "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
           "list_type": "an array"}


def params_problem(method: str, error: Any) -> str:
    """One sentence for the params of a `method` request that failed the SDK's validation
    with the pydantic `error` (of the request, or of its params alone): the first member at
    fault and what it should be."""
    first = error.errors()[0]
    loc = first["loc"][1:] if first["loc"][:1] == ("params",) else first["loc"]
    where = ".".join(["params", *(str(part) for part in loc)])
    if first["type"] == "missing":
        what = "is missing"
    elif first["type"] in _WANTED:
        what = f"must be {_WANTED[first['type']]}, got {json_kind(first['input'])}"
    else:
        what = f"is not valid ({shorten(str(first['msg']), 120).lower()})"
    return f"The {method} request is not valid: {where} {what}."


def arguments_problem(name: str, arguments: object) -> str:
    """A tool call whose arguments are not an object: a JSON text of one (a client that
    encoded them twice) is not unpacked, as the model's own calls are not."""
    hint = " (send the object itself, not its JSON text)" if isinstance(arguments, str) else ""
    return (f"The arguments of {shorten(name, 60)} must be a JSON object of its inputs, got "
            f"{json_kind(arguments)}{hint}.")


def json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(
        type(value), "a number")

"""What `memgpt-lite mcp` answers to a stdin line the MCP SDK refuses: read with the SDK's own
parser, as the server reads it; the processes themselves are in test_mcp_server.py."""

from __future__ import annotations

import json
import time

import mcp_types as types
import pytest

from memgpt_lite.terminal.mcp_refusals import misread_id, refusal


def refused(line: str):
    """As the server reads a line: a refusal where the SDK fails, or reads a notification."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as error:
        return refusal(line, error)
    return misread_id(line) if isinstance(message, types.JSONRPCNotification) else None


DEEP = "[" * 100_000 + "]" * 100_000  # past any recursive parser


@pytest.mark.parametrize("line, ids, code", [
    ('{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"a": ' + DEEP + "}}", [7],
     -32700),
    ('{"params": {"a": ' + DEEP + '}, "method": "ping", "jsonrpc": "2.0", "id": "late"}',
     ["late"], -32700),
    ('{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "core_me', [8],
     -32700),
    ('{"jsonrpc": "2.0", "method": "x", "id": 9, "params": {"s": "a } ] \\" {"}, "b": ?}', [9],
     -32700),  # brackets in strings are not counted
    (json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
                 {"jsonrpc": "2.0", "id": 3, "result": {}}]), [1, "two"], -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 2**80, "method": 5}), [2**80], -32600),
    (json.dumps({"jsonrpc": 2, "id": 4, "method": "ping"}), [4], -32600),
    (json.dumps({"id": 4, "method": "ping"}), [4], -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 5}), [5], -32600),
])
def test_a_refused_line_with_a_usable_id_is_answered_with_one_sentence(line, ids, code):
    said = refused(line)
    assert said is not None and said.ids == ids and said.code == code
    assert said.message.endswith(".") and "\n" not in said.message
    assert len(said.message) < 300


@pytest.mark.parametrize("line, why", [
    ("not json", "carries no id"),
    ("[]", "carries no id"),
    (DEEP, "carries no id"),
    ("42", "carries no id"),
    (json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}), "its id is not one"),
    (json.dumps({"jsonrpc": "2.0", "id": False, "method": "ping"}), "its id is not one"),
    (json.dumps({"jsonrpc": "2.0", "id": [1], "method": "ping"}), "its id is not one"),
    (json.dumps({"jsonrpc": "2.0", "id": 3, "result": 5}), "a response is never answered"),
    (json.dumps({"jsonrpc": "2.0", "id": 3, "error": "bad"}), "a response is never answered"),
])
def test_a_refused_line_without_one_is_only_noted(line, why):
    said = refused(line)
    assert said is not None and said.ids == [] and why in said.unanswered


def test_what_is_echoed_is_cut_short_and_accepted_lines_are_left_to_the_sdk():
    said = refused(json.dumps({"jsonrpc": "x" * 10_000 + "\n\x1b", "id": 1, "method": "ping"}))
    assert said is not None and len(said.message) < 200 and "\n" not in said.message
    assert refused(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})) is None
    assert refused(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 1, "id": 1}})) is None
    assert refused("   \n") is None  # a blank line is no message: the SDK skips it


@pytest.mark.parametrize("tail", ["x" * 5_000_000, '\\"' * 2_000_000, "[" * 2_000_000])
def test_a_line_of_megabytes_is_read_in_one_pass(tail):
    line = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"s": "' + tail
    started = time.monotonic()
    assert refused(line).ids == [1]  # cut off inside its string
    assert time.monotonic() - started < 2  # a rescan at each quote took minutes

"""A response stream's text made valid before the SDK reads it (engine/sse_text.py)."""

from __future__ import annotations

import json

import pytest

from memgpt_lite.engine.sse_text import NotUTF8, PartialJSON, cleaned_stream

TOOL_JSON = json.dumps({"query": "lone \ud800 low \udc00 pair \U0001f600 slash \\ud800 end"})
# What a reader of the cleaned JSON must get: each lone half U+FFFD, the pair and the escaped
# backslash (a literal "\ud800" typed as text, not an escape) as they were.
WANTED = {"query": "lone \ufffd low \ufffd pair \U0001f600 slash \\ud800 end"}


def fed(pieces: list[str]) -> str:
    partial = PartialJSON()
    return "".join(partial.feed(p) for p in pieces)


def test_lone_surrogate_escapes_become_u_fffd_and_pairs_stay():
    assert json.loads(fed([TOOL_JSON])) == WANTED


@pytest.mark.parametrize("at", range(1, len(TOOL_JSON)))
def test_an_escape_split_between_two_deltas_is_cleaned_all_the_same(at):
    assert json.loads(fed([TOOL_JSON[:at], TOOL_JSON[at:]])) == WANTED


def test_json_without_surrogates_is_passed_on_unchanged():
    text = json.dumps({"a": "quote \" tab \t \\u0041 é", "b": [1, 2.5, None]})
    assert fed([text[i:i + 3] for i in range(0, len(text), 3)]) == text


def sse(*events: dict) -> bytes:
    return b"".join(b"event: e\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_a_text_delta_with_a_lone_surrogate_is_cleaned_and_other_lines_kept_as_sent():
    good = sse({"type": "ping"})
    bad = sse({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "odd \ud800 text"}})
    out = b"".join(cleaned_stream(iter([good, bad[:20], bad[20:]])))
    assert out.startswith(good)  # untouched: same bytes
    data = [json.loads(line[5:]) for line in out.split(b"\n") if line.startswith(b"data:")]
    assert data[1]["delta"]["text"] == "odd \ufffd text"
    out.decode("utf-8")


def test_a_byte_that_is_not_utf8_is_named():
    with pytest.raises(NotUTF8) as info:
        list(cleaned_stream(iter([b": ping\n", b'data: {"text": "caf\xe9"}\n\n'])))
    assert info.value.offset == len(b"data: {\"text\": \"caf")


def test_lines_are_passed_on_as_they_complete():
    # A server that stalls after a line must not have that line held back (the deadline and
    # the spinner see what has arrived).
    stream = cleaned_stream(iter([b"event: message_start\ndata: {}\n", b"\nevent: x"]))
    assert next(stream) == b"event: message_start\ndata: {}\n"


def test_the_lines_before_a_bad_byte_are_passed_on_first():
    # message_start and a bad line in one chunk: the SDK must still see message_start (its
    # usage is what the failed call was billed).
    stream = cleaned_stream(iter([b"event: message_start\ndata: {}\n\ndata: \xff\n\n"]))
    assert next(stream) == b"event: message_start\ndata: {}\n\n"
    with pytest.raises(NotUTF8):
        next(stream)

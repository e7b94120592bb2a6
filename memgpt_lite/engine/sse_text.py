"""A response stream's text made valid before the SDK reads it (see `AnthropicClient`).

This is the boundary where a reply is built: the SDK turns each SSE data line into events and
accumulates them into the message the engine keeps, and it trusts the server's text. Two things
a broken or hostile server can send would fail the turn there or poison the history after it:

- a lone surrogate (`"\\ud800"` as a JSON escape, with no pair): in a text delta it becomes a
  Python string no file, database or API takes; in a tool call's `partial_json` (JSON inside
  JSON) the SDK's parser refuses it and the turn fails. Both become U+FFFD here, as everywhere
  text enters (`text.clean_text`), so the reply goes on and the next request is valid UTF-8;
- a byte that is not UTF-8: the stream cannot be read at all, so the call fails with one
  sentence (`NotUTF8`) instead of the SDK's decoding error.

Lines are passed on as they complete, unchanged unless they needed cleaning, so a stalled
server still stalls here (the call's deadline ends it) and nothing is re-encoded for nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from memgpt_lite.engine.text import clean_value

REPLACEMENT_ESCAPE = "\\ufffd"


class NotUTF8(ValueError):
    """The server sent a line that is not UTF-8; `offset` is the bad byte's place in it."""

    def __init__(self, offset: int):
        super().__init__(f"byte {offset} of a line is not UTF-8")
        self.offset = offset


def on_response(response: Any) -> None:
    """An httpx response hook: a stream of events is read through `cleaned_stream` (what the
    SDK reads, after any content encoding is undone)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "text/event-stream":
        raw = response.iter_bytes
        response.iter_bytes = lambda *args, **kwargs: cleaned_stream(raw(*args, **kwargs))


def cleaned_stream(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The SSE byte stream `chunks`, line by line, each line checked and cleaned."""
    partials: dict[int, PartialJSON] = {}
    rest = b""
    for chunk in chunks:
        *lines, rest = (rest + chunk).split(b"\n")
        yield from _cleaned_lines(lines, partials)
    if rest:
        yield _cleaned_line(rest, partials)


def _cleaned_lines(lines: list[bytes], partials: dict[int, PartialJSON]) -> Iterator[bytes]:
    """The lines of one chunk; those before a line that is not UTF-8 are passed on first, so
    the events they end (message_start and its usage: the input is billed) are not lost."""
    out: list[bytes] = []
    try:
        for line in lines:
            out.append(_cleaned_line(line, partials) + b"\n")
    except NotUTF8:
        if out:
            yield b"".join(out)
        raise
    if out:
        yield b"".join(out)


def _cleaned_line(line: bytes, partials: dict[int, PartialJSON]) -> bytes:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUTF8(exc.start) from None
    # Only a data line can hold an escape; a tool call's JSON is tracked whatever it holds,
    # because an escape may be split between two of its deltas.
    if not line.startswith(b"data:") or not (b"\\u" in line or b"input_json_delta" in line):
        return line
    try:
        event = json.loads(line[5:])
    except ValueError:
        return line  # malformed: the SDK says so in its own way
    cleaned = _cleaned_event(clean_value(event), partials)
    return line if cleaned is event else b"data: " + json.dumps(cleaned).encode("ascii")


def _cleaned_event(event: object, partials: dict[int, PartialJSON]) -> object:
    if not isinstance(event, dict) or event.get("type") != "content_block_delta":
        return event
    delta, index = event.get("delta"), event.get("index")
    if not (isinstance(delta, dict) and delta.get("type") == "input_json_delta"
            and isinstance(delta.get("partial_json"), str) and isinstance(index, int)):
        return event
    text = partials.setdefault(index, PartialJSON()).feed(delta["partial_json"])
    if text == delta["partial_json"]:
        return event
    return {**event, "delta": {**delta, "partial_json": text}}


class PartialJSON:
    """JSON text arriving in pieces, its lone surrogate escapes replaced by `\\ufffd`.

    An escape (or a high surrogate waiting for its low half) at the end of a piece is held
    back and passed on with the next one; what is still held when the block ends belongs to
    a string the server never closed, which the SDK's parser refuses all the same.
    """

    def __init__(self) -> None:
        self.in_string = False
        self.escape = ""  # an escape begun but not complete
        self.high = ""  # a complete high-surrogate escape, waiting for what follows it

    def feed(self, piece: str) -> str:
        out: list[str] = []
        for char in piece:
            self._take(char, out)
        return "".join(out)

    def _take(self, char: str, out: list[str]) -> None:
        if self.escape:
            self.escape += char
            if self.escape[1] != "u":
                self._flush_high(out)
                out.append(self.escape)
                self.escape = ""
            elif len(self.escape) == 6:
                self._surrogate(self.escape, out)
                self.escape = ""
        elif self.in_string and char == "\\":
            self.escape = char
        else:
            self._flush_high(out)
            if char == '"':
                self.in_string = not self.in_string
            out.append(char)

    def _surrogate(self, escape: str, out: list[str]) -> None:
        try:
            code = int(escape[2:], 16)
        except ValueError:
            code = -1  # not hex: passed on for the SDK's parser to refuse
        if 0xDC00 <= code <= 0xDFFF and self.high:
            out.append(self.high + escape)  # a proper pair
            self.high = ""
            return
        self._flush_high(out)
        if 0xD800 <= code <= 0xDBFF:
            self.high = escape
        else:
            out.append(REPLACEMENT_ESCAPE if 0xDC00 <= code <= 0xDFFF else escape)

    def _flush_high(self, out: list[str]) -> None:
        if self.high:
            out.append(REPLACEMENT_ESCAPE)
            self.high = ""

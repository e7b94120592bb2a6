"""An Anthropic-compatible Messages API on 127.0.0.1, for tests and manual runs (stdlib only).

It validates every request at least as strictly as the real API (tool_use/tool_result pairing,
tools defined when the history holds tool blocks, cache breakpoints, block shapes, thinking
and its sampling limits), counts tokens its own way (~3.5 chars per token, so a client
that assumes 4 under-counts, as against the real API; or pessimistically, fewer chars per
token or per UTF-8 byte as a byte-level tokenizer counts CJK, emoji and base64), simulates
prompt caching on `cache_control` prefixes, enforces a configurable context window, and
serves scripted responses or faults in order (streaming SSE or plain JSON).

    with FakeAnthropicServer(context_window=20_000) as server:
        server.enqueue(tool_response([("archival_search", {"query": "x"})]))
        server.enqueue(rate_limited(retry_after=0), times=3)
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)

Run by hand:  python -m memgpt_lite.lab.fake_server --port 8765 [--script replies.jsonl]

About 720 lines in one module on purpose: token counting, the cache rule (and the helpers
that name a prompt's blocks and where two prompts part), the faults and the SSE framing are
each small and exist only for this one server; tests and the long-session benchmark import
them from one place.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import itertools
import json
import math
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.attachments import image_tokens
from memgpt_lite.engine.records import ModelResponse, Usage, canonical_json

CHARS_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 4  # role markers around each message
REQUEST_OVERHEAD = 8
TOOLS_OVERHEAD = 300  # the tool-use system prompt the API adds when tools are present
CACHE_LOOKBACK = 20  # the API looks for earlier cache hits up to 20 blocks before a breakpoint
_SIGNING_KEY = b"memgpt-lite-fake-server"


def sign_thinking(text: str) -> str:
    """The signature this server gives a thinking block; edited thinking no longer matches."""
    mac = hmac.new(_SIGNING_KEY, text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(mac).decode("ascii")


def genuine_thinking(text: str, signature: str) -> bool:
    return hmac.compare_digest(signature, sign_thinking(text))


# --------------------------------------------------------------------------- tokens and caching


@dataclass(frozen=True)
class Counting:
    """How this server counts text: characters (or, `per_byte`, UTF-8 bytes, as a byte-level
    tokenizer counts CJK, emoji and base64) at `chars_per_token` (None: CHARS_PER_TOKEN as
    it is when counted, which tests may change). A server that counts more than the client
    estimates is how the budget promise is tested."""

    chars_per_token: float | None = None
    per_byte: bool = False

    def tokens(self, text: str) -> int:
        size = len(text.encode("utf-8", "surrogatepass")) if self.per_byte else len(text)
        return math.ceil(size / (self.chars_per_token or CHARS_PER_TOKEN))


AS_DEFAULT = Counting()


def _part(block: dict, overhead: int = 0, role: str | None = None,
          counting: Counting = AS_DEFAULT) -> tuple[int, Any, bool]:
    """(tokens, value as hashed, is a breakpoint) of one block; the marker itself is neither
    counted nor hashed, so moving a breakpoint keeps the prefix's hash."""
    clean = {k: v for k, v in block.items() if k != "cache_control"}
    if clean.get("type") == "image":  # priced by its pixels, as the API does, not its bytes
        tokens = overhead + image_tokens(clean)
    else:
        tokens = overhead + counting.tokens(canonical_json(clean))
    return tokens, clean if role is None else [role, clean], bool(block.get("cache_control"))


@dataclass
class _Segment:
    tokens: int
    digest: str  # hash of the whole prompt prefix up to and including this segment
    breakpoint: bool


def _parts(body: dict, counting: Counting) -> list[tuple[int, Any, bool]]:
    """`_part` of the tools, then the system blocks, then each message block."""
    parts = [_part(tool, TOOLS_OVERHEAD if i == 0 else 0, counting=counting)
             for i, tool in enumerate(body.get("tools") or [])]
    system = body.get("system")
    parts += [_part(block, counting=counting) for block in
              ([{"type": "text", "text": system}] if isinstance(system, str) else system or [])]
    for message in body.get("messages") or []:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        parts += [_part(block, MESSAGE_OVERHEAD if j == 0 else 0, message["role"], counting)
                  for j, block in enumerate(blocks)]
    if body.get("cache_control") and parts:  # automatic caching: a breakpoint on the last block
        parts[-1] = (parts[-1][0], parts[-1][1], True)
    return parts


def _segments(body: dict, counting: Counting = AS_DEFAULT) -> list[_Segment]:
    """The prompt as the cache sees it, each segment with the cumulative hash of everything up
    to it, as prefix caching does."""
    running = hashlib.sha256(str(body.get("model")).encode())
    segments = []
    for n, (tokens, value, bp) in enumerate(_parts(body, counting)):
        running.update(canonical_json(value).encode())
        segments.append(_Segment(tokens + (REQUEST_OVERHEAD if n == 0 else 0),
                                 running.copy().hexdigest(), bp))
    return segments


def count_tokens(body: dict, counting: Counting = AS_DEFAULT) -> int:
    """This server's token count for a request (its own heuristic, ~3.5 chars per token
    unless `counting` says otherwise)."""
    return max(1, sum(s.tokens for s in _segments(body, counting)))


def prefix_cache(written: set[Any], digests: Sequence[Any], cumulative: Sequence[int],
                 breakpoints: Sequence[int], min_tokens: int) -> tuple[int, int]:
    """(tokens read, tokens written) of one request under the API's prefix caching, adding
    its writes to `written` (the digests of cached prefixes). It reads the longest prefix
    that an earlier request wrote, found at or up to CACHE_LOOKBACK blocks before one of its
    breakpoints, and writes the rest up to its last breakpoint of at least `min_tokens`.
    `digests[i]` hashes blocks 0..i; `cumulative[i]` is their tokens (never decreasing)."""
    read = 0
    for bp in breakpoints:
        hit = next((j for j in range(bp, max(-1, bp - CACHE_LOOKBACK), -1)
                    if digests[j] in written), None)
        if hit is not None:
            read = max(read, cumulative[hit])
    cached = [bp for bp in breakpoints if cumulative[bp] >= min_tokens]
    written.update(digests[bp] for bp in cached)
    return read, cumulative[cached[-1]] - read if cached else 0


@dataclass(frozen=True)
class PromptBlock:
    """One block of a request's prompt as the cache reads it: `name` says where it is
    (`tools[NAME]`, `system[I]`, `messages[I].ROLE[J]:TYPE`), `text` is what is hashed (the
    block without its cache_control), `tokens` this server's count up to and including it."""

    name: str
    text: str
    breakpoint: bool
    tokens: int


def prompt_blocks(body: dict, counting: Counting = AS_DEFAULT) -> list[PromptBlock]:
    """The blocks of a request in cache order: tools, then system, then each message's."""
    names = [f"tools[{tool.get('name')}]" for tool in body.get("tools") or []]
    system = body.get("system")
    names += [f"system[{i}]" for i in range(1 if isinstance(system, str) else len(system or []))]
    for i, message in enumerate(body.get("messages") or []):
        content = message["content"]
        blocks = [{"type": "text"}] if isinstance(content, str) else content
        names += [f"messages[{i}].{message['role']}[{j}]:{b.get('type')}"
                  for j, b in enumerate(blocks)]
    segments = _segments(body, counting)
    totals = itertools.accumulate(s.tokens for s in segments)
    return [PromptBlock(name, canonical_json(value), bp, total) for name, (_, value, bp), total
            in zip(names, _parts(body, counting), totals)]


@dataclass(frozen=True)
class PromptDifference:
    """Where two requests' prompts part: the first block of `later` that differs from the
    block at its place in `earlier` (its name and index in `prompt_blocks`; None when each
    block of `later` is the one at its place in `earlier`), and the first differing byte
    of the prompts written out block after block."""

    block: str | None
    index: int
    byte: int


def first_difference(earlier: dict, later: dict,
                     counting: Counting = AS_DEFAULT) -> PromptDifference:
    if earlier.get("model") != later.get("model"):
        return PromptDifference("model", 0, 0)  # the cache is the model's own
    byte = 0
    old, new = prompt_blocks(earlier, counting), prompt_blocks(later, counting)
    for n, block in enumerate(new):
        before = old[n].text if n < len(old) else ""
        if block.text != before:
            same = next((i for i, (x, y) in enumerate(zip(block.text, before)) if x != y),
                        min(len(block.text), len(before)))
            return PromptDifference(block.name, n, byte + len(block.text[:same].encode()))
        byte += len(block.text.encode())
    return PromptDifference(None, len(new), byte)


class PromptCache:
    """Prefix cache keyed by the hash of everything up to a breakpoint (5-minute TTL ignored)."""

    def __init__(self, min_tokens: int = 1024, counting: Counting = AS_DEFAULT):
        self.min_tokens, self.counting = min_tokens, counting
        self._entries: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict) -> Usage:
        segments = _segments(body, self.counting)
        cumulative = list(itertools.accumulate(s.tokens for s in segments))
        total = cumulative[-1] if cumulative else 1
        points = [i for i, s in enumerate(segments) if s.breakpoint]
        with self._lock:
            read, written = prefix_cache(self._entries, [s.digest for s in segments],
                                         cumulative, points, self.min_tokens)
        return Usage(input_tokens=max(0, total - read - written),
                     cache_creation_input_tokens=written, cache_read_input_tokens=read)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Fault:
    """A scripted failure for one request. Build with the functions below."""

    kind: str  # http | reset | hang | trickle | error_event | malformed_json | truncated |
    # not_utf8 | odd_values
    status: int = 0
    error_type: str = ""
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    after: int | None = None  # stream faults: SSE events sent before the fault
    seconds: float = 0.0
    values: tuple[tuple[str, Any], ...] = ()  # odd_values: the fields and what they are sent as
    reply: ModelResponse | None = None  # stream faults: the reply cut (None: the default reply)


def http_error(status: int, error_type: str, message: str,
               headers: dict[str, str] | None = None) -> Fault:
    return Fault("http", status, error_type, message, tuple((headers or {}).items()))


def rate_limited(retry_after: float | None = 0) -> Fault:
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return http_error(429, "rate_limit_error", "Number of request tokens has exceeded your "
                      "per-minute rate limit", headers)


def overloaded() -> Fault:
    return http_error(529, "overloaded_error", "Overloaded")


def server_error(status: int = 500) -> Fault:
    return http_error(status, "api_error", "Internal server error")


def unauthorized() -> Fault:
    return http_error(401, "authentication_error", "invalid x-api-key")


def connection_reset(after: int | None = None) -> Fault:
    """Reset the TCP connection (before any response, or after `after` SSE events)."""
    return Fault("reset", after=after)


def hang(seconds: float = 30.0, after: int | None = None) -> Fault:
    """Send nothing for `seconds` (before the response, or after `after` SSE events)."""
    return Fault("hang", after=after, seconds=seconds)


def trickle(seconds: float = 30.0) -> Fault:
    """Stream the reply slowly: `seconds` of silence before every SSE event."""
    return Fault("trickle", seconds=seconds)


def error_event(after: int = 2, error_type: str = "overloaded_error",
                message: str = "Overloaded") -> Fault:
    return Fault("error_event", error_type=error_type, message=message, after=after)


def malformed_json(after: int = 2) -> Fault:
    return Fault("malformed_json", after=after)


def truncated(after: int = 3, reply: ModelResponse | dict | None = None) -> Fault:
    """Close the stream cleanly after `after` events, without message_stop; `reply` is the
    one cut (e.g. a tool call, to cut inside its tool_use block), else the default reply."""
    if isinstance(reply, dict):
        reply = ModelResponse.from_dict(reply)
    return Fault("truncated", after=after, reply=reply)


def not_utf8(after: int = 3) -> Fault:
    """Send a text delta holding a byte that is not UTF-8 after `after` events, then the rest
    of the reply."""
    return Fault("not_utf8", after=after)


def odd_values(**values: Any) -> Fault:
    """Stream the reply with these fields of message_start's message (`id`, `model`, `role`)
    or message_delta's delta (`stop_reason`, `stop_sequence`) sent as given: a number, null,
    an object where the API sends text."""
    return Fault("odd_values", values=tuple(values.items()))


Reply = ModelResponse | Callable[[dict], ModelResponse] | Fault


FAULTS: dict[str, Callable[..., Fault]] = {
    "rate_limited": rate_limited, "overloaded": overloaded, "server_error": server_error,
    "unauthorized": unauthorized, "connection_reset": connection_reset, "hang": hang,
    "trickle": trickle, "error_event": error_event, "malformed_json": malformed_json,
    "truncated": truncated, "http_error": http_error, "not_utf8": not_utf8,
    "odd_values": odd_values}


def fault_from_dict(d: dict) -> Fault:
    """A Fault from JSON, e.g. {"fault": "rate_limited", "retry_after": 0} (for --script)."""
    args = {k: v for k, v in d.items() if k != "fault"}
    return FAULTS[d["fault"]](**args)


# --------------------------------------------------------------------------- wire shapes


def _echo_reply(body: dict) -> ModelResponse:
    last = body["messages"][-1]["content"]
    texts = [last] if isinstance(last, str) else [
        b.get("text", "") for b in last if isinstance(b, dict) and b.get("type") == "text"]
    # The user's own words are the last text block (context data blocks come before them).
    said = next((t.strip() for t in reversed(texts) if t and t.strip()), "")[:60] or "(no text)"
    return ModelResponse(content=[{"type": "text", "text": f"Fake reply to: {said}"}],
                         stop_reason="end_turn", usage=Usage())


def _served_content(response: ModelResponse) -> list[dict]:
    out = []
    for block in response.content:
        block = dict(block)
        if block.get("type") == "thinking":
            block["signature"] = sign_thinking(block.get("thinking", ""))
        out.append(block)
    return out


def _message_json(msg_id: str, model: str, content: list[dict], stop_reason: str | None,
                  usage: Usage) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage.to_dict()}


def _chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _block_events(index: int, block: dict, chunk: int) -> list[tuple[str, dict]]:
    kind = block.get("type")
    start: dict = dict(block)
    deltas: list[dict] = []
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"], chunk)]
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": c}
                  for c in _chunks(block["thinking"], chunk)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start["input"] = {}
        raw = json.dumps(block.get("input") or {})
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": c} for c in _chunks(raw, chunk)]
    events = [("content_block_start", {"type": "content_block_start", "index": index,
                                       "content_block": start})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                        "delta": d}) for d in deltas]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def sse_events(msg: dict, chunk: int = 16) -> list[tuple[str, dict]]:
    """The SSE events of a streamed message, in the API's order."""
    usage = msg["usage"]
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    events = [("message_start", {"type": "message_start", "message": start}),
              ("ping", {"type": "ping"})]
    for i, block in enumerate(msg["content"]):
        events += _block_events(i, block, chunk)
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": msg["stop_reason"],
                                               "stop_sequence": None},
                                     "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _valid_unicode(body: Any) -> bool:
    """Whether every string of a request is valid Unicode, as a strict server checks: JSON
    can escape a lone surrogate (`"\\ud800"`), which no UTF-8 text holds."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _with_values(events: list[tuple[str, dict]], values: dict) -> list[tuple[str, dict]]:
    out = []
    for name, data in events:
        if name == "message_start":
            message = {**data["message"], **{k: v for k, v in values.items()
                                             if k in ("id", "model", "role")}}
            data = {**data, "message": message}
        elif name == "message_delta":
            delta = {**data["delta"], **{k: v for k, v in values.items()
                                         if k in ("stop_reason", "stop_sequence")}}
            data = {**data, "delta": delta}
        out.append((name, data))
    return out


def _error_body(error_type: str, message: str, request_id: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message},
            "request_id": request_id}


# --------------------------------------------------------------------------- the server


class FakeAnthropicServer:
    """A threaded Messages API server on 127.0.0.1 (a context manager).

    `enqueue(reply, times=1)` queues a ModelResponse, a callable(body) -> ModelResponse or a
    Fault; each request to /v1/messages takes the next one, and gets `default_reply` (an echo)
    when the queue is empty. Invalid requests get 400 without consuming the queue. Usage is
    always this server's own count (`counting`: how it counts). `requests` holds every
    parsed /v1/messages body, `count_requests` every /v1/messages/count_tokens body, `log`
    one entry per HTTP exchange.
    """

    def __init__(self, *, port: int = 0, context_window: int = 200_000,
                 min_cache_tokens: int = 1024, api_key: str | None = None,
                 default_reply: Callable[[dict], ModelResponse] | None = None,
                 chunk: int = 16, check_signatures: bool = True,
                 counting: Counting = AS_DEFAULT):
        self.context_window = context_window
        self.counting = counting
        self.cache = PromptCache(min_cache_tokens, counting)
        self.api_key = api_key
        self.default_reply = default_reply or _echo_reply
        self.chunk = chunk
        self.check_signatures = check_signatures
        self.requests: list[dict] = []
        self.count_requests: list[dict] = []
        self.log: list[dict] = []
        self.errors: list[BaseException] = []  # unexpected handler exceptions (a bug here)
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids: dict[str, Iterator[int]] = {}
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler, self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def enqueue(self, reply: Reply, *, times: int = 1) -> None:
        with self._lock:
            self._queue.extend([reply] * times)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def start(self) -> FakeAnthropicServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    # ---------------------------------------------------------------- used by the handler

    def _next_reply(self) -> Reply:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default_reply

    def _record(self, **entry: Any) -> None:
        with self._lock:
            self.log.append(entry)

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            counter = self._ids.setdefault(prefix, itertools.count(1))
            return f"{prefix}_fake_{next(counter):04d}"

    def _check(self, body: Any, *, count_only: bool) -> str | None:
        check = genuine_thinking if self.check_signatures else None
        problem = validate_request(body, count_only=count_only, check_signature=check)
        if problem is None and not count_only:
            total = count_tokens(body, self.counting)
            if total > self.context_window:
                problem = f"prompt is too long: {total} tokens > {self.context_window} maximum"
        return problem


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, owner: FakeAnthropicServer):
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, BrokenPipeError, TimeoutError)):
            return  # the client went away (timeouts, closed streams): expected in fault tests
        if exc is not None:
            self.owner.errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the library never prints; `owner.log` keeps the exchange

    @property
    def owner(self) -> FakeAnthropicServer:
        return self.server.owner

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._send_error(404, "not_found_error", f"Not found: {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        path = self.path.split("?")[0]
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"Not found: {path}")
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._send_error(400, "invalid_request_error", "request body is not valid JSON")
            return
        if not _valid_unicode(body):
            self._send_error(400, "invalid_request_error", "request body holds a lone "
                             "surrogate escape (such as \\ud800), which is not valid Unicode")
            return
        count_only = path.endswith("count_tokens")
        (self.owner.count_requests if count_only else self.owner.requests).append(body)
        if self._auth_failed():
            return
        problem = self.owner._check(body, count_only=count_only)
        if problem:
            self._send_error(400, "invalid_request_error", problem)
        elif count_only:
            self._send_json(200, {"input_tokens": count_tokens(body, self.owner.counting)})
        else:
            self._answer(body, self.owner._next_reply())

    def _auth_failed(self) -> bool:
        key = self.headers.get("x-api-key") or ""
        bearer = self.headers.get("authorization") or ""
        key = key or (bearer[7:] if bearer.lower().startswith("bearer ") else "")
        if not key:
            self._send_error(401, "authentication_error", "x-api-key header is required")
        elif self.owner.api_key is not None and key != self.owner.api_key:
            self._send_error(401, "authentication_error", "invalid x-api-key")
        elif not self.headers.get("anthropic-version"):
            self._send_error(400, "invalid_request_error", "anthropic-version: header is required")
        else:
            return False
        return True

    def _answer(self, body: dict, reply: Reply) -> None:
        fault = reply if isinstance(reply, Fault) else None
        if fault and fault.kind == "http":
            self._send_error(fault.status, fault.error_type, fault.message, dict(fault.headers))
            return
        interrupts = fault and fault.kind in ("reset", "hang")
        if interrupts and (fault.after is None or not body.get("stream")):
            self._interrupt(fault)
            return
        response = (fault.reply or self.owner.default_reply(body)) if fault else (
            reply(body) if callable(reply) else reply)
        msg = self._message(body, response)
        if body.get("stream"):
            self._stream(msg, fault)
        else:
            self._send_json(200, msg)

    def _message(self, body: dict, response: ModelResponse) -> dict:
        content = _served_content(response)
        usage = self.owner.cache.usage(body)
        usage.output_tokens = max(1, self.owner.counting.tokens(canonical_json(content)))
        return _message_json(response.id or self.owner._new_id("msg"),
                             response.model or body["model"], content, response.stop_reason,
                             usage)

    def _stream(self, msg: dict, fault: Fault | None) -> None:
        self.send_response(200)
        self._headers({"content-type": "text/event-stream", "cache-control": "no-cache"})
        events = sse_events(msg, self.owner.chunk)
        if fault is not None and fault.kind == "odd_values":
            events = _with_values(events, dict(fault.values))
        for n, (name, data) in enumerate(events):
            if fault is not None and n == fault.after and self._stream_fault(fault):
                break
            if fault is not None and fault.kind == "trickle" and self.owner._stopping.wait(
                    fault.seconds):
                break
            self._write_event(name, json.dumps(data))
        self._record(status=200, stream=True, fault=fault.kind if fault else None)

    def _stream_fault(self, fault: Fault) -> bool:
        """Send `fault` mid-stream; whether the stream ends there."""
        if fault.kind == "not_utf8":
            self.wfile.write(b'event: content_block_delta\ndata: {"type": "content_block_delta", '
                             b'"index": 0, "delta": {"type": "text_delta", "text": "caf\xe9"}}\n\n')
            return False
        if fault.kind == "error_event":
            self._write_event("error", json.dumps(_error_body(
                fault.error_type, fault.message, self.owner._new_id("req"))))
        elif fault.kind == "malformed_json":
            self._write_event("content_block_delta", '{"type": "content_block_delta", "index": 0,')
        elif fault.kind in ("reset", "hang"):
            self._interrupt(fault)
        # "truncated": just stop; the connection closes cleanly without message_stop
        return True

    def _interrupt(self, fault: Fault) -> None:
        if fault.kind == "hang":
            self.owner._stopping.wait(fault.seconds)
            self._record(status=None, fault="hang")
            self.close_connection = True
            return
        # SO_LINGER 0 makes close() send RST: the client sees "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
        self.rfile, self.wfile = io.BytesIO(), io.BytesIO()
        self.close_connection = True
        self._record(status=None, fault="reset")

    def _write_event(self, name: str, data: str) -> None:
        self.wfile.write(f"event: {name}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    def _headers(self, headers: dict[str, str]) -> None:
        self.send_header("request-id", self.owner._new_id("req"))
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None,
                   error: str | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self._headers({"content-type": "application/json", "content-length": str(len(data)),
                       **(headers or {})})
        self._record(status=status, stream=False, error=error)  # before the client can see it
        self.wfile.write(data)

    def _send_error(self, status: int, error_type: str, message: str,
                    headers: dict[str, str] | None = None) -> None:
        self._send_json(status, _error_body(error_type, message, self.owner._new_id("req")),
                        headers, error=message)

    def _record(self, **entry: Any) -> None:
        self.owner._record(path=self.path, **entry)


# --------------------------------------------------------------------------- manual use


def _script(path: str) -> list[Reply]:
    with open(path, encoding="utf-8") as f:
        return [_script_reply(line, n) for n, line in enumerate(f, 1) if line.strip()]


def _script_reply(line: str, n: int) -> Reply:
    """One line of a --script; ValueError naming the line when it is neither a reply nor a
    fault this server knows."""
    try:
        d = json.loads(line)
        if "fault" in d and d["fault"] not in FAULTS:
            raise ValueError(f"unknown fault {d['fault']!r}")
        return fault_from_dict(d) if "fault" in d else ModelResponse.from_dict(d)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"line {n} is not a reply or a fault ({exc}); the faults are "
                         f"{', '.join(FAULTS)}") from None


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m memgpt_lite.lab.fake_server",
        description="A fake Anthropic Messages API on 127.0.0.1, for trying memgpt-lite without "
                    "an API key: it validates requests like the real API, counts tokens its own "
                    "way, simulates prompt caching, and answers with scripted replies or, once "
                    "they run out, 'Fake reply to: <your words>'.",
        epilog="example:\n  python -m memgpt_lite.lab.fake_server --port 8765 &\n"
               "  ANTHROPIC_BASE_URL=http://127.0.0.1:8765 memgpt-lite chat --agent try",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8765,
                        help="TCP port on 127.0.0.1 to listen on (default: %(default)s; 0 picks "
                             "a free one)")
    parser.add_argument("--context-window", type=int, default=200_000, metavar="TOKENS",
                        help="answer 'prompt is too long' above this many tokens, by this "
                             "server's count (default: %(default)s)")
    parser.add_argument("--min-cache-tokens", type=int, default=1024, metavar="TOKENS",
                        help="the smallest prefix the simulated prompt cache stores "
                             "(default: %(default)s)")
    parser.add_argument("--chars-per-token", type=float, default=CHARS_PER_TOKEN,
                        metavar="RATIO", help="count one token per this many characters (below "
                        "about 2.3 this server counts more than memgpt-lite first estimates; "
                        "default: %(default)s)")
    parser.add_argument("--per-byte", action="store_true",
                        help="count UTF-8 bytes instead of characters (CJK counts 3, an emoji 4)")
    parser.add_argument("--script", metavar="FILE",
                        help="JSONL of replies served in order, one per request: ModelResponse "
                             'dicts or faults such as {"fault": "rate_limited"} (faults: '
                             f"{', '.join(FAULTS)}; their arguments as the functions of this "
                             "module take them); echo replies after the last")
    args = parser.parse_args(argv)
    if not 0.1 <= args.chars_per_token <= 100:
        parser.error("--chars-per-token must be between 0.1 and 100")
    try:
        replies = _script(args.script) if args.script else []
    except (OSError, ValueError) as exc:
        parser.error(f"--script {args.script}: {exc}")
    server = FakeAnthropicServer(port=args.port, context_window=args.context_window,
                                 min_cache_tokens=args.min_cache_tokens,
                                 counting=Counting(args.chars_per_token, args.per_byte))
    for reply in replies:
        server.enqueue(reply)
    sys.stderr.write(f"Fake Anthropic API on {server.base_url} "
                     f"(export ANTHROPIC_BASE_URL={server.base_url}); Ctrl-C stops it.\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

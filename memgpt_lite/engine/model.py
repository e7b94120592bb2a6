"""The model boundary: the `ModelClient` protocol, the Anthropic client, and a scripted double.

`AnthropicClient` is the only code in the package that imports `anthropic`, and it does so
lazily, so `import memgpt_lite.engine.model` stays cheap. Every SDK failure becomes one
`types.ModelError` subclass carrying one sentence for the user; the loop never sees SDK types.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit

from memgpt_lite.engine.call_deadline import (
    CallThread,
    DeadlinePassed,
    asked_wait,
    on_request,
    on_response,
)
from memgpt_lite.engine.config import ConfigError, base_url_problem, timeout_setting
from memgpt_lite.engine.errors import (
    APIConnectionError,
    AuthError,
    BadRequestError,
    ModelError,
    OverloadedError,
    PromptTooLongError,
    RateLimitError,
    StreamError,
)
from memgpt_lite.engine.events import RetryWaitEvent, TextDelta, ThinkingDelta
from memgpt_lite.engine.records import (
    ModelRequest,
    ModelResponse,
    Usage,
)
from memgpt_lite.engine.sse_text import NotUTF8
from memgpt_lite.engine.sse_text import on_response as clean_events
from memgpt_lite.engine.text import shorten

StreamItem = TextDelta | ThinkingDelta | RetryWaitEvent | ModelResponse


def final_response(stream: Iterable[StreamItem]) -> ModelResponse:
    """Drain a ModelClient stream (for callers that show no deltas: summariser, judge)."""
    response = None
    for item in stream:
        if isinstance(item, ModelResponse):
            response = item
    if response is None:
        raise StreamError("The model's stream ended without a response.")
    return response


# Sent when a compatible local server is configured but no key is: the SDK refuses to send a
# request without some credential, and such servers usually ignore it.
PLACEHOLDER_API_KEY = "memgpt-lite-no-key"

_TOO_LONG = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum", re.I)
# The API's words when the input fits but not with max_tokens on top (for the models that
# count both): the same overflow, whose maximum is the window itself.
_TOO_LONG_WITH_OUTPUT = re.compile(
    r"input length and `?max_tokens`? exceed context limit:\s*(\d+)\s*\+\s*(\d+)\s*>\s*(\d+)",
    re.I)
# A chat waits for a person: connecting takes well under a second, and a streaming reply
# is never silent for long (the API sends pings), so 10 s to connect or 60 s of silence
# mean the server is gone. Every call also has a deadline in all (`timeout`, default 120 s:
# a 2,048-token reply streams in well under a minute), which a server trickling bytes, events
# or SSE comments cannot stretch (call_deadline.py). The SDK's retries share it: each attempt
# waits at most its share (with the defaults, 40 s of silence for each of 3 attempts).
DEFAULT_BASE_URL = "https://api.anthropic.com"
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0


class ModelClient(Protocol):
    """Streams one model call: deltas as they arrive (and a RetryWaitEvent when a retry of
    the call waits), then exactly one ModelResponse last. Raises `types.ModelError`
    subclasses, never SDK exceptions."""

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]: ...


# --------------------------------------------------------------------------- Anthropic


class AnthropicClient:
    """`ModelClient` on the Anthropic Messages API (`client.messages.stream`).

    Credentials and base URL follow the SDK (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`,
    `ANTHROPIC_BASE_URL`, profiles). With a base URL but no key, a placeholder key is sent so a
    local compatible server works; with neither, construction raises `AuthError`.

    `timeout` is the most seconds one call may take in all, retries included (None:
    `MEMGPT_LITE_TIMEOUT`, else 120); giving up is one APIConnectionError naming the host,
    the wait, and `timeout_source`: what set that deadline, in the user's words (a check
    with a deadline of its own must not send the user to a setting that did not apply).
    """

    def __init__(self, *, api_key: str | None = None, base_url: str | None = None,
                 http_client: Any = None, max_retries: int = 2, timeout: float | None = None,
                 timeout_source: str = "set by MEMGPT_LITE_TIMEOUT or --timeout"):
        self.max_retries = max_retries
        self.timeout = timeout if timeout is not None else timeout_setting()
        self.timeout_source = timeout_source
        env_base = os.environ.get("ANTHROPIC_BASE_URL")
        self._args = {"api_key": api_key, "http_client": http_client,
                      "max_retries": max_retries, "base_url": base_url or env_base or None}
        env_key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if api_key is None and not env_key and self._args["base_url"]:
            self._args["api_key"] = PLACEHOLDER_API_KEY
        self._sdk: Any = None
        self._sdk_client: Any = None
        if self._args["base_url"]:
            found = base_url_problem(self._args["base_url"],
                                     "the base URL" if base_url else "ANTHROPIC_BASE_URL")
            if found:
                raise ConfigError(found)
        base = self._args["base_url"] or DEFAULT_BASE_URL
        if env_base == "" and not base_url:
            # `export ANTHROPIC_BASE_URL=` means unset, but the SDK would call "" itself.
            self._args["base_url"] = DEFAULT_BASE_URL
        self.host = urlsplit(base).netloc or base
        if not (self._args["api_key"] or env_key):
            self._connect()  # only the SDK knows about credential profiles: ask it now

    def warm_up(self) -> None:
        """Import the SDK on a background thread (see `start_sdk_import`)."""
        start_sdk_import()

    @property
    def _client(self) -> Any:
        if self._sdk_client is None:
            self._connect()
        return self._sdk_client

    def _connect(self) -> None:
        """Create the SDK client. Deferred to the first call when a key is at hand, because
        importing anthropic takes seconds on a cold start and the prompt should not wait."""
        import anthropic  # the package's only anthropic import

        # The SDK builds what a server streams without checking it and warns on stderr when
        # it serialises a field of the wrong type; such fields are checked here (`_count`).
        warnings.filterwarnings("ignore", message="Pydantic serializer warnings",
                                category=UserWarning)
        self._sdk = anthropic
        try:
            client = anthropic.Anthropic(**{**self._args, "http_client": self._http_client()},
                                         timeout=self._timeouts())
        except anthropic.AnthropicError as exc:  # e.g. an unreadable credentials profile
            raise AuthError(f"Could not load Anthropic credentials ({exc}); set ANTHROPIC_API_KEY."
                            ) from None
        if not (client.api_key or client.auth_token or client.credentials):
            raise AuthError(
                "No Anthropic API key found: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL to use "
                "an Anthropic-compatible server).")
        self._sdk_client = client
        self.host = urlsplit(str(client.base_url)).netloc or str(client.base_url)

    def _http_client(self) -> Any:
        """The SDK's own HTTP client (or the one given), with the hooks that count a call's
        attempts, keep a call given up on from sending another, and keep the SDK from
        sleeping past the deadline before a retry (call_deadline.py), and the one that makes
        a stream's text valid before the SDK builds the reply from it (sse_text.py)."""
        import anthropic

        given = self._args["http_client"]
        http = given if given is not None else anthropic.DefaultHttpxClient()
        hooks = dict(http.event_hooks)
        for kind, hook in (("request", on_request), ("response", on_response),
                           ("response", clean_events)):
            if hook not in hooks.get(kind, []):
                hooks[kind] = [*hooks.get(kind, []), hook]
        http.event_hooks = hooks
        return http

    def _timeouts(self) -> Any:
        """Per attempt: 10 s to connect, then at most 60 s of silence, both within the
        call's deadline shared by the first attempt and the SDK's retries."""
        import httpx2  # the SDK's transport; imported with anthropic

        attempts = self.max_retries + 1
        return httpx2.Timeout(min(READ_TIMEOUT, self.timeout / attempts),
                              connect=min(CONNECT_TIMEOUT, self.timeout / attempts))

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        client = self._client
        yield from self._under_deadline(lambda call: self._streamed(client, request, call))

    def count_tokens(self, request: ModelRequest) -> int:
        """Exact input tokens of a request according to the API (no model call), under the
        same deadline as a model call."""
        body = request.to_api()
        body.pop("max_tokens", None)
        client = self._client
        # The count comes last, after any retry's wait (told to a chat, not to a count).
        *_, counted = self._under_deadline(lambda call: [client.messages.count_tokens(**body)])
        tokens = getattr(counted, "input_tokens", None)  # the SDK does not check the body
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise StreamError(f"{self.host} answered a token count with no count in it: is "
                              f"ANTHROPIC_BASE_URL an Anthropic-compatible server?")
        return tokens

    def _under_deadline(self, produce: Any) -> Iterator[Any]:
        """What `produce` yields on a worker thread, until the call's deadline; every failure
        mapped to one ModelError."""
        self._started = time.monotonic()
        call = CallThread(produce, self.max_retries)
        try:
            yield from call.items(self._started + self.timeout)
        except DeadlinePassed:
            raise _billed(self._gave_up(_retries(call.attempts - 1)), call) from None
        except ModelError as exc:  # raised by the stream itself (cut short)
            raise _billed(exc, call) from None
        except self._sdk.AnthropicError as exc:
            raise _billed(self._map_error(exc), call) from None
        except Exception as exc:  # raw transport / decoding failures surface mid-stream
            mapped = self._map_stream_failure(exc)
            if mapped is None:
                raise
            raise _billed(mapped, call) from exc

    def _streamed(self, client: Any, request: ModelRequest,
                  call: CallThread) -> Iterator[StreamItem]:
        """The call itself, on the worker thread (see call_deadline.py)."""
        saw_stop, events = False, 0
        with client.messages.stream(**request.to_api()) as stream:
            call.response = stream.response
            if call.abandoned.is_set():
                return  # given up on while the headers came in: nobody shut this one down
            for event in stream:
                if call.abandoned.is_set():
                    return
                events += 1
                if event.type in ("message_start", "message_delta"):
                    # The input is billed once the message starts, even if the stream then
                    # breaks: the usage so far is kept for the tally (see `_billed`).
                    so_far = stream.current_message_snapshot.usage  # None: malformed
                    call.billed = _usage_of(so_far) if so_far is not None else call.billed
                delta = _delta_of(event)
                if delta is not None:
                    yield delta
                saw_stop = saw_stop or event.type == "message_stop"
            message = stream.current_message_snapshot if saw_stop else None
        if message is None:
            raise StreamError(self._cut_short(stream.response, events))
        yield _response_of(message)

    def _cut_short(self, response: Any, events: int) -> str:
        """Why a stream ended without its reply: cut off, or never a stream of events at all
        (a web page or another API answering 200 at the base URL)."""
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        if events == 0 and kind != "text/event-stream":
            return (f"{self.host} answered with {kind or 'no content type'}, not a stream of "
                    f"events: is ANTHROPIC_BASE_URL an Anthropic-compatible server?")
        return f"The response stream from {self.host} ended before the reply was complete."

    # ---------------------------------------------------------------- error mapping

    def _map_error(self, exc: Exception) -> ModelError:
        sdk = self._sdk
        if isinstance(exc, sdk.APIStatusError):
            return self._map_status(exc)
        if isinstance(exc, sdk.APITimeoutError):
            return self._gave_up(self._retried(exc))
        if isinstance(exc, sdk.APIConnectionError):
            what = ("Could not connect to" if _caused_by(exc, "ConnectError")
                    else "Lost the connection to")
            return APIConnectionError(
                f"{what} {self.host}{self._retried(exc)}; check your network or "
                f"ANTHROPIC_BASE_URL.")
        return ModelError(f"The Anthropic client failed: {exc}.")

    def _map_status(self, exc: Any) -> ModelError:
        status = exc.status_code
        detail = _api_message(exc)
        if exc.response.is_success:  # an `error` event inside a 200 stream
            kind = _error_type(exc) or "error"
            return StreamError(f"The API stream failed mid-reply ({kind}: {detail}).",
                               status=status)
        if status in (401, 403):
            what = "rejected" if status == 401 else "not allowed to do this"
            return AuthError(f"The API key was {what} ({status}: {detail}); "
                             f"check ANTHROPIC_API_KEY.", status=status)
        retried = self._retried(exc)
        if status == 429:
            wait = _retry_after(exc.response.headers)
            hint = f" (the API asked to wait {wait})" if wait else ""
            return RateLimitError(f"Rate limited by the API (429){retried}{hint}.",
                                  status=status)
        if status == 529 or _error_type(exc) == "overloaded_error":
            return OverloadedError(f"The API is overloaded ({status}){retried}.",
                                   status=status)
        if status >= 500:
            return ModelError(f"The API had a server error ({status}: {detail}){retried}.",
                              status=status)
        return _client_error(status, detail, self._doubled_v1(status))

    def _doubled_v1(self, status: int) -> str:
        """The hint for a 404 from a base URL ending in /v1, which the SDK adds itself (the
        OpenAI-style URL a user copies): `/v1/v1/messages` exists nowhere."""
        path = urlsplit(str(self._args["base_url"] or "")).path.rstrip("/")
        if status != 404 or not path.endswith("/v1"):
            return ""
        return (f"; the base URL ends in /v1, which the client adds itself: try "
                f"{str(self._args['base_url']).rstrip('/')[:-3]}")

    def _map_stream_failure(self, exc: Exception) -> ModelError | None:
        import httpx2  # the SDK's transport; imported with anthropic

        if isinstance(exc, httpx2.TimeoutException):
            # Mid-reply: the read's limit (a try's share of the deadline) ended the call, not
            # the deadline itself, and the SDK retries no stream once it has begun.
            return self._gave_up(silent=self._timeouts().read)
        if isinstance(exc, (httpx2.TransportError, httpx2.StreamError)):
            return StreamError(f"The connection to {self.host} broke mid-reply.")
        if isinstance(exc, NotUTF8):
            return StreamError(f"The server at {self.host} sent bytes that are not UTF-8 in "
                               f"its reply stream, so the reply could not be read.")
        if isinstance(exc, ValueError) and str(exc).startswith(_UNREADABLE_TOOL_INPUT):
            # The model writes a tool call's input as JSON text, and the SDK parses it as it
            # streams: JSON it cannot read fails the stream before the call can be answered
            # (a lone surrogate escape such as \ud800 never gets here: see sse_text.py).
            return StreamError("The model wrote a tool call whose input is not readable JSON "
                               f"({_parser_reason(exc)}).")
        unchecked = isinstance(exc, (AttributeError, TypeError)) and _raised_in_sdk(exc)
        if unchecked or isinstance(exc, (ValueError, RuntimeError, IndexError, KeyError)):
            # json/pydantic decoding or event-order failures inside the SDK's stream parser
            # (which builds its objects unchecked: a field the server sent as null or left
            # out is met as None there)
            return StreamError("The API sent a malformed response stream.")
        return None

    def _gave_up(self, retried: str = "", silent: float | None = None) -> APIConnectionError:
        waited = time.monotonic() - getattr(self, "_started", time.monotonic())
        what = (f"silent mid-reply for {silent:.1f} s, the most a try may wait" if silent
                else f"{waited:.1f} s{retried}")
        return APIConnectionError(
            f"Gave up waiting for {self.host}: it timed out ({what}; a call may take "
            f"{self.timeout:g} s, {self.timeout_source}).")

    def _retried(self, exc: Any) -> str:
        request = getattr(exc, "request", None)
        count = request.headers.get("x-stainless-retry-count") if request is not None else None
        return _retries(int(count) if count and count.isdigit() else self.max_retries)


_UNREADABLE_TOOL_INPUT = "Unable to parse tool parameter JSON"  # the SDK's words


def _parser_reason(exc: Exception) -> str:
    """The JSON parser's own reason from the SDK's message (which goes on to quote the whole
    input), e.g. "lone leading surrogate in hex escape at line 1 column 20"."""
    text = str(exc)
    start = text.find("Error: ")
    reason = text[start + 7:].split(". JSON:", 1)[0] if start >= 0 else ""
    return shorten(reason, 120) or "the SDK could not parse it"


def _retries(tries: int) -> str:
    return f" after {tries} {'retry' if tries == 1 else 'retries'}" if tries > 0 else ""


_sdk_import: list[Any] = []  # the thread importing the SDK, once started


def start_sdk_import(then: Callable[[], Any] | None = None) -> None:
    """Import the SDK on a background thread, once per process, so the first reply does
    not wait for it while the user is still typing (it takes a second or more on a cold
    start); `then` runs on that thread after it (the caller's own slow imports, done after
    the first prompt rather than before). Safe to race with `_connect`: Python's per-module
    import lock makes a second `import anthropic` wait for the one in progress."""
    import threading

    if not _sdk_import:
        thread = threading.Thread(target=_import_sdk, args=(then,), daemon=True,
                                  name="import-anthropic")
        _sdk_import.append(thread)
        thread.start()


def _import_sdk(then: Callable[[], Any] | None = None) -> None:
    import importlib

    try:
        importlib.import_module("anthropic")
        if then is not None:
            then()
    except Exception:  # noqa: BLE001
        # Not lost: a failed import is not cached, so the first call imports again and
        # that failure reaches the user (here, a thread's traceback would be printed).
        return


def _client_error(status: int, detail: str, hint: str = "") -> BadRequestError:
    match = _TOO_LONG.search(detail)
    if match:
        actual, maximum = int(match.group(1)), int(match.group(2))
        return PromptTooLongError(
            f"The prompt is too long for the model: {actual} tokens > {maximum} maximum.",
            actual=actual, maximum=maximum, status=status)
    match = _TOO_LONG_WITH_OUTPUT.search(detail)
    if match:
        actual, output, maximum = (int(g) for g in match.groups())
        return PromptTooLongError(
            f"The prompt and max output tokens are too long for the model: {actual} + {output} "
            f"tokens > {maximum} maximum.", actual=actual, maximum=maximum, status=status)
    return BadRequestError(f"The API rejected the request ({status}): {detail}{hint}",
                           status=status)


def _delta_of(event: Any) -> TextDelta | ThinkingDelta | None:
    if event.type != "content_block_delta":
        return None
    if event.delta.type == "text_delta":
        return TextDelta(event.delta.text)
    if event.delta.type == "thinking_delta":
        return ThinkingDelta(event.delta.thinking)
    return None


def _billed(error: ModelError, call: CallThread) -> ModelError:
    """`error` with what the failed call was billed, when its stream had begun."""
    if call.billed is not None and (call.billed.total_input or call.billed.output_tokens):
        error.billed = call.billed
    return error


def _usage_of(u: Any) -> Usage:
    return Usage(input_tokens=_count(u.input_tokens), output_tokens=_count(u.output_tokens),
                 cache_creation_input_tokens=_count(u.cache_creation_input_tokens),
                 cache_read_input_tokens=_count(u.cache_read_input_tokens))


def _response_of(message: Any) -> ModelResponse:
    u = message.usage
    if u is None or not isinstance(message.content, list):
        raise StreamError("The API sent a malformed response stream (a message without its "
                          "usage or content).")
    usage = _usage_of(u)
    # exclude_none: the SDK fills absent optional fields with None; the API never sent them.
    content = [b.to_dict(mode="json", exclude_none=True) for b in message.content]
    return ModelResponse(content=content, stop_reason=_text(message.stop_reason) or None,
                         usage=usage, model=_text(message.model), id=_text(message.id))


def _text(value: Any) -> str:
    """A field the API always sends as text (`id`, `model`, `stop_reason`), which the SDK does
    not check: a compatible server's number, null or object there is taken as unknown ("")."""
    return value if isinstance(value, str) else ""


def _raised_in_sdk(exc: BaseException) -> bool:
    """Whether `exc` was raised inside the SDK or pydantic (a server's malformed stream),
    not in this package's own code (a bug here must stay a traceback)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return any(part in where for part in ("/anthropic/", "/pydantic/"))


def _count(value: Any) -> int:
    """A token count as the server sent it, where the SDK does not check it: a count that
    is not a whole number of 0 or more (a compatible server's bug) is taken as none, so it
    can neither teach the counter nor make a cost negative."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


_HTML = re.compile(r"<(!doctype|html|head|body)\b", re.I)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
DETAIL_LIMIT = 300  # the API's own messages are shorter; a proxy's page may be any size


def _api_message(exc: Any) -> str:
    """The error's text as one line: the API's message, or what a proxy's HTML page is
    called (its title), never the page itself."""
    message = getattr(exc, "api_message", None) or _error_field(exc, "message")
    text = str(message or exc.message).strip().rstrip(".")
    if _HTML.search(text):
        title = _TITLE.search(text)
        text = "an HTML page" + (f" titled {shorten(title.group(1), 80)!r}" if title else "")
    return shorten(text, DETAIL_LIMIT)


def _error_type(exc: Any) -> str | None:
    return _error_field(exc, "type")


def _error_field(exc: Any, key: str) -> Any:
    """`error.<key>` of the API's error body; a compatible server may send another shape
    (e.g. `{"error": "text"}`), which must not turn into a crash while mapping the error."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    return error.get(key) if isinstance(error, dict) else None


def _retry_after(headers: Any) -> str | None:
    """The wait the server asked for, read as the SDK reads it (retry-after-ms first)."""
    wait = asked_wait(headers)
    return f"{wait:.1f}".rstrip("0").rstrip(".") + "s" if wait is not None else None


def _caused_by(exc: BaseException, name: str) -> bool:
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if type(cause).__name__ == name:
            return True
        cause = cause.__cause__ or cause.__context__
    return False

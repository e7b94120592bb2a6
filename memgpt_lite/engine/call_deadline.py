"""One model call under a deadline that nothing the server sends can stretch.

The SDK's timeouts are per read: a server that trickles one byte of its response, or one SSE
comment line (`: ping`), every few seconds resets them forever, and the SDK's stream parser
never hands us an event to check the clock on. So the call runs on a worker thread that hands
what it produces to the caller through a queue, and the caller waits on that queue only until
the deadline. Giving up also stops the worker: its socket is shut down (which wakes a blocked
read at once) and `on_request`, a request hook, keeps the SDK from starting another attempt
for a call nobody waits for (and counts the attempts, for the sentence that says so).
`on_response` tells the SDK not to retry when its wait before the retry (the server's
retry-after, or its own back-off) would end past the deadline: the server did answer, so the
user hears what it said (rate limited, overloaded) rather than a time-out after a sleep. A wait
the SDK does sleep is told to the caller as it begins (a `RetryWaitEvent` among the items): the
SDK does the waiting, once; this only says so.
"""

from __future__ import annotations

import email.utils
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from memgpt_lite.engine.events import RetryWaitEvent

_DONE = object()


class DeadlinePassed(Exception):
    """The call's deadline passed before it finished."""


class Abandoned(Exception):
    """Raised inside a worker whose call was given up on, before it sends another request."""


class CallThread(threading.Thread):
    """Runs `produce(self)` on a daemon thread; `items(deadline)` yields what it produces.

    `produce` sets `response` (the HTTP response, once its headers are in) so that giving up
    can shut its socket down, and may check `abandoned` between the items it yields.
    """

    def __init__(self, produce: Callable[[CallThread], Iterable[Any]], max_retries: int = 0):
        super().__init__(daemon=True, name="model-call")
        self.max_retries = max_retries  # the SDK's: whether an answer will be retried
        self.abandoned = threading.Event()
        self.response: Any = None
        self.attempts = 0
        self.billed: Any = None  # the usage a stream reported so far (kept if it then fails)
        self.deadline = float("inf")  # time.monotonic() when the call is given up on
        self._produce = produce
        self._out: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def run(self) -> None:
        try:
            for item in self._produce(self):
                if self.abandoned.is_set():
                    return
                self._out.put((True, item))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            self._out.put((False, exc))
        else:
            self._out.put((True, _DONE))

    def items(self, deadline: float) -> Iterator[Any]:
        """What the call produces, in order, as it arrives; the worker's exception is raised
        here; `DeadlinePassed` at `deadline` (time.monotonic()). Leaving early (an error, the
        consumer stopping, Ctrl-C) abandons the call."""
        self.deadline = deadline
        self.start()
        try:
            while True:
                try:
                    ok, item = self._out.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise DeadlinePassed from None
                if not ok:
                    raise item
                if item is _DONE:
                    return
                yield item
        finally:
            self.abandon()

    def tell(self, item: Any) -> None:
        """Hand the caller `item` now, from inside the call (its HTTP hooks)."""
        if not self.abandoned.is_set():
            self._out.put((True, item))

    def abandon(self) -> None:
        self.abandoned.set()
        _shut_down(self.response)


def on_request(request: Any) -> None:
    """An httpx request hook: counts a call's attempts; a retry of a call given up on is
    never sent."""
    thread = threading.current_thread()
    if not isinstance(thread, CallThread):
        return
    if thread.abandoned.is_set():
        raise Abandoned("the call was given up on")
    thread.attempts += 1


# The SDK's back-off when the server names no wait: 0.5 s doubled per retry, at most 8 s
# (anthropic/_constants.py), less a random part that only shortens it.
_FIRST_BACKOFF, _MOST_BACKOFF = 0.5, 8.0


def on_response(response: Any) -> None:
    """An httpx response hook: an answer the SDK would retry after a wait that ends past the
    call's deadline is not retried (`x-should-retry: false`, which the SDK obeys), so the
    error it carries reaches the caller now."""
    thread = threading.current_thread()
    if not isinstance(thread, CallThread) or not _retried_by_sdk(response, thread.max_retries):
        return
    asked = asked_wait(response.headers)
    wait = asked if asked is not None else _backoff(response)
    if time.monotonic() + wait >= thread.deadline:
        response.headers["x-should-retry"] = "false"
    else:
        thread.tell(RetryWaitEvent(response.status_code, wait, asked is not None))


def _retried_by_sdk(response: Any, max_retries: int) -> bool:
    """Whether the SDK retries this answer (its rule: the server's x-should-retry first, then
    the status), with retries left."""
    tries = response.request.headers.get("x-stainless-retry-count", "0")
    if max_retries - (int(tries) if tries.isdigit() else 0) <= 0:
        return False
    said = response.headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    status = response.status_code
    return status in (408, 409, 429) or status >= 500


def asked_wait(headers: Any) -> float | None:
    """The wait the server named, as the SDK reads it: the first of retry-after-ms and
    retry-after that is a number decides (one of 0 or less, or NaN, means the back-off), else
    retry-after as an HTTP date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        return wait if wait > 0 else None
    date = email.utils.parsedate_tz(headers.get("retry-after", ""))
    if date is not None and email.utils.mktime_tz(date) > time.time():
        return email.utils.mktime_tz(date) - time.time()
    return None


def _backoff(response: Any) -> float:
    """The longest the SDK's own back-off sleeps before this retry."""
    tries = response.request.headers.get("x-stainless-retry-count", "0")
    retried = int(tries) if tries.isdigit() else 0
    return min(_FIRST_BACKOFF * 2.0 ** min(retried, 16), _MOST_BACKOFF)


def _shut_down(response: Any) -> None:
    """Shut the response's socket down: unlike close(), this wakes a read blocked on it."""
    extensions = getattr(response, "extensions", None) or {}
    stream = extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            # The plain socket's shutdown, also under TLS: the SSL layer's own would first
            # drop its state while the worker may still be reading through it.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: nothing to wake

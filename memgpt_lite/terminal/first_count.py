"""The API's count of a new agent's least request, asked while the user types.

An agent that has learned nothing about the server's tokens yet has its first request sized
by one free `count_tokens` call (a server may count a third more than the cautious guess).
That call needs the SDK, whose import takes a second or more on a cold start: asked before
the prompt, it held every new agent's first prompt that long. On a terminal it is asked on a
thread instead, and the first turn waits for it (`wait`) before anything is sent or recorded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

COUNT_AT_START_TIMEOUT = 15.0  # seconds: a stalling server must not hold the start long


def least_request(settings: Any, agent: Any) -> Any:
    """The agent's least request (built on this thread: it reads the store)."""
    from memgpt_lite.engine.window import request_floor

    built: list[Any] = []
    request_floor(settings, agent.blocks(), None, lambda request: built.append(request) or 0)
    return built[0]


def count_briefly(client: Any, request: Any) -> int | None:
    """The API's count of `request` within COUNT_AT_START_TIMEOUT; None when the server
    cannot be asked (the cautious guess stays; the first turn says why if it matters)."""
    from memgpt_lite.engine.errors import ModelError

    timeout = getattr(client, "timeout", None)
    if timeout is not None:
        client.timeout = min(timeout, COUNT_AT_START_TIMEOUT)
    try:
        return client.count_tokens(request)
    except ModelError:
        return None
    finally:
        if timeout is not None:
            client.timeout = timeout


class FirstCount:
    """`count_briefly` of the agent's least request on a thread; `wait` learns it."""

    def __init__(self, agent: Any, settings: Any, client: Any,
                 waiting: Callable[[], contextlib.AbstractContextManager[Any]]):
        self.agent, self.waiting = agent, waiting
        self.request = least_request(settings, agent)
        self._result: list[Any] = []
        self._done = False
        self._thread = threading.Thread(target=self._count, args=(client,), daemon=True,
                                        name="count-first-request")
        self._thread.start()

    def _count(self, client: Any) -> None:
        try:
            self._result.append(count_briefly(client, self.request))
        except BaseException as exc:  # noqa: BLE001 - raised again on the chat's thread
            self._result.append(exc)

    def wait(self) -> None:
        """Before the first turn: the count, learned as `Agent.calibrate` learns one (a
        failure the count raised is raised here, once). Ctrl-C while it waits leaves it for
        the next turn."""
        if self._done:
            return
        if self._thread.is_alive():
            with self.waiting():
                self._thread.join()
        self._done = True
        (result,) = self._result
        if isinstance(result, BaseException):
            raise result
        if result is not None:
            self.agent.calibrate(self.request, result)

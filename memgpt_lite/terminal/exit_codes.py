"""Exit codes of `memgpt-lite`, and `UserError`: a mistake the user can fix, carrying its code.

0 success; 1 a runtime problem (store, model, data), a failed eval check or a replay divergence
under --strict; 2 a usage mistake; 130 interrupted; 128 + N a chat ended by signal N (143 SIGTERM,
129 SIGHUP: the terminal closed), and `ended_by_signals`, which turns those two signals into
`Terminated` so that a chat or a progress bar unwinds. Stdlib only: cli.py imports this before it
parses, and `memgpt-lite --help` must stay fast.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UserError(Exception):
    """A mistake the user can fix; the message is one sentence, `code` the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


class Terminated(BaseException):
    """SIGTERM or SIGHUP during a chat (or a progress bar), raised in the main thread so that the
    chat ends as it does after /exit (the turn running undone, the cursor shown, the agent's lock
    released) instead of the process dying where it stood. Not an Exception: nothing that handles
    errors may take it for one, and not a KeyboardInterrupt, which only cancels a turn."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def ended_by_signals() -> Iterator[None]:
    """SIGTERM (a service manager, `kill`) or SIGHUP (the terminal window closed) end the chat as
    /exit does, and a progress bar as Ctrl-C does (its cursor shown again): Terminated is raised
    once, where the main thread is, so the turn running is undone and the chat's ending runs whole;
    a second signal meanwhile is not let cut it short. The default, dying where it stood, left the
    cursor hidden and an agent this run had just created with nothing in it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def end(signum: int, _frame: Any) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated(signum)

    previous = {number: signal.signal(number, end) for number in ENDING_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)

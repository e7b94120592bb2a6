"""Exit codes of `memgpt-lite`, and `UserError`: a mistake the user can fix, carrying its code.

0 success; 1 a runtime problem (store, model, data), a failed eval check or a replay divergence
under --strict; 2 a usage mistake; 130 interrupted; 128 + N a chat ended by signal N (143
SIGTERM, 129 SIGHUP: the terminal closed). Stdlib only: cli.py imports this before
it parses, and `memgpt-lite --help` must stay fast.
"""

from __future__ import annotations

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UserError(Exception):
    """A mistake the user can fix; the message is one sentence, `code` the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


class Terminated(BaseException):
    """SIGTERM or SIGHUP during a chat, raised in the main thread so that the chat ends as it
    does after /exit (the turn running undone, the cursor shown, the agent's lock released)
    instead of the process dying where it stood. Not an Exception: nothing that handles
    errors may take it for one, and not a KeyboardInterrupt, which only cancels a turn."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

"""The chat's input history: one file in the data dir for every agent (the up-arrow), under
one lock for all of them.

Every change goes through the lock and is written whole to a temporary file, then renamed:
a chat appends the lines of each message as it is sent (never rewriting what is there), and
a forget removes lines. So a forget run while a chat on any agent is open stays done: that
chat never writes back what it read at start. Secrets are redacted before a line is kept
(see redact.py, and the chat's line reader).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from memgpt_lite.engine.files import LockBusy, held_lock, private_dirs, replace_file
from memgpt_lite.engine.matching import Matcher

HISTORY_FILE = "chat_history"  # in the data dir
MAX_LINES = 2_000  # the oldest lines go beyond this many
LOCK_WAIT = 10.0  # seconds; the lock is only ever held for one small file write


class HistoryBusy(OSError):
    """The history lock could not be taken in time."""


class InputHistory:
    """The input history file of a data dir (see the module docstring)."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / HISTORY_FILE
        self.lock_path = Path(data_dir) / "locks" / "input-history.lock"

    def lines(self) -> list[str]:
        try:
            return self.path.read_bytes().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []

    def append(self, lines: list[str]) -> None:
        """Add a message's lines at the end (keeping the newest MAX_LINES)."""
        if not lines:
            return
        with self.locked():
            self._write((self.lines() + lines)[-MAX_LINES:])

    def matching(self, matcher: Matcher) -> list[str]:
        """The lines a forget of `matcher` removes."""
        return drop_matching(self.lines(), matcher)[1]

    def scrub(self, matcher: Matcher) -> list[str]:
        """Remove the lines that hold a match (a phrase may run over two lines: both go);
        returns them."""
        with self.locked():
            kept, gone = drop_matching(self.lines(), matcher)
            if gone:
                self._write(kept)
        return gone

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        try:
            with held_lock(self.lock_path, LOCK_WAIT):
                yield
        except LockBusy:
            raise HistoryBusy(f"the input history {self.path} stayed locked for "
                              f"{LOCK_WAIT:.0f} s") from None

    def _write(self, lines: list[str]) -> None:
        private_dirs(self.path.parent)
        replace_file(self.path, "".join(line + "\n" for line in lines).encode(
            "utf-8", errors="replace"))


def drop_matching(lines: list[str], matcher: Matcher) -> tuple[list[str], list[str]]:
    """(lines kept, lines removed): a line goes when a match touches it, read as one text so
    that a phrase typed over two lines is found. A regex that runs away on the whole is run
    line by line (Matcher.undecided), so one such line keeps only itself."""
    before = len(matcher.undecided)
    spans = matcher.spans("\n".join(lines))
    if len(matcher.undecided) > before:
        del matcher.undecided[before:]
        spans, pos = [], 0
        for line in lines:
            spans += [(pos + a, pos + b) for a, b in matcher.spans(line)]
            pos += len(line) + 1
    kept, gone, pos = [], [], 0
    for line in lines:
        end = pos + len(line) + 1  # with its line break
        (gone if any(a < end and pos < b for a, b in spans) else kept).append(line)
        pos = end
    return kept, gone

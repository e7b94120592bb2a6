"""Replacing a file whole: the one way memgpt-lite rewrites a file it keeps (exports, the
config file, the input history, a scrubbed recording)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path` (0600: it may hold memory or a key),
    synced, then renamed over `path`: a failure (a full disk, a kill) never leaves a
    truncated file, only the old one. OSError when it cannot be written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

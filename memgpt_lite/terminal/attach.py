"""Reading the files a user attaches (`chat -a FILE`, piped stdin with `-p`, `/add FILE`):
one sentence (UserError) for a file that cannot be read or sent, before anything is sent.
What becomes of the bytes (text or image blocks, limits) is engine/attachments.py."""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

from memgpt_lite.terminal.exit_codes import EXIT_USAGE, UserError


def read_attachment(path: str) -> Any:
    """One file as an Attachment (UserError saying why it cannot be)."""
    from memgpt_lite.engine.attachments import AttachmentError, from_bytes

    try:
        return from_bytes(os.path.basename(path) or path, _read_file(path))
    except AttachmentError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None


def chat_attachments(paths: list[str], prompt: str | None) -> list[Any]:
    """The files of -a (in order), then piped stdin when -p gives the message itself:
    `cat notes.md | memgpt-lite chat -p "Summarise this"` attaches notes.md's text."""
    from memgpt_lite.engine.attachments import AttachmentError, from_bytes

    out = [read_attachment(path) for path in paths]
    if prompt not in (None, "-") and stdin_is_data():
        data = _bounded_read(sys.stdin.buffer, "stdin")
        if data.strip():
            try:
                out.append(from_bytes("stdin", data))
            except AttachmentError as exc:
                raise UserError(str(exc), EXIT_USAGE) from None
    return out


def _read_file(path: str) -> bytes:
    from memgpt_lite.engine.attachments import MAX_FILE_BYTES

    target = os.path.expanduser(path)
    try:
        size = os.path.getsize(target)
        if os.path.isdir(target):
            raise UserError(f"{path} is a folder; attach a file.", EXIT_USAGE)
        if size > MAX_FILE_BYTES:
            raise UserError(f"{path} is {size:,} bytes; memgpt-lite attaches files of at most "
                            f"{MAX_FILE_BYTES:,} bytes.", EXIT_USAGE)
        with open(target, "rb") as fh:
            return _bounded_read(fh, path)
    except OSError as exc:
        raise UserError(f"Cannot read {path}: {exc.strerror or exc}.", EXIT_USAGE) from None


def _bounded_read(fh: Any, name: str) -> bytes:
    """At most MAX_FILE_BYTES of `fh`, else one sentence. A pipe, `<(cmd)` or a device
    (/dev/zero) has no size to check first, and reading it whole could take all memory."""
    from memgpt_lite.engine.attachments import MAX_FILE_BYTES

    data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{name} is more than {MAX_FILE_BYTES:,} bytes; memgpt-lite attaches "
                        f"files of at most {MAX_FILE_BYTES:,} bytes.", EXIT_USAGE)
    return data


def stdin_is_data() -> bool:
    """Whether stdin is a pipe or a file (not a terminal, not /dev/null, not closed)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)

"""Replacing a file whole: the one way memgpt-lite rewrites a file it keeps (exports, the
config file, the input history, a scrubbed recording); folders created private."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path` (0600: it may hold memory or a key),
    synced, then renamed over `path`: a failure (a full disk, a kill) never leaves a
    truncated file, only the old one. OSError when it cannot be written.

    A symlink's target is replaced (the link stays). A device or a pipe (`-o /dev/stdout`,
    `-o >(gzip > x.gz)`) is written to: renaming over it would put a regular file in place
    of /dev/null for every program, and there is no old content it could truncate."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # links followed
        with open(path, "wb") as fh:
            fh.write(data)
        return
    path = Path(os.path.realpath(path))  # after: /dev/stdout resolves to no usable path
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


def write_problem(path: Path) -> str | None:
    """Why `replace_file(path, …)` would fail (the system's reason, e.g. "No such file or
    directory"), found before a long run instead of after it; None when it would not."""
    path = Path(path)
    if path.is_dir():
        return "it is a folder"
    if path.exists() and not path.is_file():
        return None  # a device or a pipe: written to, not replaced
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=Path(os.path.realpath(path)).parent)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(tmp)
    return None


def dangling_link(folder: Path) -> Path | None:
    """The symbolic link on the way to `folder` whose target is missing (a drive not
    mounted, a folder moved away), or None. A folder cannot be made through it, and making
    its target would put data where the missing drive belongs."""
    path = Path(folder)
    while not path.exists() and path.parent != path:
        if path.is_symlink():
            return path
        path = path.parent
    return None


def private_dirs(folder: Path) -> None:
    """Create `folder` and any missing parents as 0700, whatever the umask: mkdir's mode
    applies to the leaf only, and the first folder made may be the data dir itself."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o700)


class LockBusy(TimeoutError):
    """Another process held a lock of `held_lock` for longer than the wait."""


@contextlib.contextmanager
def held_lock(lock_path: Path, wait: float) -> Iterator[None]:
    """An exclusive flock on `lock_path` (made 0600, its folder 0700) around a short
    read-change-write of a file other processes change too: replacing the file whole keeps a
    reader from seeing half of it, but two writers would each write back what they read and
    one change would be lost. LockBusy when another process holds it for `wait` s."""
    # The first write of a chat on Postgres may be what creates the data dir itself (no
    # database file there to do it first): 0700 for every folder made, not only the leaf.
    private_dirs(lock_path.parent)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockBusy(f"{lock_path} stayed locked for {wait:.0f} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # drops the lock

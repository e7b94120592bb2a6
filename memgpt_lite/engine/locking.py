"""One process per agent: an advisory lock file per agent in the data dir.

Two chat processes on one agent would interleave turns (both take turn id N+1) and each
would build requests from a queue the other is changing. SQLite keeps every single write
safe, but not that. So an open Agent holds `fcntl.flock` on `locks/<agent>.lock` next to the
database; the kernel drops the lock when the process dies, even on kill -9, so a crash never
leaves a stale lock behind. The file holds the owner's pid, for the message.

The lock is per process and re-entrant: opening the same agent twice in one process (a
restart test, the chat plus a command) shares one lock, released when the last holder
releases it. Different agents lock different files and work side by side.

This is the SQLite store's lock (`SQLiteStore.agent_lock`); the Postgres store takes an
advisory lock in the database instead, across machines (store/postgres_lock.py), with the
same refusal.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import threading
import time
from pathlib import Path

from memgpt_lite.engine.files import private_dirs
from memgpt_lite.engine.store.base import StoreError

DEFAULT_WAIT = 3.0  # seconds a second process waits before it refuses
_POLL = 0.1


class AgentBusyError(StoreError):
    """Another process has this agent open. A StoreError, so the CLI shows it as one sentence."""

    def __init__(self, agent: str, pid: int | None, host: str | None = None):
        who = f" (pid {pid}{f' on {host}' if host else ''})" if pid else ""
        super().__init__(f"agent {agent!r} is in use by another memgpt-lite process{who}; "
                         "close that chat first, or use another agent with --agent NAME.")
        self.agent = agent
        self.pid = pid
        self.host = host


def lock_path(data_dir: Path, agent: str) -> Path:
    """locks/<safe name>-<hash>.lock: readable file names, no collisions between names that
    sanitise alike ("a/b" and "a_b")."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", agent).strip("._")[:40] or "agent"
    digest = hashlib.sha256(agent.encode("utf-8")).hexdigest()[:8]
    return Path(data_dir) / "locks" / f"{safe}-{digest}.lock"


class _Held:
    """An open, flocked lock file and how many AgentLocks in this process share it."""

    def __init__(self, fd: int):
        self.fd = fd
        self.count = 1


_held: dict[Path, _Held] = {}
# Re-entrant: a garbage-collected Agent releases its lock from a finalizer, which can run
# inside acquire() on the same thread.
_guard = threading.RLock()


class AgentLock:
    """The lock of one agent in one data dir. `acquire(wait)` blocks up to `wait` seconds,
    then raises AgentBusyError naming the holder's pid; `release()` is idempotent."""

    def __init__(self, data_dir: Path, agent: str):
        self.agent = agent
        self.path = lock_path(data_dir, agent)
        self.held = False

    def acquire(self, wait: float = DEFAULT_WAIT) -> AgentLock:
        with _guard:
            if self.held:
                return self
            entry = _held.get(self.path)
            if entry is not None:
                entry.count += 1  # first, so a finalizer running now cannot drop it to 0
            else:
                _held[self.path] = _Held(self._take(wait))
            self.held = True
        return self

    def release(self) -> None:
        with _guard:
            if not self.held:
                return
            self.held = False
            entry = _held.get(self.path)
            if entry is None:
                return
            entry.count -= 1
            if entry.count == 0:
                del _held[self.path]
                os.close(entry.fd)  # closing the descriptor drops the flock

    def renew(self, wait: float = DEFAULT_WAIT) -> None:
        """Nothing to do: a file lock lives with this process's descriptor, not with a
        database connection (the Postgres lock is renewed after a server restart)."""

    def holder_pid(self) -> int | None:
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def _take(self, wait: float) -> int:
        """An fd of the lock file holding the flock. On any failure (busy, a full disk, ^C
        while waiting) the fd is closed: a leaked fd would keep the lock until exit.

        `agents delete` and `agents rename` remove the lock file while they hold it. A
        process that was waiting on that file then gets a flock on a file nobody else can
        open any more, while the next process creates a new file at the path and locks
        that: two holders. So a flock counts only while the path still names the file it
        was taken on; otherwise the new file is locked instead, within the same wait."""
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            fd = _open_lock_file(self.path)
            try:
                self._flock(fd, deadline - time.monotonic())
                if _names(self.path, fd):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"Cannot write the lock file {self.path} ({exc.strerror}).") from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _flock(self, fd: int, wait: float) -> None:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise StoreError(f"Cannot lock {self.path} ({exc.strerror}).") from None
                if time.monotonic() >= deadline:
                    raise AgentBusyError(self.agent, self.holder_pid()) from None
            time.sleep(_POLL)

    def __enter__(self) -> AgentLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_elsewhere(data_dir: Path) -> int | None:
    """Whether another process holds an agent's lock in this data dir now: its pid (0 when
    the file names none), else None. The lock is not taken: a shared flock is tried and
    dropped at once, so a chat starting meanwhile only waits a moment."""
    folder = Path(data_dir) / "locks"
    for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        if path.name == "input-history.lock" or path in _held:  # not an agent's; ours
            continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = path.read_text(encoding="ascii", errors="replace").strip()
            return int(text) if text.isdigit() else 0
        finally:
            os.close(fd)  # closing the descriptor drops the flock
    return None


def _names(path: Path, fd: int) -> bool:
    """Whether `path` is still the file `fd` has open (not removed or replaced since)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _open_lock_file(path: Path) -> int:
    try:
        private_dirs(path.parent)  # the data dir too, when this makes it: 0700 throughout
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise StoreError(f"Cannot create the lock file {path} ({exc.strerror}).") from None
    os.fchmod(fd, 0o600)
    return fd


"""One process per agent across machines: a Postgres advisory lock per agent.

The SQLite store locks a file beside the database (locking.py); machines sharing a Postgres
database share no files, so the lock lives in the database: a session-level advisory lock
keyed by the agent's name, held on a connection of its own for as long as the agent is open.
The server drops it when that session ends: on exit, on kill -9 (the socket closes), and
when a machine vanishes (TCP keepalives, set on the session, end it within half a minute).

The refusal names the holder, host and pid: the holder's session says who it is in its
`application_name` (`memgpt-lite pid 4242 on laptop`), which `pg_locks` and
`pg_stat_activity` show to every user of the database.

Whether another process holds an agent's lock (`held_elsewhere`) is read from `pg_locks`: a
schema that needs an upgrade is left alone while an older version's chat has an agent open.

As the file lock, the lock is per process and re-entrant: one lock session per database per
process, each agent's lock counted and given back when its last holder releases it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
from collections.abc import Collection

import psycopg

from memgpt_lite.engine.locking import DEFAULT_WAIT, AgentBusyError
from memgpt_lite.engine.store.base import StoreError
from memgpt_lite.engine.store.database import Database

_POLL = 0.1
_WHO = re.compile(r"memgpt-lite pid (\d+) on (.*)")
_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
              "keepalives_count": 3}


def lock_key(name: str) -> int:
    """The advisory lock key of an agent: 64 bits of a hash of its name (signed)."""
    value = int.from_bytes(hashlib.sha256(f"memgpt-lite agent\0{name}".encode()).digest()[:8],
                           "big")
    return value - (1 << 64) if value >= 1 << 63 else value


class _Session:
    """This process's lock connection to one database and the agent locks it holds."""

    def __init__(self, url: str, where: str):
        who = f"memgpt-lite pid {os.getpid()} on {socket.gethostname()}"
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=10,
                                        application_name=who[:63], **_KEEPALIVE)
            for setting, value in (("idle", 10), ("interval", 5), ("count", 3)):
                self.conn.execute(f"SET tcp_keepalives_{setting} = {value}")
        except psycopg.Error as exc:
            raise StoreError(f"Cannot lock the agent in the database {where}: "
                             f"{str(exc).strip().splitlines()[0]}.") from None
        self.held: dict[int, int] = {}  # key → holders in this process


def _answers(session: _Session) -> bool:
    """Whether the lock session is alive (so still holds its locks)."""
    try:
        session.conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


_sessions: dict[str, _Session] = {}
_guard = threading.RLock()


def held_elsewhere(db: Database, skip: Collection[int]) -> str | None:
    """Who holds an agent's lock in `db`'s database now, other than this process: "pid 4242
    on laptop" from its lock session's name, else the server's pid of that session and the
    client's address; None when nobody does. `skip`: the keys of the store's own
    transaction locks (migrating, sharing), which are not an agent's."""
    mine = {s.conn.info.backend_pid for s in list(_sessions.values()) if not s.conn.closed}
    rows = db.query(
        "SELECT l.pid, l.classid::bigint, l.objid::bigint, a.application_name, "
        "host(a.client_addr) FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND "  # a bigint key
        "l.pid <> pg_backend_pid() AND "
        "l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "ORDER BY l.pid")
    unsigned = {key & ((1 << 64) - 1) for key in skip}
    for pid, high, low, name, address in rows:
        if pid in mine or (high << 32 | low) in unsigned:
            continue
        found = _WHO.fullmatch(name or "")
        if found:
            return f"pid {found.group(1)} on {found.group(2)}"
        return f"database session {pid}" + (f" from {address}" if address else "")
    return None


class PostgresAgentLock:
    """The lock of one agent in one database. `acquire(wait)` blocks up to `wait` seconds,
    then raises AgentBusyError naming the holder's pid and host; `release()` is idempotent."""

    def __init__(self, url: str, where: str, agent: str):
        self.url, self.where, self.agent = url, where, agent
        self.key = lock_key(agent)
        self.held = False

    def acquire(self, wait: float = DEFAULT_WAIT) -> PostgresAgentLock:
        with _guard:
            if self.held:
                return self
            session = _sessions.get(self.url) or _Session(self.url, self.where)
            _sessions[self.url] = session
            if session.held.get(self.key):
                session.held[self.key] += 1
            else:
                try:
                    self._take(session, wait)
                except BaseException:
                    self._drop_if_idle(session)
                    raise
                session.held[self.key] = 1
            self.held = True
        return self

    def release(self) -> None:
        with _guard:
            session = _sessions.get(self.url)
            if not self.held or session is None:
                self.held = False
                return
            self.held = False
            session.held[self.key] -= 1
            if session.held[self.key] == 0:
                del session.held[self.key]
                try:
                    session.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
                except psycopg.Error:
                    pass  # the session is gone, and the server dropped the lock with it
            self._drop_if_idle(session)

    def renew(self, wait: float = DEFAULT_WAIT) -> None:
        """Hold the lock again after the server may have dropped it with its session (a
        restart ends every session): a session that still answers still holds it; a dead
        one is replaced, and what it held is taken again on the new one. StoreError when
        the server cannot be reached; AgentBusyError when another process took the agent
        meanwhile (this lock is then not held)."""
        with _guard:
            session = _sessions.get(self.url)
            if not self.held or (session is not None and _answers(session)):
                return
            held = dict(session.held) if session is not None else {self.key: 1}
            if session is not None:
                del _sessions[self.url]
                session.conn.close()
            fresh = _Session(self.url, self.where)
            try:
                for key in held:
                    self._take(fresh, wait, key)
            except BaseException:
                self.held = False  # nothing of the old session is held any more
                fresh.conn.close()
                raise
            fresh.held = held
            _sessions[self.url] = fresh

    def _take(self, session: _Session, wait: float, key: int | None = None) -> None:
        key = self.key if key is None else key
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                got = session.conn.execute("SELECT pg_try_advisory_lock(%s)",
                                           (key,)).fetchone()[0]  # type: ignore[index]
            except psycopg.Error as exc:
                raise StoreError(f"Cannot lock the agent in the database {self.where}: "
                                 f"{str(exc).strip().splitlines()[0]}.") from None
            if got:
                return
            if time.monotonic() >= deadline:
                pid, host = self.holder(session)
                raise AgentBusyError(self.agent, pid, host)
            time.sleep(_POLL)

    def holder(self, session: _Session) -> tuple[int | None, str | None]:
        """The pid and host of the process holding the lock, from its session's name."""
        unsigned = self.key & ((1 << 64) - 1)
        try:
            rows = session.conn.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON "
                "a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND "
                "l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 AND "
                "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (unsigned >> 32, unsigned & 0xFFFFFFFF)).fetchall()
        except psycopg.Error:
            return None, None
        found = _WHO.fullmatch(rows[0][0] or "") if rows else None
        return (int(found.group(1)), found.group(2)) if found else (None, None)

    def _drop_if_idle(self, session: _Session) -> None:
        if not session.held and _sessions.get(self.url) is session:
            del _sessions[self.url]
            session.conn.close()

    def __enter__(self) -> PostgresAgentLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

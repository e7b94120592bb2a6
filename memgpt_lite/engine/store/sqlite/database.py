"""The database seam (`store/database.py`) on one SQLite file.

WAL so a reader never blocks the writer, a busy timeout so two processes wait instead of
failing, foreign keys so deleting an agent deletes its memory, secure_delete so what is
deleted is zeroed in the file (a forget must leave no copy behind). A damaged page can
surface from any statement or fetch: it becomes one sentence, and from then on the
connection refuses every write, so a damaged file is never written to.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memgpt_lite.engine.files import dangling_link
from memgpt_lite.engine.setting_rules import ConfigError
from memgpt_lite.engine.store.base import IntegrityProblem, StoreBusy, StoreError
from memgpt_lite.engine.store.database import Params, Row, Transactions
from memgpt_lite.engine.text import clean_text

SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_SECONDS = 5  # how long a write waits for another process's write lock
# Statements that write, or (journal_mode) need the file to themselves.
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "BEGIN IMMEDIATE",
           "VACUUM", "REINDEX", "PRAGMA JOURNAL_MODE")


def sqlite_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """One sentence for the user about a failed SQLite operation on `path`."""
    text = str(exc).lower()
    if isinstance(exc, sqlite3.IntegrityError):
        return IntegrityProblem(f"The database {path} refused the write ({exc}).", str(exc))
    if "locked" in text or "busy" in text:
        return StoreBusy(f"The database {path} is locked by another process (it held the "
                         f"write lock for over {BUSY_SECONDS} s); try again once it is done.")
    if "readonly" in text or "read-only" in text:
        msg = f"The database {path} is read-only; check its permissions."
    elif "unable to open" in text and not os.access(path.parent, os.W_OK):
        # WAL mode needs to create files beside the database, so a read-only folder
        # fails at open time with SQLite's generic message.
        msg = (f"The data dir {path.parent} is read-only; make it writable or point "
               f"MEMGPT_LITE_HOME at another folder.")
    elif "full" in text:
        msg = f"The disk holding {path} is full; free some space and try again."
    elif "not a database" in text or "malformed" in text:
        msg = f"{path} is not a readable memgpt-lite database; it was left untouched."
    else:
        msg = f"The database {path} failed: {exc}."
    return StoreError(msg)


def _damaged_file(exc: BaseException) -> bool:
    """SQLite's words for a file whose pages are damaged (SQLITE_CORRUPT, SQLITE_NOTADB)."""
    text = str(exc).lower()
    return type(exc) is sqlite3.DatabaseError and ("malformed" in text or "not a database" in text)


class _Cursor(sqlite3.Cursor):
    """A cursor whose damaged-file errors become `_Connection.damage` (see there)."""

    connection: _Connection

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:  # type: ignore[override]
        self.connection.refuse_writes(sql)
        return self.connection.guard(super().execute, sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:  # type: ignore[override]
        self.connection.refuse_writes(sql)
        return self.connection.guard(super().executemany, sql, seq)

    def fetchone(self) -> Any:
        return self.connection.guard(super().fetchone)

    def fetchall(self) -> list[Any]:
        return self.connection.guard(super().fetchall)

    def fetchmany(self, size: int = 1) -> list[Any]:  # type: ignore[override]
        return self.connection.guard(super().fetchmany, size)

    def __next__(self) -> Any:
        return self.connection.guard(super().__next__)


class _Connection(sqlite3.Connection):
    """The store's connection: damaged-file errors become one StoreError sentence (kept as
    `damage`), after which every write is refused."""

    path: Path
    damage: StoreError | None = None
    checked: threading.Event | None = None  # set once the page check is done (check_pages)

    def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
        return super().cursor(factory or _Cursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:  # type: ignore[override]
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> Any:  # type: ignore[override]
        return self.cursor().executemany(sql, seq)

    def guard(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except sqlite3.DatabaseError as exc:
            if not _damaged_file(exc):
                raise
            self.damaged(str(exc))
            raise self.damage from None

    def damaged(self, what: str) -> None:
        what = " ".join(what.replace("*** in database main ***", "").split())  # one line
        self.damage = self.damage or StoreError(
            f"The database {self.path} is damaged ({what}); memgpt-lite will not write to "
            "it. Run `memgpt-lite doctor` to see what can be recovered.")

    def refuse_writes(self, sql: str) -> None:
        if not sql.lstrip().upper().startswith(_WRITES):
            return
        if self.checked is not None:
            self.checked.wait()  # the first write waits for the page check (see check_pages)
        if self.damage is not None:
            raise self.damage


class SQLiteDatabase(Transactions):
    """The `Database` seam on one SQLite file (see the module docstring). `raw=True` opens a
    file as it is (a base snapshot beside the recordings): no folder or file is made, no
    pragma changes it."""

    ids_per_agent = False

    def __init__(self, path: str | Path, *, raw: bool = False, read_only: bool = False):
        self.path = Path(path).expanduser()
        self.location = str(self.path)
        self._checker: tuple[sqlite3.Connection, threading.Thread] | None = None
        super().__init__()
        if not raw:
            prepare_file(self.path)
        # A database in a folder that cannot be written (a read-only mount, a backup) is read
        # as it is: listing, showing and exporting work, every write is one sentence.
        self.read_only = read_only or (not raw and self.path.exists()
                                       and not os.access(self.path.parent, os.W_OK))
        self.connection = self._connect()
        self.connection.path = self.path
        try:
            # Before the first read: a second process creating the same new file holds
            # its lock for a moment, and without a timeout the read fails at once.
            self.connection.execute(f"PRAGMA busy_timeout = {BUSY_SECONDS * 1000}")
        except sqlite3.Error as exc:
            self.connection.close()
            raise sqlite_error(self.path, exc) from None

    def _connect(self) -> _Connection:
        if not self.read_only:
            try:
                conn = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False, factory=_Connection)
            except sqlite3.Error as exc:
                raise sqlite_error(self.path, exc) from None
            conn.path = self.path
            return conn
        # Reading a WAL database needs files beside it; where none can be made (`immutable`)
        # SQLite reads the file alone, which nothing can be writing on a read-only medium.
        uri, error = self.path.resolve().as_uri(), None
        for flags in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(uri + flags, uri=True, isolation_level=None,
                                       check_same_thread=False, factory=_Connection)
                conn.path = self.path  # before the first read: a damaged file names itself
                conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
                return conn
            except sqlite3.Error as exc:
                error = exc
        raise sqlite_error(self.path, error) from None  # type: ignore[arg-type]

    def configure(self) -> None:
        """The store's pragmas (after its schema was checked: a foreign file is never
        touched)."""
        self.connection.execute("PRAGMA foreign_keys = ON")
        # What is deleted or rewritten is zeroed in the file, not left in free space.
        self.connection.execute("PRAGMA secure_delete = ON")
        self._enable_wal()
        self.connection.execute("PRAGMA synchronous = NORMAL")  # safe with WAL

    def check_pages(self) -> None:
        """Check every page of the file in the background (`PRAGMA quick_check`, on a
        read-only connection of its own) and hold the first write until it is done: a page
        that the reads of a session never touch (an index's) is found damaged before the
        session writes anything. About 0.2 s per 50 MB, mostly while the user types."""
        checked = self.connection.checked = threading.Event()
        conn = self.connection
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        # Opened here so that close() can interrupt it: a check still running must not
        # hold the file (or make its -shm) after the store is closed and its folder removed.
        try:
            checker = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except sqlite3.Error:
            checked.set()  # nothing to check with; the session's own reads still check
            return

        def run() -> None:
            try:
                rows = checker.execute("PRAGMA quick_check").fetchall()
                problems = [r[0] for r in rows if r[0] != "ok"]
                if problems:
                    conn.damaged(problems[0])
            except sqlite3.DatabaseError as exc:  # interrupted, busy, or unreadable
                if _damaged_file(exc):
                    conn.damaged(str(exc))
            finally:
                checker.close()
                checked.set()  # whatever happened, writes never wait for ever

        self._checker = checker, threading.Thread(target=run, name="memgpt-lite page check",
                                                  daemon=True)
        self._checker[1].start()

    def _enable_wal(self) -> None:
        """Switch a new file to WAL. Two processes creating the same file can both be
        switching it at once; SQLite then refuses one at once (to avoid a deadlock) instead of
        waiting, so try again for as long as the busy timeout would have waited."""
        deadline = time.monotonic() + BUSY_SECONDS
        while True:
            try:
                self.connection.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def damage(self) -> StoreError | None:
        return self.connection.damage

    def error(self, exc: sqlite3.Error) -> StoreError:
        return sqlite_error(self.path, exc)

    # ---------------------------------------------------------------- statements

    def _run(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except (sqlite3.OperationalError, sqlite3.IntegrityError) as exc:
            raise sqlite_error(self.path, exc) from exc

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except (sqlite3.OperationalError, sqlite3.IntegrityError) as exc:
            raise sqlite_error(self.path, exc) from exc

    def execute(self, sql: str, params: Params = ()) -> int:
        return self._run(self.connection.execute, sql, params).rowcount

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        if rows:
            self._run(self.connection.executemany, sql, rows)

    def insert(self, sql: str, params: Params = ()) -> int:
        return self._run(self.connection.execute, sql, params).lastrowid

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> list[int]:
        # one statement a row: executemany cannot hand back the ids SQLite chose
        return [self.insert(sql, row) for row in rows]

    def next_id(self, table: str, agent_id: int) -> int | None:
        return None  # INTEGER PRIMARY KEY: SQLite gives the highest id + 1

    def stream(self, sql: str, params: Params, size: int) -> Iterator[list[Row]]:
        cur = self.connection.cursor()
        cur.row_factory = None
        self._run(cur.execute, sql, params)
        while rows := cur.fetchmany(size):
            yield rows

    # ---------------------------------------------------------------- transactions

    @contextmanager
    def _outermost(self) -> Iterator[None]:
        """BEGIN IMMEDIATE: take the write lock up front, so busy_timeout applies."""
        self._run(self.connection.execute, "BEGIN IMMEDIATE")
        try:
            yield
            self.connection.execute("COMMIT")
        except BaseException as exc:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise sqlite_error(self.path, exc) from exc
            raise

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """One read transaction: what is read inside is one state of the file."""
        if self._depth or self.connection.in_transaction:
            yield
            return
        self.connection.execute("BEGIN")
        try:
            yield
        finally:
            self.connection.execute("COMMIT")


    def lock(self, key: int) -> None:
        pass  # a writer holds the file's write lock (BEGIN IMMEDIATE) already

    # ---------------------------------------------------------------- SQL that differs

    def text(self, value: str) -> str:
        return clean_text(value)

    def for_update(self) -> str:
        return ""

    def indexed_by(self, index: str) -> str:
        return f" INDEXED BY {index}"

    def unindexed(self, column: str) -> str:
        return f"+{column}"

    def any_of(self, json_column: str, values: list[str]) -> tuple[str, list[Any]]:
        marks = ", ".join("?" * len(values))
        return (f"EXISTS (SELECT 1 FROM json_each({json_column}) WHERE json_each.value IN "
                f"({marks}))", list(values))

    def same_text(self, column: str, value: str) -> tuple[str, list[Any]]:
        return f"{column} = ?", [value]

    def text_filter(self, pattern: Callable[[object], bool] | None) -> Callable[[str], str]:
        self.connection.create_function("forget_probe", 1, pattern or _has_text,
                                        deterministic=True)
        return lambda column: f"forget_probe({column})"

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f"PRAGMA table_info({table})")}

    def tables(self) -> set[str]:
        return {r[0] for r in self.query(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

    def close(self) -> None:
        if self._checker is not None:
            checker, thread = self._checker
            try:
                checker.interrupt()  # a check cut short finds nothing, and writes nothing
            except sqlite3.ProgrammingError:
                pass  # it had already finished and closed its connection
            thread.join()
        self.connection.close()


def _has_text(text: object) -> bool:
    return isinstance(text, str)


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be opened as a database (one sentence), or None: a folder, a file
    that cannot be read or is not SQLite. A path that does not exist yet is fine (it is
    created). `config set database_url` asks this too, so the next command opens it."""
    if path.is_dir():
        return f"{path} is a directory, not a memgpt-lite database."
    if not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})."
    if header and header != SQLITE_HEADER:
        return (f"{path} is not a SQLite database; it was left untouched. Move it away or "
                "point MEMGPT_LITE_HOME elsewhere.")
    return None


def prepare_file(path: Path) -> None:
    """Create the data dir (0700) and the db file (0600) if missing; refuse a file that is
    not SQLite before SQLite touches it."""
    link = dangling_link(path.parent)
    if link is not None:
        raise ConfigError(f"The data dir {path.parent} cannot be used: {link} is a link to "
                          f"{os.readlink(link)}, which does not exist (a drive not mounted?); "
                          "mount or create it, or point MEMGPT_LITE_HOME elsewhere.")
    if not path.parent.exists():
        try:  # exist_ok: two processes opening a new data dir at once both get here.
            path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
            os.chmod(path.parent, 0o700)
        except (NotADirectoryError, FileExistsError):  # the user's path to mend: a usage error
            raise ConfigError(f"The data dir {path.parent} cannot be created: a part of that "
                              "path is a file, not a folder; move it away or point "
                              "MEMGPT_LITE_HOME elsewhere.") from None
        except OSError as exc:  # a read-only mount, no permission
            raise StoreError(f"Cannot create the data directory {path.parent} "
                             f"({exc.strerror}); check MEMGPT_LITE_HOME.") from None
    elif not path.parent.is_dir():  # MEMGPT_LITE_HOME names a file: the user's path to mend
        raise ConfigError(f"The data dir {path.parent} is a file, not a folder; move it away "
                          "or point MEMGPT_LITE_HOME elsewhere.")
    problem = file_problem(path)
    if problem:
        raise StoreError(problem)
    if path.exists():
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(path, 0o600)
    except OSError as exc:
        raise StoreError(f"Cannot create the database {path} ({exc.strerror}).") from None

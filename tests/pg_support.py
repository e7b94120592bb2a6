"""A Postgres server for the tests: $MEMGPT_LITE_TEST_DATABASE_URL (CI starts one, see
.ci/run), else a throwaway server started here (initdb + pg_ctl in a temporary folder, on a
free loopback port, as an unprivileged user when the tests run as root: initdb refuses
root). Each test gets a database of its own, dropped afterwards.

Where no server can be had, the tests that need one are skipped with the reason shown; with
MEMGPT_LITE_TEST_REQUIRE_POSTGRES=1 (CI) that is a failure instead.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

URL_VAR = "MEMGPT_LITE_TEST_DATABASE_URL"
REQUIRE_VAR = "MEMGPT_LITE_TEST_REQUIRE_POSTGRES"


def _binaries() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parent.parent.name))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A throwaway server in a temporary folder; `stop()` ends it and removes the folder."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.folder: Path | None = None
        self.bin: Path | None = None
        self.uid: int | None = None
        self.options = ""

    def start(self) -> str:
        self.bin = _binaries()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) are installed")
        self.folder = Path(tempfile.mkdtemp(prefix="memgpt-lite-pg-"))
        if os.geteuid() == 0:  # initdb refuses root: run the server as nobody
            self.uid = pwd.getpwnam("nobody").pw_uid
            os.chown(self.folder, self.uid, pwd.getpwnam("nobody").pw_gid)
        port = _free_port()
        self._run("initdb", "-D", str(self.folder / "data"), "-U", "memgpt", "--auth=trust",
                  "-E", "UTF8", "--no-locale")
        self.options = (f"-p {port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                        "-c max_connections=200")
        self._ctl("start")
        self.url = f"postgresql://memgpt@127.0.0.1:{port}/postgres"
        return self.url

    def _ctl(self, action: str, *args: str) -> None:
        # The log file keeps the server's output off our pipes (a restarted server that
        # inherited them would hold them open, and the call would never return).
        assert self.folder is not None
        try:
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-l", str(self.folder / "log"),
                      "-w", "-t", "60", "-o", self.options, *args, action)
        except RuntimeError as exc:
            log = (self.folder / "log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"{exc}; the server's log ends: {log}") from None

    def restart(self) -> None:
        """What a maintenance window does: every session is ended, the server comes back."""
        self._ctl("restart", "-m", "fast")

    def pause(self) -> None:
        """Stop the server (sessions ended, connections refused) until `resume()`."""
        self._ctl("stop", "-m", "fast")

    def resume(self) -> None:
        self._ctl("start")

    def _run(self, tool: str, *args: str) -> None:
        def drop_root() -> None:
            if self.uid is not None:
                os.setgroups([])
                os.setgid(pwd.getpwuid(self.uid).pw_gid)
                os.setuid(self.uid)

        assert self.bin is not None
        proc = subprocess.run([str(self.bin / tool), *args], capture_output=True, text=True,
                              preexec_fn=drop_root, timeout=120, cwd="/")
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed: {proc.stderr.strip()[-500:]}")

    def stop(self) -> None:
        if self.folder is None:
            return
        if self.url is not None:
            try:
                self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


def server_url(server: Server) -> tuple[str | None, str]:
    """(URL of a server to use, or None; why not)."""
    if os.environ.get(URL_VAR):
        return os.environ[URL_VAR], ""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg is not installed (pip install 'memgpt-lite[postgres]')"
    try:
        return server.start(), ""
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError) as exc:
        server.stop()
        return None, f"no PostgreSQL server could be started ({exc})"


def skip_or_fail(reason: str) -> None:
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"Postgres is required here ({REQUIRE_VAR}=1) but {reason}")
    pytest.skip(f"Postgres tests need a server: {reason}")


def with_database(url: str, name: str) -> str:
    """The postgresql:// `url` pointing at database `name` instead."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(admin_url: str) -> tuple[str, str]:
    import psycopg

    name = f"memgpt_test_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return name, with_database(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

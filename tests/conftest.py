from __future__ import annotations

import os
import signal

import pytest

# A suite started as a background job of a non-interactive shell (`bash -c '... &'`) inherits
# SIGINT ignored, and so would every chat a test starts: the Ctrl-C tests would then test
# nothing. Ctrl-C is what a terminal gives, so the suite gives it back to its processes.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own data dir and never sees a real API key or server. The
    environment is put back whole afterwards: a command run in-process may set variables
    (`--db URL` becomes MEMGPT_LITE_DATABASE_URL for the processes it starts)."""
    saved = dict(os.environ)
    home = tmp_path / "home"
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
    # Never the user's own config file: each test has its own (absent until one writes it).
    monkeypatch.setenv("MEMGPT_LITE_CONFIG", str(tmp_path / "config" / "config.toml"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    for var in ("MEMGPT_LITE_MODEL", "MEMGPT_LITE_CONTEXT_WINDOW", "MEMGPT_LITE_MAX_TOKENS",
                "MEMGPT_LITE_SUMMARY_MODEL", "MEMGPT_LITE_EMBEDDER", "MEMGPT_LITE_EMBEDDINGS_URL",
                "MEMGPT_LITE_EMBEDDINGS_MODEL", "MEMGPT_LITE_EMBEDDINGS_KEY",
                "MEMGPT_LITE_DATABASE_URL", "MEMGPT_LITE_TIMEOUT", "MEMGPT_LITE_PRICES",
                "MEMGPT_LITE_EMBEDDINGS_TIMEOUT",
                "MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE", "MEMGPT_LITE_EMBED_QUERY_PREFIX",
                "MEMGPT_LITE_EMBED_PASSAGE_PREFIX", "MEMGPT_LITE_EMBED_THREADS"):
        monkeypatch.delenv(var, raising=False)
    yield home
    os.environ.clear()
    os.environ.update(saved)


# --------------------------------------------------------------------------- Postgres


@pytest.fixture(scope="session")
def postgres_server():
    """(URL of a Postgres server for the tests, or None; why not): see tests/pg_support.py."""
    import pg_support

    server = pg_support.Server()
    found = pg_support.server_url(server)
    yield found
    server.stop()


@pytest.fixture
def pg_url(postgres_server):
    """A fresh, empty database on the test server, dropped afterwards (a skip, or in CI a
    failure, when there is no server)."""
    import pg_support

    url, why = postgres_server
    if url is None:
        pg_support.skip_or_fail(why)
    name, db = pg_support.create_database(url)
    yield db
    pg_support.drop_database(url, name)


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request, tmp_path):
    """Where a store of each backend lives: a SQLite file, or a fresh Postgres database."""
    if request.param == "sqlite":
        return str(tmp_path / "data" / "memgpt_lite.db")
    return request.getfixturevalue("pg_url")

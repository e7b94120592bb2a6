from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import sys
import tempfile

import pytest

# A suite started as a background job of a non-interactive shell (`bash -c '... &'`) inherits
# SIGINT ignored, and so would every chat a test starts: the Ctrl-C tests would then test
# nothing. Ctrl-C is what a terminal gives, so the suite gives it back to its processes.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# No test reaches a model hub. The hub client reads its endpoint, cache and offline switch
# once, when it is imported, so they are set here, before any test can import it: the
# endpoint is a loopback port bound and never listened on (a connection is refused at once,
# and no other process can take the port), the cache a folder of the run's own.
_NO_HUB = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
_NO_HUB.bind(("127.0.0.1", 0))
NO_HUB_URL = f"http://127.0.0.1:{_NO_HUB.getsockname()[1]}"
_HF_RUN_HOME = tempfile.mkdtemp(prefix="memgpt-lite-tests-hf-")
os.environ.update(HF_ENDPOINT=NO_HUB_URL, HF_HOME=_HF_RUN_HOME, HF_HUB_DISABLE_TELEMETRY="1",
                  HF_HUB_CACHE=os.path.join(_HF_RUN_HOME, "hub"))
_HF_UNSET = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
             "HF_TOKEN_PATH", "HF_ASSETS_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE",
             "XDG_CACHE_HOME")
for _var in _HF_UNSET:
    os.environ.pop(_var, None)
try:  # now, so that its endpoint is the refused port whatever HF_ENDPOINT a test sets first
    importlib.import_module("huggingface_hub.constants")
except ImportError:  # the embeddings extra is not installed: nothing can reach a hub
    pass


def pytest_unconfigure(config):
    shutil.rmtree(_HF_RUN_HOME, ignore_errors=True)


def _isolated_hub(tmp_path, monkeypatch):
    """The hub client of one test: the refused endpoint, its own cache in tmp_path, no
    token, online, no telemetry; in the environment (for the processes a test starts) and,
    once the client is imported, in its constants (read at import) as well."""
    hf_home = tmp_path / "hf"
    values = {"HF_ENDPOINT": NO_HUB_URL, "HF_HOME": str(hf_home),
              "HF_HUB_CACHE": str(hf_home / "hub"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    for var in _HF_UNSET:
        monkeypatch.delenv(var, raising=False)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        for name, value in (("HF_HOME", str(hf_home)),
                            ("HF_HUB_CACHE", str(hf_home / "hub")),
                            ("HF_TOKEN_PATH", str(hf_home / "token")),
                            ("HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens")),
                            ("HF_HUB_OFFLINE", False), ("HF_HUB_DISABLE_TELEMETRY", True)):
            if hasattr(constants, name):
                monkeypatch.setattr(constants, name, value)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own data dir and never sees a real API key, server or model hub
    (the hub client is pointed at a refused local port, with a cache of its own). The
    environment is put back whole afterwards: a command run in-process may set variables
    (`--db URL` becomes MEMGPT_LITE_DATABASE_URL for the processes it starts)."""
    saved = dict(os.environ)
    home = tmp_path / "home"
    _isolated_hub(tmp_path, monkeypatch)
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

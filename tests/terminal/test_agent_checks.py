"""What the agent commands share with the chat (agent_checks.py): the check of a context
window near its minimum counts with the API, says so while it waits, and says in one sentence
why it fell back to the estimate when the server does not answer."""

from __future__ import annotations

import socket
import threading

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli


@pytest.fixture
def silent_server():
    """A server that takes connections and never answers a byte (a stalled proxy)."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                taken.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in taken:
        conn.close()
    listener.close()


def _agent() -> None:
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")])).close()


def test_agents_set_says_what_it_waits_for_and_names_the_timeout(silent_server, monkeypatch,
                                                                 capsys):
    """It waited ~17 s in silence, then stored the value: nothing said it was counting
    tokens, with which server, for how long, or that the estimate was used in the end."""
    _agent()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", silent_server)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "1")
    assert cli.main(["agents", "set", "a", "context_window=9000"]) == 0
    out, err = capsys.readouterr()
    host = silent_server.removeprefix("http://")
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"memgpt-lite: measuring the context window with {host}")
    assert "waiting at most 1 s" in lines[0]
    assert lines[1] == (f"memgpt-lite: warning: {host} did not answer the token count within "
                        "1 s (the model call timeout, set by MEMGPT_LITE_TIMEOUT=1), so the "
                        "window was checked by the estimate.")
    assert out.strip() == "Agent 'a': context_window=9,000."


def test_the_default_wait_names_how_to_shorten_it(silent_server, monkeypatch, capsys):
    from memgpt_lite.terminal import agent_checks

    _agent()
    monkeypatch.setattr(agent_checks, "COUNT_WAIT", 1.0)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", silent_server)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    assert cli.main(["agents", "set", "a", "context_window=9000"]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "within 1 s (the most a count waits; MEMGPT_LITE_TIMEOUT or `memgpt-lite config " \
           "set timeout SECONDS` below 1 shortens it)" in last


def test_a_server_that_is_not_there_is_named_once(monkeypatch, capsys):
    _agent()
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again below: nothing listens there
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    assert cli.main(["agents", "set", "a", "context_window=9000"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"memgpt-lite: warning: counting tokens with 127.0.0.1:{port} "
                              "failed (") and err[-1].endswith("checked by the estimate.")

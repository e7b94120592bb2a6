"""Settings are validated wherever they enter: chat flags and environment variables go
through the same checks as stored settings, a context window too small for the fixed part of
a request and one turn is refused with the minimum, max output tokens are bounded by the
model and the window, and notices name the setting that is the cause."""

from __future__ import annotations

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.window import request_floor
from memgpt_lite.engine.config import ConfigError, Settings
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.records import Block
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli
from memgpt_lite.terminal.chat_main import chat_settings


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as s:
        yield s


def refused(store, monkeypatch=None, **flags) -> str:
    with pytest.raises(ConfigError) as info:
        chat_settings(store, "a", flags.get("model"), flags.get("context_window"), None,
                      max_tokens=flags.get("max_tokens"))
    message = str(info.value)
    assert "\n" not in message and message.endswith(".")
    return message


def test_a_window_too_small_for_one_turn_is_refused_with_the_minimum(store):
    message = refused(store, context_window="10")
    blocks = [Block(k, v, n) for k, (v, n) in default_blocks(5_000).items()]
    minimum = request_floor(Settings(), blocks) + 2_048 + 1_000
    assert message.startswith("--context-window 10 is too small")
    assert f"the minimum is {minimum:,}" in message
    settings = chat_settings(store, "a", None, str(minimum), None)
    assert settings.context_window == minimum and settings.budget > 0


def test_the_minimum_grows_with_the_agents_core_memory(store):
    small = request_floor(Settings(), [Block("human", "x", 10)])
    big = request_floor(Settings(), [Block("human", "word " * 2_000, 20_000)])
    assert big - small > 2_000


def test_environment_variables_are_checked_and_named(store, monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_CONTEXT_WINDOW", "abc")
    assert refused(store) == "MEMGPT_LITE_CONTEXT_WINDOW must be a whole number, got 'abc'."
    monkeypatch.setenv("MEMGPT_LITE_CONTEXT_WINDOW", "10")
    assert refused(store).startswith("MEMGPT_LITE_CONTEXT_WINDOW 10 is too small")
    monkeypatch.setenv("MEMGPT_LITE_CONTEXT_WINDOW", "999999999999")
    assert "MEMGPT_LITE_CONTEXT_WINDOW must be between" in refused(store)
    monkeypatch.delenv("MEMGPT_LITE_CONTEXT_WINDOW")
    monkeypatch.setenv("MEMGPT_LITE_MAX_TOKENS", "30000")
    assert refused(store).startswith("MEMGPT_LITE_MAX_TOKENS 30,000 leaves too little of the "
                                     "32,000-token context window")
    monkeypatch.setenv("MEMGPT_LITE_MODEL", "\x1b[31m")
    assert "MEMGPT_LITE_MODEL must be printable text" in refused(store)


def test_max_tokens_are_bounded_by_the_model_and_by_the_window(store):
    assert refused(store, max_tokens="100000") == (
        "--max-tokens 100,000 is more than claude-sonnet-5-5 writes in one reply; "
        "use at most 64,000.")
    message = refused(store, max_tokens="30000")
    assert message.startswith("--max-tokens 30,000 leaves too little") and "use at most" in message
    most = int(message.rsplit("use at most ", 1)[1].rstrip(".").replace(",", ""))
    assert chat_settings(store, "a", None, None, None, max_tokens=str(most)).budget > 0
    unknown = chat_settings(store, "a", "my-local-model", "300000", None, max_tokens="100000")
    assert unknown.max_output_tokens == 100_000  # an unknown model: only the window bounds it


def test_the_chat_command_refuses_a_tiny_window_in_one_sentence(capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    assert cli.main(["chat", "--no-record", "--context-window", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: --context-window 10 is too small")
    assert len(err.strip().splitlines()) == 1
    with SQLiteStore(config.db_path()) as store:  # nothing was stored
        assert store.get_agent("default") is None


def test_notices_name_the_setting_that_is_the_cause(tmp_path):
    store = SQLiteStore(tmp_path / "n.db")
    cut = text_response("A long answer", stop_reason="max_tokens")
    agent = Agent.open(store, "a", model_client=ScriptedModel([cut]))
    notices = [e.message for e in agent.step("hi") if e.kind == "notice"]
    assert "--max-tokens or MEMGPT_LITE_MAX_TOKENS" in notices[0]
    tiny = Agent.open(store, "b", model_client=ScriptedModel([text_response("ok")]),
                      settings=Settings(context_window=1_500, max_output_tokens=200,
                                        safety_margin=100))
    notices = [e.message for e in tiny.step("hi") if e.kind == "notice"]
    assert "--context-window or MEMGPT_LITE_CONTEXT_WINDOW" in notices[0]
    greedy = Agent.open(store, "c", model_client=ScriptedModel([text_response("ok")]),
                        settings=Settings(context_window=4_000, max_output_tokens=2_800,
                                          safety_margin=100))
    notices = [e.message for e in greedy.step("hi") if e.kind == "notice"]
    assert "lower max output tokens (--max-tokens or MEMGPT_LITE_MAX_TOKENS" in notices[0]


# --------------------------------------------------------------------------- one rule, exact


@pytest.fixture
def counting_more(monkeypatch):
    """The fake server, counting a token for every 1.2 characters: far more than our
    estimate assumes, as a real API may."""
    from memgpt_lite.lab import fake_server

    monkeypatch.setattr(fake_server, "CHARS_PER_TOKEN", 1.2)
    with fake_server.FakeAnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        yield server


def minimums(store, server) -> tuple[int, int]:
    """(the minimum window by our estimate, the minimum the server's count gives)."""
    from memgpt_lite.engine.model import AnthropicClient

    blocks = [Block(k, v, n) for k, (v, n) in default_blocks(5_000).items()]
    client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
    rest = 2_048 + 1_000
    return (request_floor(Settings(), blocks) + rest,
            request_floor(Settings(), blocks, count=client.count_tokens) + rest)


def test_a_window_is_measured_exactly_where_it_enters_a_chat(store, counting_more):
    from memgpt_lite.engine.model import AnthropicClient

    estimated, exact = minimums(store, counting_more)
    assert exact > estimated  # the server counts more than we estimate
    client = AnthropicClient(max_retries=0)
    with pytest.raises(ConfigError, match=f"the minimum is {exact:,}"):
        chat_settings(store, "a", None, str(estimated), None, count=client.count_tokens)
    assert chat_settings(store, "a", None, str(exact), None,
                         count=client.count_tokens).context_window == exact


@pytest.mark.slow
def test_a_window_accepted_by_chat_is_accepted_by_the_next_chat(counting_more):
    """The issue's report: accepted by the estimate, every turn over budget, then refused
    on the next start. Now the first start measures exactly, and the next agrees."""
    import subprocess
    import sys

    with SQLiteStore(config.db_path()) as store:
        estimated, exact = minimums(store, counting_more)

    def chat(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                               *flags], input="one\ntwo\nthree\n", capture_output=True,
                              text=True, timeout=120)

    first = chat("--context-window", str(estimated))
    assert first.returncode == 2 and f"the minimum is {exact:,}" in first.stderr
    second = chat("--context-window", str(exact))
    assert second.returncode == 0, second.stderr
    third = chat()
    assert third.returncode == 0, third.stderr
    assert "too small" not in third.stderr and "warning" not in third.stderr


def test_agents_set_refuses_a_window_the_chat_would_refuse(store, capsys, monkeypatch):
    Agent.open(SQLiteStore(config.db_path()), "a",
               model_client=ScriptedModel([text_response("ok")])).close()
    assert cli.main(["agents", "set", "a", "context_window=5000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: context_window 5,000 is too small") and \
        "the minimum is" in err
    with SQLiteStore(config.db_path()) as s:
        assert s.get_agent("a").settings["context_window"] == 32_000  # nothing was stored


def test_agents_set_measures_exactly_when_a_server_is_there(counting_more, capsys):
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")])).close()
        estimated, exact = minimums(store, counting_more)
    assert cli.main(["agents", "set", "a", f"context_window={estimated}"]) == 2
    assert f"the minimum is {exact:,}" in capsys.readouterr().err
    assert cli.main(["agents", "set", "a", f"context_window={exact}"]) == 0


def test_an_import_with_a_window_too_small_is_refused(tmp_path, capsys):
    import json

    from memgpt_lite.engine.store import transfer

    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")])).close()
        doc = transfer.export_agent(store, "a")
    doc["agent"]["settings"]["context_window"] = 5_000
    path = tmp_path / "small.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["agents", "import", str(path), "--name", "b"]) == 2
    assert "the export's context_window 5,000 is too small" in capsys.readouterr().err
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("b") is None


def test_an_import_whose_window_leaves_no_room_says_so_not_that_it_is_damaged(tmp_path,
                                                                             capsys):
    """An older version exported agents with a window below max output tokens and the
    safety margin: their import said 'The agent export is damaged: agent.settings: …'."""
    import json

    from memgpt_lite.engine.store import transfer

    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")])).close()
        doc = transfer.export_agent(store, "a")
    doc["agent"]["settings"]["context_window"] = 100
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["agents", "import", str(path), "--name", "b"]) == 2
    err = capsys.readouterr().err
    assert "the export's context_window 100 is too small" in err and "damaged" not in err


def test_a_window_too_small_is_said_once_not_on_every_call(tmp_path):
    store = SQLiteStore(tmp_path / "once.db")
    tiny = Agent.open(store, "t", model_client=ScriptedModel([text_response("ok")] * 12),
                      settings=Settings(context_window=1_500, max_output_tokens=200,
                                        safety_margin=100))
    notices = [e.message for text in ("hi", "again", "and again") for e in tiny.step(text)
               if e.kind == "notice" and "over the budget" in e.message]
    assert len(notices) == 1


def test_a_stored_window_that_no_longer_fits_warns_once_and_the_chat_goes_on(store):
    """Core memory grew past what the window holds: it was accepted, so it is not refused."""
    agent = Agent.open(store, "grown", model_client=ScriptedModel([text_response("ok")]))
    minimum = request_floor(Settings(), agent.store.get_blocks(agent.id)) + 2_048 + 1_000
    store.update_settings(agent.id, {**agent.row.settings, "context_window": minimum})
    store.set_block(agent.id, "human", "word " * 900, source="user")
    agent.close()
    said = []
    settings = chat_settings(store, "grown", None, None, None, warn=said.append)
    assert settings.context_window == minimum
    assert len(said) == 1 and "is too small" in said[0] and "The chat goes on" in said[0]
    with pytest.raises(ConfigError):  # given again as a flag, it is refused
        chat_settings(store, "grown", None, str(minimum), None, warn=said.append)


@pytest.mark.slow
def test_a_window_near_the_minimum_sizes_the_first_turn_by_the_start_count():
    """A new agent at a window the start measured exactly: its first request is sized by that
    count, not by the uncalibrated guess (which saw it about a third over the budget, clipped
    the user's message and said the tools and system prompt alone were too big)."""
    import os
    import subprocess
    import sys

    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    with FakeAnthropicServer() as server, SQLiteStore(config.db_path()) as store:
        window = minimums(store, server)[1] + 300  # accepted only by the exact count
        server.context_window = window
        said = "I play the cello on Sundays, " + "and in the park by the river " * 20 + "ok."
        done = subprocess.run(
            [sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
             "--context-window", str(window)], input=said + "\nand again\n",
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "ANTHROPIC_BASE_URL": server.base_url,
                 "ANTHROPIC_API_KEY": "test"})
        first = server.requests[0]["messages"][-1]["content"][-1]["text"]
    assert done.returncode == 0, done.stderr
    assert "clipped" not in done.stderr and "over the budget" not in done.stderr, done.stderr
    assert first.endswith(said)  # the model read the whole message
    assert len(server.requests) == 2  # no request was refused for its length


@pytest.mark.slow
def test_a_slow_count_at_start_says_on_the_terminal_what_the_chat_waits_for(monkeypatch):
    """Near its minimum the window is measured with the API before the prompt shows: on a
    terminal a slow server shows why the start waits, and the prompt follows."""
    import os
    import sys
    import time

    pexpect = pytest.importorskip("pexpect")
    from memgpt_lite.lab import fake_server

    with fake_server.FakeAnthropicServer() as server, SQLiteStore(config.db_path()) as store:
        window = minimums(store, server)[1] + 300  # near the minimum: counted at start
        real = fake_server.count_tokens
        monkeypatch.setattr(fake_server, "count_tokens",
                            lambda *args: (time.sleep(1.5), real(*args))[1])
        child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--no-record",
                                               "--context-window", str(window)],
                              env={**os.environ, "ANTHROPIC_BASE_URL": server.base_url,
                                   "ANTHROPIC_API_KEY": "test", "TERM": "xterm-256color",
                                   "COLUMNS": "120", "LINES": "30"},
                              encoding="utf-8", timeout=60, dimensions=(30, 120))
        try:
            child.expect_exact("measuring the context window with the API")
            child.expect_exact("you›")
            child.sendline("/exit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert server.count_requests  # the wait shown was the API's count


@pytest.mark.slow
def test_a_new_agents_prompt_does_not_wait_for_the_count_its_first_turn_does(monkeypatch):
    """A new agent's least request is counted by the API (one free call) so that its first
    request fits a server counting more than the guess; asked before the prompt, it held
    every new agent's first prompt for the SDK's import (seconds on a cold start). On a
    terminal the prompt now shows while the count is under way, and the first turn waits
    for it: the first request is sent only after the count, sized by it."""
    import os
    import sys
    import threading

    pexpect = pytest.importorskip("pexpect")
    from memgpt_lite.lab import fake_server

    held, real, sent_before = threading.Event(), fake_server.count_tokens, []

    def count_held(*args):
        if not sent_before:  # the chat's count of the first request: held until released
            sent_before.append(len(server.requests))
            held.wait(60)
        return real(*args)

    monkeypatch.setattr(fake_server, "count_tokens", count_held)
    monkeypatch.setattr(fake_server, "CHARS_PER_TOKEN", 1.2)  # counts far more than the guess
    with fake_server.FakeAnthropicServer() as server:
        child = pexpect.spawn(sys.executable, ["-m", "memgpt_lite", "chat", "--no-record"],
                              env={**os.environ, "ANTHROPIC_BASE_URL": server.base_url,
                                   "ANTHROPIC_API_KEY": "test", "TERM": "xterm-256color",
                                   "COLUMNS": "120", "LINES": "30"},
                              encoding="utf-8", timeout=60, dimensions=(30, 120))
        try:
            child.expect_exact("you›")  # shown while the count is held
            assert not held.is_set()
            child.sendline("hello there")
            child.expect_exact("measuring this agent's first request with the API")
            held.set()
            child.expect_exact("Fake reply to: hello there")
            child.expect_exact("you›")
            child.sendline("/exit")
            child.expect(pexpect.EOF)
        finally:
            held.set()
            child.close(force=True)
    assert sent_before == [0]  # the turn's request was sent after the count, not before
    assert len(server.count_requests) == 1 and len(server.requests) == 1
    with SQLiteStore(config.db_path()) as store:  # the count was learned: the agent's state
        agent = store.get_agent("default")
        assert agent.state["counter"]["anchor_tokens"] > 0

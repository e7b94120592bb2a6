"""Settings are validated wherever they enter: chat flags and environment variables go
through the same checks as stored settings, a context window too small for the fixed part of
a request and one turn is refused with the minimum, max output tokens are bounded by the
model and the window, and notices name the setting that is the cause."""

from __future__ import annotations

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent, request_floor
from memgpt_lite.engine.config import ConfigError, Settings
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.records import Block
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli
from memgpt_lite.terminal.chat import chat_settings


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

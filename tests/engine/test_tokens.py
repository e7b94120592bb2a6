"""The token counter (engine/tokens.py): text weighed by what it costs (counting rule 2:
UTF-8 bytes), so a first CJK or emoji paste is not underestimated, against the fake server
through the real SDK; a calibration learned under the older rule is converted, not reused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import Block, ModelRequest, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tokens import (
    RULE,
    TokenCounter,
    cost_usd,
    counted_chars,
    price_of,
    text_size,
)
from memgpt_lite.engine.window import window_floor
from memgpt_lite.lab.fake_server import Counting, FakeAnthropicServer, count_tokens

MIXED = "记忆是我们的宝藏，我们要好好保存它。 The memory keeps what matters to us. 😀🎉 "
CJK = "记忆是我们的宝藏，我们要好好保存它。😀🎉"


def _paste(chars: int, unit: str = MIXED) -> str:
    return (unit * (chars // len(unit) + 1))[:chars]


def _first_turn(tmp_path, server, settings: Settings, text: str, calibrate: bool = False):
    """A new agent's first turn through the SDK: (the server's count of each chat request,
    the notices). `calibrate`: as the chat does at a window near its minimum, the window's
    check counted by the API first sizes the first request."""
    client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
    store = SQLiteStore(tmp_path / "tokens.db")
    agent = Agent.open(store, "a", model_client=client, settings=settings)
    if calibrate:
        counted = []
        blocks = [Block(k, v, n) for k, (v, n) in default_blocks(settings.block_limit).items()]
        window_floor(settings, blocks, None,
                     lambda r: counted.append((r, client.count_tokens(r))) or counted[-1][1])
        agent.calibrate(*counted[-1])
    events = list(agent.step(text))
    store.close()
    counts = [count_tokens(r, server.counting) for r in server.requests
              if r.get("max_tokens") == settings.max_output_tokens]
    return counts, [e.message for e in events if e.kind == "notice"]


def test_a_first_cjk_and_emoji_paste_fits_the_budget_by_a_per_byte_servers_count(tmp_path):
    """A byte-level tokenizer counts a CJK character as three bytes and an emoji as four:
    counted by characters, a new agent's first paste was estimated at under half the
    server's count, and the request went out well over the budget."""
    settings = Settings(context_window=20_000)
    with FakeAnthropicServer(counting=Counting(per_byte=True)) as server:
        counts, said = _first_turn(tmp_path, server, settings, _paste(200_000, CJK))
    assert counts and max(counts) <= settings.budget, (counts, settings.budget)
    assert not [s for s in said if "over the budget" in s], said


def test_near_the_minimum_a_cjk_paste_fits_a_server_counting_two_bytes_a_token(tmp_path):
    """The chat sizes a new agent's first request by the API's count when the window is near
    its minimum; that count, taken on English, then met a CJK paste estimated by characters
    (8,910 estimated, 10,625 counted, over the 8,952 budget)."""
    settings = Settings(context_window=12_000)
    with FakeAnthropicServer(counting=Counting(2, per_byte=True)) as server:
        counts, said = _first_turn(tmp_path, server, settings, _paste(40_000), calibrate=True)
    assert counts and max(counts) <= settings.budget, (counts, settings.budget)
    assert not [s for s in said if "over the budget" in s], said


def test_a_refused_cjk_paste_is_retried_near_the_budget_not_clipped_to_the_floor(tmp_path):
    """After the provider refused a CJK paste, the ratio it taught (learned on CJK) was
    applied to the English tools and system prompt too: the retry saw them as most of the
    budget and clipped the message far below what fits."""
    settings = Settings(context_window=32_000)
    with FakeAnthropicServer(counting=Counting(1.2, per_byte=True),
                             context_window=32_000) as server:
        counts, said = _first_turn(tmp_path, server, settings, _paste(60_000, CJK))
    assert counts[-1] <= settings.budget, (counts, settings.budget)
    assert counts[-1] >= 0.75 * settings.budget, (counts, settings.budget)
    assert not [s for s in said if "tools" in s], said


def test_the_rule_weighs_ascii_as_characters_and_other_text_by_its_utf8_bytes():
    for text in ("plain English, code() and {\"json\": 1}", "aGVsbG8gd29ybGQ=" * 8):
        assert text_size(text) == text_size(text, 1) == len(text)
    assert text_size("记忆") == 6 and text_size("😀") == 4 and text_size("café") == 5
    assert text_size("记忆", 1) == 2
    assert counted_chars(["记"]) == len('["记"]') + 2 and counted_chars(["记"], rule=1) == 5


def _request(text: str) -> ModelRequest:
    return ModelRequest("claude-sonnet-5-5", 100, [{"type": "text", "text": "You help."}],
                        [{"role": "user", "content": [{"type": "text", "text": text}]}])


def test_a_calibration_learned_by_characters_is_converted_at_the_next_request():
    """An agent stored by an older version learned its ratio and anchor in characters: read
    as bytes, a CJK queue would look a third of its size. Its next request carries them over
    by that request's size under both rules."""
    queue = _request("记忆是我们的宝藏。" * 400)
    true = count_tokens(queue.to_api(), Counting(per_byte=True))
    old = TokenCounter(rule=1)
    old.observe(queue, true)
    state = {k: v for k, v in old.to_state().items() if k != "rule"}  # as it was stored
    again = TokenCounter.from_state(state)
    assert again.rule == RULE and again.learned_under == 1
    later = _request("记忆是我们的宝藏。" * 410)
    estimate = again.estimate_request(later)
    assert again.learned_under is None and again.to_state()["rule"] == RULE
    truth = count_tokens(later.to_api(), Counting(per_byte=True))
    assert truth <= estimate <= 1.1 * truth, (estimate, truth)


def test_a_counter_state_keeps_its_rule_and_an_unknown_rule_starts_afresh():
    counter = TokenCounter()
    counter.observe(_request("hello " * 200), 400)
    kept = TokenCounter.from_state(counter.to_state())
    assert kept == counter and kept.learned_under is None
    for rule in (3, "2", True, None):
        assert TokenCounter.from_state({**counter.to_state(), "rule": rule}) == TokenCounter()


def test_a_replay_weighs_by_its_recordings_rule_and_keeps_a_calibration_of_that_rule():
    counter = TokenCounter.from_state({"chars_per_token": 3.0, "anchor_chars": 900,
                                       "anchor_tokens": 300})
    counter.use_rule(1)  # a recording made before rules were named
    assert (counter.rule, counter.learned_under, counter.anchor_chars) == (1, None, 900)
    assert counter.estimate_text("记忆") == TokenCounter(3.0, rule=1).estimate_chars(2)


@pytest.mark.slow
def test_the_chat_sends_a_first_cjk_paste_within_the_budget_of_a_byte_counting_server(
        tmp_path):
    """The report, as a user ran it: `python -m memgpt_lite.lab.fake_server --per-byte
    --chars-per-token 2`, then a mixed 记忆/English paste piped to `chat -p -` on a new
    agent at a small window; the server counted 10,625 tokens against a budget of 8,952."""
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "memgpt_lite.lab.fake_server", "--port",
                               str(port), "--per-byte", "--chars-per-token", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        assert b"Fake Anthropic API" in server.stdout.readline()  # type: ignore[union-attr]
        chat = subprocess.run(
            [sys.executable, "-m", "memgpt_lite", "chat", "--agent", "mei", "--context-window",
             "12000", "--json", "-p", "-"], input=_paste(40_000).encode(), capture_output=True,
            timeout=120, env=dict(env, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
                                  ANTHROPIC_API_KEY="test"))
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert chat.returncode == 0, chat.stderr
    usage = [e for e in map(json.loads, chat.stdout.splitlines()) if e["kind"] == "usage"]
    assert usage and all(e["context_tokens"] <= e["budget"] == 8_952 for e in usage), usage


def _estimates(tmp_path, rule: int, texts: list[str]) -> list[int]:
    with FakeAnthropicServer() as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        store = SQLiteStore(tmp_path / f"rule{rule}.db")
        agent = Agent.open(store, "a", model_client=client,
                           settings=Settings(context_window=16_000))
        agent.counter.use_rule(rule)
        estimates = [e.estimated_tokens for t in texts for e in agent.step(t)
                     if e.kind == "model_call" and e.purpose == "chat"]
        store.close()
    return estimates


def test_an_english_sessions_estimates_move_by_a_fraction_of_a_percent(tmp_path):
    """English is ASCII but for a dash or an accent here and there (and the prompts' own
    '—' and '·'): weighed by bytes, its estimates are those of characters within 0.5%
    (measured: 0.0–0.2% over these twenty turns)."""
    texts = [f"Turn {i}: I moved to Lisbon last spring; my sister's café — near the river — "
             f"opens at 8. " * (1 + i % 5) for i in range(20)]
    by_chars, by_bytes = _estimates(tmp_path, 1, texts), _estimates(tmp_path, 2, texts)
    assert len(by_chars) == len(by_bytes) >= 20
    moved = [(b - a) / a for a, b in zip(by_chars, by_bytes)]
    assert all(0 <= m <= 0.005 for m in moved), moved


def test_only_models_the_price_list_names_have_a_price():
    assert price_of("claude-sonnet-5-5") == (3.0, 15.0)
    assert price_of("claude-haiku-5-5-20261001") == (1.0, 5.0)  # a dated snapshot of one
    for unknown in ("claude-haiku-4-5", "claude-3-opus", "gpt-x", ""):
        assert price_of(unknown) is None
        assert cost_usd(unknown, Usage(1_000, 1_000)) == 0  # not guessed: shown as unknown
    assert cost_usd("claude-opus-5-5", Usage(1_000_000, 0)) == 5.0

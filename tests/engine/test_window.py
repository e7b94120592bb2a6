"""The least window (engine/window.py) against a server that counts more than we estimate:
an agent at the minimum the start measured works in it, turn after turn, through the SDK."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import Block
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.window import window_floor
from memgpt_lite.lab.fake_server import Counting, FakeAnthropicServer
from memgpt_lite.lab.scripted import ScriptedModel, text_response


def test_at_the_least_window_every_turn_fits_the_budget_by_the_servers_count(tmp_path):
    """The least window holds what the fit cannot take away: the summary it shortens no
    further and a message clipped as far as it goes. A server counting a token per 1.2
    characters used to see every long message's request over the budget, with a notice that
    the tools and system prompt alone were too big, at a window the start had accepted."""
    with FakeAnthropicServer(counting=Counting(1.2)) as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        base = Settings()
        blocks = [Block(k, v, n) for k, (v, n) in default_blocks(base.block_limit).items()]
        floor = window_floor(Settings(context_window=1), blocks, count=client.count_tokens)
        settings = Settings(context_window=floor + base.max_output_tokens + base.safety_margin)
        store = SQLiteStore(tmp_path / "least.db")
        summaries = ScriptedModel([text_response("- the user wrote notes " * 30)] * 30)
        agent = Agent.open(store, "a", model_client=client, summary_client=summaries,
                           settings=settings)
        said, used = [], []
        for i in range(6):
            for e in agent.step(f"note {i}: " + "a longer message about the garden " * 40):
                if e.kind == "notice":
                    said.append(e.message)
                elif e.kind == "usage":
                    used.append(e.usage.total_input)
    assert not [s for s in said if "over the budget" in s], said
    assert max(used) <= settings.budget, (used, settings.budget)

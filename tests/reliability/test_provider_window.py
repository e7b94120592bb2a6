"""A provider window smaller than our budget is learned: after the first "prompt is too long"
with a maximum below the context window, the window itself shrinks to it, persistently, with
one notice; the conversation goes on without failed turns."""

from __future__ import annotations

from rel_support import queue_problems

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tally import Tally
from memgpt_lite.lab.fake_server import FakeAnthropicServer, count_tokens

LINES = [f"Line {i}: " + f"today I repotted the {kind} by the window and noted how the soil "
         f"smelled after watering; tomorrow the {kind} goes outside for an hour. " * 4
         for i, kind in enumerate(["basil", "fern", "lemon tree", "cactus", "orchid"] * 6)][:26]


def too_long(server: FakeAnthropicServer) -> int:
    return sum("prompt is too long" in (e.get("error") or "") for e in server.log)


def test_a_smaller_provider_window_is_learned_once_and_kept(tmp_path):
    db = tmp_path / "w.db"
    with FakeAnthropicServer(context_window=6_000) as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        with SQLiteStore(db) as store:
            agent = Agent.open(store, "w", model_client=client, summary_client=client,
                               settings=Settings(context_window=32_000))
            events = [e for line in LINES for e in agent.step(line)]
            agent.close()
        tally = Tally().add_all(events)
        assert tally.turns == 26 and tally.completed_turns == 26, [
            e.message for e in events if e.kind == "error"]
        assert too_long(server) == 1
        notices = [e.message for e in events if e.kind == "notice" and "provider" in e.message]
        assert len(notices) == 1 and "6,000" in notices[0] and "--context-window" in notices[0]
        assert max(e.budget for e in events if e.kind == "usage") == 32_000 - 2_048 - 1_000
        assert [e.budget for e in events if e.kind == "usage"][-1] == 6_000 - 2_048 - 1_000

        with SQLiteStore(db) as store:  # a new process: still 6,000, still no overflow
            again = Agent.open(store, "w", model_client=client, summary_client=client,
                               settings=Settings(context_window=32_000))
            assert again.settings.budget == 6_000 - 2_048 - 1_000
            assert again.context_report().budget == again.settings.budget
            more = [e for line in LINES[:5] for e in again.step(line)]
            assert all(e.completed for e in more if e.kind == "turn_end")
            assert not [e for e in more if e.kind == "notice" and "provider" in e.message]
            assert queue_problems(store, again.id) == []
            row = store.get_agent("w")
            assert row.settings["context_window"] == 32_000  # the setting itself is the user's
            assert row.state["provider_window"] == {"model": "claude-sonnet-5-5", "tokens": 6_000}
        assert too_long(server) == 1


class CountingOutputToo(FakeAnthropicServer):
    """Refuses a request whose input and max_tokens together exceed the window, in the real
    API's words for the models that count both (before the prompt alone is too long)."""

    def _check(self, body, *, count_only):
        problem = super()._check(body, count_only=count_only)
        if problem is None and not count_only:
            total, most = count_tokens(body), body["max_tokens"]
            if total + most > self.context_window:
                problem = (f"input length and `max_tokens` exceed context limit: {total} + "
                           f"{most} > {self.context_window}, decrease input length or "
                           f"`max_tokens` and try again")
        return problem


def test_input_and_max_tokens_over_the_providers_window_is_recovered_and_learned(tmp_path):
    with CountingOutputToo(context_window=8_000) as server, SQLiteStore(tmp_path / "o.db") as store:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(store, "o", model_client=client, summary_client=client,
                           settings=Settings(context_window=32_000))
        events = [e for line in LINES for e in agent.step(line)]
        refused = sum("exceed context limit" in (e.get("error") or "") for e in server.log)
        tally = Tally().add_all(events)
        assert tally.completed_turns == 26, [e.message for e in events if e.kind == "error"]
        assert refused == 1  # learned from the first refusal, as from 'prompt is too long'
        notices = [e.message for e in events if e.kind == "notice" and "provider" in e.message]
        assert len(notices) == 1 and "8,000" in notices[0]
        assert agent.settings.budget == 8_000 - 2_048 - 1_000
        assert queue_problems(store, agent.id) == []

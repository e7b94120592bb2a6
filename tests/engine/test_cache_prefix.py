"""The prompt cache keeps the longest prefix it can: real agents over the real SDK and the
fake server, whose prompt cache is the API's rule (docs/memory.md, "what the prompt cache
keeps").

Each pair of consecutive chat requests is checked: the later one differs from the earlier
one first where the earlier one's tail (core memory and alerts, in its last user message)
was, unless the history itself had to change (an eviction, a summary, a new conversation),
and then first at that change; what was kept is read from the cache, up to the earlier
request's last breakpoint. Every request's breakpoints obey the API's rules, and nothing
after the last one changes but the tail and what came since.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import MAX_BREAKPOINTS
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.context import CACHEABLE
from memgpt_lite.engine.events import Event
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import ModelResponse
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import (
    FakeAnthropicServer,
    PromptBlock,
    error_event,
    first_difference,
    overloaded,
    prompt_blocks,
)
from memgpt_lite.lab.scripted import text_response, tool_response

CHAT = Settings().model
TAIL_STARTS = ("The core_memory section below", "<system_alert>")
SMALL = Settings(context_window=12_000, max_output_tokens=1_000, safety_margin=500)
NOTE = "Here is another note about my garden, the bees and the old pear tree by the wall. "


class Session:
    """One agent on one data dir, over the real SDK to a fake server. `restart` reopens it
    from the database alone, as a new process does. `usages` pairs with the chat requests
    the server saw that got an answer."""

    def __init__(self, server: FakeAnthropicServer, path, settings: Settings | None = None,
                 clock: Callable[[], datetime] | None = None):
        self.server, self.path, self.settings, self.clock = server, path, settings, clock
        self.usages: list = []
        self.events: list[Event] = []
        self.agent = self._open()

    def _open(self) -> Agent:
        client = AnthropicClient(base_url=self.server.base_url, api_key="test", max_retries=0)
        return Agent.open(SQLiteStore(self.path), "a", model_client=client,
                          summary_client=client, settings=self.settings, clock=self.clock)

    def say(self, text: str) -> list[Event]:
        return self._take(self.agent.step(text))

    def retry(self) -> list[Event]:
        return self._take(self.agent.retry())

    def _take(self, stream) -> list[Event]:
        events = list(stream)
        self.events += events
        self.usages += [e.usage for e in events if e.kind == "usage"]
        return events

    def restart(self) -> None:
        self.agent.close()
        self.agent.store.close()
        self.agent = self._open()

    def chat_requests(self) -> list[dict]:
        """The chat's requests, in order (not the summariser's: another model)."""
        return [body for body in self.server.requests if body.get("model") == CHAT]


def tail_of(blocks: list[PromptBlock]) -> int:
    """The index of the tail block (core memory, alerts) in the last (user) message."""
    last = blocks[-1].name.split(".")[0] + "."
    for i in range(len(blocks) - 1, -1, -1):
        if not blocks[i].name.startswith(last):
            break
        block = json.loads(blocks[i].text)[1]
        if block.get("type") == "text" and block["text"].startswith(TAIL_STARTS):
            return i
    raise AssertionError("no tail block in the last user message")


def assert_valid_layout(body: dict) -> None:
    """At most four breakpoints, each on a block that takes one, in order; the tail after
    the last of them, so a memory edit or an alert never breaks the cached prefix."""
    blocks = prompt_blocks(body)
    marked = [i for i, b in enumerate(blocks) if b.breakpoint]
    assert 1 <= len(marked) <= MAX_BREAKPOINTS, [blocks[i].name for i in marked]
    assert all(blocks[i].name.rsplit(":", 1)[-1] in CACHEABLE | {"tools", "system"}
               or not blocks[i].name.startswith("messages") for i in marked)
    assert marked[-1] < tail_of(blocks), (blocks[marked[-1]].name, blocks[tail_of(blocks)].name)
    # The longest prefix the next call can share: up to the message before the last one.
    before_last = [i for i, b in enumerate(blocks)
                   if b.name.startswith(f"messages[{len(body['messages']) - 2}]")]
    assert marked[-1] == (before_last[-1] if before_last else
                          max(i for i, b in enumerate(blocks) if b.name.startswith("system"))), \
        blocks[marked[-1]].name


def last_breakpoint_tokens(body: dict) -> int:
    return [b.tokens for b in prompt_blocks(body) if b.breakpoint][-1]


def assert_prefix_kept(earlier: dict, later: dict, usage) -> None:
    """`later` keeps all of `earlier` before its tail, and reads it from the cache up to
    `earlier`'s last breakpoint."""
    difference = first_difference(earlier, later)
    assert difference.index == tail_of(prompt_blocks(earlier)), difference
    assert usage.cache_read_input_tokens == last_breakpoint_tokens(earlier), usage


def assert_changed_at(earlier: dict, later: dict, usage, where: str) -> None:
    """`later` parts from `earlier` first at `where` (a block name's start), before
    `earlier`'s tail, and still reads the tools and the system prompt from the cache."""
    difference = first_difference(earlier, later)
    assert difference.block is not None and difference.block.startswith(where), difference
    assert difference.index < tail_of(prompt_blocks(earlier)), difference
    stable = next(b.tokens for b in prompt_blocks(later) if b.name == "system[0]")
    assert usage.cache_read_input_tokens >= stable, usage


def assert_all_kept(session: Session, changes: dict[int, str] | None = None) -> None:
    """Every request valid and keeping its predecessor's prefix; `changes`: the requests
    (numbered from 1) where the history had to change, and the block where it does."""
    requests, changes = session.chat_requests(), changes or {}
    assert len(requests) == len(session.usages) >= 2
    for body in requests:
        assert_valid_layout(body)
    for n in range(1, len(requests)):
        check = assert_prefix_kept if n + 1 not in changes else (
            lambda a, b, u, where=changes[n + 1]: assert_changed_at(a, b, u, where))
        check(requests[n - 1], requests[n], session.usages[n])


def listed_turns(body: dict) -> list[int]:
    last = body["messages"][-1]["content"]
    text = "\n".join(b.get("text", "") for b in last if b.get("type") == "text")
    return [int(n) for n in re.findall(r"^- (\d+) · ", text, re.M)] if "Memory pressure" in text \
        else []


def test_ordinary_turns_keep_the_whole_history_cached(tmp_path):
    with FakeAnthropicServer() as server:
        session = Session(server, tmp_path / "a.db")
        for text in ("Hello, I'm Ada.", "I keep bees.", "And a pear tree.", "Thanks!"):
            session.say(text)
    assert_all_kept(session)


def test_the_time_told_each_turn_changes_only_the_tail(tmp_path):
    """Turns a day apart are told other dates (after core memory, in the tail), and every
    earlier byte stays cached: the time is never stored with the history."""
    now = [datetime(2026, 3, 1, 22, 5, tzinfo=timezone(timedelta(hours=-5)))]
    with FakeAnthropicServer() as server:
        server.enqueue(tool_response([("conversation_search", {"query": "bees"})]))
        session = Session(server, tmp_path / "a.db", clock=lambda: now[0])
        for text in ("What did I say yesterday?", "I keep bees.", "And tomorrow?"):
            session.say(text)
            now[0] += timedelta(days=1)
    requests = session.chat_requests()
    told = [re.findall(r"<current_time>(\w+ [\d-]+)", json.dumps(r["messages"][-1]))
            for r in requests]
    assert told == [["Sunday 2026-03-01"]] * 2 + [["Monday 2026-03-02"], ["Tuesday 2026-03-03"]]
    assert_all_kept(session)


def test_tool_calls_and_core_memory_edits_change_only_the_tail(tmp_path):
    with FakeAnthropicServer() as server:
        for reply in (
                tool_response([("core_memory_append", {"label": "human", "content": "Ada."})]),
                text_response("Saved your name."),
                tool_response([("archival_insert", {"content": "Ada keeps bees."}),
                               ("conversation_search", {"query": "bees", "page": 1})]),
                text_response("Kept."),
                tool_response([("core_memory_replace", {"label": "human",
                                                        "old_content": "Ada.",
                                                        "new_content": "Ada Lovelace."})]),
                text_response("Updated.")):
            server.enqueue(reply)
        session = Session(server, tmp_path / "a.db")
        for text in ("My name is Ada.", "Remember that I keep bees.", "Full name: Lovelace."):
            session.say(text)
    assert len(session.chat_requests()) == 6
    last = prompt_blocks(session.chat_requests()[-1])
    assert "Ada Lovelace." in json.loads(last[tail_of(last)].text)[1]["text"]
    assert_all_kept(session)


def test_a_restart_between_turns_sends_the_same_bytes(tmp_path):
    with FakeAnthropicServer() as server:
        server.enqueue(tool_response([("core_memory_append", {"label": "human",
                                                              "content": "Ada."})]))
        session = Session(server, tmp_path / "a.db")
        session.say("My name is Ada.")
        session.say("I keep bees.")
        session.restart()
        session.say("Still there?")
        session.restart()
        session.say("And now?")
    assert_all_kept(session)


def test_retry_after_a_failed_call_resends_the_failed_request(tmp_path):
    with FakeAnthropicServer() as server:
        session = Session(server, tmp_path / "a.db")
        session.say("Hello, I'm Ada.")
        server.enqueue(overloaded())
        failed = session.say("I keep bees.")
        assert not failed[-1].completed
        session.retry()
        server.enqueue(error_event(after=3))  # billed, then broken
        session.say("And a pear tree.")
        session.retry()
    first, refused, resent, broken, again = session.chat_requests()
    assert first_difference(refused, resent).block is None  # byte for byte the same
    assert first_difference(broken, again).block is None
    # The refused call got no usage back; the broken one was billed (and wrote the cache).
    assert len(session.usages) == 4
    for earlier, later, usage in ((first, resent, session.usages[1]),
                                  (resent, broken, session.usages[2])):
        assert_prefix_kept(earlier, later, usage)
    assert session.usages[3].cache_read_input_tokens == last_breakpoint_tokens(broken)


def test_a_new_conversation_keeps_the_tools_and_system_prompt_cached(tmp_path):
    with FakeAnthropicServer() as server:
        session = Session(server, tmp_path / "a.db")
        session.say("Hello, I'm Ada.")
        session.say("I keep bees.")
        session.agent.start_conversation()
        session.say("A new task: the pear tree.")
        session.say("It needs pruning.")
    assert_all_kept(session, {3: "messages[0]"})


def test_an_alert_and_evict_turns_rewrite_only_from_the_summary_on(tmp_path):
    def policy(body: dict) -> ModelResponse:
        turns = listed_turns(body)
        if turns:
            return tool_response([("evict_turns", {"turn_ids": turns[:-1][:3],
                                                   "summary": "Ada wrote garden notes."})])
        return text_response("Noted.")

    with FakeAnthropicServer(default_reply=policy) as server:
        session = Session(server, tmp_path / "a.db", SMALL)
        while not any(e.kind == "eviction" for e in session.events):
            session.say(NOTE * 6)
            assert len(session.chat_requests()) < 40
        session.say("One more short note.")
    requests = session.chat_requests()
    alerted = next(n for n, body in enumerate(requests, 1) if listed_turns(body))
    # The alert rides in the tail: the alerted request keeps the prefix like any other;
    # the call after evict_turns carries the summary and the shorter queue.
    assert_all_kept(session, {alerted + 1: "system[1]"})


def test_a_forced_flush_rewrites_only_from_the_summary_on(tmp_path):
    with FakeAnthropicServer(default_reply=lambda body: text_response("Noted.")) as server:
        session = Session(server, tmp_path / "a.db", SMALL)
        while not any(e.kind == "eviction" for e in session.events):
            session.say(NOTE * 6)
            assert len(session.chat_requests()) < 40
        session.say("One more short note.")
    assert any(e.kind == "summary" for e in session.events)
    requests = session.chat_requests()
    flushed = next(n for n, body in enumerate(requests, 1) if len(body["system"]) > 1)
    assert_all_kept(session, {flushed: "system[1]"})

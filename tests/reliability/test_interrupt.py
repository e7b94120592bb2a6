"""Ctrl-C at every stage of a turn: the generator closed after each event, and
KeyboardInterrupt raised from inside the model stream, a tool, the summariser and the commit."""

from __future__ import annotations

import pytest
from rel_support import assert_trustworthy, queue_problems, small_settings

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


def tool_turn_script() -> list:
    return [tool_response([("core_memory_append", {"label": "human", "content": "Has a cat."}),
                           ("archival_insert", {"content": "The cat is called Miso."})],
                          text="Let me note that."),
            tool_response([("conversation_search", {"query": "cat"})]),
            text_response("Noted: your cat Miso.")]


def fresh(tmp_path, name="ctrlc", settings=None) -> tuple[SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "data" / "memgpt_lite.db")
    agent = Agent.open(store, name, model_client=ScriptedModel([text_response("first, safe")]),
                       settings=settings)
    assert list(agent.step("first message"))[-1].completed
    return store, agent


def reference_events() -> int:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        store, agent = fresh(Path(d))
        agent.model_client = ScriptedModel(tool_turn_script())
        n = len(list(agent.step("I have a cat called Miso")))
        agent.close()
        store.close()
    return n


@pytest.mark.parametrize("stop_after", range(reference_events()))
def test_generator_closed_after_each_event(tmp_path, stop_after):
    store, agent = fresh(tmp_path)
    agent.model_client = ScriptedModel(tool_turn_script())
    steps = agent.step("I have a cat called Miso")
    for i, event in enumerate(steps):
        if i == stop_after:
            break
    steps.close()  # what the chat does on Ctrl-C
    assert queue_problems(store, agent.id) == []
    turns = sorted({m.turn_id for m in store.context_messages(agent.id)})
    # only once the TurnEndEvent is out has the turn been committed
    assert turns == ([1, 2] if event.kind == "turn_end" else [1])
    assert_trustworthy(store.path, "ctrlc", typed=["I have a cat called Miso"],
                       answered=["first, safe"])


class Interrupting:
    """Wraps a client; raises KeyboardInterrupt at the n-th streamed item, counted over every
    call that shares `counter` (chat and summariser alike)."""

    def __init__(self, inner, counter: list[int], at: int):
        self.inner, self.counter, self.at = inner, counter, at

    def stream(self, request):
        for item in self.inner.stream(request):
            self.counter[0] += 1
            if self.counter[0] == self.at:
                raise KeyboardInterrupt
            yield item


def prefill(store: SQLiteStore, agent: Agent, turns: int, chars: int) -> None:
    """Committed history big enough that the next turn must flush (and call the summariser)."""
    for t in range(2, 2 + turns):
        store.add_messages(agent.id, [
            Message("user", [{"type": "text", "text": f"old turn {t} " + "x" * chars}], t),
            Message("assistant", [{"type": "text", "text": f"old reply {t}"}], t)])


def run_with_interrupt_at(tmp_path, at: int) -> tuple[bool, SQLiteStore, Agent]:
    store, agent = fresh(tmp_path, settings=small_settings())
    prefill(store, agent, 8, 2_400)
    counter = [0]
    agent.model_client = Interrupting(ScriptedModel(tool_turn_script()), counter, at)
    agent.pager.summariser.client = Interrupting(  # type: ignore[attr-defined]
        ScriptedModel([text_response("summary of old turns")] * 5), counter, at)
    try:
        events = list(agent.step("I have a cat called Miso"))
    except KeyboardInterrupt:
        return True, store, agent
    assert events[-1].completed, [e for e in events if e.kind == "error"]
    assert any(e.kind == "summary" for e in events), "no summariser stage was exercised"
    return False, store, agent


def test_keyboard_interrupt_inside_every_stream_item(tmp_path):
    at = 1
    while True:
        interrupted, store, agent = run_with_interrupt_at(tmp_path / str(at), at)
        assert queue_problems(store, agent.id) == []
        if not interrupted:
            break
        assert_trustworthy(store.path, "ctrlc", typed=["I have a cat called Miso"],
                           answered=["first, safe", "old reply 9"])
        agent.close()
        store.close()
        at += 1
    assert at > 10  # the sweep covered the summariser and every model call of the turn


@pytest.mark.parametrize("where", ["tool", "commit", "summary_store"])
def test_keyboard_interrupt_in_a_tool_or_the_commit(tmp_path, where):
    store, agent = fresh(tmp_path)
    agent.model_client = ScriptedModel(tool_turn_script())
    if where == "tool":
        def execute(name, args):
            raise KeyboardInterrupt
        agent.tools.execute = execute  # type: ignore[method-assign]
    elif where == "commit":
        real = store.add_messages

        def add_messages(agent_id, msgs):
            with store.transaction():
                real(agent_id, msgs[:1])  # joins this transaction: a partial write
                raise KeyboardInterrupt
        store.add_messages = add_messages  # type: ignore[method-assign]
    else:
        def set_block(*a, **k):
            raise KeyboardInterrupt
        store.set_block = set_block  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        list(agent.step("I have a cat called Miso"))
    if where == "commit":
        store.add_messages = real  # type: ignore[method-assign]
    assert [m.turn_id for m in store.context_messages(agent.id)] == [1, 1]
    assert_trustworthy(store.path, "ctrlc", typed=["I have a cat called Miso"],
                       answered=["first, safe"])


def test_retry_after_ctrl_c_gives_the_full_turn(tmp_path):
    store, agent = fresh(tmp_path)
    agent.model_client = ScriptedModel(tool_turn_script() + [text_response("Miso, yes.")])
    steps = agent.step("I have a cat called Miso")
    next(steps)
    steps.close()
    agent.model_client = ScriptedModel([text_response("Miso, yes.")], validate=True)
    assert agent.last_user_text() == "I have a cat called Miso"
    end = list(agent.step(agent.last_user_text()))[-1]
    assert end.completed and end.text == "Miso, yes."
    assert queue_problems(store, agent.id) == []


# --------------------------------------------------------------------------- one-shot


def _one_shot(server, *, interrupt: bool):
    import signal
    import subprocess
    import sys
    import time

    from rel_support import child_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "memgpt_lite", "chat", "--no-record", "-p", "hello there"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test"))
    if interrupt:
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:  # the turn is waiting
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@pytest.mark.slow
def test_a_one_shot_chat_interrupted_exits_130_without_a_retry_hint():
    from memgpt_lite.lab.fake_server import FakeAnthropicServer, hang

    with FakeAnthropicServer() as server:
        server.enqueue(hang(seconds=30))
        code, out, err = _one_shot(server, interrupt=True)
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert "/retry" not in err  # there is no next prompt to type it at


@pytest.mark.slow
def test_a_one_shot_chat_that_fails_gives_no_retry_hint():
    from memgpt_lite.lab.fake_server import FakeAnthropicServer, overloaded

    with FakeAnthropicServer() as server:
        server.enqueue(overloaded(), times=3)
        code, out, err = _one_shot(server, interrupt=False)
    assert code == 1, err
    assert "error: The API is overloaded (529)" in err
    assert "/retry" not in err and "Your message is kept" not in err

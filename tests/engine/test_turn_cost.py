"""A turn's database work does not grow with the agent's history: what the engine reads and
writes per model call is the queue, core memory and the conversation's own row, never a
count over every stored message. Counted in SQLite virtual-machine steps (a progress
handler), not in time, so the check is exact on a loaded machine: the same turn on a
history ten times longer may cost a little more (B-tree depth), not ten times more."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

STEP = 10  # VM instructions per progress-handler call


def grow(store, agent_id: int, turns: int, start: int) -> None:
    """`turns` old turns (a question and its answer each), out of the context queue."""
    msgs = []
    for t in range(start, start + turns):
        msgs.append(Message("user", [{"type": "text", "text": f"note {t} about the garden"}],
                            t, in_context=False))
        msgs.append(Message("assistant", [{"type": "text", "text": f"noted {t}"}], t,
                            in_context=False))
    store.add_messages(agent_id, msgs)


def vm_steps(store, agent: Agent) -> int:
    """VM steps of one turn: a core-memory edit, then a text reply (two model calls)."""
    agent.model_client = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human", "content": "likes tea"})]),
        text_response("Noted.")], validate=True)
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    connection = store.db.connection
    connection.set_progress_handler(tick, STEP)
    try:
        events = list(agent.step("I like tea."))
    finally:
        connection.set_progress_handler(None, STEP)
    assert events[-1].completed
    return count[0]


def test_a_turn_costs_the_same_on_a_history_ten_times_longer(tmp_path):
    with open_store(str(tmp_path / "memgpt_lite.db")) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([]),
                           summary_client=ScriptedModel([]), lock_wait=None)
        try:
            grow(store, agent.id, 1_000, 1)
            vm_steps(store, agent)  # warm-up: the first turn calibrates the counter
            short = vm_steps(store, agent)
            grow(store, agent.id, 9_000, 10_000)
            long = vm_steps(store, agent)
        finally:
            agent.close()
    assert long < 1.5 * short, (short, long)

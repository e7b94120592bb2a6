"""An export is one state of the agent: another process writing to it meanwhile (a chat, an
MCP server) is either wholly in the export or not at all."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store import transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response


def _text(role: str, text: str, conversation: int) -> Message:
    return Message(role, [{"type": "text", "text": text}], 2, conversation_id=conversation)


def test_a_conversation_started_by_another_process_mid_export_does_not_tear_it(
        tmp_path, monkeypatch):
    db = tmp_path / "memgpt_lite.db"
    store, other = SQLiteStore(db), SQLiteStore(db)  # two connections, as two processes
    agent = Agent.open(store, "ada", model_client=ScriptedModel([text_response("Hello.")]))
    list(agent.step("hi"))
    agent_id = store.get_agent("ada").id
    read_conversations = store.conversations

    def conversations_then_a_new_one_elsewhere(aid: int):
        found = read_conversations(aid)
        # Another process starts conversation 2 and stores its first turn, right after the
        # export has read the conversations and before it reads the messages.
        new = other.start_conversation(aid)
        other.add_messages(aid, [_text("user", "new topic", new.id),
                                 _text("assistant", "Sure.", new.id)])
        return found

    monkeypatch.setattr(store, "conversations", conversations_then_a_new_one_elsewhere)
    doc = transfer.export_agent(store, "ada")
    assert [c["id"] for c in doc["conversations"]] == [1]
    assert [m["conversation"] for m in doc["messages"]] == [1, 1]
    with SQLiteStore(tmp_path / "copy.db") as fresh:
        row = transfer.import_agent(fresh, doc, name="copy")
        assert len(fresh.all_messages(row.id)) == 2
    assert len(store.all_messages(agent_id)) == 4  # the other process's turn is kept
    agent.close()
    other.close()
    store.close()

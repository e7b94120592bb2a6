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


def test_an_export_from_before_conversations_keeps_its_pager_state(tmp_path):
    """An export made before conversations (0c22f1e and older) holds the pager's alert
    state in the agent's state; the import left it there, where nothing reads it, so the
    imported agent lost the alert it had given (migration 008 moves it, the import did not)."""
    with SQLiteStore(tmp_path / "a.db") as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([text_response("Hello.")]))
        list(agent.step("hi"))
        doc = transfer.export_agent(store, "ada")
    pager = {"alert_tokens": 5123, "alert_turn": 1}
    doc.pop("conversations")  # the shape of an export from before conversations
    for m in doc["messages"]:
        m.pop("conversation", None)
    doc["agent"]["state"] = {**doc["agent"]["state"], "pager": pager}
    with SQLiteStore(tmp_path / "b.db") as fresh:
        row = transfer.import_agent(fresh, doc, name="old")
        assert fresh.conversation_state(row.id) == {"pager": pager}
        assert "pager" not in fresh.get_agent_by_id(row.id).state

"""Agent export and import: one versioned JSON document holding everything of an agent
(settings, summary, core memory and its history, every message, every passage and the
passages' history).

A block in user scope is exported with `"scope": "user"`: an import joins the data dir's
user-scope block of that label (created from the exported value when there is none), as
`agents create --share` would. Blocks in project scope belong to their project, not to the
agent: they are not exported (the agent's history of its writes to them is). The agent's
conversations travel with it (`conversations`: id, times, title, summary, pager state), each
message naming its own. Passage ids are the data dir's, so an import gives passages new ids
and points their history at them. Exports without these fields (older ones) import as
before: one conversation holding the summary and every message."""

from __future__ import annotations


from memgpt_lite.engine.records import Message, now_iso
from memgpt_lite.engine.store import checks
from memgpt_lite.engine.store.base import AgentRow, IntegrityProblem, Store, StoreError

EXPORT_FORMAT = "memgpt-lite-agent"
EXPORT_VERSION = 1


def export_agent(store: Store, name: str) -> dict:
    # One read snapshot: a chat or an MCP server writing meanwhile (a new conversation, a
    # turn, a deleted passage) is wholly in the export or not at all, never half (messages
    # naming a conversation the export lacks, passages zipped with another's turn).
    with store.read_snapshot():
        return _export(store, name)


def _export(store: Store, name: str) -> dict:
    agent = store.get_agent(name)
    if agent is None:
        raise StoreError(f"There is no agent named {name!r}.")
    return {
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "exported_at": now_iso(),
        "agent": {"name": agent.name, "model": agent.model, "settings": agent.settings,
                  "summary": agent.summary, "created_at": agent.created_at,
                  "last_used_at": agent.last_used_at, "state": agent.state},
        "blocks": [{"label": b.label, "value": b.value, "limit": b.limit, "scope": b.scope}
                   for b in store.get_blocks(agent.id) if b.scope != "project"],
        "block_history": store.block_history(agent.id),
        "conversations": [{"id": c.id, "started_at": c.started_at,
                           "last_used_at": c.last_used_at, "title": c.title,
                           "summary": c.summary, "state": c.state}
                          for c in store.conversations(agent.id)],
        "messages": [{"turn_id": m.turn_id, "role": m.role, "content": m.content,
                      "context_content": m.context_content, "created_at": m.created_at,
                      "in_context": m.in_context, "position": position, "status": m.status,
                      "conversation": m.conversation_id}
                     for m, position in zip(store.all_messages(agent.id),
                                            store.message_positions(agent.id))],
        "passages": [{"id": p.id, "text": p.text, "tags": p.tags, "created_at": p.created_at,
                      "turn_id": turn}
                     for p, turn in zip(store.list_passages(agent.id, limit=None),
                                        store.passage_turns(agent.id))],
        "passage_history": [{"passage_id": v.passage_id, "text": v.text, "tags": v.tags,
                             "created_at": v.created_at, "superseded_at": v.superseded_at,
                             "change": v.change, "reason": v.reason, "turn_id": v.turn_id}
                            for v in store.passage_versions(agent.id)],
    }


def import_agent(store: Store, doc: dict, name: str | None = None) -> AgentRow:
    """Create an agent from an export. Every field is checked first (StoreError naming the
    first bad one); nothing is written unless all of it is usable."""
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise StoreError("The file is not a memgpt-lite agent export.")
    if doc.get("version") != EXPORT_VERSION:
        raise StoreError(f"The export has version {doc.get('version')!r}; this memgpt-lite "
                         f"reads version {EXPORT_VERSION}.")
    found = checks.export_problem(doc)
    messages = [] if found else _messages(doc["messages"])
    found = found or checks.queue_problem(messages)
    if found:
        raise StoreError(f"The agent export is damaged: {found}; nothing was imported.")
    try:
        return _import(store, doc, name, messages)
    except IntegrityProblem as exc:  # e.g. a block label twice
        raise StoreError(f"The agent export is damaged ({exc.detail}); nothing was imported.") \
            from None


def _messages(rows: list[dict]) -> list[Message]:
    """The export's messages, without the fields the engine sets on requests itself."""
    clean = checks.without_engine_fields
    return [Message(m["role"], clean(m["content"]), int(m["turn_id"]), None, m["created_at"],
                    bool(m["in_context"]), clean(m.get("context_content")),
                    m.get("status") or "", int(m.get("conversation") or 1))
            for m in rows]


def _import(store: Store, doc: dict, name: str | None, messages: list[Message]) -> AgentRow:
    meta = doc["agent"]
    with store.transaction():
        agent = store.create_agent(name or meta["name"], dict(meta["settings"]), {})
        conversations = doc.get("conversations") or []
        state = dict(meta.get("state") or {})
        # An export from before conversations keeps the pager's alert state with the agent;
        # its one conversation holds it now, as migration 008 moved it (else the next turn
        # would repeat a pressure alert the model was already given).
        pager = None if conversations else state.pop("pager", None)
        store.restore_agent(agent.id, summary=meta.get("summary", ""),
                            created_at=meta["created_at"], last_used_at=meta.get("last_used_at"),
                            state=state)
        if conversations:
            store.restore_conversations(agent.id, conversations)
        elif pager is not None:
            store.set_conversation_state(agent.id, {"pager": pager})
        store.restore_blocks(agent.id, [(b["label"], b["value"], int(b["limit"]))
                                        for b in doc["blocks"] if b.get("scope") != "project"],
                             [(h["label"], h["old_value"], h["new_value"], h["source"],
                               h["created_at"], h.get("turn_id"), h.get("scope") or "agent",
                               h.get("project"))
                              for h in doc.get("block_history", [])],
                             shared=[b["label"] for b in doc["blocks"]
                                     if b.get("scope") == "user"])
        store.add_messages(agent.id, messages)
        # Positions as exported (a forget leaves gaps): search ranks neighbours by them.
        store.set_message_positions(agent.id, {
            msg.id: int(m["position"]) for msg, m in zip(messages, doc["messages"])
            if "position" in m})
        new_ids = {p.get("id", -i): store.add_passage(agent.id, p["text"], list(p["tags"]),
                                                      p["created_at"], turn_id=p.get("turn_id"))
                   for i, p in enumerate(doc["passages"], 1)}
        store.restore_passage_versions(agent.id, doc.get("passage_history") or [], new_ids)
    return store.get_agent_by_id(agent.id)

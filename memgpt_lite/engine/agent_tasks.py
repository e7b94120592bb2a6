"""What an agent works on: which of its conversations (tasks), which project, and who
approves its memory writes. A mixin of `Agent` (agent.py), kept apart so the turn loop reads
on its own.

An agent works in one of its conversations at a time (`conversation_id`; `Agent.open` picks
the most recent, a new one, or the one asked for): the queue, the summary and the pager's
state are that conversation's, while core memory (with the blocks of the project it works
in, `project`), archival memory, recall and what the token counter learned are the agent's.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from memgpt_lite.engine.attachments import is_attachment
from memgpt_lite.engine.confirm import Confirm
from memgpt_lite.engine.memory import project_placeholder
from memgpt_lite.engine.records import Conversation, utc_iso

if TYPE_CHECKING:
    from memgpt_lite.engine.config import Settings
    from memgpt_lite.engine.memory import MemoryTools
    from memgpt_lite.engine.paging import Pager
    from memgpt_lite.engine.store import Store


class AgentTasks:
    """The conversation, project and confirmation part of `Agent`."""

    store: Store
    id: int
    settings: Settings
    pager: Pager
    tools: MemoryTools
    project: str | None
    in_key: str | bool | None

    if TYPE_CHECKING:
        def now(self) -> datetime: ...  # Agent's

    @property
    def conversation_id(self) -> int:
        return self.store.current_conversation(self.id)

    def conversation(self) -> Conversation:
        """The conversation the agent works in."""
        found = self.store.conversation(self.id)
        if found is None:  # an agent written before it had one: its first, as migrated
            return Conversation(self.store.current_conversation(self.id), "", "")
        return found

    def start_conversation(self) -> Conversation:
        """Work in a new conversation from now on: an empty queue, no summary, no alert;
        core, archival memory and recall stay. The current one is kept when it is still new
        (no message, no title, no summary: one whose turns were all popped keeps the summary
        of those flushed before, and is not new)."""
        now = self.conversation()
        if now.started_at and not now.turns and not now.title and not now.summary:
            return now
        return self._switched(self.store.start_conversation(self.id, utc_iso(self.now())))

    def resume_conversation(self, conversation_id: int) -> Conversation:
        """Work in the agent's conversation `conversation_id` (StoreError: there is none)."""
        return self._switched(self.store.use_conversation(self.id, conversation_id))

    def _switched(self, conversation: Conversation) -> Conversation:
        self.pager.restore(conversation.state.get("pager"))
        self.in_key = False  # a key piped over several messages belongs to one conversation
        return conversation

    def use_project(self, project: str | None) -> None:
        """See the blocks of `project` (a root directory; None: none) from now on."""
        self.store.use_project(self.id, project, (project_placeholder(),
                                                  self.settings.block_limit))
        self.project = self.store.project_of(self.id)  # as the store names it (path_text)

    @property
    def confirm(self) -> Confirm | None:
        """Asks the user about a memory write when confirm_memory is on (see confirm.py):
        True applies it, False declines it, None says no one can be asked."""
        return self.tools.gate.confirm

    @confirm.setter
    def confirm(self, callback: Confirm | None) -> None:
        self.tools.gate.confirm = callback

    def last_user_text(self) -> str | None:
        """The user's own words (not the files attached to them) in the last message they
        sent in this conversation."""
        turn, here = self.store.max_turn_id(self.id, in_conversation=True), self.conversation_id
        while turn > 0:  # turn ids are the agent's: other conversations' are skipped
            for m in self.store.turn_messages(self.id, turn):
                if m.role == "user" and m.conversation_id == here:
                    return "".join(b.get("text", "") for b in m.content
                                   if b.get("type") == "text" and not is_attachment(b))
            turn -= 1
        return None

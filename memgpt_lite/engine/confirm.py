"""Edits the user approves: with the `confirm_memory` setting on, every core and archival
memory write is put to the user before it is applied.

The engine never reads the terminal: whoever drives the agent gives it a callback
(`Agent.confirm`) that shows the write and answers True (apply), False (decline) or None (no
one can be asked: piped input, `-p`, `--json`). A write that is not approved is not applied,
and the model gets a tool result saying why. Each answer is an event (`MemoryConfirmEvent`),
so a recording holds it and a replay answers the same (see replay.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from memgpt_lite.engine.events import Event, MemoryConfirmEvent, NoticeEvent

Confirm = Callable[[MemoryConfirmEvent], "bool | None"]
ANSWERS = {True: "yes", False: "no", None: "unavailable"}
DECLINED = ("The user declined this memory write; it was not applied. Do not make it again "
            "unless they ask.")
UNAVAILABLE = ("Not applied: the user approves each memory write, and there is no terminal to "
               "ask them now (piped input, -p or --json). Tell the user what you would save "
               "instead.")
NO_TERMINAL = ("confirm_memory is on and there is no terminal to ask: memory writes are "
               "declined (chat on a terminal to approve them, or turn it off with "
               "`memgpt-lite agents set NAME confirm_memory=off`).")


class ConfirmGate:
    """Whether a memory write may go ahead. Off unless `on`; `confirm` is the callback (None:
    no one to ask). The notice that no one could be asked is given once per agent."""

    def __init__(self) -> None:
        self.on = False
        self.confirm: Confirm | None = None
        self.told = False

    def check(self, tool: str, target: str, old: str | None, new: str | None,
              scope: str = "", reason: str = "") -> tuple[str | None, list[Event]]:
        """(None, events) when the write may be applied; else (the tool result's text for
        the model, events). The events (the answer, and the notice) go before the result."""
        if not self.on:
            return None, []
        pending = MemoryConfirmEvent(tool, target, old, new, scope, reason)
        said = None if self.confirm is None else self.confirm(pending)
        answer = ANSWERS[None if said is None else bool(said)]
        events: list[Event] = [replace(pending, answer=answer)]
        if answer == "yes":
            return None, events
        if answer == "no":
            return DECLINED, events
        if not self.told:
            self.told = True
            events.append(NoticeEvent(NO_TERMINAL, "warning"))
        return UNAVAILABLE, events

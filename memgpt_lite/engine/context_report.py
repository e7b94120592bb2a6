"""`/context`'s numbers: the next request's size, its token ledger per section, and the
queue's turns, each turn sized in the ledger's own terms so that they add up to its queue
row."""

from __future__ import annotations

from dataclasses import dataclass, field

from memgpt_lite.engine.context import BuiltContext, ContextInputs, message_tokens, shares
from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.engine.turns import first_words, group_turns


@dataclass
class TurnInfo:
    id: int
    created_at: str | None
    tokens: int
    first_words: str


@dataclass
class ContextReport:
    ledger: dict[str, int]
    used_tokens: int
    budget: int
    turns: list[TurnInfo] = field(default_factory=list)
    summary: str = ""


def context_report(built: BuiltContext, inputs: ContextInputs, counter: TokenCounter,
                   budget: int) -> ContextReport:
    """The report of the request `built` from `inputs` (with no current turn)."""
    ledger = built.ledger
    turns = group_turns(inputs.queue)
    sizes = shares(ledger.get("queue", 0), [message_tokens(counter, t.messages) for t in turns])
    infos = [TurnInfo(t.id, t.created_at, size, first_words(t)) for t, size in zip(turns, sizes)]
    return ContextReport(ledger, built.estimated_tokens, budget, infos, inputs.summary)

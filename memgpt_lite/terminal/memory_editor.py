"""`/memory`: every core memory block in $EDITOR as one document, applied as ordinary edits.

The document is one section per block under a heading line

    === human · limit 5,000 · 36 chars · scope agent ===

and a new heading (`=== project · limit 2,000 ===`, the limit optional) adds a block. The
changes go through the same store path as the model's tools and `/core edit` (each a new
version in the block's history, its source "/memory"), all of them in one transaction after
every block was checked. A document that cannot be read, or a block over its limit, is one
sentence; the edited text is never lost: the editor reopens on it, and when given up the
next `/memory` starts from it again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memgpt_lite.engine.store.base import BlockChanged
from memgpt_lite.terminal.user_input import EditorError

HEADING = re.compile(r"^=== (?P<label>\S+)(?P<info>(?: · [^=]*?)?) ===[ \t]*$")
_LIMIT = re.compile(r"limit ([\d,_]+)")
INTRO = """\
# Core memory of agent {agent}: edit the text under each heading, then save and quit.
# A new heading adds a block:  === LABEL · limit 2,000 ===  (the limit is optional).
# Removing a heading leaves its block as it is; an empty section empties the block.
# Lines starting with # above the first heading are ignored. Quit without saving to cancel.
"""


class DocumentError(ValueError):
    """The document cannot be applied; the message is one sentence naming the line."""


@dataclass
class Section:
    label: str
    value: str
    limit: int | None  # given in a new block's heading (None: the default)
    line: int


def render_document(agent_name: str, blocks: list[Any], shared_by: Any = None,
                    problem: str | None = None) -> str:
    """The document for `blocks` (with `problem` said at the top when reopening)."""
    head = INTRO.format(agent=repr(agent_name))
    if problem:
        head = f"# NOT SAVED: {problem}\n" + head
    parts = [head]
    for b in blocks:
        scope = ("user" + (f", shared by {', '.join(shared_by(b.label))}" if shared_by else "")
                 if b.scope == "user" else f"project {b.project}" if b.scope == "project"
                 else "agent")
        parts.append(f"\n=== {b.label} · limit {b.limit:,} · {b.used:,} chars · scope {scope} "
                     f"===\n{b.value}\n")
    return "".join(parts)


def parse_document(text: str) -> list[Section]:
    """The sections of an edited document (DocumentError for one that cannot be read)."""
    sections: list[Section] = []
    body: list[str] = []
    for number, line in enumerate(text.split("\n"), 1):
        found = HEADING.match(line)
        if found is None and line.startswith("==="):
            raise DocumentError(f"line {number} ({line[:40]!r}) is not a block heading; write "
                                "it as === LABEL · limit 2,000 ===.")
        if found is None:
            if sections:
                body.append(line)
            elif line.strip() and not line.startswith("#"):
                raise DocumentError(f"line {number} holds text before the first block heading; "
                                    "put it under a block (=== LABEL ===).")
            continue
        if sections:
            sections[-1].value = _value(body)
        body = []
        sections.append(_section(found, number, sections))
    if sections:
        sections[-1].value = _value(body)
    return sections


def _section(found: re.Match[str], number: int, before: list[Section]) -> Section:
    label = found.group("label")
    if any(s.label == label for s in before):
        raise DocumentError(f"line {number}: block {label!r} appears twice; keep one section "
                            "of it.")
    limit = _LIMIT.search(found.group("info"))
    if limit is None:
        return Section(label, "", None, number)
    digits = limit.group(1).replace(",", "").replace("_", "")
    if not digits:  # `limit ,`: int("") said "invalid literal for int() with base 10"
        raise DocumentError(f"line {number}: the limit {limit.group(1)!r} is not a number; "
                            "write it as limit 2,000.")
    return Section(label, "", int(digits), number)


def _value(lines: list[str]) -> str:
    return "\n".join(lines).strip("\n")


@dataclass
class Plan:
    """What applying the document does: (label, new value, old value) of changed blocks,
    (label, value, limit) of new ones, the labels left out of the document."""

    changed: list[tuple[str, str, str]]
    added: list[tuple[str, str, int]]
    left: list[str]


def plan_changes(sections: list[Section], blocks: list[Any], default_limit: int) -> Plan:
    """Check every section against its block (DocumentError naming the first problem)."""
    from memgpt_lite.engine.agent import BLOCK_LABEL, LABEL_RULE

    current = {b.label: b for b in blocks}
    plan = Plan([], [], [label for label in current if label not in
                         {s.label for s in sections}])
    for s in sections:
        block = current.get(s.label)
        limit = block.limit if block is not None else (
            default_limit if s.limit is None else s.limit)
        if block is None and not BLOCK_LABEL.fullmatch(s.label):
            raise DocumentError(f"line {s.line}: {s.label!r} is not a block label "
                                f"({LABEL_RULE}).")
        if block is None and not 1 <= limit <= 100_000:
            raise DocumentError(f"line {s.line}: a block's limit must be between 1 and "
                                f"100,000 chars, got {limit:,}.")
        if len(s.value) > limit:
            raise DocumentError(f"{s.label} is {len(s.value):,} chars, {len(s.value) - limit:,} "
                                f"over its limit of {limit:,}; shorten it (archival memory "
                                "holds longer text).")
        if block is None:
            plan.added.append((s.label, s.value, limit))
        elif s.value != block.value.strip("\n"):
            plan.changed.append((s.label, s.value, block.value))
    return plan


def apply_plan(agent: Any, plan: Plan) -> list[Any]:
    """Every change in one transaction (BlockChanged: a shared block another agent changed
    meanwhile; nothing is written then). Returns the blocks as saved."""
    saved = []
    with agent.store.transaction():
        for label, value, old in plan.changed:
            saved.append(agent.edit_block(label, value, expected=old, source="/memory"))
        for label, value, limit in plan.added:
            saved.append(agent.add_block(label, value, limit, source="/memory"))
    return saved


def edit_memory(session: Any) -> None:
    """The /memory command: edit, check, reopen on a problem, apply, say what changed."""
    agent = session.agent
    text = session.memory_draft or render_document(agent.name, agent.blocks(),
                                                   agent.store.shared_block_agents)
    if session.memory_draft:
        session.say("/memory: starting from your edited text of last time")
    retrying = bool(session.memory_draft)
    while True:
        try:
            edited = session.edit(text)
        except EditorError as exc:
            session.say(f"not edited: {exc}")
            return
        # Given up: the text waits for next time. The NOT SAVED line is a comment, so saving
        # the same document without it is saving it unchanged, not a new edit to try.
        if retrying and (edited is None or _without_problem(edited) == _without_problem(text)):
            session.say("/memory starts again from your edited text.")
            return
        if edited is None or edited == text:
            session.say("core memory: unchanged" if edited is not None else
                        "core memory: not saved (the edit was cancelled)")
            return
        problem = _apply(session, edited)
        if problem is None:
            session.memory_draft = None
            return
        session.memory_draft = _without_problem(edited)
        session.say(f"not saved: {problem}")
        session.say("reopening the editor (save it unchanged to give up)")
        text, retrying = render_problem(edited, problem), True


def _apply(session: Any, edited: str) -> str | None:
    """Apply the edited document; the problem (one sentence) when it could not be."""
    agent = session.agent
    try:
        plan = plan_changes(parse_document(edited), agent.blocks(), agent.settings.block_limit)
        if not plan.changed and not plan.added:
            session.say("core memory: unchanged")
            return None
        saved = apply_plan(agent, plan)
    except BlockChanged as exc:  # before ValueError: it is one
        return f"{exc} Nothing was saved."
    except (DocumentError, ValueError) as exc:
        return str(exc)
    session.end_recording()
    for block in saved:
        was = "added" if block.label in {a[0] for a in plan.added} else "saved"
        session.say(f"{block.label}: {was} · {block.used:,}/{block.limit:,} chars")
    return None


def render_problem(edited: str, problem: str) -> str:
    """The edited text with the problem said on its first line (a comment)."""
    return f"# NOT SAVED: {problem}\n" + _without_problem(edited)


def _without_problem(edited: str) -> str:
    lines = edited.split("\n")
    while lines and lines[0].startswith("# NOT SAVED: "):
        lines.pop(0)
    return "\n".join(lines)

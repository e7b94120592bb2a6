"""Conversations, projects and the edits the user approves, on the command line and in the
chat (docs/tasks.md): `memgpt-lite conversations`, `core` (with the project's block, a block's
versions, a version brought back), how `agents share` keeps both values, the chat's /new,
/resume, /conversations and /title, and the y/N question about a memory write.

The engine decides nothing here that it does not decide for every caller: it keeps the
conversations, the project blocks and the versions; this module asks the user and prints.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from memgpt_lite.terminal import agent_checks, render
from memgpt_lite.terminal.exit_codes import EXIT_OK, EXIT_USAGE, UserError

# --------------------------------------------------------------------------- project


def see_project(store: Any, row: Any, given: str | None) -> str:
    """Show the agent the blocks of the project `given` names (else $MEMGPT_LITE_PROJECT,
    else the working directory's): its root, as engine/project.py finds it."""
    from memgpt_lite.engine.config import ConfigError, Settings
    from memgpt_lite.engine.memory import project_placeholder
    from memgpt_lite.engine.project import gone_project, project_root

    try:
        root = str(project_root(given))
    except ConfigError:  # a folder since moved away: its block is still found by its old path
        root = gone_project(given, store.project_roots()) or ""
        if not root:
            raise
    limit = Settings.from_dict(row.settings, room=False).block_limit
    store.use_project(row.id, root, (project_placeholder(), limit))
    return root


# --------------------------------------------------------------------------- core


def cmd_core(args: argparse.Namespace) -> int:
    """`core` (the blocks, the project's among them), `core --history LABEL`, `core
    --restore LABEL VERSION`."""
    from memgpt_lite.engine.store import open_store

    with open_store() as store:
        row = agent_checks.require_agent(store, args.agent)
        agent_checks.settle(store, row)
        see_project(store, row, args.project)
        console = render.make_console()
        if args.history is not None:
            print_versions(console, args.history, _versions(store, row, args.history))
        elif args.restore is not None:
            with store.agent_lock(row.name):  # not under a running chat's turn
                line = restore_version(store, row, args.restore[0], args.restore[1])
            print(render.visible(line))
        else:
            render.print_core_blocks(console, store.get_blocks(row.id),
                                     store.shared_block_agents)
    return EXIT_OK


def _versions(store: Any, row: Any, label: str) -> list[dict]:
    if store.get_block(row.id, label) is None:
        labels = ", ".join(b.label for b in store.get_blocks(row.id)) or "(none)"
        raise UserError(f"Agent {row.name!r} has no block {label!r} (blocks: {labels}).",
                        EXIT_USAGE)
    return store.block_versions(row.id, label)


def print_versions(console: Console, label: str, versions: list[dict]) -> None:
    """A block's versions, oldest first: number, when, who wrote it, size, first words."""
    if not versions:
        console.print(render.shown(f"Block {label!r} has no recorded versions."))
        return
    table = Table("version", "when", "who", "chars", "text", box=None, pad_edge=False)
    for v in versions:
        who = f"{v['agent']} · {v['source']}" + (f" · turn {v['turn_id']}" if v["turn_id"]
                                                 else "")
        if v.get("scope") == "project" and v.get("project"):
            who += f" · project {v['project']}"
        table.add_row(str(v["version"]), render.shown(v["created_at"][:19].replace("T", " ")),
                      render.shown(who), f"{len(v['value']):,}",
                      render.shown(" ".join(v["value"].split())[:60] or "(empty)"))
    console.print(table)
    console.print(render.shown(f"`memgpt-lite core --restore {label} N` brings version N back."),
                  style="dim")


def restore_version(store: Any, row: Any, label: str, version: str) -> str:
    """Write version `version` of block `label` back, as a new version (so a restore is
    undone the same way); one line saying what was done."""
    from memgpt_lite.engine.config import ConfigError, parse_positive_int

    versions = _versions(store, row, label)
    try:
        number = parse_positive_int(version, "VERSION")
    except ConfigError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None
    if number > len(versions):
        raise UserError(f"Block {label!r} has {len(versions)} version"
                        f"{'s' if len(versions) != 1 else ''}; `memgpt-lite core --history "
                        f"{label}` lists them.", EXIT_USAGE)
    value = versions[number - 1]["value"]
    block = store.get_block(row.id, label)
    if block.value == value:
        return f"Block {label!r} already holds version {number}; nothing was changed."
    if len(value) > block.limit:
        raise UserError(f"Version {number} of {label!r} is {len(value):,} chars, over the "
                        f"block's limit of {block.limit:,}.", EXIT_USAGE)
    store.set_block(row.id, label, value, source=f"restore v{number}", expected=block.value)
    return (f"Block {label!r} holds version {number} again (saved as version "
            f"{len(versions) + 1}; `memgpt-lite core --restore {label} {len(versions)}` "
            "undoes it).")


# --------------------------------------------------------------------------- share


def share_keep(store: Any, row: Any, label: str, keep: str | None,
               ask: Callable[[str], str | None] | None) -> str:
    """Which value a shared block keeps when the agent's block `label` joins it: no choice
    when only one of them holds text (a placeholder is no text), else `keep`, else the
    user's answer on a terminal (`ask`), else UserError naming --keep."""
    from memgpt_lite.engine.memory import placeholder

    own, shared = store.get_block(row.id, label), store.shared_block(label)
    empty = ("", placeholder())
    mine = own.value.strip() if own is not None else ""
    theirs = shared.value.strip() if shared is not None else ""
    if shared is None or theirs in empty:
        return "mine"
    if mine in empty or mine == theirs:
        return "shared"
    if keep is not None:
        return keep
    question = (f"Block {label!r} of {row.name!r} and the shared {label!r} both hold text.\n"
                f"  shared: {_glimpse(theirs)}\n  {row.name}: {_glimpse(mine)}\n"
                "Keep which? shared, mine or both")
    answer = ask(question) if ask is not None else None
    if answer is None:
        raise UserError(f"Block {label!r} of {row.name!r} and the shared {label!r} both hold "
                        "text; choose which to keep with --keep shared|mine|both (the other "
                        "stays in `memgpt-lite core --history`).", EXIT_USAGE)
    return answer


def ask_keep(question: str) -> str | None:
    """shared, mine or both, asked on the terminal (None: no answer, e.g. Ctrl-D)."""
    from memgpt_lite.terminal.user_input import answer as typed_answer, end_line

    while True:
        try:
            answer = typed_answer(f"{question} [shared/mine/both] ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            end_line()
            return None
        if answer in ("shared", "mine", "both"):
            return answer
        if not answer:
            return None


def _glimpse(text: str, limit: int = 70) -> str:
    line = " ".join(text.split())
    return render.visible(line if len(line) <= limit else line[:limit - 1] + "…")


# --------------------------------------------------------------------------- conversations


def cmd_conversations(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.store import open_store

    with open_store() as store:
        row = agent_checks.require_agent(store, args.agent)
        print_conversations(render.make_console(), store.conversations(row.id),
                            store.current_conversation(row.id))
    return EXIT_OK


def print_conversations(console: Console, conversations: list[Any], current: int) -> None:
    """id, started, last used, turns, title; the most recent (what `chat` resumes) marked."""
    table = Table("id", "started", "last used", "turns", "title", box=None, pad_edge=False)
    for c in conversations:
        mark = " *" if c.id == current else ""
        table.add_row(f"{c.id}{mark}", render.shown(_minute(c.started_at)),
                      render.shown(_minute(c.last_used_at)), f"{c.turns:,}",
                      render.shown(c.name))
    console.print(table)
    console.print("* the one `memgpt-lite chat` resumes; `chat --resume ID` another, "
                  "`chat --new` a new one", style="dim", markup=False)


def _minute(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else "-"


# --------------------------------------------------------------------------- in the chat

CHAT_HELP = """\
  /new                  start a new conversation (core, archival memory and recall stay)
  /resume ID            go back to conversation ID (its queue and summary)
  /conversations        this agent's conversations (also `memgpt-lite conversations`)
  /title TEXT           name this conversation"""


# The chat's conversation commands (the slash-command table in slash.py names them). Each
# ends the current recording: a recording is of one conversation (its header names it).


def slash_new(session: Any, rest: str) -> None:
    session.end_recording()
    c = session.agent.start_conversation()
    session.console.print(render.shown(f"conversation {c.id} (new) · core memory, "
                                       "archival memory and recall stay", "dim"))


def slash_resume(session: Any, rest: str) -> None:
    from memgpt_lite.engine.store import StoreError

    try:
        number = int(rest)
    except ValueError:  # "²" is a digit to str.isdigit, not to int()
        number = 0
    if number < 1:
        session.console.print("usage: /resume ID  (see /conversations)", markup=False)
        return
    session.end_recording()
    try:
        c = session.agent.resume_conversation(number)
    except StoreError as exc:
        session.console.print(render.shown(str(exc), "red"))
        return
    turns = f"{c.turns:,} turn{'' if c.turns == 1 else 's'}"
    session.console.print(render.shown(f"conversation {c.id} ({c.name}) · {turns}", "dim"))


def slash_conversations(session: Any, rest: str) -> None:
    agent = session.agent
    print_conversations(session.console, agent.store.conversations(agent.id),
                        agent.conversation_id)


def slash_title(session: Any, rest: str) -> None:
    if not rest.strip():
        session.console.print("usage: /title TEXT", markup=False)
        return
    agent = session.agent
    agent.store.set_conversation_title(agent.id, agent.conversation_id, rest)
    session.console.print(render.shown(f"conversation {agent.conversation_id}: "
                                       f"{agent.conversation().name}", "dim"))


def terminal_confirm(session: Any, type_ahead: Any) -> Callable[[Any], bool]:
    """The agent's confirm callback on a terminal: the write shown (block, old → new, or the
    passage), then y/N. The live region stops first and the keys typed meanwhile are kept
    for the prompt (see TypeAhead.asking)."""
    from memgpt_lite.terminal.user_input import ask

    def confirm(change: Any) -> bool:
        session.view.stop()
        for line in describe_write(change):
            session.console.print(render.shown(line), soft_wrap=True)
        with type_ahead.asking():
            return ask("apply this memory write?")

    return confirm


SHOWN = 400  # characters of each value a confirmation shows


def describe_write(change: Any) -> list[str]:
    """What a memory write would change, as the confirmation shows it."""
    old, new = _glimpse(change.old or "", SHOWN), _glimpse(change.new or "", SHOWN)
    if change.tool.startswith("core_memory"):
        scope = f" ({change.scope} scope)" if change.scope and change.scope != "agent" else ""
        return [f"memory write: {change.tool} on block {change.target!r}{scope}",
                f"  old: {old}", f"  new: {new}"]
    if change.tool == "archival_insert":
        return ["memory write: archival_insert (a new passage)", f"  {new}"]
    if change.tool == "archival_update":
        return [f"memory write: archival_update of passage {change.target}",
                f"  old: {old}", f"  new: {new}"]
    return [f"memory write: archival_delete of passage {change.target} ({change.reason})",
            f"  {old}"]

"""Checks the agent commands share with the chat: a context window measured as the chat
measures it (so `agents set` and `agents import` store no window the next chat refuses), and
an agent read as its next open leaves it (a turn cut off by kill -9 undone first)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from memgpt_lite.terminal.exit_codes import EXIT_USAGE, UserError


def check_window(settings: Any, blocks: list[Any], counter_state: Any,
                 named: dict[str, str]) -> None:
    """UserError unless the window holds the fixed part of a request and one turn, measured
    as the chat measures it at its start (exactly, with the API's free count_tokens, when a
    key or server is set), so that no window is stored that the next chat refuses. A count
    that fails leaves the estimate, and a line on stderr says why (see `_Count`)."""
    from memgpt_lite.engine.window import window_floor
    from memgpt_lite.engine.config import ConfigError, check_room

    count = _Count.make()
    try:
        floor = window_floor(settings, blocks, counter_state, count and count.count)
    finally:
        if count is not None:
            count.report()
    try:
        check_room(settings, floor, named)
    except ConfigError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None


def named_settings(sources: dict[str, str]) -> dict[str, str]:
    """Setting → how the user gave it, for check_room's sentences (resolve_settings'
    sources): its flag or variable, or `KEY in the config file`. A stored or default value
    is not named (check_room says "the agent's stored ...")."""
    named = {k: s.split(" ", 1)[1] for k, s in sources.items() if s.startswith(("env", "flag"))}
    named.update({k: f"{k} in the config file" for k, s in sources.items()
                  if s == "config file"})
    return named


COUNT_WAIT = 15.0  # seconds a count may take at most: a command waits on it, not a chat


class _Count:
    """The API's count_tokens for a check of the window, said while it runs (a status line
    on a terminal, a line on stderr when piped: a server that never answers would otherwise
    look like a command that hangs), and its failure said afterwards in one sentence."""

    def __init__(self, client: Any, wait: float, how: str):
        self.client, self.wait, self.how = client, wait, how
        self.failure: Any = None

    @classmethod
    def make(cls) -> _Count | None:
        """A count when a key or a server is set (else None: the estimate)."""
        from memgpt_lite.engine.config import ConfigError
        from memgpt_lite.engine.errors import ModelError
        from memgpt_lite.engine.model import AnthropicClient

        if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
                or os.environ.get("ANTHROPIC_BASE_URL")):
            return None
        wait, how = _count_deadline()
        try:
            return cls(AnthropicClient(max_retries=0, timeout=wait, timeout_source=how), wait,
                       how)
        except (ConfigError, ModelError):
            return None  # a bad key or URL is the chat's to report; the estimate stands

    def count(self, request: Any) -> int:
        from memgpt_lite.engine.errors import ModelError
        from memgpt_lite.terminal import render

        console = render.make_console(sys.stderr)
        what = (f"measuring the context window with {self.client.host} (it is near its "
                f"minimum; waiting at most {self.wait:g} s)…")
        if console.is_terminal:
            waiting: Any = console.status(render.visible(what))
        else:
            print(render.visible(f"memgpt-lite: {what}"), file=sys.stderr, flush=True)
            waiting = contextlib.nullcontext()
        try:
            with waiting:
                return int(self.client.count_tokens(request))
        except ModelError as exc:
            self.failure = exc
            raise

    def report(self) -> None:
        from memgpt_lite.engine.errors import APIConnectionError
        from memgpt_lite.terminal import render

        exc = self.failure
        if exc is None:
            return
        if isinstance(exc, APIConnectionError) and exc.message.startswith("Gave up waiting"):
            line = (f"{self.client.host} did not answer the token count within "
                    f"{self.wait:g} s ({self.how}), so the window was checked by the estimate.")
        else:
            line = (f"counting tokens with {self.client.host} failed ({exc.message.rstrip('.')}),"
                    f" so the window was checked by the estimate.")
        print(render.visible(f"memgpt-lite: warning: {line}"), file=sys.stderr)


def _count_deadline() -> tuple[float, str]:
    """How long a count may take, and what sets that in the user's words: the model call
    timeout when it is shorter (set in the environment or the config file), else
    COUNT_WAIT. A timeout the chat would refuse is the chat's to report."""
    from memgpt_lite.engine.config import ConfigError, timeout_setting
    from memgpt_lite.engine.config_file import env_value, named

    try:
        chat = timeout_setting()
    except ConfigError:
        chat = COUNT_WAIT
    if chat < COUNT_WAIT:
        given = named("MEMGPT_LITE_TIMEOUT", env_value("MEMGPT_LITE_TIMEOUT") or "")
        return chat, f"the model call timeout, set by {given}"
    return COUNT_WAIT, (f"the most a count waits; MEMGPT_LITE_TIMEOUT or `memgpt-lite config "
                        f"set timeout SECONDS` below {COUNT_WAIT:g} shortens it")


def check_imported_window(doc: dict[str, Any]) -> None:
    """An imported agent's window must hold one turn, as for one set by hand. (A malformed
    export is left to the import's own checks, which name the bad field.)"""
    from memgpt_lite.engine.config import ConfigError, Settings
    from memgpt_lite.engine.records import Block
    from memgpt_lite.engine.store import checks

    meta, blocks = doc.get("agent"), doc.get("blocks")
    if not isinstance(meta, dict) or checks.blocks_problem(blocks):
        return
    try:
        # The window's room is check_window's to judge, in its sentence (an older version
        # exported windows that leave none).
        settings = Settings.from_dict(meta.get("settings"), room=False)
    except ConfigError:
        return
    state = meta.get("state") if isinstance(meta.get("state"), dict) else {}
    check_window(settings, [Block(b["label"], b["value"], b["limit"]) for b in blocks],
                 state.get("counter"), {"context_window": "the export's context_window"})


def settle(store: Any, row: Any, *, for_export: bool = False) -> bool:
    """Whether the agent reads as its next open leaves it. A turn cut off (kill -9 inside a
    turn) has its effects in the store until it is undone, which the next open does; a
    reader undoes it first, when no other process holds the agent (a chat there is in the
    middle of that turn: its effects are real until it ends). False when a turn is still
    unfinished; `for_export`: then UserError, as an export never holds such effects."""
    from memgpt_lite.engine.locking import AgentBusyError
    from memgpt_lite.engine.store import StoreError

    if not store.unfinished_turns(row.id):
        return True
    try:
        with store.agent_lock(row.name).acquire(wait=0):
            for turn in store.unfinished_turns(row.id):
                store.undo_turn(row.id, turn)
    except (AgentBusyError, StoreError):  # busy; or the undo cannot be written here
        if for_export:
            raise UserError(f"Agent {row.name!r} is in the middle of a turn (another "
                            f"memgpt-lite process has it, or this data dir cannot be written "
                            f"to undo a turn cut off); export it when the turn has ended: an "
                            f"export never holds a turn's unfinished effects.") from None
        return False
    return True


def require_agent(store: Any, name: str, *, say: bool = True) -> Any:
    """The existing agent `name` (under any name it has, even one from before the naming
    rule, or a name it had before a rename: then a line on stderr says so, unless `say` is
    False); else one sentence: the naming rule if the name breaks it, or the agents there
    are."""
    from memgpt_lite.engine.config import agent_name_problem

    row = find_agent(store, name, say=say)
    if row is None:
        problem = agent_name_problem(name)
        if problem:
            raise UserError(problem, EXIT_USAGE)
        names = ", ".join(a.name for a in store.list_agents()) or "none yet"
        raise UserError(f"There is no agent named {name!r} (agents: {names}).")
    return row


def find_agent(store: Any, name: str, *, say: bool = True) -> Any:
    """The agent named `name`, or the one renamed from it (a line on stderr says which,
    unless `say` is False: scripts and habits still say the old name); else None."""
    from memgpt_lite.terminal import render

    row = store.get_agent(name)
    if row is not None:
        return row
    row = store.renamed_agent(name)
    if row is not None and say:
        print(render.visible(f"memgpt-lite: agent {name!r} was renamed to {row.name!r}; using "
                             f"{row.name!r}."), file=sys.stderr)
    return row


def refuse_renamed(store: Any, name: str, command: str) -> None:
    """UserError (exit 2) when `name` is an agent's name from before a rename: `chat` and
    `mcp` would otherwise create a new, empty agent of that name unasked."""
    import shlex

    row = store.renamed_agent(name)
    if row is None:
        return
    raise UserError(f"Agent {name!r} was renamed to {row.name!r}: run `memgpt-lite {command} "
                    f"--agent {shlex.quote(row.name)}`, or `memgpt-lite agents create "
                    f"{shlex.quote(name)}` first to start "
                    f"a new agent named {name!r}.", EXIT_USAGE)

"""Tab completion at the chat's prompt: slash commands, then what each command's argument
is (core memory block labels, agent names, model names, files), from the command table in
slash.py. Installed on the LineReader's readline when the chat is typed."""

from __future__ import annotations

import glob
import os
from typing import Any

from memgpt_lite.terminal import slash
from memgpt_lite.terminal.user_input import for_readline, from_readline, line_before_word


class Completer:
    """`matches(before, text)`: what the word `text` may become, `before` being the line up
    to it. `complete(text, state)` is readline's completer protocol."""

    def __init__(self, session: Any, readline: Any = None):
        self.session = session
        self.readline = readline
        self._matches: list[str] = []

    def complete(self, text: str, state: int) -> str | None:
        if state == 0:
            # Python's readline adds nothing after a completed word: a space is added here
            # (not after a folder, whose files come next). Text goes to and from readline
            # in the form it holds (a C locale: café as bytes; it raised, no match shown).
            before = line_before_word(self.readline)
            self._matches = [for_readline(m if m.endswith("/") else m + " ")
                             for m in self.matches(before, from_readline(text))]
        return self._matches[state] if state < len(self._matches) else None

    def matches(self, before: str, text: str) -> list[str]:
        words = before.split()
        if not words:
            return sorted(f"/{n}" for n in slash.names() if f"/{n}".startswith(text)) \
                if text.startswith("/") else []
        command = slash.find(words[0][1:].lower()) if words[0].startswith("/") else None
        if command is None:
            return []
        if command.completes == "files" and not command.words and len(words) > 1:
            return _within_path(before.split(maxsplit=1)[1], text)
        return [c for c in self._candidates(command, words[1:], text) if c.startswith(text)]

    def _candidates(self, command: slash.Command, args: list[str], text: str) -> list[str]:
        if not args:
            return list(command.words) if command.words else self._of(command.completes, text)
        if all(a in command.words for a in args):
            if command.completes:
                return self._of(command.completes, text) if len(args) == 1 else []
            return [w for w in command.words if w not in args]
        return []

    def _of(self, kind: str, text: str) -> list[str]:
        agent = self.session.agent
        if kind == "labels":
            return [b.label for b in agent.blocks()]
        if kind == "agents":
            return [a.name for a in agent.store.list_agents()]
        if kind == "models":
            from memgpt_lite.engine.tokens import KNOWN_MODELS

            return [alias for _, aliases in KNOWN_MODELS.values() for alias in aliases] + \
                list(KNOWN_MODELS)
        if kind == "files":
            return _files(text)
        return []


def _files(text: str) -> list[str]:
    """Paths starting with `text` (~ expanded as typed); folders end with /."""
    expanded = os.path.expanduser(text)
    found = []
    for path in sorted(glob.glob(glob.escape(expanded) + "*")):
        shown = text + path[len(expanded):] if expanded != text else path
        found.append(shown + "/" if os.path.isdir(path) else shown)
    return found


def _within_path(typed: str, text: str) -> list[str]:
    """Files for a path with a space in it (`/add ~/my notes/a`): readline completes only
    the word after the last space, so the path is the whole argument and each match is
    given from that word on (a folder with a space in its name could not be entered)."""
    path = typed + text
    cut = len(typed)
    return [found[cut:] for found in _files(path) if found.startswith(path)]


def install(reader: Any, session: Any) -> Completer:
    """Tab completes on `reader`'s readline from now on."""
    rl = reader.readline
    completer = Completer(session, rl)
    rl.set_completer_delims(" \t\n")
    rl.set_completer(completer.complete)
    if "libedit" in (getattr(rl, "__doc__", "") or ""):
        rl.parse_and_bind("bind ^I rl_complete")  # macOS's readline is libedit
    else:
        rl.parse_and_bind("tab: complete")
    return completer

"""Finding and rendering the prompt files in the top-level prompts/ folder.

The folder ships inside the wheel as the package `memgpt_lite._prompts` (see pyproject),
so one lookup works for wheel and editable installs alike. Code run straight from a source
checkout (`python -m memgpt_lite` in the repo, where the package shadows the installed one)
finds the top-level folder beside the package instead.
"""

from __future__ import annotations

import functools
import hashlib
import string
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any


# What the model is shown of the engine (the system prompt, the tools' schemas, the shape of
# their results) changes only with this number. A recording names the contract it was made
# under and replays under it, so a recording made by an older version still replays
# strictly: the prompts of an older contract stay in prompts/contract<N>/ and the memory
# tools keep that contract's schemas and results (see memory.py).
CONTRACT = 3
CONTRACTS = (1, 2, 3)


class PromptError(LookupError):
    """A prompt file is missing or a placeholder has no value."""


@functools.lru_cache(maxsize=1)
def root() -> Traversable:
    """The folder holding the prompt files: the checkout's, when this code runs from one
    (another install of the package, editable or not, maps `memgpt_lite._prompts` to its own
    folder, whose prompts belong to another version of the code), else the installed one."""
    top = Path(__file__).resolve().parents[2]
    if (top / "pyproject.toml").is_file() and (top / "prompts" / "system.md").is_file():
        return top / "prompts"
    try:
        return resources.files("memgpt_lite._prompts")
    except ModuleNotFoundError:
        raise PromptError("the prompts folder is missing from the installation") from None


@functools.lru_cache(maxsize=None)
def load(name: str) -> str:
    """The text of prompts/NAME (e.g. 'system.md'), trailing whitespace stripped."""
    try:
        return root().joinpath(name).read_text("utf-8").rstrip()
    except FileNotFoundError:
        raise PromptError(f"prompt file {name!r} is missing from the installation") from None


def system_prompt(contract: int = CONTRACT) -> str:
    """The system prompt of `contract` (the current one, or an older one kept for replay)."""
    return load("system.md" if contract == CONTRACT else f"contract{contract}/system.md")


def render(name: str, **values: object) -> str:
    """The prompt with $placeholders filled (string.Template: `$$` is a literal dollar)."""
    try:
        return string.Template(load(name)).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise PromptError(f"prompt {name!r} needs a value for {exc.args[0]!r}") from None


def names() -> list[str]:
    return sorted(p.name for p in root().iterdir() if p.name.endswith((".md", ".txt")))


def digests() -> dict[str, str]:
    """sha256 (short) of every prompt file, for recording headers."""
    return {n: _digest(load(n)) for n in names()}


# The prompt files a model request is built from (a new agent's blocks are not: a recording
# names the blocks its replay starts from).
REQUEST_PROMPTS = ("system.md", "pressure_alert.md", "summarizer.md", "compact.md", "project.md")


def foreign(recorded: Any) -> list[str]:
    """The prompt files a recording's header names (its `prompt_digests`) whose text this
    version does not have: an older version changed them before its prompts were kept for
    replay (prompts/contract<N>/), so no request of that recording can match. The header
    names the files as they were (a session under an older contract today names today's
    system.md, one recorded before contracts its own), so a system.md of any contract this
    version keeps is known. A file the header does not name is not judged."""
    if not isinstance(recorded, dict):
        return []
    ours = {name: {digest} for name, digest in digests().items()}
    ours["system.md"] = {_digest(system_prompt(c)) for c in CONTRACTS}
    return [name for name in REQUEST_PROMPTS
            if isinstance(recorded.get(name), str) and name in ours
            and recorded[name] not in ours[name]]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_KEPT = "\n\nWhat the user wants kept: "


def compact_request(asked: str) -> str:
    """The user message of a /compact turn, `asked` being what the user wants kept."""
    return render("compact.md", instructions=f"{_KEPT}{asked}" if asked else "")


def compact_asked(text: str) -> str | None:
    """What the user wanted kept when `text` is the message of a /compact turn (so that
    /retry sends it again as one), else None."""
    plain = compact_request("")
    if text == plain:
        return ""
    head = plain + _KEPT
    return text[len(head):] if text.startswith(head) else None

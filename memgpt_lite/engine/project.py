"""The one function that decides which project a process works in (the key of `project`
scope blocks: README "Memory and paging" and docs/mcp.md).

A project is named by its root: the top level of the git work tree the directory is in (the
nearest folder holding `.git`, a folder in a clone or a file in a worktree or submodule),
else the directory itself. The directory is the one given (`--project DIR`), else
$MEMGPT_LITE_PROJECT, else the working directory. Symbolic links are resolved, so one project
never has two names. Git itself is not run: a folder walk answers the same question in
microseconds and needs no git installed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memgpt_lite.engine.config import ConfigError
from memgpt_lite.engine.text import path_text

PROJECT_VAR = "MEMGPT_LITE_PROJECT"
_ESCAPED_BYTE = re.compile(rb"\\x([0-9a-f]{2})")  # how path_text writes a byte not UTF-8


def project_root(given: str | Path | None = None, *, cwd: Path | None = None) -> Path:
    """The project root for `given` (else $MEMGPT_LITE_PROJECT, else `cwd` or the working
    directory). ConfigError, one sentence, when the directory named does not exist."""
    where, named = _directory(given, cwd)
    try:
        folder = where.expanduser().resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable, a symlink loop
        raise ConfigError(f"The project directory {str(where)!r} {named} does not exist.") from None
    if not folder.is_dir():
        raise ConfigError(f"The project directory {str(where)!r} {named} is not a folder.")
    return git_top_level(folder) or folder


def gone_project(given: str | Path | None, known: list[str]) -> str | None:
    """The root a project had before its folder was moved, renamed or deleted: `given`
    (else $MEMGPT_LITE_PROJECT) as an absolute path, when it no longer exists and is one of
    the `known` roots (those with a stored block); else None. A block is kept under the
    root it was written in, so it is found again by naming that old path."""
    where, _ = _directory(given, None)
    if where == Path("."):  # the working directory exists, or nothing could be named
        return None
    root = path_text(os.path.abspath(where.expanduser()))
    return root if root in known and not root_exists(root) else None


def root_exists(root: str) -> bool:
    """Whether a stored project root (as `path_text` wrote it) is still on this machine."""
    raw = _ESCAPED_BYTE.sub(lambda m: bytes([int(m[1], 16)]), root.encode("utf-8"))
    return os.path.lexists(raw)


def _directory(given: str | Path | None, cwd: Path | None) -> tuple[Path, str]:
    """The directory to start from, and how the user named it (for the error)."""
    if given is not None and str(given).strip():
        return Path(given), "(from --project)"
    env = os.environ.get(PROJECT_VAR, "").strip()
    if env:
        return Path(env), f"(from {PROJECT_VAR})"
    return (cwd or Path(".")), "(the working directory)"  # resolved (and checked) by the caller


def git_top_level(folder: Path) -> Path | None:
    """The nearest folder at or above `folder` that holds `.git`, or None."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None

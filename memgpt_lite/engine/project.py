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
from pathlib import Path

from memgpt_lite.engine.config import ConfigError

PROJECT_VAR = "MEMGPT_LITE_PROJECT"


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

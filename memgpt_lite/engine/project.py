"""The one function that decides which project a directory belongs to.

A project is named by its root: the top level of the git work tree holding the directory
(the nearest folder upwards with a `.git` entry, a folder or, for a worktree or submodule,
a file), else the directory itself. `--project DIR` and $MEMGPT_LITE_PROJECT name a root
outright. Every agent working under one root sees the same blocks in "project" scope
(store/project_blocks.py); `memgpt-lite chat`, `core`, `agents show` and `mcp` ask here.
Nothing is read at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from memgpt_lite.engine.config import ConfigError

PROJECT_ENV = "MEMGPT_LITE_PROJECT"


class ProjectError(ConfigError):
    """A project given by the user cannot be used; the message is one sentence."""


def project_root(override: str | None = None, cwd: str | Path | None = None) -> str:
    """The project root for `cwd` (default: the working directory): `override` (a flag's
    value), else $MEMGPT_LITE_PROJECT, else the git top level of the directory, else the
    directory. Always an absolute path with symlinks resolved, so that one project has one
    name however it is reached. ProjectError when a root given outright is not a directory."""
    given, where = override, "--project"
    if not given:
        given, where = os.environ.get(PROJECT_ENV, "").strip() or None, PROJECT_ENV
    if given:
        root = Path(given).expanduser()
        if not root.is_dir():
            raise ProjectError(f"{where} {given!r} is not a directory; name the folder of the "
                               "project (e.g. the top of its git checkout).")
        return str(root.resolve())
    try:
        start = (Path(cwd) if cwd is not None else Path.cwd()).resolve()
    except FileNotFoundError:
        raise ProjectError("The working directory no longer exists, so it names no project; "
                           f"change to a directory that does, or give --project DIR.") from None
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return str(folder)
    return str(start)

"""Core memory blocks in "project" scope: one row per project root and label
(`project_blocks`), seen and edited by every agent working in that project (`engine/
project.py` decides a directory's root). A project's rules and stable decisions live there;
the user's preferences stay in user scope, a task's progress in its conversation.

Which project an agent works in is chosen per process (`use_project`), like its
conversation; the agent then sees the project's blocks after its own, a block of its own
(or a user-scope one) of the same label hiding the project's. Until something is written,
the project's `project` block is the default the caller gave (`use_project`'s `default`);
its row is made by the first write. Writers take turns on the row (locked, or made, inside
the write's transaction), so that two agents appending at once both keep their line.

A mixin of `sql.SQLStore` (under blocks.py, which routes writes here), over the database
seam (see core.py).
"""

from __future__ import annotations

from memgpt_lite.engine.records import Block, now_iso
from memgpt_lite.engine.store.core import StoreCore
from memgpt_lite.engine.text import path_text

PROJECT = "project"  # the scope
PROJECT_LABEL = "project"  # the block every agent working in a project sees
PROJECT_LIMIT = 5_000


class ProjectBlocksMixin(StoreCore):
    """Project scope: the project an agent works in, its blocks, and their writes."""

    def use_project(self, agent_id: int, project: str | None,
                    default: tuple[str, int] = ("", PROJECT_LIMIT)) -> None:
        """From now on the agent sees the blocks of `project` (a root directory; None: no
        project), its `project` block holding `default` (value, limit) until written. The
        root is kept as `path_text` has it: a folder whose name is not UTF-8 is a project too,
        its own."""
        project = path_text(project) if project else None
        if project:
            self._projects[agent_id] = (project, *default)
        else:
            self._projects.pop(agent_id, None)

    def project_of(self, agent_id: int) -> str | None:
        """The project root the agent works in (None: none chosen)."""
        chosen = self._projects.get(agent_id)
        return chosen[0] if chosen else None

    def project_blocks(self, project: str) -> list[Block]:
        """The blocks written for `project`, by label's age (none until one is written)."""
        return [Block(r[0], r[1], r[2], PROJECT, project) for r in self.db.query(
            "SELECT label, value, char_limit FROM project_blocks WHERE project = ? ORDER BY id",
            (self.db.text(project),))]

    def project_roots(self) -> list[str]:
        return [r[0] for r in self.db.query(
            "SELECT DISTINCT project FROM project_blocks ORDER BY project")]

    def _project_view(self, agent_id: int, taken: set[str]) -> list[Block]:
        """The project blocks the agent sees: its project's, with the default `project` block
        while none is written, less the labels it has blocks of its own for."""
        chosen = self._projects.get(agent_id)
        if not chosen:
            return []
        root, value, limit = chosen
        blocks = self.project_blocks(root)
        if all(b.label != PROJECT_LABEL for b in blocks):
            blocks.insert(0, Block(PROJECT_LABEL, value, limit, PROJECT, root))
        return [b for b in blocks if b.label not in taken]

    def _project_block(self, agent_id: int, label: str) -> Block | None:
        return next((b for b in self._project_view(agent_id, set()) if b.label == label), None)

    def _hold_project_row(self, block: Block) -> None:
        """Inside a write's transaction: make the row if it is still the default, and lock it
        until the transaction ends (a writer that read the default before another's first
        write then finds the block changed, and reads again)."""
        self.db.execute("INSERT INTO project_blocks (project, label, value, char_limit, "
                        "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (project, label) DO "
                        "NOTHING", (block.project, block.label, block.value, block.limit,
                                    now_iso()))
        self.db.query("SELECT 1 FROM project_blocks WHERE project = ? AND label = ?"
                      f"{self.db.for_update()}", (block.project, block.label))

    def _write_project(self, project: str, label: str, value: str, limit: int) -> None:
        self.db.execute("INSERT INTO project_blocks (project, label, value, char_limit, "
                        "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (project, label) DO "
                        "UPDATE SET value = excluded.value, char_limit = excluded.char_limit, "
                        "updated_at = excluded.updated_at, version = project_blocks.version + 1",
                        (project, label, value, limit, now_iso()))

    def _project_value(self, project: str, label: str) -> tuple[str, int] | None:
        rows = self.db.query("SELECT value, char_limit FROM project_blocks WHERE project = ? "
                             "AND label = ?", (project, label))
        return (rows[0][0], rows[0][1]) if rows else None

"""Two processes editing one user-scope block at once: no edit is lost."""

from __future__ import annotations

import pytest

from rel_support import start_worker, wait_for_line

from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.store import open_store

pytestmark = pytest.mark.slow  # every test here starts real processes

EDITS = 40


def test_two_processes_appending_to_a_shared_block_lose_no_edit(tmp_path, store_target):
    db = store_target  # a SQLite file, or a Postgres database: both serialise the edits
    with open_store(db) as store:
        for name in ("home", "work"):
            row = store.create_agent(name, {}, default_blocks(20_000))
            store.share_block(row.id, "human")
    go = tmp_path / "go"
    workers = [start_worker("share", str(db), name, str(EDITS), str(go))
               for name in ("home", "work")]
    try:
        for worker in workers:
            wait_for_line(worker, "READY")
        go.touch()  # both start their turns at the same moment
        for worker in workers:
            lines = wait_for_line(worker, "DONE", timeout=120)
            assert sum(line.startswith("COMMITTED") for line in lines) == EDITS
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    with open_store(db) as store:
        value = store.get_block(store.get_agent("home").id, "human").value
        assert value == store.get_block(store.get_agent("work").id, "human").value
        lines = value.splitlines()
        for name in ("home", "work"):
            mine = [line for line in lines if line.startswith(f"{name} edit ")]
            assert mine == [f"{name} edit {i}" for i in range(EDITS)], value
        assert len(lines) == 2 * EDITS  # the placeholder was replaced by the first edit
        assert store.integrity_problems() == []

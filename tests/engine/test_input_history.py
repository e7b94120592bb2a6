"""The input history: one file for every agent of a data dir, under one lock."""

from __future__ import annotations

import os
import stat

from memgpt_lite.engine.input_history import InputHistory


def test_the_history_that_makes_the_data_dir_makes_it_private(tmp_path):
    # A chat on Postgres keeps no database file in the data dir: the input history may be
    # the first thing written there, and `doctor` warns of a data dir others can read.
    old = os.umask(0o022)
    try:
        InputHistory(tmp_path / "home").append(["hello"])
    finally:
        os.umask(old)
    for folder in (tmp_path / "home", tmp_path / "home" / "locks"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert InputHistory(tmp_path / "home").lines() == ["hello"]

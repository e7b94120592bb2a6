"""A forget cut off anywhere (kill -9 at any stage or moment, a file it cannot write, a
recording holding bytes that are not UTF-8) is finished by the next memgpt-lite command,
whatever it is, which says so; it then ends exactly where an uninterrupted forget ends."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forget_world import assert_no_match_left, build, state
from rel_support import REPO, child_env, start_worker, wait_for_line

from memgpt_lite.engine import config, privacy, recording_scrub
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.terminal import cli

QUERY = "Rex"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    home = tmp_path_factory.mktemp("world") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMGPT_LITE_HOME", str(home))
        build()
    return home


@pytest.fixture
def reference(template, tmp_path_factory, monkeypatch):
    """The data dir after the same forget, never interrupted."""
    home = tmp_path_factory.mktemp("reference") / "home"
    shutil.copytree(template, home)
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
    with SQLiteStore(config.db_path()) as store:
        plan = privacy.plan_forget(store, store.get_agent("a"), Matcher.build(QUERY))
        privacy.forget(store, plan)
    monkeypatch.undo()
    return comparable(home)


def comparable(home: Path) -> dict:
    """The data dir's state without what differs between two runs of the same forget:
    when a block was last updated, when the forget ran."""
    snap = state(home)
    for row in snap["rows"]["blocks"].values():
        row.pop("updated_at")
    for name, data in list(snap["files"].items()):
        if name.endswith(".jsonl"):
            lines = [json.loads(line) for line in data.decode().splitlines()]
            lines[0].get("forgotten", {}).pop("at", None)
            snap["files"][name] = lines
        else:
            snap["files"][name] = base_rows(home / name)
    return snap


def base_rows(path: Path) -> dict:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                for t in ("messages", "passages", "block_history")}
    finally:
        db.close()


def memgpt(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], capture_output=True,
                          text=True, env=child_env(MEMGPT_LITE_HOME=str(home)), cwd=REPO,
                          timeout=60)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.mark.parametrize("stage", ["intent", "store", "recording", "history"])
@pytest.mark.slow
def test_kill_9_at_every_stage_then_any_command_finishes_the_forget(stage, template, reference,
                                                                    tmp_path):
    home = tmp_path / "killed"
    shutil.copytree(template, home)
    original = comparable(home)
    proc = start_worker("forget", str(home), stage, QUERY)
    try:
        assert wait_for_line(proc, "STAGE ", timeout=60)[-1] == f"STAGE {stage}"
    finally:
        kill(proc)
    assert comparable(home) != reference  # cut off: not done yet
    if stage == "intent":
        assert comparable(home) == original  # written down, nothing changed yet
    done = memgpt(home, "sessions")  # any command
    assert done.returncode == 0, done.stderr
    assert "Finished a forget cut off on" in done.stderr and "Forgot 'Rex'" in done.stderr
    assert comparable(home) == reference
    again = memgpt(home, "agents", "list")
    assert again.returncode == 0 and "Finished" not in again.stderr  # crossed out
    assert_no_match_left_in(home)


def assert_no_match_left_in(home: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMGPT_LITE_HOME", str(home))
        assert_no_match_left(home, Matcher.build(QUERY), ("Dog: Rex",))


# --------------------------------------------------------------------------- on Postgres


@pytest.fixture(scope="module")
def pg_world(tmp_path_factory, postgres_server):
    """The world built on Postgres: (its data dir, the server's URL, its database)."""
    import pg_support

    admin, why = postgres_server
    if admin is None:
        pg_support.skip_or_fail(why)
    database = pg_support.create_database(admin)[0]
    home = tmp_path_factory.mktemp("pg-world") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMGPT_LITE_HOME", str(home))
        mp.setenv("MEMGPT_LITE_DATABASE_URL", pg_support.with_database(admin, database))
        build()
    yield home, admin, database
    pg_support.drop_database(admin, database)


def pg_copy(world: tuple, home: Path, monkeypatch) -> Path:
    """A copy of the Postgres world (data dir and database), made the current store."""
    import pg_support
    import psycopg

    source, admin, database = world
    shutil.copytree(source, home)
    copy = f"{database}_{home.parent.name.lower().replace('-', '_')[-20:]}_{home.name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {copy}")
        conn.execute(f"CREATE DATABASE {copy} TEMPLATE {database}")
    monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", pg_support.with_database(admin, copy))
    return home


@pytest.mark.parametrize("stage", ["intent", "store", "recording", "history"])
@pytest.mark.slow
def test_on_postgres_a_forget_killed_at_any_stage_is_finished_by_the_next_command(
        stage, pg_world, tmp_path, monkeypatch):
    reference = pg_copy(pg_world, tmp_path / "reference", monkeypatch)
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(reference))
    assert cli.main(["forget", QUERY, "--agent", "a", "--yes"]) == 0
    expected = comparable(reference)
    home = pg_copy(pg_world, tmp_path / "killed", monkeypatch)
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
    original = comparable(home)
    proc = start_worker("forget", str(home), stage, QUERY)  # inherits the database URL
    try:
        assert wait_for_line(proc, "STAGE ", timeout=60)[-1] == f"STAGE {stage}"
    finally:
        kill(proc)
    assert comparable(home) != expected
    if stage == "intent":
        assert comparable(home) == original
    done = memgpt(home, "sessions")
    assert done.returncode == 0, done.stderr
    assert "Finished a forget cut off on" in done.stderr and "Forgot 'Rex'" in done.stderr
    assert comparable(home) == expected
    assert_no_match_left(home, Matcher.build(QUERY), ("Dog: Rex",))


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_all_or_nothing(template, reference, tmp_path):
    """The real command, killed after random delays: either it had not begun (nothing
    changed) or the next command completes it; never a half-forget."""
    rng = random.Random(13)
    outcomes = set()
    for run in range(8):
        home = tmp_path / f"run{run}"
        shutil.copytree(template, home)
        original = comparable(home)
        proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "forget", QUERY,
                                 "--agent", "a", "--yes"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                env=child_env(MEMGPT_LITE_HOME=str(home)), cwd=REPO)
        time.sleep(rng.uniform(0.1, 0.4))
        kill(proc)
        memgpt(home, "doctor", "--offline")
        final = comparable(home)
        assert final in (original, reference), f"run {run}: a half-done forget"
        outcomes.add("done" if final == reference else "not begun")
    print(f"outcomes: {sorted(outcomes)}")


@pytest.mark.slow
def test_a_file_that_cannot_be_written_keeps_the_forget_pending(template, tmp_path, monkeypatch,
                                                                capsys):
    home = config.data_dir()
    shutil.copytree(template, home)
    real = recording_scrub._replace

    def disk_full(path, data, result):
        result.problem = "cannot rewrite it (No space left on device)"

    monkeypatch.setattr(recording_scrub, "_replace", disk_full)
    assert cli.main(["forget", QUERY, "--agent", "a", "--yes"]) == 1
    out = capsys.readouterr().out
    assert "Not finished: cannot change" in out and "No space left on device" in out
    assert "the next memgpt-lite command tries again" in out
    with SQLiteStore(config.db_path()) as store:
        assert len(store.forget_intents()) == 1
        assert store.search_messages(store.get_agent("a").id, "Rex").total == 0  # the store is
    monkeypatch.setattr(recording_scrub, "_replace", real)
    holder = start_worker("hold", str(config.db_path()), "a", "60")  # a chat has "a" open
    try:
        wait_for_line(holder, "LOCKED")
        waited = memgpt(home, "sessions")
        assert "A forget in agent 'a' is not finished yet" in waited.stderr
    finally:
        kill(holder)
    assert cli.main(["core", "--agent", "a"]) == 0
    assert "Finished a forget cut off on" in capsys.readouterr().err
    assert_no_match_left(home, Matcher.build(QUERY))


def test_a_recording_with_bytes_that_are_not_utf8(template, capsys):
    home = config.data_dir()
    shutil.copytree(template, home)
    path = max(home.rglob("*.jsonl"), key=lambda p: p.stat().st_size)  # agent a's session 1
    lines = path.read_bytes().split(b"\n")
    plain = next(i for i, line in enumerate(lines) if b'"type":"clock"' in line)
    lines[plain] = lines[plain].replace(b'"readings"', b'"x\xff":1,"readings"')
    hit = next(i for i, line in enumerate(lines) if b"called Rex" in line and b'"user"' in line)
    lines[hit] = lines[hit].replace(b"called Rex", b"called \xfe Rex")
    path.write_bytes(b"\n".join(lines))
    assert cli.main(["forget", QUERY, "--agent", "a", "--yes"]) == 0
    after = path.read_bytes().split(b"\n")
    assert after[plain] == lines[plain]  # no match: its bytes, the bad one too, stay
    assert b"Rex" not in after[hit] and b"[forgotten]" in after[hit]
    assert replay_mod.replay(path, strict=True).ok

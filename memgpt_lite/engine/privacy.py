"""Forgetting, everywhere the agent's text lives, and deleting an agent's files. Library
code: it never prints.

`plan_forget` finds every unit a forget changes (see store/scrub.py for the store's units,
recording_scrub.py for recordings), so the preview is exactly what `forget` then does:

1. the intent is written down (store/sqlite_forget.py), before anything changes;
2. the agent's rows change in one transaction, which also marks the intent's next stage;
3. the base snapshots beside its recordings change alike, then the recordings (only the
   matching text) and the input history (the lines holding a match);
4. the intent is crossed out, and the freed pages of the file and its WAL are wiped.

Steps 3 and 4 are idempotent, so a forget cut off anywhere (kill -9, a recording that
cannot be written) is finished by `finish_pending`, which every command that opens the
store runs first.
Exports written to disk are the user's files and are out of its reach.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memgpt_lite.engine import config, locking
from memgpt_lite.engine.input_history import InputHistory
from memgpt_lite.engine.matching import FORGOTTEN, Matcher
from memgpt_lite.engine.recording import BASES, belongs_to, header_line, recording_files
from memgpt_lite.engine.recording_scrub import RecordingScrub, scrub_recording, stamp_uid
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store import AgentRow, Store, StoreError, snapshot
from memgpt_lite.engine.store.scrub import LINES, PLACES, Unit
from memgpt_lite.engine.store.forget import STORE

__all__ = ["FORGOTTEN", "ForgetPlan", "ForgetResult", "plan_forget", "forget",
           "finish_pending", "delete_agent_files", "exported_secret"]

# Seconds to wait for an agent's lock when finishing a pending forget: a process that has
# the agent open keeps it, and every command would wait this long.
RESUME_WAIT = 0.3


@dataclass
class ForgetPlan:
    """Everything a forget of `matcher` changes for one agent (the preview)."""

    agent: AgentRow
    matcher: Matcher
    units: list[Unit] = field(default_factory=list)
    bases: dict[Path, int] = field(default_factory=dict)  # base file → units in it
    recordings: list[RecordingScrub] = field(default_factory=list)  # those that change
    history: list[str] = field(default_factory=list)  # input history lines that go
    # user-scope blocks that change → the other agents sharing them (the line goes for them
    # too, and from their writes in its history; their messages and recordings are theirs)
    shared: dict[str, list[str]] = field(default_factory=dict)
    mark: tuple[int, ...] | None = None  # the store as the preview read it (forget_mark)
    # projects whose blocks change → the other agents recorded working there (each saw the
    # line; their messages and recordings are theirs, as with a shared block)
    projects: dict[str, list[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.units or self.bases or self.recordings or self.history)

    def counts(self) -> dict[str, int]:
        """How many units change in each place, places in their fixed order."""
        counts = {place.name: 0 for place in PLACES}
        for unit in self.units:
            counts[unit.place] += len(unit.lines) if unit.action == LINES else 1
        counts.update({"base snapshots": len(self.bases), "recordings": len(self.recordings),
                       "input history": len(self.history)})
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent.name, "query": self.matcher.query, "mode": self.matcher.mode,
                "counts": self.counts(), "units": [u.to_dict() for u in self.units],
                "base_snapshots": [str(p) for p in self.bases],
                "recordings": [_recording_dict(r) for r in self.recordings],
                "input_history": self.history, "shared_blocks": self.shared,
                "project_agents": self.projects}


@dataclass
class ForgetResult:
    """What a forget did."""

    agent: str
    matcher: Matcher
    units: list[Unit] = field(default_factory=list)
    bases: int = 0
    recordings: list[RecordingScrub] = field(default_factory=list)
    history: int = 0
    problems: list[str] = field(default_factory=list)  # files it could not change (yet)
    # texts the pattern ran away on (written after the preview), left as they were
    undecided: list[str] = field(default_factory=list)
    wal_clean: bool = True
    resumed_from: str | None = None  # when finished by a later command: when it started

    def actions(self) -> dict[tuple[str, str], int]:
        """What changed by (place, action): messages and passages counted one by one, the
        units made of lines (core memory, summary, block history) by their lines."""
        out: dict[tuple[str, str], int] = {}
        for unit in self.units:
            key = (unit.place, unit.action)
            out[key] = out.get(key, 0) + (len(unit.lines) if unit.action == LINES else 1)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "query": self.matcher.query, "mode": self.matcher.mode,
                "changed": {f"{place} {action}": n
                            for (place, action), n in self.actions().items()},
                "base_snapshots": self.bases,
                "recordings": [_recording_dict(r) for r in self.recordings],
                "input_history_lines": self.history, "problems": self.problems,
                "undecided": self.undecided,
                "wal_emptied": self.wal_clean, "resumed_from": self.resumed_from}


def _recording_dict(r: RecordingScrub) -> dict[str, Any]:
    return {"path": str(r.path), "lines": r.lines, "turns": sorted(r.turns), "start": r.start,
            "problem": r.problem}


# --------------------------------------------------------------------------- planning


def plan_forget(store: Store, row: AgentRow, matcher: Matcher) -> ForgetPlan:
    """Every unit forgetting `matcher` changes for the agent, in every place. A turn left
    open by a process that died is undone first, as opening the agent would: its journal
    holds old values that its undo would otherwise bring back."""
    _undo_unfinished(store, row.id)
    mark = store.forget_mark()  # before reading: a write during the preview counts too
    plan = ForgetPlan(row, matcher, store.forget_units(row.id, matcher), mark=mark)
    plan.shared = _shared_with(store, row, plan.units)
    plan.projects = _worked_in(store, row, plan.units)
    for base in agent_bases(row):
        try:
            found = snapshot.forget_in_base(base, row.id, matcher, apply=False)
        except (OSError, sqlite3.Error, StoreError):  # damaged: the forget names it
            continue
        if found:
            plan.bases[base] = len(found)
    changed = {p.resolve() for p in plan.bases}
    for path in agent_recordings(row):
        scrubbed = scrub_recording(path, matcher, changed, apply=False)
        if scrubbed.changed or scrubbed.problem:
            plan.recordings.append(scrubbed)
    with contextlib.suppress(OSError):  # unreadable: the forget itself names it as a problem
        plan.history = InputHistory(config.data_dir()).matching(matcher)
    return plan


def _shared_with(store: Store, row: AgentRow, units: list[Unit]) -> dict[str, list[str]]:
    scopes = {b.label: b.scope for b in store.get_blocks(row.id)}
    labels = {str(u.key) for u in units if u.place == "core memory" and scopes.get(str(u.key))
              == "user"}
    return {label: [n for n in store.shared_block_agents(label) if n != row.name]
            for label in sorted(labels)}


def _worked_in(store: Store, row: AgentRow, units: list[Unit]) -> dict[str, list[str]]:
    """Of each project whose blocks change, the other agents whose recordings were made
    there (a recording's header names its project): the line was in their context too."""
    found: dict[str, set[str]] = {u.project: set() for u in units
                                  if u.place == "project memory" and u.project}
    folder = config.recordings_dir()
    if not found or not folder.is_dir():
        return {}
    names = {a.uid: a.name for a in store.list_agents() if a.uid != row.uid}
    for path in folder.rglob("*.jsonl"):
        head = header_line(path)
        uid = str(head.get("agent_uid") or path.parent.name)
        if head.get("project") in found and uid in names:
            found[str(head["project"])].add(names[uid])
    return {root: sorted(agents) for root, agents in sorted(found.items())}


def _undo_unfinished(store: Store, agent_id: int) -> None:
    for turn in store.unfinished_turns(agent_id):
        store.undo_turn(agent_id, turn)


# --------------------------------------------------------------------------- forgetting


def forget(store: Store, plan: ForgetPlan) -> ForgetResult:
    """Carry out `plan` (hold the agent's lock from planning to here, so that it is exactly
    what was previewed): write the intent down, then change every place."""
    intent = store.add_forget_intent(plan.agent.id, plan.agent.uid, plan.matcher)
    _drop_older_same(store, plan, intent)
    # Still bounded, as a resumed forget is: texts written since the preview (another
    # agent's line of the input history, a shared block) never met the pattern; a text it
    # runs away on is left and named (Matcher.undecided), never a hang or half a forget.
    return _carry_out(store, plan.agent, plan.matcher.carrying_out(), intent, STORE,
                      plan.units, plan.mark)


def _drop_older_same(store: Store, plan: ForgetPlan, intent_id: int) -> None:
    """Cross out an older pending intent of this very forget (a file it could not change):
    the one just written down does all it had left, and every later command would otherwise
    try both. Dropped after the new one is written, so that no moment has neither."""
    for intent in store.forget_intents():
        if intent.id != intent_id and intent.matcher is not None \
                and (intent.agent_id, intent.agent_uid) == (plan.agent.id, plan.agent.uid) \
                and intent.matcher.spec() == plan.matcher.spec():
            store.drop_forget_intent(intent.id)


def _carry_out(store: Store, row: AgentRow | None, matcher: Matcher, intent_id: int,
               stage: str, units: list[Unit] | None,
               mark: tuple[int, ...] | None = None) -> ForgetResult:
    result = ForgetResult(row.name if row else "(deleted)", matcher)
    if row is not None:
        if stage == STORE:
            with _noting_undecided(matcher, result, "the store"):
                _undo_unfinished(store, row.id)
                result.units = store.apply_forget(row.id, units, matcher, intent_id, mark)
        with _noting_undecided(matcher, result, "the recordings or their base snapshots"):
            _scrub_files(row, matcher, result)
    try:
        with _noting_undecided(matcher, result, "the input history"):
            result.history = len(InputHistory(config.data_dir()).scrub(matcher))
    except OSError as exc:
        result.problems.append(f"the input history ({exc.strerror or exc})")
    if not result.problems:
        store.drop_forget_intent(intent_id)
    result.wal_clean = store.wipe_freed()
    return result


@contextlib.contextmanager
def _noting_undecided(matcher: Matcher, result: ForgetResult, where: str) -> Any:
    """Name the texts of `where` the pattern ran away on in the block (by size and place:
    never a copy of what may be the very text being forgotten)."""
    before = len(matcher.undecided)
    try:
        yield
    finally:
        result.undecided += [f"{size:,} characters in {where}"
                             for size in matcher.undecided[before:]]


def _scrub_files(row: AgentRow, matcher: Matcher, result: ForgetResult) -> None:
    """The base snapshots first (a recording starting from a rewritten one says so), then
    the recordings; a file that cannot be changed is named in `problems`."""
    changed: set[Path] = set()
    for base in agent_bases(row):
        try:
            if snapshot.forget_in_base(base, row.id, matcher):
                changed.add(base.resolve())
        except StoreError:  # damaged: name it, and scrub the recordings all the same
            result.problems.append(
                f"{base} (it is damaged; a base snapshot only serves replays of recordings: "
                "delete it, and the next command finishes the forget)")
        except (OSError, sqlite3.Error) as exc:  # unwritable: name it, go on
            result.problems.append(f"{base} ({exc})")
    result.bases = len(changed)
    at = now_iso()
    for path in agent_recordings(row):
        scrubbed = scrub_recording(path, matcher, changed, at=at)
        if scrubbed.problem:
            result.problems.append(f"{path} ({scrubbed.problem})")
        elif scrubbed.changed:
            result.recordings.append(scrubbed)


def finish_pending(store: Store) -> tuple[list[ForgetResult], list[str], list[str]]:
    """Finish every forget that was cut off (see the module docstring), oldest first;
    returns what was finished, the agents whose forget must wait because another process
    has them open (it is finished by a later command), and a sentence for each forget that
    cannot be finished at all (its query cannot be read back), which is crossed out."""
    done, waiting, dropped = [], [], []
    for intent in store.forget_intents():
        row = store.get_agent_by_id(intent.agent_id)
        if row is not None and row.uid != intent.agent_uid:
            row = None  # that agent was deleted and its id reused
        if intent.matcher is None:
            store.drop_forget_intent(intent.id)
            dropped.append(f"A forget started on {intent.created_at} in agent "
                           f"{row.name if row else '(deleted)'!r} cannot be finished: "
                           f"{intent.unreadable}; it was crossed out: run that forget again.")
            continue
        with _agent_locked(store, row) as locked:
            if not locked:
                waiting.append(row.name)  # type: ignore[union-attr]
                continue
            if intent.id not in {i.id for i in store.forget_intents()}:
                continue  # another process finished it meanwhile
            result = _carry_out(store, row, intent.matcher, intent.id, intent.stage, None)
            result.resumed_from = intent.created_at
            done.append(result)
    return done, waiting, dropped


@contextlib.contextmanager
def _agent_locked(store: Store, row: AgentRow | None) -> Any:
    if row is None:
        yield True
        return
    lock = store.agent_lock(row.name)  # a lock file, or an advisory lock on Postgres
    try:
        lock.acquire(RESUME_WAIT)
    except locking.AgentBusyError:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


# --------------------------------------------------------------------------- files


def agent_recordings(row: AgentRow) -> list[Path]:
    """The agent's recordings: in its folder, or naming its uid (see recording.belongs_to)."""
    return [path for path in recording_files(config.recordings_dir()) if belongs_to(path, row)]


def adopt_recordings(row: AgentRow) -> None:
    """Before the agent is renamed: a recording from before agent uids is the agent's only by
    the name in its header (recording.belongs_to), so after a rename `sessions`, `forget`
    and `agents delete` would no longer find it. Each gets the agent's uid in its header
    first. OSError naming a file that cannot be rewritten (then nothing is renamed)."""
    for path in agent_recordings(row):
        head = header_line(path)  # the agent's by its name alone (not by folder or uid)
        if path.parent.name != row.uid and not head.get("agent_uid") \
                and head.get("agent") == row.name:
            stamp_uid(path, row.uid)


def agent_bases(row: AgentRow) -> list[Path]:
    """The base snapshots of the agent: in its folder, and any its recordings name."""
    found = set()
    folder = config.recordings_dir() / row.uid / BASES if row.uid else None
    if folder is not None and folder.is_dir():
        found |= set(folder.glob("*.db"))
    for path in agent_recordings(row):
        base = _header_base(path)
        if base is not None and base.is_file():
            found.add(base)
    return sorted(found)


def _header_base(path: Path) -> Path | None:
    name = header_line(path).get("base")
    return path.parent / str(name) if name else None


@dataclass
class DeletedFiles:
    """What `delete_agent_files` removed."""

    recordings: list[Path] = field(default_factory=list)
    bases: list[Path] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    other: list[Path] = field(default_factory=list)  # lock files, leftovers in its folder


def delete_agent_files(row: AgentRow, data_dir: Path, *, lock: bool = True) -> DeletedFiles:
    """Delete every file of the agent: its recordings (wherever they are), their base
    snapshots, its recordings folder with anything left in it, and (`lock`) its lock file,
    which a caller deleting the agent's rows afterwards keeps until they are gone: without
    it, another process could lock the agent anew meanwhile."""
    out = DeletedFiles(agent_recordings(row), agent_bases(row))
    for path in out.recordings + out.bases:
        path.unlink(missing_ok=True)
    folder = config.recordings_dir() / row.uid if row.uid else None
    if folder is not None and folder.is_dir():
        out.other += [p for p in folder.rglob("*") if p.is_file()]
        shutil.rmtree(folder, ignore_errors=True)
        out.folders.append(folder)
    path = locking.lock_path(data_dir, row.name)
    if lock and path.exists():
        path.unlink(missing_ok=True)
        out.other.append(path)
    return out


def exported_secret(text: str) -> str | None:
    """The name of the env var whose API key appears in `text`, if any (defence in depth:
    keys are never stored, but a user might have pasted one into a message)."""
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        value = os.environ.get(var)
        if value and len(value) >= 8 and value in text:
            return var
    return None

"""What every store backend shares: its error types, the agent record, and the `Store`
protocol, which lists exactly the store methods the engine, the terminal and the lab call.

Two backends conform: `sqlite.store.SQLiteStore` (one file per data dir, the default) and
`postgres.store.PostgresStore` (one database for many machines), both the one store of
`sql.SQLStore` over their own database. `open_store` in this package's `__init__` picks one.
Behind the protocol both keep the same promises: every read and write is scoped by agent;
methods commit on their own unless called inside `transaction()`, whose nested uses join the
outermost one; every write bumps the agent's revision and stamps the rows it changed,
deletions leave tombstones (recordings carry deltas, see `snapshot.py`); search ranks alike
(the same words, the same BM25; see docs/postgres.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import (
    Block,
    Conversation,
    Message,
    PassageVersion,
    PoppedTurns,
    SearchHit,
    SearchPage,
)



class StoreError(Exception):
    """The data file cannot be used; the message is one clear sentence for the user."""


def upgrade_under_a_chat(where: str, holder: str) -> StoreError:
    """The refusal to upgrade a database while an older version's chat has an agent of it
    open (that chat would go on writing in the old shape), for both backends. `holder`
    names the process as the backend can ("pid 4242"), or is empty."""
    who = f" ({holder})" if holder else ""
    return StoreError(f"{where} is from an older memgpt-lite and must be upgraded, but "
                      f"another memgpt-lite process{who} still has an agent of it open; close "
                      "that chat (an older version's), then run this command again. Nothing "
                      "was changed.")


class ConnectionLost(StoreError):
    """The database server went away under the store (a restart, a network cut): its
    connection is gone, not its data. `reopen()` may connect again once the server is back;
    the store itself answers nothing more."""


class StoreBusy(StoreError):
    """Another process held the database's write lock for longer than a write waits for it
    (SQLite's busy timeout, Postgres's lock timeout). Nothing of the failed write was kept;
    the same write works once the other process is done."""


class AgentExists(StoreError):
    """`create_agent`: the name is taken, perhaps by another process a moment ago (a chat
    and an MCP server starting at once on a new name): whoever meant "open it, creating it
    if missing" opens it."""


class IntegrityProblem(StoreError):
    """A write broke one of the schema's rules (a block label given twice, a name taken);
    imports turn it into "the export is damaged". `detail`: the database's own words."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


class BlockChanged(ValueError):
    """A block changed between reading it and writing it (another agent shares it): the
    write was refused so that the other edit is not lost. One sentence for the user."""


@dataclass
class AgentRow:
    id: int
    name: str
    model: str
    settings: dict
    summary: str
    created_at: str
    last_used_at: str | None
    uid: str = ""  # stable across renames; recordings live under it
    state: dict = field(default_factory=dict)  # what the engine learned (see Agent)


@dataclass
class AgentWatch:
    """What a recording of one agent must learn about state it does not own alone (see
    recording.py): `changed(label, value)` hears every read of a block whose value was
    written elsewhere (another agent sharing it, another process serving this agent) since
    this agent last read or wrote it through this store; `passage_ids` and `message_ids`
    collect the ids given to the agent's new passages and messages (in SQLite ids are
    global to the data dir: other agents' rows decide them)."""

    seen: dict[str, str]
    changed: Callable[[str, str], None]
    passage_ids: list[int] = field(default_factory=list)
    message_ids: list[int] = field(default_factory=list)
    # Whether a message id skipped past the agent's own (another agent's rows in between):
    # only then does a replay, which holds this agent's rows alone, need to be told them.
    message_ids_jumped: bool = False


@dataclass
class ForgetIntent:
    """A forget written down before it started (see engine/privacy.py and store/forget.py)."""

    id: int
    agent_id: int
    agent_uid: str
    matcher: Matcher | None  # None: its query cannot be read back (see `unreadable`)
    stage: str
    created_at: str
    unreadable: str = ""  # why, in one sentence


@dataclass
class Unit:
    """One thing a forget changes (see store/scrub.py: its places find and change them)."""

    place: str
    key: int | str  # a row id, or a block's label
    action: str  # DELETE, REDACT or LINES
    text: str  # the unit's text, for the preview
    lines: list[str] = field(default_factory=list)  # LINES: the lines that go
    turn_id: int | None = None
    role: str | None = None
    project: str | None = None  # project memory: the project's root

    def to_dict(self) -> dict[str, Any]:
        out = {"place": self.place, "id": self.key, "action": self.action, "text": self.text}
        if self.lines:
            out["lines"] = self.lines
        if self.project is not None:
            out["project"] = self.project
        if self.turn_id is not None:
            out.update(turn=self.turn_id, role=self.role)
        return out


class AgentLockLike(Protocol):
    """One agent's process lock (see `locking.AgentLock`)."""

    def acquire(self, wait: float = ...) -> Any: ...
    def release(self) -> None: ...
    def renew(self, wait: float = ...) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Store(Protocol):
    """The persistent memory of agents. See the module docstring for the shared promises."""

    # ---------------------------------------------------------------- the store itself
    @property
    def location(self) -> str:
        """Where the data lives, for people: a file path or a URL without its password."""
        ...

    @property
    def damage(self) -> StoreError | None:
        """The error of damage met in the data, if any (the store then writes no more)."""
        ...

    def reopen(self) -> Store:
        """Another store on the same data, with a connection of its own (threads)."""
        ...

    def agent_lock(self, name: str) -> AgentLockLike:
        """The lock that keeps an agent to one process at a time (not yet taken)."""
        ...

    def close(self) -> None: ...
    def __enter__(self) -> Store: ...
    def __exit__(self, *exc: object) -> None: ...
    def transaction(self) -> AbstractContextManager[None]: ...
    def applied_migrations(self) -> list[str]: ...
    def schema_version(self) -> int: ...
    def integrity_problems(self) -> list[str]: ...
    def disk_bytes(self) -> int:
        """What the store's data takes on disk now (benchmarks)."""
        ...

    def rebuild_search_index(self, on_agent: Callable[[str], None] | None = None) -> None: ...

    # ---------------------------------------------------------------- agents
    def create_agent(self, name: str, settings: dict,
                     blocks: dict[str, tuple[str, int]]) -> AgentRow: ...
    def create_agent_once(self, name: str, settings: dict,
                          blocks: dict[str, tuple[str, int]]) -> tuple[AgentRow, bool]:
        """The agent, created unless another process has (AgentExists), and whether this
        call created it."""
        ...

    def get_agent(self, name: str) -> AgentRow | None: ...
    def get_agent_by_id(self, agent_id: int) -> AgentRow | None: ...
    def renamed_agent(self, name: str) -> AgentRow | None:
        """The agent once named `name` and renamed since, while no agent has that name."""
        ...
    def list_agents(self) -> list[AgentRow]: ...
    def agent_stats(self, agent_id: int) -> dict: ...
    def revision(self, agent_id: int) -> int: ...
    def update_settings(self, agent_id: int, settings: dict) -> None: ...
    def set_summary(self, agent_id: int, summary: str) -> None: ...
    def set_state(self, agent_id: int, state: dict) -> None: ...
    def restore_agent(self, agent_id: int, *, summary: str, created_at: str,
                      last_used_at: str | None, state: dict | None = None) -> None: ...
    def touch(self, agent_id: int) -> None: ...
    def rename_agent(self, old: str, new: str) -> None: ...
    def delete_agent(self, name: str) -> None: ...

    # ---------------------------------------------------------------- conversations
    def current_conversation(self, agent_id: int) -> int:
        """The conversation this process works in (chosen, else the most recent)."""
        ...

    def start_conversation(self, agent_id: int, at: str | None = None) -> Conversation: ...
    def use_conversation(self, agent_id: int, conversation_id: int) -> Conversation:
        """StoreError (one sentence) when the agent has no such conversation."""
        ...

    def conversation(self, agent_id: int,
                     conversation_id: int | None = None) -> Conversation | None: ...
    def conversations(self, agent_id: int) -> list[Conversation]: ...
    def conversation_state(self, agent_id: int) -> dict: ...
    def set_conversation_state(self, agent_id: int, state: dict) -> None: ...
    def set_conversation_title(self, agent_id: int, conversation_id: int,
                               title: str) -> None: ...
    def restore_conversations(self, agent_id: int, rows: list[dict[str, Any]]) -> None: ...

    # ---------------------------------------------------------------- core memory
    def get_blocks(self, agent_id: int) -> list[Block]: ...
    def get_block(self, agent_id: int, label: str) -> Block | None: ...
    def set_block(self, agent_id: int, label: str, value: str, limit: int | None = None,
                  source: str = "tool", *, expected: str | None = None) -> Block:
        """Raises BlockChanged when `expected` is given and the block no longer holds it
        (another agent sharing it wrote since); ValueError over the limit."""
        ...

    def restore_blocks(self, agent_id: int, blocks: list[tuple[str, str, int]],
                       history: list[tuple[Any, ...]],
                       shared: tuple[str, ...] | list[str] = ()) -> list[str]: ...
    def block_history(self, agent_id: int, label: str | None = None) -> list[dict]: ...
    def block_versions(self, agent_id: int, label: str) -> list[dict]:
        """Every version of the block the agent sees as `label` (whichever its scope),
        oldest first, numbered from 1: version, created_at, agent, source, turn_id, value."""
        ...

    def shared_block_agents(self, label: str) -> list[str]: ...
    def shared_block(self, label: str) -> Block | None: ...
    def share_block(self, agent_id: int, label: str, *, source: str = "share",
                    default: tuple[str, int] = ("", 5000), keep: str = "shared",
                    expected: str | None = None) -> bool:
        """`keep`: shared, mine or both (see blocks.py); never loses either value."""
        ...

    def unshare_block(self, agent_id: int, label: str) -> bool: ...
    def apply_outside_edit(self, agent_id: int, label: str, value: str) -> None: ...
    def watch(self, agent_id: int, watch: AgentWatch) -> None:
        """Report reads of the agent's shared blocks that show another agent's edit, and the
        ids its new passages get, to `watch` (a recording)."""
        ...

    def unwatch(self, agent_id: int, watch: AgentWatch) -> None: ...

    # ---------------------------------------------------------------- project scope
    def use_project(self, agent_id: int, project: str | None,
                    default: tuple[str, int] = ...) -> None:
        """The agent sees the blocks of `project` (a root directory, see engine/project.py)
        after its own; `default` is the `project` block's (value, limit) until written."""
        ...

    def project_of(self, agent_id: int) -> str | None: ...
    def project_blocks(self, project: str) -> list[Block]: ...
    def project_roots(self) -> list[str]:
        """Every project root a block was written for, in order."""
        ...

    # ---------------------------------------------------------------- recall
    def add_message(self, agent_id: int, msg: Message) -> int: ...
    def add_messages(self, agent_id: int, msgs: list[Message]) -> None: ...
    def set_context_content(self, agent_id: int, message_id: int,
                            content: list[dict] | None) -> None: ...
    def set_in_context(self, agent_id: int, turn_ids: list[int], in_context: bool) -> None: ...
    def context_messages(self, agent_id: int,
                         conversation: int | None = None) -> list[Message]: ...
    def turn_messages(self, agent_id: int, turn_id: int) -> list[Message]: ...
    def all_messages(self, agent_id: int) -> list[Message]: ...
    def message_positions(self, agent_id: int) -> list[int]: ...
    def set_message_positions(self, agent_id: int, positions: dict[int, int]) -> None: ...
    def max_turn_id(self, agent_id: int, *, in_conversation: bool = False) -> int: ...
    def last_turn_ids(self, agent_id: int, n: int) -> list[int]: ...
    def search_messages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        start_date: str | None = None, end_date: str | None = None, *,
                        dense: dict[int, float] | None = None, keyword_weight: float = ...,
                        context: bool = True, leave_out: Collection[int] = (),
                        below: Collection[int] = (),
                        conversation: int | None = None,
                        reply_words: int = 1) -> SearchPage:
        """Every conversation's messages (or only `conversation`'s); hits name theirs.
        `leave_out`: ids never returned (the current turn); `below`: ids ranked after
        every other candidate (messages the model still sees in its context);
        `reply_words`: a hit's reply is the next message of at least that many words."""
        ...

    def replies(self, agent_id: int, ids: list[int],
                reply_words: int = 1) -> dict[int, list[SearchHit]]: ...

    # ---------------------------------------------------------------- archival
    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int: ...
    def search_passages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        tags: list[str] | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = ...) -> SearchPage: ...
    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9, *,
                       candidates: list[SearchHit] | None = None) -> SearchHit | None: ...
    def passage_candidates(self, agent_id: int, text: str) -> list[SearchHit]: ...
    def similar_passages(self, agent_id: int, text: str, limit: int = 3, *,
                         candidates: list[SearchHit] | None = None) -> list[SearchHit]: ...
    def list_passages(self, agent_id: int, limit: int | None = 50,
                      offset: int = 0) -> list[SearchHit]: ...
    def passage_turns(self, agent_id: int) -> list[int | None]: ...
    def count_passages(self, agent_id: int) -> int: ...
    def get_passage(self, agent_id: int, passage_id: int) -> SearchHit | None: ...
    def update_passage(self, agent_id: int, passage_id: int, text: str,
                       at: str | None = None) -> SearchHit: ...
    def retire_passage(self, agent_id: int, passage_id: int, reason: str,
                       at: str | None = None) -> SearchHit: ...
    def passage_versions(self, agent_id: int, *,
                         passage_ids: list[int] | None = None) -> list[PassageVersion]: ...
    def deleted_version(self, agent_id: int, passage_id: int) -> PassageVersion | None: ...
    def restore_passage_versions(self, agent_id: int, rows: list[dict[str, Any]],
                                 new_ids: dict[int, int]) -> None: ...

    # ---------------------------------------------------------------- forget
    def add_forget_intent(self, agent_id: int, agent_uid: str, matcher: Matcher) -> int: ...
    def forget_intents(self) -> list[ForgetIntent]: ...
    def drop_forget_intent(self, intent_id: int) -> None: ...
    def forget_units(self, agent_id: int, matcher: Matcher) -> list[Unit]:
        """What forgetting `matcher` changes in the agent's rows (store/scrub.py units)."""
        ...

    def forget_mark(self) -> tuple[int, ...]:
        """A value every write a forget could have to reach changes (see store/forget.py)."""
        ...

    def apply_forget(self, agent_id: int, units: list[Unit] | None, matcher: Matcher,
                     intent_id: int | None = None,
                     mark: tuple[int, ...] | None = None) -> list[Unit]:
        """Change the units (found anew when None, or when the store changed since `mark`)
        in one transaction; returns the units changed."""
        ...

    def wipe_freed(self) -> bool:
        """Leave no freed copy of deleted text where the backend can reach it (SQLite: the
        file and its WAL; Postgres: VACUUM); False when that could not be finished now."""
        ...

    # ---------------------------------------------------------------- turns
    def begin_turn(self, agent_id: int, user: Message,
                   replacing: list[int] | None = None) -> PoppedTurns: ...
    def commit_turn(self, agent_id: int, user: Message, rest: list[Message]) -> None: ...
    def undo_turn(self, agent_id: int, turn_id: int) -> None: ...
    def unfinished_turns(self, agent_id: int) -> list[int]: ...
    def pop_turns(self, agent_id: int, turn_ids: list[int]) -> PoppedTurns: ...

    # ---------------------------------------------------------------- vectors
    def texts_to_embed(self, agent_id: int, kind: str, model: str, *, limit: int = 256,
                       after_id: int = 0) -> list[tuple[int, str]]: ...
    def last_row_id(self, agent_id: int, kind: str) -> int: ...
    def put_vectors(self, agent_id: int, kind: str, model: str, ids: list[int],
                    rows: Any, texts: list[str] | None = None) -> int: ...
    def delete_vectors(self, agent_id: int, *, except_model: str | None = None,
                       except_dim: int | None = None) -> int: ...
    def vector_counts(self, agent_id: int, model: str | None) -> dict[str, dict[str, int]]: ...
    def vector_models(self, agent_id: int) -> dict[str, int]: ...
    def vector_dim(self, agent_id: int, model: str) -> int | None: ...
    def dense_scores(self, agent_id: int, kind: str, model: str, query: Any, *,
                     limit: int = ..., start_date: str | None = None,
                     end_date: str | None = None) -> dict[int, float]: ...

    # ---------------------------------------------------------------- snapshots
    def read_snapshot(self) -> AbstractContextManager[None]:
        """Every read inside sees one consistent state of the data (a base snapshot)."""
        ...

    def snapshot_rows(self, agent_id: int, table: str,
                      since: int | None = None) -> Iterator[dict[str, Any]]:
        """The agent's rows of one of tables.SNAPSHOT_TABLES (history tables: stamped after
        revision `since`, if given) with SQLite's columns and values, ordered by id."""
        ...

    def tombstones_since(self, agent_id: int, since: int) -> list[tuple[str, int]]: ...
    def count_changes(self, agent_id: int, since: int) -> int:
        """History rows and deletions stamped after revision `since`."""
        ...

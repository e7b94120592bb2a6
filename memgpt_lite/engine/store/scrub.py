"""Forgetting inside one agent's rows of a store file: which units match, and how each one
changes. The same code runs on the live store and on every base snapshot beside the
agent's recordings (store/snapshot.py), so a forget changes both alike.

A **unit** is what a user sees in the preview and what changes, nothing more:

* messages: a message whose text, tool input, tool result or folded/clipped copy matches
  is deleted; while it is in the queue (deleting it would break its turn or its tool
  pairing, and the API would refuse the next request) the matching text inside it becomes
  `[forgotten]` instead;
* passages: a passage whose text or a tag matches is deleted;
* passage history: an old version of a passage (replaced by `archival_update`, removed by
  `archival_delete`) whose text, a tag or the reason it was deleted with matches is deleted;
* core memory, summary: a line of a block, or a sentence of a conversation's running summary,
  is removed (a block in "user" scope is one row that several agents share: its line goes for
  all of them);
* project memory: a line of a block in "project" scope, whichever project (every agent
  working there sees it);
* conversation titles: a title the user gave a conversation goes (its name is its first
  words again);
* block history: the matching lines of an edit's old and new values are removed, the
  agent's own edits and every agent's edits of a block it sees with them (a project block,
  a user-scope block it shares, and what each agent sharing it saw before it joined), which
  their `core --history` lists and can restore.

Each place is an entry of `PLACES`; a table holding more agent text joins the reach with
one line, as `passage_history` does. A base snapshot written before a table existed simply
has no such units.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from memgpt_lite.engine.matching import FORGOTTEN, Matcher, fold, fold_trigger
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.search import index_text, plain_text
from memgpt_lite.engine.shrink import refold
from memgpt_lite.engine.store.base import Unit
from memgpt_lite.engine.store.core import KeywordIndex
from memgpt_lite.engine.store.database import Database, dumps

# Keys of content blocks that name structure, not what anyone said.
STRUCTURAL = frozenset({"type", "id", "tool_use_id", "name", "signature", "data",
                        "cache_control", "is_error"})
DELETE, REDACT, LINES = "delete", "redact", "remove lines"  # what becomes of a Unit


class Writer:
    """Changes to one agent's rows in one database. On the live store (an `index` given),
    changed rows are stamped with one new revision, deletions leave tombstones and the
    agent's keyword index follows (see store/core.py); a base snapshot has none of these."""

    def __init__(self, db: Database, agent_id: int, index: KeywordIndex | None = None):
        self.db, self.agent_id, self.index = db, agent_id, index
        self.live = index is not None
        self._rev: int | None = None
        self._revs: dict[int, int] = {}

    def rev(self) -> int:
        if self._rev is None:
            if self.live:
                self.db.execute("UPDATE agents SET rev = rev + 1 WHERE id = ?", (self.agent_id,))
            rows = self.db.query("SELECT rev FROM agents WHERE id = ?", (self.agent_id,))
            self._rev = rows[0][0] if rows else 0
        return self._rev

    def rev_of(self, agent_id: int) -> int:
        """The revision for a changed row of `agent_id`: another agent's row (its write to a
        shared or project block) moves that agent's revision, so its own deltas carry it."""
        if agent_id == self.agent_id:
            return self.rev()
        if agent_id not in self._revs:
            if self.live:
                self.db.execute("UPDATE agents SET rev = rev + 1 WHERE id = ?", (agent_id,))
            rows = self.db.query("SELECT rev FROM agents WHERE id = ?", (agent_id,))
            self._revs[agent_id] = rows[0][0] if rows else 0
        return self._revs[agent_id]

    def delete(self, table: str, ids: list[int], fts_kind: str | None = None) -> None:
        if not ids:
            return
        if fts_kind and self.index is not None:
            rows = [(i, t) for i in ids for (t,) in self.db.query(
                f"SELECT index_text FROM {table} WHERE agent_id = ? AND id = ?",
                (self.agent_id, i))]
            self.index.remove(fts_kind, self.agent_id, rows)
        self.db.executemany(f"DELETE FROM {table} WHERE id = ? AND agent_id = ?",
                            [(i, self.agent_id) for i in ids])
        if self.live:
            self.db.executemany("INSERT INTO tombstones (agent_id, kind, row_id, rev) "
                                "VALUES (?, ?, ?, ?)",
                                [(self.agent_id, table, i, self.rev()) for i in ids])

    def unindex(self, kind: str, row_id: int, old: str) -> None:
        """Before a row's text changes."""
        if self.index is not None:
            self.index.remove(kind, self.agent_id, [(row_id, old)])

    def reindex(self, kind: str, row_id: int, new: str) -> None:
        """After a row's text changed."""
        if self.index is not None:
            self.index.add(kind, self.agent_id, [(row_id, new)])

    def optimize(self) -> None:
        """Leave no index page holding a forgotten term (see KeywordIndex.optimize)."""
        if self.index is not None:
            self.index.optimize(self.agent_id)


class Place(Protocol):
    name: str
    tables: tuple[str, ...]  # where its units live (store/tables.py names the place back)

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]: ...

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None: ...


# --------------------------------------------------------------------------- probing


# Whitespace as a text column holds it: itself, or escaped inside JSON (\n, \u000b, …).
_SPACE = r"(?:\s|\\(?:[nrtfb]|u00[01][0-9a-fA-F]))+"


def probe(db: Database, matcher: Matcher) -> Callable[[str], str]:
    """SQL over a column that is true for stored text (JSON or not) that may hold a match,
    so that only those rows are decoded (see `Database.text_filter`)."""
    return db.text_filter(_prober(probe_pattern(matcher)))


@dataclass(frozen=True)
class Probe:
    """What every stored form of a match fits (see `probe_pattern`)."""

    needle: re.Pattern[str]
    query: str

    @functools.cached_property
    def trigger(self) -> frozenset[str]:
        """Stored characters that may fold into a match (made when first needed: most
        stores never need it, and it costs a pass over Unicode once)."""
        return fold_trigger(self.query)

    def could_hold(self, text: str) -> bool:
        """Whether `text` may hold a match: as stored, or in the form the matcher compares
        (an accent written apart, a full-width letter; see matching.py). Only a text with
        a character that may fold into a match is folded: the probe sees every row."""
        if self.needle.search(text) is not None:
            return True
        if text.isascii() or self.trigger.isdisjoint(text):
            return False
        folded = fold(text)
        return folded is not text and self.needle.search(folded) is not None


def probe_pattern(matcher: Matcher) -> Probe | None:
    """What every stored form of a match fits (None: anything may match, a regex): each
    word as written or as JSON escapes it, with the matcher's rule for case; a phrase's
    words in order, apart by whitespace written either way. The words are in the matcher's
    Unicode form; stored text is checked in it too (`Probe.could_hold`)."""
    if matcher.mode == "regex":
        return None
    words = [_forms(w) for w in fold(matcher.query).split()]
    body = _SPACE.join(words) if matcher.mode == "phrase" else "|".join(words)
    return Probe(re.compile(body, re.IGNORECASE), matcher.query)


def _forms(word: str) -> str:
    forms = {word, json.dumps(word, ensure_ascii=False)[1:-1]}
    return "(?:" + "|".join(map(re.escape, sorted(forms))) + ")"


def could_hold(probe: Probe | None, text: str) -> bool:
    return probe is None or probe.could_hold(text)


def _prober(probe: Probe | None) -> Callable[[object], bool]:
    def forget_probe(text: object) -> bool:
        return isinstance(text, str) and could_hold(probe, text)

    return forget_probe


def strings(value: Any) -> Iterator[str]:
    """The text inside a stored JSON value (content blocks, tool inputs, tags)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in STRUCTURAL:
                yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def replace_strings(value: Any, matcher: Matcher) -> Any:
    if isinstance(value, str):
        return matcher.replace(value)
    if isinstance(value, dict):
        return {k: v if k in STRUCTURAL else replace_strings(v, matcher) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_strings(v, matcher) for v in value]
    return value


# --------------------------------------------------------------------------- messages


class MessagePlace:
    """Messages: deleted, or redacted inside while they are in the queue."""

    name = "messages"
    tables = ("messages",)

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        fn = probe(db, matcher)
        # A base snapshot written before turns had a status has no such column.
        status = "status" if "status" in db.columns("messages") else "''"
        units = []
        for row in db.query(
                f"SELECT id, turn_id, role, content, context_content, in_context, {status} "
                f"FROM messages WHERE agent_id = ? AND ({fn('content')} OR "
                f"{fn('context_content')}) ORDER BY id", (agent_id,)):
            content = json.loads(row[3])
            context = None if row[4] is None else json.loads(row[4])
            texts = [s for s in (*strings(content), *strings(context)) if matcher.hits(s)]
            if not texts:
                continue
            keep = bool(row[5]) or row[6] == "open"  # the queue (or a running turn) needs it
            units.append(Unit(self.name, row[0], REDACT if keep else DELETE,
                              "\n".join(dict.fromkeys(texts)), turn_id=row[1], role=row[2]))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        w.delete("messages", [u.key for u in units if u.action == DELETE], "messages")
        for unit in units:
            if unit.action == REDACT:
                self._redact(w, int(unit.key), matcher)

    def _redact(self, w: Writer, message_id: int, matcher: Matcher) -> None:
        rows = w.db.query("SELECT role, content, context_content, index_text FROM messages "
                          "WHERE id = ? AND agent_id = ?", (message_id, w.agent_id))
        if not rows:
            return
        row = rows[0]
        content = json.loads(row[1])
        context = None if row[2] is None else json.loads(row[2])
        new_content, new_context = redact_message(content, context, matcher)
        indexed = index_text(w.db.text(plain_text(row[0], new_content)))
        w.unindex("messages", message_id, row[3])
        w.db.execute("UPDATE messages SET content = ?, context_content = ?, index_text = ?, "
                     "rev = ? WHERE id = ? AND agent_id = ?",
                     (dumps(new_content), None if new_context is None else dumps(new_context),
                      indexed, w.rev(), message_id, w.agent_id))
        w.reindex("messages", message_id, indexed)


def redact_message(content: list[dict[str, Any]], context: list[dict[str, Any]] | None,
                   matcher: Matcher) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A message's content (and the copy the queue sends, if folded or clipped) with every
    match replaced by the [forgotten] marker. A thinking block that matches is dropped:
    its signature covers its exact text, so an edited one would be refused."""
    new = _without_matching_thinking(content, matcher)
    if context is None:
        return new, None
    if len(context) != len(content):  # not a block-for-block copy of the content
        return new, _without_matching_thinking(context, matcher)
    pairs = [(c, o) for c, o in zip(context, content) if not _thinks(o, matcher)]
    return new, [_pair(c, o, matcher) for c, o in pairs] or new


def _thinks(block: dict[str, Any], matcher: Matcher) -> bool:
    return block.get("type") == "thinking" and matcher.hits(str(block.get("thinking") or ""))


def _without_matching_thinking(blocks: list[dict[str, Any]],
                               matcher: Matcher) -> list[dict[str, Any]]:
    kept = [replace_strings(b, matcher) for b in blocks if not _thinks(b, matcher)]
    return kept or [{"type": "text", "text": FORGOTTEN}]


def _pair(sent: Any, original: Any, matcher: Matcher) -> Any:
    """`sent` (what the queue sends) redacted knowing the `original` it was cut from: a fold
    is made anew from the redacted original, and a match cut in half by a clip loses the
    half that is still shown."""
    if isinstance(sent, str) and isinstance(original, str):
        if sent == original:
            return matcher.replace(sent)
        redacted = matcher.replace(original)
        if redacted != original:
            again = refold(sent, redacted)
            if again is not None:
                return again
        return matcher.replace(_cut_half_matches(sent, original, matcher))
    if isinstance(sent, dict) and isinstance(original, dict):
        return {k: v if k in STRUCTURAL else _pair(v, original.get(k), matcher)
                for k, v in sent.items()}
    if isinstance(sent, list) and isinstance(original, list) and len(sent) == len(original):
        return [_pair(s, o, matcher) for s, o in zip(sent, original)]
    return replace_strings(sent, matcher)


def _cut_half_matches(sent: str, original: str, matcher: Matcher) -> str:
    shared = 0
    for a, b in zip(sent, original):
        if a != b:
            break
        shared += 1
    for start, end in matcher.spans(original):
        if start < shared < end:  # the clip kept the start of this match
            return sent[:start] + FORGOTTEN + sent[shared:]
    return sent


# --------------------------------------------------------------------------- rows


class RowPlace:
    """Rows deleted whole when one of their text columns matches (JSON columns: any string
    inside): passages, and the older versions of passages."""

    def __init__(self, table: str, name: str, columns: tuple[str, ...],
                 json_columns: tuple[str, ...] = (), fts_kind: str | None = None):
        self.table, self.name, self.columns = table, name, columns
        self.tables = (table,)
        self.json_columns, self.fts_kind = json_columns, fts_kind

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        if not db.columns(self.table):  # a base snapshot from before the table existed
            return []
        fn = probe(db, matcher)
        where = " OR ".join(fn(c) for c in self.columns)
        units = []
        for row in db.query(f"SELECT id, {', '.join(self.columns)} FROM {self.table} "
                              f"WHERE agent_id = ? AND ({where}) ORDER BY id", (agent_id,)):
            texts = [s for col, value in zip(self.columns, row[1:])
                     for s in strings(json.loads(value) if col in self.json_columns else value)]
            if any(matcher.hits(t) for t in texts):
                units.append(Unit(self.name, row[0], DELETE, " · ".join(t for t in texts if t)))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        w.delete(self.table, [int(u.key) for u in units], self.fts_kind)


# --------------------------------------------------------------------------- lines


class BlockPlace:
    """Lines of core memory blocks (always current: no revision, no history row). A block
    in user scope lives in `shared_blocks`; the agent's row only points at it."""

    name = "core memory"
    tables = ("blocks", "shared_blocks")

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        units = []
        for label, value in db.query(_block_select(db) + "WHERE b.agent_id = ? ORDER BY b.id",
                                       (agent_id,)):
            left, gone = matcher.drop_lines(value)
            if gone:
                units.append(Unit(self.name, label, LINES, left, lines=gone))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        shared = "shared_id" in w.db.columns("blocks") and bool(w.db.columns("shared_blocks"))
        for unit in units:
            rows = w.db.query(_block_select(w.db) + "WHERE b.agent_id = ? AND b.label = ?",
                              (w.agent_id, unit.key))
            value = matcher.drop_lines(rows[0][1] if rows else "")[0]
            sid = w.db.query("SELECT shared_id FROM blocks WHERE agent_id = ? AND label = ?",
                             (w.agent_id, unit.key)) if shared else []
            if sid and sid[0][0] is not None:
                w.db.execute("UPDATE shared_blocks SET value = ?, updated_at = ?, "
                             "version = version + 1 WHERE id = ?", (value, now_iso(), sid[0][0]))
            else:
                w.db.execute("UPDATE blocks SET value = ?, updated_at = ? WHERE agent_id = ? "
                             "AND label = ?", (value, now_iso(), w.agent_id, unit.key))


def _block_select(db: Database) -> str:
    """Each block's label and value, wherever the value lives (see store/blocks.py)."""
    if "shared_id" in db.columns("blocks") and db.columns("shared_blocks"):
        return ("SELECT b.label, coalesce(s.value, b.value) FROM blocks b "
                "LEFT JOIN shared_blocks s ON s.id = b.shared_id ")
    return "SELECT b.label, b.value FROM blocks b "


class SummaryPlace:
    """Sentences of the running summaries (each conversation's, sent with its requests; a
    base snapshot written before conversations holds it on the agent's row): the summariser
    writes one paragraph, so its line would be the whole summary, unrelated facts included."""

    name = "summary"
    tables = ("agents", "conversations")

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        rows = [("summary", r[0]) for r in db.query("SELECT summary FROM agents WHERE id = ?",
                                                    (agent_id,))]
        if db.columns("conversations"):
            rows += db.query("SELECT id, summary FROM conversations WHERE agent_id = ? "
                             "ORDER BY id", (agent_id,))
        units = []
        for key, summary in rows:
            left, gone = matcher.drop_sentences(summary or "")
            if gone:
                units.append(Unit(self.name, key, LINES, left, lines=gone))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        for unit in units:
            if unit.key == "summary":
                ((summary,),) = w.db.query("SELECT summary FROM agents WHERE id = ?",
                                           (w.agent_id,))
                w.db.execute("UPDATE agents SET summary = ? WHERE id = ?",
                             (matcher.drop_sentences(summary)[0], w.agent_id))
                continue
            for (summary,) in w.db.query("SELECT summary FROM conversations WHERE agent_id = ? "
                                         "AND id = ?", (w.agent_id, unit.key)):
                w.db.execute("UPDATE conversations SET summary = ?, rev = ? WHERE agent_id = ? "
                             "AND id = ?", (matcher.drop_sentences(summary)[0], w.rev(),
                                            w.agent_id, unit.key))


class TitlePlace:
    """The titles the user gave conversations (`/title`): a matching one goes."""

    name = "conversation titles"
    tables = ("conversations",)

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        if not db.columns("conversations"):
            return []
        return [Unit(self.name, cid, DELETE, title) for cid, title in db.query(
            "SELECT id, title FROM conversations WHERE agent_id = ? AND title != '' ORDER BY id",
            (agent_id,)) if matcher.hits(title)]

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        w.db.executemany("UPDATE conversations SET title = '', rev = ? WHERE agent_id = ? AND "
                         "id = ?", [(w.rev(), w.agent_id, u.key) for u in units])


class ProjectBlockPlace:
    """Lines of the blocks in project scope, of every project: every agent working in a
    project sees its blocks, so a forget reaches them all."""

    name = "project memory"
    tables = ("project_blocks",)

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        if not db.columns("project_blocks"):
            return []
        units = []
        for row_id, project, label, value in db.query(
                "SELECT id, project, label, value FROM project_blocks ORDER BY id"):
            gone = matcher.drop_lines(value)[1]
            if gone:
                units.append(Unit(self.name, row_id, LINES, f"{label!r} of {project}",
                                  lines=gone, project=project))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        for unit in units:
            for (value,) in w.db.query("SELECT value FROM project_blocks WHERE id = ?",
                                       (unit.key,)):
                w.db.execute("UPDATE project_blocks SET value = ?, updated_at = ?, version = "
                             "version + 1 WHERE id = ?",
                             (matcher.drop_lines(value)[0], now_iso(), unit.key))


class BlockHistoryPlace:
    """The old and new values kept for every core memory edit (exports and recordings
    carry them): their matching lines go."""

    name = "block history"
    tables = ("block_history",)

    def find(self, db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
        fn = probe(db, matcher)
        reach, params = _history_reach(db, agent_id)
        units = []
        for row_id, owner, label, old, new in db.query(
                f"SELECT id, agent_id, label, old_value, new_value FROM block_history WHERE "
                f"{reach} AND ({fn('old_value')} OR {fn('new_value')}) ORDER BY agent_id, id",
                params):
            gone = matcher.drop_lines(old or "")[1] + matcher.drop_lines(new)[1]
            if gone:
                # Row ids are the agent's own on Postgres: another agent's row is named with it.
                key = row_id if owner == agent_id else f"{owner}:{row_id}"
                units.append(Unit(self.name, key, LINES, label, lines=list(dict.fromkeys(gone))))
        return units

    def apply(self, w: Writer, units: list[Unit], matcher: Matcher) -> None:
        for unit in units:
            owner, row_id = (w.agent_id, unit.key) if isinstance(unit.key, int) else map(
                int, str(unit.key).split(":"))
            rows = w.db.query("SELECT old_value, new_value FROM block_history WHERE id = ? "
                              "AND agent_id = ?", (row_id, owner))
            for row in rows:
                old = None if row[0] is None else matcher.drop_lines(row[0])[0]
                w.db.execute("UPDATE block_history SET old_value = ?, new_value = ?, rev = ? "
                             "WHERE id = ? AND agent_id = ?",
                             (old, matcher.drop_lines(row[1])[0], w.rev_of(owner), row_id,
                              owner))


def _history_reach(db: Database, agent_id: int) -> tuple[str, tuple[Any, ...]]:
    """Which block_history rows the agent's forget reaches: its own, and every agent's writes
    to a block it sees with them (a project block, a user-scope block it shares), since its
    `core --history` lists those and `core --restore` would bring a forgotten line back.
    Of a user-scope block, also the own rows of every agent sharing it now (what it saw
    before it joined, and the shared value it joined): that agent's `core --history` lists
    them as versions of the shared block, and restoring one writes the block all of them
    see (store/blocks.py, block_versions)."""
    if "scope" not in db.columns("block_history") or "shared_id" not in db.columns("blocks"):
        # a base snapshot from before scopes
        return "agent_id = ?", (agent_id,)
    return ("(agent_id = ? OR scope = 'project' OR (label IN (SELECT label FROM blocks WHERE "
            "agent_id = ? AND shared_id IS NOT NULL) AND (scope = 'user' OR (scope = 'agent' "
            "AND EXISTS (SELECT 1 FROM blocks j WHERE j.agent_id = block_history.agent_id AND "
            "j.label = block_history.label AND j.shared_id IS NOT NULL)))))",
            (agent_id, agent_id))


PLACES: list[Place] = [
    MessagePlace(),
    RowPlace("passages", "passages", ("text", "tags"), ("tags",), "passages"),
    # A deleted passage's version keeps the model's reason (shown to it again if it names
    # the passage, and exported): a reason that names the forgotten text is the text too.
    RowPlace("passage_history", "passage history", ("text", "tags", "reason"), ("tags",)),
    BlockPlace(),
    ProjectBlockPlace(),
    SummaryPlace(),
    TitlePlace(),
    BlockHistoryPlace(),
]


def find_units(db: Database, agent_id: int, matcher: Matcher) -> list[Unit]:
    """Every unit the matcher changes in the agent's rows, place by place."""
    return [u for place in PLACES for u in place.find(db, agent_id, matcher)]


def apply_units(w: Writer, units: list[Unit], matcher: Matcher) -> None:
    """Change exactly `units` (call inside a transaction)."""
    for place in PLACES:
        mine = [u for u in units if u.place == place.name]
        if mine:
            place.apply(w, mine, matcher)
    w.optimize()

"""Static rendering: the console factory and every printer that shows a finished result.

Core memory, agents, search pages, the context ledger, token usage and forget matches (for
the chat's slash commands and the CLI alike); the sessions table, the replay and demo headers,
the replay report with the final core memory (the eval's tables are in eval_render.py).
Printers take a console and the data (or the store to read it from) and decide
nothing. Live rendering of event streams (the chat's turns, a replay as it runs) is in view.py.

Everything that came from a user, a model or a file reaches the terminal through `shown` (a
rich Text, never parsed as markup) or `visible` (plain str): control characters other than
newline and tab are made visible, so stored text cannot move the cursor, clear the screen,
set the title or write the clipboard. That is why it is one module of just over 600 lines:
the printers of finished results stay beside the two functions all of them must go through.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memgpt_lite.engine.matching import REGEX_SECONDS
from memgpt_lite.engine.turns import turn_ranges

if TYPE_CHECKING:  # types only: `agents list` need not load the replay or privacy modules
    from memgpt_lite.engine.privacy import ForgetPlan, ForgetResult
    from memgpt_lite.engine.records import Usage
    from memgpt_lite.engine.replay import ReplayReport
    from memgpt_lite.engine.tally import Tally


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that can
# make text read differently from what it is.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode control pictures: ␛ for ESC, ␇ for BEL
    if code == 0x7F:
        return "\u2421"  # ␡
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # a byte that is not UTF-8 (a path, an argument)
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"  # a lone surrogate cannot be written as UTF-8
    return f"<U+{code:04X}>"


def visible(text: object) -> str:
    """`text` with every control character other than newline and tab made visible."""
    return _UNSAFE.sub(_picture, str(text))


def clip(text: str, columns: int) -> str:
    """One line of at most `columns` terminal cells, with an ellipsis when cut: a Chinese
    or Japanese character takes two cells, so a row cut by characters ran twice as wide."""
    flat = " ".join(text.split())
    if cell_len(flat) <= columns:
        return flat
    return set_cell_size(flat, columns - 1).rstrip() + "…"


def shown(text: object, style: str = "") -> Text:
    """Stored or received text as a rich Text: never read as markup, controls made visible."""
    return Text(visible(text), style=style)


def make_console(file: Any = None, *, plain: bool | None = None, width: int | None = None,
                 wrap: bool = False) -> Console:
    """The console the terminal prints to: styled on a terminal, plain (no colour, 100
    columns unless `width` says otherwise) when output is not a terminal.

    Plain lines stay whole by default, so a reply or a path copies as written. `wrap` is for
    replay, demo, eval and sessions: their plain lines wrap at the width so tables and panels
    keep their shape, and the console follows sys.stdout when it is swapped (file None)."""
    stream = file if file is not None else sys.stdout
    if plain is None:
        plain = not _isatty(stream)
    if wrap and not plain:
        return Console(file=file, highlight=False, width=width)
    if plain:  # piped: lines end where the text ends (no padding) and are not cut at the width
        target = _FollowStdout() if file is None and wrap else stream
        # force_terminal: rich takes FORCE_COLOR (or TTY_COMPATIBLE) for a terminal, and a
        # pipe then got spinners and progress bars drawn with cursor codes.
        return _PlainConsole(file=StrippedLines(target), color_system=None, no_color=True,
                             highlight=False, emoji=False, soft_wrap=True, width=width or 100,
                             force_terminal=_isatty(target))
    if width is None and dumb_terminal():
        return Console(file=stream, highlight=False, **_dumb_size(stream))
    return Console(file=stream, highlight=False, width=width)


class _PlainConsole(Console):
    """The piped console: a table keeps its natural width. On a terminal rich fits a table
    to the screen; in a file or a CI log a cell cut to "…" is a figure or a label lost, and
    nothing there wraps a long line for the reader."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        unbounded = self.options.update(max_width=10_000)  # a measure is capped at the width
        widest = max((self.measure(o, options=unbounded).maximum for o in objects
                      if isinstance(o, Table)), default=0)
        if widest <= self.width:
            super().print(*objects, **kwargs)
            return
        kept = self.width
        self.width = widest
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = kept


def dumb_terminal() -> bool:
    """TERM=dumb (Emacs' shell, some IDE consoles): a terminal that takes no escape codes."""
    import os

    return os.environ.get("TERM", "").lower() in ("dumb", "unknown")


def _dumb_size(stream: Any) -> dict[str, int]:
    """The size a dumb terminal really has: rich takes every dumb terminal for 80 columns,
    so a narrower one wrapped each padded line onto a second row."""
    import os

    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return {}
    return {"width": size.columns, "height": size.lines} if size.columns else {}


class _FollowStdout:
    """Writes to whatever sys.stdout is at the time (a test may swap it)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return _isatty(sys.stdout)


class StrippedLines:
    """A text file that drops the spaces at the end of every line: rich pads tables and
    panels to the width, and piped output (a file, a diff, a grep) is better without them.
    Spaces not yet followed by a line end are held back until it is known whether one
    comes (a streamed reply may end a chunk with a space)."""

    def __init__(self, file: Any):
        self.file = file
        self._held = ""

    def write(self, text: str) -> int:
        text = self._held + text
        lines = text.split("\n")
        last = lines.pop()
        body = "".join(line.rstrip(" ") + "\n" for line in lines)
        kept = last.rstrip(" ")
        self._held = last[len(kept):]
        self.file.write(body + kept)
        return len(text)

    def flush(self) -> None:
        self.file.flush()

    def isatty(self) -> bool:
        return _isatty(self.file)

    def fileno(self) -> int:
        return self.file.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def print_error(console: Console, message: str) -> None:
    """One line "memgpt-lite: message" in bold red on stderr, as every command's errors (so
    `replay … > out.txt` or a pipe shows it): how replay, demo and eval fail. `console` is
    the command's own: a terminal one gets a terminal console for stderr, in colour."""
    err = make_console(file=sys.stderr, plain=None if console.is_terminal else True)
    err.print(shown(f"memgpt-lite: {message}", "bold red"))


def bar(fraction: float, width: int = 10) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "▰" * filled + "▱" * (width - filled)


def cost_text(cost: float, unpriced: set[str] | frozenset[str] = frozenset()) -> str:
    """A cost, naming the models with no price, whose calls it leaves out (never guessed)."""
    names = ", ".join(visible(clip(name, 60)) for name in sorted(unpriced))
    return f"${cost:.4f}" + (f" + unknown (no price for {names}; see MEMGPT_LITE_PRICES)"
                             if names else "")


def cache_hit(usage: Usage) -> float:
    total = usage.total_input
    return usage.cache_read_input_tokens / total if total else 0.0


def _when(stamp: str | None) -> str:
    if not stamp:
        return "never"
    return stamp.replace("T", " ").rstrip("Z")[:16]


# --------------------------------------------------------------------------- agents and memory


def print_core_blocks(console: Console, blocks: list[Any],
                      shared_by: Callable[[str], list[str]] | None = None) -> None:
    """Every block: label, used/limit chars, scope, value. `shared_by(label)` names the
    agents sharing a user-scope block."""
    if not blocks:
        console.print("(no core memory blocks)")
        return
    for i, block in enumerate(blocks):
        if i:
            console.print()
        console.print(shown(f"{block.label}  {block.used:,}/{block.limit:,} chars · "
                            f"{_scope(block, shared_by)}", "bold"))
        console.print(shown(block.value or "(empty)"), soft_wrap=False)


def _scope(block: Any, shared_by: Callable[[str], list[str]] | None) -> str:
    scope = getattr(block, "scope", "agent")
    if scope == "project":
        return f"scope project {getattr(block, 'project', '')}"
    if scope != "user":
        return "scope agent"
    names = shared_by(block.label) if shared_by is not None else []
    return "scope user" + (f", shared by {', '.join(names)}" if names else "")


def print_agents(console: Console, store: Any) -> None:
    rows = store.list_agents()
    if not rows:
        console.print("No agents yet; `memgpt-lite chat` creates one.")
        return
    table = Table("name", "model", "turns", "messages", "passages", "last used",
                  box=None, pad_edge=False)
    for row in rows:
        stats = store.agent_stats(row.id)
        table.add_row(shown(row.name), shown(model_of(row)), f"{stats.get('turns', 0):,}",
                      f"{stats.get('messages', 0):,}", f"{stats.get('passages', 0):,}",
                      _when(stats.get("last_used_at") or row.last_used_at))
    console.print(table)


def model_of(row: Any) -> str:
    """The model the agent's next chat uses (its own, the environment's, the config file's
    or the default), whatever the row's model column says."""
    from memgpt_lite.engine.config import ConfigError, resolve_settings

    try:
        return resolve_settings(row.settings)[0].model
    except ConfigError:  # a bad variable or file is reported where it is used
        return row.model or "?"


def print_agent(console: Console, store: Any, row: Any,
                settings: list[tuple[str, Any, str]]) -> None:
    stats = store.agent_stats(row.id)
    console.print(shown(f"agent {row.name}", "bold"))
    console.print(shown(f"model {model_of(row)} · created {_when(row.created_at)} · last used "
                        f"{_when(stats.get('last_used_at') or row.last_used_at)}"))
    console.print(f"{stats.get('turns', 0):,} turns · {stats.get('messages', 0):,} messages · "
                  f"{stats.get('passages', 0):,} passages", markup=False)
    console.print()
    print_settings(console, settings)
    console.print()
    print_core_blocks(console, store.get_blocks(row.id), store.shared_block_agents)
    console.print()
    console.print(Text("summary", style="bold"))
    console.print(shown(row.summary or "(none yet)"))


def print_settings(console: Console, settings: list[tuple[str, Any, str]]) -> None:
    """The user-facing settings: name, value, and where the value came from."""
    table = Table(box=None, pad_edge=False)
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long path wraps whole, never cut with "…"
    table.add_column("from")
    for name, value, source in settings:
        table.add_row(name, shown(_setting_text(value)), source)
    console.print(table)


def _setting_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


def print_models(console: Console, rows: list[tuple[str, str, str, str, int]]) -> None:
    """Known models: id, aliases, input and output price per million tokens, max output."""
    table = Table("model", "aliases", "input $/Mtok", "output $/Mtok", "max output tokens",
                  box=None, pad_edge=False)
    for model, aliases, inp, out, max_out in rows:
        table.add_row(shown(model), shown(aliases), inp, out, f"{max_out:,}" if max_out else "?")
    console.print(table)


def print_search_page(console: Console, page: Any, what: str) -> None:
    if not page.total:
        console.print(f"no {what} found", markup=False)
        return
    console.print(f"page {page.page} of {page.pages}, {page.total} result"
                  f"{'s' if page.total != 1 else ''}", markup=False)
    for hit in page.hits:
        who = hit.role or ("[" + ", ".join(hit.tags) + "]" if hit.tags else "passage")
        who += " (interrupted)" if getattr(hit, "status", "") == "interrupted" else ""
        turn = f" turn {hit.turn_id}" if hit.turn_id is not None else ""
        console.print(shown(f"  #{hit.id}{turn} {_when(hit.created_at)} {who}: "
                            f"{clip(hit.text, 160)}"))


def print_newest_passages(console: Console, total: int, hits: list[Any]) -> None:
    """`/archival` without a query: how many passages there are, then the newest."""
    console.print(f"{total} passage{'s' if total != 1 else ''} in archival memory"
                  + (f"; the newest {len(hits)}:" if hits else ""), markup=False)
    for hit in hits:
        tags = f" [{', '.join(hit.tags)}]" if hit.tags else ""
        console.print(shown(f"  #{hit.id} {_when(hit.created_at)}{tags}: "
                            f"{clip(hit.text, 160)}"))


def print_context(console: Console, report: Any) -> None:
    used, budget = report.used_tokens, report.budget
    fraction = used / budget if budget else 0.0
    console.print(f"context {used:,}/{budget:,} tokens ({fraction:.0%}) {bar(fraction)}",
                  markup=False)
    table = Table("section", box=None, pad_edge=False)
    table.add_column("tokens", justify="right")
    for section, tokens in report.ledger.items():
        table.add_row(shown(section), f"{tokens:,}")
    console.print(table)
    turns = list(report.turns)
    console.print(f"queue: {len(turns)} turn{'s' if len(turns) != 1 else ''}", markup=False)
    for info in turns:
        console.print(shown(f"  turn {info.id} · {_when(info.created_at)} · {info.tokens:,} "
                            f"tokens · \"{clip(info.first_words, 60)}\""))
    console.print(shown("summary: " + (report.summary or "(none yet)")))


def print_tokens(console: Console, tally: Tally) -> None:
    """`/tokens`: every paid call of the session, the summariser's included."""
    usage, cost = tally.paid_usage, tally.paid_cost_usd
    console.print(f"session: {usage.input_tokens:,} input · "
                  f"{usage.cache_creation_input_tokens:,} cache write · "
                  f"{usage.cache_read_input_tokens:,} cache read · "
                  f"{usage.output_tokens:,} output tokens", markup=False)
    console.print(f"cache hit {cache_hit(usage):.0%} of {usage.total_input:,} input tokens · "
                  f"cost {cost_text(cost, tally.unpriced)}", markup=False)
    if tally.summary_calls:
        s = tally.summary_usage
        cost = cost_text(tally.summary_cost_usd, tally.unpriced_by_kind["summariser"])
        console.print(f"of which the summariser: {tally.summary_calls} call"
                      f"{'s' if tally.summary_calls != 1 else ''} · {s.total_input:,} input · "
                      f"{s.output_tokens:,} output tokens · {cost}", markup=False)


def print_cost(console: Console, tally: Tally) -> None:
    """`/cost`: the session's model calls by kind (chat, summariser), each with its tokens,
    cache share and cost, and the total."""
    rows = [(kind, calls, usage, cost) for kind, calls, usage, cost in tally.by_kind() if calls]
    if not rows:
        console.print("no model calls yet this session", markup=False)
        return
    table = Table("calls by kind", box=None, pad_edge=False)
    for name in ("calls", "input tokens", "from cache", "output tokens", "cost"):
        table.add_column(name, justify="right")
    total = tally.paid_usage
    unpriced = {**tally.unpriced_by_kind, "total": tally.unpriced}
    for kind, calls, usage, cost in rows + [("total", sum(r[1] for r in rows), total,
                                             tally.paid_cost_usd)]:
        table.add_row(kind, f"{calls:,}", f"{usage.total_input:,}", f"{cache_hit(usage):.0%}",
                      f"{usage.output_tokens:,}",
                      f"${cost:.4f}" + (" + unknown" if unpriced[kind] else ""))
    console.print(table)
    if tally.unpriced:
        console.print(f"cost {cost_text(tally.paid_cost_usd, tally.unpriced)}", markup=False)


PREVIEW_PER_PLACE = 20  # units listed per place before "… and N more" (--dry-run: all)
_UNITS = {"messages": "message", "passages": "passage", "core memory": "line",
          "summary": "sentence", "block history": "value", "base snapshots": "file",
          "recordings": "file", "input history": "line", "project memory": "line",
          "conversation titles": "title"}


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def print_forget_plan(console: Console, plan: ForgetPlan, *, full: bool = False) -> None:
    """The forget preview: counts per place, then every unit that changes (up to
    PREVIEW_PER_PLACE per place unless `full`; never a silent cap)."""
    what = plan.matcher.describe()
    if plan.empty:
        console.print(shown(f"Nothing matches {what} in agent {plan.agent.name!r}."))
        return
    console.print(shown(f"Forgetting {what} in agent {plan.agent.name!r} changes:"))
    table = Table(box=None, show_header=False, pad_edge=False)
    for place, n in plan.counts().items():
        if n:
            table.add_row(shown(f"  {place}"), shown(_count(n, _UNITS.get(place, "unit"))),
                          shown(_place_note(plan, place)))
    console.print(table)
    by_place: dict[str, list[str]] = {}
    for place, line in _plan_lines(plan):
        by_place.setdefault(place, []).append(line)
    for place, lines in by_place.items():
        for line in lines if full else lines[:PREVIEW_PER_PLACE]:
            console.print(shown(f"  {line}"))
        if not full and len(lines) > PREVIEW_PER_PLACE:
            console.print(shown(f"  … and {len(lines) - PREVIEW_PER_PLACE:,} more in {place} "
                                "(--dry-run lists every one)", "dim"))
    for label, others in plan.shared.items():
        if others:
            console.print(shown(f"  core memory {label!r} is shared with {', '.join(others)}: "
                                "the line goes for them too (their own messages and recordings "
                                f"keep it until you forget it with --agent {others[0]})"))
    for root, others in plan.projects.items():
        if others:
            console.print(shown(f"  project memory of {root} goes for every agent working "
                                f"there; {', '.join(others)} worked there too (their own "
                                "messages and recordings keep the line until you forget it "
                                f"with --agent {others[0]})"))


def _place_note(plan: ForgetPlan, place: str) -> str:
    if place == "messages":
        redacted = sum(1 for u in plan.units if u.place == place and u.action == "redact")
        deleted = sum(1 for u in plan.units if u.place == place and u.action == "delete")
        parts = [f"{deleted:,} deleted"] if deleted else []
        if redacted:
            parts.append(f"{redacted:,} kept in the queue with [forgotten] in place of the "
                         "match (deleting would break a turn the API is sent)")
        return "; ".join(parts)
    return {"passages": "deleted", "core memory": "lines removed from blocks",
            "summary": "sentences removed from the running summary (the rest is kept)",
            "block history": "matching lines removed from old and new values",
            "base snapshots": "rewritten like the store",
            "recordings": "the matching text becomes [forgotten]",
            "input history": "lines removed",
            "project memory": "lines removed from project blocks (every agent working there)",
            "conversation titles": "titles cleared"}.get(place, "")


def _plan_lines(plan: ForgetPlan) -> list[tuple[str, str]]:
    excerpt = plan.matcher.excerpt
    out = []
    for u in plan.units:
        if u.place == "messages":
            out.append((u.place, f"message #{u.key} · turn {u.turn_id} · {u.role} · {u.action}: "
                                 f"{excerpt(u.text)}"))
        elif u.action == "delete":
            out.append((u.place, f"{u.place.rstrip('s')} #{u.key} · delete: {excerpt(u.text)}"))
        else:
            where = {"core memory": f"core memory {u.key!r}", "summary": "summary",
                     "project memory": f"project memory {u.text}",
                     "block history": f"block history #{u.key} ({u.text!r})"}[u.place]
            out += [(u.place, f"{where} · remove line: {clip(line, 110)}") for line in u.lines]
    out += [("base snapshots", f"base snapshot {path} · {_count(n, 'unit')}")
            for path, n in plan.bases.items()]
    for r in plan.recordings:
        state = f"cannot be changed: {r.problem}" if r.problem else _recording_note(r)
        out.append(("recordings", f"recording {r.path} · {state}"))
    out += [("input history", f"input history · remove line: {clip(line, 110)}")
            for line in plan.history]
    return out


def _recording_note(r: Any) -> str:
    parts = [_count(r.lines, "line")] if r.lines else []
    if r.turns:
        parts.append(f"turn{'s' if len(r.turns) > 1 else ''} {turn_ranges(sorted(r.turns))}")
    if r.start:
        parts.append("the history its replay starts from")
    return ", ".join(parts)


def forget_summary(result: ForgetResult) -> str:
    """One sentence of what a forget did (and what it could not do yet)."""
    changed = []
    for (place, action), n in result.actions().items():
        if action == "remove lines":
            changed.append(f"{_count(n, 'line')} removed from {place}")
        else:
            done = {"delete": "deleted", "redact": "redacted in the queue"}[action]
            changed.append(f"{_count(n, _UNITS.get(place, 'unit'))} {done}")
    files = [f"{_count(len(result.recordings), 'recording file')} scrubbed"]
    if result.bases:
        files.append(f"{_count(result.bases, 'base snapshot')} rewritten")
    files.append(f"{_count(result.history, 'input history line')} removed")
    head = ""
    if result.resumed_from:  # "finished" only when it is
        done = "Tried again" if result.problems else "Finished"
        head = f"{done} a forget cut off on {_when(result.resumed_from)}: "
    text = (f"{head}Forgot {result.matcher.describe()} in agent {result.agent!r}: "
            f"{', '.join(changed) or 'nothing in the store'}; {', '.join(files)}.")
    if result.problems:
        text += (f" Not finished: cannot change {'; '.join(result.problems)}; the next "
                 "memgpt-lite command tries again.")
    if result.undecided:
        text += (f" Left as {'it was' if len(result.undecided) == 1 else 'they were'}: "
                 f"{_count(len(result.undecided), 'text')} the preview had not seen, on which "
                 f"the pattern took over {REGEX_SECONDS:g} s ({'; '.join(result.undecided)}); "
                 "forget {0} with a pattern without nested repeats.".format(
                     "it" if len(result.undecided) == 1 else "them"))
    if not result.wal_clean:
        text += (" Another memgpt-lite process has the database open: its write-ahead log "
                 "keeps old pages until that process lets go of it.")
    return text


def print_forget_result(console: Console, result: ForgetResult) -> None:
    console.print(shown(forget_summary(result)))


# --------------------------------------------------------------------------- recordings


def print_sessions(console: Console, rows: list[Any], agent: str | None,
                   names: dict[str, str] | None = None) -> None:
    """The recorded sessions (of one agent, if named), with how to replay one. `names` maps
    agent uids to their names now: a session recorded before a rename shows both."""
    if not rows:
        who = f" for agent {agent!r}" if agent else ""
        console.print(shown(f"No recorded sessions{who} yet; `memgpt-lite chat` records by "
                            f"default."))
        return
    from memgpt_lite.engine.recording import session_ids

    table = Table("id", "agent", "conv", "started", "turns", box=None, pad_edge=False)
    table.columns[0].no_wrap = True  # the id `replay` takes is never cut
    for r, sid in zip(rows, session_ids(rows)):
        turns = str(r.turns) if r.problem is None else f"damaged: {r.problem}"
        turns += " (scrubbed by a forget)" if r.scrubbed else ""
        now = (names or {}).get(r.agent_uid or "", r.agent)
        who = r.agent if now == r.agent else f"{now} (was {r.agent})"
        conv = str(r.conversation) if r.conversation else "1"  # before conversations: the one
        table.add_row(shown(sid), shown(who), conv, shown(_when(r.started)), shown(turns))
    console.print(table)
    console.print(shown("replay one with: memgpt-lite replay ID --strict (sessions --paths "
                        "prints the files)", "dim"))


def print_replay_header(console: Console, header: dict[str, Any], path: str | Path) -> None:
    source = header.get("source") or "live"
    lines = [f"recording {path}",
             f"agent {header.get('agent')} · model {header.get('model')} · "
             f"created {header.get('created_at')} · memgpt-lite {header.get('version')}",
             f"context window {(header.get('settings') or {}).get('context_window', '?'):,} tokens"
             f" · source: {source}",
             f"conversation {header.get('conversation') or 1}"
             + (f" · project {header['project']}" if header.get("project") else "")]
    if header.get("note"):
        lines.append(str(header["note"]))
    console.print(Panel(shown("\n".join(lines)), title="replay", title_align="left"))


def print_warnings(console: Console, warnings: list[str]) -> None:
    """What a reader of a recording had to skip (e.g. a last line cut short by a crash)."""
    for warning in warnings:
        console.print(shown(f"warning: {warning}", "yellow"))


def print_demo_header(console: Console, header: dict[str, Any]) -> None:
    """What the demo is, and how honestly it was made (hand-written responses say so)."""
    settings = header.get("settings") or {}
    honesty = header.get("note") or "Recorded from a live session."
    if header.get("source") == "hand-written":
        honesty = ("How this session was made: the model's responses were WRITTEN BY HAND, "
                   "not recorded from a live model. Everything else — prompts, context "
                   "building, token accounting, paging, memory tools, search, SQLite — is "
                   "the real engine running now on your machine. " + (header.get("note") or ""))
    text = Text.assemble(
        ("memgpt-lite demo", "bold"), " — offline replay, no API key needed\n",
        f"context window {settings.get('context_window', '?'):,} tokens (small on purpose, so "
        "paging happens)\n\n", (visible(honesty.strip()), "italic"))
    console.print(Panel(text, title="demo", title_align="left"))


def print_replay_report(console: Console, report: ReplayReport) -> None:
    table = Table(title="replay report", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    tally = report.tally
    tools = visible(", ".join(f"{n} ×{c}" for n, c in sorted(tally.tool_calls.items())) or "none")
    u = tally.paid_usage  # every paid call, the summariser's included
    rows = [("turns", f"{tally.turns} of {report.recorded_turns} recorded"),
            ("model calls", str(tally.model_calls)), ("tool calls", tools),
            ("pressure alerts", str(tally.alerts)),
            ("evictions (model)", str(tally.model_evictions)),
            ("forced flushes", str(tally.forced_flushes)),
            ("tokens", f"{u.total_input:,} in ({u.cache_read_input_tokens:,} cache read) · "
                       f"{u.output_tokens:,} out"),
            ("cost", f"{cost_text(tally.paid_cost_usd, tally.unpriced)} (recorded usage, "
                     "summariser included)"),
            ("divergences", str(len(report.divergences)) if report.divergences else "none")]
    for key, value in rows:
        table.add_row(key, shown(value))
    console.print()
    console.print(table)
    for info in report.divergences[:10]:
        console.print(shown(f"  ✗ {info}", "red"))
    print_final_core_memory(console, report.final_core_memory, report.block_limits)


def print_final_core_memory(console: Console, blocks: dict[str, str],
                            limits: dict[str, int]) -> None:
    console.print()
    console.print(Text("final core memory", style="bold"))
    for label, value in blocks.items():
        limit = limits.get(label)
        used = f"{len(value):,}/{limit:,} chars" if limit else f"{len(value):,} chars"
        console.print(Panel(shown(value or "(empty)"), title=shown(f"{label} · {used}"),
                            title_align="left", expand=True))

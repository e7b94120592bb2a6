"""The command logic of every command but `chat` and `eval`: agents (list, show, delete,
rename, export, import), core, forget, sessions, replay, demo, doctor and bench.

Each `cmd_*` takes the argparse Namespace from cli.py (bench: its raw arguments), calls the
engine (or the lab, for bench), hands results to render.py's printers and returns an exit
code; a mistake the user can fix is raised as `UserError`, which cli.py turns into one
sentence on stderr. Replay and demo print their failures on stdout instead, as their output
is the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from memgpt_lite.terminal import render
from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UserError

if TYPE_CHECKING:
    from memgpt_lite.engine.replay import ReplayReport

DEMO_RESOURCE = "demo.jsonl"


# --------------------------------------------------------------------------- agents


def cmd_core(args: argparse.Namespace) -> int:
    with _open_store() as store:
        row = _require_agent(store, args.agent)
        render.print_core_blocks(render.make_console(), store.get_blocks(row.id))
    return EXIT_OK


def cmd_agents_list(args: argparse.Namespace) -> int:
    with _open_store() as store:
        render.print_agents(render.make_console(), store)
    return EXIT_OK


def cmd_agents_show(args: argparse.Namespace) -> int:
    with _open_store() as store:
        row = _require_agent(store, args.name)
        render.print_agent(render.make_console(), store, row)
    return EXIT_OK


def cmd_agents_delete(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import privacy

    with _open_store() as store, _agent_lock(store, args.name):
        row = _require_agent(store, args.name)
        stats = store.agent_stats(row.id)
        what = (f"agent {row.name!r}: {stats.get('turns', 0)} turns, "
                f"{stats.get('messages', 0)} messages, {stats.get('passages', 0)} passages, "
                f"its core memory and its recordings")
        if not _confirmed(args.yes, f"Delete {what}?"):
            print("Nothing deleted.", file=sys.stderr)
            return EXIT_ERROR
        store.delete_agent(row.name)
        removed = privacy.delete_recordings(row)
    print(f"Deleted {what} ({len(removed)} recording file(s)).")
    return EXIT_OK


def cmd_agents_rename(args: argparse.Namespace) -> int:
    with _open_store() as store, _agent_lock(store, args.old):
        _require_agent(store, args.old)
        if store.get_agent(args.new) is not None:
            raise UserError(f"An agent named {args.new!r} already exists.")
        store.rename_agent(args.old, args.new)
    print(f"Renamed agent {args.old!r} to {args.new!r}.")
    return EXIT_OK


def cmd_agents_export(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.store import transfer

    target = Path(args.file).expanduser()
    with _open_store() as store:
        _require_agent(store, args.name)
        doc = transfer.export_agent(store, args.name)
    # No sort_keys: stored content keeps its key order, so an import is byte-identical.
    text = json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
    leaked = privacy.exported_secret(text)
    if leaked:
        raise UserError(f"The export contains the value of ${leaked}; forget it first "
                        f"(`memgpt-lite forget`) and export again.")
    _write_private(target, text)
    print(f"Exported agent {args.name!r} to {target}.")
    return EXIT_OK


def _write_private(target: Path, text: str) -> None:
    """Write text to a file only its owner can read: an export holds the whole memory."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UserError(f"Cannot write {target}: {exc.strerror or exc}.") from None


def cmd_agents_import(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.store import transfer

    source = Path(args.file).expanduser()
    doc = _read_export(source)
    meta = doc.get("agent")  # the export's shape is checked by transfer.import_agent
    name = args.name or (meta.get("name") if isinstance(meta, dict) else None)
    with _open_store() as store:
        if name and store.get_agent(name) is not None:
            raise UserError(f"An agent named {name!r} already exists; "
                            f"import with --name NEW or delete it first.")
        row = transfer.import_agent(store, doc, name=args.name)
    print(f"Imported agent {row.name!r} from {source}.")
    return EXIT_OK


def _read_export(source: Path) -> dict[str, Any]:
    try:
        doc = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"Cannot read {source}: {exc.strerror or exc}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{source} is not a JSON export of an agent.") from None
    if not isinstance(doc, dict):
        raise UserError(f"{source} is not a JSON export of an agent.")
    return doc


def cmd_forget(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import privacy

    console = render.make_console()
    with _open_store() as store, _agent_lock(store, args.agent):
        row = _require_agent(store, args.agent)
        matches = privacy.find_forget_matches(store, row.id, args.query)
        render.print_forget_matches(console, matches, args.query)
        if matches.empty:
            return EXIT_OK
        if not _confirmed(args.yes, "Delete these from the store, the search indexes "
                                    "and the recordings?"):
            print("Nothing deleted.", file=sys.stderr)
            return EXIT_ERROR
        console.print(privacy.apply_forget(store, row, matches))
    return EXIT_OK


def _open_store() -> Any:
    """The default Store; it is its own context manager (closed on exit)."""
    from memgpt_lite.engine.store import Store

    return Store.open_default()


def _agent_lock(store: Any, name: str) -> Any:
    """The agent's process lock: deleting or rewriting an agent under a running chat would
    pull its queue away mid-turn, so these commands wait briefly, then refuse."""
    from memgpt_lite.engine import locking

    return locking.AgentLock(store.path.parent, name)


def _require_agent(store: Any, name: str) -> Any:
    row = store.get_agent(name)
    if row is None:
        names = ", ".join(a.name for a in store.list_agents()) or "none yet"
        raise UserError(f"There is no agent named {name!r} (agents: {names}).")
    return row


def _confirmed(yes: bool, question: str) -> bool:
    """--yes, or a y/N answer on a terminal; without a terminal there is no one to ask, and
    deleting unasked is not an option. Ctrl-C here interrupts the command (exit 130)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UserError("Refusing to delete without confirmation on a non-interactive "
                        "terminal; add --yes.", EXIT_USAGE)
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


# --------------------------------------------------------------------------- recordings


def cmd_sessions(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import recording

    name = getattr(args, "agent", None)
    console = render.make_console(wrap=True)
    if name:
        with _open_store() as store:
            agent = store.get_agent(name)
        if agent is None:
            render.print_error(console, f"there is no agent named {name!r}")
            return EXIT_USAGE
    render.print_sessions(console, recording.list_recordings(agent if name else None), name)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import recording

    console = render.make_console(wrap=True)
    strict, speed = bool(getattr(args, "strict", False)), float(getattr(args, "speed", 0) or 0)
    try:
        head = recording.Recording.load(args.file).header
    except recording.RecordingError as exc:
        render.print_error(console, str(exc))
        return EXIT_USAGE
    render.print_replay_header(console, head, args.file)
    report = _run_replay(console, args.file, strict=strict, speed=speed)
    if report is None:
        return EXIT_USAGE
    render.print_replay_report(console, report)
    if report.divergences:
        verdict = "diverged" + (" (strict: failing)" if strict else "")
        console.print(Text(f"\nreplay {verdict}: first divergence at {report.divergences[0]}",
                           style="bold red"))
        return EXIT_ERROR if strict else EXIT_OK
    console.print(Text("\nreplay matched the recording: zero divergence", style="bold green"))
    return EXIT_OK


def demo_path() -> Path:
    """The bundled demo recording (package data)."""
    return Path(str(resources.files("memgpt_lite.data").joinpath(DEMO_RESOURCE)))


def cmd_demo(args: argparse.Namespace) -> int:
    """Replay the bundled session through the real engine: offline, no API key."""
    from memgpt_lite.engine import recording

    console = render.make_console(wrap=True)
    path = demo_path()
    try:
        header = recording.Recording.load(path).header
    except recording.RecordingError as exc:
        render.print_error(console, f"the bundled demo is missing or damaged ({exc})")
        return EXIT_ERROR
    render.print_demo_header(console, header)
    report = _run_replay(console, path, strict=False, speed=float(getattr(args, "speed", 0) or 0))
    if report is None:
        return EXIT_USAGE
    render.print_replay_report(console, report)
    if report.divergences:
        console.print(Text("The demo no longer matches this version of the engine.",
                           style="bold red"))
        return EXIT_ERROR
    return EXIT_OK


def _run_replay(console: Console, path: str | Path, *, strict: bool,
                speed: float) -> ReplayReport | None:
    """The ReplayReport of a replay shown live on the console; None (said on the console)
    when the recording cannot be replayed."""
    from memgpt_lite.engine import recording
    from memgpt_lite.engine import replay as replay_mod
    from memgpt_lite.terminal.view import ReplayView

    try:
        return replay_mod.replay(path, strict=strict, observer=ReplayView(console, speed=speed))
    except recording.RecordingError as exc:
        render.print_error(console, str(exc))
        return None


# --------------------------------------------------------------------------- doctor, bench


def cmd_doctor(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import doctor

    return doctor.run_doctor(render.make_console(), repair=args.repair)


def cmd_bench(argv: list[str]) -> int:
    """The benchmark suite parses its own arguments (`bench --help` lists them)."""
    from memgpt_lite.lab import bench

    try:
        return int(bench.main(argv) or 0)
    except SystemExit as exc:  # the bench's argparse: --help or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE

"""The command logic of every command but `chat`, `eval`, `forget` and `index`: agents
(list, show, create, share, unshare, set, delete, rename, export, import), core, models,
sessions, replay, demo, doctor and bench.

Each `cmd_*` takes the argparse Namespace from cli.py (bench: its raw arguments), calls the
engine (or the lab, for bench), hands results to render.py's printers and returns an exit
code; a mistake the user can fix is raised as `UserError`, which cli.py turns into one
sentence on stderr. Replay and demo print their failures on stdout instead, as their output
is the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from memgpt_lite.engine.text import quoted
from memgpt_lite.terminal import agent_checks, render
from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UserError
from memgpt_lite.terminal.user_input import confirmed

if TYPE_CHECKING:
    from memgpt_lite.engine.replay import ReplayReport

DEMO_RESOURCE = "demo.jsonl"


# --------------------------------------------------------------------------- agents


def cmd_agents_list(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config import database_url, db_path

    if getattr(args, "names", False):
        if database_url() or db_path().is_file():  # Tab must not create a data dir
            with _open_store() as store:
                for row in store.list_agents():
                    print(render.visible(row.name))
        return EXIT_OK
    with _open_store() as store:
        render.print_agents(render.make_console(), store)
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    """Known models, aliases and the prices used for cost (MEMGPT_LITE_PRICES included)."""
    from memgpt_lite.engine.tokens import KNOWN_MODELS, price_table

    table = price_table()
    rows = []
    for model in dict.fromkeys([*KNOWN_MODELS, *table]):
        max_out, aliases = KNOWN_MODELS.get(model, (0, ()))
        inp, out = table.get(model, (None, None))
        rows.append((model, ", ".join(aliases) or "-", _usd(inp), _usd(out), max_out))
    console = render.make_console()
    render.print_models(console, rows)
    console.print("Cache writes cost 1.25× the input price, cache reads 0.1×; other models have "
                  "no price (their cost is shown as unknown). MEMGPT_LITE_PRICES=prices.json "
                  "adds or overrides prices.",
                  markup=False)
    return EXIT_OK


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:g}"


def _check_label(label: str) -> None:
    """The one rule for a new block's label, as the chat's /memory applies it."""
    from memgpt_lite.engine.agent import BLOCK_LABEL, LABEL_RULE

    if not BLOCK_LABEL.fullmatch(label):
        raise UserError(f"{quoted(label)} is not a block label ({LABEL_RULE}).", EXIT_USAGE)



def cmd_agents_create(args: argparse.Namespace) -> int:
    """`agents create NAME [--share LABEL ...]`: a new agent; each shared label joins the data
    dir's user-scope block of that label (or starts it from the agent's own block)."""
    from memgpt_lite.engine.config import resolve_settings, stored_form
    from memgpt_lite.engine.memory import default_blocks

    _check_new_name(args.name)  # before the lock: it would make a file named after it
    labels = list(dict.fromkeys(args.share or []))
    for label in labels:
        _check_label(label)
    settings = resolve_settings(None)[0]
    with _open_store() as store, _agent_lock(store, args.name):
        if store.get_agent(args.name) is not None:
            raise UserError(f"An agent named {args.name!r} already exists.")
        before = {label: store.shared_block_agents(label) for label in labels}
        renamed = store.renamed_agent(args.name)  # the old name becomes this agent's
        with store.transaction():
            row = store.create_agent(args.name, stored_form({}),
                                     default_blocks(settings.block_limit))
            for label in labels:
                store.share_block(row.id, label, default=("", settings.block_limit))
    print(render.visible(f"Created agent {args.name!r}." + (
        f" (The name no longer leads to {renamed.name!r}, which had it before a rename.)"
        if renamed else "")))
    for label in labels:
        print(render.visible(_share_line(label, before[label])))
    return EXIT_OK


def _share_line(label: str, others: list[str]) -> str:
    if others:
        return f"Block {label!r} is in user scope, shared with {', '.join(others)}."
    return (f"Block {label!r} is in user scope, shared with no other agent yet (`memgpt-lite "
            f"agents share NAME {label}` adds one).")


def cmd_agents_share(args: argparse.Namespace) -> int:
    """`agents share NAME LABEL`: the agent's block joins the user-scope block of that label
    (or starts it from its own value)."""
    with _open_store() as store, _agent_lock(store, _known(store, args.name)):
        row = _require_agent(store, args.name)
        block = store.get_block(row.id, args.label)
        if block is not None and block.scope == "user":
            print(render.visible(f"Block {args.label!r} of {row.name!r} is already in user "
                                 "scope."))
            return EXIT_OK
        if block is None:
            _check_label(args.label)
        others = store.shared_block_agents(args.label)
        from memgpt_lite.terminal.task_commands import ask_keep, share_keep

        keep = share_keep(store, row, args.label, args.keep,
                          ask_keep if sys.stdin.isatty() else None)
        shared = store.shared_block(args.label)
        changed = store.share_block(row.id, args.label, keep=keep,
                                    default=("", block.limit if block else 5000),
                                    expected=shared.value if shared is not None else None)
    print(render.visible(_share_line(args.label, others)))
    history = f"`memgpt-lite core --agent {row.name} --history {args.label}`"
    if keep == "both":
        print(render.visible(f"The shared {args.label!r} now holds both values."))
    elif keep == "mine" and others:
        print(render.visible(f"The shared {args.label!r} now holds the value of {row.name!r}; "
                             f"the one it held before stays in {history}."))
    elif changed:
        print(render.visible(f"{row.name!r} now sees the shared value; its own stays in "
                             f"{history}."))
    return EXIT_OK


def cmd_agents_unshare(args: argparse.Namespace) -> int:
    """`agents unshare NAME LABEL`: the agent gets its own copy of the shared block."""
    with _open_store() as store, _agent_lock(store, _known(store, args.name)):
        row = _require_agent(store, args.name)
        if not store.unshare_block(row.id, args.label):
            raise UserError(f"Agent {row.name!r} has no block {args.label!r} in user scope.")
        others = store.shared_block_agents(args.label)
    left = f"; {', '.join(others)} still share it" if others else ""
    print(render.visible(f"Block {args.label!r} of {row.name!r} is its own again (a copy of "
                         f"the shared value){left}."))
    return EXIT_OK


def cmd_agents_delete(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import config, privacy

    with _open_store() as store, _agent_lock(store, _known(store, args.name)):
        row = _require_agent(store, args.name)
        stats = store.agent_stats(row.id)
        what = (f"agent {row.name!r}: {stats.get('turns', 0)} turns, "
                f"{stats.get('messages', 0)} messages, {stats.get('passages', 0)} passages, "
                f"its core memory{_shared_note(store, row)}, summary and recordings")
        if not confirmed(args.yes, render.visible(f"Delete {what}?")):
            print("Nothing deleted.", file=sys.stderr)
            return EXIT_ERROR
        # Files first: cut off after them, the agent is still there and the same command
        # finishes; cut off after its rows, nothing would find its recordings again.
        removed = privacy.delete_agent_files(row, config.data_dir(), lock=False)
        store.delete_agent(row.name)
        store.wipe_freed()  # its rows are zeroed as they go; the WAL must let go of them too
        removed.other += privacy.delete_agent_files(row, config.data_dir()).other  # the lock
    print(render.visible(f"Deleted {what}; removed {_files_removed(removed)}."))
    return EXIT_OK


def _files_removed(removed: Any) -> str:
    parts = [f"{len(removed.recordings)} recording file(s)",
             f"{len(removed.bases)} base snapshot(s)"]
    parts += [f"the folder {folder}" for folder in removed.folders]
    extra = [p for p in removed.other if p not in removed.recordings + removed.bases]
    if extra:
        parts.append(f"{len(extra)} other file(s) of it ({', '.join(p.name for p in extra)})")
    return ", ".join(parts)


def _shared_note(store: Any, row: Any) -> str:
    """What deleting the agent does to its user-scope blocks: one others use stays."""
    notes = []
    for block in store.get_blocks(row.id):
        if block.scope == "user":
            others = [n for n in store.shared_block_agents(block.label) if n != row.name]
            notes.append(f"shared block {block.label!r} stays, used by {', '.join(others)}"
                         if others else f"shared block {block.label!r} too, no other agent "
                                        "uses it")
    return f" ({'; '.join(notes)})" if notes else ""


def cmd_agents_rename(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import config, locking, privacy

    _check_new_name(args.new)
    with _open_store() as store, _agent_lock(store, _known(store, args.old)):
        row = _require_agent(store, args.old)
        if store.get_agent(args.new) is not None:
            raise UserError(f"An agent named {args.new!r} already exists.")
        try:  # its recordings from before agent uids stay its own under the new name
            privacy.adopt_recordings(row)
        except (OSError, ValueError) as exc:
            raise UserError(f"Cannot rename agent {row.name!r}: one of its recordings cannot "
                            f"be updated to keep it with the agent "
                            f"({getattr(exc, 'strerror', None) or exc}); nothing was "
                            f"renamed.") from None
        store.rename_agent(row.name, args.new)
        # The lock file under the old name is the agent's no more (chats lock the new one).
        locking.lock_path(config.data_dir(), row.name).unlink(missing_ok=True)
    print(render.visible(f"Renamed agent {row.name!r} to {args.new!r} (commands that name "
                         f"{row.name!r} use {args.new!r} now)."))
    return EXIT_OK


def _check_new_name(name: str) -> None:
    from memgpt_lite.engine.config import agent_name_problem

    problem = agent_name_problem(name)
    if problem:
        raise UserError(problem, EXIT_USAGE)


def cmd_agents_export(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.store import transfer

    if args.file and args.output and args.file != args.output:
        raise UserError("Give the file once: as FILE or as --output, not both.", EXIT_USAGE)
    where = args.output or args.file or "-"
    to_stdout, target = where == "-", Path(where).expanduser()
    with _open_store() as store:
        row = _require_agent(store, args.name)
        agent_checks.settle(store, row, for_export=True)
        doc = transfer.export_agent(store, row.name)
    # No sort_keys: stored content keeps its key order, so an import is byte-identical.
    text = json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
    leaked = privacy.exported_secret(text)
    if leaked:
        raise UserError(f"The export contains the value of ${leaked}; forget it first "
                        f"(`memgpt-lite forget`) and export again.")
    if to_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
        return EXIT_OK
    write_private(target, text)
    # A pipe or device (`-o /dev/stdout`) may be stdout itself: the JSON must stay alone there.
    print(render.visible(f"Exported agent {row.name!r} to {target}."),
          file=sys.stdout if target.is_file() else sys.stderr)
    return EXIT_OK


def write_private(target: Path, text: str) -> None:
    """`replace_file`, with a failure as one sentence (UserError)."""
    try:
        replace_file(Path(target), text)
    except OSError as exc:
        raise UserError(f"Cannot write {target}: {exc.strerror or exc}.") from None
    except UnicodeEncodeError:
        raise UserError(f"Cannot write {target}: the text holds characters that are not "
                        f"valid Unicode; nothing was written.") from None


def replace_file(target: Path, text: str) -> None:
    """Write text to a file only its owner can read (an export holds the whole memory):
    whole to a temporary file beside it, then renamed over it, so a failure (a full disk,
    text that cannot be encoded) never truncates what was there."""
    from memgpt_lite.engine.files import replace_file as replace_whole

    replace_whole(target, text.encode("utf-8"))  # encoded first: a bad text writes nothing


def cmd_agents_import(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.store import transfer

    source = Path(args.file).expanduser()
    doc = _read_export(source, from_stdin=args.file == "-")
    meta = doc.get("agent")  # the export's shape is checked by transfer.import_agent
    name = args.name or (meta.get("name") if isinstance(meta, dict) else None)
    if isinstance(name, str):
        try:
            _check_new_name(name)
        except UserError as exc:
            hint = "" if args.name else " Import it with --name NEW."
            raise UserError(str(exc) + hint, EXIT_USAGE) from None
    agent_checks.check_imported_window(doc)
    with _open_store() as store:
        # A name that is not text is the import's to refuse (it names the damaged field).
        if isinstance(name, str) and name and store.get_agent(name) is not None:
            raise UserError(f"An agent named {name!r} already exists; "
                            f"import with --name NEW or delete it first.")
        row = transfer.import_agent(store, doc, name=args.name)
        shared = [(b.label, store.shared_block_agents(b.label)) for b in store.get_blocks(row.id)
                  if b.scope == "user"]
    print(render.visible(f"Imported agent {row.name!r} from {source}."))
    for label, names in shared:
        others = [n for n in names if n != row.name]
        print(render.visible(f"Block {label!r} is in user scope" + (
            f", shared with {', '.join(others)} (this data dir's value is kept; the exported "
            "one is in the block's history)." if others else ".")))
    return EXIT_OK


def _read_export(source: Path, *, from_stdin: bool = False) -> dict[str, Any]:
    """The export as a dict; bytes that are not UTF-8 become U+FFFD, like every input."""
    try:
        raw = sys.stdin.buffer.read() if from_stdin else source.read_bytes()
        doc = json.loads(raw.decode("utf-8", errors="replace"))
    except OSError as exc:
        raise UserError(f"Cannot read {source}: {exc.strerror or exc}.") from None
    except (ValueError, RecursionError):  # bad JSON, too deep, a number of 5,000 digits
        raise UserError(f"{source} is not a JSON export of an agent.") from None
    if not isinstance(doc, dict):
        raise UserError(f"{source} is not a JSON export of an agent.")
    return doc


def _open_store() -> Any:
    """The store (--db / MEMGPT_LITE_DATABASE_URL, else the data dir's file); it is its own
    context manager (closed on exit)."""
    from memgpt_lite.engine.store import open_store

    return open_store()


def _agent_lock(store: Any, name: str) -> Any:
    """The agent's process lock: deleting or rewriting an agent under a running chat would
    pull its queue away mid-turn, so these commands wait briefly, then refuse."""
    return store.agent_lock(name)


def _known(store: Any, name: str) -> str:
    """The agent's name, once `name` names it (or named it before a rename; the command's
    own look-up says so), else one sentence, before a lock file is made for it."""
    return _require_agent(store, name, say=False).name


_require_agent = agent_checks.require_agent


# --------------------------------------------------------------------------- recordings


def cmd_sessions(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import recording
    from memgpt_lite.engine.config import agent_name_problem, database_url, db_path
    from memgpt_lite.engine.store import StoreError

    name = getattr(args, "agent", None)
    console = render.make_console(wrap=True)
    agent, names = None, {}
    if name is not None:
        with _open_store() as store:
            agent = agent_checks.find_agent(store, name)
            names = {a.uid: a.name for a in store.list_agents() if a.uid}
    elif database_url() or db_path().is_file():  # names now, for sessions before a rename
        with contextlib.suppress(StoreError), _open_store() as store:
            names = {a.uid: a.name for a in store.list_agents() if a.uid}
    if name is not None and agent is None:
        if agent_name_problem(name):
            raise UserError(agent_name_problem(name), EXIT_USAGE)  # type: ignore[arg-type]
        render.print_error(console, f"there is no agent named {name!r}{_renamed(name, names)}")
        return EXIT_USAGE
    rows = recording.list_recordings(agent)
    if getattr(args, "paths", False) or getattr(args, "ids", False):  # one a line, whole
        for line in (recording.session_ids(rows) if getattr(args, "ids", False)
                     else [str(r.path) for r in rows]):
            print(render.visible(line))
        return EXIT_OK
    render.print_sessions(console, rows, agent.name if agent else None, names)
    return EXIT_OK


def _renamed(old: str, names: dict[str, str]) -> str:
    """Where the sessions recorded under the name `old` are listed now, if its agent was
    renamed (recordings keep the name they were made under; `names`: uid → name now)."""
    from memgpt_lite.engine import recording

    now = sorted({names[r.agent_uid] for r in recording.list_recordings()
                  if r.agent == old and r.agent_uid in names})
    if not now:
        return ""
    return f" (renamed to {now[0]!r}: memgpt-lite sessions --agent {now[0]})"


def cmd_replay(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import recording

    console = render.make_console(wrap=True)
    strict, speed = bool(getattr(args, "strict", False)), float(getattr(args, "speed", 0) or 0)
    try:
        args.file = recording.find_recording(args.file)
        loaded = recording.Recording.load(args.file)
    except recording.RecordingError as exc:
        render.print_error(console, str(exc))
        return EXIT_USAGE
    render.print_replay_header(console, loaded.header, args.file)
    render.print_warnings(console, loaded.warnings)
    report = _run_replay(console, args.file, strict=strict, speed=speed)
    if report is None:
        return EXIT_USAGE
    render.print_replay_report(console, report)
    if report.divergences:
        verdict = "diverged" + (" (strict: failing)" if strict else "")
        console.print(render.shown(f"\nreplay {verdict}: first divergence at "
                                   f"{report.divergences[0]}", "bold red"))
        return EXIT_ERROR if strict else EXIT_OK
    if report.scrubbed is not None:  # a forget changed the recording: say how far it holds
        console.print(render.shown(f"\n{report.scrubbed}.", "yellow"))
    if report.stopped_at_scrub:
        last = report.scrubbed.turn - 1  # type: ignore[union-attr]
        console.print(render.shown(f"replay matched the recording up to turn {last}" if last
                                   else "replay stopped at turn 1: nothing to compare before "
                                        "the scrub", "bold green"))
        return EXIT_OK
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
        loaded = recording.Recording.load(path)
    except recording.RecordingError as exc:
        render.print_error(console, f"the bundled demo is missing or damaged ({exc})")
        return EXIT_ERROR
    render.print_demo_header(console, loaded.header)
    render.print_warnings(console, loaded.warnings)
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
    from memgpt_lite.terminal.replay_view import ReplayView

    try:
        return replay_mod.replay(path, strict=strict, observer=ReplayView(console, speed=speed))
    except recording.RecordingError as exc:
        render.print_error(console, str(exc))
        return None


# --------------------------------------------------------------------------- doctor, bench


def cmd_doctor(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import doctor

    return doctor.run_doctor(render.make_console(), repair=args.repair,
                             online=not getattr(args, "offline", False))


def cmd_bench(argv: list[str]) -> int:
    """The benchmark suite parses its own arguments (`bench --help` lists them)."""
    from memgpt_lite.lab import bench

    console = render.make_console(sys.stderr)
    try:
        if not console.is_terminal or any(a in ("-h", "--help", "store", "load", "mcp") for a in argv):
            return int(bench.main(argv) or 0)
        from memgpt_lite.lab.bench.suite import SECTIONS
        from memgpt_lite.terminal.progress import SectionProgress

        with SectionProgress(console, "bench sections", SECTIONS) as progress:
            return int(bench.main(argv, progress) or 0)
    except SystemExit as exc:  # the bench's argparse: --help or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE

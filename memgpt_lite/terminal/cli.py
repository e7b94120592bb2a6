"""The command line: argument parsing, exit codes, and the one-sentence error edge.

Only argparse and the stdlib are imported at module level so that `memgpt-lite --help`
answers at once; rich, anthropic and the store are imported inside the commands.

Exit codes: 0 success, 1 a runtime problem (store, model, data), 2 a usage mistake,
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UserError(Exception):
    """A mistake the user can fix; the message is one sentence, `code` the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from memgpt_lite import __version__

    parser = argparse.ArgumentParser(
        prog="memgpt-lite",
        description="A MemGPT-style agent that manages its own memory on Claude.",
        epilog="Data lives in one SQLite file under $MEMGPT_LITE_HOME "
               "(default: the platform's user data dir). Run `memgpt-lite doctor` to see where.")
    parser.add_argument("--version", action="version", version=f"memgpt-lite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("chat", help="rich terminal chat with an agent (created on first use)")
    _agent_arg(p)
    p.add_argument("--model", metavar="ID", help="model id (stored with the agent)")
    p.add_argument("--context-window", metavar="N",
                   help="context budget in tokens (default 32,000; stored with the agent)")
    p.add_argument("--max-tokens", metavar="N",
                   help="max output tokens per model call (default 2,048; stored with the agent)")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="extended thinking on or off (stored with the agent; default off)")
    p.add_argument("--no-record", action="store_true",
                   help="do not record this session to a JSONL event log")
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("core", help="print an agent's core memory blocks")
    _agent_arg(p)
    p.set_defaults(func=cmd_core)

    _add_agents_parser(sub)

    p = sub.add_parser("doctor", help="check the data dir, database and API settings")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the search indexes if they are out of step")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("sessions", help="list recorded chat sessions")
    p.add_argument("--agent", metavar="NAME", help="only this agent's sessions")
    p.set_defaults(func=_delegate("cmd_sessions", "sessions"))

    p = sub.add_parser("replay", help="replay a recorded session; report divergence and final memory")
    p.add_argument("file", metavar="FILE", help="a JSONL recording (see `memgpt-lite sessions`)")
    p.add_argument("--strict", action="store_true", help="exit non-zero on any divergence")
    p.add_argument("--speed", type=float, default=0.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=_delegate("cmd_replay", "replay"))

    p = sub.add_parser("demo", help="offline: replay a bundled session through the real engine")
    p.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=_delegate("cmd_demo", "demo"))

    p = sub.add_parser("eval", help="re-drive scripted sessions against a model and score checks")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help="scenario .toml files (default: the bundled ones), or `locomo FILE` / "
                        "`nkv FILE` for the dataset runners")
    p.add_argument("--model", metavar="ID", help="model id for the live run")
    p.add_argument("--replay", metavar="FILE",
                   help="re-score one scenario from a recording instead of calling a model")
    p.add_argument("--judge", action="store_true", help="also run model-judged checks")
    p.add_argument("--retrieval-only", action="store_true",
                   help="datasets: score retrieval only, no model calls")
    p.add_argument("--file", metavar="FILE", help="datasets: the dataset file")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="compare two JSON reports check by check")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.set_defaults(func=_delegate("cmd_eval", "eval"))

    p = sub.add_parser("forget", help="find and delete messages and passages matching QUERY")
    p.add_argument("query", metavar="QUERY")
    _agent_arg(p)
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_forget)

    # Listed for --help only: main() hands everything after `bench` to the bench's own parser.
    sub.add_parser("bench", help="run the benchmark suite offline and print one table "
                                 "(--quick, --json OUT; `bench --help` for more)", add_help=False)
    return parser


def _agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="default", metavar="NAME",
                   help="agent name (default: %(default)s)")


def _add_agents_parser(sub: Any) -> None:
    agents = sub.add_parser("agents", help="list, show, delete, rename, export or import agents")
    asub = agents.add_subparsers(dest="agents_command", metavar="ACTION")
    asub.add_parser("list", help="table of agents").set_defaults(func=cmd_agents_list)
    p = asub.add_parser("show", help="settings, counts, core memory and summary of an agent")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=cmd_agents_show)
    p = asub.add_parser("delete", help="delete an agent and everything of it, recordings included")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_agents_delete)
    p = asub.add_parser("rename", help="rename an agent")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.set_defaults(func=cmd_agents_rename)
    p = asub.add_parser("export", help="write an agent to a versioned JSON file")
    p.add_argument("name", metavar="NAME")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=cmd_agents_export)
    p = asub.add_parser("import", help="create an agent from an exported JSON file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--name", metavar="NEW", help="import under this name")
    p.set_defaults(func=cmd_agents_import)
    agents.set_defaults(func=lambda args: _usage(agents))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_usage(sys.stderr)
    return EXIT_USAGE


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (argparse printed why)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # only errors that speak to the user; bugs re-raise
        code = _user_facing_code(exc)
        if code is None:
            raise
        print(f"memgpt-lite: {_sentence(exc)}", file=sys.stderr)
        return code


def _user_facing_code(exc: Exception) -> int | None:
    """The exit status for an error whose message speaks to the user; None for a bug."""
    # Imported here, not at module level: the store pulls in sqlite3, which --help must not.
    from memgpt_lite.engine.config import ConfigError
    from memgpt_lite.engine.errors import ModelError
    from memgpt_lite.engine.prompts import PromptError
    from memgpt_lite.engine.store import StoreError

    if isinstance(exc, UserError):
        return exc.code
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, (ModelError, StoreError, PromptError)):
        return EXIT_ERROR
    return None


def _sentence(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0]


def _optional_attr(module: str, name: str) -> Any:
    """`module.name` if the module is importable, else None: a build without the reports or
    bench module still parses every command and says plainly what is missing."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _delegate(func_name: str, command: str) -> Callable[[argparse.Namespace], int]:
    """A command implemented in memgpt_lite.terminal.reports; says so plainly when it is missing."""

    def run(args: argparse.Namespace) -> int:
        func = _optional_attr("memgpt_lite.terminal.reports", func_name)
        if func is None:
            print(f"memgpt-lite: `{command}` is not available yet in this build.",
                  file=sys.stderr)
            return EXIT_USAGE
        return int(func(args) or 0)

    return run


# --------------------------------------------------------------------------- commands


def cmd_chat(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import chat

    return chat.run_chat(agent_name=args.agent, model=args.model,
                         context_window=args.context_window, max_tokens=args.max_tokens,
                         thinking=args.thinking, record=not args.no_record)


def cmd_core(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import chat

    with _open_store() as store:
        row = _require_agent(store, args.agent)
        chat.print_core(_console(), store.get_blocks(row.id))
    return EXIT_OK


def cmd_agents_list(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import chat

    with _open_store() as store:
        chat.print_agents(_console(), store)
    return EXIT_OK


def cmd_agents_show(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import chat

    with _open_store() as store:
        row = _require_agent(store, args.name)
        chat.print_agent(_console(), store, row)
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
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UserError(f"Cannot write {target}: {exc.strerror or exc}.") from None
    print(f"Exported agent {args.name!r} to {target}.")
    return EXIT_OK


def cmd_agents_import(args: argparse.Namespace) -> int:
    source = Path(args.file).expanduser()
    try:
        doc = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"Cannot read {source}: {exc.strerror or exc}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{source} is not a JSON export of an agent.") from None
    if not isinstance(doc, dict):
        raise UserError(f"{source} is not a JSON export of an agent.")
    meta = doc.get("agent")  # the export's shape is checked by transfer.import_agent
    name = args.name or (meta.get("name") if isinstance(meta, dict) else None)
    from memgpt_lite.engine.store import transfer

    with _open_store() as store:
        if name and store.get_agent(name) is not None:
            raise UserError(f"An agent named {name!r} already exists; "
                            f"import with --name NEW or delete it first.")
        row = transfer.import_agent(store, doc, name=args.name)
    print(f"Imported agent {row.name!r} from {source}.")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import doctor

    return doctor.run_doctor(_console(), repair=args.repair)


def cmd_forget(args: argparse.Namespace) -> int:
    from memgpt_lite.engine import privacy
    from memgpt_lite.terminal import chat

    console = _console()
    with _open_store() as store, _agent_lock(store, args.agent):
        row = _require_agent(store, args.agent)
        matches = privacy.find_forget_matches(store, row.id, args.query)
        chat.print_forget_matches(console, matches, args.query)
        if matches.empty:
            return EXIT_OK
        if not _confirmed(args.yes, "Delete these from the store, the search indexes "
                                    "and the recordings?"):
            print("Nothing deleted.", file=sys.stderr)
            return EXIT_ERROR
        console.print(privacy.apply_forget(store, row, matches))
    return EXIT_OK


def run_bench(argv: list[str]) -> int:
    bench_main = _optional_attr("memgpt_lite.lab.bench", "main")
    if bench_main is None:
        print("memgpt-lite: `bench` is not available yet in this build.", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(bench_main(argv) or 0)
    except SystemExit as exc:  # the bench's argparse: --help or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


# --------------------------------------------------------------------------- helpers


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


def _console():
    from memgpt_lite.terminal.chat import make_console

    return make_console()

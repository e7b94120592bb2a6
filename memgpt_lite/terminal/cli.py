"""The command line: argument parsing, dispatch, exit codes, and the one-sentence error edge.

Only argparse and the stdlib are imported at module level so that `memgpt-lite --help`
answers at once; each command's module (commands.py, eval_commands.py, chat.py) is imported
when the command runs. Exit codes are listed in exit_codes.py.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, UserError

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
    # The order of these calls is the order of the commands in --help.
    _add_chat_parser(sub)
    p = sub.add_parser("core", help="print an agent's core memory blocks")
    _agent_arg(p)
    p.set_defaults(func=lambda a: _commands().cmd_core(a))
    _add_agents_parser(sub)
    p = sub.add_parser("doctor", help="check the data dir, database and API settings")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the search indexes if they are out of step")
    p.set_defaults(func=lambda a: _commands().cmd_doctor(a))
    p = sub.add_parser("index", help="embed messages and passages for hybrid search "
                                     "(with a progress bar)")
    p.add_argument("--agent", metavar="NAME", help="only this agent (default: every agent)")
    p.add_argument("--embedder", metavar="SPEC",
                   help="onnx:FOLDER or http (default: $MEMGPT_LITE_EMBEDDER)")
    p.set_defaults(func=lambda a: _embedding_commands().cmd_index(a))
    _add_recording_parsers(sub)
    _add_eval_parser(sub)
    _add_forget_parser(sub)
    # Listed for --help only: main() hands everything after `bench` to the bench's own parser.
    sub.add_parser("bench", help="run the benchmark suite offline and print one table "
                                 "(--quick, --json OUT; `bench --help` for more)", add_help=False)
    return parser


def _add_chat_parser(sub: Any) -> None:
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
    p.set_defaults(func=_chat)


def _add_recording_parsers(sub: Any) -> None:
    p = sub.add_parser("sessions", help="list recorded chat sessions")
    p.add_argument("--agent", metavar="NAME", help="only this agent's sessions")
    p.set_defaults(func=lambda a: _commands().cmd_sessions(a))
    p = sub.add_parser("replay",
                       help="replay a recorded session; report divergence and final memory")
    p.add_argument("file", metavar="FILE", help="a JSONL recording (see `memgpt-lite sessions`)")
    p.add_argument("--strict", action="store_true", help="exit non-zero on any divergence")
    p.add_argument("--speed", type=float, default=0.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=lambda a: _commands().cmd_replay(a))
    p = sub.add_parser("demo", help="offline: replay a bundled session through the real engine")
    p.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=lambda a: _commands().cmd_demo(a))


def _add_eval_parser(sub: Any) -> None:
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
    p.add_argument("--embedder", metavar="SPEC",
                   help="LoCoMo retrieval: also score dense and hybrid search with this "
                        "embedder (onnx:FOLDER or http, as MEMGPT_LITE_EMBEDDER)")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="compare two JSON reports check by check")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.set_defaults(func=_eval)


def _add_forget_parser(sub: Any) -> None:
    p = sub.add_parser("forget", help="find and delete messages and passages matching QUERY")
    p.add_argument("query", metavar="QUERY")
    _agent_arg(p)
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=lambda a: _commands().cmd_forget(a))


def _agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="default", metavar="NAME",
                   help="agent name (default: %(default)s)")


def _add_agents_parser(sub: Any) -> None:
    agents = sub.add_parser("agents", help="list, show, delete, rename, export or import agents")
    asub = agents.add_subparsers(dest="agents_command", metavar="ACTION")
    p = asub.add_parser("list", help="table of agents")
    p.set_defaults(func=lambda a: _commands().cmd_agents_list(a))
    p = asub.add_parser("show", help="settings, counts, core memory and summary of an agent")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=lambda a: _commands().cmd_agents_show(a))
    p = asub.add_parser("delete", help="delete an agent and everything of it, recordings included")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=lambda a: _commands().cmd_agents_delete(a))
    p = asub.add_parser("rename", help="rename an agent")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.set_defaults(func=lambda a: _commands().cmd_agents_rename(a))
    p = asub.add_parser("export", help="write an agent to a versioned JSON file")
    p.add_argument("name", metavar="NAME")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=lambda a: _commands().cmd_agents_export(a))
    p = asub.add_parser("import", help="create an agent from an exported JSON file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--name", metavar="NEW", help="import under this name")
    p.set_defaults(func=lambda a: _commands().cmd_agents_import(a))
    agents.set_defaults(func=lambda args: _usage(agents))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_usage(sys.stderr)
    return EXIT_USAGE


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return _commands().cmd_bench(argv[1:])
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


# --------------------------------------------------------------------------- commands
# A command's module is imported only when the command runs: rich, sqlite3 and anthropic
# come with it, and `--help` must not pay for them.


def _commands() -> Any:
    from memgpt_lite.terminal import commands

    return commands


def _embedding_commands() -> Any:
    from memgpt_lite.terminal import embedding_commands

    return embedding_commands


def _eval(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import eval_commands

    return eval_commands.cmd_eval(args)


def _chat(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import chat

    return chat.run_chat(agent_name=args.agent, model=args.model,
                         context_window=args.context_window, max_tokens=args.max_tokens,
                         thinking=args.thinking, record=not args.no_record)

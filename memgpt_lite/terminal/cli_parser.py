"""The command line's parser: every command, its options, help text and examples (the
environment list from the settings registry), and which function runs each command.

Only argparse and the stdlib are imported here, so that `memgpt-lite --help` answers at
once; a command's module is imported when the command runs. cli.py parses with it and owns
the error edge; completion.py makes shell completion scripts from it.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from memgpt_lite.terminal.exit_codes import UserError

EXAMPLES = """
examples:
  memgpt-lite chat                          chat with the agent "default"
  memgpt-lite chat -p "What do you know about me?"   answer once, reply on stdout
  memgpt-lite config set model haiku        a default in the config file
  memgpt-lite demo                          offline: a recorded session, no API key"""


def environment_epilog() -> str:
    """The --help epilog: every environment variable memgpt-lite reads (from the settings
    registry, so none is missing), where settings come from, and examples."""
    import textwrap

    from memgpt_lite.engine.registry import PRECEDENCE, environment_rows

    lines, indent = [], " " * 36
    for name, text in environment_rows():
        wrapped = textwrap.wrap(text, 100 - len(indent)) or [""]
        lines.append(f"  {name:<34}{wrapped[0]}")
        lines += [indent + w for w in wrapped[1:]]
    where = textwrap.fill(f"Every setting, first match wins: {PRECEDENCE} (`memgpt-lite config "
                          "show`, `memgpt-lite agents show NAME`).", 98, initial_indent="  ",
                          subsequent_indent="  ")
    return "environment:\n" + "\n".join(lines) + "\n\nsettings:\n" + where + "\n" + EXAMPLES


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A one-paragraph description is wrapped to the width; text of several lines (the
    epilogs: examples, the environment list) is shown as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return super()._fill_text(text, width, indent)
        import textwrap

        return textwrap.fill(text, min(width, 100), initial_indent=indent,
                             subsequent_indent=indent)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _parser(sub: Any, name: str, help_text: str, *examples: str, **kw: Any) -> Any:
    return sub.add_parser(name, help=help_text, description=help_text[:1].upper() + help_text[1:]
                          + ".", epilog=_examples(*examples),
                          formatter_class=_HelpFormatter, **kw)


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from memgpt_lite import __version__

    parser = argparse.ArgumentParser(
        prog="memgpt-lite",
        description="A MemGPT-style agent that manages its own memory on Claude. Data lives in "
                    "one SQLite file (or on Postgres, with --db); `memgpt-lite doctor` shows "
                    "where.",
        epilog=environment_epilog(), formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"memgpt-lite {__version__}")
    parser.add_argument("--db", metavar="URL",
                        help="the store: a postgresql:// URL (or a SQLite file) instead of the "
                             "data dir's file; as MEMGPT_LITE_DATABASE_URL, before the command")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The order of these calls is the order of the commands in --help.
    _add_chat_parser(sub)
    _add_core_parser(sub)
    p = _parser(sub, "conversations", "list an agent's conversations: id, started, last used, "
                "turns, title", "memgpt-lite conversations",
                "memgpt-lite conversations --agent work", "memgpt-lite chat --resume 2")
    _agent_arg(p)
    p.set_defaults(func=lambda a: _task_commands().cmd_conversations(a))
    _add_agents_parser(sub)
    _add_config_parser(sub)
    p = _parser(sub, "models", "list the known models, their aliases and the prices used for "
                "cost", "memgpt-lite models", "memgpt-lite chat --model haiku")
    p.set_defaults(func=lambda a: _commands().cmd_models(a))
    p = _parser(sub, "doctor", "check the data dir, database, API key and connection",
                "memgpt-lite doctor", "memgpt-lite doctor --repair",
                "memgpt-lite doctor --offline      # no connection check")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the search indexes if they are out of step")
    p.add_argument("--offline", action="store_true",
                   help="do not contact the API (the key and connection checks are skipped)")
    p.set_defaults(func=lambda a: _commands().cmd_doctor(a))
    p = _parser(sub, "index", "embed messages and passages for hybrid search (with a "
                "progress bar)", "MEMGPT_LITE_EMBEDDER=onnx:~/models/minilm memgpt-lite index",
                "memgpt-lite index --agent work --embedder http")
    p.add_argument("--agent", metavar="NAME", help="only this agent (default: every agent)")
    p.add_argument("--embedder", metavar="SPEC",
                   help="onnx:FOLDER or http (default: $MEMGPT_LITE_EMBEDDER)")
    p.set_defaults(func=lambda a: _embedding_commands().cmd_index(a))
    _add_embeddings_parser(sub)
    _add_recording_parsers(sub)
    _add_eval_parser(sub)
    _add_forget_parser(sub)
    _add_mcp_parser(sub)
    # Listed for --help only: main() hands everything after `bench` to the bench's own parser.
    sub.add_parser("bench", help="run the benchmark suite offline and print one table "
                                 "(--quick, --json OUT; `bench --help` for more)", add_help=False)
    p = _parser(sub, "completion", "print a shell completion script (bash, zsh or fish)",
                'eval "$(memgpt-lite completion bash)"     # in ~/.bashrc',
                'eval "$(memgpt-lite completion zsh)"      # in ~/.zshrc',
                "memgpt-lite completion fish > ~/.config/fish/completions/memgpt-lite.fish")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="SHELL",
                   help="bash, zsh or fish")
    p.set_defaults(func=_completion)
    return parser


def _add_embeddings_parser(sub: Any) -> None:
    p = _parser(sub, "embeddings", "install a known embedding model for hybrid search, or list "
                "them", "memgpt-lite embeddings list", "memgpt-lite embeddings install",
                "memgpt-lite embeddings install e5-small --no-index")
    inner = p.add_subparsers(dest="embeddings_command", metavar="ACTION")
    q = _parser(inner, "list", "show the known models: size, languages, measured recall, "
                "installed", "memgpt-lite embeddings list")
    q.set_defaults(func=lambda a: _embedding_commands().cmd_embeddings_list(a))
    q = _parser(inner, "install", "fetch a model once (checked by sha256), make it the "
                "default embedder and index every agent", "memgpt-lite embeddings install",
                "memgpt-lite embeddings install bge-small")
    q.add_argument("model", nargs="?", metavar="MODEL",
                   help="a known model (default: minilm; see `embeddings list`)")
    q.add_argument("--no-index", action="store_true",
                   help="only install; run `memgpt-lite index` later")
    q.set_defaults(func=lambda a: _embedding_commands().cmd_embeddings_install(a))
    p.set_defaults(func=lambda a: _help(p))


def _add_chat_parser(sub: Any) -> None:
    from memgpt_lite.engine.registry import PRECEDENCE

    p = _parser(sub, "chat", "chat with an agent (a new name is created after asking, or "
                "with a line on stderr when piped)",
                "memgpt-lite chat --agent work -m haiku     # haiku for this run only",
                "memgpt-lite chat --agent work -m haiku --save   # and from now on",
                "memgpt-lite chat --new", "memgpt-lite chat --resume 2",
                'memgpt-lite chat -p "Summarise what you know about me" > notes.md',
                'cat notes.md | memgpt-lite chat -p "Summarise this"',
                'memgpt-lite chat -a diagram.png -p "What does this show?"',
                "printf 'My name is Ada.\\n/core\\n' | memgpt-lite chat --json")
    p.description += (f" Settings, first match wins: {PRECEDENCE}. The flags below hold for "
                      "this run only; --save stores them with the agent (as `agents set` "
                      "does).")
    _agent_arg(p)
    p.add_argument("-p", "--print", dest="prompt", metavar="TEXT",
                   help="send TEXT as one message, print the reply on stdout and exit "
                        "(- reads the message from stdin; otherwise piped stdin is attached "
                        "to TEXT); non-zero exit if the turn failed")
    p.add_argument("-a", "--attach", action="append", metavar="FILE",
                   help="send a file with the first message (repeatable): text, or a PNG, "
                        "JPEG, GIF or WebP image; long text is clipped in the context with a "
                        "marker, the whole file kept in recall")
    p.add_argument("--json", action="store_true", dest="json_out",
                   help="write one JSON object per event (reply, tool calls, evictions, usage, "
                        "errors) to stdout instead of text")
    p.add_argument("-m", "--model", metavar="ID",
                   help="model id or alias: sonnet, haiku, opus (this run; --save keeps it)")
    p.add_argument("--context-window", metavar="N",
                   help="context budget in tokens (default 32,000; this run; --save keeps it)")
    p.add_argument("--max-tokens", metavar="N",
                   help="max output tokens per model call (default 2,048; this run; --save "
                        "keeps it)")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="extended thinking on or off (default off; this run; --save keeps it)")
    p.add_argument("--save", action="store_true",
                   help="store the settings given by flags with the agent, for later runs too")
    p.add_argument("--no-record", action="store_true",
                   help="do not record this session to a JSONL event log")
    p.add_argument("--timeout", metavar="SECONDS",
                   help="give up on a model call after this long, retries included "
                        "(default 120; also MEMGPT_LITE_TIMEOUT)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--new", action="store_true",
                       help="start a new conversation (core, archival memory and recall stay)")
    which.add_argument("--resume", metavar="ID",
                       help="resume conversation ID (default: the most recent; see "
                            "`memgpt-lite conversations`)")
    _project_arg(p)
    p.add_argument("--confirm-memory", action=argparse.BooleanOptionalAction, default=None,
                   help="ask before every core and archival memory write (default off; "
                        "this run; --save keeps it)")
    p.set_defaults(func=_chat)


def _add_core_parser(sub: Any) -> None:
    p = _parser(sub, "core", "print an agent's core memory blocks (with the project's), a "
                "block's versions, or bring one back", "memgpt-lite core",
                "memgpt-lite core --agent work --project ~/src/blog",
                "memgpt-lite core --history human", "memgpt-lite core --restore human 2")
    _agent_arg(p)
    _project_arg(p)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--history", metavar="LABEL",
                     help="list the versions of block LABEL: when, who (agent, tool, command)")
    how.add_argument("--restore", nargs=2, metavar=("LABEL", "VERSION"),
                     help="write version VERSION of block LABEL back (a new version itself)")
    p.set_defaults(func=lambda a: _task_commands().cmd_core(a))


def _project_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", metavar="DIR",
                   help="the project whose project-scope block is used: the git top level of "
                        "DIR, else DIR (default: $MEMGPT_LITE_PROJECT, else the working "
                        "directory)")


def _add_recording_parsers(sub: Any) -> None:
    p = _parser(sub, "sessions", "list recorded chat sessions",
                "memgpt-lite sessions", "memgpt-lite sessions --agent work")
    p.add_argument("--agent", metavar="NAME", help="only this agent's sessions")
    p.add_argument("--paths", action="store_true",
                   help="print each recording's file, one a line, instead of the table")
    p.add_argument("--ids", action="store_true",
                   help="print each recording's id, one a line (for shell completion)")
    p.set_defaults(func=lambda a: _commands().cmd_sessions(a))
    p = _parser(sub, "replay", "replay a recorded session; report divergence and final memory",
                "memgpt-lite replay 20261129T134500Z --strict    # an id from sessions",
                "memgpt-lite replay FILE --speed 2")
    p.add_argument("file", metavar="FILE", help="a JSONL recording, or the id of one that "
                                                "`memgpt-lite sessions` shows")
    p.add_argument("--strict", action="store_true", help="exit non-zero on any divergence")
    p.add_argument("--speed", type=_speed, default=0.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=lambda a: _commands().cmd_replay(a))
    p = _parser(sub, "demo", "offline: replay a bundled session through the real engine",
                "memgpt-lite demo", "memgpt-lite demo --speed 0")
    p.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                   help="playback speed factor (0 = as fast as possible)")
    p.set_defaults(func=lambda a: _commands().cmd_demo(a))


def _speed(text: str) -> float:
    """A playback speed factor: 0 (as fast as possible) or more. A negative or NaN factor
    would otherwise be taken as 0 without a word."""
    try:
        speed = float(text)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and speed >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more (0: as fast "
                                         f"as possible), got {text!r}")
    return speed


def _add_eval_parser(sub: Any) -> None:
    p = _parser(sub, "eval", "re-drive scripted sessions against a model and score checks",
                "memgpt-lite eval --list                      # the bundled scenarios",
                "memgpt-lite eval --model sonnet --json a.json # all of them, live",
                "memgpt-lite eval correct-core-fact --model haiku",
                "memgpt-lite eval scenario.toml --model sonnet --json a.json",
                "memgpt-lite eval --compare a.json b.json",
                "memgpt-lite eval locomo locomo10.json --retrieval-only",
                "memgpt-lite eval locomo locomo10.json --retrieval-only --db postgresql://me@host/db")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help="scenario .toml files or bundled scenario names (default: all the "
                        "bundled ones), or `locomo FILE` / `nkv FILE` for the dataset runners")
    p.add_argument("--list", action="store_true",
                   help="list the bundled scenarios and what each proves")
    p.add_argument("--model", metavar="ID", help="model id or alias for the live run")
    p.add_argument("--replay", metavar="FILE",
                   help="re-score one scenario from a recording (a file, or an id that "
                        "`sessions` shows) instead of calling a model")
    p.add_argument("--judge", action="store_true", help="also run model-judged checks")
    p.add_argument("--retrieval-only", action="store_true",
                   help="datasets: score retrieval only, no model calls")
    p.add_argument("--file", metavar="FILE", help="datasets: the dataset file")
    p.add_argument("--embedder", metavar="SPEC",
                   help="LoCoMo retrieval: also score dense and hybrid search with this "
                        "embedder (onnx:FOLDER or http, as MEMGPT_LITE_EMBEDDER)")
    p.add_argument("--db", dest="eval_db", metavar="URL",
                   help="LoCoMo retrieval: store the conversations in a scratch database on "
                        "this postgresql:// server (created and dropped) instead of SQLite")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="compare two JSON reports check by check")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON (- for stdout)")
    p.set_defaults(func=_eval)


def _add_forget_parser(sub: Any) -> None:
    p = _parser(sub, "forget", "forget what matches QUERY everywhere: messages, passages, core "
                "memory lines, summary lines, block history, recordings and the input history",
                'memgpt-lite forget "Paris trip"               # the phrase, any case',
                "memgpt-lite forget --any Rex Luna --dry-run   # either word; only show",
                "memgpt-lite forget --regex '\\b\\d{5}\\b' --json   # a pattern; as JSON",
                "memgpt-lite forget tulip-42 --yes             # without asking")
    p.add_argument("query", nargs="+", metavar="QUERY",
                   help="the words to forget, as a phrase: all of them, in this order, any "
                        "case, whole words (no stems or prefixes)")
    _agent_arg(p)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--any", action="store_true", help="forget what holds any one of the words")
    how.add_argument("--regex", action="store_true",
                     help="QUERY is a Python regular expression (case ignored)")
    p.add_argument("--dry-run", action="store_true",
                   help="list every unit that would change, and change nothing")
    p.add_argument("--json", action="store_true",
                   help="print the preview (and, with --yes, what was done) as JSON")
    p.add_argument("--yes", action="store_true", help="forget without asking")
    p.set_defaults(func=lambda a: _forgetting().cmd_forget(_joined_query(a)))


def _add_mcp_parser(sub: Any) -> None:
    p = _parser(sub, "mcp", "serve an agent's memory to MCP clients (Claude Code, Claude "
                "Desktop, Cursor) over stdio; needs pip install 'memgpt-lite[mcp]'",
                "claude mcp add memgpt-lite -- memgpt-lite mcp --agent work",
                "memgpt-lite mcp --agent work --project ~/src/blog")
    _agent_arg(p)
    p.add_argument("--project", metavar="DIR",
                   help="the project whose project-scope memory is served: the git top level "
                        "of DIR, else DIR (default: $MEMGPT_LITE_PROJECT, else the working "
                        "directory)")
    p.set_defaults(func=_mcp)


def _joined_query(args: argparse.Namespace) -> argparse.Namespace:
    args.query = " ".join(args.query)
    return args


def _agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="default", metavar="NAME",
                   help="agent name (default: %(default)s)")


def _add_agents_parser(sub: Any) -> None:
    agents = _parser(sub, "agents", "list, show, create, share, set, delete, rename, export or "
                     "import agents",
                     "memgpt-lite agents list", "memgpt-lite agents set work model=haiku",
                     "memgpt-lite agents create work --share human",
                     "memgpt-lite agents export work work.json")
    asub = agents.add_subparsers(dest="agents_command", metavar="ACTION")
    p = _parser(asub, "list", "table of agents", "memgpt-lite agents list",
                "memgpt-lite agents list --names   # one name a line")
    p.add_argument("--names", action="store_true",
                   help="print the names only, one a line (for scripts and shell completion)")
    p.set_defaults(func=lambda a: _commands().cmd_agents_list(a))
    p = _parser(asub, "show", "settings (and where each came from), counts, core memory (with "
                "the project's) and summary of an agent", "memgpt-lite agents show default")
    p.add_argument("name", metavar="NAME", help="the agent")
    _project_arg(p)
    p.set_defaults(func=lambda a: _config_commands().cmd_agents_show(a))
    _add_agents_scope_parsers(asub)
    _add_agents_set_parser(asub)
    p = _parser(asub, "delete", "delete an agent and everything of it, recordings included",
                "memgpt-lite agents delete old", "memgpt-lite agents delete old --yes")
    p.add_argument("name", metavar="NAME", help="the agent")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=lambda a: _commands().cmd_agents_delete(a))
    p = _parser(asub, "rename", "rename an agent", "memgpt-lite agents rename default home")
    p.add_argument("old", metavar="OLD", help="its name now")
    p.add_argument("new", metavar="NEW", help="its new name")
    p.set_defaults(func=lambda a: _commands().cmd_agents_rename(a))
    p = _parser(asub, "export", "write an agent to a versioned JSON file",
                "memgpt-lite agents export work work.json",
                "memgpt-lite agents export work -o work.json",
                "memgpt-lite agents export work | gzip > work.json.gz")
    p.add_argument("name", metavar="NAME", help="the agent")
    p.add_argument("file", metavar="FILE", nargs="?",
                   help="where to write it (- or none: stdout)")
    p.add_argument("-o", "--output", metavar="FILE", help="the same as FILE")
    p.set_defaults(func=lambda a: _commands().cmd_agents_export(a))
    p = _parser(asub, "import", "create an agent from an exported JSON file",
                "memgpt-lite agents import work.json", "memgpt-lite agents import work.json "
                "--name work2")
    p.add_argument("file", metavar="FILE", help="an export (- for stdin)")
    p.add_argument("--name", metavar="NEW", help="import under this name")
    p.set_defaults(func=lambda a: _commands().cmd_agents_import(a))
    agents.set_defaults(func=lambda args: _help(agents))


def _add_config_parser(sub: Any) -> None:
    from memgpt_lite.engine.registry import FILE_KEYS, PRECEDENCE

    config = _parser(sub, "config", "the config file: defaults for every agent and command",
                     "memgpt-lite config path", "memgpt-lite config show",
                     "memgpt-lite config set model haiku",
                     "memgpt-lite config set context_window 16000",
                     "memgpt-lite config unset model")
    config.description += (f" Settings, first match wins: {PRECEDENCE}. MEMGPT_LITE_CONFIG "
                           "names another file.")
    csub = config.add_subparsers(dest="config_command", metavar="ACTION")
    p = _parser(csub, "path", "print where the config file is (or would be)",
                "memgpt-lite config path")
    p.set_defaults(func=lambda a: _config_commands().cmd_config_path(a))
    p = _parser(csub, "show", "every setting: its value and where it came from",
                "memgpt-lite config show")
    p.set_defaults(func=lambda a: _config_commands().cmd_config_show(a))
    p = _parser(csub, "set", "check a value and write it to the config file",
                "memgpt-lite config set model haiku", "memgpt-lite config set thinking on",
                "memgpt-lite config set timeout 300")
    p.add_argument("key", metavar="KEY", choices=FILE_KEYS,
                   help=f"one of {', '.join(FILE_KEYS)}")
    p.add_argument("value", metavar="VALUE", help="its value")
    p.set_defaults(func=lambda a: _config_commands().cmd_config_set(a))
    p = _parser(csub, "unset", "remove a setting from the config file",
                "memgpt-lite config unset model")
    p.add_argument("key", metavar="KEY", choices=FILE_KEYS,
                   help=f"one of {', '.join(FILE_KEYS)}")
    p.set_defaults(func=lambda a: _config_commands().cmd_config_unset(a))
    config.set_defaults(func=lambda args: _help(config))


def _add_agents_scope_parsers(asub: Any) -> None:
    p = _parser(asub, "create", "create an agent; --share LABEL puts its block LABEL in user "
                "scope, one block shared by every agent that shares it",
                "memgpt-lite agents create work --share human",
                "memgpt-lite agents create notes")
    p.add_argument("name", metavar="NAME", help="the new agent")
    p.add_argument("--share", action="append", metavar="LABEL",
                   help="a core memory block to share in user scope (repeatable)")
    p.set_defaults(func=lambda a: _commands().cmd_agents_create(a))
    p = _parser(asub, "share", "put an agent's block in user scope: it joins the block of "
                "that label the other agents share, or starts it with its own value",
                "memgpt-lite agents share default human",
                "memgpt-lite agents share work human --keep both")
    p.add_argument("name", metavar="NAME", help="the agent")
    p.add_argument("label", metavar="LABEL", help="the block, e.g. human")
    p.add_argument("--keep", choices=("shared", "mine", "both"),
                   help="when both hold text: the shared value, the agent's, or both (asked "
                        "on a terminal; needed when piped)")
    p.set_defaults(func=lambda a: _commands().cmd_agents_share(a))
    p = _parser(asub, "unshare", "give an agent its own copy of a shared block",
                "memgpt-lite agents unshare work human")
    p.add_argument("name", metavar="NAME", help="the agent")
    p.add_argument("label", metavar="LABEL", help="the block, e.g. human")
    p.set_defaults(func=lambda a: _commands().cmd_agents_unshare(a))


def _add_agents_set_parser(asub: Any) -> None:
    p = _parser(asub, "set", "change an agent's stored settings (model, summary_model, "
                "context_window, max_output_tokens, thinking, confirm_memory)",
                "memgpt-lite agents set work model=haiku context_window=16000",
                "memgpt-lite agents set work thinking=on max_output_tokens=4096",
                "memgpt-lite agents set work confirm_memory=on",
                "memgpt-lite agents set work --reset model      # back to the default model",
                "memgpt-lite agents set work --reset            # every setting to its default")
    p.add_argument("name", metavar="NAME", help="the agent")
    p.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="settings to store")
    p.add_argument("--reset", nargs="*", metavar="KEY",
                   help="set these settings (default: all of them) back to their defaults")
    p.set_defaults(func=lambda a: _config_commands().cmd_agents_set(a))


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


# --------------------------------------------------------------------------- commands
# A command's module is imported only when the command runs: rich, sqlite3 and anthropic
# come with it, and `--help` must not pay for them.


def _commands() -> Any:
    from memgpt_lite.terminal import commands

    return commands


def _config_file() -> Any:
    from memgpt_lite.engine.config_file import load

    return load()


def _config_commands() -> Any:
    from memgpt_lite.terminal import config_commands

    return config_commands


def _task_commands() -> Any:
    from memgpt_lite.terminal import task_commands

    return task_commands


def _forgetting() -> Any:
    from memgpt_lite.terminal import forget_commands

    return forget_commands


def _embedding_commands() -> Any:
    from memgpt_lite.terminal import embedding_commands

    return embedding_commands


def _eval(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import eval_commands

    return eval_commands.cmd_eval(args)


def _completion(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal import completion

    sys.stdout.write(completion.script(args.shell, build_parser()))
    return 0


MCP_EXTRA = "pip install 'memgpt-lite[mcp]'"


def _mcp(args: argparse.Namespace) -> int:
    try:  # the SDK comes with the mcp extra; nothing else ever imports it
        from memgpt_lite.terminal import mcp_server
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types", "anyio"):
            raise
        raise UserError(f"memgpt-lite mcp needs the MCP Python SDK: {MCP_EXTRA}.") from None
    return mcp_server.run_mcp(args.agent, args.project)


def _import_reply_rendering() -> None:
    import importlib

    importlib.import_module("memgpt_lite.terminal.reply_markdown")


def _chat(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.model import start_sdk_import

    # First: the SDK's import is the longest wait of a first reply; the reply's Markdown
    # rendering is imported after it, on its thread, not before the first prompt.
    start_sdk_import(then=_import_reply_rendering)
    from memgpt_lite.terminal import chat_main

    return chat_main.run_chat(agent_name=args.agent, model=args.model,
                              context_window=args.context_window, max_tokens=args.max_tokens,
                              thinking=args.thinking, record=not args.no_record,
                              timeout=args.timeout, prompt=args.prompt, json_out=args.json_out,
                              save=args.save, attach=args.attach, new=args.new,
                              resume=args.resume, project=args.project,
                              confirm_memory=args.confirm_memory)

"""The command line's entry: parsing (with the parser of cli_parser.py), dispatch, exit
codes, and the one-sentence error edge.

Only the stdlib is imported at module level so that `memgpt-lite --help` answers at once;
each command's module (commands.py, eval_commands.py, chat_main.py) is imported when the
command runs. Exit codes are listed in exit_codes.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys

from memgpt_lite.terminal.cli_parser import (
    _commands,
    _config_commands,
    _config_file,
    _forgetting,
    build_parser,
)
from memgpt_lite.terminal.exit_codes import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Terminated,
    UserError,
)


# --------------------------------------------------------------------------- main

# The commands that leave a forget cut off for the next one to finish (docs/forgetting.md
# names them): they never open the store, and nothing they show is what a forget changes.
# `completion` runs at every shell start and must print nothing but its script; `config`
# must work when the store cannot be opened (a wrong database URL is fixed with it);
# `models` is a fixed table. (`bench` works in a folder of its own, before parsing.)
KEEP_PENDING_FORGETS = ("completion", "config", "models")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if sys.platform == "win32":  # the agents' locks and the input history use fcntl
        print("memgpt-lite: Windows is not supported yet: it needs a POSIX system (Linux or "
              "macOS; on Windows, WSL).", file=sys.stderr)
        return EXIT_ERROR
    _write_leniently()
    try:
        return _main(argv)
    except BrokenPipeError:
        return _reader_left()


def _write_leniently() -> None:
    """A character the terminal's encoding cannot write (an emoji in a reply, the prompt's
    `›`, in a Latin-1 locale) is written as `?`: stdout's strict default raised there and
    ended the program with a traceback, a chat at its first prompt."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # not a text stream, closed
            if stream.errors == "strict":
                stream.reconfigure(errors="replace")


def _main(argv: list[str]) -> int:
    argv = _take_db(argv)
    if argv[:1] == ["bench"]:
        try:
            return _commands().cmd_bench(argv[1:])
        except KeyboardInterrupt:  # the bench's temporary files and servers are gone by now
            return _interrupted()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (argparse printed why)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command not in ("completion", "config"):
            _config_commands().warn_unknown(_config_file())
        if args.command not in KEEP_PENDING_FORGETS:
            _forgetting().finish_pending_forgets()  # a forget cut off is finished first
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return _interrupted()
    except Terminated as exc:  # the chat has ended as after /exit by now
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(f"\nended by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        raise
    except Exception as exc:  # only errors that speak to the user; bugs re-raise
        code = _user_facing_code(exc)
        if code is None:
            raise
        from memgpt_lite.terminal.render import visible

        print(f"memgpt-lite: {visible(_sentence(exc))}", file=sys.stderr)
        return code


def _interrupted() -> int:
    print("\ninterrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _take_db(argv: list[str]) -> list[str]:
    """The global `--db URL` (before the command) becomes MEMGPT_LITE_DATABASE_URL, so every
    command, and every process it starts, opens the same store."""
    url, rest = split_db(argv)
    if url is not None:
        os.environ["MEMGPT_LITE_DATABASE_URL"] = url
    return rest


def split_db(argv: list[str]) -> tuple[str | None, list[str]]:
    """The global `--db URL` before the command, if any, and the arguments after it."""
    if argv[:1] == ["--db"] and len(argv) > 1:
        return argv[1], argv[2:]
    if argv[:1] and argv[0].startswith("--db="):
        return argv[0][len("--db="):], argv[1:]
    return None, argv


def _reader_left() -> int:
    """Whoever read our output (`| head`) is gone: stop quietly, as Unix tools do. Point
    stdout at /dev/null so that the interpreter's own flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_ERROR


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
    if isinstance(exc, (NotADirectoryError, FileExistsError)) and _under_data_dir(exc):
        return EXIT_USAGE
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # a path the user gave
        return EXIT_USAGE
    return None


def _under_data_dir(exc: OSError) -> bool:
    from memgpt_lite.engine import config

    root = str(config.data_dir())
    return bool(exc.filename) and str(exc.filename).startswith(root)


def _sentence(exc: Exception) -> str:
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        from memgpt_lite.engine import config

        return (f"The data dir {config.data_dir()} cannot be created: a part of that path is a "
                f"file, not a folder; move it away or point MEMGPT_LITE_HOME elsewhere.")
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        if _under_data_dir(exc):
            return ("The data dir cannot be used: a name in its path (MEMGPT_LITE_HOME) is too "
                    "long for the file system; point MEMGPT_LITE_HOME elsewhere.")
        from memgpt_lite.engine.text import shorten

        where = shorten(str(exc.filename), 120) if exc.filename else "A path given"
        return f"{where}: a name in this path is too long for the file system."
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0]

"""What the user types: the chat prompt's line reader, the editor for `/core edit`, y/N questions.

`LineReader` reads one message per call with readline editing and the input history (see
engine/input_history.py: one file for every agent, under one lock; each message's lines are
added as it is sent, secrets redacted over the whole message first). `edit_in_editor` runs
$VISUAL/$EDITOR on a temporary file. `ask` is the chat's confirmation: anything but y/yes,
Ctrl-D or Ctrl-C means no. `typing_hidden` keeps what is typed while the model answers from
being echoed into the reply. Undecodable bytes read from the user (the editor's file
included) become U+FFFD.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memgpt_lite.engine.input_history import InputHistory, drop_matching
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.redact import redact_message
from memgpt_lite.terminal.exit_codes import EXIT_USAGE, UserError
from memgpt_lite.terminal.render import dumb_terminal

PROMPT = "you› "
CONTINUATION_PROMPT = "  … "
# Lines that reach the terminal this soon after the previous one were pasted, not typed.
PASTE_GAP_SECONDS = 0.03


class LineReader:
    """Terminal input: readline editing and a history file, one message per call.

    A message may span lines: a line ending in a backslash continues, and lines that arrive
    within PASTE_GAP_SECONDS of each other (a paste) are joined; with a readline that
    supports bracketed paste, a paste is inserted whole."""

    def __init__(self, history: InputHistory | None, *, prompt_to_stderr: bool = False,
                 type_ahead: TypeAhead | None = None):
        import readline

        self.readline = readline
        self.history = history
        self.type_ahead = type_ahead
        self.in_key: str | bool | None = False  # a secret the last message left open (redact)
        # With stdout redirected to a file the prompt must still reach the user.
        self.prompt_to_stderr = prompt_to_stderr
        if not dumb_terminal():  # readline leaves it off there: its codes would show
            readline.parse_and_bind("set enable-bracketed-paste on")
        readline.set_history_length(2000)
        readline.set_auto_history(False)  # a message is added whole, redacted (_remember)
        readline.clear_history()
        self.history_problem: str | None = None  # why the file could not be read, if so
        for line in self._saved_lines():
            self._add(line)
        self._seen = self._stamp()  # the history file as the up-arrow last followed it

    def _saved_lines(self) -> list[str]:
        """The history file's lines for the up-arrow. A file that cannot be read (a folder,
        no permission) only starts the up-arrow empty: history never fails a chat. readline
        cannot hold a NUL byte, which a damaged file may have."""
        if self.history is None:
            return []
        try:
            lines = self.history.lines()
        except OSError as exc:
            self.history_problem = (f"the input history {self.history.path} cannot be read "
                                    f"({exc.strerror or exc}); the up-arrow starts empty")
            return []
        return [line.replace("\x00", "\ufffd") for line in lines]

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.history.path.stat() if self.history is not None else None
        except OSError:
            return None
        return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)

    def _follow_forgets(self) -> None:
        """Drop from the up-arrow the lines gone from the history file since it was last
        read: a forget in another terminal (of any agent) scrubs the one file, and this
        chat must not offer its lines back. Every write renames a new file into place, so
        a changed stamp is any change; only then is the file read."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen or self.history_problem:
            return
        self._seen = stamp
        lines = self._saved_lines()
        if self.history_problem:  # unreadable now: keep what the up-arrow has
            return
        rl, kept = self.readline, set(lines)
        mine = self._items()
        if all(line in kept for line in mine):
            return
        rl.clear_history()
        for line in mine:
            if line in kept:
                self._add(line)

    def read(self) -> str:
        self._follow_forgets()
        lines = [self._input(self._fitting(PROMPT))]
        while lines[-1].endswith("\\") or _pending_input(PASTE_GAP_SECONDS):
            if lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1]
            try:
                lines.append(self._input(self._fitting(CONTINUATION_PROMPT)))
            except EOFError:  # Ctrl-D there leaves the chat: the lines typed wait on the ↑
                self._remember("\n".join(lines))
                raise
        text = "\n".join(lines)
        self._remember(text)
        return text

    def _fitting(self, prompt: str) -> str:
        """The prompt in characters the terminal's encoding has (`you> ` in Latin-1)."""
        out = sys.stderr if self.prompt_to_stderr else sys.stdout
        try:
            prompt.encode(getattr(out, "encoding", None) or "utf-8")
        except (UnicodeEncodeError, LookupError):
            return prompt.replace("›", ">").replace("…", "...")
        return prompt

    def _input(self, prompt: str) -> str:
        typed = self.type_ahead.take() if self.type_ahead is not None else ""
        if "\n" in typed:  # Enter was pressed while the model answered: that text is sent
            text, self.type_ahead.text = _first_input(typed)  # type: ignore[union-attr]
            more = "\n" + self._fitting(CONTINUATION_PROMPT)
            out = sys.stderr if self.prompt_to_stderr else sys.stdout
            out.write(prompt + text.replace("\n", more) + "\n")
            out.flush()
            return text
        if typed:  # shown on the prompt, editable, as if typed there
            self.readline.set_pre_input_hook(lambda: self._insert(typed))
        try:
            return self._read_line(prompt)
        finally:
            self.readline.set_pre_input_hook(None)

    def _insert(self, text: str) -> None:
        self.readline.insert_text(for_readline(text))
        self.readline.redisplay()

    def _read_line(self, prompt: str) -> str:
        if not self.prompt_to_stderr:
            return input(prompt)
        sys.stderr.write(prompt)
        sys.stderr.flush()
        return input()

    def _remember(self, text: str) -> None:
        """Add a message to the up-arrow and the history file: redacted as the agent stores
        it, over the whole message (a key pasted line by line is one secret), and over
        messages (its BEGIN line may have come alone)."""
        redacted, self.in_key = redact_message(text, self.in_key)
        lines = [line for line in redacted.split("\n") if line.strip()]
        for line in lines:
            self._add(line)
        if self.history is not None:
            with contextlib.suppress(OSError):  # history is a convenience; never fail a chat
                self.history.append(lines)

    def forget(self, matcher: Matcher) -> None:
        """Drop the lines a forget removed from the file from the up-arrow too."""
        kept, gone = drop_matching(self._items(), matcher)
        if gone:
            self.readline.clear_history()
            for line in kept:
                self._add(line)

    def _add(self, line: str) -> None:
        self.readline.add_history(for_readline(line))

    def _items(self) -> list[str]:
        """The up-arrow's lines, as text."""
        rl = self.readline
        return [from_readline(rl.get_history_item(i) or "")
                for i in range(1, rl.get_current_history_length() + 1)]

    def save(self) -> None:
        """Nothing left to write: every message was added to the file as it was sent."""


def for_readline(text: str) -> str:
    """`text` as readline can hold it. readline keeps bytes in the locale's encoding, and
    Python's UTF-8 mode (the C or POSIX locale: LANG unset, LC_ALL=C, most containers)
    leaves that ASCII while the terminal reads and writes UTF-8: there `add_history("café")`
    raised and ended the chat. Text the locale cannot encode is handed over as the bytes
    stdin's encoding gives it (as surrogate escapes), which is what readline gets when it
    is typed, and what input() decodes back when the up-arrow recalls it."""
    try:  # a file name's bytes that are not UTF-8 (surrogate escapes) pass as they are
        text.encode(_readline_encoding(), "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode(sys.stdin.encoding or "utf-8", "replace")
        return raw.decode("ascii", "surrogateescape")
    return text


def from_readline(text: str) -> str:
    """A line readline gave back, as text: bytes the locale could not decode came as
    surrogate escapes (see for_readline)."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    raw = text.encode(_readline_encoding(), "surrogateescape")
    return raw.decode(sys.stdin.encoding or "utf-8", "replace")


def line_before_word(readline: Any) -> str:
    """The line up to the word Tab completes. readline counts that place in bytes of the
    locale's encoding, so the line is cut as bytes (a `naïve/` before the word shifted
    it) and decoded as typed."""
    raw = readline.get_line_buffer().encode(_readline_encoding(), "surrogateescape")
    return raw[:readline.get_begidx()].decode(sys.stdin.encoding or "utf-8", "replace")


def _readline_encoding() -> str:
    """The locale's own encoding, which readline uses (not UTF-8 mode's)."""
    import locale

    return locale.getencoding()


def _first_input(typed: str) -> tuple[str, str]:
    """What typed-ahead text sends first, and what waits. Its lines are one message, as a
    paste at the prompt is (sent a line each, a paste of 50 lines while the model answered
    became 50 turns in a row); a slash command is a line of its own, so `/tokens⏎/cost⏎`
    typed ahead runs both. What follows the last Enter waits on the prompt."""
    done, _, partial = typed.rpartition("\n")
    lines = done.split("\n")
    command = [i for i, line in enumerate(lines) if line.startswith("/")
               and not line.startswith("//")]
    take = 1 if command[:1] == [0] else command[0] if command else len(lines)
    text = "\n".join(lines[:take]).replace("\\\n", "\n")  # a line ended with \ goes on
    waiting = "\n".join(lines[take:])
    return text, f"{waiting}\n{partial}" if waiting else partial


def _pending_input(timeout: float) -> bool:
    """More input within `timeout` seconds: the line was part of a paste."""
    try:
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
    except (OSError, ValueError):
        return False
    return bool(ready)


class EditorError(Exception):
    """The editor could not be run; the message says which one and how to choose another."""


def edit_in_editor(text: str) -> str | None:
    """Open $VISUAL/$EDITOR (default vi) on a temporary file holding text; None when the
    editor exits non-zero (e.g. `:cq` in vi), which is how a user cancels an edit."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    encoding = _editor_encoding(text)
    fd, name = tempfile.mkstemp(prefix="memgpt-core-", suffix=".md")
    keep = False
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
        returncode = _run_editor(editor, name)
        if returncode < 0:  # its launcher was killed (Ctrl-C): a window may still be open
            keep = True
            raise EditorError(f"{editor!r} was ended by a signal before it finished; the text "
                              f"is kept in {name}; nothing was changed")
        if returncode != 0:
            return None
        try:
            return Path(name).read_text(encoding=encoding, errors="replace")
        except OSError as exc:  # the editor removed the file or put a folder in its place
            raise EditorError(f"{editor!r} left no file to read back ({exc.strerror or exc}); "
                              "nothing was changed") from None
    finally:
        if not keep:
            with contextlib.suppress(OSError):  # already gone, or a folder the editor made
                os.unlink(name)


def _editor_encoding(text: str) -> str:
    """The locale's encoding, which the editor reads and writes (a Latin-1 terminal's
    editor showed UTF-8 as mojibake); UTF-8 for a text the locale cannot hold, whole, and
    for the C locale's ASCII, of which UTF-8 is the same bytes and more."""
    import codecs

    encoding = _readline_encoding()
    try:
        text.encode(encoding)
        return "utf-8" if codecs.lookup(encoding).name == "ascii" else encoding
    except (UnicodeEncodeError, LookupError):
        return "utf-8"


def _run_editor(editor: str, name: str) -> int:
    """The editor's exit status. Ctrl-C while it runs reaches this process too: it is let
    pass (an editor on the terminal takes it itself), since a KeyboardInterrupt here would
    delete the file under a GUI editor's open window (`code --wait`). A handler rather
    than SIG_IGN, because the editor would inherit an ignored signal."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: None) if main else None
    try:
        return subprocess.run([*shlex.split(editor), name], check=False,
                              stdout=_screen()).returncode
    except (OSError, ValueError) as exc:  # not found, not executable, unbalanced quotes
        reason = getattr(exc, "strerror", None) or exc
        raise EditorError(f"cannot run {editor!r} ({reason}); set $VISUAL or $EDITOR"
                          ) from None
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _screen() -> int | None:
    """Where the editor draws: the terminal. With stdout redirected (`chat > transcript.md`)
    it drew its screen into that file, leaving the user before a blank terminal that
    seemed to hang; stderr is the terminal then. None: stdout, as inherited."""
    try:
        if sys.stdout.isatty() or not sys.stderr.isatty():
            return None
        return sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # a stream without a descriptor (tests)
        return None


def answer(question: str) -> str:
    """The line typed in answer to `question`. With stdout redirected (`chat > transcript.md`)
    input() would write the question into that file, leaving the user to wait for nothing:
    it goes to stderr, the terminal, then."""
    if sys.stdout.isatty():
        return input(question)
    sys.stderr.write(question)
    sys.stderr.flush()
    return input()


def end_line() -> None:
    """After Ctrl-D or Ctrl-C at a question: what is printed next starts on a line of its own
    (on the side the question went to)."""
    print(file=sys.stdout if sys.stdout.isatty() else sys.stderr, flush=True)


def ask(question: str) -> bool:
    """A y/N question on the terminal; Ctrl-D or Ctrl-C answers no (and ends the line, so
    what is printed next starts on a line of its own)."""
    try:
        return answer(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        end_line()
        return False


def confirmed(yes: bool, question: str) -> bool:
    """--yes, or a y/N answer on a terminal; without a terminal there is no one to ask, and
    deleting unasked is not an option. Ctrl-C here interrupts the command (exit 130)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UserError("Refusing to delete without confirmation on a non-interactive "
                        "terminal; add --yes.", EXIT_USAGE)
    try:
        typed = answer(f"{question} [y/N] ")
    except EOFError:
        end_line()
        return False
    return typed.strip().lower() in ("y", "yes")


class TypeAhead:
    """Keys typed while the model answers: not echoed into the reply (an echo, or the ^C
    of Ctrl-C, would shift the live region and leave a copy of its first line on screen),
    but kept and put on the next prompt as if typed there (its text: arrows and other keys
    that are not text are dropped)."""

    def __init__(self, stream: object = None):
        self.stream = stream
        self.text = ""

    def _terminal(self) -> tuple[Any, int, list] | None:
        """(termios, the stream's fd, its attributes now); None when the stream is not a
        POSIX terminal (nothing is echoed then, and nothing waits unread)."""
        try:
            import termios
        except ImportError:  # not POSIX
            return None
        try:
            fd = (self.stream or sys.stdin).fileno()  # type: ignore[attr-defined]
            return termios, fd, termios.tcgetattr(fd)
        except (termios.error, OSError, ValueError, AttributeError):
            return None

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        tty = self._terminal()
        if tty is None:
            yield
            return
        termios, fd, saved = tty
        quiet = list(saved)
        # Not canonical either: the kernel holds at most 4,095 characters of a line it
        # edits, and a longer paste lost the rest; its editing keys are done in _drain.
        quiet[3] &= ~(termios.ECHO | termios.ECHOCTL | termios.ICANON)
        termios.tcsetattr(fd, termios.TCSANOW, quiet)  # TCSANOW: keep what was typed ahead
        try:
            with _stoppable(fd, saved, termios):
                yield
        finally:
            self.text += _drain(fd, quiet, termios)
            termios.tcsetattr(fd, termios.TCSANOW, saved)

    @contextlib.contextmanager
    def asking(self) -> Iterator[None]:
        """Inside `hidden`, a question for the user (a memory write to approve): what was
        typed ahead is kept for the next prompt, and the answer is echoed as typed."""
        tty = self._terminal()
        if tty is None:
            yield
            return
        termios, fd, quiet = tty
        self.text += _drain(fd, quiet, termios)
        talking = list(quiet)
        talking[3] |= termios.ECHO | termios.ICANON
        termios.tcsetattr(fd, termios.TCSANOW, talking)
        try:
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, quiet)

    def take(self) -> str:
        text, self.text = self.text, ""
        return text


@contextlib.contextmanager
def _stoppable(fd: int, saved: list, termios: Any) -> Iterator[None]:
    """Ctrl-Z while the model answers: the shell gets the terminal as it was before the turn
    (echo on, the cursor shown; it was left with no cursor), and `fg` puts back the modes
    the turn had (the shell had turned echo on again, so typing went into the reply)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only it has handlers
        yield
        return

    def stop(_signum: int, _frame: Any) -> None:
        now = termios.tcgetattr(fd)
        termios.tcsetattr(fd, termios.TCSANOW, saved)
        show_cursor()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until `fg`
        signal.signal(signal.SIGTSTP, stop)
        termios.tcsetattr(fd, termios.TCSANOW, now)

    previous = signal.signal(signal.SIGTSTP, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous)


def show_cursor() -> None:
    """The cursor shown again (a live region hides it), on a terminal that takes codes."""
    if sys.stdout.isatty() and not dumb_terminal():
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.write("\x1b[?25h")
            sys.stdout.flush()


def _drain(fd: int, attrs: list, termios: object) -> str:
    """What was typed and not yet read, read at once: in canonical mode a line without its
    Enter would stay invisible to the prompt's reader until Enter is pressed."""
    raw = list(attrs)
    raw[3] &= ~termios.ICANON  # type: ignore[attr-defined]
    raw[6] = list(raw[6])
    raw[6][termios.VMIN], raw[6][termios.VTIME] = 0, 0  # type: ignore[attr-defined]
    termios.tcsetattr(fd, termios.TCSANOW, raw)  # type: ignore[attr-defined]
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    encoding = getattr(sys.stdin, "encoding", None) or "utf-8"
    typed = b"".join(chunks).decode(encoding, errors="replace").replace("\r", "\n")
    return _CONTROLS.sub("", _edited(_SEQUENCES.sub("", typed)))


def _edited(typed: str) -> str:
    """The line editing a canonical terminal does: Backspace erases a character, Ctrl-U
    the line, Ctrl-W a word (never past a line already ended with Enter)."""
    out: list[str] = []
    for ch in typed:
        if ch in "\x7f\x08":
            if out and out[-1] != "\n":
                out.pop()
        elif ch == "\x15":
            while out and out[-1] != "\n":
                out.pop()
        elif ch == "\x17":
            while out and out[-1] in " \t":
                out.pop()
            while out and out[-1] not in " \t\n":
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


# Keys that are not text: an arrow, Home or F5 (escape sequences), Alt+key, other controls.
# Put on the prompt they would be literal characters (`^[[A` after pressing Up), not keys.
_SEQUENCES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|O[^\n]|[^\n])?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


typing_hidden = TypeAhead().hidden  # for callers that do not need what was typed

"""The terminal chat: `ChatSession` (turns and slash commands), the input loops, and
`run_chat`, which wires a real store, agent, model client, recorder and terminal together.

Rendering is elsewhere: live turns in view.py, slash-command results in render.py; what the
user types (prompt, editor, confirmations) in user_input.py. The agent never prints; the
terminal package is the only place that talks to the terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

from memgpt_lite.engine import config
from memgpt_lite.engine.privacy import (
    HISTORY_FILE,
    apply_forget,
    find_forget_matches,
    turn_strings,
)
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import shorten
from memgpt_lite.engine.turns import turn_ranges
from memgpt_lite.terminal import render
from memgpt_lite.terminal.user_input import EditorError, LineReader, ask, edit_in_editor
from memgpt_lite.terminal.view import ChatView

HELP = """\
Commands
  /help                 this list
  /core                 core memory blocks: label, used/limit chars, value
  /core edit LABEL      edit a block in $EDITOR (the limit is checked; history is kept)
  /search QUERY         search recall (every message ever sent), ranked like the model's tool
  /archival [QUERY]     search archival memory, or list the newest passages
  /context              token ledger per section, the queue's turns, the summary
  /tokens               this session's token usage and cost
  /pop [N]              undo the last N turns (default 1): removed from the queue and recall
  /retry                send your last message again (replacing its answer, if any)
  /agents               all agents in this data dir
  /forget QUERY         show matching messages and passages, then delete them on confirmation
  /exit                 leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)

Input
  Enter sends. End a line with \\ to continue on the next line; a multi-line paste
  arrives as one message. Ctrl-C while the model answers cancels that turn (your
  message stays in recall; /retry sends it again). Up/down browse history. To send a
  message that starts with /, type // (//etc/hosts sends /etc/hosts)."""


# --------------------------------------------------------------------------- the session


class ChatSession:
    """One interactive (or piped) conversation with an agent: turns and slash commands.

    `recorder_factory()` makes the session's Recorder at the first turn (None: no recording);
    `confirm(question) -> bool` asks the user (None: not possible, e.g. piped input);
    `edit(text) -> str | None` opens an editor on text (None: cancelled; EditorError: the
    editor could not be run)."""

    def __init__(self, agent: Any, console: Console, view: ChatView, *,
                 recorder_factory: Callable[[], Any] | None = None,
                 confirm: Callable[[str], bool] | None = None,
                 edit: Callable[[str], str | None] | None = None):
        self.agent = agent
        self.console = console
        self.view = view
        self.recorder: Any = None
        self.tally = Tally()  # this session's events, for /tokens
        self.recorder_factory = recorder_factory
        self.reader: LineReader | None = None
        self.confirm = confirm
        self.edit = edit or edit_in_editor
        self.commands: dict[str, Callable[[str], bool | None]] = {
            "help": self.cmd_help, "core": self.cmd_core, "search": self.cmd_search,
            "archival": self.cmd_archival, "context": self.cmd_context,
            "tokens": self.cmd_tokens, "pop": self.cmd_pop, "retry": self.cmd_retry,
            "agents": self.cmd_agents, "forget": self.cmd_forget, "exit": self.cmd_exit,
            "quit": self.cmd_exit,
        }

    # ---------------------------------------------------------------- input

    def handle_line(self, line: str) -> bool:
        """Run one input (a message or a /command). False means: leave the chat."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/") and not text.startswith("//"):
            return self.run_command(text)
        self.run_turn(text[1:] if text.startswith("//") else line.strip("\n"))
        return True

    def run_command(self, text: str) -> bool:
        name, _, rest = text[1:].partition(" ")
        command = self.commands.get(name.lower())
        if command is None:
            self.console.print(f"unknown command /{name} — type /help", markup=False)
            return True
        return command(rest.strip()) is not False

    def run_turn(self, text: str) -> None:
        self.view.start_turn()
        steps = self._steps(text)
        try:
            for event in steps:
                self.tally.add(event)
                self.view.handle(event)
        except KeyboardInterrupt:
            steps.close()  # the agent abandons the turn: nothing of it stays in the queue
            self.view.interrupted()
        finally:
            self.view.stop()

    def _steps(self, text: str) -> Iterator[Any]:
        if self.recorder is None and self.recorder_factory is not None:
            self.recorder = self.recorder_factory()  # no file for a session without turns
        if self.recorder is None:
            return self.agent.step(text)
        from memgpt_lite.engine.recording import recorded_step

        return recorded_step(self.agent, self.recorder, text)

    def close(self) -> None:
        self.view.stop()
        self._end_recording()

    def _end_recording(self) -> None:
        """Close the current recording. Called after a command changes the agent outside a
        turn (/pop, /retry, /core edit, /forget): the next turn starts a new recording whose
        header snapshots the changed state, so every recording still replays exactly."""
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None

    # ---------------------------------------------------------------- commands

    def cmd_help(self, rest: str) -> None:
        self.console.print(HELP, markup=False, highlight=False)

    def cmd_core(self, rest: str) -> None:
        words = rest.split()
        if not words:
            render.print_core_blocks(self.console, self.agent.blocks())
        elif words[0] == "edit" and len(words) == 2:
            self._edit_block(words[1])
        else:
            self.console.print("usage: /core  or  /core edit LABEL", markup=False)

    def _edit_block(self, label: str) -> None:
        block = next((b for b in self.agent.blocks() if b.label == label), None)
        if block is None:
            labels = ", ".join(b.label for b in self.agent.blocks())
            self.console.print(f"no block {label!r} (blocks: {labels})", markup=False)
            return
        try:
            new = self.edit(block.value)
        except EditorError as exc:
            self.console.print(f"not edited: {exc}", markup=False)
            return
        if new is None or new.rstrip("\n") == block.value:
            self.console.print(f"{label}: unchanged", markup=False)
            return
        try:
            saved = self.agent.edit_block(label, new.rstrip("\n"))
        except ValueError as exc:
            self.console.print(f"not saved: {exc}", markup=False)
            return
        self._end_recording()
        self.console.print(f"{label}: saved · {saved.used:,}/{saved.limit:,} chars", markup=False)

    def cmd_search(self, rest: str) -> None:
        if not rest:
            self.console.print("usage: /search QUERY", markup=False)
            return
        dense, weight, events = self.agent.tools.dense_candidates("conversation_search",
                                                                 "messages", rest)
        self._notices(events)
        page = self.agent.store.search_messages(self.agent.id, rest, page=1, per_page=10,
                                                dense=dense, keyword_weight=weight)
        render.print_search_page(self.console, page, "messages")

    def cmd_archival(self, rest: str) -> None:
        store, agent_id = self.agent.store, self.agent.id
        if rest:
            dense, weight, events = self.agent.tools.dense_candidates("archival_search",
                                                                     "passages", rest)
            self._notices(events)
            page = store.search_passages(agent_id, rest, page=1, per_page=10, dense=dense,
                                         keyword_weight=weight)
            render.print_search_page(self.console, page, "passages")
            return
        render.print_newest_passages(self.console, store.count_passages(agent_id),
                                     store.list_passages(agent_id, limit=10))

    def _notices(self, events: list[Any]) -> None:
        """A hybrid search that fell back to keywords says so (once a session)."""
        for event in events:
            if event.kind == "notice":
                self.console.print(event.message, markup=False, style="yellow")

    def cmd_context(self, rest: str) -> None:
        render.print_context(self.console, self.agent.context_report())

    def cmd_tokens(self, rest: str) -> None:
        render.print_tokens(self.console, self.tally.usage, self.tally.cost_usd)

    def cmd_pop(self, rest: str) -> None:
        try:
            n = int(rest) if rest else 1
        except ValueError:
            n = 0
        if n < 1:
            self.console.print("usage: /pop [N] with N ≥ 1", markup=False)
            return
        queued = {t.id: t for t in self.agent.context_report().turns}
        removed = self.agent.pop_turns(n)
        if not removed:
            self.console.print("nothing to pop: there are no turns yet", markup=False)
            return
        self._end_recording()
        for turn_id in removed:
            info = queued.get(turn_id)
            words = f" \"{shorten(info.first_words, 50)}\"" if info is not None else ""
            size = f" ({info.tokens:,} tokens)" if info is not None else ""
            self.console.print(f"removed turn {turn_id}{words}{size} from the context queue "
                               f"and from recall", markup=False, highlight=False)

    def cmd_retry(self, rest: str) -> None:
        text = self.agent.last_user_text()
        if not text:
            self.console.print("nothing to retry yet", markup=False)
            return
        store, agent_id = self.agent.store, self.agent.id
        queued = {m.turn_id for m in store.context_messages(agent_id)}
        last = store.max_turn_id(agent_id)
        if last in queued:  # it was answered: replace that answer
            removed = self.agent.pop_turns(1)
            self._end_recording()
            self.console.print(f"retrying: removed turn {turn_ranges(removed)} from the queue "
                               f"and recall; sending your last message again", markup=False)
        else:
            self.console.print("retrying your last message", markup=False)
        self.run_turn(text)

    def cmd_agents(self, rest: str) -> None:
        render.print_agents(self.console, self.agent.store)

    def cmd_forget(self, rest: str) -> None:
        if not rest:
            self.console.print("usage: /forget QUERY", markup=False)
            return
        store = self.agent.store
        matches = find_forget_matches(store, self.agent.id, rest)
        render.print_forget_matches(self.console, matches, rest)
        if matches.empty:
            return
        if self.confirm is None:
            self.console.print("/forget needs a confirmation; run `memgpt-lite forget QUERY "
                               "--yes` instead", markup=False)
            return
        if not self.confirm("Delete these from the store, the search indexes and the "
                            "recordings?"):
            self.console.print("nothing deleted", markup=False)
            return
        row = store.get_agent_by_id(self.agent.id)
        self._end_recording()  # its file is rewritten by the scrub
        secrets = turn_strings(store, self.agent.id, matches.turn_ids)
        self.console.print(apply_forget(store, row, matches), markup=False)
        if self.reader is not None:  # else readline would write them back at exit
            self.reader.forget(rest, secrets)

    def cmd_exit(self, rest: str) -> bool:
        return False


# --------------------------------------------------------------------------- input loops


def interactive_loop(session: ChatSession, read: Callable[[], str]) -> int:
    """Prompt until /exit, Ctrl-D, or Ctrl-C twice in a row at the prompt."""
    armed = False
    while True:
        try:
            line = read()
        except EOFError:
            session.console.print()
            return 0
        except KeyboardInterrupt:
            if armed:
                session.console.print()
                return 0
            armed = True
            session.console.print("\n(press Ctrl-C again or Ctrl-D to leave)", style="dim")
            continue
        armed = False
        try:
            if not session.handle_line(line):
                return 0
        except KeyboardInterrupt:  # e.g. during /core edit or a long /forget
            session.view.stop()
            session.console.print("\n(cancelled)", style="dim")


def piped_loop(session: ChatSession, lines: Iterator[str]) -> int:
    """Every input line is one message (slash commands still work); 0 at end of input."""
    for line in lines:
        if not session.handle_line(line.rstrip("\n")):
            break
    return 0


# --------------------------------------------------------------------------- wiring


def run_chat(*, agent_name: str = "default", model: str | None = None,
             context_window: str | None = None, max_tokens: str | None = None,
             thinking: bool | None = None, record: bool = True) -> int:
    """`memgpt-lite chat`: open or create the agent and talk to it on this terminal."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.store import Store
    from memgpt_lite.engine.tokens import price_table

    typed = sys.stdin.isatty()  # else piped: one message per line, no prompt
    styled = typed and sys.stdout.isatty()
    console = render.make_console(plain=not styled)
    # Piped runs keep stdout for the conversation alone; the banner goes to stderr.
    info = console if typed else render.make_console(sys.stderr, plain=True)
    price_table()  # a bad MEMGPT_LITE_PRICES file is reported now, not after a paid call
    client = AnthropicClient()  # raises AuthError saying how to set the key
    with Store.open_default() as store:
        settings = chat_settings(store, agent_name, model, context_window, thinking,
                                 max_tokens=max_tokens)
        agent = Agent.open(store, agent_name, model_client=client, summary_client=client,
                           settings=settings)
        session = ChatSession(agent, console, ChatView(console, live=styled, markdown=styled),
                              recorder_factory=(lambda: open_recorder(agent)) if record else None,
                              confirm=ask if typed else None)
        from memgpt_lite.terminal.embedding_commands import chat_embedder

        indexer = chat_embedder(agent)  # None unless MEMGPT_LITE_EMBEDDER is set
        _banner(info, agent, store, record)
        client.warm_up()
        try:
            return _converse(session, typed)
        finally:
            session.close()
            if indexer is not None:
                indexer.close()
            agent.close()  # releases the agent's process lock


def _converse(session: ChatSession, typed: bool) -> int:
    """Typed: the prompt with readline editing and history. Piped: one message a line."""
    if not typed:
        return piped_loop(session, iter(sys.stdin))
    reader = session.reader = LineReader(config.data_dir() / HISTORY_FILE)
    try:
        return interactive_loop(session, reader.read)
    finally:
        reader.save()


def chat_settings(store: Any, name: str, model: str | None, context_window: str | None,
                  thinking: bool | None, *, max_tokens: str | None = None) -> Any:
    """Stored settings of the agent (or defaults), then env vars, then flags."""
    row = store.get_agent(name)
    settings = config.Settings.from_dict(row.settings) if row is not None else config.Settings()
    settings = settings.with_env()
    if model:
        settings.model = model
    if context_window:
        settings.context_window = config.parse_positive_int(context_window, "--context-window")
    if max_tokens:
        settings.max_output_tokens = config.parse_positive_int(max_tokens, "--max-tokens")
    if thinking is not None:
        settings.thinking = thinking
    if settings.thinking and settings.max_output_tokens <= settings.thinking_budget:
        raise config.ConfigError(
            f"Extended thinking needs more than {settings.thinking_budget:,} max output tokens "
            f"(it spends up to that many thinking); use --max-tokens {2 * settings.thinking_budget}"
            " or --no-thinking.")
    return settings


def open_recorder(agent: Any) -> Any:
    """A Recorder for this session with its header written (see recording.py)."""
    from memgpt_lite.engine import recording

    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    return recorder


def _banner(console: Console, agent: Any, store: Any, record: bool) -> None:
    state = "created" if getattr(agent, "created", False) else "resumed"
    rec = (f"recording to {config.recordings_dir() / agent.row.uid}" if record
           else "not recording")
    for line in (f"agent {agent.name!r} ({state}) · model {agent.settings.model}",
                 f"data {store.path} · {rec}"):
        console.print(line, markup=False, highlight=False, style="dim", soft_wrap=True)
    if console.is_terminal:
        console.print("type /help for commands", style="dim")


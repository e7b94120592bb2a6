"""The terminal chat: `ChatSession` (turns and slash commands), the input loops, and
`run_chat`, which wires a real store, agent, model client, recorder and terminal together.

Rendering is elsewhere: live turns in view.py, slash-command results in render.py; what the
user types (prompt, editor, confirmations) in user_input.py. The agent never prints; the
terminal package is the only place that talks to the terminal. It is one module (past 600
lines) because the slash commands, the loops and the wiring share the session's state.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

from memgpt_lite.engine import config, privacy
from memgpt_lite.engine.input_history import InputHistory
from memgpt_lite.engine.records import Block
from memgpt_lite.engine.store.base import BlockChanged
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.text import shorten
from memgpt_lite.terminal import render
from memgpt_lite.terminal.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, UserError
from memgpt_lite.terminal.user_input import (
    EditorError,
    LineReader,
    TypeAhead,
    ask,
    edit_in_editor,
)
from memgpt_lite.terminal.view import ChatView, JsonView

HELP = """\
Commands
  /help                 this list
  /core                 core memory blocks: label, used/limit chars, scope, value
  /core edit LABEL      edit a block in $EDITOR (the limit is checked; history is kept)
  /search QUERY         search recall (every message ever sent), ranked like the model's tool
  /archival [QUERY]     search archival memory, or list the newest passages
  /context              token ledger per section, the queue's turns, the summary
  /tokens               this session's token usage and cost
  /pop [N]              undo the last N turns (default 1): removed from the queue and recall,
                        their core memory edits and archival inserts and corrections undone
  /retry                send your last message again (its answer and memory edits, if any,
                        are undone first; your message stays stored once)
  /new                  start a new conversation (core, archival memory and recall stay)
  /resume ID            go back to conversation ID (its queue and summary)
  /conversations        this agent's conversations (also `memgpt-lite conversations`)
  /title TEXT           name this conversation
  /agents               all agents in this data dir
  /forget [--any|--regex] [--dry-run] QUERY
                        show everything matching QUERY (a phrase, any case, whole words) in
                        messages, passages, core memory, the summary, recordings and the input
                        history; forget it on confirmation
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
    editor could not be run); `hide_typing()` is a context manager held while the model
    answers (on a terminal: what is typed ahead is kept for the prompt, not echoed)."""

    def __init__(self, agent: Any, console: Console, view: ChatView | JsonView, *,
                 recorder_factory: Callable[[], Any] | None = None,
                 confirm: Callable[[str], bool] | None = None,
                 edit: Callable[[str], str | None] | None = None,
                 hide_typing: Callable[[], Any] | None = None):
        self.agent = agent
        self.console = console
        self.view = view
        self.recorder: Any = None
        self.tally = Tally()  # this session's events, for /tokens and the goodbye line
        self.failed_turns = 0  # turns that ended with an error (the exit status says so)
        self.interrupted_turns = 0  # turns cancelled by Ctrl-C
        self.hide_typing = hide_typing or contextlib.nullcontext
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
        from memgpt_lite.terminal.task_commands import slash_commands

        self.commands.update(slash_commands(self))  # /new, /resume, /conversations, /title

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
            self.console.print(render.shown(f"unknown command /{name} — type /help"))
            return True
        return command(rest.strip()) is not False

    def run_turn(self, text: str, *, retry: bool = False) -> None:
        with self.hide_typing():
            self.view.start_turn()
            steps = self._steps(text, retry)
            try:
                for event in steps:
                    self.tally.add(event)
                    self.failed_turns += event.kind == "turn_end" and not event.completed
                    self.view.handle(event)
            except KeyboardInterrupt:
                steps.close()  # the agent abandons the turn: nothing of it stays in the queue
                self.interrupted_turns += 1
                self.view.interrupted()
            finally:
                # Also on any other way out (a closed stdout pipe): the turn ends now, while
                # the store is open, not whenever the generator is collected.
                steps.close()
                self.view.stop()

    def _steps(self, text: str, retry: bool = False) -> Iterator[Any]:
        from memgpt_lite.engine.recording import RecordingUnavailable, recorded_step

        problem = self._recording_problem()
        if self.recorder is None and self.recorder_factory is not None:
            try:
                self.recorder = self.recorder_factory()  # no file for a session without turns
            except RecordingUnavailable as exc:  # the turn goes on; recording stops for good
                self.recorder_factory, problem = None, str(exc)
        if self.recorder is None:
            steps = self.agent.retry() if retry else self.agent.step(text)
        else:
            steps = recorded_step(self.agent, self.recorder, text, retry=retry)
        return steps if problem is None else _noticed(steps, problem)

    def _recording_problem(self) -> str | None:
        """A recording that failed (a full disk mid-session) is dropped, and no new one is
        started; its failure is passed on once if the turn that hit it could not say so."""
        if self.recorder is None or not self.recorder.failed:
            return None
        recorder, self.recorder, self.recorder_factory = self.recorder, None, None
        recorder.close()
        return None if recorder.announced else recorder.failed

    def close(self) -> None:
        self.view.close()
        self._end_recording()

    def goodbye(self) -> str | None:
        """The line that ends a chat that had turns: turns, tokens, cost, cache hits."""
        t = self.tally
        if not t.turns:
            return None
        u = t.paid_usage
        failed = f" ({self.failed_turns} failed)" if self.failed_turns else ""
        return (f"session: {t.turns} turn{'s' if t.turns != 1 else ''}{failed} · "
                f"{u.total_input:,} input tokens ({render.cache_hit(u):.0%} from cache) · "
                f"{u.output_tokens:,} output tokens · ${t.paid_cost_usd:.4f}")

    def end_recording(self) -> None:
        """Close the current recording: the agent moves to another conversation (the next
        turn starts a recording of that one)."""
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
            render.print_core_blocks(self.console, self.agent.blocks(),
                                     self.agent.store.shared_block_agents)
        elif words[0] == "edit" and len(words) == 2:
            self._edit_block(words[1])
        else:
            self.console.print("usage: /core  or  /core edit LABEL", markup=False)

    def _edit_block(self, label: str) -> None:
        block = next((b for b in self.agent.blocks() if b.label == label), None)
        if block is None:
            labels = ", ".join(b.label for b in self.agent.blocks())
            self.console.print(render.shown(f"no block {label!r} (blocks: {labels})"))
            return
        text = self._edit_until_fits(block)
        if text is None:
            return
        try:
            saved = self.agent.edit_block(label, text, expected=block.value)
        except BlockChanged as exc:  # another agent sharing the block edited it meanwhile
            self.console.print(render.shown(f"not saved: {exc} Your text, to copy from:"))
            self.console.print(render.shown(text), soft_wrap=False)
            self.console.print(render.shown(f"/core edit {label} starts again from its new "
                                            "value."))
            return
        except ValueError as exc:
            self.console.print(render.shown(f"not saved: {exc}"))
            return
        self._end_recording()
        self.console.print(f"{label}: saved · {saved.used:,}/{saved.limit:,} chars", markup=False)

    def _edit_until_fits(self, block: Any) -> str | None:
        """The edited text once it fits the block's limit; None (said why) when the editor
        failed, the edit was cancelled or left the block unchanged. Text over the limit goes
        back to the editor rather than being lost; saving it unchanged gives up."""
        text = block.value
        while True:
            try:
                new = self.edit(text)
            except EditorError as exc:
                self.console.print(render.shown(f"not edited: {exc}"))
                return None
            new = None if new is None else new.rstrip("\n")
            if new is None or new == block.value or (new == text and text != block.value):
                done = "unchanged" if text == block.value else "not saved"
                self.console.print(render.shown(f"{block.label}: {done}"))
                return None
            if len(new) <= block.limit:
                return new
            text = new
            self.console.print(render.shown(
                f"{block.label}: {len(text):,} chars is {len(text) - block.limit:,} over the "
                f"limit of {block.limit:,}; reopening the editor (unchanged: give up)"))

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
        render.print_tokens(self.console, self.tally)

    def cmd_pop(self, rest: str) -> None:
        try:
            n = int(rest) if rest else 1
        except ValueError:
            n = 0
        if n < 1:
            self.console.print("usage: /pop [N] with N ≥ 1", markup=False)
            return
        queued = {t.id: t for t in self.agent.context_report().turns}
        popped = self.agent.pop_turns(n)
        if not popped:
            self.console.print("nothing to pop: there are no turns yet", markup=False)
            return
        self._end_recording()
        for turn_id in popped.turn_ids:
            info = queued.get(turn_id)
            words = (f" \"{render.visible(shorten(info.first_words, 50))}\""
                     if info is not None else "")
            size = f" ({info.tokens:,} tokens)" if info is not None else ""
            self.console.print(f"removed turn {turn_id}{words}{size} from the context queue "
                               f"and from recall", markup=False, highlight=False)
        for line in popped.memory_lines():
            self.console.print(render.visible(line), markup=False, highlight=False)

    def cmd_retry(self, rest: str) -> None:
        text = self.agent.last_user_text()
        if not text:
            self.console.print("nothing to retry yet", markup=False)
            return
        store, agent_id = self.agent.store, self.agent.id
        last = store.max_turn_id(agent_id)
        if any(m.role == "assistant" for m in store.turn_messages(agent_id, last)):
            # Agent.retry undoes that turn (in the same recorded turn, so replay does too)
            self.console.print(f"retrying: turn {last} undone (its reply and memory edits); "
                               "sending your last message again", markup=False)
        else:  # its stored message is sent again, not stored a second time
            self.console.print("retrying your last message", markup=False)
        self.run_turn(text, retry=True)

    def cmd_agents(self, rest: str) -> None:
        render.print_agents(self.console, self.agent.store)

    def cmd_forget(self, rest: str) -> None:
        from memgpt_lite.terminal.forget_commands import forget_matcher, planned

        flags, query = set(), rest.strip()
        while query.partition(" ")[0] in ("--any", "--regex", "--dry-run"):
            flag, _, query = query.partition(" ")
            flags.add(flag)
            query = query.strip()
        if not query:
            self.console.print("usage: /forget [--any|--regex] [--dry-run] QUERY", markup=False)
            return
        store = self.agent.store
        try:
            matcher = forget_matcher(query, any_word="--any" in flags,
                                     regex="--regex" in flags)
            plan = planned(store, store.get_agent_by_id(self.agent.id), matcher)
        except UserError as exc:
            self.console.print(render.shown(str(exc)))
            return
        render.print_forget_plan(self.console, plan, full="--dry-run" in flags)
        if plan.empty or "--dry-run" in flags:
            return
        if self.confirm is None:
            self.console.print("/forget needs a confirmation; run `memgpt-lite forget QUERY "
                               "--yes` instead", markup=False)
            return
        if not self.confirm("Forget all of this? It cannot be undone."):
            self.console.print("nothing forgotten", markup=False)
            return
        self._end_recording()  # its file is scrubbed too; the next turn starts a new one
        self.console.print(render.shown(render.forget_summary(privacy.forget(store, plan))))
        if self.reader is not None:
            self.reader.forget(matcher)

    def cmd_exit(self, rest: str) -> bool:
        return False


# --------------------------------------------------------------------------- input loops


def interactive_loop(session: ChatSession, read: Callable[[], str]) -> int:
    """Prompt until /exit, Ctrl-D, or Ctrl-C twice in a row at the prompt."""
    armed = False
    # What answers the prompt goes where the prompt is (stderr when stdout is redirected).
    prompt_side = getattr(getattr(session.view, "meta_console", None), "print", None) \
        if getattr(session.reader, "prompt_to_stderr", False) else None
    say = prompt_side or session.console.print
    while True:
        try:
            line = read()
        except EOFError:
            say()
            return 0
        except KeyboardInterrupt:
            if armed:
                say()
                return 0
            armed = True
            say("\n(press Ctrl-C again or Ctrl-D to leave)", style="dim")
            continue
        armed = False
        try:
            if not session.handle_line(line):
                return 0
        except KeyboardInterrupt:  # e.g. during /core edit or a long /forget
            session.view.stop()
            session.console.print("\n(cancelled)", style="dim")


def piped_loop(session: ChatSession, lines: Iterator[str]) -> int:
    """Every input line is one message (slash commands still work); at end of input, 0 when
    every turn succeeded, 1 when any failed."""
    for line in lines:
        if not session.handle_line(line.rstrip("\n")):
            break
    return 1 if session.failed_turns else 0


def one_shot(session: ChatSession, text: str) -> int:
    """`chat -p TEXT`: one message, its reply, and the exit status of that turn (130 when
    Ctrl-C cancelled it, as for any command interrupted)."""
    if not text.strip():
        raise UserError("-p needs a message (or - to read it from stdin).", EXIT_USAGE)
    session.run_turn(text)
    if session.interrupted_turns:
        return EXIT_INTERRUPTED
    return 1 if session.failed_turns or not session.tally.completed_turns else 0


# --------------------------------------------------------------------------- wiring


def run_chat(*, agent_name: str = "default", model: str | None = None,
             context_window: str | None = None, max_tokens: str | None = None,
             thinking: bool | None = None, record: bool = True,
             timeout: str | None = None, prompt: str | None = None,
             json_out: bool = False, new: bool = False, resume: str | None = None,
             project: str | None = None, confirm_memory: bool | None = None) -> int:
    """`memgpt-lite chat`: open or create the agent and talk to it on this terminal.

    Replies go to stdout; the banner, tool, notice and status lines to stderr unless stdout
    is the terminal itself. `prompt`: answer that one message and return (`-`: read it from
    stdin). `json_out`: one JSON object per event on stdout instead of text. `new`: a new
    conversation; `resume`: that conversation (default: the most recent); `project`: the
    project directory (docs/tasks.md); `confirm_memory`: ask before memory writes."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.project import project_root
    from memgpt_lite.engine.store import open_store
    from memgpt_lite.engine.tokens import price_table, resolve_model

    _decode_stdin_leniently()
    _check_agent_name(agent_name)
    typed = sys.stdin.isatty() and prompt is None  # else one message per line, no prompt
    styled = typed and sys.stdout.isatty() and not json_out
    console = render.make_console(plain=not styled)
    # stdout is for the conversation alone when it is not the terminal itself.
    meta = console if styled else render.make_console(sys.stderr, plain=True)
    price_table()  # a bad MEMGPT_LITE_PRICES file is reported now, not after a paid call
    if prompt == "-":
        prompt = sys.stdin.read().strip()
    model = _checked_model(meta, resolve_model(model) if model else None)
    root = str(project_root(project))  # a bad --project is one sentence before anything opens
    conversation = config.parse_positive_int(resume, "--resume") if resume else None
    # raises AuthError saying how to set the key, ConfigError for a bad timeout
    client = AnthropicClient(timeout=config.timeout_setting(timeout))
    with open_store() as store:
        settings = chat_settings(store, agent_name, model, context_window, thinking,
                                 max_tokens=max_tokens, count=client.count_tokens,
                                 confirm_memory=confirm_memory,
                                 warn=lambda line: meta.print(render.shown(f"warning: {line}",
                                                                           "yellow")))
        if conversation is not None and store.get_agent(agent_name) is None:
            raise UserError(f"There is no agent named {agent_name!r} yet, so it has no "
                            f"conversation {conversation} to resume.")
        agent = Agent.open(store, agent_name, model_client=client, summary_client=client,
                           settings=settings, conversation=conversation, new_conversation=new,
                           project=root)
        view = JsonView(sys.stdout) if json_out else ChatView(
            console, live=styled, markdown=styled, meta=meta, host=client.host,
            context_of=lambda: _context_size(agent), retry_hint=prompt is None)
        type_ahead = TypeAhead()
        session = ChatSession(agent, meta if json_out else console, view,
                              recorder_factory=(lambda: open_recorder(agent)) if record else None,
                              confirm=ask if typed else None,
                              hide_typing=type_ahead.hidden if typed else None)
        from memgpt_lite.terminal.task_commands import terminal_confirm

        # Without a terminal (piped, -p, --json) nobody can answer: writes are declined.
        agent.confirm = terminal_confirm(session, type_ahead) if typed and not json_out else None
        from memgpt_lite.terminal.embedding_commands import chat_embedder

        indexer = chat_embedder(agent)  # None unless MEMGPT_LITE_EMBEDDER is set
        if prompt is None:
            _banner(meta, agent, store, record)
        client.warm_up()
        try:
            return (one_shot(session, prompt) if prompt is not None
                    else _converse(session, typed, type_ahead))
        finally:
            session.close()
            if indexer is not None:
                indexer.close()
            agent.close()  # releases the agent's process lock
            _goodbye(meta, session, quiet=prompt is not None or json_out)


def _check_agent_name(name: str) -> None:
    """A new agent's name must follow the naming rule; an agent that already has another
    name (from before the rule) is opened as it is."""
    from memgpt_lite.engine.store import open_store

    problem = config.agent_name_problem(name)
    if problem is None:
        return
    if config.db_path().is_file():
        with open_store(config.db_path()) as store:
            if store.get_agent(name) is not None:
                return
    raise UserError(problem, EXIT_USAGE)


def _decode_stdin_leniently() -> None:
    """Bytes on stdin that are not UTF-8 become U+FFFD instead of lone surrogates, which no
    later step (the store, a recording, an export) could write."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdin.reconfigure(errors="replace")  # type: ignore[union-attr]


def _context_size(agent: Any) -> tuple[int, int]:
    """The one context number (docs/chat.md): what the next request holds before your
    next message — tools, system prompt, summary, queue and core memory — by the counter
    anchored on the last response's usage; the same as `/context`."""
    report = agent.context_report()
    return report.used_tokens, report.budget


def _checked_model(console: Console, model: str | None) -> str | None:
    """An unknown model id is passed on (a new model or a compatible server may know it),
    with a warning naming the known ones: a typo would otherwise cost a failed call."""
    from memgpt_lite.engine.tokens import KNOWN_MODELS, known_model

    if model and not known_model(model):
        names = ", ".join(KNOWN_MODELS)
        console.print(render.shown(f"warning: {model!r} is not a model memgpt-lite knows "
                                   f"(known: {names}; `memgpt-lite models`); its cost is "
                                   f"estimated at Sonnet prices", "yellow"))
    return model


def _goodbye(console: Console, session: ChatSession, *, quiet: bool) -> None:
    line = None if quiet else session.goodbye()
    if line:
        with contextlib.suppress(BrokenPipeError, OSError):
            console.print(render.shown(f"· {line}", "dim"))


def _converse(session: ChatSession, typed: bool, type_ahead: TypeAhead) -> int:
    """Typed: the prompt with readline editing and history. Piped: one message a line."""
    if not typed:
        return piped_loop(session, iter(sys.stdin))
    reader = session.reader = LineReader(InputHistory(config.data_dir()),
                                         prompt_to_stderr=not sys.stdout.isatty(),
                                         type_ahead=type_ahead)
    try:
        interactive_loop(session, reader.read)
        return 1 if session.failed_turns else 0
    finally:
        reader.save()


def chat_settings(store: Any, name: str, model: str | None, context_window: str | None,
                  thinking: bool | None, *, max_tokens: str | None = None,
                  count: Callable[[Any], int] | None = None,
                  warn: Callable[[str], None] | None = None,
                  confirm_memory: bool | None = None) -> Any:
    """Stored settings of the agent (or defaults), then env vars, then flags. Each value is
    checked where it entered (ConfigError naming the flag or variable), and together they
    must leave room for the system prompt, tools, core memory and one turn, measured as
    every check of the window measures it (`window.window_floor`; `count`: the API's
    count_tokens). A window stored earlier that no longer leaves that room (core memory
    grew) is not refused, since it was accepted: `warn` says so once and the chat goes on."""
    from memgpt_lite.engine.window import window_floor
    from memgpt_lite.engine.memory import default_blocks

    row = store.get_agent(name)
    settings = config.Settings.from_dict(row.settings) if row is not None else config.Settings()
    settings = settings.with_env()
    named = config.env_names()
    for field, flag, value in (("model", "--model", model),
                               ("context_window", "--context-window", context_window),
                               ("max_output_tokens", "--max-tokens", max_tokens)):
        if value:
            number = field != "model"
            setattr(settings, field, config.parse_positive_int(value, flag) if number else value)
            config.check_setting(field, getattr(settings, field), flag)
            named[field] = flag
    if thinking is not None:
        settings.thinking = thinking
    if confirm_memory is not None:
        settings.confirm_memory = confirm_memory
    if settings.thinking and settings.max_output_tokens <= settings.thinking_budget:
        raise config.ConfigError(
            f"Extended thinking needs more than {settings.thinking_budget:,} max output tokens "
            f"(it spends up to that many thinking); use --max-tokens {2 * settings.thinking_budget}"
            " or --no-thinking.")
    blocks = (store.get_blocks(row.id) if row is not None else
              [Block(label, value, limit) for label, (value, limit)
               in default_blocks(settings.block_limit).items()])
    floor = window_floor(settings, blocks, row.state.get("counter") if row else None, count)
    try:
        config.check_room(settings, floor, named)
    except config.ConfigError as exc:
        if row is None or warn is None or {"context_window", "max_output_tokens"} & set(named):
            raise
        warn(f"{exc} The chat goes on, every request over its budget.")
    return settings


def open_recorder(agent: Any) -> Any:
    """A Recorder for this session with its header written (see recording.py);
    RecordingUnavailable when it cannot be written."""
    from memgpt_lite.engine import recording

    return recording.start_recording(agent)


def _noticed(steps: Iterator[Any], problem: str) -> Iterator[Any]:
    """The turn's events with one notice about the recording, once the agent has stored the
    user's message (it does so before its first event)."""
    from memgpt_lite.engine.events import NoticeEvent

    try:
        first = next(steps, None)
        yield NoticeEvent(problem, "warning")
        if first is not None:
            yield first
        yield from steps
    finally:
        steps.close()


def _banner(console: Console, agent: Any, store: Any, record: bool) -> None:
    state = "created" if getattr(agent, "created", False) else "resumed"
    rec = (f"recording to {config.recordings_dir() / agent.row.uid}" if record
           else "not recording")
    for line in (f"agent {agent.name!r} ({state}) · model {agent.settings.model}",
                 f"data {store.location} · {rec}"):
        console.print(render.shown(line, "dim"), soft_wrap=True)
    if console.is_terminal:  # piped, the lines above stay the banner scripts read
        conv = agent.conversation()
        approval = " · memory writes need your approval" if agent.settings.confirm_memory else ""
        console.print(render.shown(f"conversation {conv.id} ({conv.name}) · project "
                                   f"{agent.project}{approval}", "dim"), soft_wrap=True)
        console.print("type /help for commands", style="dim")


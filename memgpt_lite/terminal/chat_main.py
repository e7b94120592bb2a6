"""`memgpt-lite chat`: open the store, the agent and the model client, settle the settings
and the attachments, and run the chat (chat.py) on this terminal.

Settings come, first match wins, from a flag, the environment, the agent's stored value,
the config file and the defaults (engine/registry.py); a flag holds for this run only unless
`--save` stores it with the agent. A name that is not an agent yet is created: after a
question on a terminal, with a line on stderr otherwise; and an agent this run created is
not kept when no turn of it finished.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from memgpt_lite.engine import config
from memgpt_lite.engine.input_history import InputHistory
from memgpt_lite.engine.records import Block
from memgpt_lite.terminal import agent_checks, render
from memgpt_lite.terminal.attach import chat_attachments
from memgpt_lite.terminal.chat import (
    ChatSession,
    ctrl_c_ignored,
    interactive_loop,
    one_shot,
    piped_loop,
)
from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_USAGE, UserError, ended_by_signals
from memgpt_lite.terminal.first_count import FirstCount, count_briefly, least_request
from memgpt_lite.terminal.user_input import LineReader, TypeAhead, ask, show_cursor
from memgpt_lite.terminal.view import ChatView, JsonView

# The chat's flags: (Settings field, flag as shown in messages).
FLAGS = (("model", "--model"), ("context_window", "--context-window"),
         ("max_output_tokens", "--max-tokens"), ("thinking", "--thinking"),
         ("confirm_memory", "--confirm-memory"))


def run_chat(*, agent_name: str = "default", model: str | None = None,
             context_window: str | None = None, max_tokens: str | None = None,
             thinking: bool | None = None, record: bool = True,
             timeout: str | None = None, prompt: str | None = None,
             json_out: bool = False, save: bool = False,
             attach: list[str] | None = None, new: bool = False, resume: str | None = None,
             project: str | None = None, confirm_memory: bool | None = None) -> int:
    """`memgpt-lite chat`: open or create the agent and talk to it on this terminal.

    Replies go to stdout; the banner, tool, notice and status lines to stderr unless stdout
    is the terminal itself. `prompt`: answer that one message and return (`-`: read it from
    stdin; with other text, piped stdin is attached to it). `json_out`: one JSON object per
    event on stdout instead of text. `attach`: files sent with the first message. `new`: a
    new conversation; `resume`: that conversation (default: the most recent); `project`: the
    project directory (docs/tasks.md); `confirm_memory`: ask before memory writes."""
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.project import project_root
    from memgpt_lite.engine.tokens import price_table

    _decode_stdin_leniently()
    _check_agent_name(agent_name)
    typed = sys.stdin.isatty() and prompt is None  # else one message per line, no prompt
    styled = typed and sys.stdout.isatty() and not json_out
    console = render.make_console(plain=not styled)
    # stdout is for the conversation alone when it is not the terminal itself.
    meta = console if styled else render.make_console(sys.stderr, plain=True)
    price_table()  # a bad MEMGPT_LITE_PRICES file is reported now, not after a paid call
    attachments = chat_attachments(attach or [], prompt)
    if prompt == "-":
        prompt = sys.stdin.read().strip()
    if prompt is not None and not prompt.strip():  # before an agent is created for it
        raise UserError("-p needs a message (or - to read it from stdin).", EXIT_USAGE)
    flags = _flags(meta, model, context_window, max_tokens, thinking, confirm_memory)
    root = str(project_root(project))  # a bad --project is one sentence before anything opens
    conversation = _resume_id(resume)
    # raises AuthError saying how to set the key, ConfigError for a bad timeout
    client = AnthropicClient(timeout=config.timeout_setting(timeout))
    from memgpt_lite.engine.store import open_store

    with open_store() as store:
        agent_checks.refuse_renamed(store, agent_name, "chat")
        if conversation is not None and store.get_agent(agent_name) is None:
            raise UserError(f"There is no agent named {agent_name!r} yet, so it has no "
                            f"conversation {conversation} to resume.")
        agent, first_count = _open_agent(store, agent_name, flags, client, save=save,
                                         typed=typed, meta=meta, banner=prompt is None,
                                         conversation=conversation, new=new, project=root)
        if agent is None:
            return EXIT_ERROR
        view = JsonView(sys.stdout) if json_out else ChatView(
            console, live=styled, markdown=styled, meta=meta, host=client.host,
            context_of=lambda: _context_size(agent), retry_hint=prompt is None,
            transcript=typed and not sys.stdout.isatty())
        type_ahead = TypeAhead()
        # What commands show and ask is for the user at the terminal; with stdout redirected
        # (a transcript), it goes to stderr with the prompt, not into the file.
        session = ChatSession(agent, meta if json_out or typed else console, view,
                              recorder_factory=(lambda: open_recorder(agent)) if record else None,
                              confirm=ask if typed else None,
                              hide_typing=type_ahead.hidden if typed else None)
        session.pending, session.flags = attachments, flags
        session.before_first_turn = first_count.wait if first_count is not None else None
        from memgpt_lite.terminal.task_commands import terminal_confirm

        # Without a terminal (piped, -p, --json) nobody can answer: writes are declined.
        agent.confirm = terminal_confirm(session, type_ahead) if typed and not json_out else None
        for item in attachments:
            session.view.meta(f"attached {item.describe()}")
        from memgpt_lite.terminal.embedding_commands import chat_embedder

        indexer = chat_embedder(agent)  # None unless an embedder is configured
        if prompt is None:
            _banner(meta, agent, store, record)
        client.warm_up()
        with ended_by_signals():
            try:
                return (one_shot(session, prompt) if prompt is not None
                        else _converse(session, typed, type_ahead))
            finally:
                _end(meta, store, agent, session, indexer,
                     quiet=prompt is not None or json_out, save=save)


def _end(meta: Console, store: Any, agent: Any, session: ChatSession, indexer: Any, *,
         quiet: bool, save: bool) -> None:
    """How every chat ends, /exit, Ctrl-D, a failure or a signal alike."""
    session.close()
    if indexer is not None:
        _finish_index(meta, indexer)
    agent.close()  # releases the agent's process lock
    _goodbye(meta, session, quiet=quiet)
    try:
        if not save:  # flags stored on purpose keep the agent
            _drop_if_empty(meta, agent.store, agent, session)
    finally:
        if agent.store is not store:  # a new connection after the database restarted
            agent.store.close()


def _flags(meta: Console, model: str | None, context_window: str | None,
           max_tokens: str | None, thinking: bool | None,
           confirm_memory: bool | None = None) -> dict[str, tuple[Any, str]]:
    """The settings the chat's flags give, each checked ({field: (value, flag)})."""
    from memgpt_lite.engine.registry import BY_KEY, parse_text

    given = {"model": model, "context_window": context_window,
             "max_output_tokens": max_tokens}
    out: dict[str, tuple[Any, str]] = {}
    for field, flag in FLAGS:
        if field in ("thinking", "confirm_memory"):
            switch = thinking if field == "thinking" else confirm_memory
            if switch is not None:
                out[field] = (switch, flag if switch else flag.replace("--", "--no-", 1))
        elif given[field]:
            out[field] = (parse_text(BY_KEY[field], given[field], flag), flag)
    if "model" in out:
        _checked_model(meta, out["model"][0])
    return out


def _open_agent(store: Any, name: str, flags: dict[str, tuple[Any, str]], client: Any, *,
                save: bool, typed: bool, meta: Console, banner: bool = True,
                conversation: int | None = None, new: bool = False,
                project: str | None = None) -> tuple[Any, FirstCount | None]:
    """The agent, opened with its settings in effect (None: the user chose not to create
    it), and on a terminal the API's count of its first request still under way (the first
    turn waits for it). A new agent is created after a question on a terminal; piped, it is
    created and a line on stderr says so (the banner's "created", or a line of its own for
    -p: a typo would otherwise start a new, empty agent unseen)."""
    from memgpt_lite.engine.agent import Agent

    row = store.get_agent(name)
    counted: list[tuple[Any, int]] = []  # what the check of the window had the API count
    why = ["the context window with the API (it is near its minimum)"]

    def count(request: Any) -> int:
        with waiting(meta, why):  # before the prompt shows
            counted.append((request, client.count_tokens(request)))
        return counted[-1][1]

    settings = chat_settings(store, name, flags=flags, count=count,
                             warn=lambda line: meta.print(render.shown(f"warning: {line}",
                                                                       "yellow")))
    if row is None and not _may_create(store, name, typed, meta, banner):
        return None, None
    own = config.own_settings(row.settings) if row is not None else {}
    if save:
        own.update({field: value for field, (value, _) in flags.items()})
    stored = config.stored_form(own) if save or row is None else row.settings
    agent = Agent.open(store, name, model_client=client, summary_client=client,
                       settings=settings, stored=stored, conversation=conversation,
                       new_conversation=new, project=project)
    if not agent.counter.anchor_tokens:
        # The first request is sized by the API's count (the window's, when it was near its
        # minimum, else one of the least request, free), not by the cautious guess: that
        # sees it about a third over the budget, and a server counting more than the guess
        # (a byte-level tokenizer, at two bytes a token) was sent a first paste over it.
        why[0] = "this agent's first request with the API"
        if not counted and hasattr(client, "count_tokens"):
            if typed:  # the prompt does not wait for the SDK's import: the first turn does
                return agent, FirstCount(agent, settings, client, lambda: waiting(meta, why))
            tokens = count_briefly(client, request := least_request(settings, agent))
            if tokens is not None:
                counted.append((request, tokens))
        if counted:
            agent.calibrate(*counted[-1])
    return agent, None


def waiting(meta: Console, why: list[str]) -> contextlib.AbstractContextManager[Any]:
    """What the chat waits for while the API counts, on a terminal (a slow server would
    look like a start, or a first turn, that hangs)."""
    return meta.status(f"measuring {why[0]}…") if meta.is_terminal else contextlib.nullcontext()


def _may_create(store: Any, name: str, typed: bool, meta: Console, banner: bool) -> bool:
    others = [a.name for a in store.list_agents()]
    listed = f" (agents: {', '.join(others)})" if others else ""
    if not typed:
        if not banner:
            meta.print(render.shown(f"memgpt-lite: creating agent {name!r}{listed}"))
        return True
    if not others:  # the first agent of this data dir: nothing to mistype
        return True
    if ask(render.visible(f"There is no agent {name!r}{listed}. Create it?")):
        return True
    meta.print("Nothing created.", markup=False)
    return False


def _drop_if_empty(meta: Console, store: Any, agent: Any, session: ChatSession) -> None:
    """An agent this run created that holds no finished turn and no change of the user's
    is deleted again: a failed first message (a bad key, a typo'd name) leaves nothing
    behind. The message itself is in the input history (typed) or the command line. An
    agent someone else wrote to meanwhile (an MCP client sharing the new name) is kept."""
    if not agent.created or session.tally.completed_turns or session.changed:
        return
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.store.base import ConnectionLost

    try:
        row = store.get_agent_by_id(agent.id)
    except ConnectionLost:  # the database went away: nothing can be deleted now
        return
    if row is None:
        return
    with store.agent_lock(row.name):
        with store.transaction():  # no other write between the look and the delete
            if _written_by_others(store, row.id):
                return
            store.delete_agent(row.name)
        privacy.delete_agent_files(row, config.data_dir())
    # The turn's error said the message is kept; with the agent it goes too. A chat left
    # before any message (/exit, Ctrl-D) had none to lose, and was told it had.
    sent = session.tally.turns or session.interrupted_turns or session.message_stored
    why = ("no turn of it finished (its unanswered message went with it)" if sent
           else "nothing was sent to it")
    with contextlib.suppress(BrokenPipeError, OSError):
        meta.print(render.shown(f"· agent {row.name!r} was not kept: {why}", "dim"))


def _written_by_others(store: Any, agent_id: int) -> bool:
    """Whether the agent holds what this chat did not leave: the chat's failed turns were
    undone with their history, so a passage or a block version beyond the initial ones is
    another writer's (an MCP client's), acknowledged to it and not ours to delete."""
    if store.agent_stats(agent_id).get("passages"):
        return True
    return any(entry["source"] != "init" for entry in store.block_history(agent_id))


def chat_settings(store: Any, name: str, model: str | None = None,
                  context_window: str | None = None, thinking: bool | None = None, *,
                  max_tokens: str | None = None,
                  flags: dict[str, tuple[Any, str]] | None = None,
                  count: Callable[[Any], int] | None = None,
                  warn: Callable[[str], None] | None = None) -> Any:
    """The settings a chat runs with: flags over the environment over the agent's stored
    values over the config file over the defaults. Each value is checked where it entered
    (ConfigError naming the flag, variable or file), and together they must leave room for
    the system prompt, tools, core memory and one turn, measured as every check of the
    window measures it (`window.window_floor`; `count`: the API's count_tokens). A window
    stored earlier that no longer leaves that room (core memory grew) is not refused, since
    it was accepted: `warn` says so once and the chat goes on."""
    from memgpt_lite.engine.memory import default_blocks
    from memgpt_lite.engine.window import window_floor

    if flags is None:
        flags = _flags(render.make_console(sys.stderr, plain=True), model, context_window,
                       max_tokens, thinking)
    row = store.get_agent(name)
    settings, sources = config.resolve_settings(row.settings if row else None, flags)
    named = agent_checks.named_settings(sources)
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


# --------------------------------------------------------------------------- the rest


def _resume_id(resume: str | None) -> int | None:
    """--resume's conversation id (None: the most recent). An empty one is a mistake (a
    script's unset variable), not "the most recent"."""
    if resume is None:
        return None
    if not resume.strip():
        raise UserError("--resume needs a conversation id (`memgpt-lite conversations` lists "
                        "them); leave it out to resume the most recent.", EXIT_USAGE)
    return config.parse_positive_int(resume, "--resume")


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
                                   f"unknown unless MEMGPT_LITE_PRICES gives its price",
                                   "yellow"))
    return model


def _finish_index(meta: Console, indexer: Any) -> None:
    """The session's rows are embedded before the chat ends, for up to the indexer's 10 s.
    A slow or stalled embeddings endpoint makes that a wait after /exit: one line says what
    it is waiting for, and Ctrl-C leaves those rows to `memgpt-lite index` while the chat
    still ends as it should (its lock released, an empty new agent dropped, the goodbye)."""
    try:  # the notice inside: Ctrl-C may come the moment it is shown
        if not indexer.wait_idle(0.5):
            with contextlib.suppress(BrokenPipeError, OSError):
                meta.print(render.shown("· embedding this session's messages for search "
                                        "before leaving (Ctrl-C leaves them to `memgpt-lite "
                                        "index`)", "dim"))
        indexer.close()
    except KeyboardInterrupt:
        with ctrl_c_ignored():  # a second press must not cut the rest of the ending short
            indexer.close(timeout=0)


def _goodbye(console: Console, session: ChatSession, *, quiet: bool) -> None:
    line = None if quiet else session.goodbye()
    if line:
        with contextlib.suppress(BrokenPipeError, OSError):
            console.print(render.shown(f"· {line}", "dim"))


def _converse(session: ChatSession, typed: bool, type_ahead: TypeAhead) -> int:
    """Typed: the prompt with readline editing and history. Piped: one message a line."""
    if not typed:
        return piped_loop(session, iter(sys.stdin))
    from memgpt_lite.terminal.completer import install

    reader = session.reader = LineReader(InputHistory(config.data_dir()),
                                         prompt_to_stderr=not sys.stdout.isatty(),
                                         type_ahead=type_ahead)
    if reader.history_problem:
        session.say(f"· {reader.history_problem}", "dim")
    install(reader, session)
    # A chat killed with kill -9 left the cursor hidden in this terminal (the live region
    # hides it, and nothing runs in a process killed so): shown at the start, and at the
    # end however the chat ends (a signal, an error), never left to the live region alone.
    show_cursor()
    try:
        interactive_loop(session, reader.read)
        return 1 if session.failed_turns else 0
    finally:
        reader.save()
        show_cursor()


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

"""The chat's slash commands: one table (name, usage, help, what the argument completes to)
and what each command does.

`/help` and the chat's Tab completion are made from the table, so a command is one entry
here: its function takes the ChatSession and the text after the command. Commands that
change the agent outside a turn end the current recording (`session.end_recording()`), so
the next recording's header starts from the changed state and replays exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memgpt_lite.engine import privacy, prompts
from memgpt_lite.engine.store.base import BlockChanged
from memgpt_lite.terminal import render
from memgpt_lite.terminal.exit_codes import UserError
from memgpt_lite.terminal.user_input import EditorError

ChatSession = Any  # chat.ChatSession (which imports this module when a command runs)


@dataclass(frozen=True)
class Command:
    """One slash command. `usages` are (usage, help) lines for /help; `completes` names what
    its first argument completes to on Tab: "" (nothing), "labels" (core memory blocks),
    "agents", "models" or "files"; `words` are fixed words it takes first (e.g. edit)."""

    name: str
    usages: tuple[tuple[str, str], ...]
    run: Callable[[ChatSession, str], bool | None]
    completes: str = ""
    words: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


FORGET_OPTIONS = ("--any", "--regex", "--dry-run")


def _options(session: ChatSession, name: str, words: list[str], known: tuple[str, ...],
             hint: str = "") -> set[str] | None:
    """The options leading `words`, taken off it; None (and one line said) for any other
    word starting with `-` there, so that a typo is not taken for the query or a name.
    `--` ends the options."""
    flags = set()
    while words and (not words[0] or words[0].startswith("-")):  # "" between two spaces
        word = words.pop(0)
        if not word:
            continue
        if word == "--":
            break
        if word not in known:
            session.say(f"/{name}: unknown option {render.visible(word)} (options: "
                        f"{', '.join(known)}{hint})")
            return None
        flags.add(word)
    return flags


# --------------------------------------------------------------------------- memory


def core(session: ChatSession, rest: str) -> None:
    words = rest.split()
    agent = session.agent
    if not words:
        render.print_core_blocks(session.console, agent.blocks(), agent.store.shared_block_agents)
    elif words[0] == "edit" and len(words) == 2:
        _edit_block(session, words[1])
    else:
        session.say("usage: /core  or  /core edit LABEL")


def _edit_block(session: ChatSession, label: str) -> None:
    block = next((b for b in session.agent.blocks() if b.label == label), None)
    if block is None:
        labels = ", ".join(b.label for b in session.agent.blocks())
        session.say(f"no block {label!r} (blocks: {labels}; /memory adds one)")
        return
    text = _edit_until_fits(session, block)
    if text is None:
        return
    try:
        saved = session.agent.edit_block(label, text, expected=block.value, source="/core edit")
    except BlockChanged as exc:  # another agent sharing the block edited it meanwhile
        session.say(f"not saved: {exc} Your text, to copy from:")
        session.console.print(render.shown(text), soft_wrap=False)
        session.say(f"/core edit {label} starts again from its new value.")
        return
    except ValueError as exc:
        session.say(f"not saved: {exc}")
        return
    session.end_recording()
    session.say(f"{label}: saved · {saved.used:,}/{saved.limit:,} chars")


def _edit_until_fits(session: ChatSession, block: Any) -> str | None:
    """The edited text once it fits the block's limit; None (said why) when the editor
    failed, the edit was cancelled or left the block unchanged. Text over the limit goes
    back to the editor rather than being lost; saving it unchanged gives up."""
    text = block.value
    while True:
        try:
            new = session.edit(text)
        except EditorError as exc:
            session.say(f"not edited: {exc}")
            return None
        new = None if new is None else new.rstrip("\n")
        if new is None or new == block.value or (new == text and text != block.value):
            done = "unchanged" if text == block.value else "not saved"
            session.say(f"{block.label}: {done}")
            return None
        if len(new) <= block.limit:
            return new
        text = new
        session.say(f"{block.label}: {len(text):,} chars is {len(text) - block.limit:,} over the "
                    f"limit of {block.limit:,}; reopening the editor (unchanged: give up)")


def memory(session: ChatSession, rest: str) -> None:
    from memgpt_lite.terminal.memory_editor import edit_memory

    edit_memory(session)


def search(session: ChatSession, rest: str) -> None:
    if not rest:
        session.say("usage: /search QUERY")
        return
    agent = session.agent
    dense, weight, events = agent.tools.dense_candidates("conversation_search", "messages", rest)
    _notices(session, events)
    page = agent.store.search_messages(agent.id, rest, page=1, per_page=10, dense=dense,
                                       keyword_weight=weight)
    render.print_search_page(session.console, page, "messages")


def archival(session: ChatSession, rest: str) -> None:
    agent = session.agent
    store, agent_id = agent.store, agent.id
    if rest:
        dense, weight, events = agent.tools.dense_candidates("archival_search", "passages", rest)
        _notices(session, events)
        page = store.search_passages(agent_id, rest, page=1, per_page=10, dense=dense,
                                     keyword_weight=weight)
        render.print_search_page(session.console, page, "passages")
        return
    render.print_newest_passages(session.console, store.count_passages(agent_id),
                                 store.list_passages(agent_id, limit=10))


def _notices(session: ChatSession, events: list[Any]) -> None:
    """A hybrid search that fell back to keywords says so (once a session)."""
    for event in events:
        if event.kind == "notice":
            session.console.print(event.message, markup=False, style="yellow")


# --------------------------------------------------------------------------- context, cost


def context(session: ChatSession, rest: str) -> None:
    render.print_context(session.console, session.agent.context_report())


def tokens(session: ChatSession, rest: str) -> None:
    render.print_tokens(session.console, session.tally)


def cost(session: ChatSession, rest: str) -> None:
    render.print_cost(session.console, session.tally)


def compact(session: ChatSession, rest: str) -> None:
    """/compact [INSTRUCTIONS]: the model is shown the memory-pressure alert now and evicts
    what it chooses; when it evicts nothing the oldest turns are flushed. Then the new
    size and summary."""
    agent = session.agent
    before = agent.context_report()
    if not before.turns:
        session.say("nothing to compact: the context queue is empty")
        return
    session.run_turn(rest, compact=True)
    if session.unresolved:  # the turn failed: it undid everything, the view said why
        return
    after = agent.context_report()
    share = after.used_tokens / after.budget if after.budget else 0.0
    session.say(f"compacted: context {before.used_tokens:,} → {after.used_tokens:,}/"
                f"{after.budget:,} tokens ({share:.0%}); the queue holds {len(after.turns)} of "
                f"{len(before.turns)} turns")
    session.say("summary: " + (after.summary or "(none yet)"))


def model(session: ChatSession, rest: str) -> None:
    """/model: the model in use and where it came from; /model NAME [--save]: switch for
    the rest of this session (and store it with --save)."""
    # --save may come after the name too (`/model haiku --save`); no name starts with -.
    words = sorted(rest.split(), key=lambda word: not word.startswith("-"))
    flags = _options(session, "model", words, ("--save",))
    if flags is None:
        return
    save = "--save" in flags
    agent = session.agent
    if save and not words:  # it would have shown the model and stored nothing
        session.say("usage: /model NAME --save (the model to store with the agent)")
        return
    if not words:
        session.say(f"model {agent.settings.model} ({_model_source(session)}); summariser "
                    f"{agent.settings.summary_model}")
        return
    if len(words) > 1:
        session.say("usage: /model [NAME] [--save]")
        return
    name = _checked_model(session, words[0])
    if name is None:
        return
    agent.use_model(name)  # a window the provider taught the old model stays that model's
    session.end_recording()  # a recording's header names the model its requests use
    session.flags.pop("model", None)
    session.model_source = "set by /model"
    if save:
        _store_model(agent, name)
        session.model_source = "stored with the agent"
        session.say(f"model {name} from now on, stored with agent {agent.name!r}")
    else:
        session.say(f"model {name} for the rest of this session (not stored: /model {words[0]} "
                    f"--save, or memgpt-lite agents set {agent.name} model={words[0]}, keeps it)")


def _checked_model(session: ChatSession, text: str) -> str | None:
    from memgpt_lite.engine.config import ConfigError, max_output_limit
    from memgpt_lite.engine.registry import BY_KEY, parse_text
    from memgpt_lite.engine.tokens import KNOWN_MODELS, known_model

    try:
        name = parse_text(BY_KEY["model"], text, "/model")
    except ConfigError as exc:
        session.say(str(exc))
        return None
    limit = max_output_limit(name)
    if limit is not None and session.agent.settings.max_output_tokens > limit:
        session.say(f"not switched: {name} writes at most {limit:,} output tokens, and this "
                    f"agent asks for {session.agent.settings.max_output_tokens:,}")
        return None
    if not known_model(name):
        session.say(f"warning: {name!r} is not a model memgpt-lite knows (known: "
                    f"{', '.join(KNOWN_MODELS)}); its cost is unknown unless "
                    f"MEMGPT_LITE_PRICES gives its price",
                    "yellow")
    return name


def _model_source(session: ChatSession) -> str:
    from memgpt_lite.engine.config import resolve_settings

    if getattr(session, "model_source", None):
        return session.model_source
    if "model" in session.flags:
        return f"flag {session.flags['model'][1]}, this run only"
    row = session.agent.store.get_agent_by_id(session.agent.id)
    return resolve_settings(row.settings if row else None)[1]["model"]


def _store_model(agent: Any, name: str) -> None:
    from memgpt_lite.engine.config import own_settings, stored_form

    row = agent.store.get_agent_by_id(agent.id)
    own = own_settings(row.settings if row else None)
    agent.store.update_settings(agent.id, stored_form({**own, "model": name}))


def add(session: ChatSession, rest: str) -> None:
    """/add FILE: send a file with the next message (/add alone: what is waiting)."""
    from memgpt_lite.terminal.attach import read_attachment

    if not rest:
        waiting = ", ".join(a.describe() for a in session.pending) or "nothing"
        session.say(f"usage: /add FILE (sent with your next message; waiting: {waiting})")
        return
    try:
        item = read_attachment(_dropped_path(rest))
    except UserError as exc:
        session.say(str(exc))
        return
    session.pending.append(item)
    session.say(f"{item.describe()} will be sent with your next message")


def _dropped_path(text: str) -> str:
    """The path as typed or, when no file has that name, as a shell reads it: a file dragged
    onto a terminal arrives quoted ('/tmp/my notes.md') or with its spaces escaped."""
    import os
    import shlex

    if os.path.lexists(os.path.expanduser(text)):
        return text
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: the path as typed, and its sentence
        return text
    return words[0] if len(words) == 1 else text


# --------------------------------------------------------------------------- turns


def pop(session: ChatSession, rest: str) -> None:
    try:
        n = int(rest) if rest else 1
    except ValueError:
        n = 0
    if n < 1:
        session.say("usage: /pop [N] with N ≥ 1")
        return
    agent = session.agent
    queued = {t.id: t for t in agent.context_report().turns}
    popped = agent.pop_turns(n)
    if not popped:
        session.say("nothing to pop: there are no turns yet")
        return
    session.end_recording()
    for turn_id in popped.turn_ids:
        info = queued.get(turn_id)
        words = f" \"{render.clip(info.first_words, 50)}\"" if info is not None else ""
        size = f" ({info.tokens:,} tokens)" if info is not None else ""
        where = "the context queue and from " if info is not None else ""
        session.say(f"removed turn {turn_id}{words}{size} from {where}recall")
    for line in popped.memory_lines():
        session.say(line)


def retry(session: ChatSession, rest: str) -> None:
    agent = session.agent
    text = agent.last_user_text()
    if not text:
        session.say("nothing to retry yet")
        return
    if prompts.compact_asked(text) is not None and not agent.context_report().turns:
        session.say("nothing to compact: the context queue is empty")  # /retry compacts again
        return
    store, agent_id = agent.store, agent.id
    last = store.max_turn_id(agent_id, in_conversation=True)  # the turn Agent.retry undoes
    if any(m.role == "assistant" for m in store.turn_messages(agent_id, last)):
        # Agent.retry undoes that turn (in the same recorded turn, so replay does too)
        session.say(f"retrying: turn {last} undone (its reply and memory edits); sending your "
                    "last message again")
    else:  # its stored message is sent again, not stored a second time
        session.say("retrying your last message")
    session.run_turn(text, retry=True)


# --------------------------------------------------------------------------- other


def agents(session: ChatSession, rest: str) -> None:
    from memgpt_lite.terminal.config_commands import setting_sources

    store = session.agent.store
    if not rest:
        render.print_agents(session.console, store)
        return
    row = store.get_agent(rest) or store.renamed_agent(rest)
    if row is None:
        names = ", ".join(a.name for a in store.list_agents())
        session.say(f"no agent {rest!r} (agents: {names})")
        return
    render.print_agent(session.console, store, row, setting_sources(row.settings))


def forget(session: ChatSession, rest: str) -> None:
    from memgpt_lite.terminal.forget_commands import forget_matcher, planned

    words = rest.split(" ")
    flags = _options(session, "forget", words, FORGET_OPTIONS,
                     "; put -- before a query that starts with -")
    if flags is None:
        return
    query = " ".join(words).strip()
    if not query:
        session.say("usage: /forget [--any|--regex] [--dry-run] QUERY")
        return
    store = session.agent.store
    try:
        matcher = forget_matcher(query, any_word="--any" in flags, regex="--regex" in flags)
        plan = planned(store, store.get_agent_by_id(session.agent.id), matcher)
    except UserError as exc:
        session.say(str(exc))
        return
    render.print_forget_plan(session.console, plan, full="--dry-run" in flags)
    if plan.empty or "--dry-run" in flags:
        return
    if session.confirm is None:
        session.say("/forget needs a confirmation; run `memgpt-lite forget QUERY --yes` "
                    "instead")
        return
    if not session.confirm("Forget all of this? It cannot be undone."):
        session.say("nothing forgotten")
        return
    session.end_recording()  # its file is scrubbed too; the next turn starts a new one
    try:
        session.say(render.forget_summary(privacy.forget(store, plan)))
    except KeyboardInterrupt:
        # Written down before it started, a forget is not cancelled: the next command would
        # finish it, but none can while this chat holds the agent, and its turns would go on
        # sending the text. So it is finished here.
        session.say("a forget cannot be cancelled once it has started; finishing it")
        for result in privacy.finish_pending(store)[0]:
            session.say(render.forget_summary(result))
    if session.reader is not None:  # its lines may be more than the file the preview read
        session.reader.forget(matcher.carrying_out())


def help_(session: ChatSession, rest: str) -> None:
    session.console.print(help_text(), markup=False, highlight=False)


def exit_(session: ChatSession, rest: str) -> bool:
    return False


INPUT_HELP = """\
Input
  Enter sends. End a line with \\ to continue on the next line; a multi-line paste
  arrives as one message. Tab completes commands, block labels, agent names and files.
  Ctrl-C while the model answers cancels that turn (your message stays in recall; /retry
  sends it again). Up/down browse history. To send a message that starts with /, type //
  (//etc/hosts sends /etc/hosts)."""

def _conversation_command(name: str) -> Callable[[ChatSession, str], None]:
    def run(session: ChatSession, rest: str) -> None:
        from memgpt_lite.terminal import task_commands

        getattr(task_commands, f"slash_{name}")(session, rest)

    return run


# The order of /help.
COMMANDS: tuple[Command, ...] = (
    Command("help", (("/help", "this list"),), help_),
    Command("core", (("/core", "core memory blocks: label, used/limit chars, scope, value"),
                     ("/core edit LABEL", "edit one block in $EDITOR (the limit is checked; "
                                          "history is kept)")),
            core, completes="labels", words=("edit",)),
    Command("memory", (("/memory", "every core memory block in $EDITOR as one document: "
                                   "edit, remove text, add a block"),), memory),
    Command("search", (("/search QUERY", "search recall (every message ever sent), ranked "
                                         "like the model's tool"),), search),
    Command("archival", (("/archival [QUERY]", "search archival memory, or list the newest "
                                               "passages"),), archival),
    Command("context", (("/context", "token ledger per section, the queue's turns, the "
                                     "summary"),), context),
    Command("compact", (("/compact [INSTRUCTIONS]", "make room now: the model saves what "
                                                     "matters and evicts turns it chooses (the "
                                                     "oldest go if it evicts none); shows what "
                                                     "went and the new summary"),), compact),
    Command("tokens", (("/tokens", "this session's token usage and cost"),), tokens),
    Command("cost", (("/cost", "this session's cost by kind of model call (chat, "
                               "summariser) with its cache share"),), cost),
    Command("model", (("/model [NAME] [--save]", "the model in use and where it came from; "
                                                 "NAME switches for the rest of the session "
                                                 "(--save stores it)"),), model,
            completes="models"),
    Command("add", (("/add FILE", "send a file with your next message: text, or a PNG, "
                                  "JPEG, GIF or WebP image"),), add, completes="files"),
    Command("pop", (("/pop [N]", "undo the last N turns (default 1): removed from the queue "
                                 "and recall, their core memory edits and archival inserts and "
                                 "corrections undone"),), pop),
    Command("retry", (("/retry", "send your last message again (its answer and memory edits, "
                                 "if any, are undone first; your message stays stored once)"),),
            retry),
    Command("new", (("/new", "start a new conversation (core, archival memory and recall "
                             "stay)"),), _conversation_command("new")),
    Command("resume", (("/resume ID", "go back to conversation ID (its queue and summary)"),),
            _conversation_command("resume")),
    Command("conversations", (("/conversations", "this agent's conversations (also "
                                                 "`memgpt-lite conversations`)"),),
            _conversation_command("conversations")),
    Command("title", (("/title TEXT", "name this conversation"),),
            _conversation_command("title")),
    Command("agents", (("/agents [NAME]", "all agents in this data dir, or one agent's "
                                          "settings and memory"),), agents, completes="agents"),
    Command("forget", (("/forget [--any|--regex] [--dry-run] QUERY",
                        "show everything matching QUERY (a phrase, any case, whole words) in "
                        "messages, passages, core memory, the summary, recordings and the "
                        "input history; forget it on confirmation"),), forget,
            words=FORGET_OPTIONS),
    Command("exit", (("/exit", "leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)"),),
            exit_, aliases=("quit",)),
)
_BY_NAME = {name: c for c in COMMANDS for name in (c.name, *c.aliases)}


def find(name: str) -> Command | None:
    return _BY_NAME.get(name)


def names() -> list[str]:
    """Every command as typed, aliases included (for completion)."""
    return sorted(_BY_NAME)


def help_text() -> str:
    """/help: every command of the table, then how input works."""
    import textwrap

    lines = ["Commands"]
    for command in COMMANDS:
        for usage, text in command.usages:
            wrapped = textwrap.wrap(text, 70)
            if len(usage) < 20:
                lines.append(f"  {usage:<20}  {wrapped[0]}")
                wrapped = wrapped[1:]
            else:
                lines.append(f"  {usage}")
            lines += [f"  {'':<20}  {line}" for line in wrapped]
    return "\n".join(lines) + "\n\n" + INPUT_HELP

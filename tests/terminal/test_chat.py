"""The chat as a transcript: scripted model, real agent and SQLite store, rich
rendering into a StringIO console, exact output asserted."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
from rich.console import Console

from memgpt_lite.engine import config
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.events import (
    ErrorEvent,
    EvictionEvent,
    FoldEvent,
    PressureAlertEvent,
)
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.turns import turn_ranges
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal.chat import ChatSession, interactive_loop, piped_loop
from memgpt_lite.terminal.render import make_console
from memgpt_lite.terminal.view import ChatView, describe_event, status_line

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)


class Chat:
    """A ChatSession on a real store and agent, rendering into a string."""

    def __init__(self, script, *, plain=False, confirm=None, edit=None):
        self.store = SQLiteStore(config.db_path())
        self.model = ScriptedModel(script)
        self.agent = Agent.open(self.store, model_client=self.model, clock=lambda: FIXED)
        self.buf = io.StringIO()
        self.console = (make_console(self.buf, plain=True, width=100) if plain else
                        Console(file=self.buf, width=100, color_system=None))
        view = ChatView(self.console, live=False, markdown=not plain)
        self.session = ChatSession(self.agent, self.console, view, confirm=confirm, edit=edit)

    def run(self, *lines: str) -> str:
        start = self.buf.tell()
        for line in lines:
            self.session.handle_line(line)
        return "\n".join(l.rstrip() for l in self.buf.getvalue()[start:].splitlines())

    def close(self):
        self.store.close()


@pytest.fixture
def chat_factory():
    chats = []

    def make(script, **kw):
        chats.append(Chat(script, **kw))
        return chats[-1]

    yield make
    for c in chats:
        c.close()


def assert_store_consistent(store):
    """PRAGMA integrity_check plus the store's search-index checks."""
    assert store.integrity_problems() == []
    assert store.db.connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def expect(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_turn_with_tool_call_renders_markdown_memory_line_and_status(chat_factory):
    chat = chat_factory([
        tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada."})],
                      text="Let me note that.", usage=Usage(1200, 30, 0, 0)),
        text_response("Nice to meet you, **Ada**!\n\n- Hexo\n- SQLite",
                      usage=Usage(100, 20, 0, 1150)),
    ])
    out = chat.run("Hi, I'm Ada. I use Hexo.")
    assert out == expect("""
        Let me note that.
        · core_memory_append human +10 chars
        Nice to meet you, Ada!

         • Hexo
         • SQLite
        · context 1,250/28,952 tokens (4%) ▱▱▱▱▱▱▱▱▱▱ · cache 47% · turn $0.0050
    """)
    chat.model.assert_complete()
    assert chat.store.get_block(chat.agent.id, "human").value.endswith("Name: Ada.")


def test_core_command_prints_every_block(chat_factory):
    chat = chat_factory([])
    chat.agent.edit_block("human", "Name: Ada.")
    persona = chat.store.get_block(chat.agent.id, "persona")
    out = chat.run("/core")
    head = f"persona  {persona.used:,}/{persona.limit:,} chars · scope agent"
    assert out.splitlines()[0] == head
    assert out.endswith(expect("""
        human  10/5,000 chars · scope agent
        Name: Ada.
    """))


def test_context_command_shows_ledger_queue_and_summary(chat_factory):
    chat = chat_factory([text_response("Hello!", usage=Usage(900, 5, 0, 0))])
    chat.run("Hi there, how are you today?")
    report = chat.agent.context_report()
    turn = report.turns[0]
    pct = report.used_tokens / report.budget
    lines = chat.run("/context").splitlines()
    n = len(report.ledger)
    assert lines[0] == f"context {report.used_tokens:,}/{report.budget:,} tokens ({pct:.0%}) ▱▱▱▱▱▱▱▱▱▱"
    assert lines[1].split() == ["section", "tokens"]
    assert [row.split() for row in lines[2:2 + n]] == [
        [name, f"{tokens:,}"] for name, tokens in report.ledger.items()]
    assert len({len(row) for row in lines[1:2 + n]}) == 1  # a right-aligned column
    assert lines[2 + n:] == [
        "queue: 1 turn",
        f'  turn 1 · 2026-11-29 13:45 · {turn.tokens:,} tokens · "Hi there, how are you today?"',
        "summary: (none yet)",
    ]
    assert list(report.ledger)[:2] == ["tools", "system"]


def test_unknown_command_gets_a_one_line_hint(chat_factory):
    chat = chat_factory([])
    assert chat.run("/foo bar") == "unknown command /foo — type /help"
    assert chat.model.requests == []


def test_help_lists_every_command(chat_factory):
    out = chat_factory([]).run("/help")
    for command in ("/core", "/core edit LABEL", "/search QUERY", "/archival [QUERY]", "/context",
                    "/tokens", "/pop [N]", "/retry", "/agents",
                    "/forget [--any|--regex] [--dry-run] QUERY", "/exit"):
        assert command in out
    assert "multi-line paste" in out and "\\" in out


def test_plain_mode_prints_reply_once_and_prefixes_meta_lines(chat_factory):
    chat = chat_factory([
        tool_response([("conversation_search", {"query": "hexo"})], usage=Usage(1000, 10, 0, 0)),
        text_response("You said you use **Hexo**.", usage=Usage(50, 10, 0, 1000)),
    ], plain=True)
    out = chat.run("What blog engine do I use?", "/foo")
    assert out == expect("""
        · conversation_search "hexo" → 0 results
        You said you use **Hexo**.
        · context 1,050/28,952 tokens (4%) · cache 49% · turn $0.0037
        unknown command /foo — type /help
    """)


def test_search_archival_tokens_agents(chat_factory):
    chat = chat_factory([
        tool_response([("archival_insert", {"content": "Ada deploys Hexo to Netlify.",
                                            "tags": ["blog"]})], usage=Usage(10, 1, 0, 0)),
        text_response("Saved.", usage=Usage(10, 1, 0, 0)),
    ])
    chat.run("remember: I deploy Hexo to Netlify")
    assert chat.run("/search netlify") == expect("""
        page 1 of 1, 1 result
          #1 turn 1 2026-11-29 13:45 user: remember: I deploy Hexo to Netlify
    """)
    out = chat.run("/archival").splitlines()
    assert out[0] == "1 passage in archival memory; the newest 1:"
    assert out[1].startswith("  #1 20") and out[1].endswith(" [blog]: Ada deploys Hexo to Netlify.")
    assert chat.run("/archival netlify").startswith("page 1 of 1, 1 result\n  #1 ")
    assert chat.run("/archival nothing-like-this") == "no passages found"
    assert chat.run("/tokens") == expect("""
        session: 20 input · 0 cache write · 0 cache read · 2 output tokens
        cache hit 0% of 20 input tokens · cost $0.0001
    """)
    assert chat.run("/agents").splitlines()[1].split()[:5] == [
        "default", "claude-sonnet-5-5", "1", "4", "1"]


def test_pop_of_a_turn_that_left_the_queue_says_the_summary_may_keep_it(chat_factory):
    chat = chat_factory([
        text_response("Noted."),
        tool_response([("evict_turns", {"turn_ids": [1], "summary": "user's locker is 4471"})]),
        text_response("Done."),
    ])
    chat.run("my locker code is 4471", "drop the locker talk")
    out = chat.run("/pop 2").splitlines()
    assert out[0].startswith('removed turn 1 from recall')
    assert out[1].startswith('removed turn 2 "drop the locker talk" (')
    assert out[1].endswith("tokens) from the context queue and from recall")
    assert " ".join(out[2:]) == (
        "turn 1 had left the context queue already: the running summary may still hold what "
        "was said in it (/pop cannot take that back; /forget WORDS removes its sentences)")
    assert "4471" in chat.store.get_agent_by_id(chat.agent.id).summary
    assert chat.store.all_messages(chat.agent.id) == []


def test_pop_says_what_was_removed_and_retry_resends(chat_factory):
    chat = chat_factory([text_response("One."), text_response("Two."), text_response("Two again.")])
    chat.run("first message", "second message")
    out = chat.run("/pop")
    assert out.startswith('removed turn 2 "second message" (')
    assert out.endswith("tokens) from the context queue and from recall")
    assert [m.turn_id for m in chat.store.context_messages(chat.agent.id)] == [1, 1]
    assert chat.store.search_messages(chat.agent.id, "second").total == 0
    out = chat.run("/retry")
    assert out.startswith("retrying: turn 1 undone (its reply and memory edits); sending "
                          "your last message again\nTwo again.")
    texts = [m.content[0]["text"] for m in chat.store.context_messages(chat.agent.id)]
    assert texts == ["first message", "Two again."]
    assert chat.run("/pop x") == "usage: /pop [N] with N ≥ 1"


def test_retry_after_resume_names_the_turn_it_undoes(chat_factory):
    """Turn ids are the agent's, across conversations: back in conversation 1, /retry
    undid its turn 1 but said it undid turn 2, the other conversation's."""
    chat = chat_factory([text_response("One."), text_response("Two."), text_response("One again.")])
    chat.run("first task", "/new", "second task", "/resume 1")
    out = chat.run("/retry")
    assert out.startswith("retrying: turn 1 undone (its reply and memory edits); sending "
                          "your last message again\nOne again."), out
    texts = [[m.content[0]["text"] for m in chat.store.turn_messages(chat.agent.id, t)]
             for t in (1, 2)]
    assert texts == [["first task", "One again."], ["second task", "Two."]]


def test_resume_of_an_id_no_conversation_can_have_is_one_sentence(chat_factory):
    chat = chat_factory([text_response("Still here.")])
    for odd in ("²", "0", "-3", "x"):  # "²" passes str.isdigit, not int()
        assert chat.run(f"/resume {odd}") == "usage: /resume ID  (see /conversations)", odd
    for huge in ("9" * 30, str(2**63)):  # past any id a database holds
        assert chat.run(f"/resume {huge}").startswith(f"There is no conversation {huge} of "
                                                      "this agent"), huge
    assert "Still here." in chat.run("hello")


def test_retry_after_failed_turn_resends_without_popping(chat_factory):
    from memgpt_lite.engine.errors import OverloadedError

    chat = chat_factory([OverloadedError("The API is overloaded."), text_response("Done.")])
    out = chat.run("please answer")
    assert out.startswith("· error: The API is overloaded.")
    out = chat.run("/retry")
    assert out.startswith("retrying your last message\nDone.")
    assert [m.role for m in chat.store.context_messages(chat.agent.id)] == ["user", "assistant"]


def test_three_ctrl_cs_then_retry_leave_one_copy_of_the_message(chat_factory):
    def interrupt(request):
        raise KeyboardInterrupt

    chat = chat_factory([interrupt, interrupt, interrupt, text_response("Tea noted.")])
    chat.run("I like tea", "/retry", "/retry")
    out = chat.run("/retry")
    assert out.startswith("retrying your last message\nTea noted.")
    texts = [m.content[0].get("text") for m in chat.store.all_messages(chat.agent.id)]
    assert texts.count("I like tea") == 1 and texts[-1] == "Tea noted."
    assert chat.store.search_messages(chat.agent.id, "tea").total == 2


def test_ctrl_c_during_a_turn_abandons_it_and_keeps_the_queue_valid(chat_factory):
    def interrupt(request):
        raise KeyboardInterrupt

    chat = chat_factory([text_response("Hello."), interrupt, text_response("Back.")])
    chat.run("first")
    out = chat.run("this one gets interrupted")
    assert out == ("· interrupted — the turn was cancelled; your message stays in recall "
                   "(/retry sends it again)")
    queue = chat.store.context_messages(chat.agent.id)
    assert [(m.turn_id, m.role) for m in queue] == [(1, "user"), (1, "assistant")]
    assert chat.store.search_messages(chat.agent.id, "interrupted").total == 1
    assert "user (interrupted): this one gets interrupted" in chat.run("/search interrupted")
    assert chat.run("next").startswith("Back.")


def test_ctrl_c_while_streaming_closes_the_generator(chat_factory):
    chat = chat_factory([text_response("A long answer that streams in pieces.")])
    closed = []
    real_step = chat.agent.step

    def step(text):
        gen = real_step(text)
        try:
            yield next(gen)
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-stream
        finally:
            gen.close()
            closed.append(True)

    chat.agent.step = step
    out = chat.run("go")
    assert out.endswith("(/retry sends it again)")
    assert closed == [True]
    assert chat.store.context_messages(chat.agent.id) == []


def test_a_second_ctrl_c_while_the_turn_is_undone_does_not_cut_it_short(chat_factory):
    import signal

    chat = chat_factory([text_response("A long answer that streams in pieces.")])
    undone = []
    real_step = chat.agent.step

    def step(text):
        gen = real_step(text)
        try:
            yield next(gen)
            yield next(gen)
        finally:  # closed by the first Ctrl-C; the user presses it again meanwhile
            os.kill(os.getpid(), signal.SIGINT)
            gen.close()
            undone.append(True)

    def render(event):
        if event.kind == "user":
            raise KeyboardInterrupt  # the first Ctrl-C, while the view draws
    chat.agent.step = step
    chat.session.view.handle = render
    out = chat.run("go")  # was: KeyboardInterrupt out of the undo, no interrupted line
    assert out.endswith("(/retry sends it again)") and undone == [True]
    assert chat.store.context_messages(chat.agent.id) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_core_edit_checks_the_limit_and_records_history(chat_factory):
    edits = iter(["Name: Ada Lovelace.\n", "x" * 6000, "x" * 6000])
    chat = chat_factory([], edit=lambda text: next(edits))
    assert chat.run("/core edit human") == "human: saved · 19/5,000 chars"
    out = chat.run("/core edit human")  # over the limit, then saved unchanged: given up
    assert out == ("human: 6,000 chars is 1,000 over the limit of 5,000; reopening the editor "
                   "(unchanged: give up)\nhuman: not saved")
    assert chat.store.get_block(chat.agent.id, "human").value == "Name: Ada Lovelace."
    history = chat.store.block_history(chat.agent.id, "human")
    assert history[-1]["source"] == "/core edit"  # the command, named in the history
    assert chat.run("/core edit nope").startswith("no block 'nope' (blocks: persona, human")


@pytest.mark.slow
def test_core_edit_with_a_missing_editor_says_so(chat_factory, monkeypatch):
    monkeypatch.setenv("VISUAL", "no-editor -w")
    chat = chat_factory([])  # the real edit_in_editor
    assert chat.run("/core edit human") == (  # was "human: unchanged"
        "not edited: cannot run 'no-editor -w' (No such file or directory); "
        "set $VISUAL or $EDITOR")


@pytest.mark.slow
@pytest.mark.parametrize("does", ["rm -f \"$1\"", "rm -f \"$1\"; mkdir \"$1\""])
def test_an_editor_that_leaves_no_file_is_one_sentence(chat_factory, monkeypatch, tmp_path, does):
    editor = tmp_path / "editor.sh"  # was: a FileNotFoundError traceback that ended the chat
    editor.write_text(f"#!/bin/sh\n{does}\n")
    editor.chmod(0o755)
    monkeypatch.setenv("VISUAL", str(editor))
    chat = chat_factory([])  # the real edit_in_editor
    said = f"not edited: {str(editor)!r} left no file to read back ("
    for command in ("/core edit human", "/memory"):
        out = chat.run(command).replace("\n", " ")  # wrapped at 100 columns
        assert out.startswith(said) and out.endswith("); nothing was changed"), out
    assert chat.store.get_block(chat.agent.id, "human").value == (
        "Nothing is known about the user yet.")


def test_forget_shows_every_unit_and_forgets_after_confirmation(chat_factory):
    answers = iter([False, True])
    chat = chat_factory([
        text_response("Noted."),
        tool_response([("archival_insert", {"content": "The wifi password is tulip-42."})]),
        text_response("Stored."),
        text_response("Sure."),
    ], confirm=lambda q: next(answers))
    chat.run("my wifi password is tulip-42", "store the wifi password", "unrelated chat")
    out = chat.run("/forget tulip-42")
    assert "Forgetting 'tulip-42' in agent 'default' changes:" in out
    assert "message #1 · turn 1 · user · redact: my wifi password is tulip-42" in out
    assert "passage #1 · delete: The wifi password is tulip-42." in out
    assert out.endswith("nothing forgotten")
    out = " ".join(chat.run("/forget tulip-42").split())
    assert ("Forgot 'tulip-42' in agent 'default': 2 messages redacted in the queue, 1 passage "
            "deleted; 0 recording files scrubbed, 0 input history lines removed.") in out
    agent_id = chat.agent.id
    assert chat.store.search_messages(agent_id, "tulip").total == 0
    assert chat.store.search_passages(agent_id, "tulip").total == 0
    # nothing else changed: the turns stay in the queue, the match became the marker
    queue = chat.store.context_messages(agent_id)
    assert {m.turn_id for m in queue} == {1, 2, 3}
    assert queue[0].content == [{"type": "text", "text": "my wifi password is [forgotten]"}]
    assert_store_consistent(chat.store)
    assert "Nothing matches 'tulip-42'" in chat.run("/forget tulip-42")


def test_forget_flags_in_the_chat(chat_factory):
    chat = chat_factory([text_response("Noted."), text_response("ok")], confirm=lambda q: True)
    chat.run("my dog Rex and my cat Luna", "the weather is fine")
    out = chat.run("/forget --any --dry-run luna rex")
    assert "any word of 'luna rex'" in out and "message #1" in out
    assert chat.store.search_messages(chat.agent.id, "luna").total == 1  # a dry run
    assert "not a valid regular expression" in chat.run("/forget --regex (")
    assert chat.run("/forget --any").endswith("usage: /forget [--any|--regex] [--dry-run] QUERY")
    chat.run("/forget --regex r[e]x")
    assert chat.store.search_messages(chat.agent.id, "rex").total == 0
    assert chat.store.search_messages(chat.agent.id, "luna").total == 1


def test_forget_in_piped_mode_refuses_without_confirmation(chat_factory):
    chat = chat_factory([text_response("ok")], plain=True)
    chat.run("the secret is zebra")
    assert chat.run("/forget zebra").endswith(
        "/forget needs a confirmation; run `memgpt-lite forget QUERY --yes` instead")
    assert chat.store.search_messages(chat.agent.id, "zebra").total == 1


def test_interactive_loop_exits_on_ctrl_d_exit_and_double_ctrl_c(chat_factory):
    chat = chat_factory([])

    def reader(items):
        it = iter(items)

        def read():
            item = next(it)
            if isinstance(item, BaseException):
                raise item
            return item
        return read

    assert interactive_loop(chat.session, reader(["/exit", "never read"])) == 0
    assert interactive_loop(chat.session, reader([EOFError()])) == 0
    assert interactive_loop(chat.session, reader([KeyboardInterrupt(), "/foo",
                                                  KeyboardInterrupt(), KeyboardInterrupt()])) == 0
    assert "(press Ctrl-C again or Ctrl-D to leave)" in chat.buf.getvalue()
    assert piped_loop(chat.session, iter(["/foo\n", "/exit\n", "/bar\n"])) == 0
    assert "/bar" not in chat.buf.getvalue()


def test_ctrl_c_in_a_piped_chat_ends_it_with_130(chat_factory):
    # `memgpt-lite chat < questions.txt`: Ctrl-C means stop, as for any command in a
    # pipeline. The turn running is cancelled (its message stays in recall), the lines left
    # are not sent one by one, and the exit status says the chat was interrupted.
    chat = chat_factory([KeyboardInterrupt(), text_response("never sent")])
    assert piped_loop(chat.session, iter(["first question\n", "second question\n"])) == 130
    assert len(chat.model.requests) == 1 and chat.model.remaining == 1
    texts = [b["text"] for m in chat.store.all_messages(chat.agent.id) for b in m.content
             if b.get("type") == "text"]
    assert texts == ["first question"]


def test_event_lines():
    assert turn_ranges([3, 4, 5, 9, 7, 8]) == "3–5, 7–9"
    assert turn_ranges([3, 4, 5, 9]) == "3–5, 9"
    assert describe_event(EvictionEvent([3, 4, 5, 6, 7, 8, 9], 4210, "model", "s"))[0] == \
        "evicted turns 3–9 · 4,210 tokens"
    assert describe_event(EvictionEvent([2], 900, "flush", "s", 10_000, 20_000))[0] == \
        "evicted turn 2 · 900 tokens (forced: context nearly full) · now 10,000/20,000"
    assert describe_event(FoldEvent([1, 2], 1500))[0] == \
        "folded 2 old tool results · 1,500 tokens (full text stays in recall)"
    assert describe_event(PressureAlertEvent(21000, 29000, 72.4, "..."))[0].startswith(
        "memory pressure: 21,000/29,000 tokens (72%)")
    # The error says what broke; the view adds the advice once (never twice).
    assert describe_event(ErrorEvent("Rate limited by the API (429).", "rate_limit", True))[0] \
        == "error: Rate limited by the API (429). Your message is kept; /retry sends it again."
    assert describe_event(ErrorEvent("The key was rejected.", "auth", False))[0] == \
        "error: The key was rejected."
    assert status_line(Usage(100, 5, 0, 300), 0.01, 400, 1000, with_bar=True) == \
        "context 400/1,000 tokens (40%) ▰▰▰▰▱▱▱▱▱▱ · cache 75% · turn $0.0100"
    # the next request as it stands, over the budget: the pager evicts before sending it
    assert status_line(Usage(100, 5, 0, 300), 0.01, 1040, 1000, with_bar=False) == \
        ("context 1,040/1,000 tokens (104%, evicted before the next call) · cache 75% · "
         "turn $0.0100")


# --------------------------------------------------------------------------- piped, for real


@pytest.mark.slow
def test_piped_chat_against_the_fake_server(tmp_path):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        server.enqueue(tool_response([("core_memory_append",
                                       {"label": "human", "content": "Name: Ada."})]))
        server.enqueue(text_response("Hello Ada!"))
        server.enqueue(text_response("Your name is Ada.\nIt is in my notes."))
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test",
                   NO_COLOR="1")
        proc = subprocess.run(
            [sys.executable, "-m", "memgpt_lite", "chat"], input="Hi, I'm Ada\n/core\n/foo\n"
            "\nWhat's my name?\n", capture_output=True, text=True, env=env, timeout=60,
            cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # stdout: the replies and what commands print; stderr: the banner, tool and status lines.
    lines = proc.stdout.splitlines()
    persona = [l for l in lines if l.startswith("persona  ")]
    assert len(persona) == 1
    start = lines.index(persona[0])
    end = lines.index("human  10/5,000 chars · scope agent")
    del lines[start + 1:end]
    assert lines == [
        "Hello Ada!",
        persona[0],
        "human  10/5,000 chars · scope agent",
        "Name: Ada.",  # the first fact replaced the placeholder
        "",
        f"project  40/5,000 chars · scope project {tmp_path.resolve()}",
        "Nothing is known about this project yet.",
        "unknown command /foo — type /help",
        "Your name is Ada.",
        "It is in my notes.",
    ]
    meta = proc.stderr.splitlines()
    assert meta[0] == "agent 'default' (created) · model claude-sonnet-5-5"
    assert meta[1].startswith("data ")
    status = [l for l in meta if l.startswith("· context ")]
    assert len(status) == 2
    for line in status:
        assert "▰" not in line and "▱" not in line and "\x1b" not in line
    assert meta[2] == "· core_memory_append human +10 chars"
    assert meta[-1].startswith("· session: 2 turns · ")
    assert "\x1b" not in proc.stdout
    recordings = list(config.recordings_dir().rglob("*.jsonl"))
    assert len(recordings) == 1


@pytest.mark.slow
def test_piped_chat_with_no_record_writes_no_recording(tmp_path):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        proc = subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                               "--agent", "quiet"], input="hello there\n",
                              capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Fake reply to: ")
    assert not config.recordings_dir().exists() or not any(config.recordings_dir().rglob("*.jsonl"))


def test_recorded_session_splits_after_pop_and_every_part_replays_strictly(chat_factory):
    from memgpt_lite.engine import recording

    chat = chat_factory([text_response("One."), text_response("Two."), text_response("Three.")])

    def new_recorder():
        recorder = recording.Recorder.for_agent(chat.agent)
        recording.record_header(chat.agent, recorder)
        return recorder

    chat.session.recorder_factory = new_recorder
    chat.run("first", "second", "/pop", "third")
    chat.session.close()
    paths = sorted(config.recordings_dir().rglob("*.jsonl"))
    assert len(paths) == 2
    for path in paths:
        report = replay_mod.replay(path, strict=True)
        assert report.ok, report.divergences


def test_secrets_typed_at_the_prompt_never_reach_the_history_file(tmp_path):
    from memgpt_lite.engine.input_history import InputHistory
    from memgpt_lite.terminal.user_input import LineReader

    history = InputHistory(tmp_path)
    reader = LineReader(history)
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 3
    reader._remember("hello")
    reader._remember(f"my key is {key}")
    # a private key pasted without bracketed paste: its lines arrive as one message...
    reader._remember("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
                     "-----END PRIVATE KEY-----")
    # ...or, typed slowly, as several
    for part in ("-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAexampleexample",
                 "cXVpdGUgYSBsb25nIGtleSBib2R5", "-----END RSA PRIVATE KEY-----", "thanks!"):
        reader._remember(part)
    text = (tmp_path / "chat_history").read_text()
    assert key not in text and "hello" in text and "[redacted" in text
    assert "MIIE" not in text and "cXVpdGUg" not in text and text.endswith("thanks!\n")
    in_memory = [reader.readline.get_history_item(i)
                 for i in range(1, reader.readline.get_current_history_length() + 1)]
    assert in_memory == history.lines()


def test_ctrl_c_during_a_forget_in_the_chat_does_not_leave_it_half_done(chat_factory,
                                                                       monkeypatch):
    """A forget is written down before it starts, so Ctrl-C cannot cancel it: the next
    command finishes it. But the chat holds the agent, so none could while it ran: it said
    `(cancelled)` and went on sending the text to the model. The chat finishes it there."""
    from memgpt_lite.engine.store import scrub

    chat = chat_factory([text_response("Noted."), text_response("ok")], confirm=lambda q: True)
    chat.run("my wifi password is tulip-42")
    real, calls = scrub.apply_units, []

    def ctrl_c_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(scrub, "apply_units", ctrl_c_once)
    try:
        out = " ".join(chat.run("/forget tulip-42").split())
    except KeyboardInterrupt:  # the chat's loop says "(cancelled)" and reads on
        out = ""
    assert "cannot be cancelled once it has started" in out
    assert "Forgot 'tulip-42' in agent 'default'" in out
    assert chat.store.forget_intents() == []
    assert chat.store.search_messages(chat.agent.id, "tulip").total == 0
    chat.run("what is the password?")
    assert "tulip" not in json.dumps(chat.model.requests[-1].messages)


def test_a_forget_elsewhere_takes_its_lines_from_an_open_chats_up_arrow(tmp_path, monkeypatch):
    """The history file is scrubbed while another chat is open (a forget in another
    terminal, for any agent): that chat's up-arrow still offered the forgotten line, one
    Enter from sending it again. At its next prompt the lines gone from the file go from it."""
    from memgpt_lite.engine.input_history import InputHistory
    from memgpt_lite.engine.matching import Matcher
    from memgpt_lite.terminal.user_input import LineReader

    history = InputHistory(tmp_path)
    history.append(["typed in an earlier chat"])
    reader = LineReader(history)
    reader._remember("my locker code is zanzibar-7781")
    reader._remember("hello")
    assert history.scrub(Matcher.build("zanzibar-7781"))  # the forget, in another process
    monkeypatch.setattr(reader, "_read_line", lambda prompt: "next message")
    assert reader.read() == "next message"
    in_memory = [reader.readline.get_history_item(i)
                 for i in range(1, reader.readline.get_current_history_length() + 1)]
    assert in_memory == ["typed in an earlier chat", "hello", "next message"]


def test_a_forget_in_the_chat_never_hangs_on_a_line_of_its_up_arrow(chat_factory):
    """The up-arrow can hold lines the history file does not (one it could not write): the
    preview never met them, and `/forget --regex` that runs away on one stopped the chat with
    a traceback after its forget was done. Such a line is now left, like any text the
    preview had not seen, and the rest of the up-arrow is scrubbed."""
    from memgpt_lite.terminal.user_input import LineReader

    chat = chat_factory([text_response("Noted.")], confirm=lambda q: True)
    chat.run("my locker is tulip-42")
    reader = LineReader(None)  # no history file: the up-arrow alone
    chat.session.reader = reader
    for line in ("my locker is tulip-42", "a" * 5_000 + "!"):
        reader._remember(line)
    out = " ".join(chat.run("/forget --regex (a+)+$|tulip-42").split())
    assert "Forgot the pattern" in out
    assert chat.store.search_messages(chat.agent.id, "tulip").total == 0
    in_memory = [reader.readline.get_history_item(i)
                 for i in range(1, reader.readline.get_current_history_length() + 1)]
    assert in_memory == ["a" * 5_000 + "!"]


def _editor_script(tmp_path, body: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text("import os, signal, sys\npath = sys.argv[1]\n" + body)
    return f"{sys.executable} {script}"


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["latin-1", "utf-8"])
def test_the_editor_gets_the_text_in_the_locales_encoding(encoding, tmp_path, monkeypatch):
    """With a Latin-1 locale the file was written as UTF-8: the editor showed 'cafÃ©'."""
    from memgpt_lite.terminal import user_input

    seen = tmp_path / "seen"
    monkeypatch.setattr(user_input, "_readline_encoding", lambda: encoding)
    monkeypatch.setenv("VISUAL", _editor_script(tmp_path, (
        f"open({str(seen)!r}, 'wb').write(open(path, 'rb').read())\n"
        f"open(path, 'w', encoding={encoding!r}).write('naïve café')\n")))
    assert user_input.edit_in_editor("café") == "naïve café"
    assert seen.read_bytes() == "café".encode(encoding)


@pytest.mark.slow
def test_a_text_the_locale_cannot_hold_goes_to_the_editor_as_utf8(tmp_path, monkeypatch):
    from memgpt_lite.terminal import user_input

    monkeypatch.setattr(user_input, "_readline_encoding", lambda: "latin-1")
    monkeypatch.setenv("VISUAL", _editor_script(tmp_path, "open(path, 'a').write(' 好')\n"))
    assert user_input.edit_in_editor("部署 café") == "部署 café 好"


@pytest.mark.slow
def test_ctrl_c_while_a_gui_editor_is_open_keeps_the_edit(tmp_path, monkeypatch):
    """`code --wait`: Ctrl-C reaches the chat and the editor's launcher, which dies while
    its window stays open. The chat raised KeyboardInterrupt and deleted the file under
    the open window, so what was typed there was lost."""
    from memgpt_lite.terminal import user_input

    monkeypatch.setenv("VISUAL", _editor_script(tmp_path, (
        "open(path, 'w').write('typed in the window')\n"
        "os.kill(os.getppid(), signal.SIGINT)\n"  # the terminal's Ctrl-C reaches both
        "os.kill(os.getpid(), signal.SIGINT)\n")))
    with pytest.raises(user_input.EditorError) as caught:
        user_input.edit_in_editor("before")
    message = str(caught.value)
    kept = Path(re.search(r"kept in (\S+);", message).group(1))
    assert kept.read_text() == "typed in the window"
    assert "nothing was changed" in message
    kept.unlink()

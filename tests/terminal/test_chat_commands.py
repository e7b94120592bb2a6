"""The chat's second-pass commands as transcripts (scripted model, real agent and store):
/memory as one document (edits journalled like the tools', a new block, a problem that loses
nothing), /compact, /model, /cost, /add, /agents NAME, /help from the command table, Tab
completion's candidates, and a /retry that fixes a failed turn fixing the exit status."""

from __future__ import annotations

import io
import struct
import zlib
from datetime import datetime, timezone

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import slash
from memgpt_lite.terminal.chat import ChatSession, interactive_loop
from memgpt_lite.terminal.completer import Completer
from memgpt_lite.terminal.render import make_console
from memgpt_lite.terminal.view import ChatView

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)


class Chat:
    def __init__(self, script, edits=()):
        self.store = SQLiteStore(config.db_path())
        self.model = ScriptedModel(script)
        self.agent = Agent.open(self.store, model_client=self.model, summary_client=self.model,
                                clock=lambda: FIXED)
        self.buf = io.StringIO()
        self.console = make_console(self.buf, plain=True, width=100)
        self.edits = list(edits)
        self.opened: list[str] = []
        self.session = ChatSession(self.agent, self.console,
                                   ChatView(self.console, live=False, markdown=False),
                                   edit=self._edit)

    def _edit(self, text):
        self.opened.append(text)
        edit = self.edits.pop(0)
        return edit(text) if callable(edit) else edit

    def run(self, *lines):
        start = self.buf.tell()
        for line in lines:
            self.session.handle_line(line)
        return self.buf.getvalue()[start:]


@pytest.fixture
def chats():
    made = []

    def make(script=(), edits=()):
        made.append(Chat(script, edits))
        return made[-1]

    yield make
    for chat in made:
        chat.store.close()


def test_memory_opens_every_block_and_applies_edits_like_the_tools(chats):
    chat = chats(edits=[lambda doc: doc.replace("Nothing is known about the user yet.",
                                                "Name: Ada.")
                        + "\n=== project · limit 300 ===\nRun hexo g before deploying.\n"])
    out = chat.run("/memory")
    doc = chat.opened[0]
    assert "=== persona · limit 5,000 · " in doc and "=== human · limit 5,000 · 36 chars" in doc
    assert out.splitlines() == ["human: saved · 10/5,000 chars", "project: added · 28/300 chars"]
    blocks = {b.label: b for b in chat.agent.blocks()}
    assert blocks["human"].value == "Name: Ada." and blocks["project"].limit == 300
    history = chat.store.block_history(chat.agent.id, "human")
    assert history[-1]["source"] == "/memory"  # a journalled edit naming the command
    assert chat.store.block_history(chat.agent.id, "project")[-1]["source"] == "/memory"
    assert chat.session.changed  # the recording ends: the next one starts from this state


def test_a_problem_is_one_sentence_and_loses_nothing(chats):
    over = lambda doc: doc.replace("Nothing is known about the user yet.", "x" * 5_001)  # noqa
    chat = chats(edits=[over, lambda doc: doc, lambda doc: doc.replace("x" * 5_001, "ok")])
    out = chat.run("/memory")
    assert out.splitlines() == [
        "not saved: human is 5,001 chars, 1 over its limit of 5,000; shorten it (archival memory "
        "holds longer text).",
        "reopening the editor (save it unchanged to give up)",
        "/memory starts again from your edited text."]
    assert chat.opened[1].startswith("# NOT SAVED: human is 5,001 chars")
    assert chat.agent.blocks()[1].value == "Nothing is known about the user yet."  # unchanged
    out = chat.run("/memory")  # the next /memory starts from the edited text, not the store
    assert "x" * 5_001 in chat.opened[2] and "# NOT SAVED" not in chat.opened[2]
    assert out.splitlines() == ["/memory: starting from your edited text of last time",
                                "human: saved · 2/5,000 chars"]


def test_the_same_document_saved_again_without_the_problem_line_gives_up(chats):
    bad = "text before any heading\n"  # was: reopened on it for ever
    chat = chats(edits=[bad, bad, "oops\n" + bad, lambda doc: doc])
    out = chat.run("/memory")
    assert out.splitlines()[-1] == "/memory starts again from your edited text."
    assert len(chat.opened) == 2 and chat.session.memory_draft == bad
    out = chat.run("/memory")  # the draft, then a changed bad document, then given up
    assert out.splitlines()[0] == "/memory: starting from your edited text of last time"
    assert out.splitlines()[-1] == "/memory starts again from your edited text."
    assert chat.opened[2] == bad and chat.session.memory_draft == "oops\n" + bad


def test_a_document_that_cannot_be_read_is_one_sentence(chats):
    for bad, words in (("text before any heading\n", "before the first block heading"),
                       ("=== human\nx\n", "is not a block heading"),
                       ("=== a ===\nx\n=== a ===\ny\n", "appears twice"),
                       ("=== bad label! ===\nx\n", "is not a block heading"),
                       ("=== new · limit 0 ===\nx\n", "limit must be between"),
                       ("=== new · limit , ===\nx\n", "line 1: the limit ',' is not a number")):
        chat = chats(edits=[bad, lambda doc: doc])
        out = chat.run("/memory")
        assert words in out.splitlines()[0], (bad, out)
        assert out.splitlines()[-1] == "/memory starts again from your edited text."
    cancelled = chats(edits=[None])
    assert cancelled.run("/memory") == "core memory: not saved (the edit was cancelled)\n"


def test_core_edit_of_a_missing_block_points_at_memory(chats):
    assert "/memory adds one" in chats().run("/core edit project")


def test_compact_shows_what_went_and_the_new_summary(chats):
    chat = chats([text_response("One."), text_response("Two."), text_response("Three."),
                  tool_response([("evict_turns", {"turn_ids": [1, 2],
                                                  "summary": "Ada asked about her garden."})]),
                  text_response("Kept the garden.")])
    assert chat.run("/compact") == "nothing to compact: the context queue is empty\n"
    chat.run("first", "second", "third")
    out = chat.run("/compact keep the garden").splitlines()
    assert any(line.startswith("· evicted turns 1–2 · ") for line in out), out
    assert out[-2].startswith("compacted: context ") and "the queue holds 1 of 3 turns" in out[-2]
    assert out[-1] == "summary: Turns 1–2: Ada asked about her garden."


def test_retry_after_compact_compacts_again_or_says_there_is_nothing(chats):
    chat = chats([text_response("One."), text_response("Two."), OverloadedError("busy"),
                  tool_response([("evict_turns", {"turn_ids": [1], "summary": "Ada's garden."})]),
                  text_response("Kept the garden."), text_response("Nothing to evict."),
                  text_response("Summary.")])
    chat.run("first", "second")
    assert "error" in chat.run("/compact keep the garden")
    out = chat.run("/retry")
    assert "· evicted turn 1 · " in out and "Kept the garden." in out
    assert chat.agent.context_report().turns[-1].id == 2  # the compaction left the queue
    assert "the queue holds 0 of 1 turns" in chat.run("/compact")  # the oldest went
    assert chat.run("/retry") == "nothing to compact: the context queue is empty\n"


def test_model_shows_switches_and_saves(chats):
    chat = chats([text_response("ok", usage=Usage(10, 1, 0, 0))])
    assert chat.run("/model") == ("model claude-sonnet-5-5 (default); summariser "
                                  "claude-haiku-5-5\n")
    out = chat.run("/model haiku")
    assert out.startswith("model claude-haiku-5-5 for the rest of this session (not stored")
    chat.run("hello")
    assert chat.model.requests[-1].model == "claude-haiku-5-5"
    assert config.own_settings(chat.store.get_agent("default").settings) == {}
    assert "(set by /model)" in chat.run("/model")
    assert "stored with agent 'default'" in chat.run("/model opus --save")
    assert config.own_settings(chat.store.get_agent("default").settings) == {
        "model": "claude-opus-5-5"}
    assert "warning: 'my-model' is not a model" in chat.run("/model my-model")
    chat.agent.settings.max_output_tokens = 40_000
    assert "writes at most 32,000 output tokens" in chat.run("/model opus")


def test_cost_by_kind_of_call(chats):
    chat = chats([text_response("ok", usage=Usage(1000, 10, 0, 3000))])
    assert chat.run("/cost") == "no model calls yet this session\n"
    chat.run("hello")
    lines = chat.run("/cost").splitlines()
    assert lines[0].split() == ["calls", "by", "kind", "calls", "input", "tokens", "from",
                                "cache", "output", "tokens", "cost"]
    assert lines[1].split()[:5] == ["chat", "1", "4,000", "75%", "10"]
    assert lines[-1].split()[:2] == ["total", "1"]


def png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" + b"\0" * 12)) + chunk(b"IEND", b""))


def test_add_sends_files_with_the_next_message(chats, tmp_path):
    (tmp_path / "notes.md").write_text("Plant tomatoes in May.")
    (tmp_path / "d.png").write_bytes(png())
    (tmp_path / "bin").write_bytes(b"\0\1\2")
    chat = chats([text_response("Tomatoes in May."), text_response("Nothing attached.")])
    assert chat.run(f"/add {tmp_path / 'notes.md'}") == (
        "notes.md (22 chars) will be sent with your next message\n")
    assert "d.png (image/png, 4×4 px" in chat.run(f"/add {tmp_path / 'd.png'}")
    assert "neither text nor a PNG" in chat.run(f"/add {tmp_path / 'bin'}")
    assert "Cannot read" in chat.run(f"/add {tmp_path / 'missing.txt'}")
    assert "waiting: notes.md" in chat.run("/add")
    chat.run("When do I plant?")
    sent = chat.model.requests[0].messages[-1]["content"]
    assert [b["type"] for b in sent if b.get("type") != "text" or "attachment" in b["text"]] \
        == ["text", "image"]
    assert sent[-1]["text"] == "When do I plant?"
    chat.run("And now?")  # attached once, not again
    assert not any(b.get("type") == "image" for b in chat.model.requests[1].messages[-1]["content"])


def test_add_takes_a_path_quoted_as_a_dropped_file_arrives(chats, tmp_path):
    (tmp_path / "my notes.md").write_text("Plant tomatoes in May.")
    chat = chats()
    said = "my notes.md (22 chars) will be sent with your next message\n"
    for typed in (f"{tmp_path}/my notes.md", f"'{tmp_path}/my notes.md'",
                  f"\"{tmp_path}/my notes.md\"", f"{tmp_path}/my\\ notes.md"):
        assert chat.run(f"/add {typed}") == said, typed  # was: Cannot read '…': No such file
    assert chat.run(f"/add '{tmp_path}/my notes") == (  # unbalanced: the sentence, as typed
        f"Cannot read '{tmp_path}/my notes: No such file or directory.\n")
    assert len(chat.session.pending) == 4


def test_a_pasted_command_split_by_a_newline_or_tab_still_runs(chats):
    chat = chats([text_response("One."), text_response("Two.")])
    chat.run("first", "second")
    out = chat.run("/pop\n2")  # was: unknown command /pop, a line break, 2 — type /help
    assert out.count("removed turn") == 2, out
    assert chat.run("/core\tedit\tnope").startswith("no block 'nope'")
    assert chat.run("/") == "unknown command / — type /help\n"


def test_agents_name_shows_one_agent(chats):
    chat = chats()
    out = chat.run("/agents default")
    assert out.startswith("agent default\n") and "setting" in out
    assert "no agent 'nope' (agents: default)" in chat.run("/agents nope")


def test_help_is_the_command_table_and_leaves_room_for_more(chats):
    out = chats().run("/help")
    for command in slash.COMMANDS:
        for usage, _ in command.usages:
            assert f"  {usage}" in out
    for new in ("/memory", "/compact [INSTRUCTIONS]", "/model [NAME] [--save]", "/cost",
                "/add FILE", "/agents [NAME]"):
        assert new in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_completion_candidates(chats, tmp_path):
    chat = chats()
    chat.store.create_agent("travel", {}, {})
    done = Completer(chat.session).matches
    assert done("", "/co") == ["/compact", "/context", "/conversations", "/core", "/cost"]
    assert done("/core ", "") == ["edit"]
    assert done("/core edit ", "h") == ["human"]
    assert done("/agents ", "tr") == ["travel"]
    assert done("/model ", "ha") == ["haiku"]
    assert done("/forget --any ", "--") == ["--regex", "--dry-run"]
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "sub").mkdir()
    assert done("/add ", str(tmp_path / "no")) == [str(tmp_path / "notes.md")]
    assert done("/add ", str(tmp_path / "su")) == [str(tmp_path / "sub") + "/"]
    assert done("", "hello") == [] and done("hello ", "wor") == []
    # A folder with a space in its name: readline's word is what follows the last space.
    (tmp_path / "my notes").mkdir()
    (tmp_path / "my notes" / "plan.md").write_text("x")
    assert done("/add ", str(tmp_path / "my")) == [str(tmp_path / "my notes") + "/"]
    assert done(f"/add {tmp_path}/my ", "notes/p") == ["notes/plan.md"]
    assert done(f"/add {tmp_path}/my ", "") == ["notes/"]
    assert done(f"/add {tmp_path}/my ", "x") == []


def test_a_failed_turn_fixed_by_retry_exits_zero(chats):
    chat = chats([OverloadedError("The API is overloaded (529)."), text_response("Done.")])
    lines = iter(["do the thing", "/retry"])

    def read():
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    interactive_loop(chat.session, read)
    assert chat.session.failed_turns == 0  # the chat's exit status: 0
    again = chats([OverloadedError("busy")])
    again.run("do the thing")
    assert again.session.failed_turns == 1


def test_a_message_answered_after_retries_that_failed_too_exits_zero(chats):
    # A flaky server: the message fails, its first /retry fails as well, the second answers.
    # One message, answered in the end: nothing is still failed, so the exit status is 0.
    chat = chats([OverloadedError("The API is overloaded (529)."),
                  OverloadedError("The API is overloaded (529)."), text_response("Done.")])
    chat.run("do the thing", "/retry", "/retry")
    assert chat.session.failed_turns == 0
    assert "failed" not in chat.session.goodbye()
    twice = chats([OverloadedError("busy"), OverloadedError("busy")])
    twice.run("do the thing", "/retry")
    assert twice.session.failed_turns == 1  # one message, still unanswered
    again = chats([OverloadedError("busy"), text_response("Done."), OverloadedError("busy")])
    again.run("first", "/retry", "second")
    assert again.session.failed_turns == 1  # the second message's failure stands


def test_context_turns_add_up_to_the_queue_row(chats):
    chat = chats([text_response("A" * 300), text_response("B " * 900)])
    chat.run("short", "a longer question " * 40)
    report = chat.agent.context_report()
    assert len(report.turns) == 2
    assert sum(t.tokens for t in report.turns) == report.ledger["queue"]
    out = chat.run("/context")
    queue_row = next(line for line in out.splitlines() if line.startswith("queue "))
    assert queue_row.split()[-1] == f"{report.ledger['queue']:,}"


def test_the_memory_document_names_each_blocks_scope():
    from memgpt_lite.engine.records import Block
    from memgpt_lite.terminal.memory_editor import render_document

    doc = render_document("ada", [Block("human", "Ada.", 100, "user"),
                                  Block("project", "Deploy with hexo g.", 200, "project",
                                        "/src/blog"),
                                  Block("persona", "Helpful.", 300)], lambda label: ["ada", "bo"])
    assert "=== human · limit 100 · 4 chars · scope user, shared by ada, bo ===" in doc
    assert "=== project · limit 200 · 19 chars · scope project /src/blog ===" in doc
    assert "=== persona · limit 300 · 8 chars · scope agent ===" in doc


def test_a_window_the_provider_taught_one_model_stays_that_models(chats):
    """/model NAME: a smaller window the provider taught sonnet is sonnet's. It used to go
    on holding for haiku, and was stored as haiku's, so sonnet overflowed again after a
    restart while haiku worked in a window it was never refused."""
    from memgpt_lite.engine.config import Settings
    from memgpt_lite.engine.errors import PromptTooLongError

    chat = chats([PromptTooLongError("too long", actual=11_000, maximum=10_000),
                  text_response("ok"), text_response("ok too")])
    chat.run("hello")
    assert chat.agent.settings.context_window == 10_000  # learned, for sonnet
    chat.run("/model haiku")
    assert chat.agent.settings.context_window == 32_000  # the configured window, for haiku
    chat.run("again")
    assert chat.model.requests[-1].model == "claude-haiku-5-5"
    chat.run("/model sonnet")
    assert chat.agent.settings.context_window == 10_000
    chat.run("/model haiku")
    chat.agent.close()
    state = chat.store.get_agent("default").state["provider_window"]
    assert state == {"model": "claude-sonnet-5-5", "tokens": 10_000}
    for model, window in (("claude-sonnet-5-5", 10_000), ("claude-haiku-5-5", 32_000)):
        again = Agent.open(chat.store, model_client=chat.model, settings=Settings(model=model))
        assert again.settings.context_window == window, model
        again.close()


@pytest.mark.parametrize("line, said", [
    ("/forget --bogus zebra", "/forget: unknown option --bogus (options: --any, --regex, "
                              "--dry-run; put -- before a query that starts with -)\n"),
    ("/forget --any --Regex zebra", "/forget: unknown option --Regex (options: --any, "
                                    "--regex, --dry-run; put -- before a query that starts "
                                    "with -)\n"),
    ("/model --bogus", "/model: unknown option --bogus (options: --save)\n"),
    ("/model haiku -s", "/model: unknown option -s (options: --save)\n"),
    ("/model --save", "usage: /model NAME --save (the model to store with the agent)\n"),
])
def test_an_unknown_option_of_a_slash_command_is_refused_in_one_line(chats, line, said):
    """`/forget --bogus zebra` previewed a forget of '--bogus zebra'; `/model --bogus`
    switched the session to a model named '--bogus'."""
    chat = chats([text_response("my zebra")])
    chat.run("hi zebra")
    assert chat.run(line) == said
    assert chat.agent.settings.model == "claude-sonnet-5-5"


def test_a_forget_query_that_starts_with_a_dash_follows_two_dashes(chats):
    chat = chats([text_response("ok")])
    chat.run("my flag is --verbose-mode")
    out = " ".join(chat.run("/forget --dry-run -- --verbose-mode").split())
    assert "'--verbose-mode'" in out and "unknown option" not in out
    assert "any word of 'luna'" in " ".join(chat.run("/forget --any  --dry-run luna").split())

"""Scopes: a core memory block in user scope is one row that every agent sharing it sees in
its next request and edits; per-agent blocks stay the default; undo never clobbers another
agent's edit; recordings capture other agents' edits so strict replay still matches;
export, import, delete and the command line handle shared blocks."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from memgpt_lite.engine import config, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.errors import OverloadedError
from memgpt_lite.engine.memory import default_blocks, render_core_memory
from memgpt_lite.engine.records import ModelRequest
from memgpt_lite.engine.store import open_store, transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.base import BlockChanged
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli
from memgpt_lite.terminal.chat import ChatSession
from memgpt_lite.terminal.view import ChatView


def append(content: str, label: str = "human"):
    return tool_response([("core_memory_append", {"label": label, "content": content})])


def tail(request: ModelRequest) -> str:
    return json.dumps(request.messages[-1], ensure_ascii=False)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request):
    """The data dir's SQLite file, or a fresh Postgres database: sharing is the same."""
    target = str(config.db_path()) if request.param == "sqlite" else \
        request.getfixturevalue("pg_url")
    with open_store(target) as s:
        yield s


def open_agent(store: SQLiteStore, name: str, script=(), *, share: bool = True) -> Agent:
    if store.get_agent(name) is None:
        row = store.create_agent(name, {}, default_blocks(5_000))
        if share:
            store.share_block(row.id, "human")
    return Agent.open(store, name, model_client=ScriptedModel(list(script), validate=True),
                      summary_client=ScriptedModel([]), lock_wait=None)


# ---------------------------------------------------------------- one row, seen by all


def test_an_edit_shows_up_in_the_next_request_of_every_sharing_agent(store):
    home = open_agent(store, "home", [append("Name: Ada."), text_response("Hi Ada.")])
    work = open_agent(store, "work", [text_response("Hello Ada.")])
    solo = open_agent(store, "solo", [text_response("Hello stranger.")], share=False)
    assert list(home.step("I'm Ada"))[-1].completed
    for agent in (work, solo):
        list(agent.step("who am I?"))
    assert 'scope=\\"user\\"' in tail(work.model_client.requests[0])
    assert "Name: Ada." in tail(work.model_client.requests[0])
    assert "Name: Ada." not in tail(solo.model_client.requests[0])
    assert 'scope=\\"user\\"' not in tail(solo.model_client.requests[0])
    assert [(b.label, b.scope) for b in solo.blocks()] == [("persona", "agent"),
                                                          ("human", "agent")]
    assert store.shared_block_agents("human") == ["home", "work"]
    assert store.db.query("SELECT count(*) FROM shared_blocks")[0][0] == 1


def test_an_edit_made_between_two_model_calls_is_in_the_second_request(store):
    work = open_agent(store, "work")

    def edit_meanwhile(request):  # another agent edits while this call runs
        work.tools.execute("core_memory_append", {"label": "human", "content": "Likes figs."})
        return tool_response([("conversation_search", {"query": "anything"})])

    home = open_agent(store, "home", [edit_meanwhile, text_response("ok")])
    list(home.step("hi"))
    assert "Likes figs." not in tail(home.model_client.requests[0])
    assert "Likes figs." in json.dumps(home.model_client.requests[1].messages)


def test_render_marks_only_shared_blocks():
    from memgpt_lite.engine.records import Block

    text = render_core_memory([Block("persona", "p", 10), Block("human", "h", 10, "user")])
    assert '<block label="persona" used="1" limit="10">' in text
    assert '<block label="human" scope="user" used="1" limit="10">' in text


# ---------------------------------------------------------------- undo and /pop


def test_undo_of_a_failed_turn_never_clobbers_another_agents_later_edit(store):
    work = open_agent(store, "work")

    def other_edits_then_overloaded(request):
        work.tools.execute("core_memory_append", {"label": "human", "content": "From work."})
        raise OverloadedError("The API is overloaded.")

    home = open_agent(store, "home", [append("From home."), other_edits_then_overloaded])
    events = list(home.step("hi"))
    assert not events[-1].completed
    value = work.blocks()[1].value
    assert "From work." in value  # the later edit stays
    assert value == home.blocks()[1].value


def test_undo_of_a_failed_turn_reverts_a_shared_edit_nobody_changed_since(store):
    work = open_agent(store, "work")
    before = work.blocks()[1].value
    home = open_agent(store, "home", [append("From home."),
                                      OverloadedError("The API is overloaded.")])
    assert not list(home.step("hi"))[-1].completed
    assert work.blocks()[1].value == before


def test_pop_leaves_a_shared_block_another_agent_changed_since(store):
    home = open_agent(store, "home", [append("From home."), text_response("ok")])
    work = open_agent(store, "work", [append("From work."), text_response("ok")])
    list(home.step("hi"))
    list(work.step("hi"))
    popped = home.pop_turns(1)
    assert popped.blocks_kept == ["human"] and "From home." in work.blocks()[1].value
    popped = work.pop_turns(1)
    assert popped.blocks_reverted == ["human"] and "From work." not in home.blocks()[1].value


def test_a_user_edit_from_a_stale_value_is_refused(store):
    home, work = open_agent(store, "home"), open_agent(store, "work")
    start = home.blocks()[1].value
    work.edit_block("human", "Changed by work.")
    with pytest.raises(BlockChanged, match="changed by another agent"):
        home.edit_block("human", "Edited by hand.", expected=start)
    assert work.blocks()[1].value == "Changed by work."
    home.edit_block("human", "Edited by hand.", expected="Changed by work.")
    assert work.blocks()[1].value == "Edited by hand."


def test_core_edit_in_the_chat_keeps_the_users_text_when_the_block_changed(store):
    work = open_agent(store, "work")
    home = open_agent(store, "home")

    def editor(text: str) -> str:
        work.edit_block("human", "Meanwhile from work.")  # while the editor is open
        return "My careful edit."

    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    session = ChatSession(home, console, ChatView(console, live=False, markdown=False), edit=editor)
    session.handle_line("/core edit human")
    text = out.getvalue()
    assert "not saved" in text and "My careful edit." in text and "/core edit human" in text
    assert home.blocks()[1].value == "Meanwhile from work."


# ---------------------------------------------------------------- recordings


def test_another_agents_edits_between_and_within_turns_replay_strictly(store, tmp_path):
    work = open_agent(store, "work")

    def edit_meanwhile(request):
        work.tools.execute("core_memory_append", {"label": "human", "content": "Mid-turn."})
        return append("Home's own line.")

    home = open_agent(store, "home", [append("Name: Ada."), text_response("ok"),
                                      edit_meanwhile, text_response("ok"),
                                      text_response("ok")])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(home, recorder)
        list(recording.recorded_step(home, recorder, "I'm Ada"))
        work.tools.execute("core_memory_append", {"label": "human", "content": "Between."})
        list(recording.recorded_step(home, recorder, "more"))
        work.edit_block("human", work.blocks()[1].value + "\nLast.")
        list(recording.recorded_step(home, recorder, "and more"))
    loaded = recording.Recording.load(path)
    assert [e["after"] for e in loaded.turns[1].outside_edits] == [0, 4]
    assert "Last." in loaded.turns[2].outside_edits[0]["value"]
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences
    assert report.final_core_memory["human"].endswith("Last.")


def test_a_new_agent_with_a_shared_block_replays_strictly(store, tmp_path):
    open_agent(store, "home").edit_block("human", "Name: Ada (set by home).")
    work = open_agent(store, "work", [text_response("Hello Ada.")])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(work, recorder)
        list(recording.recorded_step(work, recorder, "who am I?"))
    header = recording.Recording.load(path).header
    assert [b.get("scope") for b in header["delta"]["blocks"]] == ["agent", "user"]
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences


def test_a_recording_reopened_after_a_restart_still_notices_other_agents(tmp_path):
    db = config.db_path()
    with SQLiteStore(db) as first:
        work = open_agent(first, "work")
        home = open_agent(first, "home", [text_response("one")])
        path = tmp_path / "rec.jsonl"
        recorder = recording.Recorder(path)
        recording.record_header(home, recorder)
        list(recording.recorded_step(home, recorder, "first"))
        work.lock = None
    with SQLiteStore(db) as second:  # a new process: store and agent reopened, same recording
        recorder.restart()
        open_agent(second, "work").edit_block("human", "Edited while home was closed.")
        home = open_agent(second, "home", [text_response("two")])
        list(recording.recorded_step(home, recorder, "second"))
        recorder.close()
    assert recording.Recording.load(path).turns[1].outside_edits
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences


def test_a_recording_of_several_agents_is_refused_by_strict_replay(store, tmp_path):
    home = open_agent(store, "home", [text_response("one")])
    work = open_agent(store, "work", [text_response("two")])
    path = tmp_path / "rec.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(home, recorder)
        list(recording.recorded_step(home, recorder, "first"))
        list(recording.recorded_step(work, recorder, "second"))
    assert recording.Recording.load(path).turns[1].agent == "work"
    with pytest.raises(recording.RecordingError, match="several agents"):
        replay_mod.replay(path, strict=True)


# ---------------------------------------------------------------- export, import, delete


def test_export_says_which_blocks_are_shared_and_import_joins_them(store):
    home = open_agent(store, "home")
    home.edit_block("human", "Name: Ada.")
    doc = json.loads(json.dumps(transfer.export_agent(store, "home")))
    assert [(b["label"], b["scope"]) for b in doc["blocks"]] == [("persona", "agent"),
                                                               ("human", "user")]
    doc["blocks"][1]["value"] = "Name: Ada (as exported)."
    copy = transfer.import_agent(store, doc, "copy")
    assert store.get_block(copy.id, "human").value == "Name: Ada."  # the data dir's value
    assert store.shared_block_agents("human") == ["copy", "home"]
    history = store.block_history(copy.id, "human")
    assert history[-1]["old_value"] == "Name: Ada (as exported)."


def test_import_into_another_data_dir_creates_the_shared_block(store, tmp_path):
    open_agent(store, "home").edit_block("human", "Name: Ada.")
    doc = transfer.export_agent(store, "home")
    with SQLiteStore(tmp_path / "other.db") as other:
        row = transfer.import_agent(other, doc)
        block = other.get_block(row.id, "human")
        assert (block.value, block.scope) == ("Name: Ada.", "user")


def test_an_export_with_an_unknown_scope_is_refused(store):
    open_agent(store, "home")
    doc = transfer.export_agent(store, "home")
    doc["blocks"][1]["scope"] = "team"
    from memgpt_lite.engine.store import StoreError

    with pytest.raises(StoreError, match="scope"):
        transfer.import_agent(store, doc, "copy")


def test_deleting_one_agent_never_deletes_a_shared_block_others_use(store):
    open_agent(store, "home").edit_block("human", "Name: Ada.")
    work = open_agent(store, "work")
    store.delete_agent("home")
    assert work.blocks()[1].value == "Name: Ada." and work.blocks()[1].scope == "user"
    store.delete_agent("work")
    assert store.db.query("SELECT count(*) FROM shared_blocks")[0][0] == 0


def test_unshare_gives_an_agent_its_own_copy(store):
    home, work = open_agent(store, "home"), open_agent(store, "work")
    home.edit_block("human", "Name: Ada.")
    assert store.unshare_block(work.id, "human") and not store.unshare_block(work.id, "human")
    work.edit_block("human", "Name: Ada at work.")
    assert home.blocks()[1].value == "Name: Ada." and home.blocks()[1].scope == "user"
    assert work.blocks()[1].scope == "agent"
    assert store.unshare_block(home.id, "human")
    assert store.db.query("SELECT count(*) FROM shared_blocks")[0][0] == 0


# ---------------------------------------------------------------- the command line


def test_agents_create_share_core_and_delete_on_the_command_line(capsys):
    assert cli.main(["agents", "create", "home"]) == 0
    assert cli.main(["agents", "share", "home", "human"]) == 0
    assert "shared with no other agent yet" in capsys.readouterr().out
    assert cli.main(["agents", "create", "work", "--share", "human"]) == 0
    assert "Block 'human' is in user scope, shared with home." in capsys.readouterr().out
    assert cli.main(["agents", "create", "work"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["agents", "create", "x", "--share", "no spaces"]) == 2
    with SQLiteStore(config.db_path()) as store:
        open_agent(store, "home").edit_block("human", "Name: Ada.")
    assert cli.main(["core", "--agent", "work"]) == 0
    out = capsys.readouterr().out
    assert "persona  202/5,000 chars · scope agent" in out
    assert "human  10/5,000 chars · scope user, shared by home, work\nName: Ada." in out
    assert cli.main(["agents", "export", "work", "-"]) == 0
    assert '"scope": "user"' in capsys.readouterr().out
    assert cli.main(["agents", "delete", "home", "--yes"]) == 0
    assert "shared block 'human' stays, used by work" in capsys.readouterr().out
    assert cli.main(["agents", "unshare", "work", "human"]) == 0
    assert cli.main(["agents", "unshare", "work", "human"]) == 1
    assert "no block 'human' in user scope" in capsys.readouterr().err


def test_core_in_the_chat_shows_each_blocks_scope(store):
    home = open_agent(store, "home")
    open_agent(store, "work")
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    ChatSession(home, console, ChatView(console, live=False, markdown=False)).handle_line("/core")
    assert "persona  202/5,000 chars · scope agent" in out.getvalue()
    assert "human  36/5,000 chars · scope user, shared by home, work" in out.getvalue()


def test_the_model_sees_a_shared_block_with_its_scope_even_when_unedited(store):
    work = open_agent(store, "work", [text_response("ok")])
    list(work.step("hi"))
    sent = tail(work.model_client.requests[0])
    assert '<block label=\\"human\\" scope=\\"user\\"' in sent

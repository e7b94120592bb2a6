"""The command line of conversations, projects and block history, on both backends:
`agents share` never loses a value (`--keep`, refused with one sentence when piped),
`core --history` / `--restore`, `conversations`, `core` and `agents show` naming the
project, `agents set confirm_memory=`."""

from __future__ import annotations

import pytest

from memgpt_lite.engine import attachments
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli


@pytest.fixture
def db(store_target):
    return store_target


def main(db, *args) -> int:
    return cli.main(["--db", db, *args])


def agent_with(db, name, human):
    with open_store(db) as store:
        row = store.create_agent(name, {}, default_blocks(5_000))
        if human is not None:
            store.set_block(row.id, "human", human, source="user")


def shared_value(db):
    with open_store(db) as store:
        return store.shared_block("human").value


def test_sharing_never_loses_a_value(db, capsys):
    assert main(db, "agents", "create", "bob", "--share", "human") == 0
    agent_with(db, "ada", "Name: Ada. Answers in Chinese.")
    assert main(db, "agents", "share", "ada", "human") == 0  # the shared one held nothing
    assert shared_value(db) == "Name: Ada. Answers in Chinese."
    agent_with(db, "cy", "Likes tea.")
    capsys.readouterr()
    assert main(db, "agents", "share", "cy", "human") == 2  # piped: nobody to ask
    err = capsys.readouterr().err
    assert "--keep shared|mine|both" in err and err.count("\n") == 1
    with open_store(db) as store:
        assert store.get_block(store.get_agent("cy").id, "human").scope == "agent"
    assert main(db, "agents", "share", "cy", "human", "--keep", "both") == 0
    assert shared_value(db) == "Name: Ada. Answers in Chinese.\nLikes tea."
    agent_with(db, "dan", "Dan's own facts.")
    assert main(db, "agents", "share", "dan", "human", "--keep", "shared") == 0
    capsys.readouterr()
    assert main(db, "core", "--agent", "dan", "--history", "human") == 0
    assert "Dan's own facts." in capsys.readouterr().out  # kept, and restorable
    assert main(db, "agents", "unshare", "dan", "human") == 0
    assert main(db, "core", "--agent", "dan", "--restore", "human", "2") == 0
    with open_store(db) as store:
        assert store.get_block(store.get_agent("dan").id, "human").value == "Dan's own facts."
    assert "Dan's own facts." not in shared_value(db)


def test_a_shared_block_follows_a_rename(db, capsys):
    assert main(db, "agents", "create", "bob", "--share", "human") == 0
    agent_with(db, "ada", "Name: Ada.")
    capsys.readouterr()
    assert main(db, "agents", "share", "ada", "human", "--keep", "mine") == 0
    out = capsys.readouterr().out
    assert "The shared 'human' now holds the value of 'ada'; the one it held before" in out
    assert main(db, "agents", "rename", "ada", "eve") == 0
    capsys.readouterr()
    assert main(db, "core", "--agent", "eve") == 0
    out = capsys.readouterr().out
    assert "scope user, shared by bob, eve" in out and "Name: Ada." in out
    assert main(db, "core", "--agent", "bob", "--history", "human") == 0
    out = capsys.readouterr().out
    assert "eve · " in out and "ada · " not in out  # every version names the agent as it is


def test_history_and_restore_of_a_block(db, capsys):
    agent_with(db, "ada", "v2 text")
    with open_store(db) as store:
        row = store.get_agent("ada")
        store.set_block(row.id, "human", "v3 text", source="tool")
    capsys.readouterr()
    assert main(db, "core", "--agent", "ada", "--history", "human") == 0
    out = capsys.readouterr().out
    assert "Nothing is known" in out and "v2 text" in out and "v3 text" in out
    assert "ada · user" in out and "ada · tool" in out and "ada · init" in out
    assert main(db, "core", "--agent", "ada", "--restore", "human", "2") == 0
    assert "holds version 2 again (saved as version 4" in capsys.readouterr().out
    assert main(db, "core", "--agent", "ada", "--restore", "human", "4") == 0  # a no-op
    assert main(db, "core", "--agent", "ada", "--restore", "human", "3") == 0  # undone
    with open_store(db) as store:
        assert store.get_block(store.get_agent("ada").id, "human").value == "v3 text"
    capsys.readouterr()
    assert main(db, "core", "--agent", "ada", "--restore", "human", "99") == 2
    assert "has 5 versions" in capsys.readouterr().err
    assert main(db, "core", "--agent", "ada", "--restore", "human", "x") == 2
    assert main(db, "core", "--agent", "ada", "--history", "nope") == 2
    assert "has no block 'nope'" in capsys.readouterr().err


def test_conversations_core_and_show_name_them_and_the_project(db, capsys, tmp_path,
                                                               monkeypatch):
    blog = tmp_path / "blog"
    (blog / ".git").mkdir(parents=True)
    (blog / "posts").mkdir()
    with open_store(db) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([
            text_response("A."), text_response("B.")]), lock_wait=None, project=str(blog))
        assert list(agent.step("Plan the Lisbon trip please"))[-1].completed
        agent.start_conversation()
        assert list(agent.step("Fix the blog theme"))[-1].completed
        store.set_conversation_title(agent.id, 2, "theme work")
        agent.close()
    capsys.readouterr()
    assert main(db, "conversations", "--agent", "ada") == 0
    out = capsys.readouterr().out
    assert "Plan the Lisbon trip please" in out and "theme work" in out and "2 *" in out
    assert main(db, "core", "--agent", "ada", "--project", str(blog / "posts")) == 0
    assert "project  " in (out := capsys.readouterr().out) and f"scope project {blog}" in out
    assert main(db, "agents", "show", "ada", "--project", str(blog)) == 0
    assert f"scope project {blog}" in capsys.readouterr().out
    assert main(db, "conversations", "--agent", "nobody") != 0
    huge = "9" * 30  # past any id a database holds: no conversation, not a traceback
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")  # refused before any call is made
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    assert main(db, "chat", "--agent", "ada", "--resume", huge, "-p", "hi", "--no-record") == 1
    assert f"There is no conversation {huge} of this agent" in capsys.readouterr().err
    for empty in ("", " "):  # a script's unset variable: not "the most recent"
        assert main(db, "chat", "--agent", "ada", "--resume", empty, "-p", "hi",
                    "--no-record") == 2
        assert capsys.readouterr().err == (
            "memgpt-lite: --resume needs a conversation id (`memgpt-lite conversations` lists "
            "them); leave it out to resume the most recent.\n")


def _write_project_block(db, root, text):
    with open_store(db) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([tool_response([(
            "core_memory_append", {"label": "project", "content": text})]),
            text_response("Noted.")]), lock_wait=None, project=str(root))
        assert list(agent.step("Remember the deploy rule"))[-1].completed
        agent.close()


def test_a_moved_project_folders_block_is_found_by_its_old_path(db, capsys, tmp_path):
    """The block stays under the root it was written in: the moved folder starts blank, and
    naming the old path (now gone) shows the block and its history again."""
    blog = tmp_path / "my blog"
    (blog / ".git").mkdir(parents=True)
    _write_project_block(db, blog, "Run hexo g before deploying.")
    blog.rename(tmp_path / "blog2")
    capsys.readouterr()
    assert main(db, "core", "--agent", "ada", "--project", str(tmp_path / "blog2")) == 0
    assert "hexo" not in capsys.readouterr().out
    assert main(db, "core", "--agent", "ada", "--project", str(blog)) == 0
    out = capsys.readouterr().out
    assert f"scope project {blog}" in out and "Run hexo g before deploying." in out
    assert main(db, "agents", "show", "ada", "--project", str(blog)) == 0
    assert "Run hexo g before deploying." in capsys.readouterr().out
    assert main(db, "core", "--agent", "ada", "--project", str(blog), "--history",
                "project") == 0
    assert "Run hexo g" in capsys.readouterr().out
    # A path no block was written for is still a mistake, said in one sentence.
    assert main(db, "core", "--agent", "ada", "--project", str(tmp_path / "nowhere")) == 2
    assert "does not exist" in capsys.readouterr().err


def test_doctor_names_a_project_block_whose_folder_is_gone(capsys, tmp_path):
    from memgpt_lite.engine import config

    here, gone = tmp_path / "here", tmp_path / "old name"
    for root in (here, gone):
        root.mkdir()
        _write_project_block(str(config.db_path()), root, f"Rules of {root.name}.")
    gone.rename(tmp_path / "new name")
    capsys.readouterr()
    assert cli.main(["doctor", "--offline"]) == 0
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if line.startswith("warn  project")]
    assert warned == [f"warn  project {gone} has a project block but its folder is gone (moved "
                      f"or renamed?): memgpt-lite core --project '{gone}' shows it"], out
    assert "problem(s) found" not in out  # a warning: nothing is broken


def test_a_conversation_with_a_file_first_is_named_by_your_words(db, capsys):
    """`cat notes.md | chat -p "Summarise this"`: the title is "Summarise this", not the
    attached file's tag."""
    with open_store(db) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([
            text_response("A.")]), lock_wait=None)
        notes = attachments.from_bytes("notes.md", b"# notes\nbuy milk\n").block()
        assert list(agent.step("Summarise this", attachments=[notes]))[-1].completed
        agent.close()
    capsys.readouterr()
    assert main(db, "conversations", "--agent", "ada") == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].endswith("  Summarise this")


def test_confirm_memory_is_a_setting(db, capsys):
    agent_with(db, "ada", None)
    assert main(db, "agents", "set", "ada", "confirm_memory=on") == 0
    with open_store(db) as store:
        assert store.get_agent("ada").settings["confirm_memory"] is True
    assert main(db, "agents", "set", "ada", "confirm_memory=perhaps") == 2
    assert "confirm_memory must be on or off" in capsys.readouterr().err


def test_sessions_and_replay_name_the_conversation(capsys, tmp_path):
    from memgpt_lite.engine import config, recording

    with open_store(config.db_path()) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([
            text_response("A."), text_response("B.")]), lock_wait=None, project=str(tmp_path))
        for step in (lambda: None, agent.start_conversation):
            step()
            recorder = recording.start_recording(agent)
            assert list(recording.recorded_step(agent, recorder, "hello"))[-1].completed
            recorder.close()
        agent.close()
    capsys.readouterr()
    assert cli.main(["sessions", "--agent", "ada"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:3]]
    assert sorted(row[1:3] for row in rows) == [["ada", "1"], ["ada", "2"]]  # id, agent, conv
    assert cli.main(["replay", recorder.path.as_posix(), "--strict"]) == 0
    out = capsys.readouterr().out
    assert "conversation 2" in out and f"project {tmp_path}" in out


def test_forget_previews_and_reaches_the_project_block_and_titles(db, capsys, tmp_path):
    blog = tmp_path / "blog"
    blog.mkdir()
    with open_store(db) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([
            tool_response([("core_memory_append", {"label": "project",
                                                   "content": "Deploy Rex with hexo g."})]),
            text_response("Noted.")]), lock_wait=None, project=str(blog))
        assert list(agent.step("a rule for this blog"))[-1].completed
        store.set_conversation_title(agent.id, 1, "Rex deploys")
        agent.close()
    capsys.readouterr()
    assert main(db, "forget", "Rex", "--agent", "ada", "--dry-run") == 0  # was a KeyError
    out = capsys.readouterr().out
    assert f"project memory 'project' of {blog} · remove line: Deploy Rex with hexo g." in out
    assert "conversation title #1 · delete: Rex deploys" in out
    assert main(db, "forget", "Rex", "--agent", "ada", "--yes") == 0
    assert "1 line removed from project memory" in capsys.readouterr().out
    with open_store(db) as store:
        assert "Rex" not in " ".join(b.value for b in store.project_blocks(str(blog)))
        assert store.conversations(store.get_agent("ada").id)[0].title == ""


def test_core_and_show_read_an_agent_whose_stored_window_leaves_no_room(db, capsys):
    """An older version stored `--context-window 100` (and max output tokens above the
    window); the chat opens such an agent with a warning, but `core` and `agents show`
    refused it: 'settings: max_output_tokens (2,048) and safety_margin (1,000) leave no
    room in context_window (100).' (exit 2)."""
    with open_store(db) as store:
        store.create_agent("old", {"context_window": 100}, default_blocks(5_000))
        store.create_agent("big", {"max_output_tokens": 100_000}, default_blocks(5_000))
    for name in ("old", "big"):
        assert main(db, "core", "--agent", name) == 0
        assert "persona" in capsys.readouterr().out
        assert main(db, "agents", "show", name) == 0
        assert "leave no room" not in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("label", [".hidden", "_x", "a b", ""])
def test_a_shared_label_follows_the_one_label_rule(db, label, capsys):
    """`--share .hidden` made a shared block that /memory calls no block label."""
    agent_with(db, "ada", None)
    for argv in (["agents", "create", "bob", "--share", label],
                 ["agents", "share", "ada", label]):
        assert main(db, *argv) == 2
        err = capsys.readouterr().err
        assert "is not a block label (letters, digits, _ . - up to 50, starting with a letter " \
            "or digit)" in " ".join(err.split())
    with open_store(db) as store:
        assert store.get_agent("bob") is None

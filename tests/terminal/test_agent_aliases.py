"""The names an agent had before `agents rename`: every command that names an agent takes
them (a line on stderr says which agent it is now), `chat` and `mcp` refuse them rather
than create a new, empty agent, and `agents create OLD` takes the name back; on SQLite and
on Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli

REPO = str(Path(__file__).resolve().parents[2])


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, monkeypatch):
    """The data dir's store for the CLI and `open_store()` alike: its SQLite file, or a
    Postgres database (MEMGPT_LITE_DATABASE_URL)."""
    if request.param == "postgres":
        monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", request.getfixturevalue("pg_url"))
    return request.param


def make(name: str, said: str = "I keep bees") -> None:
    with open_store() as store:
        agent = Agent.open(store, name, model_client=ScriptedModel([text_response("Noted.")]))
        list(agent.step(said))
        agent.close()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def notice(old: str, new: str) -> str:
    return f"memgpt-lite: agent {old!r} was renamed to {new!r}; using {new!r}.\n"


def test_every_command_that_names_an_agent_takes_its_old_names(backend, capsys, tmp_path):
    make("ada")
    assert run(capsys, "agents", "rename", "ada", "bea")[0] == 0
    assert run(capsys, "agents", "rename", "bea", "cy")[0] == 0  # a chain: ada -> bea -> cy
    export = tmp_path / "x.json"
    for old in ("ada", "bea"):
        for argv in (["core", "--agent", old], ["agents", "show", old],
                     ["conversations", "--agent", old], ["sessions", "--agent", old],
                     ["agents", "export", old, "-o", str(export)],
                     ["forget", "nothing-like-it", "--agent", old, "--dry-run"],
                     ["agents", "set", old, "confirm_memory=on"],
                     ["agents", "share", old, "human"], ["agents", "unshare", old, "human"]):
            code, out, err = run(capsys, *argv)
            assert code == 0, (argv, err)
            assert err == notice(old, "cy"), argv  # said once, whatever the command looks up
    assert json.loads(export.read_text())["agent"]["name"] == "cy"
    code, out, err = run(capsys, "agents", "show", "cy")
    assert code == 0 and not err and "confirm_memory" in out
    code, out, err = run(capsys, "agents", "rename", "ada", "dee")  # the old name renames it
    assert (code, err) == (0, notice("ada", "cy"))
    assert out == "Renamed agent 'cy' to 'dee' (commands that name 'cy' use 'dee' now).\n"
    assert run(capsys, "core", "--agent", "cy")[2] == notice("cy", "dee")


def test_renaming_back_and_deleting_leave_no_stale_name(backend, capsys):
    make("ada")
    run(capsys, "agents", "rename", "ada", "bea")
    run(capsys, "agents", "rename", "bea", "ada")  # back
    code, out, err = run(capsys, "core", "--agent", "ada")
    assert code == 0 and not err  # its own name again, no notice
    assert run(capsys, "core", "--agent", "bea")[2] == notice("bea", "ada")
    assert run(capsys, "agents", "delete", "bea", "--yes")[0] == 0
    code, out, err = run(capsys, "core", "--agent", "bea")
    assert code == 1 and err == "memgpt-lite: There is no agent named 'bea' (agents: none yet).\n"
    assert run(capsys, "core", "--agent", "ada")[0] == 1  # deleted with its old names


def test_chat_and_mcp_refuse_an_old_name_until_it_is_created_on_purpose(backend, capsys,
                                                                         monkeypatch):
    make("ada")
    run(capsys, "agents", "rename", "ada", "bea")
    with FakeAnthropicServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "fake")
        code, out, err = run(capsys, "chat", "--agent", "ada", "-p", "hello", "--no-record")
        assert code == 2 and not out
        assert err == ("memgpt-lite: Agent 'ada' was renamed to 'bea': run `memgpt-lite chat "
                       "--agent bea`, or `memgpt-lite agents create ada` first to start a new "
                       "agent named 'ada'.\n")
        assert not server.requests
        with open_store() as store:
            assert [a.name for a in store.list_agents()] == ["bea"]  # nothing created
        code, out, err = run(capsys, "agents", "create", "ada")
        assert code == 0 and out == ("Created agent 'ada'. (The name no longer leads to "
                                     "'bea', which had it before a rename.)\n")
        code, out, err = run(capsys, "chat", "--agent", "ada", "-p", "hello", "--no-record")
        assert code == 0, err
    assert run(capsys, "core", "--agent", "ada")[2] == ""  # the new agent's, no notice
    with open_store() as store:
        assert store.agent_stats(store.get_agent("bea").id)["turns"] == 1  # untouched
        assert store.agent_stats(store.get_agent("ada").id)["turns"] == 1


def test_mcp_refuses_an_old_name_in_one_sentence(backend, capsys):
    make("ada")
    run(capsys, "agents", "rename", "ada", "bea")
    code, out, err = run(capsys, "mcp", "--agent", "ada")
    assert code == 2 and not out
    assert err.startswith("memgpt-lite: Agent 'ada' was renamed to 'bea': run `memgpt-lite mcp "
                          "--agent bea`") and err.count("\n") == 1
    with open_store() as store:
        assert store.get_agent("ada") is None


def test_an_import_under_an_old_name_takes_it_back(backend, capsys, tmp_path):
    make("ada")
    export = tmp_path / "ada.json"
    run(capsys, "agents", "export", "ada", "-o", str(export))
    run(capsys, "agents", "rename", "ada", "bea")
    assert run(capsys, "agents", "import", str(export))[0] == 0  # named 'ada' in the export
    code, out, err = run(capsys, "core", "--agent", "ada")
    assert code == 0 and not err  # the imported agent, no notice
    assert run(capsys, "core", "--agent", "bea")[0] == 0


@pytest.mark.slow
def test_a_rename_waits_for_a_chat_in_another_process_then_refuses(tmp_path, capsys):
    """A chat holds its agent: renaming it under the chat would leave the chat writing to
    a name that is gone. The rename refuses in one sentence; after the chat the old name
    leads to the new one."""
    make("ada")
    with FakeAnthropicServer() as server:
        env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t",
               "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH"))
                                             if p)}
        chat = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--agent", "ada",
                                 "--no-record"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            chat.stdin.write("hello\n")
            chat.stdin.flush()
            assert chat.stdout.readline()  # its reply: the chat holds the agent now
            code, out, err = run(capsys, "agents", "rename", "ada", "bea")
            assert code != 0 and "ada" in err and err.count("\n") == 1, err
        finally:
            chat.stdin.close()
            chat.wait(60)
    assert chat.returncode == 0, chat.stderr.read()
    assert run(capsys, "agents", "rename", "ada", "bea")[0] == 0
    with open_store() as store:
        assert store.agent_stats(store.renamed_agent("ada").id)["turns"] == 2



"""The command line: help speed and lazy imports, exit codes and one-sentence errors, the
agent lifecycle (list/show/rename/delete/export/import), core, doctor and forget."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)
HEAVY = ("rich", "anthropic", "httpx2", "sqlite3", "memgpt_lite.engine.store",
         "memgpt_lite.engine.agent", "memgpt_lite.terminal.chat", "memgpt_lite.terminal.chat_main",
         "memgpt_lite.terminal.commands",
         "memgpt_lite.terminal.eval_commands", "memgpt_lite.terminal.render",
         "memgpt_lite.terminal.view", "memgpt_lite.terminal.user_input")


def make_agent(name: str = "default", *, recorded: bool = False) -> None:
    """An agent with turns, a tool call, an archival passage, a user edit and a summary."""
    from memgpt_lite.engine import recording

    script = [
        tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada."}),
                       ("archival_insert", {"content": "Ada's wifi password is tulip-42.",
                                            "tags": ["home"]})]),
        text_response("Noted, Ada."),
        text_response("Hexo is a static site generator."),
    ]
    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, name, model_client=ScriptedModel(script), clock=lambda: FIXED)
        recorder = None
        if recorded:
            recorder = recording.Recorder.for_agent(agent)
            recording.record_header(agent, recorder)
        for text in ("I'm Ada; my wifi password is tulip-42", "What is Hexo?"):
            steps = recording.recorded_step(agent, recorder, text) if recorder else agent.step(text)
            list(steps)
        if recorder:
            recorder.close()
        agent.edit_block("persona", "I am terse.")
        store.set_summary(agent.id, "Ada asked about Hexo.")


def snapshot(name: str) -> dict[str, list[tuple]]:
    """Every table's rows for one agent, without the row ids that an import renumbers."""
    db = sqlite3.connect(config.db_path())
    try:
        (agent_id,) = db.execute("SELECT id FROM agents WHERE name = ?", (name,)).fetchone()
        out: dict[str, list[tuple]] = {}
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
            "'CREATE VIRTUAL%' AND name NOT LIKE '%fts%' AND name NOT LIKE 'sqlite_%'")]
        for table in tables:
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            if table == "agents":
                where, params = "id = ?", (agent_id,)
            elif "agent_id" in cols:
                where, params = "agent_id = ?", (agent_id,)
            else:
                continue  # not per-agent (the migrations ledger)
            if table in ("tombstones", "agent_aliases"):
                continue  # change tracking and old names of this copy, not of the agent
            # Not part of the export: blocks.updated_at (re-stamped), the revision stamps
            # and the agent's uid (each copy counts its own changes and has its own uid).
            keep = [c for c in cols if c not in ("id", "agent_id", "rev", "uid")
                    and not (table == "blocks" and c == "updated_at")]
            out[table] = db.execute(f"SELECT {', '.join(keep)} FROM {table} WHERE {where} "
                                    f"ORDER BY id", params).fetchall()
        index = f"fts_messages_{agent_id}"
        out["messages_fts"] = db.execute(
            f"SELECT m.turn_id, m.role FROM {index} f JOIN messages m ON m.id = f.rowid "
            f"WHERE {index} MATCH 'tulip' ORDER BY m.id").fetchall()
        return out
    finally:
        db.close()


# --------------------------------------------------------------------------- help, errors


@pytest.mark.slow
def test_help_lists_the_commands_and_imports_nothing_heavy():
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memgpt_lite", "--help"],
        capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0
    for command in ("chat", "core", "agents", "doctor", "sessions", "replay", "demo", "eval",
                    "forget", "bench"):
        assert f"    {command} " in proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert not [m for m in HEAVY if m in imported], sorted(imported)
    print(f"--help answered in {elapsed:.3f}s (informative; includes interpreter start)")


def test_main_parses_without_loading_heavy_modules():
    before = set(sys.modules)
    parser = cli.build_parser()
    args = parser.parse_args(["chat", "--agent", "x", "--thinking", "--no-record"])
    assert (args.agent, args.thinking, args.no_record) == ("x", True, True)
    assert not [m for m in set(sys.modules) - before if m.split(".")[0] in ("rich", "anthropic")]


@pytest.mark.slow
def test_the_chat_draws_its_prompt_without_the_reply_markdown_and_imports_it_after_the_sdk():
    """rich.markdown (with markdown-it) is the chat terminal's largest import: it is not on
    the way to the first prompt; the SDK's thread imports it once the SDK is in."""
    code = ("import sys; from memgpt_lite.terminal import cli_parser, chat_main; "
            "from memgpt_lite.engine import model; "
            "print('rich.markdown' in sys.modules); seen = []; "
            "model.start_sdk_import(then=lambda: (seen.append('anthropic' in sys.modules), "
            "cli_parser._import_reply_rendering())); model._sdk_import[0].join(60); "
            "print(seen, 'rich.markdown' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["False", "[True] True"], out.stdout + out.stderr


def test_version_and_usage_errors(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("memgpt-lite 0.1.0")
    assert cli.main(["nonsense"]) == 2
    assert cli.main([]) == 2
    assert cli.main(["agents"]) == 0  # prints its help


def test_on_windows_every_command_says_in_one_sentence_that_it_needs_posix(capsys, monkeypatch):
    monkeypatch.setattr(cli.sys, "platform", "win32")  # there, importing fcntl fails
    assert cli.main(["chat"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: Windows is not supported yet")
    assert len(err.strip().splitlines()) == 1


def test_chat_without_a_key_says_how_to_set_it(capsys):
    assert cli.main(["chat"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: No Anthropic API key found: set ANTHROPIC_API_KEY")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_context_window_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    assert cli.main(["chat", "--context-window", "lots"]) == 2
    assert capsys.readouterr().err == ("memgpt-lite: --context-window must be a whole number, "
                                       "got 'lots'.\n")


def test_store_errors_are_one_sentence(capsys):
    config.data_dir().mkdir(parents=True)
    config.db_path().write_bytes(b"this is not a database" * 100)
    assert cli.main(["agents", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: ") and len(err.strip().splitlines()) == 1


def test_missing_agent(capsys):
    assert cli.main(["core", "--agent", "nobody"]) == 1
    assert capsys.readouterr().err == ("memgpt-lite: There is no agent named 'nobody' "
                                       "(agents: none yet).\n")


# --------------------------------------------------------------------------- agents


def test_agents_list_show_rename(capsys):
    make_agent()
    assert cli.main(["agents", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["name", "model", "turns", "messages", "passages", "last", "used"]
    assert out[1].split()[:5] == ["default", "claude-sonnet-5-5", "2", "6", "1"]
    assert cli.main(["agents", "show", "default"]) == 0
    out = capsys.readouterr().out
    assert "2 turns · 6 messages · 1 passages" in out
    assert "persona  11/5,000 chars · scope agent\nI am terse." in out
    assert "Ada asked about Hexo." in out
    assert cli.main(["agents", "rename", "default", "ada"]) == 0
    assert cli.main(["agents", "rename", "ada", "ada"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["core", "--agent", "ada"]) == 0
    assert capsys.readouterr().out.startswith(
        "persona  11/5,000 chars · scope agent\nI am terse.\n\nhuman  ")


def test_export_delete_import_round_trips_every_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-123456")
    make_agent(recorded=True)
    before = snapshot("default")
    assert before["messages"] and before["passages"] and before["block_history"]
    export = tmp_path / "ada.json"
    assert cli.main(["agents", "export", "default", str(export)]) == 0
    assert oct(export.stat().st_mode & 0o777) == "0o600"
    text = export.read_text()
    assert "sk-ant-test-key-123456" not in text
    assert json.loads(text)["version"]

    assert cli.main(["agents", "delete", "default"]) == 2  # not a TTY, no --yes
    assert "add --yes" in capsys.readouterr().err
    recordings = list(config.recordings_dir().rglob("*.jsonl"))
    assert len(recordings) == 1
    assert cli.main(["agents", "delete", "default", "--yes"]) == 0
    assert "removed 1 recording file(s), 0 base snapshot(s), the folder" in capsys.readouterr().out
    assert not recordings[0].exists()
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("default") is None
        assert store.db.connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 0

    assert cli.main(["agents", "import", str(export)]) == 0
    assert snapshot("default") == before
    assert cli.main(["agents", "import", str(export)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["agents", "import", str(export), "--name", "copy"]) == 0
    copy = snapshot("copy")
    assert copy["agents"][0][1:] == before["agents"][0][1:]  # all but the name
    assert {k: v for k, v in copy.items() if k != "agents"} == \
        {k: v for k, v in before.items() if k != "agents"}


def test_export_takes_its_file_as_FILE_or_output_and_defaults_to_stdout(tmp_path, capsys):
    make_agent()
    assert cli.main(["agents", "export", "default", "-o", str(tmp_path / "a.json")]) == 0
    assert cli.main(["agents", "export", "default", "--output", str(tmp_path / "b.json")]) == 0
    capsys.readouterr()
    assert cli.main(["agents", "export", "default"]) == 0
    docs = [json.loads(capsys.readouterr().out)]
    docs += [json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json")]
    for doc in docs:
        doc.pop("exported_at")
    assert docs[0] == docs[1] == docs[2] and docs[0]["messages"]
    assert cli.main(["agents", "export", "default", "x.json", "-o", "y.json"]) == 2
    assert "not both" in capsys.readouterr().err


def test_import_of_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli.main(["agents", "import", str(bad)]) == 1
    assert capsys.readouterr().err == f"memgpt-lite: {bad} is not a JSON export of an agent.\n"
    assert cli.main(["agents", "import", str(tmp_path / "missing.json")]) == 1
    assert "Cannot read" in capsys.readouterr().err
    bad.write_text('{"format": "something else"}')
    assert cli.main(["agents", "import", str(bad)]) == 1
    assert capsys.readouterr().err.startswith("memgpt-lite: The file is not a memgpt-lite")


def test_import_of_a_file_whose_agent_is_not_an_object(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"agent": ["not", "an", "object"]}')
    assert cli.main(["agents", "import", str(bad)]) == 1  # was an AttributeError traceback
    assert capsys.readouterr().err.startswith("memgpt-lite: The file is not a memgpt-lite")


def test_export_refuses_when_a_message_holds_the_api_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "tulip-42")  # the wifi password, as a "key"
    make_agent()
    assert cli.main(["agents", "export", "default", str(tmp_path / "x.json")]) == 1
    assert "contains the value of $ANTHROPIC_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------- forget, doctor


def test_forget_changes_exactly_the_previewed_units_and_scrubs_recordings(capsys):
    make_agent(recorded=True)
    (recording,) = config.recordings_dir().rglob("*.jsonl")
    assert "tulip-42" in recording.read_text()
    history = config.data_dir() / "chat_history"
    history.write_text("I'm Ada; my wifi password is tulip-42\n/core\nWhat is Hexo?\n"
                       "/search TULIP\n")
    assert cli.main(["forget", "tulip", "--dry-run"]) == 0
    preview = capsys.readouterr().out
    assert "message #1 · turn 1 · user · redact: I'm Ada; my wifi password is tulip-42" in preview
    assert "passage #1 · delete: Ada's wifi password is tulip-42. · home" in preview
    assert "input history · remove line: /search TULIP" in preview
    assert "tulip-42" in recording.read_text()  # a dry run changes nothing
    assert cli.main(["forget", "tulip", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(preview)  # the preview, then exactly that is done
    assert ("Forgot 'tulip' in agent 'default': 2 messages redacted in the queue, 1 passage "
            "deleted; 1 recording file scrubbed, 2 input history lines removed.") in out
    assert "tulip" not in recording.read_text().lower()
    assert history.read_text() == "/core\nWhat is Hexo?\n"
    for line in recording.read_text().splitlines():
        json.loads(line)
    with SQLiteStore(config.db_path()) as store:
        row = store.get_agent("default")
        assert store.search_messages(row.id, "tulip").total == 0
        assert store.search_passages(row.id, "tulip").total == 0
        assert [m.turn_id for m in store.context_messages(row.id)] == [1, 1, 1, 1, 2, 2]
    assert cli.main(["forget", "tulip", "--yes"]) == 0
    assert "Nothing matches 'tulip' in agent 'default'." in capsys.readouterr().out


def test_forget_json_and_flags(capsys):
    make_agent()
    assert cli.main(["forget", "--any", "hexo", "tulip-42", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] is None  # --json without --yes only previews
    assert doc["plan"]["mode"] == "any" and doc["plan"]["counts"]["messages"] == 4
    assert {u["place"] for u in doc["plan"]["units"]} == {"messages", "passages", "summary"}
    assert cli.main(["forget", "--regex", "hex[o]", "--json", "--yes"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["changed"] == {"messages redact": 2, "summary remove lines": 1}
    assert cli.main(["forget", "--regex", "(", "--yes"]) == 2
    assert "is not a valid regular expression" in capsys.readouterr().err
    assert cli.main(["forget", "--any", "--regex", "x", "--yes"]) == 2
    assert cli.main(["forget", "4111 1111 1111 1111", "--yes"]) == 0
    assert "Secrets are stored redacted" in capsys.readouterr().err


def test_doctor_on_fresh_and_broken_data_dirs(capsys, monkeypatch):
    assert cli.main(["doctor"]) == 1  # no key: not ready to chat, whatever else is fine
    out = capsys.readouterr().out
    assert "does not exist yet" in out and out.rstrip().endswith(
        "Not ready to chat: no API key or server is set (everything else looks fine; demo and "
        "replay work without one).")
    assert "warn  ANTHROPIC_API_KEY is not set" in out and "Everything looks fine" not in out
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert cli.main(["doctor", "--offline"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("Everything looks fine.")
    make_agent()
    code = cli.main(["doctor", "--offline"])
    out = capsys.readouterr().out
    assert "schema version" in out
    assert code == 0 and "integrity check and search index consistency" in out
    config.db_path().write_bytes(b"garbage" * 1000)
    for suffix in ("-wal", "-shm"):
        config.db_path().with_name(config.db_path().name + suffix).unlink(missing_ok=True)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  database" in out and "problem(s) found." in out


def test_doctor_repair_rebuilds_a_search_index_out_of_step(capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    make_agent()
    with SQLiteStore(config.db_path()) as store:
        agent_id = store.get_agent("default").id
        store.db.connection.execute(f"DELETE FROM fts_messages_{agent_id}_docsize WHERE id = "
                          "(SELECT min(id) FROM messages WHERE index_text != '')")
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "out of step" in out and "doctor --repair" in out
    assert cli.main(["doctor", "--repair", "--offline"]) == 0
    out = capsys.readouterr().out
    assert "rebuilt the search indexes" in out and "Everything looks fine." in out
    assert cli.main(["doctor", "--offline"]) == 0


def test_doctor_flags_an_unwritable_data_dir(capsys):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    config.data_dir().mkdir(parents=True)
    config.data_dir().chmod(0o500)
    try:
        assert cli.main(["doctor"]) == 1
        assert "is not writable" in capsys.readouterr().out
    finally:
        config.data_dir().chmod(0o700)


@pytest.mark.slow
def test_chat_flags_hold_for_one_run_unless_saved(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "PYTHONPATH": ""}

    def chat(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                               "--agent", "flags", *flags], input="/exit\n", text=True,
                              capture_output=True, env=env, cwd=tmp_path, timeout=60)

    done = chat("--model", "claude-haiku-5-5", "--context-window", "9000", "--max-tokens", "1500",
                "--save")
    assert done.returncode == 0, done.stderr
    with SQLiteStore(config.db_path()) as store:
        stored = config.own_settings(store.get_agent("flags").settings)
    assert stored == {"model": "claude-haiku-5-5", "context_window": 9000,
                      "max_output_tokens": 1500}
    refused = chat("--thinking", "--max-tokens", "1000")
    assert refused.returncode != 0 and "--max-tokens 2048" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert chat("-m", "opus", "--thinking").returncode == 0  # 1,500 stored: allowed
    with SQLiteStore(config.db_path()) as store:  # without --save: for that run only
        assert config.own_settings(store.get_agent("flags").settings) == stored
    assert chat("--thinking", "--save").returncode == 0
    with SQLiteStore(config.db_path()) as store:
        assert config.own_settings(store.get_agent("flags").settings)["thinking"] is True


@pytest.mark.slow
def test_a_bad_price_file_is_reported_before_any_model_call(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
           "MEMGPT_LITE_PRICES": str(tmp_path / "missing.json")}
    done = subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record"],
                          input="hello\n", text=True, capture_output=True, env=env, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("memgpt-lite: MEMGPT_LITE_PRICES=")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_delete_cut_off_leaves_no_recording_behind_under_a_name_a_new_agent_takes():
    """^C (or kill -9) after the agent's row went but before its files: its recordings
    stayed, listed under its name, and no command found them again."""
    from memgpt_lite.engine import recording

    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "ada", model_client=ScriptedModel([text_response("Hi.")]))
        with recording.Recorder.for_agent(agent) as recorder:
            recording.record_header(agent, recorder)
            list(recording.recorded_step(agent, recorder, "hello"))
        agent.close()
    assert len(recording.list_recordings()) == 1

    def cut_off(self):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SQLiteStore, "wipe_freed", cut_off)
        assert cli.main(["agents", "delete", "ada", "--yes"]) == 130
    cli.main(["agents", "delete", "ada", "--yes"])  # the same command again, if it is needed
    assert cli.main(["agents", "create", "ada"]) == 0
    assert recording.list_recordings() == []


def test_an_export_whose_agent_name_is_not_text_is_one_sentence(tmp_path, capsys):
    """It was a traceback (AttributeError) before the import's own check could name it."""
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "ada", model_client=ScriptedModel([])).close()
    assert cli.main(["agents", "export", "ada", "-o", str(tmp_path / "ada.json")]) == 0
    doc = json.loads((tmp_path / "ada.json").read_text())
    for bad in (123, ["ada"], {"n": 1}):
        doc["agent"]["name"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(doc))
        capsys.readouterr()
        assert cli.main(["agents", "import", str(tmp_path / "bad.json")]) == 1
        err = capsys.readouterr().err
        assert err == ("memgpt-lite: The agent export is damaged: agent.name is not text; "
                       "nothing was imported.\n")


@pytest.mark.slow
def test_a_new_agents_first_paste_fits_a_server_counting_more_than_the_guess(tmp_path):
    """At the default window nothing was counted at start: a first CJK paste went out at the
    cautious guess's size, which a server counting two UTF-8 bytes a token put over its
    32,000 maximum (refused, then retried). The first request is now sized by the API's
    count of the least request, one free call when the agent has learned nothing yet."""
    from memgpt_lite.lab.fake_server import Counting, FakeAnthropicServer

    paste = "记忆是我们的宝藏，我们要好好保存它。 The memory keeps what matters. 😀 " * 1_200
    with FakeAnthropicServer(counting=Counting(2, per_byte=True),
                             context_window=32_000) as server:
        repo = str(Path(__file__).resolve().parents[2])  # this checkout, from any folder
        env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t",
               "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH"))
                                             if p)}
        done = subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                               "--json", "-p", "-"], input=paste, text=True,
                              capture_output=True, env=env, cwd=tmp_path, timeout=120)
        counts = len(server.count_requests)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert not [e for e in events if e["kind"] == "prompt_too_long"], events
    usage = [e for e in events if e["kind"] == "usage"]
    assert usage and usage[0]["context_tokens"] <= usage[0]["budget"] == 28_952, usage
    assert counts == 1


def test_which_commands_finish_a_forget_cut_off_is_what_the_docs_say(capsys):
    """The docs said the next command, whatever it is, finishes a forget cut off, while
    `config`, `completion` and `models` never did: the docs now name them, and only them."""
    from memgpt_lite.engine.matching import Matcher
    from memgpt_lite.engine.store import open_store

    with open_store() as store:
        row = store.create_agent("a", {}, {"human": ("Code: tulip-42", 100)})
        store.add_forget_intent(row.id, row.uid, Matcher.build("tulip-42"))
    docs = " ".join((Path(__file__).parents[2] / "docs" / "forgetting.md").read_text().split())
    named = docs.split("next memgpt-lite command finishes it**")[1].split("## ")[0]
    assert set(re.findall(r"every command but (.+?), which never open", named)[0]
               .replace(" and ", ", ").replace("`", "").split(", ")) \
        == set(cli.KEEP_PENDING_FORGETS)
    for argv in (["models"], ["completion", "bash"], ["config", "path"]):
        assert cli.main(argv) == 0, argv
        assert "Finished a forget" not in capsys.readouterr().err, argv
    with open_store() as store:
        assert len(store.forget_intents()) == 1
    assert cli.main(["agents", "list"]) == 0
    assert "Finished a forget cut off on" in capsys.readouterr().err
    with open_store() as store:
        assert store.forget_intents() == []
        assert store.get_block(store.get_agent("a").id, "human").value == ""


def test_a_forget_written_down_whose_query_cannot_be_read_back_stops_no_command(capsys):
    """A pattern another Python (or memgpt-lite) version accepted, or a damaged row: every
    command, `doctor` included, died with a traceback before it started."""
    from memgpt_lite.engine.matching import Matcher
    from memgpt_lite.engine.store import open_store

    with open_store() as store:
        row = store.create_agent("a", {}, {"human": ("Code: tulip-42", 100)})
        store.add_forget_intent(row.id, row.uid, Matcher.build("tulip-42"))
        store.db.execute("UPDATE forget_intents SET spec = ?",
                         (json.dumps({"query": "(", "mode": "regex"}),))
    assert cli.main(["agents", "list"]) == 0
    err = capsys.readouterr().err
    assert "in agent 'a' cannot be finished: its query cannot be read back ('(' is not a " \
           "valid regular expression" in err and err.rstrip().endswith("run that forget again.")
    assert cli.main(["agents", "list"]) == 0
    assert capsys.readouterr().err == ""  # said once: it was crossed out

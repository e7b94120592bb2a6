"""The config file and the one order of settings: `config path|show|set|unset` write TOML
whole (keeping comments) and check values like every other entry; a flag beats the
environment, which beats the agent's own stored value, which beats the config file, which
beats the default; `agents show` and `config show` say where each value came from; `--help`
lists every environment variable of the registry; a flag holds for one run unless --save."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest

from memgpt_lite.engine import config, config_file
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.registry import SETTINGS
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli


def path():
    return config_file.config_path()


def test_set_writes_checked_toml_and_keeps_the_rest_of_the_file(capsys):
    assert cli.main(["config", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(path())
    path().parent.mkdir(parents=True)
    path().write_text("# my settings\nmodel = \"opus\"  # the big one\n\n[other]\nx = 1\n")
    assert cli.main(["config", "set", "model", "haiku"]) == 0
    assert cli.main(["config", "set", "context_window", "16,000"]) == 0
    assert cli.main(["config", "set", "embed_query_prefix", 'say "q": \\ ok']) == 0
    text = path().read_text()
    assert text.startswith("# my settings\nmodel = \"claude-haiku-5-5\"\n")
    assert "[other]\nx = 1" in text  # a table of someone else's is left where it was
    data = tomllib.loads(text)
    assert (data["context_window"], data["embed_query_prefix"]) == (16000, 'say "q": \\ ok')
    assert oct(path().stat().st_mode & 0o777) == "0o600"
    capsys.readouterr()
    for args, words in ((["context_window", "big"], "must be a whole number"),
                        (["thinking", "maybe"], "must be on or off"),
                        (["timeout", "99999"], "more than 0 and at most 3,600 seconds"),
                        (["max_output_tokens", "0"], "between 1 and")):
        assert cli.main(["config", "set", *args]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    assert cli.main(["config", "set", "modle", "x"]) == 2  # not a key: argparse names the keys
    assert tomllib.loads(path().read_text())["context_window"] == 16000  # nothing lost
    assert cli.main(["config", "unset", "context_window"]) == 0
    assert "context_window" not in tomllib.loads(path().read_text())
    assert cli.main(["config", "unset", "context_window"]) == 0
    assert "is not set" in capsys.readouterr().out


def test_a_bad_file_is_one_sentence_naming_it(capsys):
    path().parent.mkdir(parents=True)
    path().write_text("model = [1, 2\n")
    assert cli.main(["agents", "list"]) == 2
    err = capsys.readouterr().err
    assert f"The config file {path()} is not valid TOML" in err and len(err.splitlines()) == 1
    path().write_text("context_window = \"big\"\nmodle = \"haiku\"\n")
    assert cli.main(["agents", "create", "ada"]) == 2  # a new agent would take the file's
    err = capsys.readouterr().err
    assert err.endswith(f"context_window in {path()} must be a whole number, got 'big'; fix it "
                        "with `memgpt-lite config set context_window VALUE`, or `memgpt-lite "
                        "config unset context_window` for the default.\n"), err
    assert cli.main(["config", "set", "context_window", "20000"]) == 0  # fixable with set
    assert cli.main(["agents", "list"]) == 0
    err = capsys.readouterr().err
    assert "holds 'modle', not a setting (ignored" in err  # a typo is not silently dropped


def test_a_setting_only_a_variable_sets_is_not_called_no_setting(capsys):
    """`config show` lists `home`; in the file it was warned about as 'not a setting'."""
    path().parent.mkdir(parents=True)
    path().write_text('home = "/elsewhere"\nmodle = "haiku"\n')
    assert cli.main(["agents", "list"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "holds 'modle', not a setting (ignored" in err[0]
    assert err[1].endswith("holds 'home', which the config file cannot set (ignored; set "
                           "MEMGPT_LITE_HOME instead).")


def test_the_order_flag_env_stored_file_default(monkeypatch, capsys):
    assert cli.main(["config", "set", "model", "opus"]) == 0
    assert cli.main(["config", "set", "context_window", "20000"]) == 0
    assert cli.main(["config", "set", "max_output_tokens", "1500"]) == 0
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([]),
                   stored=config.stored_form({})).close()
    assert cli.main(["agents", "set", "a", "context_window=18000"]) == 0
    monkeypatch.setenv("MEMGPT_LITE_MAX_TOKENS", "1200")
    capsys.readouterr()
    assert cli.main(["agents", "show", "a"]) == 0
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in
            capsys.readouterr().out.splitlines() if line.split()[:1] and line.split()[0] in
            ("model", "context_window", "max_output_tokens", "thinking", "summary_model")}
    assert rows == {"model": "claude-opus-5-5 config file",
                    "summary_model": "claude-haiku-5-5 default",
                    "context_window": "18,000 stored",
                    "max_output_tokens": "1,200 env MEMGPT_LITE_MAX_TOKENS",
                    "thinking": "off default"}
    with SQLiteStore(config.db_path()) as store:
        row = store.get_agent("a")
        flagged, sources = config.resolve_settings(
            row.settings, {"max_output_tokens": (1100, "--max-tokens")})
    assert (flagged.max_output_tokens, sources["max_output_tokens"]) == (1100,
                                                                         "flag --max-tokens")
    assert cli.main(["agents", "list"]) == 0
    assert re.search(r"\ba\s+claude-opus-5-5\b", capsys.readouterr().out)  # what applies


def test_an_agent_from_before_keeps_its_values_and_takes_the_file_for_the_rest(capsys):
    with SQLiteStore(config.db_path()) as store:  # stored whole, as earlier versions did
        Agent.open(store, "old", model_client=ScriptedModel([]),
                   settings=config.Settings(context_window=12_000)).close()
    assert cli.main(["config", "set", "model", "haiku"]) == 0
    assert cli.main(["config", "set", "context_window", "30000"]) == 0
    with SQLiteStore(config.db_path()) as store:
        settings, sources = config.resolve_settings(store.get_agent("old").settings)
    assert (settings.model, sources["model"]) == ("claude-haiku-5-5", "config file")
    assert (settings.context_window, sources["context_window"]) == (12_000, "stored")


def test_config_show_names_every_setting_and_its_source(monkeypatch, capsys):
    assert cli.main(["config", "set", "embeddings_key", "secret-value"]) == 0
    assert cli.main(["config", "set", "timeout", "300"]) == 0
    monkeypatch.setenv("MEMGPT_LITE_EMBEDDER", "http")
    capsys.readouterr()
    assert cli.main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "secret-value" not in out and "(set, not shown)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert "config file" in rows["timeout"] and "300" in rows["timeout"]
    assert "env MEMGPT_LITE_EMBEDDER" in rows["embedder"]
    assert "default" in rows["model"]
    file_keys = [s.key for s in SETTINGS if s.file]
    assert all(key in rows for key in file_keys)


def test_config_show_names_every_setting_an_agent_stores_before_the_file(capsys):
    """The closing note lists the settings whose stored value beats the file: all of them."""
    assert cli.main(["config", "show"]) == 0
    note = " ".join(capsys.readouterr().out.split("comes before the config file")[1].split())
    named = re.findall(r"[a-z_]+", note.split(":")[0])
    assert set(named) - {"for", "and"} == {s.key for s in SETTINGS if s.agent}


def test_config_show_names_the_project_and_folders_that_apply(monkeypatch, capsys, tmp_path):
    """Unset, the project is still the working directory's root (its git top level), shown
    whole however long its path."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    monkeypatch.chdir(repo / "src")
    monkeypatch.delenv("MEMGPT_LITE_PROJECT", raising=False)
    assert cli.main(["config", "show"]) == 0
    out = capsys.readouterr().out
    # A long path wraps in its column, whole: its rest is on the lines below the row.
    flat = "".join(out.split())
    source = "default: from the working directory"
    assert source in out
    assert f"project{repo.resolve()}" in flat.replace("".join(source.split()), "")
    monkeypatch.setenv("MEMGPT_LITE_PROJECT", str(tmp_path))
    assert cli.main(["config", "show"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()
            if line.split()}
    assert "env MEMGPT_LITE_PROJECT" in rows["project"]


def test_config_show_takes_a_data_dir_whose_name_is_not_utf8(monkeypatch, capsys, tmp_path):
    """Every other command works with such a data dir; config show refused it as 'not
    printable text'. It is shown with the bytes as \\xNN."""
    monkeypatch.setenv("MEMGPT_LITE_HOME", os.fsdecode(os.fsencode(tmp_path) + b"/h\xff"))
    assert cli.main(["config", "show"]) == 0
    flat = "".join(capsys.readouterr().out.split())  # a long path wraps in its column
    assert f"home{tmp_path}/h\\xff" in flat.replace("envMEMGPT_LITE_HOME", "")


def test_process_wide_settings_in_the_file_reach_their_readers(monkeypatch):
    assert cli.main(["config", "set", "timeout", "45"]) == 0
    assert config.timeout_setting() == 45.0
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "30")
    assert config.timeout_setting() == 30.0  # the environment first
    assert config.timeout_setting("20") == 20.0  # the flag before both
    assert cli.main(["config", "set", "embedder", "http"]) == 0
    assert config_file.environment()["MEMGPT_LITE_EMBEDDER"] == "http"


def test_help_lists_every_environment_variable_of_the_registry():
    text = cli.build_parser().format_help()
    for setting in SETTINGS:
        if setting.env:
            assert setting.env in text, setting.env
    read = {m for p in ("engine", "terminal") for f in os.listdir(f"memgpt_lite/{p}")
            if f.endswith(".py")
            for m in re.findall(r"MEMGPT_LITE_[A-Z_]+", open(f"memgpt_lite/{p}/{f}").read())}
    assert read - {s.env for s in SETTINGS} <= {"MEMGPT_LITE_TEST_DATABASE_URL"}, read
    assert "flag > the environment > the agent's stored value > the config file > the default" \
        in " ".join(text.split())
    chat_help = " ".join(cli.build_parser()._subparsers._group_actions[0]
                         .choices["chat"].format_help().split())
    assert "--save stores them with the agent" in chat_help and "-m ID, --model ID" in chat_help


@pytest.mark.slow
def test_a_one_shot_flag_changes_one_run_unless_saved(tmp_path):
    with FakeAnthropicServer() as server:
        env = {**os.environ, "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "t"}

        def chat(*args):
            return subprocess.run([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                                   "--agent", "one", *args], capture_output=True, text=True,
                                  env=env, stdin=subprocess.DEVNULL, timeout=60)

        server.enqueue(text_response("hi"))
        assert chat("-p", "hello").returncode == 0
        server.enqueue(text_response("hi"))
        assert chat("-m", "haiku", "-p", "hello").returncode == 0
        assert server.requests[-1]["model"] == "claude-haiku-5-5"
        server.enqueue(text_response("hi"))
        assert chat("-p", "hello").returncode == 0
        assert server.requests[-1]["model"] == "claude-sonnet-5-5"  # the flag held once
        server.enqueue(text_response("hi"))
        assert chat("-m", "haiku", "--save", "-p", "hello").returncode == 0
        server.enqueue(text_response("hi"))
        assert chat("-p", "hello").returncode == 0
        assert server.requests[-1]["model"] == "claude-haiku-5-5"


def test_agents_set_says_what_it_set_as_agents_show_does(capsys):
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([]),
                   stored=config.stored_form({})).close()
    capsys.readouterr()
    assert cli.main(["agents", "set", "a", "confirm_memory=on", "thinking=off",
                     "context_window=18000"]) == 0
    assert capsys.readouterr().out.strip() == (
        "Agent 'a': confirm_memory=on, thinking=off, context_window=18,000.")


def test_agents_set_names_where_a_setting_it_did_not_touch_came_from(capsys):
    """A config file with thinking on and 1,000 max output tokens: `agents set a model=haiku`
    is refused, and the sentence says the two values are the file's, not the command's."""
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([]),
                   stored=config.stored_form({})).close()
    path().parent.mkdir(parents=True)
    path().write_text("thinking = true\nmax_output_tokens = 1000\n")
    assert cli.main(["agents", "set", "a", "model=haiku"]) == 2
    assert capsys.readouterr().err.strip() == (
        "memgpt-lite: thinking=on (config file) needs max_output_tokens above 1,024; it is "
        "1,000 (config file).")
    assert cli.main(["agents", "set", "a", "max_output_tokens=900"]) == 2
    assert "it is 900 (given here)." in capsys.readouterr().err


def test_agents_set_names_a_window_from_the_config_file_as_the_files(capsys):
    """It said "the agent's stored context window (set it with --context-window) 5,000"."""
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([]),
                   stored=config.stored_form({})).close()
    path().parent.mkdir(parents=True)
    path().write_text("context_window = 5000\n")
    assert cli.main(["agents", "set", "a", "model=haiku"]) == 2
    assert capsys.readouterr().err.startswith(
        "memgpt-lite: context_window in the config file 5,000 is too small")


def test_config_set_warns_of_a_model_it_does_not_know_as_agents_set_does(capsys):
    assert cli.main(["config", "set", "model", "sonet"]) == 0
    err = capsys.readouterr().err
    assert "warning: 'sonet' is not a model memgpt-lite knows" in err
    assert cli.main(["config", "set", "summary_model", "haiku"]) == 0
    assert capsys.readouterr().err == ""


def test_agents_set_notes_a_variable_that_comes_first_as_config_set_does(monkeypatch, capsys):
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([]),
                   stored=config.stored_form({})).close()
    monkeypatch.setenv("MEMGPT_LITE_MODEL", "opus")
    assert cli.main(["agents", "set", "a", "model=haiku", "thinking=off"]) == 0
    assert capsys.readouterr().err == (
        "note: MEMGPT_LITE_MODEL is set in this environment and comes first.\n")


@pytest.mark.parametrize("lines, args, words", [
    ("", ["context_window", "5000"], "context_window 5,000 is too small"),
    ("", ["max_output_tokens", "99999"], "max_output_tokens 99,999 is more than"),
    ("max_output_tokens = 1000\n", ["thinking", "on"],
     "thinking=on (given here) needs max_output_tokens above 1,024; it is 1,000 (in the "
     "config file)."),
    ("context_window = 9000\n", ["max_output_tokens", "6000"],
     "context_window in the config file 9,000 is too small"),
    ("max_output_tokens = 40000\ncontext_window = 50000\n", ["unset", "context_window"],
     "40,000 leaves too little of the 32,000-token context window"),
])
def test_set_refuses_settings_the_next_chat_refuses(lines, args, words, capsys):
    """`config set context_window 5000` was written; then every chat said the config
    file's window was too small."""
    path().parent.mkdir(parents=True)
    path().write_text("# mine\n" + lines)
    before = path().read_bytes()
    command = ["config", *args] if args[0] == "unset" else ["config", "set", *args]
    assert cli.main(command) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert path().read_bytes() == before


@pytest.mark.parametrize("key, text, words", [
    ("database_url", "mysql://u@h/db", "database_url: mysql:// databases are not supported"),
    ("database_url", "sqlite:///", "/ is a directory, not a memgpt-lite database"),
    ("database_url", "sqlite://memory.db", "names no file: a SQLite URL has three slashes"),
    ("database_url", "{tmp}", "is a directory, not a memgpt-lite database"),
    ("database_url", "{tmp}/notes.txt", "notes.txt is not a SQLite database"),
    ("database_url", "{tmp}/foreign.db", "foreign.db is a SQLite database from another program"),
    ("database_url", "{tmp}/newer.db", "newer.db was written by a newer memgpt-lite"),
    ("prices", "{tmp}/missing.json", "is not a readable JSON price table"),
    ("prices", "{tmp}/notes.txt", "is not a readable JSON price table"),
    ("embedder", "onnx:{tmp}/typo", "There is no folder"),
    ("embedder", "onnx:{tmp}", "holds no tokenizer.json"),
])
def test_set_refuses_what_the_next_command_would_refuse(key, text, words, tmp_path, capsys):
    """`config set database_url mysql://...` was written, and every command after it
    refused the file; so were a price table or a model folder that is not there."""
    import sqlite3

    (tmp_path / "notes.txt").write_text("not a database, not JSON\n")
    with sqlite3.connect(tmp_path / "foreign.db") as foreign:
        foreign.execute("CREATE TABLE photos (x)")
    with sqlite3.connect(tmp_path / "newer.db") as newer:
        newer.execute("CREATE TABLE schema_migrations (name TEXT)")
        newer.execute("INSERT INTO schema_migrations VALUES ('from_the_future')")
    path().parent.mkdir(parents=True)
    path().write_text("# mine\nmodel = \"haiku\"\n")
    before = path().read_bytes()
    assert cli.main(["config", "set", key, text.format(tmp=tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert path().read_bytes() == before


def test_a_relative_path_is_written_as_the_folder_it_was_set_in(tmp_path, monkeypatch):
    """The file applies in every folder: `prices.json` set in one folder named another
    file (or none) in the next."""
    (tmp_path / "prices.json").write_text('{"m": [1, 2]}')
    monkeypatch.chdir(tmp_path)
    assert cli.main(["config", "set", "prices", "prices.json"]) == 0
    assert cli.main(["config", "set", "database_url", "mem.db"]) == 0
    monkeypatch.chdir("/")
    assert config_file.load().values["prices"] == str(tmp_path / "prices.json")
    assert config_file.load().values["database_url"] == str(tmp_path / "mem.db")


def test_a_prefix_keeps_its_space(capsys):
    """`config set embed_query_prefix "query: "` wrote "query:": e5 models then embedded
    'query:text', not the 'query: text' they were trained on (the variable kept it)."""
    from memgpt_lite.engine.embeddings import EmbeddingConfig

    assert cli.main(["config", "set", "embed_query_prefix", "query: "]) == 0
    assert cli.main(["config", "set", "embed_passage_prefix", "passage: "]) == 0
    assert cli.main(["config", "set", "embeddings_model", "  e5  "]) == 0  # names: trimmed
    data = tomllib.loads(path().read_text())
    assert (data["embed_query_prefix"], data["embed_passage_prefix"]) == ("query: ", "passage: ")
    assert data["embeddings_model"] == "e5"
    found = EmbeddingConfig.from_env()
    assert (found.query_prefix, found.passage_prefix) == ("query: ", "passage: ")


def test_a_config_path_that_is_not_utf8_is_printed_apart_from_its_neighbours(tmp_path,
                                                                            monkeypatch, capsys):
    """`config path` printed `c\\xff.toml` as `c�.toml`: a name no file has, the same for
    `c\\xfe.toml`."""
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/c\xff.toml")
    monkeypatch.setenv("MEMGPT_LITE_CONFIG", odd)
    assert cli.main(["config", "path"]) == 0
    assert capsys.readouterr().out == f"{tmp_path}/c\\xff.toml\n"
    assert cli.main(["config", "set", "model", "haiku"]) == 0
    assert f"in {tmp_path}/c\\xff.toml." in capsys.readouterr().out
    assert os.path.exists(os.fsencode(tmp_path) + b"/c\xff.toml")


def test_a_refused_key_is_not_echoed(capsys):
    """`config set embeddings_key` with a pasted control character printed the key back."""
    assert cli.main(["config", "set", "embeddings_key", "sk-secret-123\x01"]) == 2
    err = capsys.readouterr().err
    assert err == "memgpt-lite: embeddings_key must be printable text.\n"
    path().parent.mkdir(parents=True, exist_ok=True)
    path().write_text("embeddings_key = 12345\n")
    assert cli.main(["config", "show"]) == 0  # flagged, never shown
    out, err = capsys.readouterr()
    assert "12345" not in out + err and "embeddings_key in" in err


def test_a_setting_no_agent_reads_is_set_without_counting_the_window(monkeypatch, capsys):
    """Every `config set` checked the window, so with a key set and a window near its
    minimum in the file, `config set timeout 30` asked the API to count tokens."""
    from memgpt_lite.terminal import agent_checks

    path().parent.mkdir(parents=True)
    path().write_text("context_window = 9000\n")
    monkeypatch.setattr(agent_checks, "check_window",
                        lambda *a, **k: pytest.fail("the window was checked"))
    assert cli.main(["config", "set", "timeout", "30"]) == 0
    assert cli.main(["config", "unset", "timeout"]) == 0


def test_set_refuses_what_an_existing_agent_s_next_chat_refuses(capsys):
    """An agent with 8,000 max output tokens of its own: `config set context_window 10000`
    was written, and that agent's every chat then refused the config file's window."""
    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "a", model_client=ScriptedModel([text_response("ok")])).close()
        Agent.open(store, "big", model_client=ScriptedModel([text_response("ok")])).close()
    assert cli.main(["agents", "set", "a", "max_output_tokens=8000"]) == 0
    assert cli.main(["agents", "set", "big", "model=opus", "context_window=100000"]) == 0
    capsys.readouterr()
    assert cli.main(["config", "set", "context_window", "10000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: For agent 'a': context_window 10,000 is too small"), err
    assert not path().exists() or "context_window" not in path().read_text()
    assert cli.main(["config", "set", "context_window", "100000"]) == 0
    assert cli.main(["config", "set", "max_output_tokens", "40000"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "For agent 'big': max_output_tokens 40,000 is more than claude-opus-5-5 writes in one "
        "reply; use at most 32,000.")
    assert "max_output_tokens" not in path().read_text()
    assert cli.main(["config", "set", "max_output_tokens", "30000"]) == 0  # fits them all


def test_set_makes_no_data_dir():
    assert cli.main(["config", "set", "context_window", "20000"]) == 0
    assert not config.data_dir().exists()


def test_a_bad_value_in_the_file_stops_only_the_commands_that_read_it(capsys, monkeypatch):
    path().parent.mkdir(parents=True)
    path().write_text('embeddings_url = "ftp://x"\ncontext_window = "lots"\nmodel = "haiku"\n')
    fix = "fix it with `memgpt-lite config set embeddings_url VALUE`"
    assert cli.main(["agents", "list"]) == 0  # reads neither
    assert cli.main(["config", "show"]) == 0  # flags both, as written, and says why
    out, err = capsys.readouterr()
    assert re.search(r"embeddings_url\s+'ftp://x'\s+config file: BAD VALUE", out), out
    assert re.search(r"model\s+claude-haiku-5-5\s+config file", out)  # the good one still used
    assert fix in err and "context_window in" in err
    assert cli.main(["doctor", "--offline"]) == 1  # counted among the problems
    out = capsys.readouterr().out
    assert out.count("FAIL") == 2 and fix in out, out
    monkeypatch.setenv("MEMGPT_LITE_EMBEDDER", "http")  # the one reader of embeddings_url
    monkeypatch.setenv("MEMGPT_LITE_EMBEDDINGS_MODEL", "m")
    assert cli.main(["index"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fix in err, err
    monkeypatch.setenv("MEMGPT_LITE_EMBEDDINGS_URL", "http://127.0.0.1:9/v1")  # env beats it
    monkeypatch.setenv("MEMGPT_LITE_CONTEXT_WINDOW", "20000")
    assert cli.main(["agents", "create", "ada"]) == 0
    assert path().read_text().startswith('embeddings_url = "ftp://x"')  # nothing rewritten


def test_a_sqlite_url_is_percent_decoded(tmp_path, capsys):
    """`--db sqlite:///…/my%20notes.db` made a file named `my%20notes.db`: a URL's path
    is percent-decoded, a plain path is not."""
    url = f"sqlite://{tmp_path}/my%20notes.db"
    assert cli.main(["--db", url, "agents", "create", "work"]) == 0
    assert (tmp_path / "my notes.db").is_file()
    assert not (tmp_path / "my%20notes.db").exists()
    assert cli.main(["--db", str(tmp_path / "my%20notes.db"), "agents", "create", "x"]) == 0
    assert (tmp_path / "my%20notes.db").is_file()
    capsys.readouterr()

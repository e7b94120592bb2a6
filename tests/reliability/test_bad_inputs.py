"""Every bad input is one sentence and a non-zero exit, never a traceback: numbers no database
column holds, nesting deeper than Python's stack, a base URL that is not one, prices that are
not prices, eval reports and dataset files of the wrong shape. Each command runs in-process
through the real parser (cli.main)."""

from __future__ import annotations

import json
import sys

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store import transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response
from memgpt_lite.terminal import cli


def one_sentence(capsys, argv: list[str], code: int | None = None) -> str:
    """Run a command that must fail (exit status `code`, or any but 0): the one line it
    printed (on stderr; replay and eval print their reports, errors included, on stdout)."""
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert got != 0 and (code is None or got == code), (got, err)
    assert "Traceback" not in out + err
    said = " ".join((err if argv[0] not in ("replay", "eval") else out + err).split())
    assert said.startswith("memgpt-lite: ") and said.count("memgpt-lite: ") == 1, said
    assert said.count(". ") == 0, said  # one sentence (wrapped or not)
    return said


@pytest.fixture
def export(tmp_path) -> dict:
    from memgpt_lite.engine.agent import Agent

    with SQLiteStore(config.db_path()) as store:
        Agent.open(store, "src", model_client=ScriptedModel([text_response("ok")])).close()
        return transfer.export_agent(store, "src")


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("limit", [10**30, 2**63, -(2**70), 10_000_001])
def test_an_import_with_a_block_limit_no_column_holds_is_refused(tmp_path, capsys, export,
                                                                 limit):
    export["blocks"][0]["limit"] = limit
    path = write(tmp_path, "big.json", json.dumps(export))
    line = one_sentence(capsys, ["agents", "import", str(path), "--name", "big"], 1)
    assert "blocks[0]" in line and "nothing was imported" in line
    with SQLiteStore(config.db_path()) as store:
        assert store.get_agent("big") is None


@pytest.mark.parametrize("field", ["limit", "context_window", "turn_id"])
def test_an_import_holding_a_5000_digit_number_is_refused(tmp_path, capsys, export, field):
    export["messages"] = [{"turn_id": 1, "role": "user", "content": [{"type": "text",
                           "text": "hi"}], "created_at": export["exported_at"],
                           "in_context": False}]
    text = json.dumps(export).replace(
        {"limit": f'"limit": {export["blocks"][0]["limit"]}',
         "context_window": '"context_window": 32000',
         "turn_id": '"turn_id": 1'}[field], f'"{field}": ' + "9" * 5000, 1)
    path = write(tmp_path, "digits.json", text)
    line = one_sentence(capsys, ["agents", "import", str(path), "--name", "digits"])
    assert "is not a JSON export of an agent" in line


def test_an_import_nested_too_deeply_is_refused(tmp_path, capsys, export):
    export["agent"]["state"] = {"x": "DEEP"}
    path = write(tmp_path, "deep.json",
                 json.dumps(export).replace('"DEEP"', "[" * 100_000 + "]" * 100_000))
    assert "is not a JSON export" in one_sentence(capsys, ["agents", "import", str(path)])


def test_a_recording_line_nested_too_deeply_is_refused(tmp_path, capsys):
    header = {"v": 2, "type": "header", "agent": "r", "settings": {}, "model": "m"}
    path = write(tmp_path, "deep.jsonl", json.dumps(header) + "\n"
                 + '{"v": 2, "type": "user", "text": "hi", "x": ' + "[" * 100_000
                 + "]" * 100_000 + "}\n")
    line = one_sentence(capsys, ["replay", str(path)])
    assert "line 2 is nested too deeply to read" in line


def test_a_recording_whose_header_block_is_over_its_limit_is_refused(tmp_path, capsys):
    header = {"v": 2, "type": "header", "agent": "r", "settings": {"block_limit": 100},
              "model": "m", "blocks": {"persona": "x" * 5_000}}
    path = write(tmp_path, "big.jsonl", json.dumps(header) + "\n"
                 + json.dumps({"v": 2, "type": "user", "text": "hi"}) + "\n")
    line = one_sentence(capsys, ["replay", str(path)])
    assert "line 1 cannot be used: blocks.persona holds 5,000 characters, over the block " \
           "limit of 100" in line


def test_a_scenario_nested_too_deeply_is_refused(tmp_path, capsys):
    path = write(tmp_path, "deep.toml", 'name = "x"\nv = ' + "[" * 5_000 + "]" * 5_000 + "\n")
    line = one_sentence(capsys, ["eval", str(path), "--replay", str(path)])
    assert "is nested too deeply to be a scenario" in line


BAD_URLS = ["http://[::1", "ftp://example.com", "localhost:8000", "http://", "http://a b",
            "http://h:99999", "http://h:port"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_base_url_is_one_sentence_in_chat(capsys, monkeypatch, url):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))  # noqa: SIM115 - closed by pytest
    line = one_sentence(capsys, ["chat", "--no-record", "-p", "hi"], 2)
    assert "ANTHROPIC_BASE_URL must be an http:// or https:// URL" in line
    assert not config.db_path().exists()  # refused before anything was written


@pytest.mark.parametrize("url", BAD_URLS[:3])
def test_doctor_fails_a_malformed_base_url_instead_of_calling_it_ok(capsys, monkeypatch, url):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    assert cli.main(["doctor"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert f"ok    ANTHROPIC_BASE_URL is {url}" not in out
    assert "FAIL  ANTHROPIC_BASE_URL must be an http:// or https:// URL" in out


def test_well_formed_base_urls_are_accepted():
    for url in ("http://127.0.0.1:8765", "http://[::1]:8080", "https://api.example.com/v1"):
        assert AnthropicClient(base_url=url, api_key="test").host


@pytest.mark.parametrize("table", ['{"m": [-1, 15]}', '{"m": [3, Infinity]}', '{"m": [NaN, 1]}',
                                   '{"m": [1e400, 1]}', '{"m": [3, 1e9]}'])
def test_prices_that_are_not_prices_are_refused(tmp_path, capsys, monkeypatch, table):
    monkeypatch.setenv("MEMGPT_LITE_PRICES", str(write(tmp_path, "prices.json", table)))
    line = one_sentence(capsys, ["models"], 2)
    assert "the prices of 'm' must be two numbers of dollars per million tokens" in line


def test_a_price_table_nested_too_deeply_is_refused(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "prices.json", "[" * 100_000 + "]" * 100_000)
    monkeypatch.setenv("MEMGPT_LITE_PRICES", str(path))
    assert "is nested too deeply" in one_sentence(capsys, ["models"], 2)


# --------------------------------------------------------------------------- engine-owned fields


def chatted_export() -> dict:
    from memgpt_lite.engine.agent import Agent

    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, "src", model_client=ScriptedModel(
            [text_response(f"reply {i}") for i in range(3)]))
        for i in range(3):
            assert list(agent.step(f"message {i}"))[-1].completed
        agent.close()
        return transfer.export_agent(store, "src")


def test_an_import_drops_the_cache_breakpoints_the_engine_sets_itself(tmp_path, capsys):
    """Queue messages carrying cache_control passed validation, then every request was a
    400 (more than four breakpoints with the engine's own), and /pop or /retry could not
    help. The import drops them: the imported agent's next request is valid."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    doc = chatted_export()
    for m in doc["messages"]:
        for block in m["content"]:
            block["cache_control"] = {"type": "ephemeral"}
    path = write(tmp_path, "cached.json", json.dumps(doc))
    assert cli.main(["agents", "import", str(path), "--name", "cached"]) == 0
    with SQLiteStore(config.db_path()) as store, FakeAnthropicServer() as server:
        row = store.get_agent("cached")
        assert "cache_control" not in json.dumps([m.content for m in store.all_messages(row.id)])
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(store, "cached", model_client=client)
        assert list(agent.step("still there?"))[-1].completed
        agent.close()


def test_doctor_finds_an_agent_whose_next_request_the_api_refuses(capsys, monkeypatch):
    from memgpt_lite.engine.records import Message

    chatted_export()
    with SQLiteStore(config.db_path()) as store:
        row = store.get_agent("src")
        late = store.max_turn_id(row.id) + 1
        marked = {"type": "ephemeral"}
        store.add_messages(row.id, [m for i in range(3) for m in (
            Message("user", [{"type": "text", "text": f"q{i}", "cache_control": marked}],
                    late + i, in_context=True),
            Message("assistant", [{"type": "text", "text": f"a{i}"}], late + i,
                    in_context=True))])
    assert cli.main(["doctor", "--offline"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  database: agent 'src':" in out and "cache_control" in out


def _damaged(report: dict, how: str) -> dict | list | str:
    """`report` (one run's JSON) damaged as a hand edit or a cut-off write leaves it."""
    bad = json.loads(json.dumps(report))
    if how == "runs not a list":
        return {"runs": "x"}
    if how == "checks null":
        bad["checks"] = None
    elif how == "a check is a number":
        bad["checks"][0] = 7
    elif how == "a check without a name":
        bad["checks"][0]["name"] = None
    elif how == "passed is a word":
        bad["checks"][0]["passed"] = "yes"
    elif how == "scenario is a list":
        bad["scenario"] = ["x"]
    elif how == "run count missing":
        del bad["failed"]
    elif how == "a total is a word":
        bad["totals"]["input_tokens"] = "many"
    elif how == "totals a list":
        bad["totals"] = [1]
    elif how == "nested too deeply":
        return "[" * 100_000
    return bad


@pytest.mark.parametrize("how", ["runs not a list", "checks null", "a check is a number",
                                 "a check without a name", "passed is a word",
                                 "scenario is a list", "run count missing",
                                 "a total is a word", "totals a list", "nested too deeply"])
def test_eval_compare_of_a_damaged_report_is_one_sentence(tmp_path, capsys, how):
    from memgpt_lite.lab import scenarios

    scenario = next(s for s in scenarios.bundled() if s.name == "remember-across-restart")
    report = scenarios.run_scenario(scenario, ScriptedModel([text_response("ok")] * 4))
    good = write(tmp_path, "a.json", json.dumps(report))
    damaged = _damaged(report, how)
    bad = write(tmp_path, "b.json", damaged if isinstance(damaged, str) else json.dumps(damaged))
    assert cli.main(["eval", "--compare", str(good), str(good)]) == 0
    capsys.readouterr()
    line = one_sentence(capsys, ["eval", "--compare", str(good), str(bad)], 2)
    assert str(bad) in line and "eval report" in line


LOCOMO_SAMPLE = {"sample_id": "s1", "qa": [{"question": "Where did Ana go?", "answer": "Porto",
                                             "evidence": ["D1:1"], "category": 4}],
                 "conversation": {"speaker_a": "Ana", "speaker_b": "Ben",
                                  "session_1_date_time": "1:56 pm on 8 May, 2023",
                                  "session_1": [{"speaker": "Ana", "dia_id": "D1:1",
                                                 "text": "I went to Porto."}]}}


@pytest.mark.parametrize("damage", [{"conversation": None}, {"conversation": [1]},
                                    {"qa": None}, {"qa": [5]}, {"qa": "abc"},
                                    {"session_1": [5]}, "deep", "folder"])
def test_eval_locomo_of_a_damaged_file_is_one_sentence(tmp_path, capsys, damage):
    sample = json.loads(json.dumps(LOCOMO_SAMPLE))
    if isinstance(damage, dict) and "session_1" in damage:
        sample["conversation"].update(damage)
    elif isinstance(damage, dict):
        sample.update(damage)
    path = write(tmp_path, "locomo.json", "[" * 100_000 if damage == "deep" else
                 json.dumps([sample]))
    path = tmp_path if damage == "folder" else path
    assert cli.main(["eval", "locomo", str(write(tmp_path, "ok.json", json.dumps(
        [LOCOMO_SAMPLE]))), "--retrieval-only"]) == 0
    capsys.readouterr()
    line = one_sentence(capsys, ["eval", "locomo", str(path), "--retrieval-only"], 2)
    assert str(path) in line


@pytest.mark.parametrize("example", [
    {"ordered_kv_records": None, "key": "a"}, {"ordered_kv_records": "ab", "key": "a"},
    {"ordered_kv_records": [["a", "b", "x"]], "key": "a"},
    {"ordered_kv_records": [["a", "b"]], "key": ["a"]},
    {"ordered_kv_records": [["a", "b"]], "key": "a", "nesting_level": "deep"},
    {"ordered_kv_records": [["a", "b"]], "key": "a", "nesting_level": 1e400},
    "deep", "folder"])
def test_eval_nkv_of_a_damaged_file_is_one_sentence(tmp_path, capsys, monkeypatch, example):
    # Loading comes before any model call, so no server is needed: the key only gets past
    # the check that a live eval has somewhere to send its requests.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    text = "[" * 100_000 if example == "deep" else json.dumps(example)
    path = tmp_path if example == "folder" else write(tmp_path, "kv.jsonl", text)
    line = one_sentence(capsys, ["eval", "nkv", str(path), "--model", "sonnet"], 2)
    assert str(path) in line


@pytest.mark.parametrize("text", ["", "   ", "-"])
def test_an_empty_one_shot_message_is_one_sentence_and_creates_nothing(capsys, monkeypatch,
                                                                       text):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))  # noqa: SIM115 - closed by pytest
    line = one_sentence(capsys, ["chat", "--no-record", "-p", text], 2)
    assert line == "memgpt-lite: -p needs a message (or - to read it from stdin)."
    assert not config.db_path().exists()  # no agent was created and dropped for it


def test_eval_compare_reads_a_report_an_editor_saved_with_a_byte_order_mark(tmp_path, capsys):
    """It said the report "is not a JSON eval report"."""
    from memgpt_lite.lab import scenarios

    scenario = next(s for s in scenarios.bundled() if s.name == "remember-across-restart")
    report = scenarios.run_scenario(scenario, ScriptedModel([text_response("ok")] * 4))
    good = write(tmp_path, "a.json", json.dumps(report))
    marked = tmp_path / "b.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(report).encode())
    assert cli.main(["eval", "--compare", str(good), str(marked)]) == 0

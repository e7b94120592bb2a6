"""The terminal's conventions and glitches, as transcripts and real subprocesses: what goes
to stdout and stderr, one-shot and --json, exit statuses, help and completion, settings,
models, each event shown once, one context number, every paid call counted, stored text shown
as text, input that is not UTF-8, files replaced whole, a closed pipe, and doctor."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from rich.console import Console

from memgpt_lite.engine import config, recording
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.events import ModelCallStart, ResponseEvent, TextDelta, TurnEndEvent
from memgpt_lite.engine.records import ModelResponse, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_server import FakeAnthropicServer, overloaded, unauthorized
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli
from memgpt_lite.terminal.chat import ChatSession
from memgpt_lite.terminal.render import make_console, visible
from memgpt_lite.terminal.replay_view import ReplayView
from memgpt_lite.terminal.view import ChatView

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)


def run_cli(*args: str, input: str | bytes | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], input=input,
                          capture_output=True, env={**os.environ, **(env or {})},
                          timeout=timeout, text=not isinstance(input, bytes))


@pytest.fixture
def server():
    with FakeAnthropicServer() as srv:
        yield srv


def server_env(server) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "test"}


class Chat:
    """A ChatSession wired like `run_chat`: the status line's context is /context's."""

    def __init__(self, store, script, **view):
        self.model = ScriptedModel(script)
        self.agent = Agent.open(store, model_client=self.model, summary_client=self.model,
                                clock=lambda: FIXED)
        self.buf = io.StringIO()
        self.console = Console(file=self.buf, width=100, color_system=None)
        report = self.agent.context_report
        self.view = ChatView(self.console, live=False, markdown=True,
                             context_of=lambda: (report().used_tokens, report().budget), **view)
        self.session = ChatSession(self.agent, self.console, self.view)

    def run(self, *lines: str) -> str:
        start = self.buf.tell()
        for line in lines:
            self.session.handle_line(line)
        return "\n".join(line.rstrip() for line in self.buf.getvalue()[start:].splitlines())


@pytest.fixture
def store():
    with SQLiteStore(config.db_path()) as s:
        yield s


# --------------------------------------------------------------------------- glitches


def test_an_eviction_by_the_model_is_shown_once(store):
    chat = Chat(store, [text_response("One."), text_response("Two."),
                        tool_response([("evict_turns", {"turn_ids": [1], "summary": "a hello"})]),
                        text_response("Done.")])
    chat.run("first message", "second message")
    out = chat.run("please make room")
    assert len(re.findall(r"evicted turns? 1\b", out)) == 1, out
    assert "· evicted turn 1 · " in out and " · now " in out


def test_demo_shows_each_memory_edit_and_eviction_once():
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", buf)
        assert cli.main(["demo", "--speed", "0"]) == 0
    out = buf.getvalue()
    edits = [line for line in out.splitlines() if line.strip().startswith("✎")]
    assert edits, out
    # Before: every core-memory edit also had a ⚙ line of its tool, every eviction too.
    assert not [line for line in out.splitlines()
                if re.match(r"\s*⚙ (core_memory_append|core_memory_replace|evicted)", line)]


def test_status_line_and_context_show_the_same_number(store):
    chat = Chat(store, [text_response("Hello there, nice to meet you.",
                                      usage=Usage(3000, 20, 0, 0))])
    status = chat.run("Hi! I'm Ada and I like long walks.").splitlines()[-1]
    context = chat.run("/context").splitlines()[0]
    numbers = re.search(r"context ([\d,]+/[\d,]+) tokens \((\d+)%\)", status).groups()
    assert context.startswith(f"context {numbers[0]} tokens ({numbers[1]}%)"), (status, context)


def test_an_empty_second_page_is_not_shown_as_results(store):
    chat = Chat(store, [text_response("Noted."),
                        tool_response([("conversation_search", {"query": "zebra", "page": 2})]),
                        text_response("Nothing more.")])
    chat.run("I saw a zebra")
    out = chat.run("search again")
    assert '· conversation_search "zebra" page 2 → nothing on this page (1 result on pages 1–1)' \
        in out
    assert "→ 1 results" not in out


@pytest.mark.slow
def test_a_retryable_error_gives_its_advice_once(server):
    server.enqueue(overloaded(), times=3)
    proc = run_cli("chat", "--no-record", input="hello\n", env=server_env(server))
    assert proc.returncode == 1  # the turn failed: scripts must see it
    errors = [line for line in proc.stderr.splitlines() if line.startswith("· error:")]
    assert len(errors) == 1
    assert errors[0].count("message is kept") == 1 and errors[0].count("/retry") == 1, errors[0]


def test_the_first_fact_replaces_the_placeholder_and_links_keep_their_url(store):
    chat = Chat(store, [
        tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada."})]),
        text_response("See [the docs](https://example.org/docs) for more."),
    ])
    out = chat.run("I'm Ada")
    assert store.get_block(chat.agent.id, "human").value == "Name: Ada."
    assert "https://example.org/docs" in out


def test_replay_marks_an_interrupted_turn(store):
    agent = Agent.open(store, model_client=ScriptedModel([text_response("Answered.")]),
                       clock=lambda: FIXED)
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    list(recording.recorded_step(agent, recorder, "first question"))
    steps = recording.recorded_step(agent, recorder, "a question I cancelled")
    next(steps)
    steps.close()  # Ctrl-C
    recorder.close()
    agent.close()
    buf = io.StringIO()
    from memgpt_lite.engine import replay as replay_mod

    replay_mod.replay(recorder.path, observer=ReplayView(Console(file=buf, width=120,
                                                                 color_system=None)))
    lines = buf.getvalue().splitlines()
    cancelled = [line for line in lines if "a question I cancelled" in line]
    assert cancelled == [cancelled[0]] and "(interrupted: never answered)" in cancelled[0]
    assert "interrupted" not in next(line for line in lines if "first question" in line)


def test_a_retried_message_is_stored_once(store):
    # Ctrl-C while the model answers, three times (the first send and two /retry), then a
    # /retry that is answered: one copy of the message in recall, marked answered.
    chat = Chat(store, [KeyboardInterrupt(), KeyboardInterrupt(), KeyboardInterrupt(),
                        text_response("Answered at last.")])
    out = chat.run("the same question", "/retry", "/retry", "/retry")
    assert out.count("interrupted — the turn was cancelled") == 3
    assert "Answered at last." in out
    assert store.search_messages(chat.agent.id, "same question").total == 1


def test_an_interrupted_message_is_marked_in_recall(store):
    chat = Chat(store, [KeyboardInterrupt()])
    chat.run("a question I cancelled")
    hit = store.search_messages(chat.agent.id, "cancelled").hits[0]
    assert "interrupted" in repr(hit).lower()


def test_status_line_and_tokens_count_the_summariser(store):
    chat = Chat(store, [])
    view = chat.view
    view.start_turn()
    chat_usage, summary_usage = Usage(1000, 100, 0, 0), Usage(4000, 300, 0, 0)
    events = [ModelCallStart(1, "d", 10, "summary", "claude-haiku-5-5"),
              ResponseEvent(ModelResponse([{"type": "text", "text": "sum"}], "end_turn",
                                          summary_usage, "claude-haiku-5-5"), "summary"),
              ModelCallStart(1, "d", 10, "chat", "claude-sonnet-5-5"), TextDelta("Hi."),
              ResponseEvent(ModelResponse([{"type": "text", "text": "Hi."}], "end_turn",
                                          chat_usage, "claude-sonnet-5-5"), "chat")]
    from memgpt_lite.engine.events import UsageEvent
    from memgpt_lite.engine.tokens import cost_usd

    chat_cost = cost_usd("claude-sonnet-5-5", chat_usage)
    events += [UsageEvent(chat_usage, chat_cost, 1000, 28952),
               TurnEndEvent(1, "Hi.", "end_turn", chat_usage, chat_cost, True)]
    for event in events:
        chat.session.tally.add(event)
        view.handle(event)
    paid = chat_cost + cost_usd("claude-haiku-5-5", summary_usage)
    assert chat.buf.getvalue().rstrip().endswith(f"turn ${paid:.4f}")
    tokens = chat.run("/tokens")
    assert f"cost ${paid:.4f}" in tokens and "of which the summariser: 1 call" in tokens


def test_waiting_is_shown_piped_and_counted_on_the_spinner():
    buf = io.StringIO()
    console = make_console(buf, plain=True)
    view = ChatView(console, live=False, markdown=False, host="api.example", wait_every=0.05)
    view.handle(ModelCallStart(1, "d", 10))
    time.sleep(0.3)
    view.handle(TextDelta("Hi"))
    view.close()
    waits = [line for line in buf.getvalue().splitlines() if "waiting for api.example…" in line]
    assert waits and waits[0].startswith("· waiting for api.example… 0 s")
    from memgpt_lite.terminal.view import _Waiting

    spinner = _Waiting("thinking…")
    spinner.started -= 3
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(spinner)
    assert "thinking… 3 s" in out.getvalue()


# --------------------------------------------------------------------------- conventions


@pytest.mark.slow
def test_one_shot_prints_the_reply_on_stdout_and_the_rest_on_stderr(server):
    server.enqueue(text_response("Forty-two."))
    proc = run_cli("chat", "-p", "What is the answer?", "--no-record", env=server_env(server))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Forty-two.\n"
    assert "· context " in proc.stderr
    server.enqueue(unauthorized())
    proc = run_cli("chat", "-p", "again?", "--no-record", env=server_env(server))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "error: The API key was rejected" in proc.stderr


@pytest.mark.slow
def test_piped_chat_exits_non_zero_when_every_turn_fails(server):
    server.enqueue(unauthorized(), times=2)
    proc = run_cli("chat", "--no-record", input="one\ntwo\n", env=server_env(server))
    assert proc.returncode == 1
    assert proc.stderr.count("error: The API key was rejected") == 2


@pytest.mark.slow
def test_json_writes_one_object_per_event(server):
    server.enqueue(tool_response([("core_memory_append", {"label": "human",
                                                          "content": "Name: Ada."})]))
    server.enqueue(text_response("Hello Ada!"))
    proc = run_cli("chat", "--json", "--no-record", input="I'm Ada\n", env=server_env(server))
    assert proc.returncode == 0, proc.stderr
    objects = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "user" and kinds[-1] == "turn_end"
    assert {"tool_call", "tool_result", "memory_edit", "usage"} <= set(kinds)
    assert objects[-1]["text"] == "Hello Ada!" and objects[-1]["completed"] is True
    assert "text_delta" not in kinds


@pytest.mark.slow
def test_help_has_examples_environment_and_positional_help():
    top = run_cli("--help")
    assert "MEMGPT_LITE_HOME" in top.stdout and "ANTHROPIC_API_KEY" in top.stdout
    parser = cli.build_parser()
    subparsers = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"][0]
    for name, sub in subparsers.choices.items():
        if name == "bench":
            continue
        text = sub.format_help()
        assert "examples:\n" in text, name
        for action in sub._actions:
            if not action.option_strings and action.help is None \
                    and action.__class__.__name__ != "_SubParsersAction":
                pytest.fail(f"{name}: positional {action.dest} has no help")
    agents = run_cli("agents")
    assert agents.returncode == 0 and "ACTION" in agents.stdout and "examples:" in agents.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
@pytest.mark.slow
def test_completion_scripts_are_generated_from_the_parser(shell):
    proc = run_cli("completion", shell)
    assert proc.returncode == 0
    for word in ("chat", "agents", "--context-window", "export"):
        assert (word.lstrip("-") if shell == "fish" else word) in proc.stdout
    if shell == "bash" and shutil.which("bash"):
        script = proc.stdout + ('\nCOMP_WORDS=(memgpt-lite agents s); COMP_CWORD=2; _memgpt_lite;'
                                ' echo "${COMPREPLY[@]}"\n')
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
        assert out.stdout.split() == ["set", "share", "show"]


def test_agents_set_validates_and_show_says_where_values_come_from(capsys, monkeypatch):
    assert cli.main(["agents", "set", "nobody", "model=haiku"]) == 1
    with SQLiteStore(config.db_path()) as s:
        Agent.open(s, model_client=ScriptedModel([])).close()
    capsys.readouterr()
    assert cli.main(["agents", "set", "default", "model=haiku", "context_window=16000"]) == 0
    assert cli.main(["agents", "set", "default", "context_window=32k"]) == 2
    assert "whole number" in capsys.readouterr().err
    assert cli.main(["agents", "set", "default", "context_window=10"]) == 2  # no room left
    monkeypatch.setenv("MEMGPT_LITE_MAX_TOKENS", "1024")
    assert cli.main(["agents", "show", "default"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] and line.split()[0] in (
                "model", "context_window", "max_output_tokens", "thinking")}
    assert rows["model"] == ["claude-haiku-5-5", "stored"]
    assert rows["context_window"] == ["16,000", "stored"]
    assert rows["max_output_tokens"] == ["1,024", "env", "MEMGPT_LITE_MAX_TOKENS"]
    assert rows["thinking"] == ["off", "default"]
    assert cli.main(["agents", "set", "default", "--reset", "model"]) == 0
    with SQLiteStore(config.db_path()) as s:  # the agent keeps only what it set itself
        assert config.own_settings(s.get_agent("default").settings) == {"context_window": 16000}
        assert config.resolve_settings(s.get_agent("default").settings)[0].model == \
            "claude-sonnet-5-5"


@pytest.mark.slow
def test_models_lists_aliases_and_prices_and_an_unknown_model_is_warned(server, capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"claude-haiku-5-5\s+haiku\s+\$1\s+\$5", out), out
    server.enqueue(text_response("ok"))
    proc = run_cli("chat", "-p", "hi", "--model", "claude-sonnett", "--no-record",
                   env=server_env(server))
    assert "'claude-sonnett' is not a model memgpt-lite knows" in proc.stderr
    assert "claude-sonnet-5-5" in proc.stderr
    server.enqueue(text_response("ok"))
    run_cli("chat", "-p", "hi", "--model", "haiku", "--no-record", env=server_env(server))
    assert server.requests[-1]["model"] == "claude-haiku-5-5"


@pytest.mark.slow
def test_the_prompt_reaches_the_user_when_stdout_is_redirected(server, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    server.enqueue(text_response("Written to the file."))
    out = tmp_path / "transcript.md"
    env = {**os.environ, **server_env(server), "TERM": "xterm-256color"}
    child = pexpect.spawn("bash", ["-c", f"{sys.executable} -m memgpt_lite chat --no-record "
                                         f"> {out}"], env=env, encoding="utf-8", timeout=20)
    try:
        child.expect_exact("you› ")  # on the terminal (stderr), not in the file
        child.sendline("hello")
        child.expect_exact("· context ")
        child.expect_exact("you› ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    # the transcript holds what you typed, as a Markdown quote, and the reply
    assert out.read_text() == "> you: hello\n\nWritten to the file.\n"


def test_sessions_for_an_unknown_agent_says_so(capsys):
    assert cli.main(["sessions", "--agent", "NOSUCH"]) == 2
    out, err = capsys.readouterr()
    assert "there is no agent named 'NOSUCH'" in err and not out  # errors go to stderr


def test_sessions_under_a_name_an_agent_had_says_what_it_is_called_now(store, capsys):
    agent = Agent.open(store, "ada", model_client=ScriptedModel([text_response("A.")]))
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    list(recording.recorded_step(agent, recorder, "one"))
    recorder.close()
    agent.close()
    assert cli.main(["agents", "rename", "ada", "bob"]) == 0
    capsys.readouterr()
    assert cli.main(["sessions", "--agent", "ada"]) == 0  # the old name leads to it
    out, err = capsys.readouterr()
    assert "agent 'ada' was renamed to 'bob'; using 'bob'" in err and "bob (was ada)" in out
    # A rename from before old names were kept: only the recordings know the old name.
    with store.transaction():
        store.db.execute("DELETE FROM agent_aliases")
    assert cli.main(["sessions", "--agent", "ada"]) == 2
    assert ("there is no agent named 'ada' (renamed to 'bob': memgpt-lite sessions --agent "
            "bob)") in capsys.readouterr().err
    assert cli.main(["sessions", "--agent", "bob"]) == 0
    assert "bob (was ada)" in capsys.readouterr().out


def test_replay_of_a_recording_cut_short_shows_the_warning(store, capsys):
    agent = Agent.open(store, model_client=ScriptedModel([text_response("A."),
                                                          text_response("B.")]))
    recorder = recording.Recorder.for_agent(agent)
    recording.record_header(agent, recorder)
    for text in ("one", "two"):
        list(recording.recorded_step(agent, recorder, text))
    recorder.close()
    agent.close()
    data = recorder.path.read_bytes()
    recorder.path.write_bytes(data[:-25])  # the crash cut the last line in half
    assert cli.main(["replay", str(recorder.path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"warning: line \d+ was cut short", out), out


# --------------------------------------------------------------------------- stored text


HOSTILE = ["[bold red]evil[/]", "[/]", "\x1b]0;pwned title\x07", "\x1b]52;c;cHduZWQ=\x07",
           "\x1b[2J\x1b[H", "bell\x07", "nul\x00byte", "\x9b31m", "cr\roverwrite",
           "\u202eevil\u202c", "[link=https://evil.example]x[/link]"]
RAW = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


@pytest.mark.slow
def test_stored_text_is_shown_as_text_by_every_command(server):
    text = " ".join(HOSTILE)
    name = "[/]\x1b[2J"
    with SQLiteStore(config.db_path()) as s:
        agent = Agent.open(s, name, model_client=ScriptedModel([
            tool_response([("archival_insert", {"content": f"passage {text}"})]),
            text_response(f"reply {text}")]), clock=lambda: FIXED)
        recorder = recording.Recorder.for_agent(agent)
        recording.record_header(agent, recorder)
        list(recording.recorded_step(agent, recorder, f"zebra {text}"))
        recorder.close()
        agent.edit_block("human", f"human {text}")
        s.set_summary(agent.id, f"summary {text}")
        agent.close()
    env = server_env(server)
    server.enqueue(text_response(f"live {text}"))
    runs = [run_cli("core", "--agent", name), run_cli("agents", "list"),
            run_cli("agents", "show", name), run_cli("sessions"),
            run_cli("sessions", "--agent", name), run_cli("forget", "zebra", "--agent", name),
            run_cli("replay", str(recorder.path)),
            run_cli("chat", "--agent", name, "--no-record", env=env, input=(
                "/agents\n/core\n/search zebra\n/archival\n/archival passage\n/context\n"
                "/forget zebra\n/tokens\nsay it\n")),
            run_cli("agents", "rename", name, "[/]x\x1b]0;t\x07")]
    for proc in runs:
        assert proc.returncode in (0, 1, 2), proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        for stream in (proc.stdout, proc.stderr):
            assert not RAW.search(stream.encode()), (proc.args, stream)
    everything = "".join(p.stdout + p.stderr for p in runs)
    assert "[bold red]evil[/]" in everything  # markup shown, not applied
    assert "␛]0;pwned title␇" in everything and "␛[2J" in everything


def test_eval_tables_show_stored_text_as_text():
    from memgpt_lite.terminal import eval_render

    hostile = " ".join(HOSTILE)
    report = {"scenario": hostile, "model": hostile, "source": "replay", "passed": 1,
              "failed": 0, "score": 1.0, "checks": [{"name": hostile, "passed": True,
                                                     "detail": hostile}],
              "totals": {"turns": 1, "model_calls": 1, "tool_calls": 0, "input_tokens": 10,
                         "cost_usd": 0.0}, "replay_divergences": [hostile]}
    stats = {"n": 1, "recall@5": 1.0}
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None)
    eval_render.print_score_table(console, report)
    eval_render.print_locomo(console, {"metrics": ["recall@5"], "mode": hostile,
                                       "file": hostile, "by_category": {hostile: stats},
                                       "overall": stats})
    eval_render.print_nested_kv(console, {"model": hostile,
                                          "by_level": {1: {"n": 1, "accuracy": 1}},
                                          "overall": {"n": 1, "accuracy": 1}})
    eval_render.print_comparison(console, {"checks": [{"scenario": hostile, "name": hostile,
                                                       "a": True, "b": False,
                                                       "change": "broke"}],
                                           "score": {"a": 1, "b": 0, "delta": -1},
                                           "passed": {"a": 1, "b": 0, "delta": -1},
                                           "totals": {}},
                                 [hostile, hostile])
    assert not RAW.search(buf.getvalue().encode())
    assert "[bold red]evil[/]" in buf.getvalue()


def test_visible_keeps_newlines_and_tabs_only():
    assert visible("a\tb\nc\x1b[31md\x07\x00\x7f\u202e") == "a\tb\nc␛[31md␇␀\u2421<U+202E>"


def test_visible_shows_a_byte_that_is_not_utf8_as_its_escape():
    # what Python makes of such a byte in an argument or a path; a lone surrogate from a JSON
    # escape (no byte behind it) stays U+FFFD
    assert visible("\udcff.jsonl \ud800") == "\\xff.jsonl \ufffd"


@pytest.mark.parametrize("argv", [["agents", "create", "a\udcffb"], ["replay", "\udcff.jsonl"]])
def test_an_argument_that_is_not_utf8_is_named_with_its_byte_escape(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "\\xff" in err and "\\udc" not in err and "\ufffd" not in err, err


def test_a_long_bad_agent_name_keeps_its_closing_quote(capsys):
    assert cli.main(["agents", "create", "a" * 300]) == 2
    assert "aaa…' cannot be an agent name" in capsys.readouterr().err


# --------------------------------------------------------------------------- input and files


@pytest.mark.slow
def test_stdin_that_is_not_utf8_is_sent_with_replacement_characters(server):
    proc = run_cli("chat", "--no-record", input=b"bad \xff\xfe zebra\nnext\n",
                   env=server_env(server))
    assert proc.returncode == 0, proc.stderr
    texts = [r["messages"][-1]["content"][-1]["text"] for r in server.requests]
    assert texts[0] == "bad \ufffd\ufffd zebra" and texts[1] == "next"
    out = run_cli("agents", "export", "default", "-")
    assert out.returncode == 0 and "bad \\ufffd" in out.stdout or "bad \ufffd" in out.stdout
    assert run_cli("chat", "-p", "zebra", "--no-record", env=server_env(server)).returncode == 0


def test_an_export_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch, capsys):
    with SQLiteStore(config.db_path()) as s:
        Agent.open(s, model_client=ScriptedModel([])).close()
    target = tmp_path / "default.json"
    target.write_text("the previous export\n")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    assert cli.main(["agents", "export", "default", str(target)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert target.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default.json", "home"]


def test_import_of_a_file_with_bytes_that_are_not_utf8(tmp_path, capsys):
    with SQLiteStore(config.db_path()) as s:
        Agent.open(s, model_client=ScriptedModel([])).close()
    path = tmp_path / "a.json"
    assert cli.main(["agents", "export", "default", str(path)]) == 0
    raw = path.read_bytes().replace(b'"Nothing is known', b'"\xff Nothing is known')
    path.write_bytes(raw)
    assert cli.main(["agents", "import", str(path), "--name", "copy"]) == 0
    with SQLiteStore(config.db_path()) as s:
        assert s.get_block(s.get_agent("copy").id, "human").value.startswith("\ufffd Nothing")


@pytest.mark.slow
def test_a_closed_pipe_ends_the_chat_quietly(server):
    server.enqueue(text_response("line\n" * 2000))
    proc = subprocess.run(
        f"{sys.executable} -m memgpt_lite chat -p hello --no-record | head -n 1",
        shell=True, capture_output=True, text=True, timeout=60,
        env={**os.environ, **server_env(server)})
    assert proc.stdout == "line\n"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, \
        proc.stderr


@pytest.mark.slow
def test_a_file_in_the_data_dirs_path_is_one_sentence(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    env = {"MEMGPT_LITE_HOME": str(blocker / "home")}
    proc = run_cli("core", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "is a file, not a folder" in proc.stderr
    doctor = run_cli("doctor", "--offline", env=env)
    assert doctor.returncode == 1 and "Everything looks fine" not in doctor.stdout
    assert f"{blocker} is a file, not a folder" in doctor.stdout


@pytest.mark.slow
def test_a_data_dir_that_is_a_file_is_one_sentence_and_the_file_is_left_alone(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("my notes\n")
    env = {"MEMGPT_LITE_HOME": str(blocker), "ANTHROPIC_API_KEY": "test",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # never reached: the data dir stops it
    for argv in (["core"], ["chat", "-p", "hi"], ["agents", "list"]):
        proc = run_cli(*argv, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr == (f"memgpt-lite: The data dir {blocker} is a file, not a folder; "
                               "move it away or point MEMGPT_LITE_HOME elsewhere.\n")
    assert blocker.read_text() == "my notes\n"


@pytest.mark.slow
def test_a_data_dir_linked_to_a_missing_drive_is_one_sentence_and_doctor_fails(tmp_path):
    link = tmp_path / "home"
    link.symlink_to(tmp_path / "usb" / "memgpt")
    env = {"MEMGPT_LITE_HOME": str(link), "ANTHROPIC_API_KEY": "test",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # never reached: the data dir stops it
    for argv in (["core"], ["chat", "-p", "hi"]):
        proc = run_cli(*argv, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "which does not exist" in proc.stderr
    doctor = run_cli("doctor", "--offline", env=env)
    assert doctor.returncode == 1 and "does not exist yet" not in doctor.stdout
    assert f"FAIL  data dir {link} cannot be used: {link} is a link to " in doctor.stdout
    assert not (tmp_path / "usb").exists()


def test_a_path_with_a_name_too_long_for_the_file_system_is_one_sentence(tmp_path, capsys,
                                                                          monkeypatch):
    long = str(tmp_path / ("x" * 300))  # a file name may have 255 bytes
    for env, argv in (({}, ["replay", long]), ({}, ["eval", long]),
                      ({}, ["--db", long, "agents", "list"]),
                      ({"MEMGPT_LITE_CONFIG": long}, ["config", "set", "model", "haiku"]),
                      ({"MEMGPT_LITE_HOME": long}, ["core"])):
        with monkeypatch.context() as m:
            for key, value in env.items():
                m.setenv(key, value)
            assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is too long for the file system" in err, argv
        os.environ.pop("MEMGPT_LITE_DATABASE_URL", None)  # --db set it (conftest restores all)


# --------------------------------------------------------------------------- doctor


def damage_middle_page() -> None:
    with SQLiteStore(config.db_path()) as s:
        agent = Agent.open(s, model_client=ScriptedModel([text_response("ok " * 300)] * 40))
        for i in range(12):
            list(agent.step(f"message {i} " + "lorem ipsum dolor " * 200))
        agent.close()
    path = config.db_path()
    pages = path.stat().st_size // 4096
    with open(path, "r+b") as f:
        f.seek(4096 * (pages // 2))
        f.write(b"\xde\xad\xbe\xef" * 1024)


@pytest.mark.slow
def test_doctor_names_a_damaged_page_and_the_recovery_works():
    damage_middle_page()
    proc = run_cli("doctor", "--offline")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    fail = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and "is damaged (" in fail[0], proc.stdout
    commands = [line.strip() for line in proc.stdout.splitlines() if line.startswith("        ")]
    assert commands[2].startswith("sqlite3 damaged/memgpt_lite.db .dump | sqlite3 memgpt_lite.db")
    assert "agents import" in proc.stdout and ".recover" in proc.stdout
    if not shutil.which("sqlite3"):
        pytest.skip("no sqlite3 command line to run the recovery with")
    script = " && ".join(c for c in commands if not c.startswith("memgpt-lite"))
    subprocess.run(script, shell=True, check=True)
    repaired = run_cli("doctor", "--repair", "--offline")
    assert repaired.returncode == 0, repaired.stdout
    listing = run_cli("agents", "list")  # what survived the damage is usable again
    assert listing.returncode == 0 and "Traceback" not in listing.stderr


@pytest.mark.slow
def test_doctor_checks_the_key_and_the_connection(server):
    ok = run_cli("doctor", env=server_env(server))
    assert ok.returncode == 0, ok.stdout
    assert f"reached 127.0.0.1:{server.port} and the key works" in ok.stdout
    assert server.count_requests and not server.requests  # counting costs nothing
    with FakeAnthropicServer(api_key="the-right-key") as strict:
        bad = run_cli("doctor", env={"ANTHROPIC_BASE_URL": strict.base_url,
                                     "ANTHROPIC_API_KEY": "a-wrong-key"})
    assert bad.returncode == 1 and "FAIL  the key: The API key was rejected" in bad.stdout
    gone = run_cli("doctor", env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
                                  "ANTHROPIC_API_KEY": "x"})
    assert gone.returncode == 1 and "FAIL  the connection: Could not connect to 127.0.0.1:9" \
        in gone.stdout


def test_doctor_repair_and_eval_show_plain_progress_when_piped(capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with SQLiteStore(config.db_path()) as s:
        for name in ("a", "b"):
            agent = Agent.open(s, name, model_client=ScriptedModel([text_response("ok")]))
            list(agent.step("hello there"))
            agent.close()
        s.db.connection.execute("DELETE FROM fts_messages_1_docsize WHERE id = "
                      "(SELECT min(id) FROM messages WHERE index_text != '')")  # out of step
    assert cli.main(["doctor", "--repair", "--offline"]) == 0
    assert "  rebuilding search indexes: 2/2 (100%) · b" in capsys.readouterr().out


@pytest.mark.parametrize("variable", ["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_forced_colour_does_not_make_a_pipe_a_terminal(variable, monkeypatch):
    """rich takes FORCE_COLOR (or TTY_COMPATIBLE) for a terminal: a piped console then drew
    spinners and progress bars with cursor codes into the pipe."""
    monkeypatch.setenv(variable, "1")
    out = io.StringIO()
    console = make_console(out, plain=True)
    assert not console.is_terminal
    with console.status("waiting…"):
        pass
    assert "\x1b" not in out.getvalue()


@pytest.mark.slow
def test_a_piped_chat_with_forced_colour_writes_no_escape_codes(server):
    """`FORCE_COLOR=1 memgpt-lite chat -p … 2> log`: the window check near its minimum
    drew its spinner into the log."""
    server.enqueue(text_response("Fine."))
    proc = run_cli("chat", "-p", "hi", "--no-record", "--context-window", "6000",
                   env={**server_env(server), "FORCE_COLOR": "1"})
    assert "measuring the context window" not in proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr, proc.stderr


@pytest.mark.slow
def test_doctor_never_writes_to_a_damaged_file():
    damage_middle_page()
    before = config.db_path().read_bytes()
    assert run_cli("doctor", "--offline").returncode == 1
    assert run_cli("doctor", "--repair", "--offline").returncode == 1
    assert config.db_path().read_bytes() == before


@pytest.mark.parametrize("speed", ["-1", "nan", "inf"])
def test_a_playback_speed_below_zero_or_not_finite_is_refused(speed, capsys):
    """`--speed X` paces a replay: 0 means as fast as possible, a negative or NaN speed means
    nothing and was taken as 0 without a word."""
    for command in (["demo"], ["replay", "nothing.jsonl"]):
        assert cli.main([*command, "--speed", speed]) == 2
        err = capsys.readouterr().err
        assert "argument --speed: must be a number of 0 or more (0: as fast as possible), " \
               f"got '{speed}'" in err and "Traceback" not in err

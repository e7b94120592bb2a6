"""Strict replay: a recorded session replays with zero divergence; tampering is caught."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from memgpt_lite.engine import config, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.memory import default_blocks
from memgpt_lite.engine.errors import OverloadedError, PromptTooLongError
from memgpt_lite.engine.records import ModelRequest
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli, commands, render
from memgpt_lite.terminal.replay_view import ReplayView

START = datetime(2026, 2, 1, 8, 0, tzinfo=timezone.utc)


class Clock:
    """A wall clock that moves on by itself (like a real one) on every reading."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=41)
        return self.now


class ClockedStore(SQLiteStore):
    """Passages stamped by the agent's clock, as replay stamps them (archival_search shows
    their date; the live store would use the wall clock, far from this test's clock)."""

    clock: Clock

    def add_passage(self, agent_id, text, tags=None, created_at=None):
        return super().add_passage(agent_id, text, tags,
                                   created_at or recording.utc_iso(self.clock.now))


def record_session(tmp_path: Path, inputs: list[str], script: list, *,
                   settings: Settings | None = None, restart_after: int | None = None,
                   summary_script: list | None = None) -> Path:
    path = tmp_path / "session.jsonl"
    store = ClockedStore(tmp_path / "live.db")
    model = ScriptedModel(script)
    summary = ScriptedModel(summary_script) if summary_script is not None else None
    clock = store.clock = Clock()
    open_agent = lambda: Agent.open(store, "ada", model_client=model,  # noqa: E731
                                    summary_client=summary, settings=settings or Settings(),
                                    clock=clock)
    agent = open_agent()
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        for i, text in enumerate(inputs):
            if restart_after is not None and i == restart_after:
                agent = open_agent()
                rec.restart()
            for _ in recording.recorded_step(agent, rec, text):
                pass
    store.close()
    return path


MEMORY_SESSION = (
    ["My name is Ada and I keep bees in Porto.", "What's my name, and where are my bees?"],
    [tool_response([("core_memory_append", {"label": "human", "content": "Name: Ada"}),
                    ("archival_insert", {"content": "Ada keeps bees in Porto", "tags": ["bees"]})]),
     text_response("Lovely, Ada."),
     tool_response([("archival_search", {"query": "bees"}),
                    ("conversation_search", {"query": "name Ada"})]),
     text_response("You are Ada and your bees are in Porto.")],
)


def _mutate(path: Path, match: str, edit) -> None:
    lines = [json.loads(x) for x in path.read_text("utf-8").splitlines()]
    hits = [line for line in lines if line["type"] == match]
    edit(hits)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")


def test_recorded_session_replays_strictly_with_zero_divergence(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    report = replay_mod.replay(path, strict=True)
    assert report.completed and report.divergences == [] and report.ok
    assert report.tally.turns == 2 and report.tally.model_calls == 4
    assert report.tally.tool_calls == {"core_memory_append": 1, "archival_insert": 1,
                                 "archival_search": 1, "conversation_search": 1}
    assert report.final_core_memory["human"].endswith("Name: Ada")
    assert report.tally.usage.total_input > 0 and report.tally.cost_usd > 0


def test_cli_replay_strict_exits_zero_then_non_zero_on_tampered_user_text(tmp_path, capsys):
    path = record_session(tmp_path, *MEMORY_SESSION)
    assert cli.main(["replay", str(path), "--strict"]) == 0
    assert "zero divergence" in capsys.readouterr().out

    _mutate(path, "user", lambda users: users[0].update(text="My name is Eve."))
    assert cli.main(["replay", str(path), "--strict"]) == 1
    out = capsys.readouterr().out
    assert "divergence" in out and "turn 1: request" in " ".join(out.split())


def test_tampered_response_is_caught(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)

    def edit(responses):
        responses[1]["response"]["content"][0]["text"] = "Lovely, Eve."

    _mutate(path, "response", edit)
    report = replay_mod.replay(path, strict=True)
    assert not report.ok
    first = report.divergences[0]
    assert first.turn == 1 and first.what == "reply"  # then turn 2's request would differ


def test_tampered_final_response_is_caught_by_the_reply_check(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    _mutate(path, "response",
            lambda rs: rs[-1]["response"]["content"][0].update(text="You are Eve."))
    report = replay_mod.replay(path, strict=True)
    assert [d.what for d in report.divergences] == ["reply"]


def test_non_strict_replay_goes_on_and_lists_every_divergence(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    _mutate(path, "user", lambda users: users[0].update(text="My name is Eve."))
    report = replay_mod.replay(path, strict=False)
    assert report.completed and report.tally.turns == 2
    assert {d.what for d in report.divergences} >= {"request"}
    assert len(report.divergences) >= 2  # both turns' requests differ
    code = commands.cmd_replay(SimpleNamespace(file=str(path), strict=False, speed=0))
    assert code == 0


def test_tampered_memory_snapshot_and_tool_result_are_caught(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    _mutate(path, "memory", lambda ms: ms[0]["blocks"].update(human="tampered"))
    assert replay_mod.replay(path, strict=True).divergences[0].what == "memory"

    path = record_session(tmp_path / "b", *MEMORY_SESSION) if (tmp_path / "b").mkdir() is None else None
    _mutate(path, "tool_result", lambda rs: rs[1]["result"].update(content="Stored as passage #9."))
    assert replay_mod.replay(path, strict=True).divergences[0].what == "tool_result"


def test_restart_forced_flush_with_summariser_and_errors_replay_strictly(tmp_path):
    """Pager flush (summary call), a restart between sessions and an API error all replay."""
    settings = Settings(context_window=5_200, max_output_tokens=512, safety_margin=200)
    long = "Here is a long note about hives and frames. " * 14
    inputs = [f"note {i}: {long}" for i in range(14)] + ["retry please", "what did I say first?"]
    script = [text_response(f"ok {i}") for i in range(14)]
    script += [OverloadedError("The API is overloaded."), text_response("back"),
               text_response("your first note was about hives")]
    path = record_session(tmp_path, inputs, script, settings=settings, restart_after=7,
                          summary_script=[text_response("Earlier notes: hives and frames.")] * 6)
    rec = recording.Recording.load(path)
    assert any(t.restart_before for t in rec.turns)
    purposes = [c.purpose for c in rec.calls()]
    assert "summary" in purposes, "the session should have forced a flush"
    assert any(c.error for c in rec.calls())
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [] and report.completed
    assert report.tally.forced_flushes >= 1 and report.tally.errors == 1


def test_session_of_an_agent_with_history_replays_from_its_snapshot(tmp_path):
    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([text_response("first"), text_response("second: you said hello")])
    clock = Clock()
    agent = Agent.open(store, "ada", model_client=model, clock=clock)
    list(agent.step("hello"))  # history from before the recording
    path = tmp_path / "later.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "what did I say?"))
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [], report.divergences


def test_interrupted_turn_and_user_commands_replay(tmp_path):
    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([text_response("a long answer " * 10), text_response("short")])
    agent = Agent.open(store, "ada", model_client=model, clock=Clock())
    path = tmp_path / "r.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        gen = recording.recorded_step(agent, rec, "tell me a story")
        for event in gen:
            if event.kind == "response":
                gen.close()
                break
        rec.command("edit_block", label="human", value="Likes short answers.")
        agent.edit_block("human", "Likes short answers.")
        list(recording.recorded_step(agent, rec, "shorter please"))
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [], report.divergences
    assert report.final_core_memory["human"] == "Likes short answers."


def test_replay_client_checks_digests_and_runs_out_loudly(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    client = replay_mod.ReplayModelClient(recording.Recording.load(path), strict=True)
    client.begin_turn(0)
    bogus = ModelRequest(model="m", max_tokens=1, system=[], messages=[])
    with pytest.raises(replay_mod.Divergence, match="request digest"):
        list(client.stream(bogus))
    lenient = replay_mod.ReplayModelClient(recording.Recording.load(path))
    lenient.begin_turn(1)
    items = list(lenient.stream(bogus))
    assert items[-1].tool_calls[0].name == "archival_search"  # served anyway, noted
    assert [d.what for d in lenient.divergences] == ["request"]
    list(lenient.stream(bogus))
    with pytest.raises(replay_mod.ReplayExhausted):
        list(lenient.stream(bogus))


def test_speed_paces_by_recorded_time(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for i, line in enumerate(lines):
        line["t"] = float(i)  # one second between lines
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    pauses: list[float] = []
    view = ReplayView(Console(file=io.StringIO(), width=100, color_system=None),
                      speed=4.0, sleep=pauses.append)
    assert replay_mod.replay(path, strict=True, observer=view).ok
    assert pauses and all(p == pytest.approx(0.25) or p < 0.25 * 12 for p in pauses)
    assert sum(pauses) == pytest.approx((len(lines) - 1 - 4) * 0.25, abs=1.0)


def test_sessions_command_lists_recordings(tmp_path, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "make_console",
                        lambda **_: Console(file=out, width=200, color_system=None))
    assert commands.cmd_sessions(SimpleNamespace(agent=None)) == 0
    assert "No recorded sessions" in out.getvalue()
    store = SQLiteStore(config.db_path())
    agent = Agent.open(store, "ada", model_client=ScriptedModel([text_response("hi")]))
    with recording.Recorder.for_agent(agent) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "hello"))
    assert commands.cmd_sessions(SimpleNamespace(agent="ada")) == 0
    row = next(line for line in out.getvalue().splitlines() if " ada " in line)
    assert row.split()[0] == rec.path.stem  # the id `replay ID` takes, whole
    assert recording.find_recording(rec.path.stem) == rec.path


def test_replay_of_a_missing_file_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    out, err = capsys.readouterr()
    assert "no recording at" in err and not out  # errors go to stderr


def test_provider_prompt_too_long_is_recorded_and_replays_strictly(tmp_path):
    """The agent evicts and retries after a "prompt too long" refusal (one event, recorded
    as the line it always was); the replay must refuse the same call with the same numbers,
    not report a divergence."""
    inputs = ["hello there", "and again", "third"]
    script = [text_response("hi"), text_response("ok"),
              PromptTooLongError("prompt is too long: 9000 tokens > 8000 maximum",
                                 actual=9000, maximum=8000),
              text_response("fine")]
    path = record_session(tmp_path, inputs, script,
                          summary_script=[text_response("Earlier: greetings.")] * 3)
    lines = [json.loads(x) for x in path.read_text("utf-8").splitlines()]
    refusal = next(line for line in lines if line["type"] == "prompt_too_long")
    assert (refusal["actual"], refusal["maximum"]) == (9000, 8000)
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [] and report.completed, report.divergences


def test_a_recorded_pop_of_an_older_version_replays_as_it_popped_then(tmp_path):
    # Versions that recorded /pop as a command popped the queue's last n turns; /pop now
    # takes the last n turns, evicted or not. A recording made then must replay as it ran.
    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([
        text_response("one"), text_response("two"),
        tool_response([("evict_turns", {"turn_ids": [2], "summary": "The user said two."})]),
        text_response("evicted"), text_response("four")])
    agent = Agent.open(store, "ada", model_client=model, clock=Clock())
    path = tmp_path / "old.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        for text in ("my locker code is 4471", "say two", "evict turn 2"):
            list(recording.recorded_step(agent, rec, text))
        queue = sorted({m.turn_id for m in store.context_messages(agent.id)})
        assert queue == [1, 3]
        rec.command("pop_turns", n=2)
        agent._pop(queue[-2:])  # what /pop did when it was recorded
        list(recording.recorded_step(agent, rec, "what is left?"))
    report = replay_mod.replay(path, strict=True)
    assert report.divergences == [], report.divergences


OLDEST = Path(__file__).parent / "recordings" / "chat_before_prompts_were_kept.jsonl"


def test_a_recording_whose_system_prompt_this_version_lacks_says_why_it_cannot_match(
        tmp_path, capsys):
    """A chat recorded by 3669f5c, before the prompts of a model contract were kept for
    replay: its strict replay failed with two digests and no reason; it now names the
    prompt file this version does not have. A forget that scrubbed the recording does not
    take the blame for it (it said the forget explained the difference, exit 0)."""
    assert cli.main(["replay", str(OLDEST), "--strict"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("it was recorded with prompt files this memgpt-lite does not have: system.md; a "
            "recording made by an older version before its prompts were kept for replay "
            "cannot match") in out
    scrubbed = tmp_path / "scrubbed.jsonl"
    lines = OLDEST.read_text("utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["forgotten"] = {"start": True, "turns": [1], "at": "2026-12-02T03:31:51Z"}
    scrubbed.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), "utf-8")
    assert cli.main(["replay", str(scrubbed), "--strict"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "prompt files this memgpt-lite does not have: system.md" in out
    assert "the replay cannot match the recording" not in out


def test_recordings_of_this_version_name_no_foreign_prompt(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    client = replay_mod.ReplayModelClient(recording.Recording.load(path))
    assert client.foreign_prompts == [] and not client.cannot_match


def test_a_session_of_an_agent_whose_stored_window_leaves_no_room_replays(tmp_path):
    """Older versions stored any window (100 tokens, or max_output_tokens above it); the
    chat opens such an agent with a warning and records it, but every recording of it,
    old or new, was refused: 'line 1 cannot be used: settings: … leave no room'."""
    store = SQLiteStore(tmp_path / "live.db")
    store.create_agent("old", {"context_window": 100}, default_blocks(5_000))
    model = ScriptedModel([text_response(f"reply {i}") for i in range(8)])  # summaries too
    settings = Settings(context_window=100)  # as the chat resolves the stored value
    agent = Agent.open(store, "old", model_client=model, clock=Clock(), settings=settings)
    list(agent.step("hello"))  # history: the header carries the agent's rows
    path = tmp_path / "small.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "again"))
    store.close()
    report = replay_mod.replay(path, strict=True)
    assert report.completed and report.divergences == []


def test_a_session_recorded_today_under_contract_1_names_no_foreign_prompt(tmp_path):
    """Its header names today's system.md while its requests carry contract 1's prompt:
    both are this version's, so a forget that scrubbed it still explains a difference."""
    store = SQLiteStore(tmp_path / "live.db")
    agent = Agent.open(store, "old", model_client=ScriptedModel([text_response("ok")]),
                       clock=Clock(), contract=1)
    path = tmp_path / "c1.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        list(recording.recorded_step(agent, rec, "hi"))
    store.close()
    client = replay_mod.ReplayModelClient(recording.Recording.load(path))
    assert client.foreign_prompts == [] and not client.cannot_match


def test_a_cjk_session_recorded_before_token_rules_replays_strictly():
    """Made with the version before counting rules (a new agent at a 9,000-token window,
    one CJK message): estimates by characters, no `token_rule` in its header. Weighed by
    bytes, its message would look three times as big and be clipped in the request it
    recorded whole."""
    path = Path(__file__).parent / "recordings" / "cjk_before_token_rules.jsonl"
    assert "token_rule" not in recording.Recording.load(path).header
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed, report.divergences


CJK_SESSION = (
    ["记忆是我们的宝藏，我们要好好保存它。" * 120, "你好 😀 " * 300, "再来一条。" * 200],
    [text_response(f"好的 {i}") for i in range(3)],
)


def test_a_cjk_session_with_a_restart_records_its_token_rule_and_replays_strictly(tmp_path):
    from memgpt_lite.engine.tokens import RULE

    settings = Settings(context_window=10_000)
    path = record_session(tmp_path, *CJK_SESSION, settings=settings, restart_after=1,
                          summary_script=[text_response("- notes")] * 4)
    assert recording.Recording.load(path).header["token_rule"] == RULE
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed, report.divergences


def test_a_recording_of_an_unknown_token_rule_is_refused_with_a_reason(tmp_path):
    path = record_session(tmp_path, *MEMORY_SESSION)
    _mutate(path, "header", lambda hits: hits[0].update(token_rule=99))
    with pytest.raises(recording.RecordingError, match="counted tokens by the rule 99"):
        recording.Recording.load(path)


def test_a_session_of_an_agent_stored_before_token_rules_replays_strictly(tmp_path):
    """Its calibration was learned by characters (no rule in its stored state): the live
    session converts it at the first request, and so does the replay, from the header."""
    store = SQLiteStore(tmp_path / "live.db")
    model = ScriptedModel([text_response(f"好的 {i}") for i in range(6)])
    agent = Agent.open(store, "old", model_client=model, clock=Clock(),
                       settings=Settings(context_window=10_000))
    agent.counter.use_rule(1)
    list(agent.step("记忆是我们的宝藏。" * 100))
    agent.close()
    row = store.get_agent("old")
    counter = {k: v for k, v in row.state["counter"].items() if k != "rule"}
    store.set_state(row.id, {**row.state, "counter": counter})
    agent = Agent.open(store, "old", model_client=model, clock=Clock())
    path = tmp_path / "old.jsonl"
    with recording.Recorder(path) as rec:
        recording.record_header(agent, rec)
        for text in ("我们要好好保存它。" * 300, "再来一条。"):
            list(recording.recorded_step(agent, rec, text))
    store.close()
    assert recording.Recording.load(path).header["delta"]["agent"]["state"]["counter"].get(
        "rule") is None
    report = replay_mod.replay(path, strict=True)
    assert report.ok and report.completed, report.divergences

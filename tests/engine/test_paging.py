"""The paging controller through the real agent loop: a real SQLite store, a ScriptedModel
that checks every request against the API's rules (validate=True), and the real counter."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.context import ContextInputs
from memgpt_lite.engine.errors import PromptTooLongError, RateLimitError
from memgpt_lite.engine.events import (
    ClipEvent,
    ErrorEvent,
    EvictionEvent,
    FoldEvent,
    ModelCallStart,
    PressureAlertEvent,
    SummaryEvent,
    ToolResultEvent,
    TurnEndEvent,
)
from memgpt_lite.engine.memory import MemoryTools, ToolOutcome
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.records import Message, ModelResponse, Usage, canonical_json
from memgpt_lite.engine.shrink import CLIP_NOTE
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.summariser import Summariser, chunk_turns, truncate_summary
from memgpt_lite.engine.tally import Tally
from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.engine.turns import group_turns
from memgpt_lite.lab.fake_server import (
    Counting,
    FakeAnthropicServer,
    count_tokens,
    hang,
    http_error,
)
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

WINDOW = 8_000  # budget = 8000 − 512 − 200 = 7288 tokens


class BlobTools(MemoryTools):
    """Real memory tools, plus `archival_search` with query "blob N" answering N chars:
    a tool whose result size the test controls."""

    def execute(self, name: str, args: object) -> ToolOutcome:
        query = args.get("query", "") if isinstance(args, dict) else ""
        match = re.fullmatch(r"blob (\d+)( #\d+)?", str(query))
        if name == "archival_search" and match:
            n = int(match.group(1))
            body = " ".join(f"row{i:05d}" for i in range(n // 9 + 1))[:n]
            return ToolOutcome(body, False, f"blob {n}")
        return super().execute(name, args)


def clock():
    start = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
    ticks = iter(range(10**9))
    return lambda: start + timedelta(seconds=next(ticks))


def make_agent(tmp_path, *, window: int = WINDOW, summary_script=None, **settings):
    """A summariser client of its own, so a flush never eats the chat model's script."""
    store = SQLiteStore(tmp_path / "paging.db")
    model = ScriptedModel([], validate=True)
    if summary_script is None:
        summary_script = [text_response("- summary")] * 20
    summariser = ScriptedModel(summary_script, validate=True)
    s = Settings(context_window=window, max_output_tokens=512, safety_margin=200, **settings)
    agent = Agent.open(store, "t", model_client=model, summary_client=summariser, settings=s,
                       clock=clock())
    agent.tools = BlobTools(store, agent.id)
    return agent, model, summariser


def step(agent: Agent, model: ScriptedModel, text: str, *script) -> list:
    model.script.extend(script or [text_response("ok")])
    events = list(agent.step(text))
    assert isinstance(events[-1], TurnEndEvent)
    return events


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def fill_until_alert(agent, model, chars: int = 1_200, limit: int = 40, script=list) -> list:
    """Turns of `chars` chars until the first pressure alert; all their events. `script()`
    makes each turn's responses (fresh: tool_use ids must be unique)."""
    seen: list = []
    for i in range(limit):
        seen += step(agent, model, f"turn{i} " + words(chars // 6, f"t{i}x"), *script())
        if of(seen, PressureAlertEvent):
            return seen
    raise AssertionError("no pressure alert")


def alert_ids(request) -> list[int]:
    return [int(i) for i in re.findall(r"^- (\d+) · ", last_user_text(request), re.M)]


def evict_when_alerted(victims: slice, summary: str):
    """A model that answers an alert by evicting `victims` of the listed turns."""
    def respond(request):
        ids = alert_ids(request)
        if ids and request.messages[-1]["content"][0]["type"] == "text":
            return tool_response([("evict_turns", {"turn_ids": ids[victims], "summary": summary})])
        return text_response("ok")
    return respond


def last_user_text(request) -> str:
    return " ".join(b.get("text", "") for b in request.messages[-1]["content"]
                    if b.get("type") == "text")


def chat_starts(events):
    return [e for e in events if isinstance(e, ModelCallStart) and e.purpose == "chat"]


def queue_ids(agent) -> list[int]:
    return sorted({m.turn_id for m in agent.store.context_messages(agent.id)})


def tool_results(events) -> list[ToolResultEvent]:
    return of(events, ToolResultEvent)


# --------------------------------------------------------------------------- alert


def test_alert_goes_into_the_tail_with_usage_and_the_queue(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    events = fill_until_alert(agent, model)
    alert = of(events, PressureAlertEvent)[0]
    assert alert.used_tokens >= int(agent.settings.budget * 0.70)
    assert alert.budget == agent.settings.budget
    tail = last_user_text(model.requests[-1])
    assert "<system_alert>" in tail and "Memory pressure" in tail
    assert f"{alert.used_tokens:,} tokens" in tail and f"{round(alert.percent)}%" in tail
    for turn in group_turns(agent.store.context_messages(agent.id))[:-1]:  # all but this one
        row = re.search(rf"^- {turn.id} · (\S+) · ([\d,]+) · (.*)$", tail, re.M)
        assert row, f"turn {turn.id} not listed"
        assert row.group(1) == turn.created_at
        assert row.group(3).startswith(f"turn{turn.id - 1} t{turn.id - 1}x0")
    assert "evict_turns" in tail
    # Alerts are data in the tail, never in stored messages or the system prompt.
    assert "Memory pressure" not in canonical_json(model.requests[-1].system)


def test_the_alert_names_turns_by_their_first_words_however_long_a_word_is(tmp_path):
    """Chinese has no spaces, nor has a pasted key or URL: "the first 10 words" of such a
    turn was the whole message, so the alert listing the queue's turns was as big as the
    queue itself, at the moment the context is fullest."""
    agent, model, _ = make_agent(tmp_path)
    cjk = "我们今天讨论了数据库迁移的计划和时间表以及需要注意的问题还有测试用例的编写方法"
    seen: list = []
    for i in range(40):
        seen += step(agent, model, f"第{i}条" + (cjk * 20)[i:i + 300])
        if of(seen, PressureAlertEvent):
            break
    alert = of(seen, PressureAlertEvent)[0].text
    rows = re.findall(r"^- \d+ · \S+ · [\d,]+ · (.*)$", alert, re.M)
    assert len(rows) >= 5 and all(row.startswith("第") for row in rows)
    assert max(len(row.removesuffix(" …")) for row in rows) <= 80, rows[0]  # 80 + the marker


def test_one_alert_per_rise_not_per_call(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    def script():
        return [*(tool_response([("archival_search", {"query": f"blob {100 + i}"})])
                  for i in range(4)), text_response("done")]
    events = fill_until_alert(agent, model, script=script)
    showing = [r for r in model.requests[-5:] if "Memory pressure" in last_user_text(r)]
    assert len(showing) >= 2  # the alert stays in the tail while pressure lasts...
    assert len(of(events, PressureAlertEvent)) == 1  # ...but it is raised once


def test_a_rise_of_five_percent_is_a_new_alert(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    def script():
        return [*(tool_response([("archival_search", {"query": f"blob {1600 + i}"})])
                  for i in range(5)), text_response("done")]
    events = fill_until_alert(agent, model, chars=600, script=script)
    alerts = of(events, PressureAlertEvent)
    step_tokens = int(agent.settings.budget * 0.05)
    assert len(alerts) >= 2
    assert all(b.used_tokens >= a.used_tokens + step_tokens for a, b in zip(alerts, alerts[1:]))


def test_no_alert_below_warn(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    events = step(agent, model, "hello")
    assert not of(events, PressureAlertEvent)
    assert "<system_alert>" not in last_user_text(model.requests[-1])


# --------------------------------------------------------------------------- evict_turns


def test_evict_turns_frees_context_keeps_recall_and_merges_summary(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    policy = evict_when_alerted(slice(0, 2), "User counted words; code AX-7.")
    events = fill_until_alert(agent, model, script=lambda: [policy, policy])
    victims = alert_ids(model.requests[-2])[:2]
    result = tool_results(events)[0].result
    assert not result.is_error
    assert re.search(r"about [\d,]+ tokens freed", result.content)
    assert re.search(r"now about [\d,]+ tokens \(\d+% of 7,288\)", result.content)
    eviction = of(events, EvictionEvent)[0]
    assert eviction.by == "model" and eviction.turn_ids == victims and eviction.tokens_freed > 0
    assert of(events, SummaryEvent)[0].method == "model"
    # Out of the queue, still in recall and searchable.
    assert not set(victims) & set(queue_ids(agent))
    assert all(agent.store.turn_messages(agent.id, t) for t in victims)
    hits = agent.store.search_messages(agent.id, f"t{victims[0] - 1}x3")
    assert any(h.turn_id == victims[0] for h in hits.hits)
    # The summary is merged and sent; the evicted text is not.
    summary = agent.store.get_agent_by_id(agent.id).summary
    assert "code AX-7" in summary and f"Turns {victims[0]}–{victims[1]}" in summary
    last = canonical_json(model.requests[-1].to_api())
    assert "code AX-7" in last and f"t{victims[0] - 1}x3 " not in last
    # The model acted: no forced flush at the next turn.
    assert not of(step(agent, model, "next"), EvictionEvent)


@pytest.mark.parametrize("args, problem", [
    ({"turn_ids": [], "summary": "x"}, "turn_ids is empty"),
    ({"turn_ids": [999], "summary": "x"}, "not in context: 999"),
    ({"turn_ids": "CURRENT", "summary": "x"}, "is the current turn"),
    ({"turn_ids": "1", "summary": "x"}, "must be a list of integer turn ids"),
    ({"turn_ids": [True], "summary": "x"}, "must be a list of integer turn ids"),
    ({"turn_ids": ["1"], "summary": "x"}, "must be a list of integer turn ids"),
    ({"turn_ids": [1], "summary": 5}, "summary must be a string"),
    ({"turn_ids": [1], "summary": "x", "force": True}, "Unknown argument 'force'"),
    # "each 1 or more" told a model that sent 10**30 nothing it could act on
    ({"turn_ids": [10**30], "summary": "x"}, "each from 1 to 9,007,199,254,740,992"),
    ({"turn_ids": [0], "summary": "x"}, "each from 1 to 9,007,199,254,740,992"),
])
def test_evict_turns_errors_list_the_valid_ids(tmp_path, args, problem):
    agent, model, _ = make_agent(tmp_path)
    for i in range(3):
        step(agent, model, f"turn {i}")
    current = agent.store.max_turn_id(agent.id) + 1
    if args["turn_ids"] == "CURRENT":
        args = {**args, "turn_ids": [1, current]}
    events = step(agent, model, "now", tool_response([("evict_turns", args)]),
                  text_response("ok"))
    result = tool_results(events)[0].result
    assert result.is_error and problem in result.content
    assert "Turns you can evict: 1–3." in result.content
    assert queue_ids(agent) == [1, 2, 3, 4]
    assert not of(events, EvictionEvent)


def test_evict_tool_rejects_a_non_object(tmp_path):
    agent, _, _ = make_agent(tmp_path)
    inputs = ContextInputs("", [Message("user", [{"type": "text", "text": "x"}], 1)], [], "")
    outcome, events = agent.pager.evict_tool(["1"], inputs, 2)
    assert outcome.is_error and "must be an object" in outcome.text
    assert "Turns you can evict: 1." in outcome.text and events == []


def test_the_line_shown_for_a_refused_evict_turns_keeps_the_numbers_it_quotes(tmp_path):
    """The chat's line is the answer's first sentence, not its text up to the first dot:
    "got [7.0, 8.0]" was shown as "got [7"."""
    agent, _, _ = make_agent(tmp_path)
    inputs = ContextInputs("", [Message("user", [{"type": "text", "text": "x"}], 7)], [], "")
    outcome, _ = agent.pager.evict_tool({"turn_ids": [7.0, 8.5], "summary": ""}, inputs, 9)
    assert outcome.summary == ("evict_turns failed: turn_ids must be a list of integer turn "
                               "ids, got [7.0, 8.5]")


def test_pop_after_the_model_evicted_the_last_turn_undoes_the_last_turns(tmp_path):
    """/pop 2 is the last two turns: with turn 2 evicted, the queue's last two (1 and 3)
    would delete the first turn from recall and keep the second."""
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "my locker code is 4471")
    step(agent, model, "the basil needs repotting")
    step(agent, model, "drop the basil talk",
         tool_response([("evict_turns", {"turn_ids": [2], "summary": "basil"})]),
         text_response("ok"))
    assert queue_ids(agent) == [1, 3]
    assert agent.pop_turns(2).turn_ids == [2, 3]
    assert queue_ids(agent) == [1]
    assert sorted({m.turn_id for m in agent.store.all_messages(agent.id)}) == [1]
    assert agent.store.search_messages(agent.id, "locker 4471").hits


def test_pop_past_a_flush_names_the_turns_the_summary_was_written_from(tmp_path):
    """A pop reaching turns flushed into the summary takes them out of recall, and says
    that the summary (written from them, never rewritten by a pop) may still hold them."""
    agent, model, _ = make_agent(tmp_path, summary_script=[text_response("- t0x5 was said")])
    for i in range(3):
        step(agent, model, f"turn{i} " + words(300, f"t{i}x"))
    flushed = of(step(agent, model, "big " + words(3_300, "b")), EvictionEvent)[0].turn_ids
    assert flushed[0] == 1 and 4 not in flushed
    popped = agent.pop_turns(4)
    assert popped.turn_ids == [1, 2, 3, 4] and popped.summarised == flushed
    assert agent.store.all_messages(agent.id) == []
    assert agent.store.get_agent_by_id(agent.id).summary == "- t0x5 was said"
    which = ", ".join(map(str, flushed))
    assert popped.memory_lines()[-1].startswith(f"turn{'s' * (len(flushed) > 1)} {which} "
                                                "had left the context queue already: ")
    assert agent.pop_turns(1).summarised == []  # nothing left: no line, no error


def test_evict_turns_without_summary_keeps_a_deterministic_one(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "my cat is called Miso")
    step(agent, model, "x", tool_response([("evict_turns", {"turn_ids": [1], "summary": " "})]),
         text_response("ok"))
    assert "my cat is called Miso" in agent.store.get_agent_by_id(agent.id).summary


# --------------------------------------------------------------------------- fold


def test_fold_replaces_old_bulky_tool_results_with_a_marker(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "fetch", tool_response([("archival_search", {"query": "blob 6000"})]),
         text_response("fetched"))
    events = fill_until_alert(agent, model, chars=900)
    folds = of(events, FoldEvent)
    assert folds and folds[0].tokens_freed > 0
    (folded,) = [m for m in agent.store.turn_messages(agent.id, 1) if m.id in folds[0].message_ids]
    sent = folded.context_content[0]["content"]
    assert sent.startswith("[folded to save context: 6,000 chars of archival_search output")
    assert len(folded.content[0]["content"]) == 6000  # the full text stays stored
    assert "[folded to save context" in canonical_json(model.requests[-1].messages)
    assert "row00600" not in canonical_json(model.requests[-1].messages)


# --------------------------------------------------------------------------- flush


def test_flush_at_the_threshold_calls_the_summariser_with_previous_summary(tmp_path):
    agent, model, summ = make_agent(tmp_path, summary_script=[text_response("- goal: count")])
    agent.store.set_summary(agent.id, "OLD SUMMARY: user is Ada")
    for i in range(3):
        step(agent, model, f"turn{i} " + words(300, f"t{i}x"))
    # One jump from well under warn to over the flush level.
    events = step(agent, model, "big " + words(3_300, "b"))
    eviction = of(events, EvictionEvent)[0]
    assert eviction.by == "flush" and eviction.turn_ids[0] == 1
    assert of(events, SummaryEvent)[0].method == "summariser"
    prompt = last_user_text(summ.requests[0])
    assert "<previous_summary>\nOLD SUMMARY: user is Ada" in prompt
    assert "[turn 1 · 2026-03-01T09:" in prompt and "t0x5" in prompt
    assert summ.requests[0].model == "claude-haiku-5-5"
    assert agent.store.get_agent_by_id(agent.id).summary == "- goal: count"
    assert all(s.estimated_tokens <= agent.settings.budget for s in chat_starts(events))
    tally = Tally().add_all(events)
    assert tally.forced_flushes == 1 and tally.summary_calls == 1


def test_flush_when_the_model_ignored_the_alert(tmp_path):
    agent, model, summ = make_agent(tmp_path, summary_script=[text_response("summary")])
    fill_until_alert(agent, model)  # the model answers with text: it ignored the alert
    events = step(agent, model, "next")
    flush = of(events, EvictionEvent)
    assert flush and flush[0].by == "flush"
    assert chat_starts(events)[0].estimated_tokens < agent.settings.budget * 0.70
    assert len(summ.requests) == 1


def test_summariser_failure_falls_back_to_a_deterministic_summary(tmp_path):
    failing = [RateLimitError("slow down")] * 3
    agent, model, summ = make_agent(tmp_path, summary_script=failing)
    fill_until_alert(agent, model)
    events = step(agent, model, "next")
    assert of(events, TurnEndEvent)[0].completed
    summary = of(events, SummaryEvent)[0]
    assert summary.method == "deterministic"
    assert re.search(r"- turn 1 \(2026-03-01T09:00:\d\dZ\): turn0 t0x0", summary.summary)
    assert len(summ.requests) == 2  # the whole batch, then the first chunk; then no more calls


def test_a_summariser_that_never_answers_is_waited_for_once_per_flush(tmp_path):
    """A summariser call that timed out was followed by the first chunk's call, which waited
    its whole deadline again: a stalled summariser doubled the wait of every flush."""
    with FakeAnthropicServer(context_window=WINDOW) as chat, FakeAnthropicServer() as stalled:
        stalled.enqueue(hang(30), times=10)
        agent = Agent.open(
            SQLiteStore(tmp_path / "stall.db"), "s", clock=clock(),
            model_client=AnthropicClient(base_url=chat.base_url, api_key="t", max_retries=0),
            summary_client=AnthropicClient(base_url=stalled.base_url, api_key="t",
                                           max_retries=0, timeout=1.0),
            settings=Settings(context_window=WINDOW, max_output_tokens=512, safety_margin=200))
        seen: list = []
        for i in range(40):
            seen += list(agent.step(f"turn{i} " + words(200, f"t{i}x")))
            assert seen[-1].completed, of(seen, ErrorEvent)
            if of(seen, SummaryEvent):
                break
        assert of(seen, SummaryEvent)[0].method == "deterministic"
        assert 10 - stalled.pending == 1  # one call waited for; none after it


def test_summariser_chunks_what_is_too_big_for_one_call():
    settings = Settings(context_window=4_000, max_output_tokens=256, safety_margin=200)
    turns = group_turns([Message("user", [{"type": "text", "text": f"turn {i} " + "z" * 1500}],
                                 i, created_at="2026-03-01T09:00:00Z") for i in range(1, 11)])
    client = ScriptedModel([lambda r, i=i: text_response(f"part {i}") for i in range(10)],
                           validate=True)
    summariser = Summariser(client, settings, TokenCounter())
    gen = summariser.summarise("prev", turns)
    events = []
    try:
        while True:
            events.append(next(gen))
    except StopIteration as stop:
        result = stop.value
    assert result.method == "chunked" and len(client.requests) > 1
    # Recursive: each chunk's call carries the summary so far.
    assert "<previous_summary>\nprev\n" in last_user_text(client.requests[0])
    assert "<previous_summary>\npart 0\n" in last_user_text(client.requests[1])
    assert all(len(canonical_json(r.messages)) < summariser.limit_chars() + 500
               for r in client.requests)
    assert len(chunk_turns(turns, summariser.limit_chars() // 2)) == len(client.requests)
    assert result.text == f"part {len(client.requests) - 1}"



def test_summariser_chunks_cjk_turns_by_what_they_weigh_not_their_characters():
    """A CJK character weighs three bytes: chunked by characters, each summary call of CJK
    turns was 98% of the chat's budget by a server counting two bytes a token, where its
    share is 0.6 of it."""
    settings = Settings(context_window=8_000, max_output_tokens=256, safety_margin=200)
    turns = group_turns([Message("user", [{"type": "text", "text": f"第{i}轮 " + "记" * 1500}],
                                 i, created_at="2026-03-01T09:00:00Z") for i in range(1, 21)])
    client = ScriptedModel([lambda r, i=i: text_response(f"part {i}") for i in range(30)],
                           validate=True)
    gen = Summariser(client, settings, TokenCounter()).summarise("", turns)
    try:
        while True:
            next(gen)
    except StopIteration:
        pass
    sizes = [count_tokens(r.to_api(), Counting(2, per_byte=True)) for r in client.requests]
    assert len(sizes) > 1 and max(sizes) <= 0.6 * settings.budget, (sizes, settings.budget)

def test_truncate_summary_keeps_the_newest_lines():
    text = "\n".join(f"- turn {i}" for i in range(100))
    short = truncate_summary(text, 200)
    assert len(short) <= 200 and short.endswith("- turn 99") and "older summary" in short
    assert short.splitlines()[1].startswith("- turn ")  # whole lines, the cut one dropped


def test_truncate_summary_of_one_long_line_keeps_its_newest_text():
    line = " ".join(f"fact{i}" for i in range(2_000))  # one line, far over the cap
    for cap in (1_000, 120, 30, 1):
        short = truncate_summary(line, cap)
        assert len(short) <= cap and short.endswith(line[-min(cap, 20):])
        assert len(short) >= cap - 1  # the room is used for text, not only for the note
    assert "…" in truncate_summary(line, 1_000)


def test_a_summary_with_lone_surrogates_is_stored_and_sent_as_valid_text(tmp_path):
    """The summariser's JSON may hold lone surrogate escapes ("\\ud800"), which no valid
    text holds: the next request could not be encoded and the chat ended in a traceback.
    Through the real SDK and the fake server: each becomes U+FFFD, like a chat reply."""
    def reply(body):
        if "running summary" in body["system"][0]["text"]:
            text = "The user likes \ud800 kiwis \udfff."
        else:
            text = "ok"
        return ModelResponse([{"type": "text", "text": text}], "end_turn", Usage())

    with FakeAnthropicServer(context_window=WINDOW, default_reply=reply) as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(SQLiteStore(tmp_path / "s.db"), "s", model_client=client,
                           summary_client=client, clock=clock(), settings=Settings(
                               context_window=WINDOW, max_output_tokens=512,
                               safety_margin=200))
        seen: list = []
        for i in range(40):
            seen += list(agent.step(f"turn{i} " + words(200, f"t{i}x")))
            assert seen[-1].completed, of(seen, ErrorEvent)
            if of(seen, SummaryEvent):
                break
        assert of(seen, SummaryEvent)[0].method == "summariser"
        assert list(agent.step("and after the summary?"))[-1].completed
    summary = agent.store.conversation_summary(agent.id)
    assert summary == "The user likes \ufffd kiwis \ufffd."
    assert of(seen, SummaryEvent)[0].summary == summary


def test_a_cjk_summary_stays_within_its_share_of_the_budget_by_the_servers_count(tmp_path):
    """The summary was measured at the request's average chars per token, which its ASCII
    tools and system prompt set: a summary in Chinese (deterministic pieces, the summariser
    down) took a third of the budget by the server's count, and the queue kept one turn."""
    cjk = "我们今天讨论了数据库迁移的计划和时间表以及需要注意的问题还有测试用例的编写方法"
    window = 12_000
    with FakeAnthropicServer(context_window=window, counting=Counting(per_byte=True)) as chat, \
            FakeAnthropicServer() as summary_server:
        summary_server.enqueue(http_error(400, "invalid_request_error", "down"), times=1_000)
        agent = Agent.open(
            SQLiteStore(tmp_path / "cjk.db"), "cjk", clock=clock(),
            model_client=AnthropicClient(base_url=chat.base_url, api_key="t", max_retries=0),
            summary_client=AnthropicClient(base_url=summary_server.base_url, api_key="t",
                                           max_retries=0),
            settings=Settings(context_window=window))
        shares = []
        for i in range(120):
            events = list(agent.step(f"第{i}条" + "".join(cjk[(i * 7 + k) % len(cjk)]
                                                         for k in range(60 + i % 200))))
            assert events[-1].completed, of(events, ErrorEvent)
            summary = agent.store.conversation_summary(agent.id)
            shares.append(Counting(per_byte=True).tokens(summary) / agent.settings.budget)
    assert summary_server.pending < 1_000 and max(shares) > 0.1  # it was summarised, often
    assert max(shares) <= 0.22, f"{max(shares):.0%} of the budget"


def test_a_429_during_compaction_of_a_one_line_summary_keeps_its_newest_text(tmp_path):
    from memgpt_lite.engine.errors import RateLimitError

    agent, model, summ = make_agent(tmp_path, summary_script=[RateLimitError("429")] * 4)
    cap, limit = agent.pager._summary_cap_chars(), agent.pager.summariser.limit_chars()
    assert cap < limit  # a summary between the two is sent to the summariser to compact
    words = " ".join(f"decision{i} made" for i in range(3_000))
    summary = words[len(words) - (cap + limit) // 2:]  # one line, over the cap
    agent.store.set_summary(agent.id, summary)
    events = step(agent, model, "hello")
    assert events[-1].completed and summ.requests  # the summariser was asked, and refused
    kept = agent.store.get_agent_by_id(agent.id).summary
    assert cap - 2 <= len(kept) <= cap and kept.endswith(summary[-(cap // 2):]), kept[:100]



def test_a_cjk_summary_over_its_cap_is_compacted_once_to_within_it(tmp_path):
    """The cap is a size in the counter's units: cut to that many characters, a CJK summary
    would still weigh three times the cap (and be compacted again)."""
    from memgpt_lite.engine.errors import RateLimitError

    agent, model, summ = make_agent(tmp_path, summary_script=[RateLimitError("429")] * 20)
    cap = agent.pager._summary_cap_chars()
    agent.store.set_summary(agent.id, "\n".join(f"- 第{i}轮：用户决定了一件事。" for i in
                                                range(cap // 5)))
    compactions = [len(of(step(agent, model, f"你好 {i}"), SummaryEvent)) for i in range(3)]
    assert compactions == [1, 0, 0], compactions
    kept = agent.store.get_agent_by_id(agent.id).summary
    assert agent.counter.estimate_text(kept) <= agent.pager.level(0.20)

# --------------------------------------------------------------------------- overflow


def test_prompt_too_long_calibrates_flushes_and_retries_once(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    for i in range(4):
        step(agent, model, f"turn{i} " + words(200, f"t{i}x"))
    actual = agent.settings.budget + 500
    events = step(agent, model, "again",
                  PromptTooLongError("too long", actual=actual, maximum=agent.settings.budget),
                  text_response("fits now"))
    assert of(events, TurnEndEvent)[0].completed
    assert of(events, EvictionEvent)[0].by == "overflow"
    failed, retried = model.requests[-2:]
    shrink = len(canonical_json(retried.to_api())) / len(canonical_json(failed.to_api()))
    assert shrink < 1
    # The retry was estimated from the provider's number, not from the old ratio.
    retry_estimate = chat_starts(events)[-1].estimated_tokens
    assert retry_estimate >= actual * shrink * 0.95


def test_context_window_exceeded_stop_reason_flushes_and_retries(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    for i in range(3):
        step(agent, model, f"turn {i}")
    events = step(agent, model, "again",
                  text_response("", stop_reason="model_context_window_exceeded"),
                  text_response("fits now"))
    end = of(events, TurnEndEvent)[0]
    assert end.completed and end.text == "fits now"
    assert of(events, EvictionEvent)[0].by == "overflow"


def test_a_second_overflow_fails_the_turn_but_keeps_the_text(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "first")
    events = step(agent, model, "second", PromptTooLongError("x"), PromptTooLongError("x"))
    assert not of(events, TurnEndEvent)[0].completed
    assert of(events, ErrorEvent)[0].error_kind == "overflow"
    assert agent.last_user_text() == "second"


# --------------------------------------------------------------------------- clip


def test_a_huge_paste_is_clipped_with_a_marker_and_kept_whole(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "hello")
    paste = "PASTE " + words(20_000, "p")
    events = step(agent, model, paste)
    clip = of(events, ClipEvent)[0]
    assert clip.what == "your message" and clip.original_chars == len(paste)
    sent = last_user_text(model.requests[-1])
    assert CLIP_NOTE.strip() in sent and "search it with conversation_search" in sent
    assert chat_starts(events)[-1].estimated_tokens <= agent.settings.budget
    (user,) = [m for m in agent.store.turn_messages(agent.id, 2) if m.role == "user"]
    assert user.content[0]["text"] == paste  # full text in recall
    assert CLIP_NOTE in user.context_content[0]["text"]  # the queue keeps the clipped form


def test_a_clipped_paste_keeps_the_room_there_is(tmp_path):
    """The clip cuts what is over the budget, not more: a paste many times the budget keeps
    the thousands of chars that fit (it used to keep 200 and leave half the budget empty)."""
    agent, model, _ = make_agent(tmp_path)
    step(agent, model, "hello")
    events = step(agent, model, "PASTE " + words(20_000, "p"))
    clip = of(events, ClipEvent)[-1]
    estimate = chat_starts(events)[-1].estimated_tokens
    assert 0.9 * agent.settings.budget < estimate <= agent.settings.budget
    assert clip.kept_chars > 10_000
    assert len(of(events, ClipEvent)) <= 3  # a cut that fell short is topped up, not repeated


def test_a_huge_tool_result_is_clipped_and_the_chain_stays_intact(tmp_path):
    agent, model, _ = make_agent(tmp_path)
    events = step(agent, model, "fetch it all",
                  tool_response([("archival_search", {"query": "blob 90000"}),
                                 ("archival_search", {"query": "blob 50"})]),
                  text_response("got it"))
    assert of(events, TurnEndEvent)[0].completed  # validate=True: the API accepted every call
    clip = of(events, ClipEvent)[0]
    assert clip.what == "a tool result" and clip.original_chars == 90_000
    results = model.requests[-1].messages[-1]["content"]
    assert [b["type"] for b in results][:2] == ["tool_result", "tool_result"]
    assert CLIP_NOTE in results[0]["content"] and results[0]["content"].count(CLIP_NOTE) == 1
    assert all(s.estimated_tokens <= agent.settings.budget for s in chat_starts(events))
    stored = [m for m in agent.store.turn_messages(agent.id, 1) if m.role == "user"][1]
    assert len(stored.content[0]["content"]) == 90_000


def test_every_paging_action_is_an_event(tmp_path):
    agent, model, _ = make_agent(tmp_path, summary_script=[text_response("s")] * 5)
    step(agent, model, "fetch", tool_response([("archival_search", {"query": "blob 6000"})]),
         text_response("fetched"))
    seen = []
    seen += fill_until_alert(agent, model, chars=900)
    seen += step(agent, model, "go on")  # ignored alert → flush
    seen += step(agent, model, "PASTE " + words(20_000, "p"))
    kinds = {e.kind for e in seen}
    assert {"pressure_alert", "fold", "eviction", "summary", "clip"} <= kinds
    stats = Tally().add_all(seen)
    assert stats.alerts >= 1 and stats.folds >= 1 and stats.forced_flushes >= 1 and stats.clips >= 1


def test_a_summary_that_cannot_shrink_is_not_compacted_again_and_again(tmp_path):
    # The tools and system prompt alone are over this budget: nothing can make it fit, and a
    # summary this short is not worth a summariser call, nor shortening (never erased).
    agent, model, summariser = make_agent(tmp_path, window=1_000)
    agent.store.set_summary(agent.id, "- short note")
    events = step(agent, model, "hi")
    assert len(summariser.requests) == 0
    assert agent.store.get_agent_by_id(agent.id).summary == "- short note"
    assert events[-1].completed and "over the budget" in " ".join(
        e.message for e in events if e.kind == "notice")


def test_images_too_big_for_the_window_are_named_as_what_does_not_fit(tmp_path):
    """Images cannot be clipped: when a message's images alone are over what the context
    holds, the notice and the turn's error say so (they blamed the tools, system prompt and
    core memory, and /retry could only fail the same way), and the message is kept."""
    import struct
    import zlib

    from memgpt_lite.engine.attachments import from_bytes
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore as Store
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    def png(shade: int, side: int = 1_568) -> bytes:  # priced at 1,600 tokens by its pixels
        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        raw = b"".join(b"\0" + bytes([shade, 0, 0]) * side for _ in range(side))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2,
                                                                   0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    window = 12_000
    with FakeAnthropicServer(context_window=window) as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(Store(tmp_path / "images.db"), "a", model_client=client,
                           summary_client=ScriptedModel([text_response("- s")] * 5),
                           settings=Settings(context_window=window), clock=clock())
        list(agent.step("hello"))
        images = [from_bytes(f"{k}.png", png(k)).block() for k in range(6)]
        events = list(agent.step("what do these show?", attachments=images))
    assert not events[-1].completed
    said = " ".join(e.message for e in events if e.kind in ("notice", "error"))
    assert "The 6 images of this message take about 9,600 tokens" in said, said
    assert "send fewer at once" in said
    assert "core memory alone" not in said, said
    assert agent.last_user_text() == "what do these show?"


def test_an_alert_and_a_fallback_summary_list_cjk_turns_by_their_first_words_only(tmp_path):
    """CJK has no spaces: a turn's first ten "words" were the whole message, so the alert
    listing the queue held every CJK turn whole (8,079 characters for three turns, about
    its own size again in tokens) and a failed summariser's summary kept them all."""
    failing = [RateLimitError("slow down")] * 6
    agent, model, _ = make_agent(tmp_path, window=20_000, summary_script=failing)
    message = "记忆是我们的宝藏我们要好好保存它" * 150
    by_bytes = lambda r: text_response("好", usage=Usage(  # noqa: E731 - as a byte tokenizer
        count_tokens(r.to_api(), Counting(per_byte=True)), 5))
    seen: list = []
    for _ in range(12):
        seen += step(agent, model, message, by_bytes)
        if of(seen, PressureAlertEvent):
            break
    alert = of(seen, PressureAlertEvent)[0]
    rows = re.findall(r"^- \d+ · .*$", alert.text, re.M)
    assert rows and all(len(row) < 200 for row in rows), rows
    seen = []
    while not of(seen, SummaryEvent):
        seen += step(agent, model, message, by_bytes)
    summary = of(seen, SummaryEvent)[0]
    assert summary.method == "deterministic"
    assert all(len(line) < 250 for line in summary.summary.splitlines()), summary.summary

"""How conversation_search spends the model's tokens (recall_page.py and the agent's view
of what the model already sees)."""

from __future__ import annotations

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.recall_page import page_lines, window
from memgpt_lite.engine.records import SearchHit
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response


def hit(i, text, day="2025-03-01", role="user", context=()):
    return SearchHit(i, text, f"{day}T10:00:00Z", role=role, turn_id=i, context=list(context))


def test_a_long_message_shows_the_sentences_that_match_with_markers():
    filler = "We talked about the weather and nothing else at all. " * 12
    text = filler + "My passport expires in June, so I must renew it soon. " + filler
    shown = window(hit(7, text), "When does the passport expire?", limit=200)
    assert "passport expires in June" in shown
    assert shown.startswith("… ") and " … [" in shown and "turn:7 shows it whole" in shown
    assert len(shown) < 200 + 60
    assert window(hit(8, "short text"), "passport") == "short text"


def test_a_page_names_each_day_once_and_shows_identical_texts_once():
    hits = [hit(1, "Biscuit is my dog", "2025-03-01"), hit(2, "Lunch was fine", "2025-03-05"),
            hit(3, "Biscuit is my dog", "2025-03-09"), hit(4, "Biscuit loves the park",
                                                           "2025-03-01")]
    lines = page_lines(hits, "Biscuit")
    assert lines == ["2025-03-01", "- user: Biscuit is my dog (also said 2025-03-09)",
                     "- user: Biscuit loves the park", "2025-03-05", "- user: Lunch was fine"]
    old = page_lines(hits, "Biscuit", layout=1)
    assert old[0] == "- 2025-03-01 10:00 user: Biscuit is my dog" and len(old) == 4


def test_search_never_returns_the_current_turn_and_ranks_the_queue_last(tmp_path):
    store = open_store(tmp_path / "a.db")
    search = ("conversation_search", {"query": "Biscuit dog"})
    model = ScriptedModel([text_response("Noted."), text_response("Sure."),
                           tool_response([search]), text_response("Found it.")], validate=True)
    agent = Agent.open(store, "t", model_client=model)
    list(agent.step("My dog is called Biscuit."))
    list(agent.step("Biscuit the dog chewed my shoe today."))
    store.set_in_context(agent.id, [1], False)  # turn 1 evicted; turn 2 still in the queue
    events = list(agent.step("What is my dog called? Biscuit?"))
    result = next(e for e in events if e.kind == "tool_result").result.content
    assert "What is my dog called" not in result
    evicted, queued = result.index("called Biscuit."), result.index("chewed my shoe")
    assert evicted < queued  # the evicted turn first, though the queued one matches more
    agent.close()
    store.close()


def test_layout_4_names_only_a_conversation_that_is_not_the_current_one():
    hits = [hit(1, "Biscuit is my dog", "2025-03-01"), hit(2, "Biscuit had a bath", "2025-03-02")]
    hits[0].conversation, hits[1].conversation = 2, 1
    assert page_lines(hits, "Biscuit", layout=4, conversations=True, current=2) == [
        "2025-03-01", "- user: Biscuit is my dog", "2025-03-02 · conv 1",
        "- user: Biscuit had a bath"]
    # Layout 3 (recordings made with it replay so) names every one.
    assert page_lines(hits, "Biscuit", layout=3, conversations=True, current=2)[0] == \
        "2025-03-01 · conv 2"


def test_a_reply_of_one_or_two_words_is_passed_over_for_the_next_message(store_target):
    """A piped conversation answered "OK." turn by turn: under a question, layout 4 shows
    the next message that says something; layout 3 (and its replays) the "OK."."""
    with open_store(store_target) as store:
        agent = Agent.open(store, "t", model_client=ScriptedModel([]), lock_wait=None)
        try:
            for text in ("Caroline: How is Pepper doing after the vet?", "Melanie: She had "
                         "surgery on her paw but is fine now.", "Weather is mild."):
                agent.model_client = ScriptedModel([text_response("OK.")])
                list(agent.step(text))
            store.set_in_context(agent.id, [1, 2, 3], False)
            found = {}
            for layout in (3, 4):
                agent.tools.layout = layout
                found[layout] = agent.tools.execute("conversation_search",
                                                    {"query": "How is Pepper after the vet?"})
        finally:
            agent.close()
    assert "  ↳ assistant: OK." in found[3].text
    assert "  ↳ user: Melanie: She had surgery" in found[4].text
    assert "↳ assistant: OK." not in found[4].text


def test_layout_5_shows_a_reply_whole_up_to_where_a_hit_is_windowed():
    """A reply cut short is tokens spent on text the model cannot read whole: from layout 5 a
    reply is cut only past HIT_CHARS (500), as a hit is windowed; layout 4 cut it at 300."""
    answer = "Melanie: " + "She had surgery on her paw and is fine now. " * 9  # ~400 chars
    question = hit(1, "Caroline: How is Pepper doing after the vet?",
                   context=[hit(2, answer, role="assistant")])
    new = page_lines([question], "Pepper vet", layout=5)
    assert new[-1] == f"  ↳ assistant: {answer.strip()}"
    old = page_lines([question], "Pepper vet", layout=4)
    assert old[-1].startswith("  ↳ assistant: Melanie: She had") and " …[+" in old[-1]
    longer = hit(3, "x " * 400, role="assistant")  # 799 characters: cut at 500 still
    question.context = [longer]
    assert page_lines([question], "Pepper vet", layout=5)[-1].endswith(" …[+299 chars]")

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memgpt_lite.engine import search
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.search import match_expression, query_terms
from memgpt_lite.engine.store.sqlite.store import SQLiteStore


def text_msg(role, text, turn, created_at=None):
    return Message(role, [{"type": "text", "text": text}], turn, created_at=created_at)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """One store with a small realistic history, shared by the read-only tests."""
    s = SQLiteStore(tmp_path_factory.mktemp("search") / "db")
    agent = s.create_agent("a", {}, {})
    texts = [
        ("user", "部署博客前必须运行 hexo g", "2025-03-01T09:00:00Z"),
        ("assistant", "好的，我记住了：部署前先运行 hexo g 生成静态文件。", "2025-03-01T09:00:05Z"),
        ("user", "My dog Rex is a beagle and he hates the vacuum cleaner.", "2025-03-02T10:00:00Z"),
        ("user", "What did I say about the weather? It was raining all day.", "2025-03-03T10:00:00Z"),
        ("assistant", "I deployed the site to Netlify after running the build.", "2025-03-04T10:00:00Z"),
        ("user", "The meeting with Sarah is moved to Thursday at 3pm.", "2025-03-05T23:59:59Z"),
        ("user", "東京の天気は晴れです。Tokyo weather is sunny.", "2025-03-06T08:00:00Z"),
        ("user", "나는 김치찌개를 좋아해요", "2025-03-07T08:00:00Z"),
    ]
    for i, (role, text, at) in enumerate(texts, 1):
        s.add_message(agent.id, text_msg(role, text, i, at))
    s.add_message(agent.id, Message("assistant", [
        {"type": "tool_use", "id": "t1", "name": "conversation_search", "input": {"query": "zebra"}}], 9))
    s.add_message(agent.id, Message("user", [
        {"type": "tool_result", "tool_use_id": "t1", "content": "zebra results"}], 9))
    yield s, agent.id
    s.close()


def texts(page):
    return [h.text for h in page.hits]


def test_cjk_query_finds_message_sharing_only_a_two_character_word(seeded):
    s, aid = seeded
    page = s.search_messages(aid, "部署前要做什么")
    assert "部署博客前必须运行 hexo g" in texts(page)


def test_mixed_cjk_latin_and_single_character_queries(seeded):
    s, aid = seeded
    assert s.search_messages(aid, "hexo").total == 2  # Latin word glued to CJK still found
    assert s.search_messages(aid, "东京 天気").total >= 1  # 天気 is a bigram in the stored text
    assert s.search_messages(aid, "博").total == 1  # one character: prefix over bigrams
    assert s.search_messages(aid, "김치찌개").total == 1
    assert s.search_messages(aid, "静态文件 hexo").hits[0].text.startswith("好的")


def test_stemming_and_stop_words(seeded):
    s, aid = seeded
    assert query_terms("what did I say about my dog") == ["dog"]
    assert texts(s.search_messages(aid, "what did I say about my dog"))[0].startswith("My dog Rex")
    assert texts(s.search_messages(aid, "deploying"))[0].startswith("I deployed")
    assert s.search_messages(aid, "meetings").total == 1
    # only stop words: searched as they are rather than returning nothing
    assert query_terms("what about it") == ["what", "about", "it"]


def test_any_term_matching_ranks_by_bm25(seeded):
    s, aid = seeded
    page = s.search_messages(aid, "when is my meeting with Sarah and the zoo trip")
    assert page.total == 1 and "Sarah" in page.hits[0].text
    both = s.search_messages(aid, "weather Tokyo")
    assert both.total == 2 and "Tokyo" in both.hits[0].text  # matches both terms: ranked first


def test_tool_inputs_and_results_are_not_searchable(seeded):
    s, aid = seeded
    assert s.search_messages(aid, "zebra").total == 0


def test_hits_carry_role_turn_and_time(seeded):
    s, aid = seeded
    hit = s.search_messages(aid, "beagle").hits[0]
    assert (hit.role, hit.turn_id, hit.created_at) == ("user", 3, "2025-03-02T10:00:00Z")
    assert hit.score > 0


def test_date_range_is_inclusive_by_day(seeded):
    s, aid = seeded
    q = "weather meeting beagle deployed"
    assert s.search_messages(aid, q).total == 5
    assert s.search_messages(aid, q, start_date="2025-03-03", end_date="2025-03-05").total == 3
    assert s.search_messages(aid, q, end_date="2025-03-05").total == 4  # 23:59:59 counts
    assert s.search_messages(aid, q, start_date="2025-03-06").total == 1
    assert s.search_messages(aid, q, start_date="2026-01-01").total == 0


def test_pagination(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    s.add_messages(aid, [text_msg("user", f"note number {i} about apples", i) for i in range(12)])
    p1 = s.search_messages(aid, "apples")
    assert (len(p1.hits), p1.page, p1.pages, p1.total) == (5, 1, 3, 12)
    p3 = s.search_messages(aid, "apples", page=3)
    assert (len(p3.hits), p3.pages, p3.total) == (2, 3, 12)
    beyond = s.search_messages(aid, "apples", page=9)
    assert (beyond.hits, beyond.page, beyond.pages, beyond.total) == ([], 9, 3, 12)
    ids = [h.id for p in (1, 2, 3) for h in s.search_messages(aid, "apples", page=p).hits]
    assert len(set(ids)) == 12  # pages do not overlap
    assert len(s.search_messages(aid, "apples", per_page=10).hits) == 10


def test_passage_search_tags_and_delete(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    p1 = s.add_passage(aid, "Ann's sister lives in Lisbon", ["family"])
    s.add_passage(aid, "Lisbon trip planned for May", ["travel", "plans"])
    s.add_passage(aid, "Ann prefers green tea", [])
    assert s.search_passages(aid, "Lisbon").total == 2
    assert texts(s.search_passages(aid, "Lisbon", tags=["family"])) == ["Ann's sister lives in Lisbon"]
    assert s.search_passages(aid, "Lisbon", tags=["plans", "family"]).total == 2
    assert s.search_passages(aid, "Lisbon", tags=["work"]).total == 0
    assert s.search_passages(aid, "Lisbon").hits[0].tags in (["family"], ["travel", "plans"])
    assert s.delete_passages(aid, [p1]) == 1
    assert s.search_passages(aid, "sister").total == 0
    assert [h.text for h in s.list_passages(aid)][0] == "Lisbon trip planned for May"
    assert s.integrity_problems() == []


def test_near_duplicate(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    pid = s.add_passage(aid, "The user's dog is named Rex and he is a beagle.")
    assert s.near_duplicate(aid, "  the USER'S dog is named   rex and he is a beagle.  ").id == pid
    assert s.near_duplicate(aid, "The user's dog is named Rex and he is a beagle!").id == pid
    assert s.near_duplicate(aid, "The user's cat is named Tom and she is a tabby.") is None
    assert s.near_duplicate(aid, "???") is None
    pid2 = s.add_passage(aid, "!!!")
    assert s.near_duplicate(aid, "!!!").id == pid2


HOSTILE = [
    "", " ", '"', '""', "'", "it's", "don't", "e-mail", "state-of-the-art", "AND", "OR", "NOT",
    "NEAR", "NEAR(a b, 2)", "a AND", "OR OR OR", "NOT dog", "a:b", "col:value", "index_text:x",
    "*", "dog*", "^start", "(unbalanced", "unbalanced)", '"unbalanced', "a + b - c", "{a b}",
    "🙂🙂", "🙂 dog", "\x00", "\ud800", "-", "--", "/* */", "'; DROP TABLE messages; --",
    "部署前要做什么\"", "x" * 5000, " ".join(["word"] * 500), "%_%", "\\", "[]", "$$",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(seeded, query):
    s, aid = seeded
    page = s.search_messages(aid, query)
    assert page.total >= 0
    s.search_passages(aid, query, tags=[query])
    expr = match_expression(query)
    assert expr is None or expr.startswith('"')


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text())
def test_no_string_makes_search_raise(seeded, query):
    s, aid = seeded
    s.search_messages(aid, query, page=2)
    s.search_passages(aid, query)
    s.near_duplicate(aid, query)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(HOSTILE[1:30] + ["dog", "部署", "hexo"]), max_size=6).map(" ".join))
def test_combinations_of_operators_never_raise(seeded, query):
    s, aid = seeded
    s.search_messages(aid, query)


# ---------------------------------------------------------------- raw questions (recall)


def test_question_framing_words_are_stop_words():
    assert query_terms("What kind of dance class is Leo likely taking recently?") == [
        "dance", "class", "leo", "taking"]


def test_irregular_verb_forms_match_the_past_tense(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    s.add_messages(aid, [text_msg("user", "Caroline: I went to a support group yesterday.", 1),
                         text_msg("user", "Caroline: We saw a grizzly bear from the car.", 2),
                         text_msg("user", "Caroline: The weather was lovely.", 3)])
    assert texts(s.search_messages(aid, "When did Caroline go to the group?"))[0].endswith(
        "support group yesterday.")
    assert texts(s.search_messages(aid, "What animal did Caroline see?"))[0].endswith("car.")


def test_long_words_also_match_by_prefix(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    s.add_messages(aid, [text_msg("user", "I'm allergic to peanuts.", 1),
                         text_msg("user", "I take my medication every morning.", 2),
                         text_msg("user", "Allergies to medicine run in my family.", 3)])
    assert texts(s.search_messages(aid, "food allergies"))[0].startswith("Allergies")
    assert "I'm allergic to peanuts." in texts(s.search_messages(aid, "food allergies"))
    assert "I take my medication every morning." in texts(s.search_messages(aid, "medicine"))
    assert match_expression("allergies") == '"allergies" OR "aller"*'
    assert match_expression("部署前") == '"部署" OR "署前"'  # no prefixes or verbs for CJK


def test_neighbouring_match_lifts_a_reply_above_an_isolated_mention(tmp_path):
    s = SQLiteStore(tmp_path / "db")
    aid = s.create_agent("a", {}, {}).id
    s.add_messages(aid, [
        text_msg("user", "Oscar: How is Pepper doing after the surgery?", 1),
        text_msg("assistant", "Nadia: She is fine, the surgery went well.", 1),
        text_msg("user", "Oscar: I watched a documentary about surgery.", 2),
        text_msg("assistant", "Nadia: Nice, any good ones?", 2)])
    page = s.search_messages(aid, "Pepper surgery")
    assert page.total == 3  # only matching messages are returned; neighbours only re-rank
    assert texts(page)[:2] == ["Oscar: How is Pepper doing after the surgery?",
                               "Nadia: She is fine, the surgery went well."]


# ---------------------------------------------------------------- the head, re-ranked (layout 3)


@pytest.mark.parametrize("query, asks", [
    ("When did Caroline go to the support group?", True),
    ("How long has she had her friends?", True),
    ("What year did he move?", True),
    ("What did Caroline research?", False),
])
def test_asks_time(query, asks):
    assert search.asks_time(query) is asks


@pytest.mark.parametrize("text, says", [
    ("I went to a support group yesterday.", True),
    ("We went camping two weekends ago!", True),
    ("I joined a new group last Tues.", True),
    ("It happened in 2022.", True),
    ("I love the support group.", False),
])
def test_says_time(text, says):
    assert search.says_time(text) is says


def test_named_months_need_a_preposition_or_a_year():
    assert search.named_months("When did she go camping in June?") == {(None, 6)}
    assert search.named_months("What happened in May 2023?") == {(2023, 5)}
    assert search.named_months("What happened August, 2022?") == {(2022, 8)}
    assert search.named_months("I may go; she may come") == set()
    assert search.in_months("2023-07-03T10:00:00Z", {(None, 6)})  # told the month after
    assert not search.in_months("2023-08-03T10:00:00Z", {(None, 6)})
    assert search.in_months("2023-01-03T10:00:00Z", {(2022, 12)})
    assert not search.in_months("2024-06-03T10:00:00Z", {(2023, 6)})


def test_coverage_counts_terms_by_prefix_and_verb_forms():
    terms = search.query_terms("When did Caroline go to the LGBTQ support group?")
    assert search.coverage(terms, "Caroline: I went to a LGBTQ support group yesterday") == 1.0
    assert search.coverage(terms, "Melanie: groups are great") == 0.2  # "group" by prefix
    assert search.coverage([], "anything") == 0.0


def test_rerank_weights(monkeypatch):
    head = [(1, 2.5, "pepper pepper pepper", "2023-05-01T00:00:00Z"),
            (2, 2.0, "pepper had surgery last week", "2023-06-02T00:00:00Z"),
            (3, 2.0, "pepper surgery", "2023-03-01T00:00:00Z")]
    for name in ("COVERAGE_WEIGHT", "TIME_WEIGHT", "DATE_WEIGHT"):
        monkeypatch.setattr(search, name, 0.0)
    assert search.rerank("When was Pepper's surgery?", head) == [1, 2, 3]  # BM25's order
    monkeypatch.setattr(search, "COVERAGE_WEIGHT", 1.0)
    assert search.rerank("Pepper surgery", head) == [2, 3, 1]  # every term beats repeats
    monkeypatch.setattr(search, "COVERAGE_WEIGHT", 0.0)
    monkeypatch.setattr(search, "TIME_WEIGHT", 1.0)
    assert search.rerank("When was Pepper's surgery?", head) == [2, 1, 3]
    assert search.rerank("What was Pepper's surgery?", head) == [1, 2, 3]  # not about time
    monkeypatch.setattr(search, "TIME_WEIGHT", 0.0)
    monkeypatch.setattr(search, "DATE_WEIGHT", 1.0)
    assert search.rerank("Pepper's surgery in March?", head) == [3, 1, 2]

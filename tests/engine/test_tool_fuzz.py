"""The model cannot crash the process: every tool takes any JSON value the model can send
(huge and negative numbers, floats, nesting, long, unicode and surrogate strings, nulls) and
answers with a result or an is_error result, never an exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.memory import (
    MEMORY_TOOL_NAMES,
    MemoryTools,
    ToolOutcome,
    memory_tool_schemas,
)
from memgpt_lite.engine.paging import EVICT_TURNS_SCHEMA
from memgpt_lite.engine.records import ModelResponse, Usage
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
TEXT = st.one_of(
    st.text(st.one_of(st.characters(), SURROGATE), max_size=40),
    st.sampled_from(["", " ", "human", "persona", "x" * 30_000, "🦜" * 500, "\x00\x01",
                     'OR AND NEAR "unbalanced * ( ^', "中文の検索", "2025-03-07",
                     "2025-13-45", "9999-12-31", "0000-01-01"]))
HUGE = st.integers(min_value=4_301, max_value=6_000).map(lambda digits: 10**digits)
INTEGER = st.one_of(st.integers(), HUGE, st.sampled_from([0, -1, 1, 2, 2**31, 2**62, -2**63,
                                                          2**64, 10**30, -(10**30)]))
SCALAR = st.one_of(st.none(), st.booleans(), INTEGER, TEXT,
                   st.floats(allow_nan=False, allow_infinity=False))
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=15)
SCHEMAS = {t["name"]: t["input_schema"] for t in memory_tool_schemas() + [EVICT_TURNS_SCHEMA]}


def plausible(spec: dict, key: str = "") -> st.SearchStrategy:
    """Values of about the right type, so that many inputs get past the type checks and
    reach the store."""
    kind = spec.get("type")
    if kind == "integer":
        return st.one_of(INTEGER, st.integers(min_value=1, max_value=8))
    if kind == "array":
        return st.lists(plausible(spec.get("items", {})), max_size=30) | st.just(list(range(2_000)))
    if key == "label":
        return st.one_of(st.sampled_from(["human", "persona"]), TEXT)
    return TEXT


def arguments(name: str) -> st.SearchStrategy:
    props, required = SCHEMAS[name]["properties"], SCHEMAS[name]["required"]
    typed = st.fixed_dictionaries(
        {k: plausible(props[k], k) for k in required},
        optional={k: plausible(v, k) for k, v in props.items() if k not in required})
    shaped = st.fixed_dictionaries({}, optional={k: st.one_of(plausible(v, k), JSON)
                                                 for k, v in props.items()})
    extra = st.dictionaries(TEXT, JSON, max_size=2)
    return st.one_of(typed, typed, shaped,
                     shaped.flatmap(lambda d: extra.map(lambda e: {**e, **d})), JSON)


def seeded_agent(tmp_path) -> tuple[SQLiteStore, Agent]:
    store = SQLiteStore(tmp_path / "fuzz.db")
    script = [tool_response([("archival_insert", {"content": f"fact {i} about otters"})])
              if i % 2 == 0 else text_response(f"reply {i} about otters") for i in range(12)]
    agent = Agent.open(store, "f", model_client=ScriptedModel(script))
    for i in range(6):
        assert list(agent.step(f"message {i} about otters and 中文"))[-1].completed
    return store, agent


def assert_answer(outcome: ToolOutcome) -> None:
    assert isinstance(outcome, ToolOutcome) and isinstance(outcome.is_error, bool)
    outcome.text.encode("utf-8")  # sendable back to the model as it is


def test_every_memory_tool_answers_any_json(tmp_path):
    store, agent = seeded_agent(tmp_path)
    tools = MemoryTools(store, agent.id)

    @settings(max_examples=600, deadline=None, database=None)
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(MEMORY_TOOL_NAMES))
        assert_answer(tools.execute(name, data.draw(arguments(name))))

    check()
    assert store.integrity_problems() == []


def test_evict_turns_answers_any_json(tmp_path):
    store, agent = seeded_agent(tmp_path)

    @settings(max_examples=300, deadline=None, database=None)
    @given(arguments("evict_turns"))
    def check(args):
        inputs = agent._context_inputs([])
        outcome, events = agent.pager.evict_tool(args, inputs, store.max_turn_id(agent.id) + 1)
        assert_answer(outcome)

    check()
    assert store.integrity_problems() == []


def test_a_page_beyond_any_number_sqlite_holds_is_an_error_the_model_reads(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    model = ScriptedModel([tool_response([("archival_search", {"query": "x", "page": 2**62}),
                                          ("conversation_search", {"query": "x",
                                                                   "page": -(2**70)})]),
                           text_response("Sorry.")], validate=True)
    agent = Agent.open(store, "a", model_client=model)
    events = list(agent.step("search"))
    results = [e.result for e in events if e.kind == "tool_result"]
    assert [r.is_error for r in results] == [True, True] and events[-1].completed
    assert "between 1 and 1,000" in results[0].content


def test_every_argument_is_bounded_by_its_schema():
    for name, schema in SCHEMAS.items():
        for key, spec in schema["properties"].items():
            bound = {"integer": "maximum", "string": "maxLength", "array": "maxItems",
                     "boolean": "type"}  # true or false: bounded by its type
            assert bound[spec["type"]] in spec, (name, key)


def test_a_paused_reply_ending_in_whitespace_is_not_resent_as_an_invalid_prefill(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    paused = ModelResponse([{"type": "text", "text": "Working on it… \n"}], "pause_turn",
                           Usage(10, 5))
    model = ScriptedModel([paused, text_response("Done.")], validate=True)
    agent = Agent.open(store, "a", model_client=model)
    events = list(agent.step("a long task"))
    assert events[-1].completed and events[-1].text == "Done.", [
        e for e in events if e.kind == "error"]
    assert validate_request(model.requests[1].to_api()) is None
    assert model.requests[1].messages[-1]["content"][-1]["text"] == "Working on it…"

"""One rule for text at every boundary: what is not valid Unicode becomes U+FFFD, so
whatever the store accepts can be searched, exported, recorded and replayed."""

from __future__ import annotations

import json

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.store import transfer
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.text import clean_text, clean_value, quoted
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

# What Python makes of `printf 'bad \xff\xfe zebra'` on stdin (surrogateescape).
UNDECODABLE = b"bad \xff\xfe zebra".decode("utf-8", "surrogateescape")


def test_clean_text_replaces_what_is_not_unicode_and_keeps_the_rest():
    assert clean_text(UNDECODABLE) == "bad \ufffd\ufffd zebra"
    assert clean_text("pair \ud83d\ude00 joined") == "pair \U0001f600 joined"
    assert clean_text("lone \ud800") == "lone \ufffd"
    plain = "ümlaut 中文 ok"
    assert clean_text(plain) is plain
    assert clean_value({"k\udcff": ["x", {"y": "\udcfe"}], "n": 1}) == {
        "k\ufffd": ["x", {"y": "\ufffd"}], "n": 1}


def test_undecodable_input_is_stored_searched_exported_recorded_and_replayed(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    model = ScriptedModel([
        tool_response([("core_memory_append", {"label": "human",
                                               "content": "Wrote bad \udcff bytes."})]),
        text_response("Odd bytes \ud800 there."),
        tool_response([("conversation_search", {"query": "zebra \udcff"})]),
        text_response("Found it.")], validate=True)
    agent = Agent.open(store, "a", model_client=model)
    path = tmp_path / "session.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        first = list(recording.recorded_step(agent, recorder, UNDECODABLE))
        second = list(recording.recorded_step(agent, recorder, "what did I send?"))
    assert first[-1].completed and second[-1].completed
    assert first[-1].text == "Odd bytes \ufffd there."
    found = next(e.result.content for e in second if e.kind == "tool_result")
    assert "bad \ufffd\ufffd zebra" in found
    assert "Wrote bad \ufffd bytes." in agent.blocks()[1].value
    exported = json.dumps(transfer.export_agent(store, "a"), ensure_ascii=False)
    assert "bad \ufffd\ufffd zebra" in exported.encode("utf-8").decode("utf-8")
    assert path.read_bytes().decode("utf-8")  # strict UTF-8 throughout
    report = replay_mod.replay(path, strict=True)
    assert report.ok, report.divergences


def test_an_import_with_lone_surrogates_is_stored_with_the_rule(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    agent = Agent.open(store, "a", model_client=ScriptedModel([text_response("Hi.")]))
    assert list(agent.step("hello"))[-1].completed
    doc = json.loads(json.dumps(transfer.export_agent(store, "a")))
    doc["conversations"][0]["summary"] = "sum \udcff mary"
    doc["blocks"][0]["value"] = "val \ud800 ue"
    doc["messages"][0]["content"][0]["text"] = "hel \udcfe lo"
    copy = transfer.import_agent(store, doc, "b")
    assert copy.summary == "sum \ufffd mary"
    assert store.get_blocks(copy.id)[0].value == "val \ufffd ue"
    assert store.all_messages(copy.id)[0].content[0]["text"] == "hel \ufffd lo"
    json.dumps(transfer.export_agent(store, "b"), ensure_ascii=False).encode("utf-8")


def test_a_project_folder_whose_name_is_not_utf8_is_a_project_of_its_own(tmp_path):
    """A chat in such a folder crashed with UnicodeEncodeError when the model wrote the
    project block; and U+FFFD would have made every such folder the same project."""
    import os

    from memgpt_lite.engine.project import project_root

    roots = []
    for raw in (b"pr\xff", b"pr\xfe"):
        folder = os.fsencode(tmp_path) + b"/" + raw
        os.mkdir(folder)
        roots.append(str(project_root(os.fsdecode(folder))))
    store = SQLiteStore(tmp_path / "a.db")
    model = ScriptedModel([
        tool_response([("core_memory_append", {"label": "project", "content": "Tabs."})]),
        text_response("Noted.")], validate=True)
    agent = Agent.open(store, "a", model_client=model, project=roots[0])
    path = tmp_path / "session.jsonl"
    with recording.Recorder(path) as recorder:
        recording.record_header(agent, recorder)
        assert list(recording.recorded_step(agent, recorder, "we use tabs"))[-1].completed
    assert agent.project == f"{tmp_path}/pr\\xff"
    assert "Tabs." in next(b.value for b in agent.blocks() if b.label == "project")
    agent.use_project(roots[1])  # the other folder sees its own project block
    assert "Tabs." not in next(b.value for b in agent.blocks() if b.label == "project")
    agent.use_project(roots[0])
    assert "Tabs." in next(b.value for b in agent.blocks() if b.label == "project")
    assert replay_mod.replay(path, strict=True).ok


def test_quoted_names_a_bad_input_with_its_bytes_and_its_closing_quote():
    assert quoted("\udcff") == "'\\xff'"
    assert quoted("a\\udcffb") == repr("a\\udcffb")  # a backslash typed as such stays one
    assert quoted("x" * 100, 20) == "'" + "x" * 17 + "…'"
    assert quoted(5) == "5" and quoted("\x1b[31m") == "'\\x1b[31m'"

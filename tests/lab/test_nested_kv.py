"""Nested KV files (memgpt_lite/lab/nested_kv.py) as they come: a file whose answer is not
well defined, or that is saved with a byte-order mark or cut short, is refused with one
sentence naming the file, the example or line, and what is wrong; nothing is scored."""

from __future__ import annotations

import json

import pytest

from memgpt_lite.lab import nested_kv
from memgpt_lite.lab.harness import ScenarioError

GOOD = {"ordered_kv_records": [["a", "b"], ["b", "c"]], "key": "a"}


@pytest.mark.parametrize("example,says", [
    ({"ordered_kv_records": [["a", "b"], ["b", "a"]], "key": "a"},
     "example 0: the chain from key 'a' comes back to key 'a'"),
    ({"ordered_kv_records": [["a", "b"], ["a", "z"]], "key": "a"},
     "example 0: key 'a' is given two values ('b' and 'z')"),
    ({**GOOD, "value": " "}, "example 0: the final value of key 'a' is empty"),
    ({"ordered_kv_records": [["", ""]], "key": ""}, "'key' must be a text that is not empty"),
], ids=["cycle", "two values", "empty answer", "empty key"])
def test_an_example_without_one_final_value_is_refused(example, says, tmp_path):
    """Each was scored: a cycle or an empty answer (in every reply) as correct whatever the
    model said, a key given two values against whichever came last."""
    path = tmp_path / "kv.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(example) + "\n")
    with pytest.raises(ScenarioError, match=f"^{path}: ") as caught:
        nested_kv.load_nested_kv(path)
    assert says.replace("example 0", "example 1") in str(caught.value)


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad's UTF-8 starts with one; the file was refused as neither JSON nor JSONL."""
    for text in (json.dumps(GOOD) + "\n", json.dumps([GOOD])):
        path = tmp_path / "kv.jsonl"
        path.write_text("\ufeff" + text, encoding="utf-8")
        [example] = nested_kv.load_nested_kv(path)
        assert (example.answer, example.level) == ("c", 1)


def test_a_jsonl_line_cut_short_is_named(tmp_path):
    path = tmp_path / "kv.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)[:20])
    with pytest.raises(ScenarioError, match=f"^{path}: line 2 is not JSON"):
        nested_kv.load_nested_kv(path)


def test_an_example_whose_model_call_failed_is_not_scored(tmp_path):
    """It was scored as a wrong answer: a bad key read as a model that cannot follow."""
    from memgpt_lite.engine.errors import AuthError
    from memgpt_lite.lab.scripted import ScriptedModel, text_response

    path = tmp_path / "kv.jsonl"
    path.write_text((json.dumps(GOOD) + "\n") * 2)
    model = ScriptedModel([AuthError("Bad key."), text_response("c")])
    result = nested_kv.run_nested_kv(path, model)
    assert result["overall"] == {"n": 1, "accuracy": 1.0}
    assert result["failed"] == [{"key": "a", "level": 1, "error": "Bad key."}]
    with pytest.raises(ScenarioError, match="the model call failed for every example"):
        nested_kv.run_nested_kv(path, ScriptedModel([AuthError("Bad key.")] * 2))


@pytest.mark.parametrize("reply, correct", [
    ("123", False), ("The value is 12345.", False), ("a-12", False), ("12_b", False),
    ("12", True), ("The value is 12.", True), ("**12**", True), ("it is `12`", True),
])
def test_a_value_scores_only_whole(reply, correct):
    """A reply of "123" scored for the value "12": a substring of another value counted."""
    assert nested_kv.holds_value(reply, "12") is correct


def test_a_reply_holding_a_longer_value_is_wrong(tmp_path):
    from memgpt_lite.lab.scripted import ScriptedModel, text_response

    path = tmp_path / "kv.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    result = nested_kv.run_nested_kv(path, ScriptedModel([text_response("cd")]))
    assert result["overall"] == {"n": 1, "accuracy": 0.0}

"""LoCoMo files (memgpt_lite/lab/locomo.py) as they come: a bad one is one sentence naming
the file and the sample, and the printed tables say what their n leaves out."""

from __future__ import annotations

import copy
import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from memgpt_lite.lab import locomo
from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.terminal import eval_commands, render

SAMPLE = {"sample_id": "s1",
          "conversation": {"speaker_a": "Ann", "speaker_b": "Bo",
                           "session_1_date_time": "1:56 pm on 8 May, 2023",
                           "session_1": [
                               {"speaker": "Ann", "dia_id": "D1:1",
                                "text": "I adopted a dog named Pepper."},
                               {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely!"}]},
          "qa": [{"question": "What is the name of Ann's dog?", "answer": "Pepper",
                  "evidence": ["D1:1"], "category": 4}]}


@pytest.fixture
def console(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(render, "make_console",
                        lambda **_: Console(file=out, width=200, color_system=None))
    return out


def write(tmp_path, change) -> str:
    sample = copy.deepcopy(SAMPLE)
    change(sample)
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return str(path)


def run(path: str) -> int:
    return eval_commands.cmd_eval(SimpleNamespace(scenario="locomo", file=path, json=None,
                                                  retrieval_only=True, model=None))


def dated(text):
    return lambda s: s["conversation"].__setitem__("session_1_date_time", text)


@pytest.mark.parametrize("change,says", [
    (dated("1:99 pm on 8 May, 2023"), "'session_1_date_time' ('1:99 pm on 8 May, 2023')"),
    (dated("11:56 pm on 31 December, 9999"), "that is not a real time before the year 9999"),
    (dated(5), "has a 'session_1_date_time' that is not text (5)"),
], ids=["minute 99", "year 9999", "a number"])
def test_a_session_date_that_is_no_time_is_one_sentence(change, says, tmp_path, console):
    """Each was a traceback (ValueError, OverflowError, TypeError)."""
    path = write(tmp_path, change)
    assert run(path) == 2
    printed = " ".join(console.getvalue().split())
    assert printed.startswith(f"memgpt-lite: {path}: sample 0 has a")
    assert says in printed


def test_a_date_of_another_form_leaves_its_session_undated(tmp_path):
    path = write(tmp_path, dated("the day after"))
    assert locomo.run_locomo(path)["overall"]["recall@5"] == 1.0


@pytest.mark.parametrize("evidence", ["D1:1", ["D1:1"]])
def test_evidence_given_as_one_text_is_one_id(evidence, tmp_path):
    """"D1:1" alone was read as four ids ("D", "1", ":", "1"): recall 0, silently."""
    path = write(tmp_path, lambda s: s["qa"][0].__setitem__("evidence", evidence))
    result = locomo.run_locomo(path)
    assert result["overall"]["recall@5"] == 1.0 and result["evidence_not_found"] == 0


def test_evidence_the_conversation_lacks_is_counted_and_said(tmp_path, console):
    path = write(tmp_path, lambda s: s["qa"][0].__setitem__("evidence", 5))  # was a TypeError
    assert run(path) == 0
    assert "1 scored question(s) name evidence the conversation does not have" in \
        console.getvalue()


def test_questions_not_scored_are_counted_under_the_table(tmp_path, console):
    def add(sample):
        sample["qa"].append({"question": "What is Bo's job?", "adversarial_answer": "nurse",
                             "category": 5})
    path = write(tmp_path, add)
    assert run(path) == 0
    assert "1 question(s) not scored: no evidence (not in n)" in console.getvalue()
    assert locomo.run_locomo(path)["skipped"] == 1


def test_a_file_without_categories_one_to_four_prints_a_dash_not_a_traceback(tmp_path,
                                                                            console):
    """Its 'categories 1-4' row has n = 0 and no figures: the table's format raised."""
    path = write(tmp_path, lambda s: s["qa"][0].__setitem__("category", 5))
    assert run(path) == 0
    row = next(line for line in console.getvalue().splitlines() if "categories 1-4" in line)
    assert "│ 0 │" in row and "—" in row


def test_a_file_whose_questions_cannot_be_scored_is_one_sentence(tmp_path, console):
    path = write(tmp_path, lambda s: s["qa"][0].pop("evidence"))
    assert run(path) == 2
    assert "none of its 1 questions names its evidence" in " ".join(console.getvalue().split())
    with pytest.raises(ScenarioError, match="holds no questions"):
        locomo.run_locomo(write(tmp_path, lambda s: s.__setitem__("qa", [])))


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad's UTF-8 starts with one; the file was refused as not JSON."""
    path = tmp_path / "locomo.json"
    path.write_text("\ufeff" + json.dumps([SAMPLE]), encoding="utf-8")
    assert locomo.run_locomo(path)["overall"]["recall@5"] == 1.0


class QueriesFail:
    """Embeds the conversation, then fails on every question (the endpoint went away)."""

    def __init__(self):
        from memgpt_lite.lab.fake_embeddings import ConceptEmbedder

        self.inner = ConceptEmbedder()
        self.name, self.dim = self.inner.name, self.inner.dim

    def embed(self, texts, *, query=False):
        from memgpt_lite.engine.embeddings import EmbeddingError

        if query:
            raise EmbeddingError("The embeddings endpoint cannot be reached.")
        return self.inner.embed(texts, query=query)


def test_an_embedder_that_fails_stops_the_run_rather_than_scoring_keywords_as_hybrid(
        tmp_path, console):
    """Failing on the conversation was an EmbeddingError traceback; failing on the questions
    scored dense as finding nothing and hybrid as keyword search, under their names."""
    from memgpt_lite.lab.fake_embeddings import ConceptEmbedder

    path = write(tmp_path, lambda s: None)
    assert locomo.run_locomo(path, embedder=ConceptEmbedder())["methods"]["dense"]
    broken = ConceptEmbedder()
    broken.fail = "The embeddings endpoint cannot be reached."
    with pytest.raises(ScenarioError, match="the embedder could not embed the conversation"):
        locomo.run_locomo(path, embedder=broken)
    with pytest.raises(ScenarioError, match="the embedder failed on the question "
                                            "\"What is the name of Ann's dog"):
        locomo.run_locomo(path, embedder=QueriesFail())


def answered(tmp_path, script):
    from memgpt_lite.lab.scripted import ScriptedModel

    def more(sample):
        sample["qa"].append({"question": "What did Bo say?", "answer": "Lovely",
                             "evidence": ["D1:2"], "category": 4})
    return locomo.run_locomo(write(tmp_path, more), retrieval_only=False,
                             model_client=ScriptedModel(script))


def test_a_question_whose_model_call_failed_is_not_scored_and_takes_nothing_with_it(
        tmp_path, console):
    """It was scored as a wrong answer (F1 0), and undoing it undid the stored
    conversation's last turn instead, so every later question lacked it."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.errors import AuthError
    from memgpt_lite.engine.store import open_store
    from memgpt_lite.lab.scripted import ScriptedModel, text_response

    result = answered(tmp_path, [AuthError("Bad key."), text_response("Lovely")])
    assert result["overall"] == {"n": 1, "f1": 1.0}
    assert [f["error"] for f in result["failed"]] == ["Bad key."]
    from memgpt_lite.terminal import eval_render

    eval_render.print_locomo(Console(file=console, width=200, color_system=None), result)
    assert "1 question(s) not scored: the model call failed (not in n; first: Bad key.)" in \
        console.getvalue()
    with pytest.raises(ScenarioError, match="the model call failed for every question"):
        answered(tmp_path, [AuthError("Bad key.")] * 2)
    with open_store(tmp_path / "s.db") as store:
        agent = Agent.open(store, "q", model_client=ScriptedModel([AuthError("Bad key.")]))
        locomo.store_locomo_conversation(store, agent.id, SAMPLE)
        before = [m.id for m in store.all_messages(agent.id)]
        assert locomo._ask(agent, "What is the dog's name?") == ("", "Bad key.")
        assert [m.id for m in store.all_messages(agent.id)] == before
        agent.close()


@pytest.mark.parametrize("question", ["", "  ", None, 5])
def test_a_question_without_text_is_one_sentence(question, tmp_path, console, monkeypatch):
    """Answering, an empty question was a ValueError traceback (a turn needs a message);
    in retrieval it was searched for and scored as a miss."""
    from memgpt_lite.lab.scripted import ScriptedModel, text_response

    model = ScriptedModel([text_response("Pepper")])
    monkeypatch.setattr(eval_commands, "_live_client", lambda args: model)
    path = write(tmp_path, lambda s: s["qa"][0].__setitem__("question", question))
    for retrieval in (True, False):
        args = SimpleNamespace(scenario="locomo", file=path, json=None, model=None,
                               retrieval_only=retrieval)
        assert eval_commands.cmd_eval(args) == 2
    printed = " ".join(console.getvalue().split())
    assert f"{path}: sample 0 has question 0 with no 'question' text" in printed
    assert model.requests == []


def test_an_answering_run_stopped_before_its_end_goes_on_from_there(tmp_path, monkeypatch,
                                                                     console):
    """A killed LoCoMo answering run started again from zero and paid for every question
    again; now the questions answered are kept and only the rest are asked."""
    from memgpt_lite.lab.scripted import ScriptedModel, text_response
    from memgpt_lite.terminal import eval_commands as ec

    def more(sample):
        sample["qa"].append({"question": "What did Bo say?", "answer": "Lovely",
                             "evidence": ["D1:2"], "category": 4})
    data = write(tmp_path, more)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    first = ScriptedModel([text_response("Pepper"), KeyboardInterrupt()])
    monkeypatch.setattr(ec, "_live_client", lambda args: first)
    args = SimpleNamespace(scenarios=["locomo", data], model="haiku", json=None)
    with pytest.raises(KeyboardInterrupt):
        ec.cmd_eval(args)
    assert "the questions answered so far are" in " ".join(console.getvalue().split())
    second = ScriptedModel([text_response("Lovely")])  # one answer only: the rest is kept
    monkeypatch.setattr(ec, "_live_client", lambda args: second)
    assert ec.cmd_eval(args) == 0
    printed = " ".join(console.getvalue().split())
    assert "1 questions answered then are kept, not asked again" in printed
    assert len(second.requests) == 1 and "What did Bo say?" in str(second.requests[0].messages)
    from memgpt_lite.engine.config import data_dir

    assert list((data_dir() / "eval-progress").iterdir()) == []  # the run is done


def test_a_run_with_other_settings_does_not_take_the_answers_kept(tmp_path, monkeypatch,
                                                                  console):
    from memgpt_lite.lab.scripted import ScriptedModel
    from memgpt_lite.terminal import eval_commands as ec

    data = write(tmp_path, lambda sample: None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setattr(ec, "_live_client",
                        lambda args: ScriptedModel([KeyboardInterrupt()]))
    args = SimpleNamespace(scenarios=["locomo", data], model="haiku", json=None)
    log = ec._answer_log(Console(file=io.StringIO()), data, ec._dataset_settings(args), False)
    log.add((0, 0), {"sample": "s1", "question": "q", "category": "x", "f1": 1.0})
    monkeypatch.setenv("MEMGPT_LITE_CONTEXT_WINDOW", "20000")
    other = ec._answer_log(Console(file=io.StringIO()), data, ec._dataset_settings(args), False)
    assert other.path != log.path and other.rows == {}

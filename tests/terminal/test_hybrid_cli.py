"""Hybrid search at the command line: `index` backfills with a progress bar, `doctor` says
what lacks vectors, a chat with MEMGPT_LITE_EMBEDDER embeds in the background, and a chat
without it loads nothing of the dense path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from memgpt_lite.engine import config
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.lab.fake_embeddings import FakeEmbeddingsServer
from memgpt_lite.lab.fake_server import FakeAnthropicServer

pytest.importorskip("numpy")


def run(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memgpt_lite", *args], input=stdin,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


def seed(name: str, texts: list[str]) -> None:
    with SQLiteStore(config.db_path()) as store:
        row = store.create_agent(name, {}, {})
        store.add_messages(row.id, [Message("user", [{"type": "text", "text": t}], i + 1,
                                            in_context=False) for i, t in enumerate(texts)])


def embedder_env(server: FakeEmbeddingsServer) -> dict[str, str]:
    return {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": server.url,
            "MEMGPT_LITE_EMBEDDINGS_MODEL": "fake", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "5"}


@pytest.mark.slow
def test_index_backfills_and_doctor_reports_what_lacks_vectors():
    seed("ada", ["my beagle Biscuit", "the garden is green", "flights to Kyoto"])
    seed("bob", ["hello"])
    with FakeEmbeddingsServer() as server:
        env = embedder_env(server)
        doctor = run("doctor", env=env)
        assert "agent 'ada': 3 of 3 messages and 0 of 0 passages lack vectors of http:fake" \
            in doctor.stdout
        out = run("index", "--agent", "ada", env=env)
        assert out.returncode == 0, out.stderr
        assert "agent 'ada': 3 rows embedded with http:fake" in out.stdout
        doctor = run("doctor", env=env)
    assert "agent 'ada': every message and passage has a vector of http:fake" in doctor.stdout
    assert "agent 'bob': 1 of 1 messages" in doctor.stdout
    assert "agent 'ada' has vectors but no embedder is configured" in run("doctor").stdout


@pytest.mark.slow
def test_index_says_in_one_sentence_what_is_wrong():
    seed("ada", ["text"])
    out = run("index")
    assert out.returncode == 1 and "No embedder is configured" in out.stderr
    assert "Traceback" not in out.stderr
    env = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:9",
           "MEMGPT_LITE_EMBEDDINGS_MODEL": "m"}
    out = run("index", env=env)
    assert out.returncode == 1 and "Indexing agent 'ada' stopped" in out.stderr
    assert "cannot be reached" in out.stderr and "Traceback" not in out.stderr
    assert run("index", "--agent", "nobody", env=env).returncode == 1


@pytest.mark.slow
def test_a_chat_with_an_embedder_embeds_its_turns_in_the_background():
    with FakeAnthropicServer() as anthropic, FakeEmbeddingsServer() as server:
        env = {**embedder_env(server), "ANTHROPIC_BASE_URL": anthropic.base_url,
               "ANTHROPIC_API_KEY": "test"}
        proc = run("chat", "--no-record", "--agent", "h", env=env,
                   stdin="my puppy is called Biscuit\n")
    assert proc.returncode == 0, proc.stderr
    with SQLiteStore(config.db_path()) as store:
        agent = store.get_agent("h")
        counts = store.vector_counts(agent.id, "http:fake")["messages"]
    assert counts["rows"] == 2 and counts["current"] == 2  # embedded before the chat ended


@pytest.mark.slow
def test_a_stalled_endpoint_at_exit_is_said_and_ctrl_c_ends_the_chat_whole():
    # The endpoint stalls on the session's rows: the chat says what it waits for after the
    # last message, and Ctrl-C there leaves them to `index`, the chat ending as usual.
    with FakeAnthropicServer() as anthropic, FakeEmbeddingsServer(delay=30) as server:
        server.faults = ["timeout"] * 4
        env = {**os.environ, **embedder_env(server), "ANTHROPIC_BASE_URL": anthropic.base_url,
               "ANTHROPIC_API_KEY": "test", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "60"}
        proc = subprocess.Popen([sys.executable, "-m", "memgpt_lite", "chat", "--no-record",
                                 "--agent", "s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        proc.stdin.write("my puppy is called Biscuit\n")
        proc.stdin.close()
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "embedding this session's messages" in line:
                break
        assert "Ctrl-C leaves them to `memgpt-lite index`" in lines[-1], lines
        proc.send_signal(signal.SIGINT)
        proc.stdin = None  # closed already: communicate() must not flush it
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Fake reply to: my puppy" in out
    assert "session: 1 turn" in err and "interrupted" not in err and "Traceback" not in err
    with SQLiteStore(config.db_path()) as store:  # the turn is kept; its rows wait for index
        agent = store.get_agent("s")
        assert store.vector_counts(agent.id, "http:fake")["messages"]["rows"] == 2


@pytest.mark.slow
def test_a_chat_without_embeddings_imports_nothing_of_the_dense_path():
    with FakeAnthropicServer() as anthropic:
        env = dict(os.environ, ANTHROPIC_BASE_URL=anthropic.base_url, ANTHROPIC_API_KEY="test")
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "memgpt_lite", "chat",
                               "--no-record"], input="hi\n", capture_output=True, text=True,
                              timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    heavy = {"numpy", "onnxruntime", "tokenizers", "memgpt_lite.engine.embeddings",
             "memgpt_lite.engine.dense", "memgpt_lite.engine.indexer"}
    assert not heavy & imported, sorted(heavy & imported)


def test_slash_search_ranks_like_the_tool_and_says_when_it_falls_back(tmp_path):
    import io

    from rich.console import Console

    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.dense import DenseRecall
    from memgpt_lite.engine.indexer import index_agent
    from memgpt_lite.lab.fake_embeddings import ConceptEmbedder
    from memgpt_lite.lab.scripted import ScriptedModel
    from memgpt_lite.terminal.chat import ChatSession
    from memgpt_lite.terminal.view import ChatView

    seed("default", ["We adopted a beagle called Biscuit.", "The garden is green."])
    with SQLiteStore(config.db_path()) as store:
        agent = Agent.open(store, model_client=ScriptedModel([]))
        emb = ConceptEmbedder()
        index_agent(store, agent.id, emb)
        agent.tools.dense = DenseRecall(store, agent.id, emb)
        buf = io.StringIO()
        console = Console(file=buf, width=100, color_system=None)
        session = ChatSession(agent, console, ChatView(console, live=False, markdown=False))
        session.handle_line("/search puppy")
        assert "beagle called Biscuit" in buf.getvalue()  # no shared word: found by meaning
        emb.fail = "the model is gone"
        session.handle_line("/search puppy")
        session.handle_line("/archival puppy")
        agent.close()
    out = buf.getvalue()
    assert out.count("Searching by keywords only: the model is gone") == 1


@pytest.mark.slow
def test_eval_locomo_prints_keyword_dense_and_hybrid_side_by_side(tmp_path):
    import json

    from memgpt_lite.lab.retrieval_eval import locomo_style_samples

    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(locomo_style_samples()[:1]), "utf-8")
    with FakeEmbeddingsServer() as server:
        out = run("eval", "locomo", str(data), "--retrieval-only", "--embedder", "http",
                  "--json", str(tmp_path / "r.json"), env=embedder_env(server))
    assert out.returncode == 0, out.stderr
    for method in ("keyword", "dense", "hybrid"):
        assert method in out.stdout
    report = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert report["embedder"] == "http:fake" and report["categories 1-4"]["n"] == 20
    # The tool shows hybrid and keyword results; dense alone has no tool output to budget.
    assert report["methods"]["hybrid"]["overall"]["in 1000 tokens"] is not None
    assert report["methods"]["dense"]["overall"]["in 1000 tokens"] is None


def test_index_names_the_flag_or_the_config_file_that_gave_the_embedder(capsys):
    """`index --embedder http` said 'MEMGPT_LITE_EMBEDDER=http needs ...' though no such
    variable was set; so did `embedder = "http"` in the config file."""
    from memgpt_lite.engine import config_file
    from memgpt_lite.terminal import cli

    seed("ada", ["text"])
    assert cli.main(["index", "--embedder", "http"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: --embedder http needs MEMGPT_LITE_EMBEDDINGS_URL"), err
    assert cli.main(["config", "set", "embedder", "http"]) == 0
    assert cli.main(["config", "set", "embeddings_model", "m"]) == 0
    capsys.readouterr()
    assert cli.main(["index"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f'memgpt-lite: embedder = "http" in {config_file.config_path()} needs '
                   "embeddings_url in that file (or MEMGPT_LITE_EMBEDDINGS_URL).")


def test_index_names_what_turned_the_embedder_off(capsys):
    """`embedder = "none"` in the config file: index said 'No embedder is configured: set
    MEMGPT_LITE_EMBEDDER', which the user had not and which the file did set."""
    from memgpt_lite.engine import config_file
    from memgpt_lite.terminal import cli

    seed("ada", ["text"])
    assert cli.main(["config", "set", "embedder", "none"]) == 0
    capsys.readouterr()
    assert cli.main(["index"]) == 1
    assert capsys.readouterr().err == (
        f'memgpt-lite: embedder = none in {config_file.config_path()} turns hybrid search off; '
        "give onnx:FOLDER or http (see docs/search.md) there, or pass --embedder.\n")
    assert cli.main(["index", "--embedder", "none"]) == 1
    assert "--embedder none asks for keyword search only" in capsys.readouterr().err


def test_doctor_names_the_line_that_turned_hybrid_search_off():
    """With `embedder = "none"` in the config file the doctor said 'no embedder is
    configured (MEMGPT_LITE_EMBEDDER)', a variable the user never set."""
    import numpy as np

    from memgpt_lite.engine import config_file
    from memgpt_lite.terminal import cli
    from memgpt_lite.terminal.embedding_commands import doctor_vectors

    seed("ada", ["text"])
    assert cli.main(["config", "set", "embedder", "none"]) == 0
    with SQLiteStore(config.db_path()) as store:
        row = store.get_agent("ada")
        assert store.put_vectors(row.id, "messages", "m", [1], np.array([[1.0, 0.0]])) == 1
        said: list[str] = []
        doctor_vectors(store, said.append, said.append)
    assert said == [f"agent 'ada' has vectors but embedder = none in "
                    f"{config_file.config_path()} turns hybrid search off: search uses "
                    "keywords only"]

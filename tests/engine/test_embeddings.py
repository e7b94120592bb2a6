"""Embedders: the OpenAI-compatible HTTP client against a local fake endpoint with faults,
and the local ONNX embedder's real loading code on a tiny model and tokenizer made here."""

from __future__ import annotations

import pytest

from memgpt_lite.engine.embeddings import (
    EmbeddingConfig,
    EmbeddingError,
    HttpEmbedder,
    OnnxEmbedder,
)
from memgpt_lite.lab.fake_embeddings import FakeEmbeddingsServer

np = pytest.importorskip("numpy")


@pytest.fixture
def server():
    with FakeEmbeddingsServer(delay=2.0) as fake:
        yield fake


def test_http_embedder_returns_unit_rows_in_input_order_across_batches(server):
    emb = HttpEmbedder(server.url, "m", api_key="k-123", query_prefix="query: ")
    texts = [f"text number {i}" for i in range(70)]  # two requests (64 + 6)
    rows = emb.embed(texts)
    assert rows.shape == (70, 64)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    expected = np.asarray(server.embedder.vector("text number 69"), dtype=np.float32)
    assert np.allclose(rows[69], expected / np.linalg.norm(expected), atol=1e-6)
    assert [len(r["input"]) for r in server.requests] == [64, 6]
    assert server.requests[0]["authorization"] == "Bearer k-123"
    assert "input_type" not in server.requests[0]  # OpenAI refuses unknown fields
    emb.embed(["where"], query=True)
    assert server.requests[-1]["input"] == ["query: where"]


def test_http_embedder_tells_query_from_document_when_asked(server):
    emb = HttpEmbedder(server.url + "/embeddings", "voyage-3", input_type=True)
    emb.embed(["a"], query=True)
    emb.embed(["b"])
    assert [r["input_type"] for r in server.requests] == ["query", "document"]


@pytest.mark.parametrize("fault, words", [
    ("timeout", "did not answer within 0.5 s"),
    (400, "answered 400 (fake failure 400)"),
    (500, "answered 500"),
    ("count", "returned 1 vectors for 2 texts"),
    ("garbage", "did not answer JSON"),
    ("nan", "NaN or infinite values"),
])
def test_every_http_fault_is_one_sentence(server, fault, words):
    server.faults.append(fault)
    emb = HttpEmbedder(server.url, "m", timeout=0.5)
    with pytest.raises(EmbeddingError) as err:
        emb.embed(["one", "two"])
    assert words in str(err.value)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


def test_an_endpoint_trickling_its_answer_is_given_up_on_at_the_timeout(server):
    server.faults.append("trickle")  # a byte every 0.1 s: no single read times out
    emb = HttpEmbedder(server.url, "m", timeout=0.5)
    with pytest.raises(EmbeddingError, match="did not answer within 0.5 s"):
        emb.embed(["one", "two"])


def test_a_change_of_dimensions_is_refused(server):
    emb = HttpEmbedder(server.url, "m")
    emb.embed(["first"])
    server.faults.append("dims")
    with pytest.raises(EmbeddingError, match="65 dimensions where 64 was expected"):
        emb.embed(["second"])


def test_an_unreachable_endpoint_is_one_sentence():
    emb = HttpEmbedder("http://127.0.0.1:9/v1", "m", timeout=2)
    with pytest.raises(EmbeddingError, match="cannot be reached"):
        emb.embed(["x"])


def test_configuration_comes_from_the_environment(tmp_path):
    assert EmbeddingConfig.from_env({}).build() is None
    http = EmbeddingConfig.from_env({"MEMGPT_LITE_EMBEDDER": "http",
                                     "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:1/v1",
                                     "MEMGPT_LITE_EMBEDDINGS_MODEL": "nomic",
                                     "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "3"}).build()
    assert isinstance(http, HttpEmbedder) and http.timeout == 3 and http.name == "http:nomic"
    for env, words in [({"MEMGPT_LITE_EMBEDDER": "magic"}, "must be onnx:FOLDER"),
                       ({"MEMGPT_LITE_EMBEDDER": "http"}, "needs MEMGPT_LITE_EMBEDDINGS_URL"),
                       ({"MEMGPT_LITE_EMBEDDER": "onnx:"}, "needs the model's folder"),
                       ({"MEMGPT_LITE_EMBEDDER": f"onnx:{tmp_path}"}, "holds no tokenizer.json"),
                       ({"MEMGPT_LITE_EMBEDDER": f"onnx:{tmp_path}/typo"}, "There is no folder"),
                       ({"MEMGPT_LITE_EMBED_THREADS": "-2"}, "must be positive"),
                       ({"MEMGPT_LITE_EMBED_THREADS": "inf"}, "must be a finite number"),
                       ({"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "nan"},
                        "must be a finite number"),
                       ({"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "1e400"},
                        "must be a finite number")]:
        with pytest.raises(EmbeddingError, match=words):
            EmbeddingConfig.from_env(env).build()


# --------------------------------------------------------------------------- local ONNX model

from embedding_support import VOCAB, make_model  # noqa: E402


def test_onnx_embedder_loads_a_local_model_and_pools_only_real_tokens(tmp_path):
    pytest.importorskip("onnxruntime")
    make_model(tmp_path / "tiny")
    emb = OnnxEmbedder(tmp_path / "tiny", threads=2)
    assert emb._session is None  # nothing loaded until the first embedding
    rows = emb.embed(["the dog", "a puppy", "the truck", "dog " * 50])
    assert rows.shape == (4, 4)
    assert rows[0] @ rows[1] > 0.99 and rows[0] @ rows[2] < 0.1
    alone = emb.embed(["the dog"])[0]
    assert np.allclose(alone, rows[0], atol=1e-6)  # padding beside a long text changes nothing
    assert emb._session.get_session_options().intra_op_num_threads == 2
    assert emb.name.startswith("onnx:tiny:")


def test_two_models_in_folders_of_one_name_have_different_names(tmp_path):
    pytest.importorskip("onnxruntime")
    make_model(tmp_path / "a" / "model")
    make_model(tmp_path / "b" / "model", dim=5)
    assert OnnxEmbedder(tmp_path / "a" / "model").name != OnnxEmbedder(tmp_path / "b" / "model").name


def test_a_broken_model_file_is_one_sentence(tmp_path):
    pytest.importorskip("onnxruntime")
    make_model(tmp_path / "m")
    (tmp_path / "m" / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(EmbeddingError, match="cannot be loaded"):
        OnnxEmbedder(tmp_path / "m").embed(["dog"])


def test_an_embedder_without_numpy_is_one_sentence(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "numpy", None)  # makes `import numpy` fail
    env = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:1",
           "MEMGPT_LITE_EMBEDDINGS_MODEL": "m"}
    with pytest.raises(EmbeddingError, match="needs numpy: pip install"):
        EmbeddingConfig.from_env(env).build()
    assert EmbeddingConfig.from_env({}).build() is None  # keyword-only needs nothing


def test_a_sentence_names_the_config_files_key_when_the_value_came_from_it(tmp_path):
    """`embedder = "http"` in the config file, no URL: the error said
    'MEMGPT_LITE_EMBEDDER=http needs MEMGPT_LITE_EMBEDDINGS_URL ...', a variable the user
    never set, so they looked for it in their shell."""
    from memgpt_lite.engine import config_file

    path = config_file.config_path()
    path.parent.mkdir(parents=True)
    path.write_text('embedder = "http"\nembeddings_timeout = 3\n')
    with pytest.raises(EmbeddingError) as info:
        EmbeddingConfig.from_env().build()
    assert str(info.value) == (f'embedder = "http" in {path} needs embeddings_url and '
                               "embeddings_model in that file (or MEMGPT_LITE_EMBEDDINGS_URL "
                               "and MEMGPT_LITE_EMBEDDINGS_MODEL).")
    path.write_text(f'embedder = "onnx:{tmp_path}/typo"\n')
    with pytest.raises(EmbeddingError) as info:
        EmbeddingConfig.from_env().build()
    assert f'(from embedder = "onnx:{tmp_path}/typo" in {path})' in str(info.value)
    assert "MEMGPT_LITE" not in str(info.value)


def test_a_flag_is_named_as_the_flag():
    names = {"MEMGPT_LITE_EMBEDDER": "flag --embedder"}
    for spec, words in (("magic", "--embedder must be onnx:FOLDER"),
                        ("http", "--embedder http needs MEMGPT_LITE_EMBEDDINGS_URL")):
        with pytest.raises(EmbeddingError, match=words):
            EmbeddingConfig.from_env({"MEMGPT_LITE_EMBEDDER": spec}, names).build()


def test_the_environment_is_read_with_the_rule_config_set_uses():
    """MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE=on was read as off (only 1/yes/true counted), and a
    timeout `config set` refuses was taken from the environment."""
    base = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:1",
            "MEMGPT_LITE_EMBEDDINGS_MODEL": "m"}
    on = EmbeddingConfig.from_env({**base, "MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE": "on"})
    assert on.input_type
    for var, text, words in (
            ("MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE", "maybe", "must be on or off"),
            ("MEMGPT_LITE_EMBEDDINGS_TIMEOUT", "99999", "must be more than 0 and at most 3,600"),
            ("MEMGPT_LITE_EMBED_THREADS", "5000", "must be between 1 and 1,024")):
        with pytest.raises(EmbeddingError, match=f"{var} {words}"):
            EmbeddingConfig.from_env({**base, var: text})


def test_an_endpoint_url_is_checked_as_the_apis_is(capsys):
    """`config set embeddings_url notaurl` was written; `index` then failed on 'unknown url
    type: notaurl/embeddings', and the variable's value the same way."""
    from memgpt_lite.terminal import cli

    assert cli.main(["config", "set", "embeddings_url", "localhost:11434"]) == 2
    assert capsys.readouterr().err.startswith(
        "memgpt-lite: embeddings_url must be an http:// or https:// URL such as "
        "http://localhost:11434/v1; got 'localhost:11434'")
    env = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_MODEL": "m"}
    for url in ("ftp://x", "http://h:99999/v1", "http:// h/v1"):
        with pytest.raises(EmbeddingError, match="^MEMGPT_LITE_EMBEDDINGS_URL must be an http"):
            EmbeddingConfig.from_env({**env, "MEMGPT_LITE_EMBEDDINGS_URL": url})


def test_an_endpoint_timeout_may_say_seconds_as_every_timeout_does():
    env = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:1",
           "MEMGPT_LITE_EMBEDDINGS_MODEL": "m", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "3s"}
    assert EmbeddingConfig.from_env(env).timeout == 3.0


def test_a_key_no_http_header_can_hold_is_one_sentence_that_does_not_echo_it():
    """A key with a newline pasted inside, or letters outside Latin-1, was a traceback from
    http.client at the first request."""
    env = {"MEMGPT_LITE_EMBEDDER": "http", "MEMGPT_LITE_EMBEDDINGS_URL": "http://127.0.0.1:1",
           "MEMGPT_LITE_EMBEDDINGS_MODEL": "m"}
    for key in ("sk-abc\ndef", "ключ-123"):
        with pytest.raises(EmbeddingError, match="^MEMGPT_LITE_EMBEDDINGS_KEY must be") as info:
            EmbeddingConfig.from_env({**env, "MEMGPT_LITE_EMBEDDINGS_KEY": key})
        assert key not in str(info.value) and "\n" not in str(info.value)
    found = EmbeddingConfig.from_env({**env, "MEMGPT_LITE_EMBEDDINGS_KEY": " sk-abc\r\n"})
    assert found.api_key == "sk-abc"  # a key file's line end is not part of the key

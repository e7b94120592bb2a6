"""`memgpt-lite embeddings install / list` against a fake model hub on 127.0.0.1 (HF_ENDPOINT)
serving a tiny model the test builds: nothing is downloaded."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import stat
import threading

import pytest

from memgpt_lite.engine import config, model_catalog
from memgpt_lite.engine.embeddings import EmbeddingConfig, OnnxEmbedder
from memgpt_lite.terminal import cli

pytest.importorskip("huggingface_hub")
pytest.importorskip("onnxruntime")
from embedding_support import make_model  # noqa: E402

REPO = "test-org/tiny-embedder"


class FakeHub:
    """Serves `files` ({path in the repo: bytes}) the way the hub's resolve URLs do."""

    def __init__(self, files: dict[str, bytes], *, etags: dict[str, str] | None = None):
        self.files, self.requests = files, []
        self.etags = etags or {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802
                self._answer(body=False)

            def do_GET(self):  # noqa: N802
                self._answer(body=True)

            def _answer(self, body: bool):
                hub.requests.append((self.command, self.path))
                prefix = f"/{REPO}/resolve/main/"
                path = self.path.split("?")[0]
                data = hub.files.get(path[len(prefix):]) if path.startswith(prefix) else None
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("X-Repo-Commit", "c" * 40)
                self.send_header("ETag", f'"{hub.etags[path[len(prefix):]]}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    folder = tmp_path / "built"
    make_model(folder)
    files = {"onnx/model_quantized.onnx": (folder / "model.onnx").read_bytes(),
             "tokenizer.json": (folder / "tokenizer.json").read_bytes()}
    model = model_catalog.KnownModel(
        "tiny", REPO, {"model.onnx": "onnx/model_quantized.onnx",
                       "tokenizer.json": "tokenizer.json"}, 0.1, "test words", "not measured",
        sha256={"model.onnx": hashlib.sha256(files["onnx/model_quantized.onnx"]).hexdigest()})
    monkeypatch.setitem(model_catalog.KNOWN, "tiny", model)
    for var in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return files


def test_install_fetches_checks_makes_default_and_indexes(tiny, monkeypatch, capsys):
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "tiny installed in" in out and "made the default embedder" in out
    folder = model_catalog.models_dir() / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.onnx",
                                                        "tokenizer.json"]
    manifest = json.loads((folder / "model.json").read_text("utf-8"))
    assert manifest["repo"] == REPO and manifest["revision"] == "c" * 40
    assert manifest["sha256"]["tokenizer.json"] == hashlib.sha256(
        tiny["tokenizer.json"]).hexdigest()  # checked against the hub's digest
    # With MEMGPT_LITE_EMBEDDER unset, the installed model is the embedder.
    embedder = EmbeddingConfig.from_env({}).build()
    assert isinstance(embedder, OnnxEmbedder) and embedder.folder == folder
    assert embedder.embed(["the dog"]).shape == (1, 4)
    assert EmbeddingConfig.from_env({"MEMGPT_LITE_EMBEDDER": "none"}).build() is None
    assert cli.main(["embeddings", "list"]) == 0
    listed = capsys.readouterr().out
    assert "tiny" in listed and "yes, the default" in listed and "minilm" in listed


def test_a_file_whose_digest_differs_installs_nothing(tiny, monkeypatch, capsys):
    tampered = dict(tiny, **{"onnx/model_quantized.onnx": tiny["onnx/model_quantized.onnx"]
                             + b"\0"})
    with FakeHub(tampered) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny"]) != 0
    err = capsys.readouterr().err
    assert "sha256" in err and "nothing was installed" in err and "Traceback" not in err
    assert not (model_catalog.models_dir() / "tiny").exists()
    assert model_catalog.default_model() is None
    assert not list(model_catalog.models_dir().glob("tiny*"))  # no partial folder left


def test_an_unknown_model_or_an_unreachable_hub_is_one_sentence(tiny, monkeypatch, capsys):
    assert cli.main(["embeddings", "install", "nope"]) != 0
    assert "no known model 'nope'" in capsys.readouterr().err
    with FakeHub({}) as hub:  # the repository holds none of the files
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) != 0
    err = capsys.readouterr().err
    assert "tiny-embedder/onnx/model_quantized.onnx" in err and "Traceback" not in err


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the usual umask, whatever the test runner's
    yield
    os.umask(old)


def test_an_install_as_the_first_command_keeps_the_data_dir_private(tiny, umask_022, monkeypatch):
    # The data dir holds every conversation: the first command to create it makes it 0700,
    # whichever command that is, and an install that fails leaves it private too.
    home = config.data_dir()
    assert not home.exists()
    with FakeHub({}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) != 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    shutil.rmtree(home)
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
    for folder in (home, model_catalog.models_dir(), model_catalog.models_dir() / "tiny"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_file_in_the_way_of_the_models_folder_is_one_sentence_and_keeps_the_model(
        tiny, monkeypatch, capsys):
    # Stands in for a full disk: writing the model's folder fails with an OSError.
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
        (model_catalog.models_dir() / "tiny.old").write_text("in the way")
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert "tiny cannot be written into" in err and "nothing was installed" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (model_catalog.models_dir() / "tiny" / "model.onnx").is_file()  # still in place
    assert model_catalog.default_model() is not None


def test_a_default_that_cannot_be_written_is_one_sentence(tiny, monkeypatch, capsys):
    (model_catalog.models_dir() / "DEFAULT").mkdir(parents=True)  # a folder in the way
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert "tiny is installed but cannot be made the default embedder" in err
    assert "Traceback" not in err
    assert (model_catalog.models_dir() / "tiny" / "model.onnx").is_file()

"""`memgpt-lite embeddings install / list` against a fake model hub on 127.0.0.1 (HF_ENDPOINT)
serving a tiny model the test builds: nothing is downloaded."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import shutil
import stat
import subprocess
import sys
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
    """Serves `files` ({path in the repo: bytes}) the way the hub's resolve URLs do.

    Faults, for the install's robustness: `status` answers every request with that code;
    `stall_head` holds each HEAD until the test ends; `stall_body` sends half of each file,
    sets `half_sent`, then holds the rest until `release` is set (or the test ends)."""

    def __init__(self, files: dict[str, bytes], *, etags: dict[str, str] | None = None,
                 status: int | None = None, stall_head: bool = False,
                 stall_body: bool = False):
        self.files, self.requests = files, []
        self.etags = etags or {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
        self.half_sent, self.release, self.closing = (threading.Event(), threading.Event(),
                                                      threading.Event())
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802
                if stall_head:
                    hub.closing.wait(60)
                self._answer(body=False)

            def do_GET(self):  # noqa: N802
                self._answer(body=True)

            def _answer(self, body: bool):
                hub.requests.append((self.command, self.path))
                prefix = f"/{REPO}/resolve/main/"
                path = self.path.split("?")[0]
                data = hub.files.get(path[len(prefix):]) if path.startswith(prefix) else None
                if status is not None or data is None:
                    self.send_response(status or 404)
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
                    self._send(data)

            def _send(self, data: bytes):
                if not stall_body:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                hub.half_sent.set()
                while not (hub.release.wait(0.1) or hub.closing.is_set()):
                    pass
                if hub.release.is_set():
                    self.wfile.write(data[len(data) // 2:])

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
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
    # Piped, not a terminal: a quiet line as each file starts instead of a progress bar.
    size = len(tiny["tokenizer.json"])
    assert f"tiny: fetching tokenizer.json ({size:,} bytes)\n" in out
    assert "tiny: fetching onnx/model_quantized.onnx (" in out and "━" not in out
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
        with open(model_catalog.models_dir() / "tiny" / "tokenizer.json", "ab") as f:
            f.write(b" ")  # no longer as installed: the install fetches it again
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


def _nothing_installed(name: str = "tiny") -> bool:
    return (model_catalog.installed(name) is None and model_catalog.default_model() is None
            and not (model_catalog.models_dir() / name).exists())


@pytest.mark.parametrize("status, says", [
    (401, "refuses"), (403, "refuses"), (404, "has no"), (500, "failed to serve")])
def test_a_hub_that_refuses_is_one_sentence_naming_the_model_and_the_hub(
        tiny, monkeypatch, capsys, status, says):
    with FakeHub(tiny, status=status) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"The model hub at {hub.url} {says} tiny ({REPO}/" in err and f"({status})" in err
    assert _nothing_installed()


def test_no_network_is_one_sentence_and_a_stray_hub_call_fails_locally(tiny, capsys):
    # The suite's own guard: every test's hub client points at a refused loopback port, so
    # an install (or any hub call) that forgets its fake hub fails at once, on this machine.
    import huggingface_hub
    from huggingface_hub import constants

    from conftest import NO_HUB_URL

    assert os.environ["HF_ENDPOINT"] == constants.ENDPOINT == NO_HUB_URL
    assert constants.HF_HUB_CACHE.startswith(str(config.data_dir().parent))
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1" and "HF_TOKEN" not in os.environ
    url = huggingface_hub.hf_hub_url("sentence-transformers/all-MiniLM-L6-v2", "tokenizer.json")
    assert url.startswith(NO_HUB_URL + "/")
    with pytest.raises(Exception) as refused:
        huggingface_hub.get_hf_file_metadata(url, timeout=5)
    assert "Connection refused" in str(refused.value)
    assert cli.main(["embeddings", "install", "minilm", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"The model hub at {NO_HUB_URL} cannot be reached for minilm" in err
    assert "check the network" in err and _nothing_installed("minilm")


def test_a_hub_that_stalls_is_a_timeout_and_one_sentence(tiny, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "0.5")  # the hub client's own setting
    with FakeHub(tiny, stall_head=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"The model hub at {hub.url} stopped answering while serving tiny" in err
    assert "timed out" in err and _nothing_installed()


def test_an_unknown_model_lists_the_known_ones(capsys):
    assert cli.main(["embeddings", "install", "mini-lm"]) == 1
    err = capsys.readouterr().err
    assert "no known model 'mini-lm'" in err and "minilm, e5-small, bge-small" in err


def test_a_digest_mismatch_keeps_the_previous_default(tiny, monkeypatch, capsys):
    other = dataclasses.replace(model_catalog.KNOWN["tiny"], name="other",
                                sha256={"model.onnx": "0" * 64})
    monkeypatch.setitem(model_catalog.KNOWN, "other", other)
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
        assert cli.main(["embeddings", "install", "other", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert "has sha256" in err and "nothing was installed" in err
    assert model_catalog.default_model()[0].name == "tiny"
    assert model_catalog.installed("other") is None


def test_an_installed_model_is_not_fetched_again_and_works_offline(tiny, monkeypatch, capsys):
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
        capsys.readouterr()
        hub.requests.clear()
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
        assert hub.requests == []  # checked against its manifest: the hub is not asked
    assert "tiny was already installed (files checked) in" in capsys.readouterr().out
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # and no hub at all
    (model_catalog.models_dir() / "DEFAULT").unlink()
    assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
    assert "already installed" in capsys.readouterr().out
    assert model_catalog.default_model()[0].name == "tiny"
    # A file changed since is fetched again, and comes from the hub's cache when offline.
    (model_catalog.models_dir() / "tiny" / "model.onnx").write_bytes(b"changed")
    assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 1
    err = capsys.readouterr().err
    assert "HF_HUB_OFFLINE=1 is set and tiny's onnx/model_quantized.onnx is not in the " \
           "Hugging Face cache" in err and len(err.strip().splitlines()) == 1
    assert (model_catalog.models_dir() / "tiny" / "model.onnx").read_bytes() == b"changed"


def test_offline_the_files_come_from_the_hub_clients_cache(tiny, monkeypatch, capsys):
    import huggingface_hub

    with FakeHub(tiny) as hub:  # what `hf download` leaves in the cache
        for remote in tiny:
            huggingface_hub.hf_hub_download(REPO, remote, endpoint=hub.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
    assert "tiny installed in" in capsys.readouterr().out
    folder = model_catalog.models_dir() / "tiny"
    assert (folder / "model.onnx").read_bytes() == tiny["onnx/model_quantized.onnx"]
    manifest = model_catalog.installed("tiny")
    assert manifest["revision"] == "c" * 40  # the commit the cache holds the files of
    assert manifest["sha256"]["tokenizer.json"] == hashlib.sha256(
        tiny["tokenizer.json"]).hexdigest()
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.onnx",
                                                        "tokenizer.json"]


def test_a_second_install_at_once_waits_for_the_first(tiny, monkeypatch):
    from memgpt_lite.engine.model_install import fetch

    model, results, waited = model_catalog.KNOWN["tiny"], [], []
    with FakeHub(tiny, stall_body=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = threading.Thread(target=lambda: results.append(fetch(model)))
        first.start()
        assert hub.half_sent.wait(30)  # the first holds the lock, half-way through a file

        def waiting():
            waited.append(True)
            hub.release.set()  # only now may the first one finish

        second = fetch(model, waiting=waiting)
        first.join(30)
    assert waited == [True]
    assert results[0][1] is True and second == (results[0][0], False)
    gets = [path for method, path in hub.requests if method == "GET"]
    assert len(gets) == len(tiny)  # each file downloaded once, by the first
    assert model_catalog.installed("tiny") is not None


def _install_command(model: model_catalog.KnownModel) -> list[str]:
    """`memgpt-lite embeddings install NAME --no-index` for a process of its own, with the
    test's model added to the catalogue first."""
    code = ("import json, sys; from memgpt_lite.engine import model_catalog as c; "
            "from memgpt_lite.terminal import cli; m = c.KnownModel(**json.loads(sys.argv[1])); "
            "c.KNOWN[m.name] = m; sys.exit(cli.main(['embeddings', 'install', m.name, "
            "'--no-index']))")
    return [sys.executable, "-c", code, json.dumps(dataclasses.asdict(model))]


def _install_process(model: model_catalog.KnownModel, endpoint: str,
                     **env: str) -> subprocess.Popen:
    return subprocess.Popen(_install_command(model), env={**os.environ, "HF_ENDPOINT": endpoint,
                                                          **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_an_install_killed_half_way_is_not_installed_and_a_rerun_starts_clean(
        tiny, monkeypatch, capsys):
    model = model_catalog.KNOWN["tiny"]
    with FakeHub(tiny, stall_body=True) as hub:
        proc = _install_process(model, hub.url)
        try:
            assert hub.half_sent.wait(60), proc.communicate(timeout=5)
        finally:
            proc.kill()  # SIGKILL: no handler runs, nothing is tidied
            proc.wait(30)
    assert model_catalog.installed("tiny") is None and model_catalog.default_model() is None
    assert not (model_catalog.models_dir() / "tiny").exists()
    assert (model_catalog.models_dir() / "tiny.partial").exists()  # what the kill left
    with FakeHub(tiny) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["embeddings", "install", "tiny", "--no-index"]) == 0
    assert "tiny installed in" in capsys.readouterr().out
    folder = model_catalog.models_dir() / "tiny"
    assert (folder / "model.onnx").read_bytes() == tiny["onnx/model_quantized.onnx"]
    assert sorted(p.name for p in model_catalog.models_dir().iterdir()) == [
        ".install.lock", "DEFAULT", "tiny"]


@pytest.mark.slow
def test_a_download_that_stalls_half_way_times_out_in_one_sentence(tiny):
    # The hub client reads HF_HUB_DOWNLOAD_TIMEOUT when it is imported: a process of its own.
    with FakeHub(tiny, stall_body=True) as hub:
        proc = _install_process(model_catalog.KNOWN["tiny"], hub.url,
                                HF_HUB_DOWNLOAD_TIMEOUT="1")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"The model hub at {hub.url} stopped answering while serving tiny" in err
    assert _nothing_installed()


@pytest.mark.slow
def test_on_a_terminal_the_install_draws_a_progress_bar(tiny):
    pexpect = pytest.importorskip("pexpect")
    model = model_catalog.KNOWN["tiny"]
    size = len(tiny["onnx/model_quantized.onnx"])
    with FakeHub(tiny, stall_body=True) as hub:
        command = _install_command(model)
        child = pexpect.spawn(command[0], command[1:], encoding="utf-8", timeout=60,
                              env={**os.environ, "HF_ENDPOINT": hub.url,
                                   "TERM": "xterm-256color", "COLUMNS": "100"},
                              dimensions=(30, 100))
        try:
            child.expect_exact(f"0/{size} bytes")  # drawn as the file starts, half-way here
            assert "fetching" not in child.before  # not the lines of a pipe
            hub.release.set()
            child.expect_exact("tiny installed in")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert child.exitstatus == 0 and model_catalog.installed("tiny") is not None

"""The embeddings extra costs nothing until it is used: without it (`pip install .` alone)
`embeddings install` says which extra to install, and the commands that need none of it
import none of it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memgpt_lite.engine import config

pytestmark = pytest.mark.slow
HEAVY = ("huggingface_hub", "numpy", "onnxruntime", "tokenizers", "tqdm")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_importing_and_listing_load_nothing_of_the_dense_path():
    done = _run("import sys; import memgpt_lite; from memgpt_lite.terminal import cli; "
                "from memgpt_lite.engine import model_install, model_catalog, embeddings; "
                "code = cli.main(['embeddings', 'list']); "
                f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert "minilm" in done.stdout


def test_install_without_the_extra_names_it_in_one_sentence():
    # A None in sys.modules makes the import fail, as an install without the extra does.
    done = _run("import sys; sys.modules['huggingface_hub'] = None; "
                "from memgpt_lite.terminal import cli; "
                "sys.exit(cli.main(['embeddings', 'install']))")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert not config.data_dir().exists()  # nothing made for an install that cannot run
    assert done.stderr.strip() == ("memgpt-lite: Installing a model needs the embeddings "
                                   "extra: pip install 'memgpt-lite[embeddings]'.")

"""The embedding models memgpt-lite knows, and which one is installed as the default
(docs/search.md, "Hybrid in one command").

`memgpt-lite embeddings install [MODEL]` puts a model's files in `<data dir>/models/NAME/`
with a `model.json` manifest (where they came from, their sha256, pooling and prefixes) and
names it in `<data dir>/models/DEFAULT`; with MEMGPT_LITE_EMBEDDER unset, that model is the
embedder. Standard library only: the chat reads the default without importing anything of
the dense path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from memgpt_lite.engine.config import data_dir

MANIFEST = "model.json"


@dataclass(frozen=True)
class KnownModel:
    """A model on the Hugging Face hub: `files` maps each local file name to its path in the
    repository; `sha256` pins a file's digest where it is known (else the hub's own digest
    of the file is checked, and the one found is kept in the manifest)."""

    name: str
    repo: str
    files: dict[str, str]
    size_mb: float
    languages: str
    recall: str  # measured, or why not (docs/search.md)
    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""
    revision: str = "main"
    sha256: dict[str, str] = field(default_factory=dict)


KNOWN: dict[str, KnownModel] = {m.name: m for m in (
    KnownModel("minilm", "sentence-transformers/all-MiniLM-L6-v2",
               {"model.onnx": "onnx/model_qint8_avx512.onnx", "tokenizer.json": "tokenizer.json"},
               23.0, "English",
               "LoCoMo, within 1,000 tokens: hybrid 0.739, keyword 0.712 (docs/benchmarks.md)"),
    KnownModel("e5-small", "Xenova/multilingual-e5-small",
               {"model.onnx": "onnx/model_quantized.onnx", "tokenizer.json": "tokenizer.json"},
               118.0, "about 100, Chinese and Japanese included",
               "LoCoMo, a 4-bit copy: hybrid 0.733 within 1,000 tokens (this file not "
               "measured; docs/benchmarks.md)",
               query_prefix="query: ", passage_prefix="passage: "),
    KnownModel("bge-small", "Xenova/bge-small-en-v1.5",
               {"model.onnx": "onnx/model_quantized.onnx", "tokenizer.json": "tokenizer.json"},
               34.0, "English", "not measured here (no copy of the file could be had offline)",
               pooling="cls"),
)}
DEFAULT_MODEL = "minilm"


def models_dir() -> Path:
    return data_dir() / "models"


def installed(name: str) -> dict | None:
    """The manifest of an installed model, or None."""
    try:
        data = json.loads((models_dir() / name / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def default_model() -> tuple[Path, dict] | None:
    """The folder and manifest of the installed default model, or None."""
    try:
        name = (models_dir() / "DEFAULT").read_text("utf-8").strip()
    except OSError:
        return None
    manifest = installed(name) if name and "/" not in name and name not in (".", "..") else None
    return (models_dir() / name, manifest) if manifest else None

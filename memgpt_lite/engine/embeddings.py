"""Embedders: text in, unit vectors out, for the dense side of recall search.

None is configured by default: search is then keyword-only and nothing here is imported by
the chat. Two implementations sit behind the `Embedder` protocol:

* `HttpEmbedder`: any OpenAI-compatible `POST …/embeddings` endpoint (Ollama, llama.cpp's
  server, vLLM, LM Studio, OpenAI, Voyage AI). Standard library only.
* `OnnxEmbedder`: a sentence-embedding model in ONNX format from a local folder
  (`model.onnx` + `tokenizer.json`), run in-process by onnxruntime with tokenizers — the
  optional extra `pip install 'memgpt-lite[embeddings]'`. Loaded on first use, never
  downloaded here; its thread count is bounded by a setting.

Every failure is an `EmbeddingError` with one sentence; callers fall back to keywords.
Which embedder is used comes from the environment (`EmbeddingConfig.from_env`): it is a
property of the machine (a path, a URL, a key), not of the agent, and a key is never stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memgpt_lite.engine.text import quoted

MAX_BATCH = 64  # texts per request or per ONNX run: bounded memory, steady progress
MAX_TEXT_CHARS = 2_000  # models read ~256 tokens; longer texts only cost time


class EmbeddingError(Exception):
    """The embedder cannot embed right now; the message is one sentence for the user."""


class Embedder(Protocol):
    """Text to vectors. `name` identifies the model (stored with every vector, so a switch of
    model is noticed); `embed` returns one L2-normalised float32 row per text (a numpy array
    of shape (len(texts), dim)) or raises EmbeddingError."""

    name: str

    def embed(self, texts: list[str], *, query: bool = False) -> Any: ...


def normalise_rows(rows: Any) -> Any:
    """Unit-length float32 rows (zero rows stay zero)."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


def _clip(texts: list[str], prefix: str) -> list[str]:
    return [prefix + (t[:MAX_TEXT_CHARS] or " ") for t in texts]


# --------------------------------------------------------------------------- HTTP endpoint


class HttpEmbedder:
    """An OpenAI-compatible embeddings endpoint: `url` is the API base (…/v1) or the full
    …/embeddings URL. Checks every answer: one vector per text, all of one dimension."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None,
                 timeout: float = 10.0, query_prefix: str = "", passage_prefix: str = "",
                 input_type: bool = False):
        url = url.rstrip("/")
        self.url = url if url.endswith("/embeddings") else url + "/embeddings"
        self.model, self.api_key, self.timeout = model, api_key, timeout
        # Voyage AI (and some local servers) embed queries and documents differently when
        # told which is which; OpenAI refuses the unknown field, so it is opt-in.
        self.input_type = input_type
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.name = f"http:{model}"
        self.dim: int | None = None

    def embed(self, texts: list[str], *, query: bool = False) -> Any:
        rows: list[list[float]] = []
        prefix = self.query_prefix if query else self.passage_prefix
        for start in range(0, len(texts), MAX_BATCH):
            rows += self._post(_clip(texts[start:start + MAX_BATCH], prefix), query)
        return normalise_rows(rows) if rows else _empty()

    def _post(self, batch: list[str], query: bool) -> list[list[float]]:
        import urllib.error  # here, not at import: urllib costs start-up time
        import urllib.request

        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self.input_type:
            payload["input_type"] = "query" if query else "document"
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, body, headers, method="POST")
        deadline = time.monotonic() + self.timeout
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(_read_by(response, deadline).decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise EmbeddingError(f"The embeddings endpoint {self.url} answered {exc.code} "
                                 f"({_error_text(exc)}).") from None
        except (TimeoutError, socket.timeout):
            raise EmbeddingError(f"The embeddings endpoint {self.url} did not answer within "
                                 f"{self.timeout:g} s.") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, DNS
            reason = getattr(exc, "reason", exc)
            raise EmbeddingError(f"The embeddings endpoint {self.url} cannot be reached "
                                 f"({reason}).") from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise EmbeddingError(f"The embeddings endpoint {self.url} did not answer "
                                 "JSON.") from None
        return self._vectors(answer, len(batch))

    def _vectors(self, answer: Any, count: int) -> list[list[float]]:
        """The answer's vectors in input order, checked."""
        data = answer.get("data") if isinstance(answer, dict) else None
        try:
            items = sorted(data, key=lambda d: d.get("index", 0))  # type: ignore[arg-type]
            rows = [[float(x) for x in item["embedding"]] for item in items]
        except (TypeError, KeyError, ValueError, AttributeError):
            raise EmbeddingError(f"The embeddings endpoint {self.url} answered without a "
                                 "list of embeddings (not an OpenAI-compatible answer).") from None
        if len(rows) != count:
            raise EmbeddingError(f"The embeddings endpoint {self.url} returned {len(rows)} "
                                 f"vectors for {count} texts.")
        dims = {len(r) for r in rows}
        if len(dims) != 1 or 0 in dims or (self.dim is not None and dims != {self.dim}):
            seen = ", ".join(str(d) for d in sorted(dims))
            raise EmbeddingError(f"The embeddings endpoint {self.url} returned vectors of "
                                 f"{seen} dimensions where {self.dim or 'one size'} was "
                                 "expected.")
        if not all(math.isfinite(x) for row in rows for x in row):
            # NaN or infinity cannot be stored or ranked; it is the endpoint's fault, not
            # the database's
            raise EmbeddingError(f"The embeddings endpoint {self.url} returned vectors "
                                 "holding NaN or infinite values.")
        self.dim = dims.pop()
        return rows


def _read_by(response: Any, deadline: float) -> bytes:
    """The whole body, or TimeoutError once `deadline` has passed: the socket's timeout
    bounds each read only, so an endpoint trickling its answer would reset it forever."""
    parts = []
    while chunk := response.read1(1 << 16):
        parts.append(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError
    return b"".join(parts)


def _error_text(exc: Any) -> str:
    try:
        body = exc.read().decode("utf-8", "replace")
        detail = json.loads(body).get("error", body)
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
    except (OSError, ValueError, AttributeError):
        detail = exc.reason
    return " ".join(str(detail).split())[:160] or str(exc.reason)


def _empty() -> Any:
    import numpy as np

    return np.zeros((0, 0), dtype=np.float32)


# --------------------------------------------------------------------------- local ONNX


class OnnxEmbedder:
    """A sentence-embedding model in a local folder: `model.onnx` (or the first *.onnx file)
    and `tokenizer.json`. Mean pooling over the attention mask (sentence-transformers'
    default; `pooling="cls"` for models trained on [CLS]), then L2 normalisation.
    Nothing is loaded until the first `embed`; onnxruntime runs `threads` intra-op threads."""

    def __init__(self, folder: str | Path, *, threads: int = 1, pooling: str = "mean",
                 max_tokens: int = 256, query_prefix: str = "", passage_prefix: str = "",
                 source: str = ""):
        self.folder = Path(folder).expanduser()
        self.threads, self.pooling, self.max_tokens = max(1, threads), pooling, max_tokens
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.model_file = model_file(self.folder, f" (from {source})" if source else "")
        self.name = f"onnx:{self.folder.name}:{_file_id(self.model_file)}"
        self._session: Any = None
        self._tokenizer: Any = None
        self._loading = threading.Lock()  # the indexer thread and a search may both load

    def _load(self) -> None:
        with self._loading:
            if self._session is None:
                self._load_now()

    def _load_now(self) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbeddingError("The local embedder needs the embeddings extra: "
                                 "pip install 'memgpt-lite[embeddings]'.") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = self.threads
        options.log_severity_level = 3  # warnings about unused initialisers are not ours
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.model_file), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        except Exception as exc:  # onnxruntime raises its own, unexported error types
            raise EmbeddingError(f"The model in {self.folder} cannot be loaded "
                                 f"({' '.join(str(exc).split())[:160]}).") from None
        tokenizer.enable_truncation(self.max_tokens)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        self._tokenizer = tokenizer

    def embed(self, texts: list[str], *, query: bool = False) -> Any:
        import numpy as np

        if self._session is None:
            self._load()
        prefix = self.query_prefix if query else self.passage_prefix
        parts = [self._run(_clip(texts[i:i + MAX_BATCH], prefix))
                 for i in range(0, len(texts), MAX_BATCH)]
        return normalise_rows(np.concatenate(parts)) if parts else _empty()

    def _run(self, batch: list[str]) -> Any:
        import numpy as np

        encoded = self._tokenizer.encode_batch(batch)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "token_type_ids": np.zeros_like(ids)}
        wanted = {i.name for i in self._session.get_inputs()}
        try:
            hidden = self._session.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]
        except Exception as exc:  # onnxruntime's own error types
            raise EmbeddingError(f"The model in {self.folder} failed to run "
                                 f"({' '.join(str(exc).split())[:160]}).") from None
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def model_file(folder: Path, source: str = "") -> Path:
    """The model file in `folder`; `source`: where the folder was named, for the sentence."""
    if not folder.is_dir():  # a typo in the path: "holds no tokenizer.json" would mislead
        raise EmbeddingError(f"There is no folder {folder}{source}; give the folder of an ONNX "
                             "sentence-embedding model (see docs/search.md).")
    if not (folder / "tokenizer.json").is_file():
        raise EmbeddingError(f"{folder}{source} holds no tokenizer.json; give the folder of an "
                             "ONNX sentence-embedding model (see docs/search.md).")
    candidates = [folder / "model.onnx"] + sorted(folder.glob("*.onnx"))
    for path in candidates:
        if path.is_file():
            return path
    raise EmbeddingError(f"{folder}{source} holds no .onnx model file.")


def _file_id(path: Path) -> str:
    """A short digest of the model file's size and first megabyte: two different models in
    folders of the same name must not share vectors."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
    return digest.hexdigest()[:10]


# --------------------------------------------------------------------------- configuration


@dataclass
class EmbeddingConfig:
    """Which embedder to use, from the environment (see docs/search.md). `names`: how the
    user gave each variable's value when it was not the environment (see `_label`), so a
    sentence about it names the config file's line or the flag, never a variable the user
    did not set."""

    kind: str = "none"  # none | onnx | http
    path: str = ""
    url: str = ""
    model: str = ""
    api_key: str | None = None
    timeout: float = 10.0
    threads: int = 1
    query_prefix: str = ""
    passage_prefix: str = ""
    input_type: bool = False
    pooling: str = "mean"
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None,
                 names: dict[str, str] | None = None) -> EmbeddingConfig:
        """From `env` (variable → text); None: the config file's values under the real
        environment, each named as it was given (`config_file.file_sources`)."""
        if env is None:
            from memgpt_lite.engine.config_file import environment, file_sources

            env, names = environment(), {**file_sources(), **(names or {})}
        from memgpt_lite.engine.config_file import refuse_bad

        env, names = dict(env), dict(names or {})
        refuse_bad({"embedder"}, env)
        spec = env.get("MEMGPT_LITE_EMBEDDER", "").strip()
        if not spec:
            installed = _installed_default(env, names)
            if installed is not None:
                return installed
        kind, _, path = spec.partition(":")
        kind = kind.lower() or "none"
        if kind not in ("none", "onnx", "http"):
            raise EmbeddingError(f"{_label('MEMGPT_LITE_EMBEDDER', names)} must be onnx:FOLDER, "
                                 f"http or none, got {quoted(spec, 60)}.")
        # A bad value in the config file stops only an embedder that reads it: the
        # endpoint's settings are http's alone.
        if kind != "none":
            refuse_bad(_HTTP_KEYS if kind == "http" else _LOCAL_KEYS, env)
        url = env.get("MEMGPT_LITE_EMBEDDINGS_URL", "").strip()
        if url and kind == "http":  # the rule `config set` applies: http(s) with a host
            _registry_checked("MEMGPT_LITE_EMBEDDINGS_URL", url,
                              _label("MEMGPT_LITE_EMBEDDINGS_URL", names))
        return cls(kind, path, url,
                   env.get("MEMGPT_LITE_EMBEDDINGS_MODEL", ""),
                   _api_key(env, names) if kind == "http" else None,
                   _number(env, "MEMGPT_LITE_EMBEDDINGS_TIMEOUT", 10.0, names),
                   int(_number(env, "MEMGPT_LITE_EMBED_THREADS", 1, names)),
                   env.get("MEMGPT_LITE_EMBED_QUERY_PREFIX", ""),
                   env.get("MEMGPT_LITE_EMBED_PASSAGE_PREFIX", ""),
                   _switch(env, "MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE", names), names=names)

    def build(self) -> Embedder | None:
        """The configured embedder (not loaded yet), or None for keyword-only search."""
        if self.kind != "none":
            _require_numpy()
        prefixes = {"query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix}
        spec = _given("MEMGPT_LITE_EMBEDDER", f"{self.kind}:{self.path}"
                      if self.kind == "onnx" else self.kind, self.names)
        if self.kind == "onnx":
            if not self.path:
                raise EmbeddingError(f"{spec} needs the model's folder (onnx:FOLDER).")
            return OnnxEmbedder(self.path, threads=self.threads, pooling=self.pooling,
                                source=spec, **prefixes)
        if self.kind == "http":
            missing = [v for v, value in (("MEMGPT_LITE_EMBEDDINGS_URL", self.url),
                                          ("MEMGPT_LITE_EMBEDDINGS_MODEL", self.model))
                       if not value]
            if missing:
                raise EmbeddingError(f"{spec} needs {_to_set(missing, self.names)}.")
            return HttpEmbedder(self.url, self.model, api_key=self.api_key,
                                timeout=self.timeout, input_type=self.input_type, **prefixes)
        return None


def _key(var: str) -> str:
    from memgpt_lite.engine.registry import SETTINGS

    return next((s.key for s in SETTINGS if s.env == var), var)


def _label(var: str, names: dict[str, str]) -> str:
    """How a sentence names `var`'s setting: the flag (`flag --embedder`), the config file's
    key (`file PATH`), else the variable itself."""
    source = names.get(var, "")
    if source.startswith("flag "):
        return source.removeprefix("flag ")
    if source.startswith("file "):
        return f"{_key(var)} in {source.removeprefix('file ')}"
    return var


def _given(var: str, value: str, names: dict[str, str]) -> str:
    """`var`'s setting with its value, as the user wrote it (see `_label`)."""
    source = names.get(var, "")
    if source.startswith("flag "):
        return f"{source.removeprefix('flag ')} {value}"
    if source.startswith("file "):
        return f"{_key(var)} = {json.dumps(value)} in {source.removeprefix('file ')}"
    return f"{var}={value}"


def _to_set(missing: list[str], names: dict[str, str]) -> str:
    """The settings still to set, named where the embedder itself was set first: the config
    file's keys when it came from the file, else the variables."""
    variables = " and ".join(missing)
    keys = " and ".join(_key(v) for v in missing)
    if names.get("MEMGPT_LITE_EMBEDDER", "").startswith("file "):
        return f"{keys} in that file (or {variables})"
    return f"{variables} (or {keys} in the config file)"


_LOCAL_KEYS = {"embed_threads", "embed_query_prefix", "embed_passage_prefix"}
_HTTP_KEYS = _LOCAL_KEYS | {"embeddings_url", "embeddings_model", "embeddings_key",
                            "embeddings_timeout", "embeddings_input_type"}


def _installed_default(env: dict[str, str], names: dict[str, str]) -> EmbeddingConfig | None:
    """The model `memgpt-lite embeddings install` made the default, when there is one."""
    from memgpt_lite.engine.model_catalog import default_model

    found = default_model()
    if found is None:
        return None
    folder, manifest = found
    from memgpt_lite.engine.config_file import refuse_bad

    refuse_bad({"embed_threads"}, env)  # the one setting it reads
    threads = int(_number(env, "MEMGPT_LITE_EMBED_THREADS", 1, names))
    return EmbeddingConfig(
        "onnx", str(folder), threads=threads, pooling=str(manifest.get("pooling") or "mean"),
        query_prefix=str(manifest.get("query_prefix") or ""),
        passage_prefix=str(manifest.get("passage_prefix") or ""), names=names)


def _require_numpy() -> None:
    """The dense side scans vectors with numpy (the embeddings extra brings it)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise EmbeddingError("Hybrid search needs numpy: pip install 'memgpt-lite[embeddings]' "
                             "(or pip install numpy for an endpoint).") from None


def _number(env: dict[str, str], name: str, default: float,
            names: dict[str, str] | None = None) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    label = _label(name, names or {})
    try:  # seconds may say so (`3s`), as MEMGPT_LITE_TIMEOUT and `config set` take them
        value = float(text.removesuffix("s") if name.endswith("_TIMEOUT") else text)
    except ValueError:
        raise EmbeddingError(f"{label} must be a number, got {quoted(text, 60)}.") from None
    if not math.isfinite(value):  # a socket timeout or thread count must be a real number
        raise EmbeddingError(f"{label} must be a finite number, got {quoted(text, 60)}.")
    if value <= 0:
        raise EmbeddingError(f"{label} must be positive, got {quoted(text, 60)}.")
    return _registry_checked(name, text, label)


def _api_key(env: dict[str, str], names: dict[str, str]) -> str | None:
    """The endpoint's key, checked as `config set` checks it (a newline pasted with it, or
    a character no HTTP header holds, was a traceback at the first request)."""
    text = env.get("MEMGPT_LITE_EMBEDDINGS_KEY", "").strip()
    if not text:
        return None
    return str(_registry_checked("MEMGPT_LITE_EMBEDDINGS_KEY", text,
                                 _label("MEMGPT_LITE_EMBEDDINGS_KEY", names)))


def _switch(env: dict[str, str], name: str, names: dict[str, str]) -> bool:
    text = env.get(name, "").strip()
    return bool(text) and bool(_registry_checked(name, text, _label(name, names)))


def _registry_checked(name: str, text: str, label: str) -> Any:
    """`text` as the settings registry reads the variable (its bounds, `on` for a switch):
    the rule `config set` applies, so the environment is not looser than the file."""
    from memgpt_lite.engine.registry import BY_KEY, parse_text
    from memgpt_lite.engine.setting_rules import ConfigError

    try:
        return parse_text(BY_KEY[_key(name)], text, label)
    except ConfigError as exc:
        raise EmbeddingError(str(exc)) from None

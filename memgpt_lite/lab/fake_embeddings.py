"""Test doubles for hybrid search: a deterministic in-process embedder, and an
OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 with fault injection.

`ConceptEmbedder` maps words to concepts (a small table: beagle, puppy and dog are one
concept) and hashes the concepts into a fixed number of dimensions, so tests can show
dense search finding what keywords cannot, with exact, repeatable vectors. The server
answers with that embedder's vectors; `faults` (a list, consumed one per request) makes
a request time out, fail with a status, return vectors of another size or the wrong count.

    python -m memgpt_lite.lab.fake_embeddings --port 8765
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONCEPTS = {
    "dog": ("dog", "dogs", "puppy", "puppies", "beagle", "greyhound", "pepper"),
    "job": ("job", "work", "works", "nurse", "teacher", "architect", "career", "profession"),
    "music": ("music", "band", "concert", "guitar", "saxophone", "jazz", "musician"),
    "food": ("food", "eat", "vegan", "vegetarian", "meat", "cheeseburger", "dinner"),
    "travel": ("travel", "trip", "flight", "flights", "kyoto", "japan", "yellowstone"),
}
_CONCEPT_OF = {w: c for c, words in CONCEPTS.items() for w in words}
_WORD = re.compile(r"[^\W_]+")


class ConceptEmbedder:
    """Deterministic bag-of-concepts vectors (see the module docstring). `calls` counts the
    texts embedded; `gate`, when set, is waited on before every embedding (a slow model)."""

    def __init__(self, dim: int = 64, name: str = "fake:concepts"):
        self.dim, self.name = dim, name
        self.calls = 0
        self.gate: threading.Event | None = None
        self.fail: str | None = None  # a message to raise as EmbeddingError

    def embed(self, texts: list[str], *, query: bool = False) -> Any:
        from memgpt_lite.engine.embeddings import EmbeddingError, normalise_rows

        if self.gate is not None:
            self.gate.wait(30)
        if self.fail:
            raise EmbeddingError(self.fail)
        self.calls += len(texts)
        return normalise_rows([self.vector(t) for t in texts])

    def vector(self, text: str) -> list[float]:
        out = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            concept = _CONCEPT_OF.get(word, word)
            digest = hashlib.sha256(concept.encode("utf-8")).digest()
            out[int.from_bytes(digest[:4], "big") % self.dim] += 3.0 if word in _CONCEPT_OF else 1.0
        return out


class FakeEmbeddingsServer:
    """An OpenAI-compatible embeddings endpoint on 127.0.0.1 (a free port by default).
    `requests` holds every request body received; `faults` is consumed one per request:
    "timeout", an HTTP status (400, 500, ...), "dims" (vectors one longer), "count" (one
    vector short), "nan" (vectors of NaN), "trickle" (the answer a byte at a time, each
    `delay / 20` seconds after the last) or "garbage" (not JSON)."""

    def __init__(self, port: int = 0, embedder: ConceptEmbedder | None = None,
                 delay: float = 5.0):
        self.embedder = embedder or ConceptEmbedder()
        self.faults: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.delay = delay  # how long a "timeout" fault sleeps
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeEmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: FakeEmbeddingsServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        owner = self.owner
        owner.requests.append({**body, "authorization": self.headers.get("Authorization")})
        fault = owner.faults.pop(0) if owner.faults else None
        if fault == "timeout":
            time.sleep(owner.delay)
        if isinstance(fault, int):
            return self._send(fault, {"error": {"message": f"fake failure {fault}"}})
        if fault == "garbage":
            return self._send(200, None, b"<html>not json</html>")
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        rows = [owner.embedder.vector(t) for t in texts]
        if fault == "dims":
            rows = [r + [0.5] for r in rows]
        if fault == "count":
            rows = rows[:-1]
        if fault == "nan":
            rows = [[float("nan")] * len(r) for r in rows]
        data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
        answer = {"object": "list", "data": data, "model": body.get("model")}
        self._send(200, answer, trickle=fault == "trickle")

    def _send(self, status: int, obj: Any, raw: bytes | None = None,
              trickle: bool = False) -> None:
        payload = raw if raw is not None else json.dumps(obj).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            step = 1 if trickle else max(len(payload), 1)
            for start in range(0, len(payload), step):
                self.wfile.write(payload[start:start + step])
                if trickle:  # a byte at a time, each well within the client's timeout
                    self.wfile.flush()
                    time.sleep(self.owner.delay / 20)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout fault)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.fake_embeddings")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    with FakeEmbeddingsServer(args.port) as server:
        print(f"fake embeddings endpoint at {server.url} (Ctrl-C stops it)")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

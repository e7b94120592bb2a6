"""Fetch a known embedding model once, through the Hugging Face hub client (which the
embeddings extra brings), into `<data dir>/models/NAME/`, checked by sha256.

Files download into `NAME.partial/`; each file's digest must equal the one the catalogue
pins or, where none is pinned, the one the hub gives for the file (its LFS sha256); only
then is the folder renamed into place, so a failed or interrupted install leaves the old
model (if any) as it was. `HF_ENDPOINT` names another hub (a mirror, or the tests' fake).
Progress goes to a callback: (file name, bytes done, bytes in all).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memgpt_lite.engine.embeddings import EmbeddingError
from memgpt_lite.engine.files import private_dirs
from memgpt_lite.engine.model_catalog import MANIFEST, KnownModel, models_dir

Progress = Callable[[str, int, int | None], None]
_SHA256 = re.compile(r"[0-9a-f]{64}")


def install(model: KnownModel, progress: Progress = lambda name, done, total: None) -> Path:
    """The model's folder once its files are in place and checked; EmbeddingError (one
    sentence) when the hub cannot be reached, a file is missing or a digest differs."""
    hub = _hub()
    target = models_dir() / model.name
    partial = target.with_name(model.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # An install may be the first command run: it must not leave the data dir open to others.
    private_dirs(partial)
    try:
        digests, commit = {}, None
        for local, remote in model.files.items():
            expected, commit = _expected(hub, model, local, remote)
            path = _download(hub, model, remote, partial, progress)
            digests[local] = _checked(path, expected, local, model)
            os.replace(path, partial / local)
        _write_manifest(partial, model, digests, commit)
        shutil.rmtree(partial / ".cache", ignore_errors=True)
        _swap(partial, target)
    except BaseException as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(exc, OSError):  # a full disk, a file in the way: the user's to fix
            raise EmbeddingError(f"{model.name} cannot be written into {models_dir()} "
                                 f"({_reason(exc)}); nothing was installed.") from None
        raise
    return target


def make_default(name: str) -> None:
    try:
        (models_dir() / "DEFAULT").write_text(name + "\n", "utf-8")
    except OSError as exc:
        raise EmbeddingError(f"{name} is installed but cannot be made the default embedder "
                             f"({_reason(exc)}).") from None


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise EmbeddingError("Installing a model needs the embeddings extra: "
                             "pip install 'memgpt-lite[embeddings]'.") from None
    return huggingface_hub


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def _expected(hub: Any, model: KnownModel, local: str, remote: str) -> tuple[str | None, str]:
    """(the sha256 the file must have, or None when neither the catalogue nor the hub gives
    one; the commit the hub serves)."""
    url = hub.hf_hub_url(model.repo, remote, revision=model.revision, endpoint=_endpoint())
    try:
        meta = hub.get_hf_file_metadata(url)
    except Exception as exc:  # the hub client raises its own and httpx's error types
        raise EmbeddingError(f"The model hub cannot give {model.repo}/{remote} "
                             f"({_reason(exc)}).") from None
    etag = (meta.etag or "").strip('"').lower()
    return model.sha256.get(local) or (etag if _SHA256.fullmatch(etag) else None), \
        meta.commit_hash or model.revision


def _download(hub: Any, model: KnownModel, remote: str, folder: Path,
              progress: Progress) -> Path:
    try:
        return Path(hub.hf_hub_download(model.repo, remote, revision=model.revision,
                                        local_dir=folder, endpoint=_endpoint(),
                                        tqdm_class=_reporting(remote, progress)))
    except Exception as exc:  # the hub client's and httpx's error types
        raise EmbeddingError(f"Downloading {model.repo}/{remote} failed "
                             f"({_reason(exc)}).") from None


def _checked(path: Path, expected: str | None, local: str, model: KnownModel) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    found = digest.hexdigest()
    if expected is not None and found != expected:
        raise EmbeddingError(f"{model.repo}/{model.files[local]} has sha256 {found[:12]}… where "
                             f"{expected[:12]}… was expected; nothing was installed.")
    return found


def _write_manifest(folder: Path, model: KnownModel, digests: dict[str, str],
                    commit: str | None) -> None:
    manifest = {"name": model.name, "repo": model.repo, "revision": commit,
                "files": model.files, "sha256": digests, "pooling": model.pooling,
                "query_prefix": model.query_prefix, "passage_prefix": model.passage_prefix}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")


def _swap(partial: Path, target: Path) -> None:
    """The new folder in place of the old one; the old is removed only once the new is in."""
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(partial, target)
    shutil.rmtree(old, ignore_errors=True)
    for leftover in target.iterdir():  # the hub's subfolders, emptied by the moves
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _reporting(name: str, progress: Progress) -> Any:
    """A tqdm class for the hub client that reports to `progress` and prints nothing."""
    from tqdm.std import tqdm

    class Reporting(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["file"] = io.StringIO()
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            progress(name, int(self.n), int(self.total) if self.total else None)
            return shown

    return Reporting

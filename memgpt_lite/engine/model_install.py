"""Fetch a known embedding model once, through the Hugging Face hub client (which the
embeddings extra brings), into `<data dir>/models/NAME/`, checked by sha256.

Files download into `NAME.partial/`; each file's digest must equal the one the catalogue
pins or, where none is pinned, the one the hub gives for the file (its LFS sha256); only
then is the folder renamed into place, so a failed or interrupted install leaves the old
model (if any) as it was. `HF_ENDPOINT` names another hub (a mirror, or the tests' fake).
Progress goes to a callback: (file name, bytes done, bytes in all).

One install runs at a time in a data dir (a lock file in the models folder; another waits
for it), so a second one never removes the folder the first is filling. A model already in
place, its files matching its manifest, is not fetched again. With `HF_HUB_OFFLINE=1` the
files come from the hub client's own cache, or the install says they are not there.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from memgpt_lite.engine.embeddings import EmbeddingError
from memgpt_lite.engine.files import LockBusy, held_lock, private_dirs, replace_file
from memgpt_lite.engine.model_catalog import MANIFEST, KnownModel, installed, models_dir

Progress = Callable[[str, int, int | None], None]
_SHA256 = re.compile(r"[0-9a-f]{64}")
LOCK_WAIT = 3600.0  # s: a second install waits for the first's download, then gives up
DEFAULT_TIMEOUT = 10.0  # s for the hub to answer, as the hub client's own default


def fetch(model: KnownModel, progress: Progress = lambda name, done, total: None,
          waiting: Callable[[], None] = lambda: None) -> tuple[Path, bool]:
    """(the model's folder, whether it was fetched now) with the install lock held: an
    installed copy whose files still match their manifest is kept as it is. `waiting` is
    called once when another install holds the lock."""
    with _hub_quiet(), _install_lock(waiting):  # the extra missing: nothing is made
        folder = installed_copy(model)
        return (folder, False) if folder is not None else (install(model, progress), True)


def installed_copy(model: KnownModel) -> Path | None:
    """The model's folder when its manifest names this model's repository and files and
    every file still has the digest the manifest keeps; None when it must be fetched."""
    manifest, folder = installed(model.name), models_dir() / model.name
    if not manifest or manifest.get("repo") != model.repo or manifest.get("files") != model.files:
        return None
    digests = manifest.get("sha256") or {}
    for local in model.files:
        pinned = model.sha256.get(local)
        if pinned and digests.get(local) != pinned:
            return None
        try:
            if _sha256(folder / local) != digests.get(local):
                return None
        except OSError:
            return None
    return folder


@contextmanager
def _hub_quiet() -> Iterator[None]:
    """The hub client logs each retry to stderr ("Trying to resume download..."): the
    engine never prints, and the install's outcome is already one sentence."""
    _hub()
    from huggingface_hub.utils import logging as hub_logging

    level = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(level)


@contextmanager
def _install_lock(waiting: Callable[[], None]) -> Iterator[None]:
    lock, held = models_dir() / ".install.lock", ExitStack()
    try:
        try:
            held.enter_context(held_lock(lock, 0))
        except LockBusy:
            waiting()
            held.enter_context(held_lock(lock, LOCK_WAIT))
    except LockBusy:
        raise EmbeddingError(f"Another install has held {lock} for {LOCK_WAIT / 60:.0f} "
                             "minutes; stop it, or wait for it and run this again.") from None
    except OSError as exc:
        raise EmbeddingError(f"The lock file {lock} cannot be made ({_reason(exc)}).") from None
    with held:
        yield


def install(model: KnownModel, progress: Progress = lambda name, done, total: None) -> Path:
    """The model's folder once its files are in place and checked; EmbeddingError (one
    sentence) when the hub cannot be reached, a file is missing or a digest differs. Call
    it with the install lock held (`fetch` does): it starts by clearing what an earlier,
    interrupted install left."""
    hub = _hub()
    target = models_dir() / model.name
    partial = target.with_name(model.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # An install may be the first command run: it must not leave the data dir open to others.
    private_dirs(partial)
    try:
        digests, commit = {}, None
        for local, remote in model.files.items():
            if _offline(hub):
                expected, path, commit = _from_cache(hub, model, local, remote, partial)
            else:
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
    try:  # replaced whole: a kill mid-write must not leave a DEFAULT naming half a model
        replace_file(models_dir() / "DEFAULT", (name + "\n").encode("utf-8"))
    except OSError as exc:
        raise EmbeddingError(f"{name} is installed but cannot be made the default embedder "
                             f"({_reason(exc)}).") from None


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.constants  # noqa: F401 (a lazy attribute of the package)
    except ImportError:
        raise EmbeddingError("Installing a model needs the embeddings extra: "
                             "pip install 'memgpt-lite[embeddings]'.") from None
    return huggingface_hub


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def _shown_endpoint(hub: Any) -> str:
    return (_endpoint() or hub.constants.ENDPOINT).rstrip("/")


def _timeout() -> float:
    """The hub client's own HF_HUB_ETAG_TIMEOUT, read now (the client reads it at import)."""
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT


def _offline(hub: Any) -> bool:
    flag = (os.environ.get("HF_HUB_OFFLINE") or "").strip().upper()
    return bool(hub.constants.HF_HUB_OFFLINE) or flag in ("1", "ON", "YES", "TRUE")


def _from_cache(hub: Any, model: KnownModel, local: str, remote: str,
                folder: Path) -> tuple[str | None, Path, str]:
    """(the digest the file must have, a copy of it in `folder`, the commit it is of) from
    the hub client's cache, for HF_HUB_OFFLINE=1: a cached file is named by the digest the
    hub gave, under a folder named by the commit (snapshots/COMMIT/path in the repo)."""
    found = hub.try_to_load_from_cache(model.repo, remote, revision=model.revision)
    if not isinstance(found, str):
        raise EmbeddingError(f"HF_HUB_OFFLINE=1 is set and {model.name}'s {remote} is not in "
                             f"the Hugging Face cache ({hub.constants.HF_HUB_CACHE}); unset "
                             "HF_HUB_OFFLINE to download it.")
    blob = Path(os.path.realpath(found)).name
    copy = folder / ".cache" / local
    private_dirs(copy.parent)
    shutil.copyfile(found, copy)
    commit = Path(found).parents[len(Path(remote).parts) - 1].name
    return model.sha256.get(local) or (blob if _SHA256.fullmatch(blob) else None), copy, commit


def _expected(hub: Any, model: KnownModel, local: str, remote: str) -> tuple[str | None, str]:
    """(the sha256 the file must have, or None when neither the catalogue nor the hub gives
    one; the commit the hub serves)."""
    url = hub.hf_hub_url(model.repo, remote, revision=model.revision, endpoint=_endpoint())
    try:
        meta = hub.get_hf_file_metadata(url, timeout=_timeout())
    except Exception as exc:  # the hub client raises its own and httpx's error types
        raise EmbeddingError(_hub_failure(hub, exc, model, remote)) from None
    etag = (meta.etag or "").strip('"').lower()
    return model.sha256.get(local) or (etag if _SHA256.fullmatch(etag) else None), \
        meta.commit_hash or model.revision


def _download(hub: Any, model: KnownModel, remote: str, folder: Path,
              progress: Progress) -> Path:
    try:
        return Path(hub.hf_hub_download(model.repo, remote, revision=model.revision,
                                        local_dir=folder, endpoint=_endpoint(),
                                        etag_timeout=_timeout(),
                                        tqdm_class=_reporting(remote, progress)))
    except Exception as exc:  # the hub client's and httpx's error types
        if isinstance(exc, OSError) and not _from_the_network(exc):
            raise  # a full disk, a file in the way: install() says so
        raise EmbeddingError(_hub_failure(hub, exc, model, remote)) from None


def _from_the_network(exc: Exception) -> bool:
    """Whether the hub client or its HTTP library raised it (their errors are OSErrors too,
    like the disk's own)."""
    return any(c.__module__.split(".")[0] in ("huggingface_hub", "httpx", "httpx2", "httpcore")
               for c in type(exc).__mro__)


def _hub_failure(hub: Any, exc: Exception, model: KnownModel, remote: str) -> str:
    """One sentence on why the hub did not give a file: whose move it is, the model and
    the hub it asked."""
    where, what = _shown_endpoint(hub), f"{model.name} ({model.repo}/{remote})"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return (f"The model hub at {where} refuses {what} ({status}): it is gated or private "
                "there; set HF_TOKEN to a token that may read it, or HF_ENDPOINT to a mirror.")
    if status == 404:
        return (f"The model hub at {where} has no {what} (404); HF_ENDPOINT may name a "
                "mirror without it.")
    if isinstance(status, int):
        return (f"The model hub at {where} failed to serve {what} ({status}); try again "
                "later, or set HF_ENDPOINT to a mirror.")
    names = {c.__name__ for c in type(exc).__mro__}
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return (f"The model hub at {where} stopped answering while serving {what} (timed "
                "out); try again later, or set HF_ENDPOINT to a mirror.")
    return (f"The model hub at {where} cannot be reached for {what} ({_reason(exc)}); check "
            "the network, or set HF_ENDPOINT to a mirror (HF_HUB_OFFLINE=1 takes the files "
            "from the Hugging Face cache).")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _checked(path: Path, expected: str | None, local: str, model: KnownModel) -> str:
    found = _sha256(path)
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
    return " ".join(str(exc).split())[:600] or type(exc).__name__


def _reporting(name: str, progress: Progress) -> Any:
    """A tqdm class for the hub client that reports to `progress` and prints nothing."""
    from tqdm.std import tqdm

    class Reporting(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["file"] = io.StringIO()
            super().__init__(*args, **kwargs)
            # Now, as the file starts: the first update comes only after a whole chunk.
            progress(name, int(self.n), int(self.total) if self.total else None)

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            progress(name, int(self.n), int(self.total) if self.total else None)
            return shown

    return Reporting

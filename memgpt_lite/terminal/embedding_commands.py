"""Hybrid search at the command line: `memgpt-lite index`, the doctor's vector line, and the
chat's embedder (set up only when MEMGPT_LITE_EMBEDDER is set, so that a chat without
embeddings imports nothing of this)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from memgpt_lite.terminal import agent_checks
from memgpt_lite.terminal.exit_codes import EXIT_OK, UserError


def configured_embedder(spec: str | None = None) -> Any:
    """The embedder of `spec` (as MEMGPT_LITE_EMBEDDER: onnx:FOLDER, http or none) with the
    other settings from the environment; None for keyword-only search."""
    from memgpt_lite.engine.config_file import environment, file_sources
    from memgpt_lite.engine.embeddings import EmbeddingConfig, EmbeddingError

    env, names = environment(), file_sources()
    if spec:  # --embedder: named as the flag in any sentence about it
        env["MEMGPT_LITE_EMBEDDER"], names["MEMGPT_LITE_EMBEDDER"] = spec, "flag --embedder"
    try:
        return EmbeddingConfig.from_env(env, names).build()
    except EmbeddingError as exc:
        raise UserError(str(exc)) from None


def wanted_embedder() -> Any:
    """The embedder hybrid search uses when MEMGPT_LITE_EMBEDDER is set (in the environment
    or the config file), or unset with a model installed as the default; else None."""
    from memgpt_lite.engine.config_file import env_value

    spec = (env_value("MEMGPT_LITE_EMBEDDER") or "").strip().lower()
    if spec == "none" or (not spec and not _has_default()):
        return None
    return configured_embedder()


def chat_embedder(agent: Any) -> Any:
    """Hybrid search for a chat (see wanted_embedder): returns the background indexer to
    close at the end of the session, or None."""
    embedder = wanted_embedder()
    if embedder is None:
        return None
    from memgpt_lite.engine.indexer import attach_embedder

    return attach_embedder(agent, embedder)


def _has_default() -> bool:
    from memgpt_lite.engine.model_catalog import default_model

    return default_model() is not None


def cmd_embeddings_list(args: argparse.Namespace) -> int:
    """`memgpt-lite embeddings list`: the known models, their size, languages and measured
    recall, and which are installed."""
    from rich.table import Table

    from memgpt_lite.engine.model_catalog import KNOWN, default_model, installed

    current = default_model()
    table = Table("model", "size", "languages", "measured", "installed", pad_edge=False)
    for name, model in KNOWN.items():
        state = "—"
        if installed(name):
            state = "yes, the default" if current and current[0].name == name else "yes"
        table.add_row(name, f"{model.size_mb:,.0f} MB", model.languages, model.recall, state)
    Console(highlight=False).print(table)
    return EXIT_OK


def cmd_embeddings_install(args: argparse.Namespace) -> int:
    """`memgpt-lite embeddings install [MODEL]`: fetch the model once (a progress bar, a
    sha256 check, into the data dir's models folder), make it the default embedder, then
    index every agent with it. A model already installed intact is not fetched again."""
    from memgpt_lite.engine.embeddings import EmbeddingError
    from memgpt_lite.engine.model_catalog import DEFAULT_MODEL, KNOWN
    from memgpt_lite.engine.model_install import fetch, make_default

    name = args.model or DEFAULT_MODEL
    model = KNOWN.get(name)
    if model is None:
        raise UserError(f"There is no known model {name!r}; `memgpt-lite embeddings list` "
                        f"shows them: {', '.join(KNOWN)}.")
    console = Console(highlight=False)
    try:
        folder, fetched = _installing(console, model, fetch)
        make_default(name)
    except EmbeddingError as exc:
        raise UserError(str(exc)) from None
    how = "installed in" if fetched else "was already installed (files checked) in"
    console.print(f"{name} {how} {folder} and made the default embedder", markup=False)
    if args.no_index:
        return EXIT_OK
    return cmd_index(argparse.Namespace(agent=None, embedder=None))


def _installing(console: Console, model: Any, fetch: Callable[..., Any]) -> Any:
    """`fetch` with a progress bar on a terminal; piped, one line as each file starts."""
    def waiting() -> None:
        console.print("another install is running in this data dir; waiting for it",
                      markup=False)

    if not console.is_terminal:
        started: set[str] = set()

        def line(name: str, done: int, total: int | None) -> None:
            if name not in started:
                started.add(name)
                size = "" if not total else (f" ({total / 1e6:,.1f} MB)" if total >= 100_000
                                             else f" ({total:,} bytes)")
                console.print(f"{model.name}: fetching {name}{size}", markup=False)

        return fetch(model, line, waiting)
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    columns = ("{task.description}", BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def show(name: str, done: int, total: int | None) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{model.name}: {name}", total=total)
            bar.update(tasks[name], completed=done, total=total)

        return fetch(model, show, waiting)


def cmd_index(args: argparse.Namespace) -> int:
    """`memgpt-lite index [--agent NAME] [--embedder SPEC]`: embed every message and passage
    lacking a vector of the configured model, with a progress bar."""
    from memgpt_lite.engine.embeddings import EmbeddingError
    from memgpt_lite.engine.indexer import index_agent
    from memgpt_lite.engine.store import open_store

    embedder = configured_embedder(args.embedder)
    if embedder is None:
        raise UserError(_no_embedder(args.embedder))
    console = Console(highlight=False)
    with open_store() as store:
        agents = ([agent_checks.require_agent(store, args.agent)] if args.agent
                  else store.list_agents())
        for agent in agents:
            try:
                done = _index_one(console, store, agent, embedder, index_agent)
            except EmbeddingError as exc:
                raise UserError(f"Indexing agent {agent.name!r} stopped: {exc} What was "
                                "embedded is kept; run `memgpt-lite index` again.") from None
            console.print(f"agent {agent.name!r}: {done:,} rows embedded with {embedder.name}",
                          markup=False)
    return EXIT_OK


def _no_embedder(flag: str | None) -> str:
    """Why `index` has no embedder, naming what turned it off (`none` from the flag, a
    variable or the config file's line) when something did."""
    from memgpt_lite.engine.config_file import env_value

    how = "give onnx:FOLDER or http (see docs/search.md)"
    if flag:
        return f"--embedder {flag.strip()} asks for keyword search only; {how}."
    if env_value("MEMGPT_LITE_EMBEDDER"):
        return f"{_off()}; {how} there, or pass --embedder."
    return ("No embedder is configured: set MEMGPT_LITE_EMBEDDER (onnx:FOLDER or http; see "
            "docs/search.md) or pass --embedder.")


def _off() -> str:
    """What leaves hybrid search off, for the doctor: the line or variable that says
    `none`, else that nothing configures an embedder."""
    from memgpt_lite.engine.config_file import env_value, named

    spec = env_value("MEMGPT_LITE_EMBEDDER")
    if spec:
        return f"{named('MEMGPT_LITE_EMBEDDER', spec)} turns hybrid search off"
    return "no embedder is configured (MEMGPT_LITE_EMBEDDER)"


def _index_one(console: Console, store: Any, agent: Any, embedder: Any,
               index_agent: Callable[..., int]) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(f"indexing {agent.name}", total=None)

        def show(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return index_agent(store, agent.id, embedder, progress=show)


def doctor_vectors(store: Any, ok: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """One line per agent: how many rows lack a vector of the configured model (nothing
    when no embedder is configured and no agent has vectors)."""
    embedder = None
    from memgpt_lite.engine.config import ConfigError

    try:
        embedder = configured_embedder()
    except (UserError, ConfigError) as exc:  # a bad config file value: the doctor's FAIL too
        warn(f"hybrid search: {exc}")
    model = getattr(embedder, "name", None)
    for agent in store.list_agents():
        if model is None and not store.vector_models(agent.id):
            continue
        counts = store.vector_counts(agent.id, model)
        missing = {k: c["missing"] for k, c in counts.items()}
        what = (f"{missing['messages']:,} of {counts['messages']['rows']:,} messages and "
                f"{missing['passages']:,} of {counts['passages']['rows']:,} passages")
        if model is None:
            warn(f"agent {agent.name!r} has vectors but {_off()}: search uses keywords only")
        elif any(missing.values()):
            warn(f"agent {agent.name!r}: {what} lack vectors of {model} (keyword search "
                 "still finds them); run `memgpt-lite index`")
        else:
            ok(f"agent {agent.name!r}: every message and passage has a vector of {model}")

"""`memgpt-lite eval`: scenario runs (live, or re-scored from a recording with --replay),
--list of the bundled scenarios, --compare of two JSON reports, and the dataset runners
(LoCoMo, nested KV).

`cmd_eval` takes the argparse Namespace from cli.py, calls the lab's evaluation modules, hands
results to render.py's printers and returns an exit code: 0 fine, 1 a failed check, 2 a
mistake in the arguments or the environment, printed as one line on stdout with the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.lab import compare, locomo, nested_kv, scenarios
from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.terminal import eval_render, render
from memgpt_lite.terminal.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from memgpt_lite.terminal.progress import progress

DATASETS = ("locomo", "nkv", "nested_kv", "nested-kv")


class _UsageError(Exception):
    """A mistake in the eval's arguments or environment; the message is for the user.
    cmd_eval prints it on stdout with the tables (exit 2) rather than raising UserError."""


def cmd_eval(args: argparse.Namespace) -> int:
    """--compare, a dataset runner (`eval locomo FILE`), or scenarios. With `--json -` the
    JSON goes to stdout and the tables to stderr."""
    to_stdout = getattr(args, "json", None) == "-"
    console = render.make_console(file=sys.stderr if to_stdout else None, wrap=True)
    try:
        _check_options(args)
        _check_json_target(getattr(args, "json", None))
        if getattr(args, "list", False):
            return _list(console)
        if getattr(args, "compare", None):
            return _compare(console, args.compare)
        dataset = _dataset_name(args)
        try:
            if dataset is not None:
                return _dataset(console, dataset, args)
            return _scenarios(console, args)
        except KeyboardInterrupt:
            # Say what was kept before the command line says "interrupted".
            console.print(Text(_stopped_note(args), style="yellow"))
            raise
    except (ScenarioError, recording.RecordingError, _UsageError) as exc:
        render.print_error(console, str(exc))
        return EXIT_USAGE


# Each option by its attribute, and the options each mode uses: an option a mode would
# ignore (a judge in a run with no model calls) is refused rather than silently dropped.
_FLAGS = {"model": "--model", "replay": "--replay", "judge": "--judge",
          "retrieval_only": "--retrieval-only", "file": "--file", "embedder": "--embedder",
          "eval_db": "--db", "json": "--json"}
_USES = {"`eval --list`": (), "`eval --compare`": (),
         "a scenario run": ("model", "judge", "json"),
         "`eval --replay`": ("replay", "model", "json"),
         "`eval locomo --retrieval-only`": ("retrieval_only", "file", "embedder", "eval_db",
                                            "json"),
         "`eval locomo`": ("model", "judge", "file", "json"),
         "`eval nkv`": ("model", "file", "json")}


def _check_options(args: argparse.Namespace) -> None:
    mode = _mode(args)
    for attr, flag in _FLAGS.items():
        if getattr(args, attr, None) and attr not in _USES[mode]:
            uses = ", ".join(_FLAGS[a] for a in _USES[mode]) or "no other option"
            raise _UsageError(f"{flag} does not apply to {mode}, which takes {uses}")


def _mode(args: argparse.Namespace) -> str:
    if getattr(args, "list", False):
        return "`eval --list`"
    if getattr(args, "compare", None):
        return "`eval --compare`"
    dataset = _dataset_name(args)
    if dataset == "locomo":
        retrieval = getattr(args, "retrieval_only", False)
        return "`eval locomo --retrieval-only`" if retrieval else "`eval locomo`"
    if dataset is not None:
        return "`eval nkv`"
    return "`eval --replay`" if getattr(args, "replay", None) else "a scenario run"


def _stopped_note(args: argparse.Namespace) -> str:
    if _mode(args) == "`eval locomo`":  # its answers are kept as they come (AnswerLog)
        return ("The eval was stopped before its end: no report was written (an earlier "
                "--json file is kept), but the questions answered so far are: run the same "
                "command again to go on from there.")
    return ("The eval was stopped before its end: a run cut short cannot be resumed or "
            "scored, and no report was written (an earlier --json file is kept); run it "
            "again.")


def _answer_log(console: Console, file: str, settings: Any, judge: bool) -> Any:
    """Where a LoCoMo answering run keeps its answers, named by what they depend on (the
    file's bytes, the settings and model, the judge), so only the same run goes on from them."""
    import hashlib

    from memgpt_lite.engine.config import data_dir

    try:
        digest = hashlib.sha256(Path(file).read_bytes())
    except OSError:
        return None  # the runner says why it cannot read the file
    digest.update(f"\0{json.dumps(settings.to_dict(), sort_keys=True)}\0{judge}".encode())
    log = locomo.AnswerLog(data_dir() / "eval-progress" / f"locomo-{digest.hexdigest()[:16]}"
                                                         ".jsonl")
    if log.rows:
        console.print(render.shown(f"going on from a run stopped before its end: "
                                   f"{len(log.rows):,} questions answered then are kept, not "
                                   f"asked again ({log.path})", "yellow"))
    else:
        console.print(render.shown("answers are kept as they come: a run stopped before its "
                                   "end goes on from there when run again", "dim"))
    return log


def _dataset_name(args: argparse.Namespace) -> str | None:
    """The dataset runner named by the first positional (any case), else None."""
    first = getattr(args, "scenario", None)
    if first is None:
        many = getattr(args, "scenarios", None) or []
        first = many[0] if many else None
    if isinstance(first, str) and first.lower() in DATASETS:
        return first.lower()
    return None


def _scenario_paths(args: argparse.Namespace) -> list[Path]:
    given = getattr(args, "scenario", None)
    paths = [given] if given else list(getattr(args, "scenarios", None) or [])
    if not paths:
        paths = sorted(str(p) for p in _bundled_scenarios())
    if not paths:
        raise _UsageError("name a scenario file (TOML) to run")
    return [_bundled_by_name(str(p)) for p in paths]


def _bundled_scenarios() -> list[Path]:
    root = resources.files("memgpt_lite.data")
    return [Path(str(p)) for p in root.iterdir() if p.name.endswith(".toml")]


def _bundled_by_name(given: str) -> Path:
    """A file as given, or a bundled scenario named by its name (`correct-core-fact`) or its
    file's stem, when no such file exists."""
    if Path(given).exists():
        return Path(given)
    wanted = given.replace("_", "-").removesuffix(".toml")
    for path in _bundled_scenarios():
        if path.stem.replace("_", "-") == wanted:
            return path
    return Path(given)  # Scenario.load says it is missing


def _list(console: Console) -> int:
    """`eval --list`: the bundled scenarios, what each proves, and how to run them."""
    rows = [scenarios.Scenario.load(p) for p in sorted(_bundled_scenarios())]
    eval_render.print_scenario_list(console, rows)
    return EXIT_OK


def _live_client(args: argparse.Namespace) -> Any:
    from memgpt_lite.engine.model import AnthropicClient

    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
            or os.environ.get("ANTHROPIC_BASE_URL")):
        raise _UsageError("a live eval needs ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL); "
                          "or re-score a recording with --replay FILE")
    return AnthropicClient()


def _scenarios(console: Console, args: argparse.Namespace) -> int:
    replay_file = getattr(args, "replay", None)
    paths = _scenario_paths(args)
    if replay_file and len(paths) > 1:
        raise _UsageError("--replay serves one recording: run one scenario with it")
    # Every scenario is read and checked before the first is run: a bad check in the last
    # file must not be found after the others were paid for.
    loaded = [scenarios.Scenario.load(path) for path in paths]
    if len(loaded) == 1:
        reports = [_run_one(console, loaded[0], args, replay_file)]
    else:
        reports = []
        with progress(console, "scenarios", len(loaded)) as step:
            for scenario in loaded:
                reports.append(_run_one(console, scenario, args, replay_file))
                step(render.visible(reports[-1]["scenario"]))
    combined = compare.combine(reports)
    _write_json(console, getattr(args, "json", None), combined)
    if compare.failed(combined):
        console.print(Text(f"{combined['failed']} check(s) failed", style="bold red"))
        return EXIT_ERROR
    return EXIT_OK


def _run_one(console: Console, scenario: scenarios.Scenario, args: argparse.Namespace,
             replay_file: str | None) -> dict[str, Any]:
    judge = None
    model = getattr(args, "model", None)
    if replay_file:
        # A file, or the id `memgpt-lite sessions` shows for it, as `replay` takes.
        replay_file = str(recording.find_recording(replay_file))
        recorded = recording.Recording.load(replay_file)
        _check_recorded_scenario(recorded, scenario, replay_file)
        client: Any = replay_mod.ReplayModelClient(recorded)
        source, recorder = "replay", None
        replayed_as = replay_mod.replayed_as(recorded.header)  # an older version's too
        model = model or recorded.header.get("model")  # the requests must match the recording
    else:
        client = _live_client(args)
        source, replayed_as = "live", None
        recorder = recording.Recorder.create(_folder_name(scenario.name))
        judge = client if getattr(args, "judge", False) else None
    console.print(render.shown(f"▶ {scenario.name} · {len(scenario.inputs)} inputs · "
                               f"{len(scenario.checks)} checks · {source}", "bold"))
    progress = lambda msg: console.print(Text(f"  {msg}", style="dim"))  # noqa: E731
    try:
        report = scenarios.run_scenario(scenario, client, model=model,
                                        recorder=recorder, judge=judge, progress=progress,
                                        source=source, replayed_as=replayed_as)
    except replay_mod.Divergence as exc:
        # A recording of this name whose scenario has changed since (an edited file, or a
        # file named like a bundled scenario): its replies answer other questions.
        raise _UsageError(f"{replay_file} does not fit scenario {scenario.name!r} as it is "
                          f"now ({exc}); the scenario changed since that run: run it live "
                          f"again to score it") from None
    finally:
        if recorder is not None:
            recorder.close()
    eval_render.print_score_table(console, report)
    if recorder is not None:
        console.print(Text(f"recorded to {recorder.path} (re-score with --replay)", style="dim"))
    return report


def _check_recorded_scenario(recorded: Any, scenario: scenarios.Scenario, file: str) -> None:
    """A recording re-scored against another scenario (or a chat's) would serve replies to
    other questions: every request diverges and the score means nothing, so it is refused
    with the command that does fit. An eval recording names its scenario in its header."""
    header = recorded.header
    source = header.get("source")
    if source != "eval":
        kind = "a chat's recording" if source in ("live", None) else f"a {source} recording"
        raise _UsageError(f"{file} is {kind}, not an eval's: replay it with "
                          f"`memgpt-lite replay {file}`")
    note = str(header.get("note") or "")
    name = note.removeprefix("scenario ") if note.startswith("scenario ") else None
    if name is not None and name != scenario.name:
        raise _UsageError(f"{file} is a recording of scenario {name!r}, not "
                          f"{scenario.name!r}: re-score it with `memgpt-lite eval {name} "
                          f"--replay {file}`")
    # A run cut short (Ctrl-C, a kill) diverges where it ends, which would otherwise be
    # told as a changed scenario; its last turn says so (a changed scenario's may be whole).
    whole = _whole_turns(recorded.turns, scenario.inputs)
    if whole is not None and whole == header.get("inputs"):
        raise _UsageError(f"{file} is a whole run of scenario {scenario.name!r} as it was "
                          f"then, with {whole} inputs; it has {len(scenario.inputs)} now "
                          f"(inputs were added since): run it live again to score it")
    if whole is not None:
        # A recording from before headers counted the inputs, ending between two turns,
        # cannot tell a run cut short from a scenario grown since.
        cut_inside = bool(recorded.turns) and recorded.turns[-1].ends_early
        unsure = "inputs" not in header and not cut_inside
        or_grown = ", or the scenario gained inputs since" if unsure else ""
        raise _UsageError(f"{file} holds {whole} of the {len(scenario.inputs)} "
                          f"turns of scenario {scenario.name!r}: that run was cut short "
                          f"(interrupted or killed){or_grown}, so it cannot be scored; run it "
                          f"live again")


def _whole_turns(turns: list[Any], inputs: list[str]) -> int | None:
    """How many whole turns a run cut short holds (None: it was not cut short). A run
    stopped inside a turn ends with that turn cut; one stopped between two turns (or before
    the first) ends whole, with fewer turns than the scenario, each the input it has now:
    had the scenario changed instead, some input would differ."""
    if turns and turns[-1].ends_early and len(turns) <= len(inputs):
        return len(turns) - 1
    if len(turns) < len(inputs) and [t.text for t in turns] == inputs[:len(turns)]:
        return len(turns)
    return None


def _folder_name(scenario: str) -> str:
    """The recordings folder of a scenario's runs: its name is the file's to choose, so
    only letters, digits, `.`, `_` and `-` of it make the folder name (no `/`, no `..`)."""
    return "eval-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", scenario).strip("._")[:64] or "scenario")


def _compare(console: Console, files: list[str]) -> int:
    if len(files) != 2:
        raise _UsageError("--compare takes two JSON reports: A.json B.json")
    a, b = (compare.load_report(f) for f in files)
    result = compare.compare(a, b)
    eval_render.print_comparison(console, result, files)
    return EXIT_OK


# --------------------------------------------------------------------------- datasets


def _dataset(console: Console, name: str, args: argparse.Namespace) -> int:
    file = getattr(args, "file", None)
    if not file:
        many = getattr(args, "scenarios", None) or []
        file = many[1] if len(many) > 1 else None
    if not file:
        raise _UsageError(f"`eval {name}` needs the dataset file: memgpt-lite eval {name} FILE")
    settings = _dataset_settings(args)
    label = "LoCoMo samples" if name == "locomo" else "nested KV examples"
    with progress(console, label, None) as step:
        counted = _counted(step)
        if name == "locomo":
            retrieval = bool(getattr(args, "retrieval_only", False))
            client = None if retrieval else _live_client(args)
            judge = client if (client is not None and getattr(args, "judge", False)) else None
            log = None if retrieval else _answer_log(console, file, settings, judge is not None)
            result = locomo.run_locomo(file, retrieval_only=retrieval, model_client=client,
                                       settings=settings, judge=judge, progress=counted,
                                       embedder=_embedder(args),
                                       db=_scratch_server(args), log=log)
            if log is not None:
                log.finish()
        else:
            result = nested_kv.run_nested_kv(file, _live_client(args), settings=settings,
                                             progress=counted)
    if name == "locomo":
        eval_render.print_locomo(console, result)
    else:
        eval_render.print_nested_kv(console, result)
    _write_json(console, getattr(args, "json", None), result)
    return EXIT_OK


def _embedder(args: argparse.Namespace) -> Any:
    """`--embedder SPEC` (retrieval only): keyword, dense and hybrid side by side."""
    if not getattr(args, "embedder", None):
        return None
    from memgpt_lite.terminal.embedding_commands import configured_embedder

    return configured_embedder(args.embedder)


def _scratch_server(args: argparse.Namespace) -> str | None:
    """`eval locomo --retrieval-only --db URL`: the Postgres server to work on."""
    url = getattr(args, "eval_db", None)
    if not url:
        return None
    from memgpt_lite.engine.store import is_postgres_url

    if not is_postgres_url(url):
        raise _UsageError(f"--db takes a postgresql:// URL (the retrieval eval works in a "
                          f"scratch database on that server), got {url!r}")
    return url


def _check_json_target(target: str | None) -> None:
    """A `--json` path that cannot be written is said before the run, not after it."""
    from memgpt_lite.engine.files import write_problem

    problem = write_problem(Path(target)) if target and target != "-" else None
    if problem:
        raise _UsageError(f"cannot write the JSON report to {target}: {problem}")


def _write_json(console: Console, target: str | None, report: dict[str, Any]) -> None:
    """`--json FILE` (- for stdout): write the report, whole to a temporary file renamed
    over the target, so a failure never truncates an earlier report (the run is done; a bad
    path is the user's to fix)."""
    from memgpt_lite.terminal.commands import replace_file

    if not target:
        return
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        replace_file(Path(target), text)
    except OSError as exc:
        raise _UsageError(f"cannot write the JSON report to {target}: "
                          f"{exc.strerror or exc}") from None
    console.print(render.shown(f"JSON report: {target}", "dim"))


def _dataset_settings(args: argparse.Namespace) -> Any:
    from memgpt_lite.engine.config import Settings

    settings = Settings().with_env()
    if getattr(args, "model", None):
        settings.model = args.model
    return settings


def _counted(step: Any) -> Callable[[str], None]:
    """A dataset runner's progress messages ("sample 3/10 · question 41", "example 7/50")
    moved onto a progress display: its first "n/total" is the count, the rest the note."""
    state = {"done": 0}

    def show(message: str) -> None:
        found = re.search(r"(\d+)/(\d+)", message)
        done, total = (int(found.group(1)), int(found.group(2))) if found else (0, None)
        if found and done > state["done"]:
            step.total(total)
            step(message, advance=done - state["done"])
            state["done"] = done
        else:
            step(message, advance=0)

    return show

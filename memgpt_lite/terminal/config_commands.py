"""Settings at the command line: `memgpt-lite config path|show|set|unset` (the config file,
engine/config_file.py, with every setting of the registry and where its value came from),
and an agent's own settings: `agents set` and the "where it came from" of `agents show`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from memgpt_lite.terminal import agent_checks, render
from memgpt_lite.terminal.exit_codes import EXIT_OK, EXIT_USAGE, UserError


def _shown_path(path: Any) -> str:
    """A path as these commands print it: bytes that are not UTF-8 as `\\xNN` (text.py's
    rule), so the name printed tells the file apart from its neighbours, never as U+FFFD."""
    from memgpt_lite.engine.text import path_text

    return path_text(str(path))


def cmd_config_path(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path

    print(render.visible(_shown_path(config_path())))
    return EXIT_OK


def cmd_config_show(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import load

    loaded = load()
    console = render.make_console()
    state = "" if loaded.exists else " (not created yet: `memgpt-lite config set KEY VALUE` " \
                                     "creates it)"
    console.print(render.shown(f"config file {_shown_path(loaded.path)}{state}"))
    render.print_settings(console, setting_rows(loaded.values, loaded.bad))
    from memgpt_lite.engine.registry import AGENT_KEYS

    # Named from the registry, so a new per-agent setting is never left out of this note.
    keys = ", ".join(AGENT_KEYS[:-1]) + f" and {AGENT_KEYS[-1]}"
    console.print(render.shown(
        f"An agent's own stored value (agents set, chat --save) comes before the config file "
        f"for {keys}: `memgpt-lite agents show NAME` shows what applies to it."),
        soft_wrap=False)
    warn_unknown(loaded)
    for _value, sentence in loaded.bad.values():  # the commands that read it refuse it
        print(render.visible(f"memgpt-lite: {sentence}"), file=sys.stderr)
    return EXIT_OK


def setting_rows(file_values: dict[str, Any], bad: dict[str, tuple[Any, str]] | None = None,
                 ) -> list[tuple[str, str, str]]:
    """(key, value as shown, where it came from) of every setting the file may hold: the
    environment, the config file, or the default; a value of the file its setting cannot
    take (`bad`) is shown as written, marked as not used."""
    from memgpt_lite.engine.registry import SETTINGS, parse_text, shown_value
    from memgpt_lite.engine.text import path_text, quoted

    rows = []
    for setting in SETTINGS:
        env = os.environ.get(setting.env or "", "").strip()
        if env:
            # Paths as given (a data dir whose name is not UTF-8 works: shown with \xNN).
            value: Any = (env if setting.kind in ("text", "prefix") else path_text(env)
                          if setting.kind == "path" else parse_text(setting, env, setting.env))
            source = f"env {setting.env}"
        elif setting.key in file_values:
            value, source = file_values[setting.key], "config file"
        elif setting.key in (bad or {}):
            raw = bad[setting.key][0]  # type: ignore[index]
            rows.append((setting.key, "(set)" if setting.secret else quoted(raw, 40),
                         "config file: BAD VALUE, not used (see below)"))
            continue
        else:
            value, source = setting.default, "default"
            if value is None and setting.key in _APPLIED:
                value, source = _applied(setting.key)
        rows.append((setting.key, shown_value(setting, value), source))
    return rows


# Paths with no default value still have one that applies: shown, and what chose it.
_APPLIED = {"home": "default: the platform's data dir",
            "config": "default: the platform's config dir",
            "project": "default: from the working directory"}


def _applied(key: str) -> tuple[Any, str]:
    from memgpt_lite.engine.config import ConfigError, data_dir
    from memgpt_lite.engine.config_file import config_path
    from memgpt_lite.engine.project import project_root

    where = {"home": data_dir, "config": config_path, "project": project_root}[key]
    try:
        return str(where()), _APPLIED[key]
    except (ConfigError, OSError):  # the working directory was removed under us
        return None, "default"


def cmd_config_set(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path, set_value
    from memgpt_lite.engine.registry import BY_KEY, shown_value

    value = set_value(args.key, args.value, usable=_usable,
                      check=lambda values: _file_applies(values, args.key))
    print(render.visible(f"{args.key} = {shown_value(BY_KEY[args.key], value)} in "
                         f"{_shown_path(config_path())}."))
    _note_environment([args.key])
    _warn_unknown_models({args.key: value})  # a typo here reaches every agent
    return EXIT_OK


def _usable(setting: Any, value: Any, label: str) -> Any:
    """`value` as a reader will use it, checked by that reader's own rule (ConfigError
    naming `label`): a price table that loads, a model folder that holds a model, a store
    that can be opened. A relative path becomes absolute, since the file applies in every
    working directory. (Here, above the engine's modules: each of them reads the config
    file, so the file cannot import them.)"""
    from pathlib import Path

    from memgpt_lite.engine.config import ConfigError

    if setting.key == "prices":
        from memgpt_lite.engine.tokens import price_file

        value = str(Path(value).expanduser().absolute())
        price_file(value, label)
    elif setting.key == "embedder" and value.lower().startswith("onnx:"):
        from memgpt_lite.engine.embeddings import EmbeddingError, model_file

        folder = Path(value.partition(":")[2]).expanduser().absolute()
        try:
            model_file(folder)
        except EmbeddingError as exc:
            raise ConfigError(f"{label}: {exc}") from None
        value = f"onnx:{folder}"
    elif setting.key == "database_url":
        from memgpt_lite.engine.store import sqlite_path, target_problem

        problem = target_problem(value)
        if problem:
            raise ConfigError(f"{label}: {problem}")
        local = sqlite_path(value)
        value = str(local.absolute()) if local is not None else value
    return value


def _file_applies(values: dict[str, Any], given: str) -> None:
    """UserError unless the file's agent settings, as they would be, work together for an
    agent with nothing of its own: a window that holds one turn of a new agent, max output
    tokens the model writes, thinking with room to think. What the next chat refuses is
    refused here, and the file stays as it was. `given`: the key being set, named as typed."""
    from memgpt_lite.engine.config import ConfigError, Settings
    from memgpt_lite.engine.memory import default_blocks
    from memgpt_lite.engine.records import Block

    given = given.strip().replace("-", "_")
    if given not in user_settings():
        return  # the agent settings are as they were (and a window near its minimum would
        # be counted with the API again for nothing)
    own = {k: v for k, v in values.items() if k in user_settings()}
    try:
        settings = Settings(**own).check("setting", room=False)
    except ConfigError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None
    where = {k: "given here" if k == given else "in the config file" if k in own
             else "the default" for k in user_settings()}
    _check_thinking(settings, where)
    blocks = [Block(label, value, limit)
              for label, (value, limit) in default_blocks(settings.block_limit).items()]
    agent_checks.check_window(settings, blocks, None, {
        k: k if k == given else f"{k} in the config file" for k in own})
    _each_agent_applies(own, given)


def _each_agent_applies(own: dict[str, Any], given: str) -> None:
    """UserError when the file's values would leave an existing agent that takes them
    (having no value of its own for them) with settings its next chat refuses: the chat's
    rule (chat_main.chat_settings) on the agent's own core memory. A store that cannot be
    opened now is the next command's to report."""
    from memgpt_lite.engine.config import (
        ConfigError,
        Settings,
        database_url,
        db_path,
        own_settings,
    )
    from memgpt_lite.engine.store import StoreError, open_store

    try:
        if not database_url() and not db_path().exists():
            return  # no agent yet, and no data dir to make for nothing
        store = open_store()
    except (StoreError, ConfigError, OSError):
        return
    with store:
        for row in store.list_agents():
            mine = own_settings(row.settings)
            named = {k: k if k == given else f"{k} in the config file"
                     for k in own if k not in mine}
            if given not in named:
                continue  # the agent keeps its own value of what is set here
            settings = Settings(**{**own, **mine})
            try:
                settings.check("setting", room=False)
                _check_thinking(settings, {k: "given here" if k == given else "in the config "
                                           "file" if k in named else "the agent's own"
                                           for k in user_settings()})
                if {"context_window", "max_output_tokens"} & set(named):
                    agent_checks.check_window(settings, store.get_blocks(row.id),
                                              row.state.get("counter"), named)
            except (UserError, ConfigError) as exc:
                raise UserError(f"For agent {row.name!r}: {exc}", EXIT_USAGE) from None


def _check_thinking(settings: Any, where: dict[str, str]) -> None:
    """Thinking spends up to its budget of the max output tokens: UserError unless there is
    more (`where`: how each of the two settings was given)."""
    if settings.thinking and settings.max_output_tokens <= settings.thinking_budget:
        raise UserError(f"thinking=on ({where['thinking']}) needs max_output_tokens above "
                        f"{settings.thinking_budget:,}; it is "
                        f"{settings.max_output_tokens:,} ({where['max_output_tokens']}).",
                        EXIT_USAGE)


def _note_environment(keys: Any) -> None:
    """A line on stderr for each setting just written that the environment overrides."""
    from memgpt_lite.engine.registry import BY_KEY

    for key in keys:
        env = BY_KEY[key].env if key in BY_KEY else None
        if env and os.environ.get(env, "").strip():
            print(render.visible(f"note: {env} is set in this environment and comes first."),
                  file=sys.stderr)


def cmd_config_unset(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path, unset

    removed = unset(args.key, check=lambda values: _file_applies(values, args.key))
    where = _shown_path(config_path())
    print(render.visible(f"{args.key} removed from {where}." if removed else
                         f"{args.key} is not set in {where}; nothing changed."))
    return EXIT_OK


def warn_unknown(loaded: Any) -> None:
    """One line on stderr for keys of the file that are not settings (they are ignored), and
    one for settings only a variable sets (`home`: `config show` lists them, so a user puts
    them in the file and would otherwise be told they are not settings)."""
    from memgpt_lite.engine.registry import BY_KEY

    where = _shown_path(loaded.path)
    env_only = [k for k in loaded.unknown if k in BY_KEY and BY_KEY[k].env]
    unknown = [k for k in loaded.unknown if k not in env_only]
    if unknown:
        keys = ", ".join(repr(k) for k in unknown)
        print(render.visible(f"memgpt-lite: warning: the config file {where} holds "
                             f"{keys}, not a setting (ignored; `memgpt-lite config show` lists "
                             "the settings)."), file=sys.stderr)
    if env_only:
        keys = ", ".join(repr(k) for k in env_only)
        variables = ", ".join(str(BY_KEY[k].env) for k in env_only)
        print(render.visible(f"memgpt-lite: warning: the config file {where} holds "
                             f"{keys}, which the config file cannot set (ignored; set "
                             f"{variables} instead)."), file=sys.stderr)


# --------------------------------------------------------------------------- agents show|set


def user_settings() -> tuple[str, ...]:
    """The settings an agent stores its own value of (`agents set`, `agents show`); the rest
    of `config.Settings` are tuning knobs that exports carry but the command line does not
    offer."""
    from memgpt_lite.engine.registry import AGENT_KEYS

    return AGENT_KEYS


def setting_sources(stored: dict[str, Any] | None) -> list[tuple[str, Any, str]]:
    """(name, value in effect for the next chat, where it came from) of each user setting:
    the environment, the agent's stored value, the config file, or the default (a flag
    given to one chat holds for that chat only)."""
    from memgpt_lite.engine.config import resolve_settings

    settings, sources = resolve_settings(stored)
    return [(name, getattr(settings, name), sources[name]) for name in user_settings()]


def cmd_agents_show(args: argparse.Namespace) -> int:
    from memgpt_lite.terminal.commands import _open_store, _require_agent

    with _open_store() as store:
        row = _require_agent(store, args.name)
        agent_checks.settle(store, row)
        from memgpt_lite.terminal.task_commands import see_project

        see_project(store, row, args.project)  # its project's block, shown with the others
        render.print_agent(render.make_console(), store, row, setting_sources(row.settings))
    return EXIT_OK


def cmd_agents_set(args: argparse.Namespace) -> int:
    """`agents set NAME key=value ...` or `--reset [KEY ...]`, checked like an import."""
    from memgpt_lite.engine.config import (
        ConfigError,
        Settings,
        own_settings,
        resolve_settings,
        stored_form,
    )
    from memgpt_lite.terminal.commands import _known, _open_store, _require_agent

    with _open_store() as store, store.agent_lock(_known(store, args.name)):
        row = _require_agent(store, args.name)
        if args.reset is not None and args.assignments:
            raise UserError("Give either KEY=VALUE settings or --reset, not both.", EXIT_USAGE)
        own = own_settings(row.settings)
        if args.reset is not None:
            changes = _reset(args.reset)
            own = {k: v for k, v in own.items() if k not in changes}
        else:
            changes = _assignments(args.assignments)
            own.update(changes)
        try:
            settings, sources = resolve_settings(stored_form(own))
            Settings.from_dict(settings.to_dict(), where="setting")
        except ConfigError as exc:
            raise UserError(str(exc), EXIT_USAGE) from None
        # Either may come from elsewhere (the config file, the environment), unchanged here.
        _check_thinking(settings, {k: "given here" if k in changes else _from(v)
                                   for k, v in sources.items()})
        # Named as the user gave each (the config file's, a variable), those set here by key.
        named = {**agent_checks.named_settings(sources), **{k: k for k in changes}}
        agent_checks.check_window(settings, store.get_blocks(row.id), row.state.get("counter"),
                                  named)
        store.update_settings(row.id, stored_form(own))
    from memgpt_lite.engine.registry import BY_KEY, shown_value

    # as `agents show` prints them (on/off, not True/False)
    shown = ", ".join(f"{k}={shown_value(BY_KEY[k], v) if k in BY_KEY else v}"
                      for k, v in changes.items())
    print(render.visible(f"Agent {row.name!r}: {shown}."))
    _note_environment(changes)
    _warn_unknown_models(changes)
    return EXIT_OK


def _from(source: str) -> str:
    """Where a value came from, as a sentence says it (resolve_settings' sources)."""
    return {"stored": "the agent's own value", "default": "the default"}.get(source, source)


def _warn_unknown_models(changes: dict[str, Any]) -> None:
    from memgpt_lite.engine.tokens import KNOWN_MODELS, known_model

    for key in ("model", "summary_model"):
        if key in changes and not known_model(changes[key]):
            print(render.visible(f"warning: {changes[key]!r} is not a model memgpt-lite knows "
                                 f"(known: {', '.join(KNOWN_MODELS)}); its cost is unknown "
                                 f"unless MEMGPT_LITE_PRICES gives its price"),
                  file=sys.stderr)


def _assignments(items: list[str]) -> dict[str, Any]:
    if not items:
        raise UserError("Name at least one setting, e.g. `model=haiku` (settings: "
                        f"{', '.join(user_settings())}), or use --reset.", EXIT_USAGE)
    return {key: _setting_value(key, value) for key, value in map(_split_assignment, items)}


def _split_assignment(item: str) -> tuple[str, str]:
    key, eq, value = item.partition("=")
    key = key.strip().replace("-", "_")
    if not eq or key not in user_settings():
        raise UserError(f"{item!r} is not KEY=VALUE with KEY one of "
                        f"{', '.join(user_settings())}.", EXIT_USAGE)
    return key, value.strip()


def _setting_value(key: str, value: str) -> Any:
    from memgpt_lite.engine.config import ConfigError
    from memgpt_lite.engine.registry import BY_KEY, parse_text

    try:
        return parse_text(BY_KEY[key], value, key)
    except ConfigError as exc:
        raise UserError(str(exc), EXIT_USAGE) from None


def _reset(keys: list[str]) -> dict[str, Any]:
    """The settings --reset names (all of them when none is), with the value each goes
    back to: the config file's, else the default."""
    from memgpt_lite.engine.config import resolve_settings

    names = [k.strip().replace("-", "_") for k in keys] or list(user_settings())
    unknown = [k for k in names if k not in user_settings()]
    if unknown:
        raise UserError(f"{unknown[0]!r} is not a setting (settings: "
                        f"{', '.join(user_settings())}).", EXIT_USAGE)
    unset = resolve_settings({"_form": 2})[0].to_dict()
    return {k: unset[k] for k in names}

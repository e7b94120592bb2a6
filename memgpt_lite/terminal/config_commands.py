"""`memgpt-lite config path|show|set|unset`: the config file (engine/config_file.py) at the
command line, with every setting of the registry and where its value came from."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from memgpt_lite.terminal import render
from memgpt_lite.terminal.exit_codes import EXIT_OK


def cmd_config_path(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path

    print(render.visible(config_path()))
    return EXIT_OK


def cmd_config_show(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import load

    loaded = load()
    console = render.make_console()
    state = "" if loaded.exists else " (not created yet: `memgpt-lite config set KEY VALUE` " \
                                     "creates it)"
    console.print(render.shown(f"config file {loaded.path}{state}"))
    render.print_settings(console, setting_rows(loaded.values))
    console.print(render.shown(
        "An agent's own stored value (agents set, chat --save) comes before the config file for "
        "model, summary_model, context_window, max_output_tokens and thinking: `memgpt-lite "
        "agents show NAME` shows what applies to it."), soft_wrap=False)
    warn_unknown(loaded)
    return EXIT_OK


def setting_rows(file_values: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, value as shown, where it came from) of every setting the file may hold: the
    environment, the config file, or the default."""
    from memgpt_lite.engine.registry import SETTINGS, parse_text, shown_value

    rows = []
    for setting in SETTINGS:
        env = os.environ.get(setting.env or "", "").strip()
        if env:
            value: Any = parse_text(setting, env, setting.env) if setting.kind != "text" else env
            source = f"env {setting.env}"
        elif setting.key in file_values:
            value, source = file_values[setting.key], "config file"
        else:
            value, source = setting.default, "default"
        rows.append((setting.key, shown_value(setting, value), source))
    return rows


def cmd_config_set(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path, set_value
    from memgpt_lite.engine.registry import BY_KEY, shown_value

    value = set_value(args.key, args.value)
    print(render.visible(f"{args.key} = {shown_value(BY_KEY[args.key], value)} in "
                         f"{config_path()}."))
    env = BY_KEY[args.key].env
    if env and os.environ.get(env, "").strip():
        print(render.visible(f"note: {env} is set in this environment and comes first."),
              file=sys.stderr)
    return EXIT_OK


def cmd_config_unset(args: argparse.Namespace) -> int:
    from memgpt_lite.engine.config_file import config_path, unset

    removed = unset(args.key)
    where = config_path()
    print(render.visible(f"{args.key} removed from {where}." if removed else
                         f"{args.key} is not set in {where}; nothing changed."))
    return EXIT_OK


def warn_unknown(loaded: Any) -> None:
    """One line on stderr for keys of the file that are not settings (they are ignored)."""
    if loaded.unknown:
        keys = ", ".join(repr(k) for k in loaded.unknown)
        print(render.visible(f"memgpt-lite: warning: the config file {loaded.path} holds "
                             f"{keys}, not a setting (ignored; `memgpt-lite config show` lists "
                             "the settings)."), file=sys.stderr)

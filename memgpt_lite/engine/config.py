"""Settings, the data directory and the rule for agent names. Nothing here touches disk
at import time."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from memgpt_lite.engine.setting_rules import (  # noqa: F401 - part of this module's API
    FIELD_RULES,
    ConfigError,
    base_url_problem,
    check_seconds,
    check_setting,
)
from memgpt_lite.engine.text import quoted

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_SUMMARY_MODEL = "claude-haiku-5-5"
DB_FILENAME = "memgpt_lite.db"


def data_dir() -> Path:
    """The one place that decides where data lives: $MEMGPT_LITE_HOME, else the
    platformdirs user data dir. Not created here; the store creates it (0700). Blank (only
    spaces) counts as unset, as for every variable: ` ` was a folder named so in the working
    directory, while `config show` named the default."""
    override = os.environ.get("MEMGPT_LITE_HOME", "").strip()
    if override:
        return Path(override).expanduser()
    import platformdirs  # imported lazily: keeps `--help` fast

    return Path(platformdirs.user_data_dir("memgpt-lite", appauthor=False))


def db_path() -> Path:
    return data_dir() / DB_FILENAME


def database_url() -> str | None:
    """$MEMGPT_LITE_DATABASE_URL (the CLI's global --db sets it; else the config file's
    database_url): where the store lives when it is not the data dir's SQLite file, e.g.
    postgresql://user@host/db. None: the file."""
    from memgpt_lite.engine.config_file import env_value

    return env_value("MEMGPT_LITE_DATABASE_URL")


def recordings_dir() -> Path:
    return data_dir() / "recordings"


# Agent names become file names (lock files) and appear in every listing: one rule for every
# new name. Agents named otherwise before the rule existed keep working under their name
# (every command finds them) and can be renamed to a name that fits.
AGENT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
AGENT_NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-', not starting with '.'"


def agent_name_problem(name: str) -> str | None:
    """One sentence when `name` cannot be a new agent's name, else None."""
    if AGENT_NAME.fullmatch(name):
        return None
    return f"{quoted(name)} cannot be an agent name: use {AGENT_NAME_RULE} (e.g. work or ada-2)."


@dataclass
class Settings:
    """Per-agent settings, stored with the agent. CLI flags and env vars override them."""

    model: str = DEFAULT_MODEL
    summary_model: str = DEFAULT_SUMMARY_MODEL
    max_output_tokens: int = 2048
    # A working budget well under the model's window, so turns stay cheap and paging happens.
    context_window: int = 32_000
    safety_margin: int = 1_000
    warn_fraction: float = 0.70
    flush_fraction: float = 0.90
    flush_target_fraction: float = 0.50
    max_calls_per_turn: int = 12
    thinking: bool = False
    thinking_budget: int = 1024
    block_limit: int = 5_000
    fold_min_chars: int = 2_000  # tool results longer than this are folded when pressure rises
    # Every core and archival memory write is shown to the user and applied only if approved.
    confirm_memory: bool = False

    @property
    def budget(self) -> int:
        """Tokens a request may use: context window − max output − safety margin."""
        return max(1, self.context_window - self.max_output_tokens - self.safety_margin)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, where: str = "settings",
                  room: bool = True) -> Settings:
        """Settings from stored or imported data: unknown keys are ignored (a newer version
        may add some), every known one is checked (ConfigError naming it, see `check`).
        `room=False` for settings an agent already has (stored, or in a recording's header):
        an older version stored windows that leave no room, which the chat opens with a
        warning (`check_room`), so reading them must not refuse the agent."""
        if d is not None and not isinstance(d, dict):
            raise ConfigError(f"{where} must be an object of settings, got {type(d).__name__}.")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in (d or {}).items() if k in known}
        for name, value in values.items():
            _check_field(name, value, where)
        return cls(**values).check(where, room=room)

    def check(self, where: str = "settings", *, room: bool = True) -> Settings:
        """Self, when the settings make sense together; else ConfigError naming the field.
        `room=False` leaves the window's room to `check_room`, which names the setting as
        the user gave it."""
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name), where)
        if not self.flush_target_fraction < self.flush_fraction:
            raise ConfigError(f"{where}.flush_target_fraction must be below flush_fraction.")
        if not self.warn_fraction <= self.flush_fraction:
            raise ConfigError(f"{where}.warn_fraction must not be above flush_fraction.")
        if room and self.context_window - self.max_output_tokens - self.safety_margin < 1:
            raise ConfigError(f"{where}: max_output_tokens ({self.max_output_tokens:,}) and "
                              f"safety_margin ({self.safety_margin:,}) leave no room in "
                              f"context_window ({self.context_window:,}).")
        return self

    def with_env(self) -> Settings:
        """A copy with the environment's per-agent settings applied (unset or empty
        variables are ignored), each checked like the setting it sets (ConfigError naming
        the variable)."""
        out = replace(self)
        for name, value in _env_layer().items():
            setattr(out, name, value)
        return out


def _env_layer() -> dict[str, Any]:
    """Per-agent settings set by environment variables now, parsed and checked."""
    from memgpt_lite.engine.registry import SETTINGS, parse_text

    return {s.key: parse_text(s, os.environ[s.env], s.env) for s in SETTINGS
            if s.agent and s.env and os.environ.get(s.env, "").strip()}


def env_names() -> dict[str, str]:
    """Setting → the environment variable that set it, for those set now."""
    from memgpt_lite.engine.registry import SETTINGS

    return {s.key: s.env for s in SETTINGS
            if s.agent and s.env and os.environ.get(s.env, "").strip()}


def setting_names(name: str) -> str:
    """How a user changes a setting, for notices: its flag and its variable."""
    from memgpt_lite.engine.registry import BY_KEY

    setting = BY_KEY.get(name)
    names = (setting.flag, setting.env) if setting else ()
    return " or ".join(n for n in names if n) or name


# An agent's own settings (`agents set`, `chat --save`) are stored as {OWN_FORM: 2, key:
# value, ...}, only the keys it set. Agents stored before hold every field; there a value
# equal to the default counts as not set, so the config file's value applies to it.
OWN_FORM = "_form"


def own_settings(stored: dict[str, Any] | None) -> dict[str, Any]:
    """The settings an agent holds as its own (see OWN_FORM), from its stored dict."""
    known = {f.name: f.default for f in fields(Settings)}
    if not isinstance(stored, dict):
        return {}
    if stored.get(OWN_FORM) == 2:
        return {k: v for k, v in stored.items() if k in known}
    return {k: v for k, v in stored.items() if k in known and v != known[k]}


def stored_form(own: dict[str, Any]) -> dict[str, Any]:
    """What to store for an agent whose own settings are `own`."""
    return {OWN_FORM: 2, **own}


def resolve_settings(stored: dict[str, Any] | None,
                     flags: dict[str, tuple[Any, str]] | None = None,
                     ) -> tuple[Settings, dict[str, str]]:
    """The settings in effect and where each came from: flags ({field: (value, flag)}) over
    the environment over the agent's own stored values over the config file over the
    defaults. Every value is checked where it entered (ConfigError naming it)."""
    from memgpt_lite.engine.config_file import load

    values = Settings().to_dict()
    sources = dict.fromkeys(values, "default")
    env, variables = _env_layer(), env_names()
    layers = [({k: v for k, v in load().values.items() if k in values}, "config file"),
              (own_settings(stored), "stored"),
              *(({k: v}, f"env {variables[k]}") for k, v in env.items()),
              *(({k: v}, f"flag {flag}") for k, (v, flag) in (flags or {}).items())]
    for layer, source in layers:
        values.update(layer)
        sources.update(dict.fromkeys(layer, source))
    for key in load().bad:  # only a bad value that nothing above replaces is in the way
        if sources.get(key) == "default":
            load().refuse(key)
    return Settings(**values).check(room=False), sources


def check_room(settings: Settings, floor: int, named: dict[str, str]) -> None:
    """ConfigError when max output tokens are more than the model writes, or the context
    window cannot hold `floor` tokens (the fixed part of a request and one turn, see
    `window.request_floor`) plus max output tokens and the safety margin. The sentence names
    the setting as the user gave it (`named`: setting → flag or variable)."""
    out = named.get("max_output_tokens", "max_output_tokens")
    limit = max_output_limit(settings.model)
    if limit is not None and settings.max_output_tokens > limit:
        raise ConfigError(f"{out} {settings.max_output_tokens:,} is more than {settings.model} "
                          f"writes in one reply; use at most {limit:,}.")
    minimum = floor + settings.max_output_tokens + settings.safety_margin
    if settings.context_window >= minimum:
        return
    most = settings.context_window - floor - settings.safety_margin
    if "max_output_tokens" in named and "context_window" not in named and most > 0:
        raise ConfigError(f"{out} {settings.max_output_tokens:,} leaves too little of the "
                          f"{settings.context_window:,}-token context window for the system "
                          f"prompt, tools, core memory and one turn (about {floor:,} tokens); "
                          f"use at most {most:,}.")
    window = named.get("context_window", "the agent's stored context window "
                                         "(set it with --context-window)")
    raise ConfigError(f"{window} {settings.context_window:,} is too small: the system prompt, "
                      f"tools, core memory and one turn take about {floor:,} tokens, and "
                      f"{settings.max_output_tokens:,} max output tokens and a "
                      f"{settings.safety_margin:,}-token safety margin come on top; the "
                      f"minimum is {minimum:,}.")


def max_output_limit(model: str) -> int | None:
    """The most output tokens `model` can write in one reply (None: an unknown model)."""
    return MODEL_MAX_OUTPUT.get(model)


# The most output tokens a known model writes in one reply; a request asking for more is
# refused by the API. Unknown models are bounded only by the budget.
MODEL_MAX_OUTPUT = {"claude-sonnet-5-5": 64_000, "claude-haiku-5-5": 64_000,
                    "claude-opus-5-5": 32_000}


def _check_field(name: str, value: Any, where: str) -> None:
    check_setting(name, value, f"{where}.{name}")


DEFAULT_TIMEOUT = 120.0  # seconds a model call may take in all, retries included


def parse_seconds(text: str, name: str) -> float:
    """A positive number of seconds, at most an hour (ConfigError naming `name`)."""
    try:
        value = float(str(text).strip().removesuffix("s"))
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got "
                          f"{quoted(text, 60)}.") from None
    return check_seconds(value, name, text)


def timeout_setting(flag: str | None = None) -> float:
    """How long a model call may take: the --timeout flag, else MEMGPT_LITE_TIMEOUT, else
    the config file's timeout, else the default."""
    if flag:
        return parse_seconds(flag, "--timeout")
    from memgpt_lite.engine.config_file import env_value

    env = env_value("MEMGPT_LITE_TIMEOUT")
    return parse_seconds(env, "MEMGPT_LITE_TIMEOUT") if env else DEFAULT_TIMEOUT


def parse_positive_int(text: str, name: str) -> int:
    try:
        value = int(str(text).replace("_", "").replace(",", ""))
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {quoted(text, 60)}.") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {quoted(value, 60)}.")
    return value

"""Settings and the data directory. Nothing here touches disk at import time."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_SUMMARY_MODEL = "claude-haiku-5-5"
DB_FILENAME = "memgpt_lite.db"


def data_dir() -> Path:
    """The one place that decides where data lives: $MEMGPT_LITE_HOME, else the
    platformdirs user data dir. Not created here; the store creates it (0700)."""
    override = os.environ.get("MEMGPT_LITE_HOME")
    if override:
        return Path(override).expanduser()
    import platformdirs  # imported lazily: keeps `--help` fast

    return Path(platformdirs.user_data_dir("memgpt-lite", appauthor=False))


def db_path() -> Path:
    return data_dir() / DB_FILENAME


def recordings_dir() -> Path:
    return data_dir() / "recordings"


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

    @property
    def budget(self) -> int:
        """Tokens a request may use: context window − max output − safety margin."""
        return max(1, self.context_window - self.max_output_tokens - self.safety_margin)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, where: str = "settings") -> Settings:
        """Settings from stored or imported data: unknown keys are ignored (a newer version
        may add some), every known one is checked (ConfigError naming it, see `check`)."""
        if d is not None and not isinstance(d, dict):
            raise ConfigError(f"{where} must be an object of settings, got {type(d).__name__}.")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in (d or {}).items() if k in known}
        for name, value in values.items():
            _check_field(name, value, where)
        return cls(**values).check(where)

    def check(self, where: str = "settings") -> Settings:
        """Self, when the settings make sense together; else ConfigError naming the field."""
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name), where)
        if not self.flush_target_fraction < self.flush_fraction:
            raise ConfigError(f"{where}.flush_target_fraction must be below flush_fraction.")
        if not self.warn_fraction <= self.flush_fraction:
            raise ConfigError(f"{where}.warn_fraction must not be above flush_fraction.")
        if self.context_window - self.max_output_tokens - self.safety_margin < 1:
            raise ConfigError(f"{where}: max_output_tokens ({self.max_output_tokens:,}) and "
                              f"safety_margin ({self.safety_margin:,}) leave no room in "
                              f"context_window ({self.context_window:,}).")
        return self

    def with_env(self) -> Settings:
        """A copy with the environment overrides of ENV_OVERRIDES applied (unset or empty
        variables are ignored)."""
        out = replace(self)
        for var, name in ENV_OVERRIDES.items():
            value = os.environ.get(var)
            if value:
                number = isinstance(getattr(out, name), int)
                setattr(out, name, parse_positive_int(value, var) if number else value)
        return out


ENV_OVERRIDES = {  # environment variable → Settings field
    "MEMGPT_LITE_MODEL": "model",
    "MEMGPT_LITE_SUMMARY_MODEL": "summary_model",
    "MEMGPT_LITE_CONTEXT_WINDOW": "context_window",
    "MEMGPT_LITE_MAX_TOKENS": "max_output_tokens",
}


class ConfigError(ValueError):
    """A user-supplied setting is invalid; the message is one sentence for the user."""


# What each setting may be: (kind, lowest, highest); kind is str, int, float or bool.
FIELD_RULES: dict[str, tuple[type, float | None, float | None]] = {
    "model": (str, 1, 200), "summary_model": (str, 1, 200),  # (lengths, for text)
    "max_output_tokens": (int, 1, 1_000_000), "context_window": (int, 1, 100_000_000),
    "safety_margin": (int, 0, 100_000_000), "warn_fraction": (float, 0.01, 1.0),
    "flush_fraction": (float, 0.01, 1.0), "flush_target_fraction": (float, 0.01, 0.99),
    "max_calls_per_turn": (int, 1, 1_000), "thinking": (bool, None, None),
    "thinking_budget": (int, 1024, 1_000_000), "block_limit": (int, 1, 10_000_000),
    "fold_min_chars": (int, 0, 100_000_000),
}
_KIND_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def _check_field(name: str, value: Any, where: str) -> None:
    kind, low, high = FIELD_RULES[name]
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"{where}.{name} must be {_KIND_NAMES[kind]}, got {value!r:.40}.")
    size = len(value.strip()) if kind is str else value
    if kind is str and (not value.isprintable()):
        raise ConfigError(f"{where}.{name} must be printable text, got {value!r:.40}.")
    if low is not None and not low <= size <= high:  # type: ignore[operator]
        what = "must be between" if kind is not str else "must have between"
        unit = " characters" if kind is str else ""
        raise ConfigError(f"{where}.{name} {what} {low:,} and {high:,}{unit}, "
                          f"got {value!r:.40}.")


def parse_positive_int(text: str, name: str) -> int:
    try:
        value = int(str(text).replace("_", "").replace(",", ""))
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {text!r}.") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}.")
    return value

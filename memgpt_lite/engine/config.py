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
    def from_dict(cls, d: dict[str, Any] | None) -> Settings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

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


def parse_positive_int(text: str, name: str) -> int:
    try:
        value = int(str(text).replace("_", "").replace(",", ""))
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {text!r}.") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}.")
    return value

"""What a setting may be, with no other module of the package below it: the error for a bad
value, the bounds of each per-agent setting, the known models and their aliases, what a URL
of the API or an embeddings endpoint and a store's URL must look like. The settings
registry (registry.py) and the config file (config_file.py) check values with these, and
config.py and tokens.py re-export them."""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.text import quoted


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
    "fold_min_chars": (int, 0, 100_000_000), "confirm_memory": (bool, None, None),
}
_KIND_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def check_setting(name: str, value: Any, label: str) -> None:
    """ConfigError (naming the setting as `label`: a field, a flag or a variable) when
    `value` is not what setting `name` may be."""
    kind, low, high = FIELD_RULES[name]
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"{label} must be {_KIND_NAMES[kind]}, got {quoted(value, 40)}.")
    size = len(value.strip()) if kind is str else value
    if kind is str and (not value.isprintable()):
        raise ConfigError(f"{label} must be printable text, got {quoted(value, 40)}.")
    if low is not None and not low <= size <= high:  # type: ignore[operator]
        what = "must be between" if kind is not str else "must have between"
        unit = " characters" if kind is str else ""
        raise ConfigError(f"{label} {what} {low:,} and {high:,}{unit}, got {quoted(value, 40)}.")


MAX_SECONDS = 3_600.0  # the longest a model call may take (--timeout, MEMGPT_LITE_TIMEOUT)


def check_seconds(value: float, label: str, given: object) -> float:
    """`value` as a call's time limit, else ConfigError naming `label` and the value as
    `given` (the flag's text or the file's value)."""
    if not 0 < value <= MAX_SECONDS:  # nan fails this too
        raise ConfigError(f"{label} must be more than 0 and at most {MAX_SECONDS:,.0f} seconds, "
                          f"got {quoted(given, 40)}.")
    return float(value)


# The models memgpt-lite knows: id → (max output tokens per call, short aliases). Any other id
# is still sent as given (a compatible server may know it); its cost is unknown unless
# MEMGPT_LITE_PRICES prices it (tokens.price_of).
KNOWN_MODELS: dict[str, tuple[int, tuple[str, ...]]] = {
    "claude-sonnet-5-5": (64_000, ("sonnet",)),
    "claude-haiku-5-5": (64_000, ("haiku",)),
    "claude-opus-5-5": (32_000, ("opus",)),
}


def resolve_model(name: str) -> str:
    """The model id for `name`: an alias (`sonnet`, `haiku`, `opus`) or the id itself."""
    wanted = name.strip()
    for model, (_, aliases) in KNOWN_MODELS.items():
        if wanted.lower() in aliases:
            return model
    return wanted


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def database_problem(target: str) -> str | None:
    """Why `target` names no store memgpt-lite can open (one sentence), or None: a
    postgresql:// URL, sqlite:///PATH or a plain path. The store (open_store) and the config
    file (`database_url`, read or set) both ask this, so a URL `config set` takes is one the
    next command opens."""
    text = target.strip()
    lower = text.lower()
    if lower.startswith(POSTGRES_SCHEMES) or lower.startswith("sqlite:///") or "://" not in text:
        return None
    if lower.startswith("sqlite://"):  # sqlite://x.db: "x.db" would be a host, not a file
        return (f"{text:.60} names no file: a SQLite URL has three slashes and a full path, "
                "sqlite:///home/me/memory.db, or give the path alone.")
    return (f"{text.split('://')[0]:.40}:// databases are not supported; use a postgresql:// URL "
            "or a SQLite file.")


def base_url_problem(url: str, name: str = "ANTHROPIC_BASE_URL",
                     example: str = "http://127.0.0.1:8765") -> str | None:
    """Why `url` cannot be the API's base URL (one sentence), or None: it must be http(s)
    with a host and, if any, a port that exists. The embeddings endpoint's URL too."""
    from urllib.parse import urlsplit

    wanted = f"{name} must be an http:// or https:// URL such as {example}"
    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return f"{wanted}; got {quoted(url)}, which holds spaces or control characters."
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of 0-65535 (or not a number) raises here
    except ValueError as exc:
        return f"{wanted}; got {quoted(url)} ({exc})."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{wanted}; got {quoted(url)}."
    if port == 0:
        return f"{wanted}; got {quoted(url)} (port 0)."
    return None

"""The one registry of settings: every setting a user can choose, with its config-file key,
its environment variable, its chat flag, whether an agent stores its own value, and how a
value is checked.

Everything that lists or reads settings goes through it: `memgpt-lite --help` prints its
environment list from it, the config file accepts its keys (config_file.py), `config show` and
`agents show` name where each value came from, and `agents set` takes its per-agent keys. A new
setting is one entry here (and, for a per-agent one, a field of `config.Settings`).

Where a value comes from, first match wins: a chat flag, the environment, the agent's stored
value (per-agent settings only: `agents set`, `chat --save`), the config file, the default.
Nothing here is imported by anything heavy: `--help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memgpt_lite.engine.setting_rules import (
    FIELD_RULES,
    ConfigError,
    base_url_problem,
    check_seconds,
    check_setting,
    database_problem,
)
from memgpt_lite.engine.text import quoted

PRECEDENCE = "a flag > the environment > the agent's stored value > the config file > the default"


@dataclass(frozen=True)
class Setting:
    """One setting. `kind` says how a value is checked (see `check_value`); `agent`: each
    agent stores its own value (a field of config.Settings of the same name); `file`: the
    config file may set it; `secret`: shown as "(set)", never printed."""

    key: str
    env: str | None
    kind: str
    help: str
    flag: str | None = None
    agent: bool = False
    file: bool = True
    secret: bool = False
    default: Any = None


SETTINGS: tuple[Setting, ...] = (
    Setting("model", "MEMGPT_LITE_MODEL", "model", "model id or alias (sonnet, haiku, opus)",
            flag="-m/--model", agent=True, default="claude-sonnet-5-5"),
    Setting("summary_model", "MEMGPT_LITE_SUMMARY_MODEL", "model", "the summariser's model",
            agent=True, default="claude-haiku-5-5"),
    Setting("context_window", "MEMGPT_LITE_CONTEXT_WINDOW", "tokens",
            "context budget in tokens", flag="--context-window", agent=True, default=32_000),
    Setting("max_output_tokens", "MEMGPT_LITE_MAX_TOKENS", "tokens",
            "max output tokens per model call", flag="--max-tokens", agent=True, default=2_048),
    Setting("thinking", None, "bool", "extended thinking on or off", flag="--thinking",
            agent=True, default=False),
    Setting("confirm_memory", "MEMGPT_LITE_CONFIRM_MEMORY", "bool",
            "ask y/N before each core or archival memory write (declined without a terminal)",
            flag="--confirm-memory", agent=True, default=False),
    Setting("timeout", "MEMGPT_LITE_TIMEOUT", "seconds",
            "seconds a model call may take, retries included", flag="--timeout", default=120.0),
    Setting("prices", "MEMGPT_LITE_PRICES", "path", "a JSON price table for cost figures"),
    Setting("database_url", "MEMGPT_LITE_DATABASE_URL", "database",
            "postgresql://user@host/db: the agents' store on Postgres (as --db)", flag="--db"),
    Setting("embedder", "MEMGPT_LITE_EMBEDDER", "embedder",
            "hybrid search: onnx:FOLDER (a local model), http (an endpoint) or none "
            "(unset: the model `embeddings install` made the default, if any)"),
    Setting("embeddings_url", "MEMGPT_LITE_EMBEDDINGS_URL", "url",
            "the embeddings endpoint's API base, e.g. http://localhost:11434/v1"),
    Setting("embeddings_model", "MEMGPT_LITE_EMBEDDINGS_MODEL", "text",
            "the endpoint's embedding model"),
    Setting("embeddings_key", "MEMGPT_LITE_EMBEDDINGS_KEY", "text",
            "the endpoint's key (sent as a bearer token)", secret=True),
    Setting("embeddings_timeout", "MEMGPT_LITE_EMBEDDINGS_TIMEOUT", "seconds",
            "seconds an embeddings call may take", default=10.0),
    Setting("embeddings_input_type", "MEMGPT_LITE_EMBEDDINGS_INPUT_TYPE", "bool",
            "send input_type (Voyage AI)", default=False),
    Setting("embed_query_prefix", "MEMGPT_LITE_EMBED_QUERY_PREFIX", "prefix",
            "text put before every query embedded (e5 models: 'query: ')"),
    Setting("embed_passage_prefix", "MEMGPT_LITE_EMBED_PASSAGE_PREFIX", "prefix",
            "text put before every passage embedded (e5 models: 'passage: ')"),
    Setting("embed_threads", "MEMGPT_LITE_EMBED_THREADS", "count",
            "onnxruntime's threads for a local model", default=1),
    Setting("home", "MEMGPT_LITE_HOME", "path",
            "the data dir (default: the platform's user data dir)", file=False),
    Setting("config", "MEMGPT_LITE_CONFIG", "path",
            "the config file (default: config.toml in the platform's config dir)", file=False),
    Setting("project", "MEMGPT_LITE_PROJECT", "path",
            "the project directory (as --project of chat, core, agents show and mcp; "
            "default: the working directory)",
            flag="--project", file=False),
)
BY_KEY = {s.key: s for s in SETTINGS}
AGENT_KEYS = tuple(s.key for s in SETTINGS if s.agent)
FILE_KEYS = tuple(s.key for s in SETTINGS if s.file)
# Variables of other programs that memgpt-lite reads, for the --help list.
OTHER_VARIABLES = (
    ("ANTHROPIC_API_KEY", "the API key (or ANTHROPIC_AUTH_TOKEN)"),
    ("ANTHROPIC_BASE_URL", "an Anthropic-compatible server, e.g. the offline fake server: "
                           "python -m memgpt_lite.lab.fake_server"),
    ("VISUAL, EDITOR", "the editor for /memory and /core edit"),
)


def environment_rows() -> list[tuple[str, str]]:
    """(variable, what it sets) of every environment variable memgpt-lite reads."""
    return list(OTHER_VARIABLES) + [(s.env, s.help) for s in SETTINGS if s.env]


def parse_text(setting: Setting, text: str, label: str) -> Any:
    """A value typed as text (`config set`, an environment variable) as its setting's type,
    checked (ConfigError naming `label`). Spaces around it are dropped, except from a
    prefix: e5 models want `query: ` with its space."""
    if setting.kind != "prefix":
        text = text.strip()
    if setting.kind == "bool":
        flags = {"on": True, "true": True, "yes": True, "1": True,
                 "off": False, "false": False, "no": False, "0": False}
        if text.lower() not in flags:
            raise ConfigError(f"{label} must be on or off, got {quoted(text, 60)}.")
        return flags[text.lower()]
    if setting.kind in ("tokens", "count"):
        try:
            value: Any = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise ConfigError(f"{label} must be a whole number, got {quoted(text, 60)}.") from None
        return check_value(setting, value, label)
    if setting.kind == "seconds":
        try:
            value = float(text.removesuffix("s"))
        except ValueError:
            raise ConfigError(f"{label} must be a number of seconds, got "
                              f"{quoted(text, 60)}.") from None
        return check_value(setting, value, label)
    return check_value(setting, text, label)


def check_value(setting: Setting, value: Any, label: str) -> Any:
    """`value` (as TOML gives it, or parsed) checked for its setting, normalised (a model
    alias becomes its id); ConfigError naming `label` when it cannot be taken."""
    value = _CHECKS[setting.kind](setting, value, label)
    if setting.key in FIELD_RULES:  # a field of an agent's Settings: its own bounds too
        check_setting(setting.key, value, label)
    return value


def _is(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))


def _check_bool(setting: Setting, value: Any, label: str) -> bool:
    if not _is(value, bool):
        raise ConfigError(f"{label} must be true or false, got {quoted(value, 40)}.")
    return value


def _check_int(setting: Setting, value: Any, label: str) -> int:
    if not _is(value, int):
        raise ConfigError(f"{label} must be a whole number, got {quoted(value, 40)}.")
    high = 100_000_000 if setting.kind == "tokens" else 1_024
    if not 1 <= value <= high:
        raise ConfigError(f"{label} must be between 1 and {high:,}, got {quoted(value, 60)}.")
    return value


def _check_seconds(setting: Setting, value: Any, label: str) -> float:
    if not (_is(value, int) or _is(value, float)):
        raise ConfigError(f"{label} must be a number of seconds, got {quoted(value, 40)}.")
    return check_seconds(value, label, value)


def _check_text(setting: Setting, value: Any, label: str) -> str:
    # A secret is never echoed, not even in the sentence that refuses it.
    got = "" if setting.secret else f", got {quoted(value, 40)}"
    if not _is(value, str):
        raise ConfigError(f"{label} must be text{got}.")
    if not value.isprintable():
        raise ConfigError(f"{label} must be printable text{got}.")
    if setting.secret and not value.isascii():  # else http.client fails on encoding it
        raise ConfigError(f"{label} must be ASCII text: a key is sent in an HTTP header.")
    if len(value) > 2_000:
        raise ConfigError(f"{label} must have at most 2,000 characters.")
    return value


def _check_model(setting: Setting, value: Any, label: str) -> str:
    from memgpt_lite.engine.setting_rules import resolve_model

    text = _check_text(setting, value, label).strip()
    if not 1 <= len(text) <= 200:
        raise ConfigError(f"{label} must have between 1 and 200 characters, got "
                          f"{quoted(value, 40)}.")
    return resolve_model(text)


def _check_embedder(setting: Setting, value: Any, label: str) -> str:
    text = _check_text(setting, value, label).strip()
    kind, _, path = text.partition(":")
    if kind.lower() not in ("none", "onnx", "http") or (kind.lower() == "onnx" and not path):
        raise ConfigError(f"{label} must be onnx:FOLDER, http or none, got {quoted(text, 60)}.")
    return text


def _check_url(setting: Setting, value: Any, label: str) -> str:
    """The rule of ANTHROPIC_BASE_URL: an endpoint a request can be sent to."""
    text = _check_text(setting, value, label).strip()
    problem = base_url_problem(text, label, "http://localhost:11434/v1")
    if problem:
        raise ConfigError(problem)
    return text


def _check_database(setting: Setting, value: Any, label: str) -> str:
    text = _check_text(setting, value, label).strip()
    if not text:
        raise ConfigError(f"{label} must be a postgresql:// URL (or a SQLite file).")
    problem = database_problem(text)
    if problem:
        raise ConfigError(f"{label}: {problem}")
    return text


_CHECKS = {"bool": _check_bool, "tokens": _check_int, "count": _check_int,
           "seconds": _check_seconds, "text": _check_text, "prefix": _check_text,
           "path": _check_text, "model": _check_model, "embedder": _check_embedder,
           "database": _check_database, "url": _check_url}


def as_text(value: Any) -> str:
    """A value as an environment variable would hold it (config-file values reach the
    readers of process-wide settings this way)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def shown_value(setting: Setting, value: Any) -> str:
    """A value as `config show` and `agents show` print it."""
    if value is None or value == "":
        return "(not set)"
    if setting.secret:
        return "(set, not shown)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if setting.kind == "database":
        return _without_password(str(value))
    return str(value)


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))

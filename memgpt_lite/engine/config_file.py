"""The config file: defaults a user keeps in TOML (`memgpt-lite config path|show|set|unset`).

One file, `config.toml` in the platform's config dir (`MEMGPT_LITE_CONFIG` names another),
holding top-level `key = value` lines for the keys of the settings registry (registry.py).
It is read with tomllib and checked as a whole: a value a setting cannot take is one
sentence naming the key and the file. Writes change one line and keep every other line
(comments included), and go to a temporary file renamed over the old one, so a failure never
truncates it. Per-agent settings from the file come after the agent's stored value (see
config.resolve_settings); process-wide ones reach their readers through `environment()`,
after the real environment.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memgpt_lite.engine.files import LockBusy, held_lock, replace_file
from memgpt_lite.engine.registry import BY_KEY, as_text, check_value, parse_text
from memgpt_lite.engine.setting_rules import ConfigError

FILE_NAME = "config.toml"
LOCK_WAIT = 10.0  # seconds; a writer holds the lock for one small file write
HEADER = ("# memgpt-lite settings: `memgpt-lite config show` lists every key and where each "
          "value comes from.\n")


def config_path() -> Path:
    """$MEMGPT_LITE_CONFIG, else config.toml in the platform's user config dir."""
    override = os.environ.get("MEMGPT_LITE_CONFIG", "").strip()
    if override:
        return Path(override).expanduser()
    import platformdirs  # lazily: `--help` does not read the file

    return Path(platformdirs.user_config_dir("memgpt-lite", appauthor=False)) / FILE_NAME


@dataclass
class ConfigFile:
    """The file's checked values (model aliases resolved), the keys it holds that are not
    settings, and whether it exists at all. A value its setting cannot take is in `bad`
    (key → (the value as written, the sentence naming the file, the key and the fix)), not
    in `values`: only a command that reads that setting fails (`refuse`)."""

    path: Path
    values: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    exists: bool = False
    bad: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def refuse(self, key: str) -> None:
        """ConfigError (its one sentence) when the file's value of `key` is bad."""
        if key in self.bad:
            raise ConfigError(self.bad[key][1])


_cache: dict[Path, tuple[tuple[int, int, int], ConfigFile]] = {}


def load(path: Path | None = None) -> ConfigFile:
    """The config file, checked (ConfigError for TOML that does not parse; a value a
    setting cannot take is kept in `bad`). Read again only when the file changed."""
    path = path or config_path()
    try:
        stat = path.stat()
    except FileNotFoundError:
        return ConfigFile(path)
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc.strerror or exc}.") from None
    key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)  # a rename gives a new inode
    cached = _cache.get(path)
    if cached is None or cached[0] != key:
        cached = (key, _checked(path, _parse(path, _read(path))))
        _cache[path] = cached
    return cached[1]


def _read(path: Path, *, strict: bool = False) -> str:
    """The file's text. A byte order mark (Windows editors write one) is not TOML and is
    dropped. Bytes that are not UTF-8 become U+FFFD for reading; `strict` (before a rewrite)
    refuses them instead, since writing the text back would replace the user's bytes."""
    try:
        data = path.read_bytes()
        text = data.decode("utf-8", errors="strict" if strict else "replace")
        return text.removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"The config file {path} holds bytes that are not UTF-8 (line "
                          f"{line}); fix them by hand, nothing was changed.") from None
    except IsADirectoryError:
        raise ConfigError(f"The config file {path} is a folder; point MEMGPT_LITE_CONFIG at a "
                          "file.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc.strerror or exc}.") from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"The config file {path} is not valid TOML ({exc}); fix it by hand "
                          "(`memgpt-lite config path` shows where it is).") from None


def _checked(path: Path, raw: dict[str, Any]) -> ConfigFile:
    out = ConfigFile(path, exists=True)
    for key, value in raw.items():
        setting = BY_KEY.get(key)
        if setting is None or not setting.file:
            out.unknown.append(key)
            continue
        try:
            out.values[key] = check_value(setting, value, f"{key} in {path}")
        except ConfigError as exc:
            out.bad[key] = (value, f"{str(exc).rstrip('.')}; fix it with `memgpt-lite config "
                                   f"set {key} VALUE`, or `memgpt-lite config unset {key}` for "
                                   f"the default.")
    return out


def environment() -> dict[str, str]:
    """The environment as the readers of process-wide settings see it: the config file's
    values under their variables' names, and the real environment over them. A value of
    the file its setting cannot take is left out: its reader calls `refuse_bad`."""
    env = dict(os.environ)
    for key, value in load().values.items():
        setting = BY_KEY[key]
        if setting.env and not setting.agent and not env.get(setting.env, "").strip():
            env[setting.env] = as_text(value)
    return env


def refuse_bad(keys: Iterable[str], env: dict[str, str] | None = None) -> None:
    """ConfigError (its sentence) for the first of these process-wide settings whose value
    in the file is bad and not overridden by `env` (default: the environment; a flag's
    value put there counts)."""
    env = os.environ if env is None else env
    loaded, keys = load(), set(keys)
    for key in loaded.bad:
        setting = BY_KEY[key]
        if (key in keys and setting.env and not setting.agent
                and not env.get(setting.env, "").strip()):
            loaded.refuse(key)


def file_sources() -> dict[str, str]:
    """Variable → `file PATH` for each process-wide setting whose value `environment()`
    takes from the config file, so a sentence about it names the file's key, not a
    variable the user never set."""
    loaded, out = load(), {}
    for key in loaded.values:
        setting = BY_KEY[key]
        if setting.env and not setting.agent and not os.environ.get(setting.env, "").strip():
            out[setting.env] = f"file {loaded.path}"
    return out


def _key_of(var: str) -> str | None:
    """The key of the setting whose variable is `var`."""
    return next((s.key for s in BY_KEY.values() if s.env == var), None)


def env_value(var: str) -> str | None:
    """The value of a process-wide setting's variable: the environment's, else the config
    file's (as text); None when neither sets it. ConfigError when the file's value is
    bad and the environment does not set it."""
    refuse_bad({_key_of(var)})
    value = environment().get(var, "").strip()
    return value or None


def named(var: str, value: str) -> str:
    """A process-wide setting's `value` as a sentence names it: `VAR=value` when the
    environment sets it, else `key = value in FILE` (the user never typed the variable)."""
    key = _key_of(var)
    if os.environ.get(var, "").strip() or key not in load().values:
        return f"{var}={value}"
    return f"{key} = {value} in {load().path}"


# --------------------------------------------------------------------------- writing


_KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')\s*=")  # bare or quoted
# `[name]` or `[[name]]`, not a line of a value (`  [1, 2],` inside an array spread over lines)
_TABLE_LINE = re.compile(r"^\s*\[\[?\s*[A-Za-z0-9_.\"' -]+\]\]?\s*(#.*)?$")


def set_value(key: str, text: str, path: Path | None = None,
              check: Callable[[dict[str, Any]], None] | None = None,
              usable: Callable[[Any, Any, str], Any] | None = None) -> Any:
    """Check `text` as setting `key` and write it to the file (created when missing);
    returns the value as written. ConfigError for an unknown key or a bad value. So that
    nothing is written that the next command refuses, the caller may add the readers' own
    checks: `usable(setting, value, label)` gives the value to write (the file a path
    names, the store a URL names, each checked by its reader), and `check` sees the file's
    values as they would be, before anything is written."""
    setting = _file_setting(key)
    value = parse_text(setting, text, key)
    if usable is not None:
        value = usable(setting, value, f"{key} {text.strip()}")
    path = path or config_path()
    _check_replaceable(path)
    with _locked(path):
        _rewrite(path, key, f"{key} = {toml_value(value)}", check)
    return value


def unset(key: str, path: Path | None = None,
          check: Callable[[dict[str, Any]], None] | None = None) -> bool:
    """Remove `key` from the file; False when it was not there. `check`: as for
    `set_value` (the default that comes back must work with the rest of the file)."""
    _file_setting(key)
    path = path or config_path()
    _check_replaceable(path)
    if not path.exists():
        return False  # (no folder or lock file made for nothing)
    with _locked(path):
        if not path.exists() or key not in _parse(path, _read(path)):
            return False  # (a folder is named by _read)
        _rewrite(path, key, None, check)
    return True


def _check_replaceable(path: Path) -> None:
    """ConfigError, before any file is made beside it, when `path` is not a file set and
    unset can replace: a folder, or a device or pipe (MEMGPT_LITE_CONFIG=/dev/null, or
    <(...), is read as a file, but a change written there would be lost)."""
    if path.is_dir():
        _read(path)  # the folder's sentence
    if path.exists() and not path.is_file():
        raise ConfigError(f"The config file {path} is not a regular file, so a change cannot "
                          "be kept there; point MEMGPT_LITE_CONFIG at a file. Nothing was "
                          "changed.")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The file's write lock (a file beside it: the config file itself is replaced, so a
    lock on it would be on the old file), so that two `config set` at once both land. Beside
    the file the links lead to (as replace_file writes there): two links to one file, set
    through each at once, must take one lock."""
    real = Path(os.path.realpath(path))
    try:
        with held_lock(real.parent / f".{real.name}.lock", LOCK_WAIT):
            yield
    except LockBusy:
        raise ConfigError(f"The config file {path} stayed locked by another memgpt-lite "
                          f"for {LOCK_WAIT:.0f} s; nothing was changed.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot write the config file {path}: {exc.strerror or exc}; "
                          "nothing was changed.") from None


def _file_setting(key: str) -> Any:
    setting = BY_KEY.get(key.strip().replace("-", "_"))
    if setting is None or not setting.file:
        keys = ", ".join(k for k, s in BY_KEY.items() if s.file)
        raise ConfigError(f"{key!r} is not a setting of the config file (keys: {keys}).")
    return setting


def _rewrite(path: Path, key: str, line: str | None,
             check: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Replace (or add, or with None remove) the top-level line of `key`, keeping every
    other line; the result must still parse (and pass `check`), else nothing is written."""
    old = _read(path, strict=True) if path.exists() else HEADER
    lines = _edited(old.splitlines(), key, line)
    text = "\n".join(lines).rstrip("\n") + "\n"
    what = f"add the line {line}" if line else f"remove the line of {key}"
    cannot = (f"The config file {path} is laid out in a way `config set` cannot change line "
              f"by line; {what} by hand (nothing was changed).")
    try:
        new = _parse(path, text)  # never write a file that would not load
    except ConfigError:
        _parse(path, old)  # when the file itself does not, name its line, not the edit's
        raise ConfigError(cannot) from None
    if not _only_key_changed(old, new, key, line):
        raise ConfigError(cannot)
    if check is not None:
        check(_checked(path, new).values)
    # A file written on Windows keeps its line ends.
    _replace(path, text.replace("\n", "\r\n") if "\r\n" in old else text)
    _cache.pop(path, None)


def _only_key_changed(old: str, new: dict[str, Any], key: str, line: str | None) -> bool:
    """Whether the edit changed the top-level `key` alone: a line the edit took for ours may
    sit in a table whose header the line rules do not see (`["a]b"]`), or in a multi-line
    string. An old file that does not parse (a key twice) has nothing to compare with."""
    try:
        expected = tomllib.loads(old)
    except tomllib.TOMLDecodeError:
        return True
    expected.pop(key, None)
    if line is not None:
        expected.update(tomllib.loads(line))
    return new == expected


def _edited(lines: list[str], key: str, line: str | None) -> list[str]:
    out: list[str] = []
    placed = line is None
    in_table = done = False
    for current in lines:
        if _TABLE_LINE.match(current):  # a table: our keys all live above it
            if not placed:
                out.append(line)  # type: ignore[arg-type]
                placed = True
            in_table = True
        found = _KEY_LINE.match(current)
        # Only the first: a top-level key is there once, so a later line of that name is in
        # a table (see _only_key_changed).
        if found and not in_table and not done and found.group(1).strip("\"'") == key:
            done = True
            if not placed:
                out.append(line)  # type: ignore[arg-type]
                placed = True
            continue
        out.append(current)
    if not placed:
        out.append(line)  # type: ignore[arg-type]
    return out


def _replace(path: Path, text: str) -> None:
    """Whole to a temporary file beside it (0600: it may hold a key), then renamed over it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_file(path, text.encode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"Cannot write the config file {path}: {exc.strerror or exc}; "
                          "nothing was changed.") from None


def toml_value(value: Any) -> str:
    """A scalar as TOML: booleans, numbers, and basic strings with escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    escaped = []
    for ch in str(value):
        if ch in '"\\':
            escaped.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            escaped.append(f"\\u{ord(ch):04X}")
        else:
            escaped.append(ch)
    return '"' + "".join(escaped) + '"'

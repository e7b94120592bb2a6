"""Checking the shape of JSON-like data that comes from outside (recordings, exports): a
spec says what is required, and `problem` says in one phrase what does not fit.

A spec is a type (`str`, `int`, `NUMBER` meaning any number, `bool`, `dict`, `list`), a tuple
of alternatives (`None` allows null), `[spec]` for a list of items, a dict of required keys
(a key starting with `?` is optional) for an object, or `{"*": spec}` for an object whose
values all fit `spec`.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

Spec = Any
NUMBER = float


def is_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def problem(value: Any, spec: Spec, where: str = "") -> str | None:
    """Why `value` does not fit `spec` (see the module docstring), or None. `where` names
    the value in the answer (e.g. "messages[3].role")."""
    if isinstance(spec, dict):
        return _object_problem(value, spec, where)
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where or 'the value'} is not a list"
        for i, item in enumerate(value):
            found = problem(item, spec[0], f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(spec, tuple):
        if any(alt is None and value is None for alt in spec):
            return None
        problems = [problem(value, alt, where) for alt in spec if alt is not None]
        return None if any(p is None for p in problems) else problems[0]
    if not fits(value, spec):
        return f"{where or 'the value'} is not {_name(spec)}"
    if spec in (int, NUMBER) and not in_range(value):
        return f"{where or 'the value'} is out of range ({_shown_number(value)})"
    return None


# What a database column holds (SQLite's INTEGER is 64 bits); a number beyond it is damage,
# whatever field it is in, and must be refused before it reaches a query.
LARGEST_INT = 2**63 - 1


def in_range(value: Any) -> bool:
    """A whole number within 64 bits, or a finite number (JSON lets `Infinity` through)."""
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) <= LARGEST_INT
    return not isinstance(value, int) or -LARGEST_INT <= value <= LARGEST_INT


def _shown_number(value: int | float) -> str:
    if isinstance(value, float):
        return repr(value)
    return f"{value.bit_length() * 30103 // 100000 + 1} digits"  # log10(2): no str() of it


def _object_problem(value: Any, spec: dict[str, Spec], where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where or 'the value'} is not an object"
    if "*" in spec:
        bad = next((k for k, v in value.items() if problem(v, spec["*"])), None)
        return None if bad is None else f"{where}.{bad} is not {_name(spec['*'])}"
    for key, item_spec in spec.items():
        name = key.lstrip("?")
        if name not in value:
            if key.startswith("?"):
                continue
            return f"{(where + '.' if where else '') + name} is missing"
        found = problem(value[name], item_spec, f"{where}.{name}" if where else name)
        if found:
            return found
    return None


def fits(value: Any, kind: type) -> bool:
    if kind is NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _name(kind: type) -> str:
    return {str: "text", int: "a whole number", float: "a number", bool: "true or false",
            dict: "an object", list: "a list"}.get(kind, kind.__name__)

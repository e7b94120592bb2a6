"""The package's shape is a promise too: three parts (engine, terminal, lab), the engine
importing neither of the others and never printing, no import cycles, small modules."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import memgpt_lite

PACKAGE = Path(memgpt_lite.__file__).parent
# The repository, found from this file: CI installs the package into site-packages, where
# neither docs/ nor tests/ nor prompts/ sit beside it.
REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"
PARTS = ("engine", "terminal", "lab")
MAX_LINES = 600  # a longer module must say why in its docstring


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(path: Path, name: str) -> set[str]:
    """Every memgpt_lite module `path` imports, at module level or inside functions."""
    tree = ast.parse(path.read_text("utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in found if m in known and m != name}


def part(name: str) -> str | None:
    pieces = name.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] in PARTS else None


def test_every_module_belongs_to_one_of_the_three_parts():
    loose = [n for n in modules() if part(n) is None
             and n not in ("memgpt_lite", "memgpt_lite.__main__", "memgpt_lite.data",
                           "memgpt_lite._prompts")]  # package data, in an installed wheel
    assert loose == []


def test_the_engine_imports_neither_the_terminal_nor_the_lab_nor_rich():
    for name, path in modules().items():
        if part(name) != "engine":
            continue
        outside = {m for m in imports_of(path, name) if part(m) in ("terminal", "lab")}
        assert outside == set(), f"{name} imports {outside}"
        tree = ast.parse(path.read_text("utf-8"))
        libs = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
        libs |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and not n.level}
        assert "rich" not in libs, f"{name} imports rich: the engine never prints"


def test_the_engine_never_prints():
    for name, path in modules().items():
        if part(name) != "engine":
            continue
        tree = ast.parse(path.read_text("utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in ("print", "input")]
        streams = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and n.attr in ("stdout", "stderr", "stdin")
                   and isinstance(n.value, ast.Name) and n.value.id == "sys"]
        assert not calls and not streams, f"{name} talks to the terminal"


def test_the_lab_uses_the_terminal_only_for_rendering():
    for name, path in modules().items():
        if part(name) != "lab":
            continue
        terminal = {m for m in imports_of(path, name) if part(m) == "terminal"}
        assert terminal <= {"memgpt_lite.terminal.render", "memgpt_lite.terminal.view"}, name


def test_no_import_cycles():
    graph = defaultdict(set)
    for name, path in modules().items():
        graph[name] = {m for m in imports_of(path, name)
                       if not name.startswith(m + ".")}  # a package's own __init__
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " → ".join(
                    trail[trail.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_modules_stay_small_or_say_why():
    for name, path in modules().items():
        text = path.read_text("utf-8")
        if len(text.splitlines()) > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "one module" in doc or "why" in doc.lower(), f"{name} is long: say why"


def test_code_refers_to_the_readme_not_to_documents_outside_the_repository():
    outside = re.compile(r"DESIGN\.md|DESIGN §|STYLE\.md|\bSTYLE \d|\bissue #?\d+")
    for path in [*modules().values(), *REPO.joinpath("tests").rglob("*.py"),
                 *REPO.joinpath("prompts").glob("*.md")]:
        if path.name == "test_layout.py":
            continue  # the pattern above names them
        found = outside.search(path.read_text("utf-8"))
        assert found is None, f"{path.name} mentions {found.group()!r}"


def _module_table() -> dict[str, set[str]]:
    """The names in backticks in each part's rows of docs/architecture.md's module table."""
    named: dict[str, set[str]] = defaultdict(set)
    for line in ARCHITECTURE.read_text("utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in PARTS:
            named[cells[0]] |= set(re.findall(r"`([^`]+)`", " ".join(cells[1:])))
    return named


def _suffixes(path: Path, part_name: str) -> set[str]:
    """How the table may name a module: `blocks.py`, `sqlite/blocks.py`, `store/sqlite/...`."""
    parts = path.relative_to(PACKAGE / part_name).parts
    return {"/".join(parts[i:]) for i in range(len(parts))}


def test_the_architecture_page_names_every_module_in_its_part():
    named = _module_table()
    missing, stale = [], []
    known: dict[str, set[str]] = defaultdict(set)
    for name, path in modules().items():
        owner = part(name)
        if owner is None:
            continue
        known[owner] |= _suffixes(path, owner)
        if path.name not in ("__init__.py", "__main__.py") and not (
                _suffixes(path, owner) & named[owner]):
            missing.append(f"{owner}/{path.relative_to(PACKAGE / owner).as_posix()}")
    for owner, names in named.items():
        stale += [f"{owner}: {n}" for n in sorted(names) if n.endswith(".py")
                  and n not in known[owner]]
    assert not missing, f"docs/architecture.md does not name {missing}"
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"

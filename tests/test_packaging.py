"""The wheel carries the prompts and package data, and both install kinds find them."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts real processes

REPO = Path(__file__).resolve().parent.parent
PROMPTS = {"system.md", "persona.md", "human.md", "summarizer.md", "pressure_alert.md"}
PROBE = ("import sys, site; site.addsitedir(sys.argv[1]); "
         "from memgpt_lite.engine import prompts; print(prompts.root()); "
         "print(sorted(prompts.names())); print(prompts.load('system.md')[:40]); "
         "print([len(prompts.system_prompt(c)) > 0 for c in prompts.CONTRACTS])")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the project, so builds leave nothing in the work tree."""
    dest = tmp_path_factory.mktemp("src") / "memgpt-lite"
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "memgpt_lite", dest / "memgpt_lite", ignore=ignore)
    shutil.copytree(REPO / "prompts", dest / "prompts", ignore=ignore)
    return dest


def pip(*args: str) -> str:
    """pip's output (stdout and stderr) when it succeeds."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    return done.stdout


def probe(site_dir: Path, cwd: Path) -> list[str]:
    # -S: no site-packages, and no PYTHONPATH (a work tree put there would win), so only
    # the install under test can provide memgpt_lite
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-S", "-c", PROBE, str(site_dir)], cwd=cwd,
                         capture_output=True, text=True, check=True, env=env)
    return out.stdout.splitlines()


def test_wheel_contains_prompts_and_data_and_finds_them(source, tmp_path):
    built = pip("wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
                str(source))
    # a folder setuptools can import but was not told of is a page of warnings at every
    # `pip install .` a user runs
    assert "would be ignored" not in built
    wheel = next((tmp_path / "dist").glob("memgpt_lite-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"memgpt_lite/_prompts/{p}" for p in PROMPTS} <= names
    # every prompt file, an older contract's too, or its recordings cannot replay
    shipped = {"memgpt_lite/_prompts/" + p.relative_to(source / "prompts").as_posix()
               for p in (source / "prompts").rglob("*.md")}
    assert shipped <= names, sorted(shipped - names)
    assert "memgpt_lite/data/demo.jsonl" in names
    # a subpackage missing from [tool.setuptools] packages would ship without its modules
    packages = {p.relative_to(source).as_posix()
                for p in (source / "memgpt_lite").rglob("__init__.py")}
    assert packages <= names, sorted(packages - names)
    assert not any(n.startswith(("prompts/", "tests/")) for n in names)
    target = tmp_path / "site"
    pip("install", "-q", "--no-deps", "--ignore-installed", "--target", str(target), str(wheel))
    root, listed, head, contracts = probe(target, tmp_path)
    assert root.startswith(str(target))
    assert "False" not in contracts  # every contract's system prompt, for replays
    assert PROMPTS <= set(ast.literal_eval(listed))
    assert head.startswith("You are a helpful assistant")


def test_editable_install_finds_the_top_level_prompts(source, tmp_path):
    prefix = tmp_path / "prefix"
    # --ignore-installed: never touch the memgpt-lite installed in the running environment
    pip("install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed", "--prefix",
        str(prefix), "-e", str(source))
    purelib = sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)})
    root, listed, _, _ = probe(Path(purelib), tmp_path)
    assert root == str(source / "prompts")
    assert PROMPTS <= set(ast.literal_eval(listed))

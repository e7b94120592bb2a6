"""One function decides the project root: the git top level of the directory (a clone, a
worktree, a submodule), else the directory; --project, then $MEMGPT_LITE_PROJECT, then the
working directory; one sentence for a directory that is not there."""

from __future__ import annotations

import os

import pytest

from memgpt_lite.engine.config import ConfigError
from memgpt_lite.engine.project import PROJECT_VAR, gone_project, project_root, root_exists


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "blog"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "posts").mkdir(parents=True)
    return root


def test_a_folder_inside_a_git_work_tree_belongs_to_its_top_level(repo):
    assert project_root(repo / "src" / "posts") == repo
    assert project_root(repo) == repo


def test_a_worktree_or_submodule_is_a_project_of_its_own(repo, tmp_path):
    worktree = tmp_path / "blog-feature"
    (worktree / "docs").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: ../blog/.git/worktrees/feature\n")
    assert project_root(worktree / "docs") == worktree
    sub = repo / "themes" / "next"
    sub.mkdir(parents=True)
    (sub / ".git").write_text("gitdir: ../../.git/modules/next\n")
    assert project_root(sub) == sub


def test_outside_git_the_directory_is_the_project(tmp_path):
    plain = tmp_path / "notes" / "2025"
    plain.mkdir(parents=True)
    assert project_root(plain) == plain.resolve()


def test_the_flag_wins_over_the_variable_which_wins_over_the_working_directory(repo, tmp_path,
                                                                              monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(repo / "src")
    assert project_root() == repo
    monkeypatch.setenv(PROJECT_VAR, str(other))
    assert project_root() == other.resolve()
    assert project_root(str(repo / "src")) == repo
    assert project_root("  ") == other.resolve()  # an empty flag is no flag


def test_a_symlink_names_the_same_project(repo, tmp_path):
    link = tmp_path / "link"
    os.symlink(repo / "src", link)
    assert project_root(link) == repo


def test_a_missing_directory_or_a_file_is_one_sentence(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"'.*nowhere' \(from --project\) does not exist"):
        project_root(tmp_path / "nowhere")
    monkeypatch.setenv(PROJECT_VAR, str(tmp_path / "gone"))
    with pytest.raises(ConfigError, match=rf"\(from {PROJECT_VAR}\) does not exist"):
        project_root()
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        project_root(tmp_path / "file.txt")


def test_a_gone_folder_is_a_project_only_when_a_block_was_written_for_it(tmp_path, monkeypatch):
    gone = tmp_path / "old"
    assert gone_project(gone, [str(gone)]) == str(gone)
    assert gone_project(gone, []) is None  # never a project: a mistyped path stays one
    gone.mkdir()
    assert gone_project(gone, [str(gone)]) is None  # there: project_root answers
    monkeypatch.chdir(tmp_path)
    assert gone_project("elsewhere", [str(tmp_path / "elsewhere")]) == str(tmp_path / "elsewhere")
    monkeypatch.setenv(PROJECT_VAR, str(tmp_path / "env"))
    assert gone_project(None, [str(tmp_path / "env")]) == str(tmp_path / "env")


def test_a_root_whose_name_is_not_utf8_is_found_on_disk(tmp_path):
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(folder)
    stored = os.fsdecode(tmp_path) + "/caf\\xe9"  # as path_text stores it
    assert root_exists(stored)
    os.rmdir(folder)
    assert not root_exists(stored)

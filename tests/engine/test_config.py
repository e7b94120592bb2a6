"""config.py: where data lives and what each setting's variable means, as `config show`
says it."""

from __future__ import annotations

from pathlib import Path

from memgpt_lite.engine import config


def test_a_blank_data_dir_variable_is_the_default_as_config_show_says(monkeypatch, tmp_path):
    """MEMGPT_LITE_HOME=' ' put the data in a folder named ' ' under the working directory,
    while `config show` said the platform's default applied."""
    from memgpt_lite.terminal.config_commands import setting_rows

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMGPT_LITE_HOME")
    default = config.data_dir()
    monkeypatch.setenv("MEMGPT_LITE_HOME", " ")
    assert config.data_dir() == default != Path(" ")
    shown = {key: (value, source) for key, value, source in setting_rows({})}
    assert shown["home"] == (str(default), "default: the platform's data dir")
    monkeypatch.setenv("MEMGPT_LITE_HOME", f" {tmp_path}/h ")
    assert config.data_dir() == tmp_path / "h"

"""config.py (and the registry it reads): where data lives, and a bad value refused in a short
sentence wherever it enters."""

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


def test_a_huge_value_is_refused_in_a_short_sentence(monkeypatch):
    """A value of 100,000 characters was echoed whole in its refusal: 100 KB of digits on
    the terminal for one mistyped variable or flag."""
    import pytest

    from memgpt_lite.engine import config_file
    from memgpt_lite.engine.embeddings import EmbeddingConfig, EmbeddingError
    from memgpt_lite.engine.registry import BY_KEY, parse_text

    huge = "9" * 100_000
    refusals = []
    for var in ("MEMGPT_LITE_CONTEXT_WINDOW", "MEMGPT_LITE_CONFIRM_MEMORY"):
        monkeypatch.setenv(var, "x" + huge)
        with pytest.raises(config.ConfigError) as info:
            config.Settings().with_env()
        refusals.append(str(info.value))
        monkeypatch.delenv(var)
    for key, text in (("timeout", "x" + huge), ("embed_threads", "-" + "9" * 4_000),
                      ("context_window", "9" * 4_000)):
        with pytest.raises(config.ConfigError) as info:
            parse_text(BY_KEY[key], text, key)
        refusals.append(str(info.value))
    for call in (lambda: config.parse_seconds("x" + huge, "--timeout"),
                 lambda: config.parse_positive_int("-" + "9" * 4_000, "--max-tokens"),
                 lambda: config_file.set_value("thinking", "x" + huge)):
        with pytest.raises(config.ConfigError) as info:
            call()
        refusals.append(str(info.value))
    for env in ({"MEMGPT_LITE_EMBEDDER": "x" + huge},
                {"MEMGPT_LITE_EMBEDDINGS_TIMEOUT": "x" + huge}):
        with pytest.raises(EmbeddingError) as info:
            EmbeddingConfig.from_env(env)
        refusals.append(str(info.value))
    assert all(len(r) < 200 for r in refusals), [r[:100] for r in refusals]

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own data dir and never sees a real API key or server."""
    home = tmp_path / "home"
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    for var in ("MEMGPT_LITE_MODEL", "MEMGPT_LITE_CONTEXT_WINDOW", "MEMGPT_LITE_MAX_TOKENS",
                "MEMGPT_LITE_SUMMARY_MODEL", "MEMGPT_LITE_EMBEDDER", "MEMGPT_LITE_EMBEDDINGS_URL",
                "MEMGPT_LITE_EMBEDDINGS_MODEL", "MEMGPT_LITE_EMBEDDINGS_KEY"):
        monkeypatch.delenv(var, raising=False)
    return home

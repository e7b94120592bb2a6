"""The catalogue `embeddings list` shows: its measured figures are the ones
docs/benchmarks.md reports, and the installed default is read without the extra."""

from __future__ import annotations

import re
from pathlib import Path

from memgpt_lite.engine import model_catalog

BENCHMARKS = (Path(__file__).parents[2] / "docs" / "benchmarks.md").read_text("utf-8")


def test_every_recall_figure_shown_is_one_the_benchmarks_report():
    for model in model_catalog.KNOWN.values():
        figures = re.findall(r"\d\.\d{3}", model.recall)
        assert figures or "not measured" in model.recall, model.name
        for figure in figures:
            assert f"**{figure}**" in BENCHMARKS or f" {figure} " in BENCHMARKS, (
                model.name, figure)
        if figures:
            assert "docs/benchmarks.md" in model.recall


def test_the_sizes_the_benchmarks_give_are_the_catalogues():
    for name, size in (("minilm", 23), ("e5-small", 118)):
        assert model_catalog.KNOWN[name].size_mb == size
        assert f"{size} MB" in BENCHMARKS


def test_a_default_naming_no_intact_model_is_none():
    folder = model_catalog.models_dir()
    folder.mkdir(parents=True)
    assert model_catalog.default_model() is None
    for name in ("../x", "minilm", ""):
        (folder / "DEFAULT").write_text(name + "\n")
        assert model_catalog.default_model() is None  # nothing installed under that name
    (folder / "minilm").mkdir()
    (folder / "DEFAULT").write_text("minilm\n")
    (folder / "minilm" / "model.json").write_text("not json")
    assert model_catalog.default_model() is None
    (folder / "minilm" / "model.json").write_text('{"name": "minilm"}')
    assert model_catalog.default_model() == (folder / "minilm", {"name": "minilm"})

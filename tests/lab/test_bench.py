from __future__ import annotations

import pytest

import importlib.util
import json
import os
from pathlib import Path

from memgpt_lite.lab import bench, retrieval_eval
from memgpt_lite.lab.bench import corpus, store
from memgpt_lite.lab.bench.report import Figure, Row, Target


def test_store_benchmark_returns_measurements():
    row = store.store_benchmark(300, queries=20, batch=100)
    assert row["messages"] == 300 and row["queries"] == 20
    assert row["insert_msgs_per_s"] > 0 and row["search_p50_ms"] > 0
    assert row["search_p95_ms"] >= row["search_p50_ms"]


def test_retrieval_eval_scores_every_method():
    data = retrieval_eval.retrieval_eval(filler=200)
    assert data["cases"] == len(retrieval_eval.CASES)
    for groups in data["results"].values():
        assert groups["all"]["n"] == len(retrieval_eval.CASES)
        assert 0 <= groups["all"]["recall@5"] <= groups["all"]["recall@10"] <= 1
    ours = data["results"]["ours (OR, porter, stop words, CJK bigrams)"]
    assert ours["cjk"]["hit@5"] == 1.0  # every Chinese/Japanese case (docs/benchmarks.md)


def test_main_prints_json(capsys):
    assert bench.main(["store", "--sizes", "100", "--queries", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["messages"] == 100


def test_synthetic_data_is_deterministic():
    import random
    a = corpus.synthetic_messages(random.Random(1), 50)
    b = corpus.synthetic_messages(random.Random(1), 50)
    assert [m.content for m in a] == [m.content for m in b]


@pytest.mark.slow
def test_bench_command_writes_a_report_of_the_documented_shape(tmp_path, capsys):
    """The real command path (cli.main → bench.main) at test-only sizes; shape, not timings."""
    from memgpt_lite.terminal import cli

    out = tmp_path / "bench.json"
    code = cli.main(["bench", "--sizes", "400", "--queries", "5", "--engine-turns", "2",
                     "--turns", "6", "--runs", "1", "--recording-sizes", "50,200",
                     "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["machine"]) >= {"cpu", "cores", "ram_gb", "python", "sqlite"}
    hybrid = ["hybrid"] if importlib.util.find_spec("numpy") else []  # the embeddings extra
    assert [s["id"] for s in report["sections"]] == ["store", *hybrid, "engine", "tokens",
                                                    "startup", "mcp", "memory",
                                                    "recording"]
    if hybrid:
        labels = [r["label"] for r in report["sections"][1]["rows"]]
        assert labels == ["dense scan alone · exact, int8 · 400 vectors",
                          "hybrid conversation_search · 400 messages · query embedding not "
                          "included"]
    for section in report["sections"]:
        assert section["title"] and section["method"] and section["rows"]
        for row in section["rows"]:
            assert row["label"] and row["figures"]
            for fig in row["figures"]:
                assert isinstance(fig["value"], (int, float)) and fig["unit"]
            if row["target"] is not None:
                names = [f["name"] for f in row["figures"]]
                assert row["target"]["figure"] in names and row["target"]["unit"]
                assert isinstance(row["ok"], bool)
            else:
                assert row["ok"] is None
    targets = {s["id"]: [r["target"]["text"] for r in s["rows"] if r["target"]]
               for s in report["sections"]}
    assert targets["engine"] == ["< 5 ms (p50)"]
    assert targets["startup"] == ["< 0.30 s (median)", "< 0.60 s (median)",
                                  "< 1.00 s (after the prompt)"]
    assert targets["memory"] == ["< 150 MB (peak RSS)"]
    assert targets["recording"] == ["< 1.10 × (ratio)"] * 4  # sizes too small to compare sizes
    size_row = report["sections"][-1]["rows"][-1]
    assert size_row["target"] is None and "not compared" in size_row["note"]
    recorded = report["sections"][-1]["data"]["200"]
    assert recorded["recorded"]["recording_kb"] > 0 and recorded["no_record"]["recording_kb"] == 0
    units = {f["unit"] for s in report["sections"] for r in s["rows"] for f in r["figures"]}
    assert {"ms", "rows/s", "MB per 100k messages", "tokens/turn", "%", "USD/turn", "×", "s",
            "MB"} <= units
    printed = capsys.readouterr().out
    assert "| section | measure | measured | target | result |" in printed
    assert "Machine: " in printed and "SQLite" in printed


def test_bench_rows_mark_pass_and_miss():
    row = Row("x", [Figure(4.0, "ms", "p50")], Target("p50", 5, "ms"))
    assert row.ok is True
    row.figures[0].value = 5.0
    assert row.ok is False and row.to_dict()["target"]["text"] == "< 5 ms (p50)"


@pytest.mark.parametrize("argv, said", [
    (["--queries", "0"], "argument --queries: must be at least 1, got 0"),
    (["--runs", "0"], "argument --runs: must be at least 1, got 0"),
    (["--turns", "-1"], "argument --turns: must be at least 1, got -1"),
    (["--engine-turns", "many"], "argument --engine-turns: must be a whole number, got 'many'"),
    (["--embedder", "bogus"], "--embedder: MEMGPT_LITE_EMBEDDER must be onnx:FOLDER, http or "
                              "none, got 'bogus'."),
    (["store", "--queries", "0"], "argument --queries: must be at least 1, got 0"),
])
def test_bench_refuses_a_bad_value_in_one_sentence_before_it_runs(argv, said, capsys):
    """No queries or runs left a section nothing to take a median of (a traceback after
    minutes of the run); a bad embedder was a traceback too."""
    from memgpt_lite.terminal import cli

    assert cli.main(["bench", "--quick", *argv] if argv[0] != "store" else ["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(f"error: {said}")
    assert "Traceback" not in err


def test_bench_refuses_a_json_report_in_a_missing_folder_before_it_runs(tmp_path, capsys):
    from memgpt_lite.terminal import cli

    target = tmp_path / "no-such-folder" / "report.json"
    assert cli.main(["bench", "--quick", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(
        f"--json: cannot write {target}: No such file or directory")
    assert "store ·" not in err and not target.parent.exists()  # nothing was measured


def test_bench_refuses_a_json_report_it_could_not_write_before_it_runs(tmp_path, capsys):
    from memgpt_lite.terminal import cli

    (tmp_path / "notes.txt").write_text("a file, not a folder")
    target = tmp_path / "notes.txt" / "report.json"  # the folder exists as a file
    assert cli.main(["bench", "--quick", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(f"--json: cannot write {target}: Not a directory")
    assert "store ·" not in err and "Traceback" not in err


@pytest.mark.parametrize("timed", ["time_first_prompt", "time_first_reply"])
def test_a_chat_on_a_pseudo_terminal_is_stopped_when_the_bench_is_interrupted(
        timed, tmp_path, monkeypatch):
    """Ctrl-C reaches the bench's process group, not the chat in its own session: the
    chat outlived the bench and wrote into its removed temporary directory."""
    from memgpt_lite.lab.bench import startup

    spawned = []
    real_spawn = startup._spawn_chat

    def spawn(*args):
        master, proc, t = real_spawn(*args)
        spawned.append(proc)
        return master, proc, t

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(startup, "_spawn_chat", spawn)
    monkeypatch.setattr(startup, "_read_until", interrupted)
    env = startup.chat_env(tmp_path / "home", "http://127.0.0.1:9")
    with pytest.raises(KeyboardInterrupt):
        getattr(startup, timed)(startup.cli_command(), env)
    assert len(spawned) == 1 and spawned[0].returncode is not None  # stopped and reaped


@pytest.mark.slow
def test_ctrl_c_stops_the_bench_with_one_line_and_leaves_nothing_behind(tmp_path):
    """Ctrl-C while the start-up section has a chat on a pseudo-terminal: exit 130 with
    `interrupted` (it was a traceback), and the temporary directory is gone for good."""
    import signal
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), MEMGPT_LITE_HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memgpt_lite", "bench", "--sizes", "400", "--queries", "5",
         "--engine-turns", "2", "--turns", "6", "--runs", "1", "--recording-sizes", "50,200"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    for line in proc.stderr:  # "start-up: --help median …; timing chat": a chat is on a pty
        if "timing chat" in line:
            break
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert list(scratch.iterdir()) == []


def test_a_scratch_database_on_a_server_that_is_not_there_says_so():
    """It said the role could not create databases (use another role), whatever failed;
    `eval locomo --db` and `bench store --db` say it this way."""
    import socket

    from memgpt_lite.engine.store import StoreError
    from memgpt_lite.lab.bench.backends import scratch_database

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreError) as caught:
        with scratch_database(f"postgresql://nobody@127.0.0.1:{port}/postgres"):
            pass
    assert str(caught.value).startswith("Cannot connect to the Postgres server of --db (")
    assert "role" not in str(caught.value)

"""How output looks: the status line never cut mid-field, "1 result", headings at the left,
piped output without padding or hard wraps, eval tables padded with whole labels, replay
rendering Markdown as the chat does, and the demo's archival_update line showing what
changed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest
from rich.console import Console

from memgpt_lite.engine import config
from memgpt_lite.engine.records import Usage
from memgpt_lite.engine.text import changed_parts
from memgpt_lite.terminal.eval_render import print_score_table
from memgpt_lite.terminal.render import StrippedLines, make_console
from memgpt_lite.terminal.replay_view import ReplayView
from memgpt_lite.terminal.view import ChatView, markdown, status_line


@pytest.mark.parametrize("width", [40, 60, 65, 70, 80, 120])
def test_the_status_line_breaks_between_fields_never_inside_one(width):
    line = "· " + status_line(Usage(100, 5, 0, 9000), 0.0041, 9120, 28952, with_bar=True,
                              width=width)
    rows = line.split("\n")
    fields = {"context 9,120/28,952 tokens (32%)", "cache 99%", "turn $0.0041"}
    text = " · ".join(r.strip().lstrip("· ").strip() for r in rows)
    assert all(field in text for field in fields)  # each field whole, on one row
    assert all(len(r) <= width for r in rows) or width < 40
    assert ("▰" in line) == (width >= 80)  # the bar only where the whole line has room


def test_a_single_result_is_one_result():
    from memgpt_lite.engine.memory import MemoryTools
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore

    with SQLiteStore(config.db_path()) as store:
        agent_id = store.create_agent("a", {}, {}).id
        tools = MemoryTools(store, agent_id)
        tools.execute("archival_insert", {"content": "The zebra sleeps standing."})
        outcome = tools.execute("archival_search", {"query": "zebra"})
    assert outcome.summary.endswith("→ 1 result")


def test_headings_in_replies_sit_at_the_left():
    buf = io.StringIO()
    Console(file=buf, width=60, color_system=None).print(markdown("# Plan\n\nStep one.\n\n## Later"))
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    assert lines[0].startswith("Plan") and lines[2].startswith("Later"), lines


def test_piped_lines_carry_no_padding_and_hold_back_a_trailing_space():
    out = io.StringIO()
    lines = StrippedLines(out)
    lines.write("a table row   \nnext ")
    assert out.getvalue() == "a table row\nnext"  # the space may be followed by more words
    lines.write("word  \n")
    assert out.getvalue() == "a table row\nnext word\n"
    console = make_console(io.StringIO(), plain=True)
    console.print("x" * 150)
    assert console.file.file.getvalue() == "x" * 150 + "\n"  # not cut at 100 columns


@pytest.mark.slow
def test_piped_commands_write_no_trailing_spaces():
    env = dict(os.environ)
    for args in (["demo", "--speed", "0"], ["eval", "--list"], ["models"], ["config", "show"]):
        proc = subprocess.run([sys.executable, "-m", "memgpt_lite", *args], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, (args, proc.stderr)
        padded = [line for line in proc.stdout.splitlines() if line.endswith(" ")]
        assert not padded, (args, padded[:3])
    demo = subprocess.run([sys.executable, "-m", "memgpt_lite", "demo", "--speed", "0"],
                          capture_output=True, text=True, env=env, timeout=120).stdout
    update = next(line for line in demo.splitlines() if "archival_update" in line)
    old, new = update.split(" → ")
    assert old.split('"')[1] != new.split('"')[1].split('"')[0]
    assert "March 14th" in old and "March 21st" in new  # what changed, not the first words


def test_changed_parts_show_the_change_with_a_word_around_it():
    assert changed_parts("Ada lives in Paris near the river.",
                         "Ada lives in Lisbon near the river.") == ("…in Paris…", "…in Lisbon…")
    assert changed_parts("tea", "coffee") == ("tea", "coffee")
    assert changed_parts("Ada likes tea", "Ada likes tea and cake") == ("…likes tea",
                                                                       "…likes tea and cake")


def test_eval_tables_are_padded_and_keep_labels_whole():
    buf = io.StringIO()
    report = {"scenario": "s", "model": "m", "source": "live", "passed": 1, "failed": 0,
              "score": 1.0, "totals": {"turns": 1, "model_calls": 1, "tool_calls": 0,
                                       "input_tokens": 10, "cost_usd": 0.0},
              "checks": [{"name": "archival_search_returns_only_new_value", "passed": True,
                          "detail": "found passage #3 with the new address " * 3}]}
    print_score_table(Console(file=buf, width=100, color_system=None), report)
    rows = buf.getvalue().splitlines()
    assert any(row.startswith("│ archival_search_returns_only_new_value │") for row in rows)


def test_replay_renders_replies_as_markdown_like_the_chat():
    buf = io.StringIO()
    view = ReplayView(Console(file=buf, width=80, color_system=None))
    view._on_turn_end(type("E", (), {"text": "# Done\n\n- **one**\n- two", "turn_id": 1,
                                     "usage": Usage(1, 1, 0, 0), "cost_usd": 0.0})())
    text = buf.getvalue()
    assert "**" not in text and "# Done" not in text and "• one" in text


def test_a_plain_chat_view_keeps_the_status_line_on_one_line():
    buf = io.StringIO()
    console = make_console(buf, plain=True)
    view = ChatView(console, live=False, markdown=False)
    view.context_of = lambda: (9120, 28952)
    from memgpt_lite.engine.events import TurnEndEvent

    view.end_turn(TurnEndEvent(1, "ok", "end_turn", Usage(1, 1, 0, 0), 0.0, True))
    assert buf.getvalue().count("\n") == 1  # piped: a file has no width to fit


def test_a_stalled_stream_redraws_nothing_until_the_terminal_changes_size():
    """The live region redraws on a tick only when its frame would change: a redraw erases by
    the width known when it is computed, so one in flight while a terminal rewraps on a resize
    leaves a copy. A stream that stalls has nothing in flight; a resize is then redrawn."""
    from memgpt_lite.engine.events import TextDelta

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=60, height=20)
    view = ChatView(console, live=True, markdown=True)
    view.start_turn()
    view.handle(TextDelta("Fake reply to: " + " ".join(f"word{i}" for i in range(8))))
    try:
        _wait(lambda: "word7" in buf.getvalue())
        time.sleep(0.3)  # a tick or two that may still draw the first frame
        drawn = len(buf.getvalue())
        time.sleep(0.5)  # six ticks at 12 per second
        assert len(buf.getvalue()) == drawn  # nothing new: nothing written
        console.width = 30
        _wait(lambda: len(buf.getvalue()) > drawn)  # the next tick redraws at the new width
    finally:
        view.stop()


def _wait(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("wrap", [False, True])
def test_a_piped_table_keeps_every_header_and_label_whole(wrap):
    from rich.table import Table

    out = io.StringIO()
    console = make_console(out, plain=True, wrap=wrap)
    headers = ["category", "n", "recall@5", "recall@10", "recall@20", "@10 + replies",
               "in 500 tok", "in 1,000 tok", "in 2,000 tok"]
    table = Table(*headers)
    table.add_row("categories 1-4", "1536", *["0.123"] * 7)
    console.print(table)
    text = out.getvalue()
    assert "…" not in text
    assert all(header in text for header in headers)
    assert "categories 1-4" in text  # on one line, not folded
    assert console.width == 100  # the console's own width is back for what follows
    console.print("y" * 30)
    assert text.count("\n") == out.getvalue().count("\n") - 1


def test_a_clipped_row_counts_the_columns_chinese_takes():
    from rich.cells import cell_len

    from memgpt_lite.terminal.render import clip

    chinese = "我叫李明，我住在北京，我喜欢喝绿茶和吃饺子。" * 4
    line = clip(chinese, 60)
    assert cell_len(line) <= 60 and line.endswith("…")
    assert len(line) < 35  # two columns a character, not one
    assert clip("tea  and\ncake", 60) == "tea and cake"
    assert cell_len(clip("a" * 59 + "我我", 60)) <= 60

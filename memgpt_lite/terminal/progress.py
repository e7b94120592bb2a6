"""Progress of long work (eval on datasets or many scenarios, bench, doctor --repair): a rich
progress bar with counts and ETA on a terminal, a few plain lines when output is piped.

    with progress(console, "LoCoMo questions", total=1986) as step:
        for q in questions:
            ...
            step(f"conv-26 q{n}")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from memgpt_lite.terminal.render import shown, visible

PLAIN_STEPS = 10  # piped: one line per tenth of the work (and the first and the last item)

Step = Callable[..., None]


@contextlib.contextmanager
def progress(console: Console, label: str, total: int | None) -> Iterator[Step]:
    """A `step(note="", advance=1)` callable that moves the count on; `total` None when the
    count of items is not known in advance (then the bar shows counts without an ETA)."""
    if console.is_terminal:
        with _bar(console, label, total) as step:
            yield step
    else:
        yield _plain(console, label, total)


@contextlib.contextmanager
def _bar(console: Console, label: str, total: int | None) -> Iterator[Step]:
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
               TextColumn("[dim]{task.fields[note]}", markup=True)]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(visible(label), total=total, note="")

        def step(note: str = "", advance: int = 1) -> None:
            # The note is escaped: it is shown inside a markup template.
            bar.update(task, advance=advance, note=_escape(visible(note)))

        yield step


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _plain(console: Console, label: str, total: int | None) -> Step:
    state = {"done": 0, "shown": -1}

    def step(note: str = "", advance: int = 1) -> None:
        state["done"] += advance
        done = state["done"]
        if total:
            tenth = done * PLAIN_STEPS // total
            if tenth == state["shown"] and done not in (1, total):
                return
            state["shown"] = tenth
            head = f"{label}: {done}/{total} ({done / total:.0%})"
        else:
            if done % 25 != 1:
                return
            head = f"{label}: {done}"
        console.print(shown(f"  {head}" + (f" · {note}" if note else ""), "dim"))

    return step

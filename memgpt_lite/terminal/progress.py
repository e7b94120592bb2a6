"""Progress of long work (eval on datasets or many scenarios, bench, doctor --repair): a rich
progress bar with counts and ETA on a terminal, a few plain lines when output is piped.

    with progress(console, "LoCoMo questions", total=1986) as step:
        for q in questions:
            ...
            step(f"conv-26 q{n}")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from memgpt_lite.terminal.exit_codes import ended_by_signals
from memgpt_lite.terminal.render import shown, visible

PLAIN_STEPS = 10  # piped: one line per tenth of the work (and the first and the last item)


class Step:
    """`step(note="", advance=1)` moves the count on; `step.total(n)` sets the count of
    items once it is known (until then a bar shows counts without an ETA)."""

    def __init__(self, console: Console, label: str, total: int | None,
                 bar: Progress | None = None):
        self.console, self.label, self._total, self.bar = console, label, total, bar
        self.done, self._shown = 0, -1
        self.task = bar.add_task(visible(label), total=total, note="") if bar else None

    def total(self, total: int | None) -> None:
        if total != self._total:
            self._total = total
            if self.bar is not None:
                self.bar.update(self.task, total=total)  # type: ignore[arg-type]

    def __call__(self, note: str = "", advance: int = 1) -> None:
        self.done += advance
        if self.bar is not None:
            # The note is escaped: it is shown inside a markup template.
            self.bar.update(self.task, advance=advance,  # type: ignore[arg-type]
                            note=escape(visible(note)))
        elif advance:
            self._plain(note)

    def _plain(self, note: str) -> None:
        done, total = self.done, self._total
        if total:
            tenth = done * PLAIN_STEPS // total
            if tenth == self._shown and done not in (1, total):
                return
            self._shown = tenth
            head = f"{self.label}: {done}/{total} ({done / total:.0%})"
        else:
            if done % 25 != 1:
                return
            head = f"{self.label}: {done}"
        self.console.print(shown(f"  {head}" + (f" · {note}" if note else ""), "dim"))


@contextlib.contextmanager
def progress(console: Console, label: str, total: int | None) -> Iterator[Step]:
    """A Step for `total` items (None: not known yet): a rich bar with counts and ETA on a
    terminal, plain lines otherwise."""
    if not console.is_terminal:
        yield Step(console, label, total)
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
               TextColumn("[dim]{task.fields[note]}", markup=True)]
    # The bar hides the cursor: a signal that ends the command unwinds it, shown again.
    with ended_by_signals(), Progress(*columns, console=console, transient=False) as bar:
        yield Step(console, label, total, bar)


class SectionProgress:
    """A progress bar over a fixed number of sections whose steps are free-form messages
    (the bench): each message becomes the bar's note, `section_done()` moves the bar on."""

    def __init__(self, console: Console, label: str, sections: int):
        self._context = progress(console, label, sections)
        self._step: Step | None = None

    def __enter__(self) -> SectionProgress:
        self._step = self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    def __call__(self, message: str) -> None:
        if self._step is not None:
            self._step(message, advance=0)

    def section_done(self) -> None:
        if self._step is not None:
            self._step("", advance=1)

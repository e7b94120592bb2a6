"""The agent's clock as one turn reads it, and who is told of each reading.

Everything a turn stamps (its user message, its passages, its commit) comes from the agent's
clock. A recording keeps every reading of a turn, so that its replay serves them back in
order and its requests (search results show times) match byte for byte. The agent makes one
`TurnClock` per turn and tells its observers of each reading (see `Agent.observed`); nobody
wraps or replaces the agent's clock from outside.

A live agent's clock reads the local time with its UTC offset: stored rows are in UTC
(records.utc_iso), but from model contract 3 the model is told the turn's local date and
time (context.py), and a recording keeps each reading with its offset (records.zoned_iso).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol


def local_now() -> datetime:
    """Now, in the machine's local time zone (aware, with that zone's UTC offset)."""
    return datetime.now().astimezone()


def told_time(turn: TurnClock | None, clock: Callable[[], datetime],
              contract: int) -> datetime | None:
    """The time the model is told of (model contract 3 on; None before, whose requests a
    replay must send unchanged): the turn's, read once as it starts, so every request of a
    turn carries the same bytes; outside a turn (/context) a reading no observer records."""
    if contract < 3:
        return None
    return turn.start if turn is not None else clock()


class ClockObserver(Protocol):
    """Told of every reading of the clock a turn uses (a recorder keeps them)."""

    def clock_read(self, moment: datetime) -> None: ...


class TurnClock:
    """One turn's readings of `clock`. The first is taken as the turn starts (`start`, the
    turn's time) and is what the first use gets: the user message is stamped with the turn's
    time, and the clock is read once per use, so a replay that serves the recorded readings
    in order gives every use the live session's time."""

    def __init__(self, clock: Callable[[], datetime], observers: Sequence[ClockObserver]):
        self.start = clock()
        self._clock, self._observers = clock, observers
        self._unused: datetime | None = self.start

    def __call__(self) -> datetime:
        moment = self._unused if self._unused is not None else self._clock()
        self._unused = None
        for observer in self._observers:
            observer.clock_read(moment)
        return moment

"""A command's time budget: one object, made once from ``--time-limit`` and passed down.

A :class:`TimeBudget` is the ``time.perf_counter()`` value by which the work must end (or none).
Every phase asks it what it needs (:meth:`~TimeBudget.left`, :meth:`~TimeBudget.expired`,
:meth:`~TimeBudget.check`) and hands a sub-phase a part of it (:meth:`~TimeBudget.share`,
:meth:`~TimeBudget.within`, :meth:`~TimeBudget.reserve`): seconds and deadlines are converted into
each other here and nowhere else. A budget also knows its length (:attr:`~TimeBudget.length`), so
that a phase may take a part of the whole (:meth:`~TimeBudget.part`) rather than of the time left.
A command's Ctrl-C (:func:`optsched.interrupt.requested`) exhausts every budget at once.

A command's budget counts from the start of the process (:func:`process_started`), so that its
time limit covers the interpreter's start-up and the imports too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .deadline import DeadlinePassed
from .interrupt import requested

__all__ = ["LONGEST_WAIT", "NO_LIMIT", "SlowestRun", "TimeBudget", "process_started"]


#: Most seconds :meth:`TimeBudget.left` answers (about 31 years): a limit beyond it is never reached, and
#: a thread's wait of more seconds than the platform's clock can add overflows.
LONGEST_WAIT = 1e9


@dataclass(frozen=True)
class TimeBudget:
    """The time a piece of work may take.

    Attributes
    ----------
    end
        The ``time.perf_counter()`` value by which it must end; None: no limit.
    length
        The seconds it was given when it was made (None: no limit, or not known).
    """

    end: float | None = None
    length: float | None = field(default=None, compare=False)

    @classmethod
    def of(cls, seconds: float | None, start: float | None = None) -> TimeBudget:
        """``seconds`` from ``start`` (a ``time.perf_counter()`` value; default: now); None: no limit."""
        if seconds is None:
            return cls(None)
        return cls((time.perf_counter() if start is None else start) + seconds, seconds)

    @property
    def limited(self) -> bool:
        """Whether there is a limit."""
        return self.end is not None

    def left(self, least: float = 0.0) -> float | None:
        """Seconds left (at least ``least``; ``least`` once Ctrl-C came), at most :data:`LONGEST_WAIT`
        (what a thread's wait takes); None without a limit."""
        if self.end is None:
            return None
        return least if requested() else min(max(self.end - time.perf_counter(), least), LONGEST_WAIT)

    def expired(self) -> bool:
        """Whether the time is up (never without a limit); Ctrl-C expires every budget at once."""
        return self.end is not None and (time.perf_counter() > self.end or requested())

    def holds(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends within this budget (always without a limit;
        never once it has expired)."""
        left = self.left()
        return left is None or (not self.expired() and left >= seconds)

    def check(self, what: str = "the model") -> None:
        """Raise :class:`~optsched.deadline.DeadlinePassed` (naming ``what``) once :meth:`expired`."""
        if self.expired():
            raise DeadlinePassed(f"{what} not built within the time limit")

    def share(self, fraction: float) -> TimeBudget:
        """A sub-phase's budget: ``fraction`` of the time left (no limit without one)."""
        if self.end is None:
            return self
        now = time.perf_counter()
        seconds = fraction * max(0.0, self.end - now)
        return TimeBudget(now + seconds, seconds)

    def within(self, seconds: float | None) -> TimeBudget:
        """A sub-phase's budget: at most ``seconds`` from now (None: this budget), never past this one."""
        if seconds is None:
            return self
        now = time.perf_counter()
        end = now + seconds if self.end is None else min(now + seconds, self.end)
        return TimeBudget(end, max(0.0, end - now))

    def part(self, fraction: float) -> TimeBudget:
        """A sub-phase's budget: ``fraction`` of this budget's :attr:`length` from now, never past its
        end (``fraction`` of the time left when the length is not known; no limit without one)."""
        if self.end is None:
            return self
        if self.length is None:
            return self.share(fraction)
        return self.within(fraction * self.length)

    def at_least(self, seconds: float) -> TimeBudget:
        """This budget, but at least ``seconds`` from now (for work that gives a weaker, valid answer
        with little time and must run even once the budget has expired)."""
        if self.end is None:
            return self
        now = time.perf_counter()
        end = max(self.end, now + seconds)
        return TimeBudget(end, end - now)

    def reserve(self, seconds: float) -> TimeBudget:
        """This budget less ``seconds`` kept for what comes after (a hand-over, the exit)."""
        if self.end is None:
            return self
        return TimeBudget(self.end - seconds, None if self.length is None else max(0.0, self.length - seconds))


#: The budget without a limit (the default of a phase called on its own).
NO_LIMIT = TimeBudget()


@dataclass
class SlowestRun:
    """The longest of the timed runs of one kind of work so far (an evaluation, a policy's run), by
    which a loop decides whether to start one more within its budget.

    Attributes
    ----------
    seconds
        The slowest run's wall seconds (0 before the first).
    """

    seconds: float = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Time the work inside the ``with`` block as one run (also when it raises)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds = max(self.seconds, time.perf_counter() - began)

    def fits(self, budget: TimeBudget, runs: float = 1.0) -> bool:
        """Whether ``runs`` more runs, each as slow as the slowest so far, end within ``budget``
        (:meth:`TimeBudget.holds`)."""
        return budget.holds(runs * self.seconds)


def process_started() -> float:
    """The ``time.perf_counter()`` value at which this process started (so that a command's time
    limit covers the interpreter's start-up and the imports too).

    Read from ``/proc/self/stat`` and ``/proc/uptime`` (Linux, 10 ms resolution); where they cannot
    be read, the time of this call.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as fh:
            started_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        elapsed = uptime - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - max(elapsed, 0.0)

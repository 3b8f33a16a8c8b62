"""Deadlines of the solvers' set-up and search loops: absolute ``time.perf_counter()`` values, or
None for no deadline; the exceptions of a model build that stops; and the start of the process,
from which a command's time limit counts."""

from __future__ import annotations

import os
import time

from .interrupt import requested

__all__ = ["BuildStopped", "DeadlinePassed", "check", "passed", "process_started", "seconds_left"]


class BuildStopped(Exception):
    """A model was not built (too large for a formulation's size rule, or its deadline passed);
    the message says which."""


class DeadlinePassed(BuildStopped):
    """Raised by :func:`check` inside a model builder once its deadline has passed."""


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` has passed (never when it is None); a command's Ctrl-C
    (:func:`optsched.interrupt.requested`) passes every deadline at once."""
    return deadline is not None and (time.perf_counter() > deadline or requested())


def check(deadline: float | None, what: str = "the model") -> None:
    """Raise :class:`DeadlinePassed` (naming ``what``) once ``deadline`` has passed."""
    if passed(deadline):
        raise DeadlinePassed(f"{what} not built within the time limit")


def seconds_left(deadline: float | None, least: float = 0.01) -> float | None:
    """Seconds until ``deadline`` (at least ``least``, for a solver's own limit; ``least`` once
    :func:`passed`); None without one."""
    if deadline is None:
        return None
    return least if requested() else max(deadline - time.perf_counter(), least)


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

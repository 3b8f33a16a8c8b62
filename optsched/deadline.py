"""Deadlines of the solvers' set-up and search loops: absolute ``time.perf_counter()`` values, or
None for no deadline."""

from __future__ import annotations

import time

__all__ = ["DeadlinePassed", "check", "passed", "seconds_left"]


class DeadlinePassed(Exception):
    """Raised by :func:`check` inside a model builder once its deadline has passed."""


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` has passed (never when it is None)."""
    return deadline is not None and time.perf_counter() > deadline


def check(deadline: float | None) -> None:
    """Raise :class:`DeadlinePassed` once ``deadline`` has passed."""
    if passed(deadline):
        raise DeadlinePassed


def seconds_left(deadline: float | None, least: float = 0.01) -> float | None:
    """Seconds until ``deadline`` (at least ``least``, for a solver's own limit); None without one."""
    return None if deadline is None else max(deadline - time.perf_counter(), least)

"""Deadlines of the solvers' set-up and search loops: absolute ``time.perf_counter()`` values, or
None for no deadline; and the exceptions of a model build that stops."""

from __future__ import annotations

import time

__all__ = ["BuildStopped", "DeadlinePassed", "check", "passed", "seconds_left"]


class BuildStopped(Exception):
    """A model was not built (too large for a formulation's size rule, or its deadline passed);
    the message says which."""


class DeadlinePassed(BuildStopped):
    """Raised by :func:`check` inside a model builder once its deadline has passed."""


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` has passed (never when it is None)."""
    return deadline is not None and time.perf_counter() > deadline


def check(deadline: float | None, what: str = "the model") -> None:
    """Raise :class:`DeadlinePassed` (naming ``what``) once ``deadline`` has passed."""
    if passed(deadline):
        raise DeadlinePassed(f"{what} not built within the time limit")


def seconds_left(deadline: float | None, least: float = 0.01) -> float | None:
    """Seconds until ``deadline`` (at least ``least``, for a solver's own limit); None without one."""
    return None if deadline is None else max(deadline - time.perf_counter(), least)

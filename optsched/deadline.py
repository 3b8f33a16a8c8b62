"""Deadlines of the solvers' set-up and search loops: absolute ``time.perf_counter()`` values, or
None for no deadline (a :class:`optsched.budget.TimeBudget`'s ``end``), and the exceptions of a
model build that stops."""

from __future__ import annotations

import time

from .interrupt import requested

__all__ = ["BuildStopped", "DeadlinePassed", "check", "passed"]


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

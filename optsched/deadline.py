"""The exceptions of a model build that stops: too large for a formulation's size rule, or its
:class:`~optsched.budget.TimeBudget` expired (:meth:`~optsched.budget.TimeBudget.check`)."""

from __future__ import annotations

__all__ = ["BuildStopped", "DeadlinePassed"]


class BuildStopped(Exception):
    """A model was not built (too large for a formulation's size rule, or its time budget
    expired); the message says which."""


class DeadlinePassed(BuildStopped):
    """Raised by :meth:`optsched.budget.TimeBudget.check` inside a model builder once its budget
    has expired."""

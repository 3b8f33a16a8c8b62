"""A formulation's registered solve and bounds called as :func:`optsched.api.solve` and
:func:`optsched.api.bound` call them, without the replay check: the options read by the
formulation's options dataclass, and their time limit as the one
:class:`~optsched.budget.TimeBudget` of the call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.problems import bounder_for, options_for, solver_for
from optsched.result import Bound, SolveResult


def registered_solve(problem: str, instance: Instance, options: Mapping[str, Any] | None = None) -> SolveResult:
    """``problem``'s registered ``solve(instance, options, budget)``, its budget the options' time limit."""
    opts = options_for(problem).parse(options or {})
    return solver_for(problem)(instance, opts, TimeBudget.of(opts.time_limit))


def solver(problem: str) -> Callable[..., SolveResult]:
    """:func:`registered_solve` of ``problem``, as ``solve(instance, options)``."""
    return partial(registered_solve, problem)


def registered_bounds(problem: str, instance: Instance, options: Mapping[str, Any] | None = None) -> list[Bound]:
    """``problem``'s registered ``bounds(instance, options, budget)``, its budget the options' time limit."""
    opts = options_for(problem, "bound").parse(options or {})
    return bounder_for(problem)(instance, opts, TimeBudget.of(opts.time_limit))

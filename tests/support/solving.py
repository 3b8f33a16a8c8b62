"""A formulation's registered solve called as :func:`optsched.api.solve` calls it, without its replay
check: the options read by the formulation's options dataclass, and their time limit as the one
:class:`~optsched.budget.TimeBudget` of the solve."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.problems import options_for, solver_for
from optsched.result import SolveResult


def registered_solve(problem: str, instance: Instance, options: Mapping[str, Any] | None = None) -> SolveResult:
    """``problem``'s registered ``solve(instance, options, budget)``, its budget the options' time limit."""
    opts = options_for(problem).parse(options or {})
    return solver_for(problem)(instance, opts, TimeBudget.of(opts.time_limit))


def solver(problem: str) -> Callable[..., SolveResult]:
    """:func:`registered_solve` of ``problem``, as ``solve(instance, options)``."""
    return partial(registered_solve, problem)

"""InferMax's answer before its solver loads: a policy's schedule and the proven bounds.

Loading the solver (OR-Tools, which loads pandas, PuLP and HiGHS, and the exact search's compiled
kernels from numba's cache) takes 1-2 s on a 2-core machine, more under load; a command's time
limit counts it. ``optsched solve`` therefore computes :func:`first_answer` before that start-up,
from modules that are quick to import (the policies and :mod:`optsched.load_bounds`), and reports
it when the start-up has not ended by the deadline, or has left less time than this answer took:
the warm-start policy's schedule (the option ``warm_start``, ``serial``'s when no policy applies),
replayed, with :func:`generic_bounds`, status ``time_limit`` unless the schedule meets a bound. The
result's ``incumbent`` names the policy; the command adds why the solver's answer is not there.
``optsched bound`` reports :func:`first_bounds` alike.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ...budget import TimeBudget
from ...instance import Instance
from ...load_bounds import proven_bounds
from ...result import OPTIMAL_RTOL, Bound, SolveResult, Status
from .candidates import initial_candidates
from .model import InferMaxBoundOptions, InferMaxInputError, InferMaxOptions, linear_instance

__all__ = ["first_answer", "first_bounds", "generic_bounds", "meets"]


def meets(value: float, bound: float) -> bool:
    """Whether ``value`` is within :data:`optsched.result.OPTIMAL_RTOL` of the proven ``bound`` (then it is optimal)."""
    return value - bound <= OPTIMAL_RTOL * max(abs(value), 1e-12)


def generic_bounds(instance: Instance, objective: str) -> list[Bound]:
    """The bounds of :func:`optsched.load_bounds.proven_bounds` (those of :mod:`optsched.bounds` and the
    SRPT bounds), each the larger of its value under the profile and under the linear form of
    :func:`.model.linear_instance` (both proven, by (F0) of :mod:`optsched.bounds`)."""
    out = proven_bounds(instance, objective)
    linear = linear_instance(instance)
    if linear is instance:
        return out
    other = {b.name: b for b in proven_bounds(linear, objective)}
    return [max(b, other.get(b.name, b), key=lambda bound: bound.value) for b in out]


def first_bounds(instance: Instance, options: Mapping[str, Any] | InferMaxBoundOptions | None) -> list[Bound] | None:
    """The bounds ``optsched bound`` reports when the solver has not loaded by the deadline:
    :func:`generic_bounds` for the option ``objective`` (None for ``goodput``, whose bound needs the
    solver)."""
    objective = InferMaxBoundOptions.parse(options).objective
    return None if objective == "goodput" else generic_bounds(instance, objective)


def first_answer(
    instance: Instance, options: Mapping[str, Any] | InferMaxOptions | None, budget: TimeBudget
) -> SolveResult | None:
    """The answer reported when the solver has not loaded by the deadline (module docstring).

    Parameters
    ----------
    instance
        The instance.
    options
        The solve's options (:class:`.model.InferMaxOptions` or a mapping).
    budget
        The command's time; a policy of the unified scheduler is abandoned once it expires.

    Returns
    -------
    SolveResult or None
        None for the objective ``goodput`` (maximised, with its own phases), for an instance whose
        requests cannot all be served (the solve reports why), or when no schedule was found in time.

    Raises
    ------
    optsched.options.OptionError
        When the option ``warm_start`` names a policy that gives no schedule respecting the options
        (as the solve does).
    """
    t0 = time.perf_counter()
    opts = InferMaxOptions.parse(options)
    if opts.objective == "goodput":
        return None
    try:  # an expired budget for the policies: the warm start only
        pool = initial_candidates(instance, opts, TimeBudget.of(0.0), budget)
    except InferMaxInputError:
        return None
    if not len(pool):
        return None
    pool.check_warm_start()
    best = pool.best
    bounds = generic_bounds(instance, opts.objective)
    bound = min(max(b.value for b in bounds), best.value) if bounds else None
    optimal = bound is not None and meets(best.value, bound)
    return SolveResult(
        problem="infermax",
        solver=opts.solver,
        status=Status.OPTIMAL if optimal else Status.TIME_LIMIT,
        objective=best.value,
        bound=bound,
        schedule=best.schedule,
        replay=best.replay,
        wall_time=time.perf_counter() - t0,
        incumbent=f"schedule of {pool.best_name!r}",
        extra={"objective_name": opts.objective, "schedule_source": pool.best_name, "schedule_is_seed": True},
    )

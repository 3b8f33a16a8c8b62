"""InferMax's answer before its solver loads: a policy's schedule and the proven bounds.

Loading the solver (OR-Tools, which loads pandas, PuLP and HiGHS, and the exact search's compiled
kernels from numba's cache) takes 1-2 s on a 2-core machine, more under load; a command's time
limit counts it. ``optsched solve`` therefore computes :func:`first_answer` before that start-up,
from modules that are quick to import (the policies and :mod:`optsched.load_bounds`), and reports
it when the start-up has not ended by the deadline, or has left less time than this answer took:
the first policy's schedule that respects the options (the option ``warm_start``'s, ``serial``'s
when no policy applies), replayed, with :func:`generic_bounds` (for ``goodput``, the policies in
the goodput solve's order and its upper bound), status ``time_limit`` unless the schedule meets a
bound. The result's ``incumbent`` names the policy; the command adds why the solver's answer is not
there. ``optsched bound`` reports :func:`first_bounds` alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from ...budget import NO_LIMIT, TimeBudget
from ...instance import Instance
from ...load_bounds import proven_bounds
from ...result import OPTIMAL_RTOL, Bound, SolveResult, Status
from .candidates import (
    GOODPUT_FIRST_POLICIES,
    SERIAL_MAX_BATCHES,
    CandidatePool,
    initial_candidates,
    serial_batch_count,
)
from .goodput_bounds import goodput_bound
from .model import InferMaxBoundOptions, InferMaxInputError, InferMaxOptions, linear_instance

__all__ = ["EXIT_RESERVE", "first_answer", "first_bounds", "generic_bounds", "meets"]

#: Seconds the first answer's bounds leave before the deadline for the command's output (and, in
#: ``solve``, beside the time the policy took, for the check that replays its schedule).
EXIT_RESERVE = 0.1


def meets(value: float, bound: float) -> bool:
    """Whether ``value`` is within :data:`optsched.result.OPTIMAL_RTOL` of the proven ``bound`` (then it is optimal)."""
    return value - bound <= OPTIMAL_RTOL * max(abs(value), 1e-12)


def generic_bounds(instance: Instance, objective: str, budget: TimeBudget = NO_LIMIT) -> list[Bound]:
    """The bounds of :func:`optsched.load_bounds.proven_bounds` (those of :mod:`optsched.bounds` and the
    SRPT bounds), each the larger of its value under the profile and under the linear form of
    :func:`.model.linear_instance` (both proven, by (F0) of :mod:`optsched.bounds`); within ``budget``
    (the load-aware ones while it lasts, the linear form's only when time is left)."""
    out = proven_bounds(instance, objective, budget)
    linear = linear_instance(instance)
    if linear is instance or budget.expired():
        return out
    other = {b.name: b for b in proven_bounds(linear, objective, budget)}
    return [max(b, other.get(b.name, b), key=lambda bound: bound.value) for b in out]


def first_bounds(
    instance: Instance, options: Mapping[str, Any] | InferMaxBoundOptions | None, budget: TimeBudget
) -> list[Bound]:
    """The bounds ``optsched bound`` reports when the solver has not loaded by the deadline:
    :func:`generic_bounds` for the option ``objective``, or for ``goodput`` its upper bound
    (:func:`.goodput_bounds.goodput_bound` within its part of ``budget``; it needs no solver either)."""
    opts = InferMaxBoundOptions.parse(options)
    if opts.objective == "goodput":
        return [goodput_bound(instance, opts.method, budget)]
    return generic_bounds(instance, opts.objective, budget.reserve(EXIT_RESERVE))


def first_answer(
    instance: Instance, options: Mapping[str, Any] | InferMaxOptions | None, budget: TimeBudget
) -> SolveResult | None:
    """The answer reported when the solver has not loaded by the deadline (module docstring).

    The first policy that gives a schedule runs to its end, as in the solve (and ``serial`` when
    none does, unless it has more than :data:`.candidates.SERIAL_MAX_BATCHES` batches and the time
    is up); with the option ``horizon`` J, only a schedule of at most J batches is an answer (the
    solve's answers are within J). For ``goodput`` the policies are offered in the solve's order
    (:data:`.candidates.GOODPUT_FIRST_POLICIES`) and the bound is the solve's first
    (:func:`.goodput_bounds.goodput_bound`, within its part of ``budget``: cut short, it is weaker,
    still proven).

    Parameters
    ----------
    instance
        The instance.
    options
        The solve's options (:class:`.model.InferMaxOptions` or a mapping).
    budget
        The command's time.

    Returns
    -------
    SolveResult or None
        None for an instance whose requests cannot all be served (the solve reports why), or when
        no schedule was found (within the horizon).

    Raises
    ------
    optsched.options.OptionError
        When the option ``warm_start`` names a policy that gives no schedule respecting the options
        (as the solve does).
    """
    t0 = time.perf_counter()
    opts = InferMaxOptions.parse(options)
    pool = _warm_start_pool(instance, opts, budget)
    if pool is None:
        return None
    pooled = time.perf_counter() - t0  # the caller's check replays the schedule again
    best = pool.best
    if opts.horizon is not None and best.schedule.columns().nonempty_batches > opts.horizon:
        return None
    if opts.objective == "goodput":
        bound = goodput_bound(instance, budget=budget, met=int(best.value)).value
        optimal = best.value >= bound
    else:
        bounds = generic_bounds(instance, opts.objective, budget.reserve(EXIT_RESERVE + pooled))
        bound = min(max(b.value for b in bounds), best.value) if bounds else math.inf
        optimal = meets(best.value, bound)
    return SolveResult(
        problem="infermax",
        solver=opts.solver,
        status=Status.OPTIMAL if optimal else Status.TIME_LIMIT,
        objective=best.value,
        bound=bound if math.isfinite(bound) else None,
        wall_time=time.perf_counter() - t0,
        schedule=best.schedule,
        sense="max" if opts.objective == "goodput" else "min",
        replay=best.replay,
        incumbent=f"schedule of {pool.best_name!r}",
        extra={"objective_name": opts.objective, "schedule_source": pool.best_name, "schedule_is_seed": True},
    )


def _warm_start_pool(instance: Instance, opts: InferMaxOptions, budget: TimeBudget) -> CandidatePool | None:
    """The pool of the first policy that gives a schedule (the warm start's, when given; checked as
    the solve checks it, against every policy run within ``budget`` when it gives none); None when
    the instance's requests cannot all be served or nothing gave a schedule."""
    first = GOODPUT_FIRST_POLICIES if opts.objective == "goodput" else ()
    hard = budget if serial_batch_count(instance) > SERIAL_MAX_BATCHES else NO_LIMIT
    try:  # an expired budget for the others: the first policy that gives a schedule only
        pool = initial_candidates(instance, opts, TimeBudget.of(0.0), hard, first=first)
        if opts.warm_start is not None and opts.warm_start not in pool:  # the list of those that do
            pool = initial_candidates(instance, opts, budget, hard, first=first)
    except InferMaxInputError:
        return None
    if not len(pool):
        return None
    pool.check_warm_start()
    return pool

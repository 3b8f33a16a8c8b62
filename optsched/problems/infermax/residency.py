"""The residency bound as the solve uses it: the exact search, then CP-SAT and the count checks.

The residency relaxation (:mod:`.relax`) bounds the makespan when memory binds. Its optimum is a
shortest path, which :mod:`.search` finds or bounds within its share of the time; when the search
stops early, CP-SAT's bound on the same relaxation (:func:`.relax.relaxation_bound`) and the least
batch counts proven by infeasibility (:func:`.relax.count_bound`) may still raise the bound, and
CP-SAT's point may be a better schedule than the search's best path.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...budget import NO_LIMIT, TimeBudget
from ...instance import Instance
from ...result import Status
from ...schedule import replay
from .relax import RelaxationResult, count_bound, relaxation_bound
from .search import load_kernels, relaxation_search

__all__ = ["SEARCH_SHARE", "candidate_rank", "residency_bound"]

#: Share of :func:`residency_bound`'s time limit given to the exact search (:mod:`.search`, whose
#: pattern tables and beam searches take parts of it); the CP-SAT relaxation and the count checks
#: get the rest.
SEARCH_SHARE = 0.75


def candidate_rank(instance: Instance, result: RelaxationResult) -> tuple[float, float]:
    """Order of two results' schedules as candidates: a schedule that replays cleanly first, by its
    makespan, then the others by their relaxation value (none last)."""
    if result.schedule is None or result.value is None:
        return math.inf, math.inf
    rep = replay(instance, result.schedule)
    return (rep.metrics.makespan if rep.feasible else math.inf), result.value


def residency_bound(
    instance: Instance, J: int, budget: TimeBudget = NO_LIMIT, threads: int | None = None
) -> RelaxationResult:
    """The relaxation's optimum by the exact search of :mod:`.search` (:data:`SEARCH_SHARE` of
    ``budget``); when that stops early, the CP-SAT relaxation's bound (:func:`.relax.relaxation_bound`,
    a quarter of the time left) and, when that is not solved to optimality either, the count bound
    (:func:`.relax.count_bound`, the time left): the largest bound, and the better schedule of the
    search's path and CP-SAT's point (one that replays cleanly first, by makespan; else the lower
    relaxation value).

    The relaxation's optimum dominates the count bound (every pair (B, p) of its optimal point
    is allowed by every fact), so the counts run only when neither solves it. Loading the search's
    kernels (:func:`.search.load_kernels`) counts in ``budget``: :func:`optsched.problems.infermax.solve.prepare`
    loads them before a solve.
    """
    load_kernels()  # inside the budget (a no-op after the solve's prepare())
    exact = relaxation_search(instance, budget.share(SEARCH_SHARE))
    if exact.status in (Status.OPTIMAL, Status.INFEASIBLE):
        return exact
    relax = relaxation_bound(instance, J, budget.share(1 / 4), threads)
    if candidate_rank(instance, exact) < candidate_rank(instance, relax):
        relax = replace(relax, value=exact.value, schedule=exact.schedule)
    relax = replace(relax, bound=max(relax.bound, exact.bound), cpu=relax.cpu + exact.cpu)
    if relax.status in (Status.OPTIMAL, Status.INFEASIBLE):
        return relax
    counts = count_bound(instance, J, budget, threads)

    return RelaxationResult(
        bound=max(relax.bound, counts.bound),
        value=relax.value,
        status=relax.status,
        cpu=relax.cpu + counts.cpu,
        facts=counts.facts,
        schedule=relax.schedule,
    )

"""``SOLVERS["hybrid-offline"]``: the offline assignment of the Hybrid paper (Eqs. 26-30) and its schedule.

The assignment of requests to the ``J`` clients is the P||Cmax optimum of
:mod:`optsched.problems.hybrid.pcmax` on decode rounds; the objective is the largest client load in
seconds, ``tau_d * C*``. The schedule reported with it is the ``hybrid-offline`` policy of
:mod:`optsched.problems.hybrid.online` run on that assignment (prefill-first, no queue sorting or
stealing), replayed by :func:`optsched.schedule.replay`.

A profile with a step-shape term is refused
(:func:`optsched.problems.hybrid.timing.shape_term_refusal`): ``tau_d`` is the affine law's full
round, which has no such term.

The time limit covers the schedule too: the LPT assignment's schedule is built and replayed first
(the fallback, and the measure of what building one costs); the P||Cmax search gets the limit less
two such builds, and a better assignment whose schedule no longer fits in the limit is reported as
the LPT one with the search's bound (status ``time_limit``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ...budget import TimeBudget
from ...instance import Instance, InstanceError
from ...mipsolvers import MIP_BACKENDS
from ...options import Name, OptionError, Options, PositiveFloat, PositiveInt
from ...result import Bound, SolveResult, Status
from ...schedule import ReplayResult, Schedule, replay
from ..hybrid.online import simulate_pd
from ..hybrid.pcmax import LENGTHS, PCMAX_METHODS, loads_of, pcmax_lower_bound, processing_times, solve_pcmax
from ..hybrid.timing import shape_term_refusal, timing_of

__all__ = ["HybridOfflineBoundOptions", "HybridOfflineOptions", "bounds", "solve"]


@dataclass(frozen=True)
class HybridOfflineOptions(Options):
    """Options of the hybrid-offline ``solve``.

    Attributes
    ----------
    method
        ``auto``, ``lpt``, ``local``, ``cpsat`` or ``mip`` (:func:`.offline.solve_pcmax`).
    solver
        The MIP backend of method ``mip`` (``highs`` by default, ``cbc``, ``gurobi``); methods
        ``auto`` and ``cpsat`` use CP-SAT (``cpsat`` may be named).
    time_limit, threads
        The whole solve's limit (default 60 s) and the exact stage's threads (not for ``lpt`` and
        ``local``).
    lengths
        ``rounds``, ``paper`` or ``predicted`` (:func:`.offline.processing_times`).
    """

    problem = "hybrid-offline"
    method: Literal[PCMAX_METHODS] = "auto"
    solver: Name | None = None
    time_limit: PositiveFloat = 60.0
    threads: PositiveInt | None = None
    lengths: Literal[LENGTHS] = "rounds"

    def check(self) -> None:
        if self.method == "mip" and self.solver not in (None, *MIP_BACKENDS):
            raise OptionError(
                f"option 'solver': method 'mip' needs a MIP backend ({', '.join(MIP_BACKENDS)}), got {self.solver!r}"
            )
        if self.method in ("auto", "cpsat") and self.solver not in (None, "cpsat"):
            raise OptionError(f"option 'solver': method {self.method!r} uses CP-SAT; a MIP backend needs method 'mip'")
        heuristic = self.method in ("lpt", "local")
        for option in ("solver", "threads"):
            self.only_with(option, not heuristic, "method is 'auto', 'cpsat' or 'mip'")


def client_schedule(instance: Instance, client: tuple[int, ...]) -> tuple[Schedule, ReplayResult]:
    """The ``hybrid-offline`` policy's schedule of an assignment, replayed (it must be feasible)."""
    schedule = simulate_pd(instance, list(client), sort_queues=False, steal=False, rule="prefill-first")
    rep = replay(instance, schedule)
    if not rep.feasible:
        raise RuntimeError("hybrid-offline schedule does not replay cleanly: " + "; ".join(rep.violations[:3]))
    return schedule, rep


def solve(
    instance: Instance, options: Mapping[str, Any] | HybridOfflineOptions | None, budget: TimeBudget
) -> SolveResult:
    """``SOLVERS["hybrid-offline"]``: the optimal max client load in seconds, ``tau_d * C*``
    (options: :class:`HybridOfflineOptions`), within ``budget`` (:func:`optsched.api.solve` makes it).

    The assignment (request id -> client) and the loads are in ``extra``; the schedule is the
    ``hybrid-offline`` policy run on that assignment (replayed; its makespan is
    ``extra["replayed_makespan"]``, which is not the objective of this model).
    """
    opts = HybridOfflineOptions.parse(options)
    method, lengths = opts.method, opts.lengths
    refused = shape_term_refusal(instance, "the hybrid-offline load (tau_d x rounds)")
    if refused:
        return SolveResult(problem="hybrid-offline", solver=method, status=Status.UNSUPPORTED, message=refused)
    timing = timing_of(instance)
    p = processing_times(instance, lengths)
    start = time.perf_counter()
    first = solve_pcmax(p, timing.clients, method="lpt")
    schedule, rep = client_schedule(instance, first.client)  # the fallback, and what building a schedule costs
    building = time.perf_counter() - start
    found = (
        first
        if method == "auto" and first.status == Status.OPTIMAL
        else solve_pcmax(
            p,
            timing.clients,
            method=method,
            budget=budget.reserve(2 * building),  # time to build the found assignment's schedule (and a margin)
            solver=opts.solver or "highs",
            threads=opts.threads,
        )
    )
    if found.client != first.client:
        left = budget.left()
        if left is None or left >= building:  # time to build the better assignment's schedule
            schedule, rep = client_schedule(instance, found.client)
        else:  # no time left to build the better assignment's schedule: the first one, with the bound found
            bound = max(first.bound, found.bound)
            found = replace(
                first,
                bound=bound,
                status=Status.OPTIMAL if first.makespan == bound else Status.TIME_LIMIT,
                method=f"{first.method} (the {found.method} assignment's schedule not built in time)",
            )
    wall = time.perf_counter() - start
    return SolveResult(
        problem="hybrid-offline",
        solver=found.method,
        status=found.status,
        objective=timing.tau_d * found.makespan,
        bound=timing.tau_d * found.bound,
        wall_time=wall,
        schedule=schedule,
        extra={
            "objective_name": "max_client_load",  # not the replayed schedule's makespan
            "tau_d": timing.tau_d,
            "lengths": lengths,
            "max_load_rounds": found.makespan,
            "bound_rounds": found.bound,
            "assignment": {r.id: c for r, c in zip(instance.requests, found.client)},
            "loads_rounds": loads_of(p, found.client, timing.clients),
            "replayed_makespan": rep.metrics.makespan if rep.metrics else None,
        },
        replay=rep,
    )


@dataclass(frozen=True)
class HybridOfflineBoundOptions(Options):
    """Options of the hybrid-offline ``bounds``: ``lengths`` (as :class:`HybridOfflineOptions`) and
    ``time_limit``, honoured by a bound computed in milliseconds (a command's limit bounds its
    process, :mod:`optsched.exiting`)."""

    problem = "hybrid-offline"
    what = "bound"
    lengths: Literal[LENGTHS] = "rounds"
    time_limit: PositiveFloat | None = None


def bounds(
    instance: Instance, options: Mapping[str, Any] | HybridOfflineBoundOptions | None, budget: TimeBudget
) -> list[Bound]:
    """``BOUNDERS["hybrid-offline"]``: a lower bound on the largest client load, ``tau_d`` times
    :func:`.offline.pcmax_lower_bound` (``ceil(sum p / J)``, ``max p`` and the k+1 smallest of the
    kJ + 1 largest jobs), proven for every assignment (no search: it takes none of ``budget``)."""
    opts = HybridOfflineBoundOptions.parse(options)
    refused = shape_term_refusal(instance, "the hybrid-offline load (tau_d x rounds)")
    if refused:
        raise InstanceError(refused)
    timing = timing_of(instance)
    rounds = pcmax_lower_bound(processing_times(instance, opts.lengths), timing.clients)
    return [
        Bound(
            "pcmax-lower",
            timing.tau_d * rounds,
            True,
            f"tau_d x {rounds} rounds: the P||Cmax lower bound on J = {timing.clients} clients",
        )
    ]

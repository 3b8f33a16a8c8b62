"""``SOLVERS["aladdin"]`` and ``BOUNDERS["aladdin"]``: the offline placement problem of an instance.

Offline means every request of the instance is new and placed at once (no ongoing requests, the
setting of Fig. 3); a request's planned length ``L_j`` is its ``predicted_output_tokens`` when given,
else its ``output_tokens``. Options: :class:`AladdinOptions` (solve), :class:`AladdinBoundOptions`
(bounds).

The objective is the number of workers used; ``extra["placement"]`` maps request id -> worker.
The baselines need a worker count: option ``max_workers``, else ``placement.max_workers`` when
given, else the number best fit uses. A placement that violates (a)-(h) gets status ``infeasible``
with its violations listed, but for the exact method stopped by its time limit: its placement (best
fit's where it found none, whose overflows are listed in ``unplaceable``) gets ``time_limit``, as
nothing is proven infeasible.
Every placement is then run in the multi-worker simulator with the planned lengths as true lengths
(``extra["simulation"]``: per-worker replays all clean, peak KV per worker, TTFT/ATGT attainment);
``extra["peak_kv_model"]`` gives each worker's peak of the paper's KV vectors (Eq. 1 units).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ...budget import TimeBudget
from ...instance import Instance, InstanceError
from ...mipsolvers import licence_refused
from ...options import Options, PositiveFloat, PositiveInt
from ...result import Bound, SolveResult, Status
from .cluster import place, simulate_cluster
from .exact import EXACT_SOLVERS, solve_placement
from .heuristics import best_fit
from .models import model_from_instance
from .placement import CompiledProblem, Job, PlacementProblem, check_placement, compile_problem, knapsack_bounds

__all__ = [
    "AladdinBoundOptions",
    "AladdinOptions",
    "solve",
    "bounds",
    "instance_max_workers",
    "offline_problem",
    "planned_instance",
]

OFFLINE_METHODS = ("exact", "bestfit", "bestfit+rebalance", "jsq", "rr", "po2")


@dataclass(frozen=True)
class AladdinOptions(Options):
    """Options of the aladdin ``solve``.

    Attributes
    ----------
    method
        ``exact`` (the placement MIP), ``bestfit`` (Alg. 1), ``bestfit+rebalance`` (Alg. 2; no
        ongoing errors offline, so equal to best fit), ``jsq``, ``rr`` or ``po2`` (baselines).
    solver, time_limit, threads
        The exact method's backend (``cpsat``, ``highs``, ``cbc``, ``gurobi``; a model beyond the
        restricted Gurobi licence gives status ``unsupported``), its limit and threads.
    max_workers
        Most workers (overrides the instance's ``placement.max_workers``): the exact method's cap
        (status ``infeasible`` when too few) and the baselines' worker count.
    """

    problem = "aladdin"
    method: Literal[OFFLINE_METHODS] = "exact"
    solver: Literal[EXACT_SOLVERS] = "cpsat"
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None
    max_workers: PositiveInt | None = None

    def check(self) -> None:
        exact = self.method == "exact"
        for option in ("solver", "threads"):
            self.only_with(option, exact, "method is 'exact'")


@dataclass(frozen=True)
class AladdinBoundOptions(Options):
    """Options of the aladdin ``bounds``: the exact placement's backend, limit and threads."""

    problem = "aladdin"
    what = "bound"
    solver: Literal[EXACT_SOLVERS] = "cpsat"
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None


def offline_problem(instance: Instance, max_workers: int | None = None) -> PlacementProblem:
    """The offline placement problem of an instance (all requests new)."""
    model = model_from_instance(instance)
    jobs = tuple(Job(r.id, r.prompt_tokens, r.predicted_output_tokens or r.output_tokens) for r in instance.requests)
    cap = max_workers if max_workers is not None else instance_max_workers(instance)
    return PlacementProblem(model, (), jobs, cap)


def instance_max_workers(instance: Instance) -> int | None:
    """The instance's ``placement.max_workers`` (None when not given), checked."""
    placement = instance.extra.get("placement") or {}
    cap = placement.get("max_workers") if isinstance(placement, Mapping) else None
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InstanceError(f"{instance.name}: field 'placement.max_workers': must be an integer >= 1, got {cap!r}")
    return cap


def planned_instance(instance: Instance) -> Instance:
    """The instance with every request's true length set to its planned length (for verification)."""
    reqs = [replace(r, output_tokens=r.predicted_output_tokens or r.output_tokens) for r in instance.requests]
    return instance.with_requests(reqs, name=f"{instance.name}/planned")


def solve(instance: Instance, options: Mapping[str, Any] | AladdinOptions | None, budget: TimeBudget) -> SolveResult:
    """Solve (or run a heuristic on) the offline placement problem of ``instance`` (:class:`AladdinOptions`)
    within ``budget`` (:func:`optsched.api.solve` makes it)."""
    opts = AladdinOptions.parse(options)
    method, solver = opts.method, opts.solver
    t0 = time.perf_counter()
    problem = offline_problem(instance, opts.max_workers)
    if method in ("jsq", "rr", "po2") and problem.max_workers is None:
        problem = replace(problem, max_workers=best_fit(problem).workers)
    if method == "exact":
        try:
            result = solve_placement(problem, solver=solver, budget=budget, threads=opts.threads)
        except Exception as exc:  # gurobipy raises its own GurobiError
            if not licence_refused(exc):
                raise
            return SolveResult(
                problem="aladdin",
                solver=solver,
                status=Status.UNSUPPORTED,
                message=f"gurobi: the restricted licence does not cover this size ({exc})",
            )
    else:
        result = place(method, problem)
    wall = time.perf_counter() - t0
    label = solver if method == "exact" else method
    if result.status == Status.INFEASIBLE:
        return SolveResult(
            problem="aladdin",
            solver=label,
            status=Status.INFEASIBLE,
            wall_time=wall,
            extra={"method": method, "max_workers": problem.max_workers},
        )
    cp = compile_problem(problem)
    violations = check_placement(cp, result.assignment, exempt=result.unplaceable)
    sim = simulate_cluster(
        planned_instance(instance),
        "given",
        workers=None,
        heartbeat=1.0,
        model=problem.model,
        assignment=result.assignment,
    )
    peak_kv = [max(rep.kv_used, default=0) for rep in sim.replays]
    model_peaks = _model_peaks(cp, result.assignment)
    evictions = sum(rep.metrics.evictions for rep in sim.replays if rep.metrics is not None)
    if method == "exact" and result.status == Status.TIME_LIMIT:
        status = Status.TIME_LIMIT  # best fit's placement may overflow (listed): nothing is proven infeasible
    elif violations:
        status = Status.INFEASIBLE
    elif method == "exact":
        status = result.status if result.status == Status.OPTIMAL else Status.FEASIBLE
    else:
        status = Status.FEASIBLE
    extra = {
        "method": method,
        "placement": dict(sorted(result.assignment.items())),
        "workers": result.workers,
        "unplaceable": result.unplaceable,
        "violations": violations,
        "peak_kv_model": model_peaks,
        "simulation": {
            "worker_schedules_replay_clean": True,
            "peak_kv_per_worker": peak_kv,
            "evictions": evictions,
            "slo_attainment": sim.attainment,
        },
    }
    bound = result.bound if method == "exact" else None
    return SolveResult(
        problem="aladdin",
        solver=label,
        status=status,
        objective=float(result.workers),
        bound=bound,
        wall_time=wall,
        extra=extra,
    )


def _model_peaks(cp: CompiledProblem, assignment: dict[str, int]) -> list[float]:
    """Peak planned KV per worker under the paper's vectors w_j (Eq. 1 units)."""
    n = max(assignment.values(), default=-1) + 1
    loads = [cp.empty_load() for _ in range(n)]
    for job in cp.problem.new:
        loads[assignment[job.id]].add(job)
    return [load.peak_kv() / cp.kv_scale for load in loads]


def bounds(
    instance: Instance, options: Mapping[str, Any] | AladdinBoundOptions | None, budget: TimeBudget
) -> list[Bound]:
    """Lower bounds on the workers of the offline placement problem (:class:`AladdinBoundOptions`).

    ``ceil(sum (b') weights / capacity)``, ``ceil(sum prefill / (T_pre - c1))`` and
    ``ceil(sum w_j[1] / M)`` (every new request holds ``kv(l_j)`` at the first iteration) are valid
    for every feasible placement; ``exact`` is the optimum (or the solver's proven bound).
    """
    opts = AladdinBoundOptions.parse(options)
    problem = offline_problem(instance)
    kb = knapsack_bounds(compile_problem(problem))
    out = [
        Bound("atgt-knapsack", float(kb["atgt"]), True, "sum of (b') weights over one worker's (b') capacity"),
        Bound("ttft-knapsack", float(kb["ttft"]), True, "sum of prefill times over T_pre - c1"),
        Bound("kv-first-iteration", float(kb["kv"]), True, "every request holds kv(l_in) at the first iteration"),
    ]
    exact = solve_placement(problem, solver=opts.solver, budget=budget, threads=opts.threads)
    if exact.bound is not None:
        out.append(Bound("exact", float(exact.bound), True, f"{exact.status}: proven bound of the placement MIP"))
    return out

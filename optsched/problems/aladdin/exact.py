"""Exact solution of Aladdin's placement problem (:mod:`.placement`'s model (a)-(h)) with CP-SAT or a MIP.

Both backends build the same model from :func:`~.placement.compile_problem`'s integer data: the
variables ``x_ij`` allowed by the single-worker checks (symmetry of the empty workers broken as the
:mod:`.placement` docstring says), the (e') rows that can bind, and (a)-(h). Best fit
(:mod:`.heuristics`) gives the number of fresh workers to model, CP-SAT's hint, and the placement
kept when the solver stops without a better one. Requests that cannot be placed even alone get a
worker of their own outside the model (``unplaceable``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from ...budget import NO_LIMIT, TimeBudget
from ...cpsat_solver import run_model
from ...deadline import DeadlinePassed
from ...mipsolvers import pulp_solver, solver_budget
from ...result import Status
from .. import BACKENDS
from .heuristics import best_fit
from .placement import (
    CompiledProblem,
    PlacementProblem,
    PlacementResult,
    alone_unplaceable,
    compile_problem,
    knapsack_bounds,
    kv_units,
    used_workers,
)

__all__ = ["EXACT_SOLVERS", "load_backend", "solve_placement"]

#: Backends of :func:`solve_placement` (the registry's table).
EXACT_SOLVERS = BACKENDS["aladdin"]


@dataclass
class _Model:
    """Index sets of the MIP shared by both backends."""

    n_workers: int
    n_exist: int
    allowed: dict[tuple[int, int], bool]
    kv_rows: list[tuple[int, int, dict[int, int]]]  # (worker, rhs, {job: coefficient})
    fixed_used: list[int]


def _build(cp: CompiledProblem, jobs: list[int], n_fresh: int, budget: TimeBudget = NO_LIMIT) -> _Model:
    """Variables allowed and the (e') rows for the jobs ``jobs`` (indices into ``problem.new``);
    raises :class:`~optsched.deadline.DeadlinePassed` once ``budget`` has expired."""
    problem = cp.problem
    n_exist = len(problem.ongoing)
    n_workers = n_exist + n_fresh
    new = problem.new
    allowed: dict[tuple[int, int], bool] = {}
    for i in range(n_workers):
        budget.check()
        load = cp.loads[i] if i < n_exist else cp.empty_load()
        for pos, j in enumerate(jobs):
            if i >= n_exist and pos < i - n_exist:
                continue  # symmetry breaking of fresh workers
            if load.fits(new[j], int(cp.wb_new[j]), int(cp.wp_new[j])):
                allowed[i, j] = True
    kv_rows = []
    for i in range(n_workers):
        budget.check()
        mine = [j for j in jobs if (i, j) in allowed]
        if not mine:
            continue
        load = cp.loads[i] if i < n_exist else None
        own_ends = set(load.ends.tolist()) if load is not None else set()
        points = np.array(sorted(own_ends | {new[j].end for j in mine}), dtype=np.int64)
        if load is not None and len(load.ends):
            w = kv_units(cp.model, cp.kv_scale, load.bases[None, :] + points[:, None])
            base = np.sum(np.where(load.ends[None, :] >= points[:, None], w, 0), axis=1)
        else:
            base = np.zeros(len(points), dtype=np.int64)
        profiles = {j: cp.kv_profile(new[j], points) for j in mine}
        for r in range(len(points)):
            coeffs = {j: int(p[r]) for j, p in profiles.items() if p[r] > 0}
            rhs = cp.kv_cap - int(base[r])
            if sum(coeffs.values()) > rhs:
                kv_rows.append((i, rhs, coeffs))
    fixed = [i for i, jobs_i in enumerate(problem.ongoing) if jobs_i]
    return _Model(n_workers, n_exist, allowed, kv_rows, fixed)


def _solve_cpsat(
    cp: CompiledProblem,
    jobs: list[int],
    md: _Model,
    budget: TimeBudget,
    threads: int | None,
    hint: dict[int, int] | None,
) -> tuple[Status, dict[int, int], float | None]:
    from ortools.sat.python import cp_model

    mdl = cp_model.CpModel()
    x = {(i, j): mdl.NewBoolVar(f"x_{i}_{j}") for (i, j) in md.allowed}
    y = {i: mdl.NewBoolVar(f"y_{i}") for i in range(md.n_workers) if i not in md.fixed_used}
    z = {i: mdl.NewBoolVar(f"z_{i}") for i in range(md.n_workers)}
    for j in jobs:
        mdl.AddExactlyOne(x[i, j] for i in range(md.n_workers) if (i, j) in x)  # (a)
    for i in range(md.n_workers):
        budget.check()
        mine = [j for j in jobs if (i, j) in x]
        if not mine:
            if i in y:
                mdl.Add(y[i] == 0)
            continue
        base_b = cp.loads[i].sum_b if i < md.n_exist else 0
        used = y.get(i, 1)
        mdl.Add(sum(int(cp.wb_new[j]) * x[i, j] for j in mine) <= (cp.cap_b - base_b) * used)  # (b')
        pre = sum(int(cp.wp_new[j]) * x[i, j] for j in mine) + cp.c1 * z[i]
        mdl.Add(pre <= cp.cap_c)  # (c')
        if i < md.n_exist and cp.cap_d[i] is not None:
            mdl.Add(pre <= cp.cap_d[i])  # (d')
        for j in mine:
            mdl.AddImplication(x[i, j], z[i])
            if i in y:
                mdl.AddImplication(x[i, j], y[i])  # (f)
    for k, (i, rhs, coeffs) in enumerate(md.kv_rows):  # (e')
        if k % 256 == 0:
            budget.check()
        mdl.Add(sum(c * x[i, j] for j, c in coeffs.items()) <= rhs)
    fresh = list(range(md.n_exist, md.n_workers))
    for a, b in zip(fresh, fresh[1:]):
        mdl.Add(y[a] >= y[b])
    mdl.Minimize(sum(y.values()))
    if hint:
        for (i, j), var in x.items():
            mdl.AddHint(var, int(hint.get(j) == i))
    run = run_model(mdl, budget=budget, workers=threads or 1)
    if run.found:
        assign = {j: i for (i, j), var in x.items() if run.value(var)}
        status = Status.OPTIMAL if run.status == Status.OPTIMAL else Status.TIME_LIMIT
        return status, assign, run.bound + len(md.fixed_used)
    if run.status == Status.INFEASIBLE:
        return Status.INFEASIBLE, {}, None
    return Status.TIME_LIMIT, {}, run.bound + len(md.fixed_used)


def _solve_pulp(
    cp: CompiledProblem, jobs: list[int], md: _Model, backend: str, budget: TimeBudget, threads: int | None
) -> tuple[Status, dict[int, int], float | None]:
    import pulp

    start = time.perf_counter()
    prob = pulp.LpProblem("aladdin_placement", pulp.LpMinimize)
    x = {(i, j): prob.add_variable(f"x_{i}_{j}", cat="Binary") for (i, j) in md.allowed}
    y = {i: prob.add_variable(f"y_{i}", cat="Binary") for i in range(md.n_workers) if i not in md.fixed_used}
    z = {i: prob.add_variable(f"z_{i}", cat="Binary") for i in range(md.n_workers)}
    prob += pulp.lpSum(y.values())
    for j in jobs:
        prob += pulp.lpSum(x[i, j] for i in range(md.n_workers) if (i, j) in x) == 1  # (a)
    for i in range(md.n_workers):
        budget.check()
        mine = [j for j in jobs if (i, j) in x]
        if not mine:
            if i in y:
                prob += y[i] == 0
            continue
        base_b = cp.loads[i].sum_b if i < md.n_exist else 0
        used = y.get(i, 1)
        prob += pulp.lpSum(int(cp.wb_new[j]) * x[i, j] for j in mine) <= (cp.cap_b - base_b) * used  # (b')
        pre = pulp.lpSum(int(cp.wp_new[j]) * x[i, j] for j in mine) + cp.c1 * z[i]
        prob += pre <= cp.cap_c  # (c')
        if i < md.n_exist and cp.cap_d[i] is not None:
            prob += pre <= cp.cap_d[i]  # (d')
        for j in mine:
            prob += x[i, j] <= z[i]
            if i in y:
                prob += x[i, j] <= y[i]  # (f)
    for k, (i, rhs, coeffs) in enumerate(md.kv_rows):  # (e')
        if k % 256 == 0:
            budget.check()
        prob += pulp.lpSum(c * x[i, j] for j, c in coeffs.items()) <= rhs
    fresh = list(range(md.n_exist, md.n_workers))
    for a, b in zip(fresh, fresh[1:]):
        prob += y[a] >= y[b]
    solve_by = solver_budget(budget, time.perf_counter() - start)
    if solve_by.expired():  # no time left to hand the model over: as a build stopped when the budget expired
        raise DeadlinePassed("placement MIP not handed over to the solver")
    prob.solve(pulp_solver(backend, budget=solve_by, threads=threads))
    st = pulp.LpStatus[prob.status]
    has_sol = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if st == "Infeasible":
        return Status.INFEASIBLE, {}, None
    if not has_sol:
        return Status.TIME_LIMIT, {}, None
    assign = {j: i for (i, j), var in x.items() if (var.value() or 0) > 0.5}
    optimal = prob.sol_status == pulp.LpSolutionOptimal
    bound: float | None = None
    if backend == "highs":
        info = prob.solverModel.getInfo()
        bound = math.ceil(info.mip_dual_bound - 1e-6) + len(md.fixed_used)
    elif backend == "gurobi":
        bound = math.ceil(prob.solverModel.ObjBound - 1e-6) + len(md.fixed_used)
    if optimal:
        bound = sum(1 for v in y.values() if (v.value() or 0) > 0.5) + len(md.fixed_used)
    return (Status.OPTIMAL if optimal else Status.TIME_LIMIT), assign, bound


def solve_placement(
    problem: PlacementProblem,
    solver: str = "cpsat",
    budget: TimeBudget = NO_LIMIT,
    threads: int | None = None,
) -> PlacementResult:
    """Solve a heartbeat (or offline) placement exactly.

    Parameters
    ----------
    problem
        The heartbeat.
    solver
        ``cpsat``, ``highs``, ``cbc`` or ``gurobi`` (size-limited licence: a model beyond it raises
        ``RuntimeError`` naming the licence).
    budget
        Its time, model building included; on expiry the better of the best placement found and
        best fit's is returned with the bound. Without a placement found, best fit's is returned
        even when ``max_workers`` makes it overflow (its overflows are listed in ``unplaceable``,
        and the status stays ``time_limit``): every new job is placed.
    threads
        Solver threads.

    Returns
    -------
    PlacementResult
        Status ``optimal`` (proven), ``time_limit`` (best found, bound given) or ``infeasible``
        (``max_workers`` too small).
    """
    t0 = time.perf_counter()
    full = compile_problem(problem)
    n_exist = len(problem.ongoing)
    alone_bad = [problem.new[k].id for k in alone_unplaceable(full)]
    core = replace(problem, new=tuple(job for job in problem.new if job.id not in set(alone_bad)))
    cp = compile_problem(core) if alone_bad else full
    jobs = list(range(len(core.new)))
    warm = best_fit(core, compiled=cp)
    n_fresh = len({i for i in warm.assignment.values() if i >= n_exist})
    if problem.max_workers is not None:
        n_fresh = max(problem.max_workers - n_exist - len(alone_bad), 0)
    if solver not in EXACT_SOLVERS:
        raise ValueError(f"unknown solver {solver!r} (known: {', '.join(EXACT_SOLVERS)})")
    n_workers = n_exist + n_fresh
    lower = sum(1 for jobs_i in problem.ongoing if jobs_i)  # workers already in use
    try:  # a model not built within the budget leaves best fit's placement (below) and the bounds
        md = _build(cp, jobs, n_fresh, budget)
        lower = len(md.fixed_used) + _fresh_lower_bound(cp, md, jobs)
        if not jobs or (not warm.unplaceable and warm.workers <= lower):
            status, assign, bound = Status.OPTIMAL, {j: warm.assignment[core.new[j].id] for j in jobs}, float(lower)
        elif solver == "cpsat":
            hint = {j: warm.assignment[core.new[j].id] for j in jobs}
            status, assign, bound = _solve_cpsat(cp, jobs, md, budget, threads, hint)
        else:
            status, assign, bound = _solve_pulp(cp, jobs, md, solver, budget, threads)
    except DeadlinePassed:
        status, assign, bound = Status.TIME_LIMIT, {}, None
    if status == Status.INFEASIBLE:
        return PlacementResult(
            assignment={},
            workers=0,
            status=Status.INFEASIBLE,
            bound=None,
            method="exact",
            solver=solver,
            unplaceable=alone_bad,
            wall_time=time.perf_counter() - t0,
        )
    assignment = {core.new[j].id: i for j, i in assign.items()}
    overflows: list[str] = []
    if status == Status.TIME_LIMIT and (
        not assignment
        or not warm.unplaceable
        and (used_workers(problem, warm.assignment) < used_workers(problem, assignment))
    ):  # no incumbent (best fit's placement, overflows included), or one worse than best fit's
        assignment = dict(warm.assignment)  # (the MIP backends get no hint)
        overflows = list(warm.unplaceable)
    for k, jid in enumerate(alone_bad):
        assignment[jid] = n_workers + k
    bound = max(float(lower), bound or 0.0) + len(alone_bad)
    bound = max(bound, float(max(knapsack_bounds(full).values())))
    workers = used_workers(problem, assignment)
    if bound >= workers and not overflows:
        status = Status.OPTIMAL
    return PlacementResult(
        assignment=assignment,
        workers=workers,
        status=status,
        bound=bound,
        method="exact",
        solver=solver,
        unplaceable=alone_bad + overflows,
        wall_time=time.perf_counter() - t0,
    )


def load_backend(solver: str) -> None:
    """Import ``solver``'s library now rather than inside the first timed solve.

    CP-SAT's import (OR-Tools with pandas) takes 1-3 s of CPU, which a per-heartbeat time limit of
    :func:`solve_placement` would otherwise spend before the first model is solved.
    """
    if solver == "cpsat":
        import ortools.sat.python.cp_model  # noqa: F401


def _fresh_lower_bound(cp: CompiledProblem, md: _Model, jobs: list[int]) -> int:
    """Workers beyond those with ongoing requests that any placement needs.

    Jobs that fit no worker with ongoing requests must go elsewhere; the knapsack bounds of that set
    (on (b'), (c') and the first-iteration KV) bound the extra workers.
    """
    fixed = set(md.fixed_used)
    rest = [j for j in jobs if not any((i, j) in md.allowed for i in fixed)]
    if not rest:
        return 0
    job = cp.problem.new
    one = np.array([1], dtype=np.int64)
    sum_b = sum(int(cp.wb_new[j]) for j in rest)
    sum_p = sum(int(cp.wp_new[j]) for j in rest)
    sum_kv = sum(int(cp.kv_profile(job[j], one)[0]) for j in rest)
    room_c = cp.cap_c - cp.c1
    return max(
        1, math.ceil(sum_b / max(cp.cap_b, 1)), math.ceil(sum_p / max(room_c, 1)), math.ceil(sum_kv / max(cp.kv_cap, 1))
    )

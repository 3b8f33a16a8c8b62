"""``SOLVERS["hybrid"]``: the full MIP of :mod:`.model` on an instance, its schedule replayed.

Without a MIP solution (model not built in time, none found by the limit, or none at all: the model
restricted to ``bins`` stages may have none) the schedule is the ``warm_start`` policy's, else
:data:`FALLBACK_POLICY`'s, with the proven bound; that policy's schedule is also the result when it
is better than the MIP's (a stopped MIP's incumbent, or the optimum of a restricted model: the
paper's time model, fewer bins than requests). What the reported objective and bound are:
:mod:`.model`'s docstring, last paragraph.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...bounds import generic_bounds
from ...budget import TimeBudget
from ...deadline import DeadlinePassed
from ...instance import Instance
from ...mipsolvers import HANDOVER_PER_BUILD, solver_budget
from ...options import Name, OptionError, Options, PositiveFloat, PositiveInt
from ...result import SolveResult, Status, check_agreement, replayed_objective
from .bounds import strict_bound
from .model import (
    MODES,
    TIME_MODELS,
    HybridMIP,
    build,
    extract_stages,
    run_backend,
    stages_to_schedule,
    warm_start_values,
)
from .online import POLICY_CONFIGS, simulate_policy
from .timing import HybridTiming, shape_term_refusal, timing_of

__all__ = ["FALLBACK_POLICY", "HybridOptions", "solve"]

#: Policy whose schedule is the result when the MIP has none by the time limit (and no warm start is given).
FALLBACK_POLICY = "hybrid"


@dataclass(frozen=True)
class HybridOptions(Options):
    """Options of the hybrid ``solve``.

    Attributes
    ----------
    solver
        ``highs``, ``cbc`` or ``gurobi``.
    time_limit
        Seconds for the whole solve, building the model included (default 60).
    threads
        Solver threads (default 2).
    method
        The mode: ``strengthened`` or ``faithful`` (module docstring).
    time_model
        ``contract`` (the default in the strengthened mode) or ``paper`` (the default in the
        faithful mode).
    bins
        K, the number of stages (default I).
    warm_start
        A hybrid policy (:data:`.online.POLICY_CONFIGS`) whose schedule, converted by
        :func:`warm_start_values`, starts the solver.
    """

    problem = "hybrid"
    solver: Literal["highs", "cbc", "gurobi"] = "highs"
    time_limit: PositiveFloat = 60.0
    threads: PositiveInt | None = None
    method: Literal[MODES] = "strengthened"
    time_model: Literal[TIME_MODELS] | None = None
    bins: PositiveInt | None = None
    warm_start: Name | None = None

    def check(self) -> None:
        if self.warm_start is not None and self.warm_start not in POLICY_CONFIGS:
            raise OptionError(
                f"option 'warm_start': unknown hybrid policy {self.warm_start!r} (known: {', '.join(POLICY_CONFIGS)})"
            )


#: Seconds the strict bound's P||Cmax solve gets when the time limit has passed (a valid, weaker
#: bound at any limit).
STRICT_BOUND_LEAST = 0.1
#: The most seconds the strict bound's P||Cmax solve gets.
STRICT_BOUND_TIME = 10.0


def solve(instance: Instance, options: Mapping[str, Any] | HybridOptions | None, budget: TimeBudget) -> SolveResult:
    """The full MIP, its schedule replayed (module docstring; options: :class:`HybridOptions`), within
    ``budget`` (:func:`optsched.api.solve` makes it)."""
    opts = HybridOptions.parse(options)
    solver, mode, bins, warm_policy = opts.solver, opts.method, opts.bins, opts.warm_start
    tm = timing_of(instance)
    start = time.perf_counter()
    problem = "hybrid"
    policy = warm_policy or FALLBACK_POLICY
    unsupported = shape_term_refusal(instance, "the Hybrid MIP") or kv_or_budget_issue(instance, tm)
    if unsupported:
        return SolveResult(problem=problem, solver=solver, status=Status.UNSUPPORTED, message=unsupported)
    try:
        model: HybridMIP | None = build(instance, mode, opts.time_model, bins, budget)
    except ValueError as exc:
        return SolveResult(problem=problem, solver=solver, status=Status.UNSUPPORTED, message=str(exc))
    except DeadlinePassed:
        model = None
    built = time.perf_counter() - start
    fallback = simulate_policy(instance, policy)  # the warm start, and the result when better than the MIP's
    warm = warm_start_values(model, instance, fallback) if model is not None and warm_policy else None
    solve_by = solver_budget(budget, built)
    status, mip_value, mip_bound = Status.TIME_LIMIT, None, None
    mip_status = "not built within the time limit"
    if model is not None and solve_by.expired():
        mip_status = (
            f"not solved: {budget.left(0.01):.3g} s left, "
            f"handing the model over takes about {HANDOVER_PER_BUILD * built:.3g} s"
        )
        model = None
    if model is not None:
        try:
            status, mip_value, mip_bound = run_backend(model, solver, solve_by, opts.threads, warm)
            mip_status = status
        except Exception as exc:  # e.g. the restricted Gurobi licence: report, never crash
            if solver == "gurobi":
                return SolveResult(problem=problem, solver=solver, status=Status.UNSUPPORTED, message=f"gurobi: {exc}")
            raise
    strict = strict_bound(instance, budget.within(STRICT_BOUND_TIME).at_least(STRICT_BOUND_LEAST))[0]
    exact_time = model is not None and model.time_model == "contract" and tm.linear
    bound = max([strict] + [b.value for b in generic_bounds(instance)])  # the generic ones see arrivals
    if exact_time and model.bins >= len(instance.requests) and mip_bound is not None:
        bound = max(bound, mip_bound)
    extra: dict[str, Any] = {
        "mode": mode,
        "time_model": None if model is None else model.time_model,
        "bins": None if model is None else model.bins,
        "mip_status": mip_status,
        "mip_objective": mip_value,
        "mip_bound": mip_bound,
        "strict_bound": strict,
        "build_time": built,
        "warm_start": warm_policy if warm is not None else None,
    }
    fallback_value, fallback_rep = replayed_objective(instance, fallback, "makespan")
    incumbent = None
    if mip_value is None or model is None:
        why = (
            f"the MIP over K = {model.bins} stages has no solution"
            if status == Status.INFEASIBLE
            else "no MIP solution within the time limit"
        )
        incumbent = f"{why}; schedule of policy {policy!r}"
        schedule, value, rep = fallback, fallback_value, fallback_rep
    else:
        schedule = stages_to_schedule(
            instance, extract_stages(model, instance), {"solver": solver, "problem": problem, **extra}
        )
        value, rep = replayed_objective(instance, schedule, "makespan")
        if exact_time:  # the contract time model is exact: the replay never exceeds the MIP's t^max ...
            if value > mip_value * (1 + 1e-6) + 1e-9:
                raise RuntimeError(f"replayed makespan {value} exceeds the MIP's exact t^max {mip_value}")
            if status == Status.OPTIMAL:  # ... and at a proven optimum they agree
                check_agreement(mip_value, value, "hybrid MIP (contract time model)")
        # a stopped MIP's incumbent, or the optimum of a restricted model (paper time model, K < I
        # bins), may be worse than the policy's schedule: the better one is the result
        if fallback_value < value:
            incumbent = f"the MIP's schedule ({value:.9g} s) is worse than policy {policy!r}'s; schedule of {policy!r}"
            schedule, value, rep = fallback, fallback_value, fallback_rep
    proven = value <= bound * (1 + 1e-6) + 1e-9
    final = Status.OPTIMAL if proven else (Status.TIME_LIMIT if status == Status.TIME_LIMIT else Status.FEASIBLE)
    return SolveResult(
        problem=problem,
        solver=solver,
        status=final,
        objective=value,
        bound=min(bound, value),
        wall_time=time.perf_counter() - start,
        schedule=schedule,
        incumbent=incumbent,
        extra=extra,
        replay=rep,
    )


def kv_or_budget_issue(instance: Instance, tm: HybridTiming) -> str | None:
    """Why the MIP's schedules might break a limit it does not model (KV capacity, decode token budget)."""
    if tm.clients > instance.limits.token_budget:
        return "J exceeds the token budget: a full decode round would not fit one batch"
    cap = instance.limits.kv_capacity
    if cap is not None:
        worst = sum(sorted((r.max_kv for r in instance.requests), reverse=True)[: tm.clients])
        if worst > cap:
            return f"the MIP models KV memory only through J; the J largest requests need {worst} > kv_capacity {cap}"
    return None

r"""Exact G-maximisation over the slot model (docs/gmax.md, "Ratio objective"): Dinkelbach and fixed-n.

G = n / t is a ratio; two exact schemes reduce it to the slot model of :mod:`.slots`:

- **Dinkelbach.** With the incumbent's :math:`\\lambda = G_{inc}`, solve
  :math:`F(\\lambda) = \\max\\, n - \\lambda t`. :math:`F` is decreasing with :math:`F(G^*) = 0`; if
  :math:`F(\\lambda) > 0` its solution has :math:`G > \\lambda` and becomes the incumbent, otherwise
  :math:`\\lambda = G^*` is proven. A sub-solve stopped by the time limit with dual bound
  :math:`\\bar F` still proves :math:`G^* \\le \\lambda + \\max(\\bar F, 0) / t_{LB}`
  (:math:`t_{LB}` the larger of :math:`\\sum_i \\min_b E_i(b)` and the LP bound on :math:`\\min t`;
  the MILP backend then also tightens :math:`\\bar F` by the LP relaxation, solved after the limit).
- **Fixed n (epsilon-constraint).** :math:`t^*(n_0) = \\min t` s.t. :math:`n \\ge n_0`; then
  :math:`G^* = \\max_{n_0} n_0 / t^*(n_0)`. The points :math:`(n_0, t^*(n_0))` are the (n, t) Pareto
  frontier. Solved for :math:`n_0 = \\bar n, \\bar n - 1, \\dots` (:math:`\\bar n` = max n) and stopped
  once :math:`n_0 / t^*(0) \\le` the best G (all smaller :math:`n_0` are then dominated), unless the
  whole frontier is asked for.
- **Branch-and-bound** (``"bnb"``, :mod:`.lagrange`): a depth-first search over batch sequences at
  the incumbent's :math:`\lambda`, pruned by a Lagrangian bound (pseudo-schedules priced by a
  dynamic programme over positions and batch starts) and by dominance; no MILP.

**Incumbent.** The two annealing starts and a short seeded annealing, each polished by
:func:`~.sa.local_search` (steepest ascent over single moves), the best of them then by
:func:`~.sa.iterated_local_search` (random kicks and local search again); the result is Dinkelbach's first
:math:`\lambda` and the solvers' MIP start / hint, so that often one sub-problem proves it. The
Dinkelbach sub-problem is restricted to schedules with :math:`n - \lambda t \ge 0` (the incumbent
has 0; a better schedule has > 0), which bounds t and hence every batch start
(:meth:`~.slots.SlotData.start_cap`).

Every schedule a sub-solve returns is judged by :func:`~.problem.evaluate_g`; the reported G is the
evaluated one and the model's own (n, t) must agree with it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ...budget import NO_LIMIT, TimeBudget
from ...result import Status
from .lagrange import branch_and_bound
from .problem import GmaxProblem, batch_violations, g_core, g_value
from .sa import SAParams, iterated_local_search, local_search, simulated_annealing, start_points
from .slots import SlotBackend, SlotData, SubResult

__all__ = ["EXACT_METHODS", "ExactResult", "make_backend", "solve_exact"]

#: Methods of :func:`solve_exact`.
EXACT_METHODS = ("dinkelbach", "fixed-n", "bnb")

#: Relative tolerance on the model's t against the evaluated t (float MILP / tick rounding).
T_RTOL = 1e-6

#: A schedule replaces the incumbent only if its G is larger by this relative margin: the same
#: schedule returned with its members in another order can differ in the last bit of t, which must
#: not start another Dinkelbach step.
G_RTOL = 1e-12


@dataclass(kw_only=True)
class ExactResult:
    """Outcome of an exact run.

    Attributes
    ----------
    status
        ``OPTIMAL`` (G proven), ``TIME_LIMIT`` (best found and a proven upper bound).
    batches
        Best ordered batches (request indices).
    n, t, G
        Their evaluated values.
    bound
        Proven upper bound on G.
    frontier
        ``[(n0, t*(n0), proven)]`` for the n0 solved by fixed-n (empty for Dinkelbach unless asked).
    iterations
        Sub-problems solved.
    """

    status: Status
    batches: list[list[int]]
    n: int
    t: float
    G: float
    bound: float
    frontier: list[tuple[int, float, bool]] = field(default_factory=list)
    iterations: int = 0
    log: list[dict] = field(default_factory=list)


def make_backend(
    problem: GmaxProblem, solver: str = "highs", threads: int | None = None, log: bool = False, **kw
) -> SlotBackend:
    """A slot-model backend: ``cpsat`` or a MILP solver (``highs``, ``cbc``, ``gurobi``)."""
    data = SlotData.build(problem)
    if solver == "cpsat":
        from .cpsat import CpsatBackend

        return CpsatBackend(data, threads=threads, log=log, **kw)
    from .milp import MilpBackend

    return MilpBackend(data, solver=solver, threads=threads, log=log)


class BestSchedule:
    """The best schedule offered so far (its batches, n, t and G); ``offer`` keeps a better one."""

    def __init__(self, problem: GmaxProblem):
        self.problem = problem
        self.batches: list[list[int]] = []
        self.n, self.t, self.G = 0, math.inf, -1.0

    def offer(self, batches: list[list[int]] | None) -> bool:
        if not batches:
            return False
        n, t = g_core(self.problem, batches)
        g = g_value(n, t)
        if g > self.G * (1 + G_RTOL):
            self.batches, self.n, self.t, self.G = batches, n, t, g
            return True
        return False


def check_model(problem: GmaxProblem, res: SubResult, what: str) -> None:
    """The model's (n, t) must agree with the evaluator on the schedule it returned: its t may
    exceed the evaluated one (batch durations and starts are bounded from below only, so an
    incumbent of a stopped search can carry slack) but never fall short of it, and its n may be
    smaller (an on-time flag may be off) but never larger."""
    n, t = g_core(problem, res.batches or [])
    if res.t < t - (T_RTOL * max(1.0, t) + 1e-5 * problem.n_requests):
        raise RuntimeError(f"{what}: model t = {res.t!r} is below the evaluated t = {t!r}")
    if res.n > n:
        raise RuntimeError(f"{what}: model claims n = {res.n} but only {n} requests meet their SLO")


def solve_exact(
    problem: GmaxProblem,
    backend: SlotBackend,
    method: str = "dinkelbach",
    budget: TimeBudget = NO_LIMIT,
    frontier: bool = False,
    warm_iters: int = 30,
) -> ExactResult:
    """Maximise G exactly.

    Parameters
    ----------
    method
        ``"dinkelbach"``, ``"fixed-n"`` or ``"bnb"`` (``backend`` unused).
    budget
        The time of all sub-solves (:func:`optsched.api.solve` makes it; no limit by default).
    frontier
        Also compute the whole (n, t) Pareto frontier (every n0 by fixed-n).
    warm_iters
        Iterations per temperature level of the seeded annealing whose schedule is the first
        incumbent (and the CP-SAT hint).
    """
    if method not in EXACT_METHODS:
        raise ValueError(f"unknown exact method {method!r} ({', '.join(EXACT_METHODS)})")
    inc = BestSchedule(problem)
    starts = [*start_points(problem), simulated_annealing(problem, SAParams(iters=warm_iters)).batches]
    for start in starts:
        inc.offer(local_search(problem, start, budget))
    inc.offer(iterated_local_search(problem, inc.batches, budget=budget))
    backend.hint = inc.batches
    t_lb = SlotData.build(problem).t_lower_bound()
    log: list[dict] = []
    t_relaxation = getattr(backend, "t_relaxation", None)
    if budget.limited and t_relaxation is not None and method != "bnb":
        # a time limit may end without a proof: the LP bound on t, inside the budget, states the bound
        t_lp = t_relaxation(budget)
        log.append({"step": "lp-bounds", "t_lp": t_lp})
        t_lb = max(t_lb, t_lp)
    points: list[tuple[int, float, bool]] = []
    if method in ("dinkelbach", "bnb"):
        if method == "bnb":
            found = branch_and_bound(problem, inc.batches, budget, t_lb)
            log.append({"step": "bnb", "status": found.status, **found.info})
            if batch_violations(problem, found.batches):
                raise RuntimeError(f"bnb returned an invalid schedule: {batch_violations(problem, found.batches)}")
            inc.offer(found.batches)
            status, bound = found.status, found.bound
        else:
            status, bound = run_dinkelbach(problem, backend, inc, budget, t_lb, log)
        if frontier:
            points, _, _ = _fixed_n(problem, backend, inc, budget, t_lb, log, prune=False)
    else:
        points, status, bound = _fixed_n(problem, backend, inc, budget, t_lb, log, prune=not frontier)
    # n <= the requests that can meet their SLO at all, t >= t_LB: a bound that needs no solver
    trivial = int(SlotData.build(problem).can_meet.any(axis=1).sum()) / t_lb if t_lb > 0 else 0.0
    solves = sum(1 for entry in log if entry["step"] != "lp-bounds")
    return ExactResult(
        status=status,
        batches=inc.batches,
        n=inc.n,
        t=inc.t,
        G=inc.G,
        bound=max(min(bound, trivial), inc.G),
        frontier=points,
        iterations=solves,
        log=log,
    )


def run_dinkelbach(problem, backend, inc, budget, t_lb, log) -> tuple[Status, float]:
    if inc.G == 0:
        res = backend.max_n(budget)
        log.append({"step": "max_n", "status": res.status, "wall": res.wall})
        if res.status == Status.OPTIMAL and res.n == 0:
            return Status.OPTIMAL, 0.0
        if res.batches:
            inc.offer(res.batches)
        if inc.G == 0:
            return Status.TIME_LIMIT, math.inf
    # any schedule: n - lambda t <= F_bound and t >= t_lb, so G <= lambda + F_bound / t_lb; the bound
    # of every step holds for every schedule, so the least one over the steps so far is kept
    proven = math.inf
    setup = 0.0  # the longest time a step spent outside the solver (model build, loading, checks)
    while True:
        if budget.limited and (budget.expired() or (budget.left() or 0.0) < 2 * setup):
            # the limit has passed, or another step could not even be set up before it: stop on time
            return Status.TIME_LIMIT, _time_limit_bound(backend, inc, proven, t_lb, log, budget)
        begin = time.perf_counter()
        res = backend.parametric(inc.n, inc.batches, budget)
        setup = max(setup, time.perf_counter() - begin - res.wall)
        log.append({
            "step": "dinkelbach",
            "lambda": res.info.get("lambda"),
            "status": res.status,
            "F": res.objective,
            "wall": res.wall,
        })
        lam = res.info.get("lambda", inc.G)
        if math.isfinite(res.bound):
            proven = min(proven, lam + max(res.bound, 0.0) / t_lb)
        if res.batches:
            check_model(problem, res, "dinkelbach")
        improved = inc.offer(res.batches)
        backend.hint = inc.batches
        if res.status == Status.OPTIMAL and not improved:
            # F(lambda) = max n - lambda t is attained by a schedule no better than the incumbent:
            # F(lambda) <= 0 up to rounding, so lambda = G* (within the model's arithmetic).
            return Status.OPTIMAL, inc.G + max(res.objective, 0.0) / t_lb
        if res.status not in (Status.OPTIMAL, Status.FEASIBLE) or (not improved and res.status == Status.FEASIBLE):
            return Status.TIME_LIMIT, _time_limit_bound(backend, inc, proven, t_lb, log, budget)


def _time_limit_bound(backend, inc, proven, t_lb, log, budget) -> float:
    """The least bound over the Dinkelbach steps; when no step has a dual bound (the solver stopped
    before its root LP), the F LP at the incumbent if it is solved within the budget (else inf: the
    caller's bound that needs no solver remains)."""
    f_relaxation = getattr(backend, "f_relaxation", None)
    if math.isfinite(proven) or f_relaxation is None:
        return proven
    f_lp = f_relaxation(inc.n, inc.batches, budget)
    log.append({"step": "lp-bounds", "F_lp": f_lp})
    return inc.G + max(f_lp, 0.0) / t_lb


def _fixed_n(problem, backend, inc, budget, t_lb, log, prune: bool) -> tuple[list, Status, float]:
    """min t at n >= n0 from the largest n0 down. No model is built once the budget has expired: then every
    n0 not solved yet is bounded by n0 / t0 (t >= t0 for every schedule)."""
    if budget.expired():
        return [], Status.TIME_LIMIT, math.inf
    complete = True
    base = backend.min_t(0, budget)
    log.append({"step": "min_t", "n0": 0, "status": base.status, "t": base.t, "wall": base.wall})
    if base.batches:
        check_model(problem, base, "min t")
        inc.offer(base.batches)
    t0 = base.objective if base.status == Status.OPTIMAL else (base.bound if math.isfinite(base.bound) else t_lb)
    t0 = max(t0, t_lb) if base.status != Status.OPTIMAL else t0
    complete &= base.status == Status.OPTIMAL
    top = backend.max_n(budget) if not budget.expired() else SubResult(status=Status.TIME_LIMIT)
    log.append({"step": "max_n", "status": top.status, "n": top.n, "wall": top.wall})
    if top.batches:
        inc.offer(top.batches)
    if top.status == Status.OPTIMAL:
        n_bar = top.n
    else:
        complete = False
        n_bar = int(math.floor(top.bound + 1e-9)) if math.isfinite(top.bound) else problem.n_requests
    points: list[tuple[int, float, bool]] = []
    bound = inc.G
    for n0 in range(n_bar, 0, -1):
        if prune and n0 / t0 <= inc.G:
            break
        if budget.expired():
            complete = False
            bound = max(bound, n0 / t0)
            break
        res = backend.min_t(n0, budget)
        log.append({"step": "min_t", "n0": n0, "status": res.status, "t": res.t, "wall": res.wall})
        if res.status == Status.INFEASIBLE:
            continue
        if res.batches:
            check_model(problem, res, f"min t at n >= {n0}")
            inc.offer(res.batches)
        if res.status == Status.OPTIMAL:
            points.append((n0, res.objective, True))
            bound = max(bound, n0 / res.objective)
        else:
            complete = False
            lb = res.bound if math.isfinite(res.bound) and res.bound > 0 else t_lb
            bound = max(bound, n0 / max(lb, t_lb))
            if res.batches:
                points.append((n0, res.t, False))
    return sorted(points), (Status.OPTIMAL if complete else Status.TIME_LIMIT), bound

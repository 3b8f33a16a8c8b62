r"""Exact G-maximisation by branch-and-bound over batch sequences with a Lagrangian bound.

This is the ``exact_method="bnb"`` of :func:`~.exact.solve_exact`. At the incumbent's
:math:`\lambda_0 = G_{inc}` it proves or refutes :math:`\max\, n - \lambda t \le 0` (Dinkelbach's
sub-problem) by a depth-first search over schedules built batch by batch, pruning with a bound that
sees batch starts and deadlines exactly where the slot MILP (:mod:`.slots`) only sees them through
big-M rows.

**Multipliers.** The Lagrangian bound of :mod:`.suffix` holds for every :math:`\pi`, which is chosen by column
generation on the pseudo-schedules (the master LP :math:`\max \sum_\rho \text{value}_\rho y_\rho` s.t.
:math:`\sum_\rho a_{j\rho} y_\rho = 1`, :math:`\sum_\rho y_\rho = 1`, its duals priced by the programme), with
Wentges' smoothing; any :math:`\pi` gives a valid bound, the column generation only makes it small. A column's value is
its *grid value*, the value the programme gives it (each batch at the grid cell the programme
reaches, :meth:`SuffixBound.grid_value`; never below its true value), so the master is the LP of
the relaxation the programme prices: the priced path's reduced cost is exactly the programme's
excess over the master, and the column generation converges to the grid relaxation's Lagrangian
dual instead of stalling when a priced path's true value falls below its grid value (seed 0 at
N = 30, lambda 0.0521: root bound 0.899 instead of 1.106). Each pricing adds the best paths after
the ``per_pricing`` best first batches (:meth:`SuffixBound.paths`). When the repaired
pseudo-schedules below raise :math:`\lambda_0`, the column generation runs again at the new
:math:`\lambda_0` from the first one's support, and the search takes whichever multipliers give the
smaller root bound there.
The master solution's heaviest pseudo-schedules, repaired into real schedules (:func:`repair`),
are offered as incumbents before the search (a heuristic; any schedule is judged by
:func:`~.problem.g_core`).

**Result.** Leaves are judged by :func:`~.problem.g_core`. When the search ends, every schedule
has :math:`G \le \lambda + EPS / t_{LB}`; when the time limit stops it, every schedule in an open
node has :math:`G \le \lambda_0 + \max(UB, 0) / T_{min}` and all others :math:`G \le \lambda`, so
the larger of the two is the proven bound.

**Final bound at a time limit (bisection).** :math:`\lambda_0 + UB / T_{min}` divides by a lower
bound on t (:math:`T_{min}`, at least :math:`t_{LB}`), far below the t of the schedules that attain
UB; the Lagrangian bound itself holds at every :math:`\lambda` with the same
:math:`\pi`: for an open node (prefix count n, prefix part :math:`T_A` of t, remaining R, q, S) and every
schedule that completes it (its count :math:`n'` and time :math:`t`),

.. math:: n' - \mu t \le UB_\mu = n - \mu T_A + \sum_{j \in R} \pi_j + V_h^{\mu}(q, \lfloor S / h \rfloor)

(the module's bound with :math:`\lambda = \mu`, :math:`V_h^\mu` the programme at :math:`\mu`). If
:math:`UB_\mu \le EPS` for every open node, every schedule below an open node has
:math:`n' - \mu t \le EPS`, i.e. :math:`G \le \mu + EPS / t_{LB}`. So a bisection on
:math:`\mu` between the search's :math:`\lambda` and the bound above keeps as its upper end a
:math:`\mu` at which the test held (or the bound above), and the proven bound is
:math:`\max(\lambda, \min(\text{bound above}, \mu + EPS / t_{LB}))`. The search stops early by
the time of ``BISECTIONS`` programmes so that the bisection fits in the limit; each step builds the
programme at :math:`\mu` (:math:`\pi` unchanged, any :math:`\pi` being valid).

The search itself (nodes, dominance, the bound over the remaining requests, the swap rule) is
:mod:`.bnb`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np

from ...budget import TimeBudget
from ...result import Status
from .bnb import EPS, Search
from .problem import GmaxProblem, g_core, g_value
from .sa import chunked, local_search
from .suffix import SuffixBound

__all__ = ["BnbResult", "branch_and_bound", "lagrangian_multipliers", "refuted_lambda", "repair"]

#: Bisection steps of the final bound at a time limit (the search stops that many programmes early)
#: and their relative resolution.
BISECTIONS = 12


BISECT_RTOL = 1e-4


#: The column generation stops when its bound is within this of the master LP (requests).
CG_TOL = 1e-4


#: Pseudo-schedules of the master solution repaired into incumbents.
REPAIRS = 3


def lagrangian_multipliers(
    problem: GmaxProblem,
    lam: float,
    start: list[list[list[int]]],
    step: float,
    budget: TimeBudget,
    max_iter: int = 400,
    smoothing: float = 0.7,
    per_pricing: int = 10,
) -> tuple[np.ndarray, float, float, int, list[list[list[int]]]]:
    r"""Multipliers :math:`\pi` by column generation (module docstring).

    Parameters
    ----------
    start
        The first columns, a real schedule first (so that the master is feasible); e.g. the support
        of an earlier column generation at another :math:`\lambda` (revalued at this one).
    per_pricing
        Columns added per pricing (:meth:`SuffixBound.paths`).

    Returns
    -------
    (pi, bound, master, iterations, support)
        The multipliers with the least root bound :math:`\sum \pi + V_h(0, 0)` seen, that bound, the
        last master LP value (a lower bound on the Lagrangian dual), the iterations and the
        pseudo-schedules of the last master solution, heaviest first.
    """
    nreq = problem.n_requests
    suffix = SuffixBound(problem, lam, step)
    master = highspy.Highs()
    master.setOptionValue("output_flag", False)
    for _ in range(nreq + 1):
        master.addRow(1.0, 1.0, 0, np.array([], dtype=np.int32), np.array([]))
    seen: set[tuple] = set()
    columns: list[list[list[int]]] = []

    def add(batches: list[list[int]]) -> bool:
        key = tuple(tuple(sorted(b)) for b in batches)
        if key in seen:
            return False
        seen.add(key)
        columns.append(batches)
        val, counts = suffix.grid_value(batches)
        rows = np.flatnonzero(counts)
        master.addCol(
            -val,
            0.0,
            highspy.kHighsInf,
            len(rows) + 1,
            np.append(rows, nreq).astype(np.int32),
            np.append(counts[rows], 1.0),
        )
        return True

    for batches in start:
        add(batches)
    best_pi, best, lp, it = np.zeros(nreq), math.inf, -math.inf, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count of iterations run is returned
        master.run()
        lp = -master.getInfo().objective_function_value
        duals = np.asarray(master.getSolution().row_dual)
        lp_pi = -duals[:nreq]
        pi = lp_pi if not math.isfinite(best) else smoothing * best_pi + (1 - smoothing) * lp_pi
        bound = suffix.solve(pi)
        if bound < best:
            best, best_pi = bound, pi.copy()
        if best - lp <= CG_TOL or budget.expired():
            break
        if not sum(add(batches) for batches in suffix.paths(per_pricing)):
            suffix.solve(lp_pi)
            if not sum(add(batches) for batches in suffix.paths(per_pricing)):
                break
    weights = np.asarray(master.getSolution().col_value)
    support = [columns[k] for k in np.argsort(-weights) if weights[k] > 1e-6]
    return best_pi, best, lp, it, support


def repair(problem: GmaxProblem, batches: list[list[int]], budget: TimeBudget) -> list[list[int]]:
    """A real schedule from a pseudo-schedule: later occurrences of a request are dropped (a batch
    over the memory capacity, which the pricing ignores, is cut by :func:`~.sa.chunked`), missing
    requests appended in the order of their shortest time, then :func:`~.sa.local_search` until
    ``budget`` expires."""
    seen: set[int] = set()
    out = []
    for batch in batches:
        kept = [j for j in batch if j not in seen]
        seen.update(kept)
        out.extend(chunked(problem, kept))
    missing = sorted(set(range(problem.n_requests)) - seen, key=lambda j: problem.times.exec[j].min())
    return local_search(problem, out + chunked(problem, missing), budget)


def refuted_lambda(
    problem: GmaxProblem,
    pi: np.ndarray,
    nodes: list[tuple],
    lo: float,
    hi: float,
    step: float,
    budget: TimeBudget,
) -> float:
    r"""The least :math:`\lambda` in (lo, hi] found by bisection at which the Lagrangian bound of every
    node in ``nodes`` (multipliers ``pi``, grid step ``step``) is at most ``EPS`` (module docstring,
    "Final bound at a time limit"); ``hi`` when none is found in time (no step starts unless the
    longest step so far fits in the time left). A node's
    ``pisum`` field must hold the sum of ``pi`` over its remaining requests."""
    if not nodes or budget.expired():
        return lo if not nodes else hi
    grid = SuffixBound(problem, hi, step)  # the cells do not depend on lambda
    fields = np.array([node[3:8] for node in nodes], dtype=np.float64)  # q, start, n, t, pisum
    q, cell = fields[:, 0].astype(np.int64), grid.cell(fields[:, 1])
    n, t, pisum = fields[:, 2], fields[:, 3], fields[:, 4]
    last = 0.0  # the longest step so far: no step starts unless that much time is left
    while hi - lo > BISECT_RTOL * hi and not budget.reserve(last).expired():
        tick = time.perf_counter()
        mid = (lo + hi) / 2
        suffix = SuffixBound(problem, mid, step)
        suffix.solve(pi)
        if np.all(n - mid * t + pisum + suffix.value[q, cell] <= EPS):
            hi = mid
        else:
            lo = mid
        last = max(last, time.perf_counter() - tick)
    return hi


@dataclass(kw_only=True)
class BnbResult:
    """Outcome of :func:`branch_and_bound`: ``OPTIMAL`` or ``TIME_LIMIT``, the best schedule, its
    G, a proven upper bound on G (``inf`` when the budget had expired before the first programme),
    and counters."""

    status: Status
    batches: list[list[int]]
    G: float
    bound: float
    nodes: int = 0
    info: dict = field(default_factory=dict)


def branch_and_bound(
    problem: GmaxProblem,
    incumbent: list[list[int]],
    budget: TimeBudget,
    t_lb: float,
    step: float = 0.005,
    cg_step: float = 0.01,
    cg_share: float = 0.3,
) -> BnbResult:
    """Maximise G exactly from an incumbent (module docstring).

    Parameters
    ----------
    incumbent
        A schedule with n > 0 (its G is :math:`\\lambda_0`).
    budget
        The search's time.
    t_lb
        A lower bound on t of every schedule (> 0), for the bound at the end.
    step, cg_step
        Grid step h of the suffix programme of the search and of the column generation, seconds
        (the multipliers of a coarse grid are as valid as any).
    cg_share
        Share of the remaining time the column generation may use.
    """
    begin = time.perf_counter()
    cg_budget = budget.share(cg_share)
    n0, t0 = g_core(problem, incumbent)
    lam0 = n0 / t0
    if budget.expired():  # not even one programme (0.7 s at N = 70) fits: no bound from here
        return BnbResult(status=Status.TIME_LIMIT, batches=incumbent, G=lam0, bound=math.inf, info={"wall": 0.0})
    pi, root, master, iters, support = lagrangian_multipliers(problem, lam0, [incumbent], cg_step, cg_budget)
    for pseudo in support[:REPAIRS]:  # the master's schedules, made real, as incumbents
        candidate = repair(problem, pseudo, budget)
        if g_value(*g_core(problem, candidate)) > g_value(*g_core(problem, incumbent)) * (1 + 1e-12):
            incumbent = candidate
    candidates = [pi]
    if g_value(*g_core(problem, incumbent)) > lam0:  # multipliers for the new lambda too (any are valid)
        lam0 = g_value(*g_core(problem, incumbent))
        again = lagrangian_multipliers(problem, lam0, [incumbent, *support], cg_step, cg_budget)
        candidates.append(again[0])
        master, iters = again[2], iters + again[3]
    cg_wall = time.perf_counter() - begin
    tick = time.perf_counter()
    suffix = SuffixBound(problem, lam0, step)
    bounds = [suffix.solve(candidate) for candidate in candidates]
    # time kept for the bisection of the final bound: BISECTIONS programmes like the ones just built
    reserve = BISECTIONS * (time.perf_counter() - tick) / len(candidates)
    pi = candidates[int(np.argmin(bounds))]
    root = suffix.solve(pi)
    search = Search(problem, suffix, incumbent, lam0 + max(root, 0.0) / t_lb)
    status, stack = search.run(budget.reserve(reserve))
    info = {
        "root_bound": root,
        "master": master,
        "cg_iterations": iters,
        "cg_wall": cg_wall,
        "nodes": search.nodes,
        "swapped_leaders": search.swapped,
        "remaining_pruned": search.restricted_pruned,
        "wall": time.perf_counter() - begin,
    }
    if status == Status.OPTIMAL:
        bound = search.lam + EPS / t_lb
    else:
        open_bound = max((lam0 + max(node[0], 0.0) / max(node[1], t_lb) for node in stack), default=0.0)
        refuted = refuted_lambda(problem, pi, stack, search.lam, open_bound, step, budget)
        info["refuted"] = refuted
        bound = max(search.lam, min(open_bound, refuted + EPS / t_lb))
    return BnbResult(status=status, batches=search.best, G=search.lam, bound=bound, nodes=search.nodes, info=info)

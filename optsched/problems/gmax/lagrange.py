r"""Exact G-maximisation by branch-and-bound over batch sequences with a Lagrangian bound.

This is the ``exact_method="bnb"`` of :func:`~.exact.solve_exact`. At the incumbent's
:math:`\lambda_0 = G_{inc}` it proves or refutes :math:`\max\, n - \lambda t \le 0` (Dinkelbach's
sub-problem) by a depth-first search over schedules built batch by batch, pruning with a bound that
sees batch starts and deadlines exactly where the slot MILP (:mod:`.slots`) only sees them through
big-M rows.

**Value of a prefix.** Batches :math:`B_1, B_2, \dots` in execution order, :math:`c_k` the number of
requests in :math:`B_1..B_k`, :math:`D_k = \max_{j \in B_k} E_j(|B_k|)`, start
:math:`S_k = \sum_{k' < k} D_{k'}`. Every request after position :math:`c_k` waits for :math:`B_k`, so

.. math:: t = \sum_k \Big( \sum_{j \in B_k} E_j(|B_k|) + (N - c_k) D_k \Big),
   \qquad n - \lambda t = \sum_k \Big( \sum_{j \in B_k} \big(x_j(S_k, |B_k|) - \lambda E_j(|B_k|)\big)
   - \lambda (N - c_k) D_k \Big)

with :math:`x_j(S, s) = [S \le \sigma_j(s)]`, :math:`\sigma_j(s)` the latest start at which j meets
its SLO in a batch of size s (:math:`SLO^{e2e}_j - E_j(s)` for an e2e task, :math:`SLO^{ttft}_j -
F_j(s)` for a chat task whose TPOT at size s meets its SLO, :math:`-\infty` otherwise). Each batch's
term depends only on its members, its start and :math:`c_k`.

**Lagrangian bound (pseudo-schedules).** A *pseudo-schedule* is a sequence of batches of distinct
requests whose sizes sum to the number of positions to fill, a request possibly occurring in several
batches or in none; its value is the sum above and :math:`a_j` counts the occurrences of j. For any
multipliers :math:`\pi \in \mathbb{R}^N` and any real completion of a prefix (remaining requests R,
every one exactly once, :math:`a_j = [j \in R]`),

.. math:: \text{value} = \text{value} - \sum_j \pi_j a_j + \sum_{j \in R} \pi_j
   \le \sum_{j \in R} \pi_j + V(q, S),

:math:`V(q, S)` the largest :math:`\text{value} - \pi \cdot a` of a pseudo-schedule filling the
positions after q and starting at S. :math:`V` is a dynamic programme over (q, S): a batch of size s
with *leader* :math:`\ell` (its last member in the order of :math:`(E_j(s), j)`) lasts
:math:`E_\ell(s)`, and its best other members are the s - 1 largest
:math:`u_j = x_j(S, s) - \lambda E_j(s) - \pi_j` among the requests before :math:`\ell` in that order.

**Grid.** S is continuous; the programme is computed on the grid :math:`g h` and is an upper bound
of the continuous one: :math:`V_h(q, g) \ge V(q, S)` for every :math:`S \in [g h, (g + 1) h)`.
Proof by induction on q (downwards): a batch starting at S starts no earlier than :math:`g h`, so
every member on time at S is on time at :math:`g h` (the x are non-increasing in S); it ends at
:math:`S + D \ge (g + \lfloor D / h \rfloor) h`, whose grid cell is no earlier than
:math:`g + \lfloor D / h \rfloor`, and :math:`V_h` is non-increasing in g by the same argument.
Cells at or after :math:`g_{max}`, with :math:`g_{max} h` past every finite :math:`\sigma`, all have
the same value (no x changes there), so the grid stops at :math:`g_{max}`. Hence, for a node
(prefix value :math:`A`, remaining R, q positions filled, next start S),

.. math:: \max_{\text{completions}}\ n - \lambda_0 t \le UB = A + \sum_{j \in R} \pi_j
   + V_h(q, \lfloor S / h \rfloor),

and at the root (:math:`R` = all, q = 0, S = 0) this is the Lagrangian dual bound, valid for every
:math:`\pi`. :math:`\pi` is chosen by column generation on the pseudo-schedules (the master LP
:math:`\max \sum_\rho \text{value}_\rho y_\rho` s.t. :math:`\sum_\rho a_{j\rho} y_\rho = 1`,
:math:`\sum_\rho y_\rho = 1`, its duals priced by the programme), with Wentges' smoothing; any
:math:`\pi` gives a valid bound, the column generation only makes it small. A column's value is
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

**Later incumbents.** When the search finds a schedule with a larger G the threshold rises to
:math:`\lambda > \lambda_0`; the bound is kept (no new programme) and adjusted: for every completion
:math:`n - \lambda t = (n - \lambda_0 t) - (\lambda - \lambda_0) t \le UB - (\lambda - \lambda_0)
T_{min}` with :math:`T_{min} = T_A + \sum_{j \in R} \min_b E_j(b)` (:math:`T_A` the prefix's part of t,
the sum above over its batches). A node is pruned when this is at most ``EPS`` (so an optimum is
proven up to ``EPS`` requests of :math:`n - \lambda t`, i.e. G up to ``EPS`` / t).

**Dominance.** Two nodes with the same remaining set R, starts :math:`S \le S'`, prefix counts
:math:`n \ge n'` and prefix times :math:`T \le T'`: every completion of the second is a completion of
the first at least as good for every :math:`\lambda \ge 0` (the completion's n part only falls with
a later start, its t part is the same), so the second is pruned. The first stays in the memo when a bound
then prunes it: all its completions are at most ``EPS``, so are the second's.

**Result.** Leaves are judged by :func:`~.problem.g_core`. When the search ends, every schedule
has :math:`G \le \lambda + EPS / t_{LB}`; when the time limit stops it, every schedule in an open
node has :math:`G \le \lambda_0 + \max(UB, 0) / T_{min}` and all others :math:`G \le \lambda`, so
the larger of the two is the proven bound.

**Bound over the remaining requests.** At every node it expands, the search also computes the
programme over pseudo-schedules of the node's remaining requests R only,
:math:`V_h^R(q, g)` (:meth:`SuffixBound.restricted`: members and leaders outside R excluded), and
prunes the node when :math:`A + \sum_{j \in R} \pi_j + V_h^R(q, \lfloor S / h \rfloor)`, adjusted as
below, is at most ``EPS``. Valid by the argument above: a real completion is a pseudo-schedule of
R with :math:`a_j = 1` on R, and the grid lemma holds for any step. :math:`V_h` alone lets the
suffix reuse the cheap requests the prefix has already served, which is most of its slack deep in
the tree; :math:`V_h^R` does not (N = 30 seed 3: 85,000 of 110,000 expanded nodes pruned by it). It
is computed on a coarse grid (``RESTRICTED_STEP``; any step is valid) by a compiled kernel.

**Swap rule.** A child batch B (size s, duration D) after the node's last batch :math:`B_k` (size
:math:`s_k`, duration :math:`D_k`, start :math:`S_k`) is not generated when :math:`D s_k < D_k s`
and every member of :math:`B_k` on time at :math:`S_k` is still on time at :math:`S_k + D`: the
prefix with B before :math:`B_k` has the same remaining set and next start, t smaller by
:math:`s D_k - s_k D` (the positions after both batches are the same; B's members wait
:math:`D_k` less, :math:`B_k`'s D more), and no fewer requests on time (x is non-increasing in the
start), so every completion of it is strictly better in t and no worse in n. The relation strictly
lowers t, so no two prefixes exclude each other (the comparison :math:`D s_k < D_k s` is made with
a relative margin of 1e-12 and the SLO test with ``SWAP_MARGIN``). Leaders are sorted by duration,
so the rule skips a prefix of each size's leaders whatever their other members.

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np
from numba import njit

from ...deadline import passed
from ...result import Status

from .problem import GmaxProblem, g_core, g_value
from .sa import chunked, local_search

__all__ = ["BnbResult", "SuffixBound", "branch_and_bound", "lagrangian_multipliers"]

#: Pruning tolerance on n - lambda t (requests).
EPS = 1e-9

#: Bisection steps of the final bound at a time limit (the search stops that many programmes early)
#: and their relative resolution.
BISECTIONS = 12
BISECT_RTOL = 1e-4

#: The column generation stops when its bound is within this of the master LP (requests).
CG_TOL = 1e-4

#: Pseudo-schedules of the master solution repaired into incumbents.
REPAIRS = 3

#: Grid step (seconds) of the bound over a node's remaining requests: at N = 30 steps of 0.05 to
#: 1 s prune the same nodes (85,258 to 86,315 on seed 3) and the cost falls with the cells.
RESTRICTED_STEP = 1.0

#: Seconds by which the swap rule keeps clear of an SLO (float rounding of starts).
SWAP_MARGIN = 1e-9

#: The grid never has more cells than this (the step grows instead).
MAX_CELLS = 40_000


def latest_starts(problem: GmaxProblem) -> np.ndarray:
    r"""``[j, s-1]``: :math:`\sigma_j(s)`, the latest batch start at which j meets its SLO in a batch of
    size s (``-inf``: never; ``inf``: always)."""
    e, f = problem.times.exec, problem.times.prefill
    out = np.full(e.shape, -np.inf)
    for j in range(problem.n_requests):
        for s in range(1, problem.max_batch_size + 1):
            if problem.e2e_task[j]:
                out[j, s - 1] = problem.slo_e2e[j] - e[j, s - 1]
            elif problem.meets_tpot(j, s):
                out[j, s - 1] = problem.slo_ttft[j] - f[j, s - 1]
    return out


def on_time(problem: GmaxProblem, j: int, start: float, s: int) -> bool:
    """Whether j meets its SLO in a batch of size s starting at ``start`` (g_core's comparison)."""
    col = s - 1
    if problem.e2e_task[j]:
        return bool(start + problem.times.exec[j, col] <= problem.slo_e2e[j])
    return bool(start + problem.times.prefill[j, col] <= problem.slo_ttft[j] and problem.meets_tpot(j, s))


class SuffixBound:
    r"""The grid programme :math:`V_h(q, g)` at :math:`\lambda` for multipliers :math:`\pi` (module
    docstring). Rows of the size-s tables follow the order of :math:`(E_j(s), j)`."""

    def __init__(self, problem: GmaxProblem, lam: float, step: float):
        self.problem, self.lam = problem, lam
        nreq, bmax = problem.n_requests, problem.max_batch_size
        e = problem.times.exec
        self.sigma = latest_starts(problem)
        finite = self.sigma[np.isfinite(self.sigma)]
        top = float(finite.max()) if finite.size else 0.0
        self.step = max(step, (max(top, 0.0) + 1.0) / MAX_CELLS)
        self.cells = int(math.floor(max(top, 0.0) / self.step)) + 2  # cell cells-1 lies past every finite sigma
        grid = np.arange(self.cells) * self.step
        self.order = [np.array(sorted(range(nreq), key=lambda j, s=s: (e[j, s - 1], j))) for s in range(1, bmax + 1)]
        self.rank = [np.argsort(o) for o in self.order]  # rank[s-1][j]: row of j in size-s order
        self.dur = [e[o, s - 1] for s, o in zip(range(1, bmax + 1), self.order)]
        self.ontime = [(grid[None, :] <= self.sigma[o, s - 1][:, None]).astype(float) for s, o in zip(range(1, bmax + 1), self.order)]
        self.shift = [np.minimum(np.arange(self.cells)[None, :] + self.steps(d)[:, None], self.cells - 1) for d in self.dur]
        self.pi = np.zeros(nreq)
        self.value = np.zeros((nreq + 1, self.cells))
        self._packed = None

    def steps(self, durations: np.ndarray) -> np.ndarray:
        r""":math:`\lfloor D / h \rfloor`, never rounded up."""
        return np.maximum(np.floor(durations / self.step * (1 - 1e-12)).astype(int), 0)

    def cell(self, start: float | np.ndarray) -> int | np.ndarray:
        """The grid cell of a start, or the cells of an array of starts (never a later one)."""
        cells = np.minimum(np.maximum(np.floor(np.asarray(start) / self.step * (1 - 1e-12)).astype(int), 0), self.cells - 1)
        return cells if cells.ndim else int(cells)

    def member_values(self, s: int) -> np.ndarray:
        r"""``[row, g]``: :math:`u_j = x_j(g h, s) - \lambda E_j(s) - \pi_j`, rows in size-s order."""
        o = self.order[s - 1]
        return self.ontime[s - 1] - (self.lam * self.dur[s - 1] + self.pi[o])[:, None]

    def grid_value(self, batches: list[list[int]]) -> tuple[float, np.ndarray]:
        r"""(value, occurrence counts :math:`a`) of a pseudo-schedule as the programme counts it: each
        batch starts at its grid cell (the previous cell advanced by :math:`\lfloor D / h \rfloor`),
        members on time at that cell (so never below the true value, by the grid lemma)."""
        nreq = self.problem.n_requests
        g, q, val = 0, 0, 0.0
        counts = np.zeros(nreq)
        for batch in batches:
            s = len(batch)
            rows = self.rank[s - 1][batch]
            lead = int(rows.max())
            q += s
            val += float(self.ontime[s - 1][rows, g].sum() - self.lam * self.dur[s - 1][rows].sum())
            val -= self.lam * (nreq - q) * self.dur[s - 1][lead]
            counts[batch] += 1
            g = min(g + int(self.steps(self.dur[s - 1][lead : lead + 1])[0]), self.cells - 1)
        return val, counts

    def solve(self, pi: np.ndarray) -> float:
        r"""Compute :math:`V_h` for :math:`\pi`; returns the root bound :math:`\sum \pi + V_h(0, 0)`."""
        self.pi = np.asarray(pi, float)
        best, self.value = self._programme(np.ones(self.problem.n_requests, dtype=np.uint8), 0, 0)
        self.batch = list(best)
        return float(self.pi.sum() + self.value[0, 0])

    def restricted(self, member: np.ndarray, q: int, start: float) -> float:
        r""":math:`V_h(q, \lfloor S / h \rfloor)` over pseudo-schedules of the remaining requests only
        (``member``: 0/1 per request): at most the programme's value, and still a bound of every
        completion."""
        return float(self._programme(member, int(q), int(self.cell(start)))[1][0, 0])

    def _programme(self, member: np.ndarray, q: int, cell: int) -> tuple[np.ndarray, np.ndarray]:
        r""":func:`_programme` on this grid and :math:`\pi` (the size tables stacked once)."""
        if self._packed is None:
            self._packed = (np.stack(self.ontime), np.stack(self.dur), np.stack(self.order).astype(np.int64),
                            np.stack(self.shift).astype(np.int64))
        return _programme(*self._packed, self.pi, member, float(self.lam), q, cell)

    def totals(self, q: int, s: int, cell: int | None = None) -> np.ndarray:
        """``[row, g]`` (or ``[row]`` at one cell): the value of a size-s batch led by that row at
        position q, plus :math:`V_h` after it."""
        weight = self.lam * (self.problem.n_requests - q - s) * self.dur[s - 1]
        if cell is None:
            return self.batch[s - 1] - weight[:, None] + self.value[q + s][self.shift[s - 1]]
        return self.batch[s - 1][:, cell] - weight + self.value[q + s][self.shift[s - 1][:, cell]]

    def paths(self, k: int) -> list[list[list[int]]]:
        """Pseudo-schedules of the last :meth:`solve`: for each of the k best first batches at
        (0, 0) (by their total), that batch and then the programme's best path; the first attains
        :math:`V_h(0, 0)`."""
        nreq, bmax = self.problem.n_requests, self.problem.max_batch_size
        firsts = sorted(((float(total), s, row) for s in range(1, min(bmax, nreq) + 1)
                         for row, total in enumerate(self.totals(0, s, 0))), reverse=True)[:k]
        return [self._path(s, row) for _, s, row in firsts]

    def _path(self, s: int, row: int) -> list[list[int]]:
        """The first batch (size s, leader ``row``) at (0, 0), then the best path after it."""
        nreq = self.problem.n_requests
        q, g, out = 0, 0, []
        while True:
            o = self.order[s - 1]
            vals = self.member_values(s)[:row, g]
            out.append([int(o[row])] + [int(o[r]) for r in np.argsort(-vals, kind="stable")[: s - 1]])
            g = min(g + int(self.steps(self.dur[s - 1][row : row + 1])[0]), self.cells - 1)
            q += s
            if q == nreq:
                return out
            best = [self.totals(q, s, g) for s in range(1, min(self.problem.max_batch_size, nreq - q) + 1)]
            s = 1 + max(range(len(best)), key=lambda k: best[k].max())
            row = int(best[s - 1].argmax())


def lagrangian_multipliers(
    problem: GmaxProblem, lam: float, start: list[list[list[int]]], step: float, deadline: float | None,
    max_iter: int = 400, smoothing: float = 0.7, per_pricing: int = 10,
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
        master.addCol(-val, 0.0, highspy.kHighsInf, len(rows) + 1, np.append(rows, nreq).astype(np.int32),
                      np.append(counts[rows], 1.0))
        return True

    for batches in start:
        add(batches)
    best_pi, best, lp, it = np.zeros(nreq), math.inf, -math.inf, 0
    for it in range(1, max_iter + 1):
        master.run()
        lp = -master.getInfo().objective_function_value
        duals = np.asarray(master.getSolution().row_dual)
        lp_pi = -duals[:nreq]
        pi = lp_pi if not math.isfinite(best) else smoothing * best_pi + (1 - smoothing) * lp_pi
        bound = suffix.solve(pi)
        if bound < best:
            best, best_pi = bound, pi.copy()
        if best - lp <= CG_TOL or passed(deadline):
            break
        if not sum(add(batches) for batches in suffix.paths(per_pricing)):
            suffix.solve(lp_pi)
            if not sum(add(batches) for batches in suffix.paths(per_pricing)):
                break
    weights = np.asarray(master.getSolution().col_value)
    support = [columns[k] for k in np.argsort(-weights) if weights[k] > 1e-6]
    return best_pi, best, lp, it, support


def repair(problem: GmaxProblem, batches: list[list[int]], deadline: float | None) -> list[list[int]]:
    """A real schedule from a pseudo-schedule: later occurrences of a request are dropped (a batch
    over the memory capacity, which the pricing ignores, is cut by :func:`~.sa.chunked`), missing
    requests appended in the order of their shortest time, then :func:`~.sa.local_search` until
    ``deadline``."""
    seen: set[int] = set()
    out = []
    for batch in batches:
        kept = [j for j in batch if j not in seen]
        seen.update(kept)
        out.extend(chunked(problem, kept))
    missing = sorted(set(range(problem.n_requests)) - seen, key=lambda j: problem.times.exec[j].min())
    return local_search(problem, out + chunked(problem, missing), deadline)


def refuted_lambda(
    problem: GmaxProblem, pi: np.ndarray, nodes: list[tuple], lo: float, hi: float, step: float,
    deadline: float | None,
) -> float:
    r"""The least :math:`\lambda` in (lo, hi] found by bisection at which the Lagrangian bound of every
    node in ``nodes`` (multipliers ``pi``, grid step ``step``) is at most ``EPS`` (module docstring,
    "Final bound at a time limit"); ``hi`` when none is found in time (no step starts unless the
    longest step so far fits before the deadline). A node's
    ``pisum`` field must hold the sum of ``pi`` over its remaining requests."""
    if not nodes:
        return lo
    grid = SuffixBound(problem, hi, step)  # the cells do not depend on lambda
    q, cell, n, t, pisum = (np.array(col) for col in zip(*[(node[3], grid.cell(node[4]), node[5], node[6], node[7])
                                                            for node in nodes]))
    last = 0.0  # the longest step so far: no step starts unless that much time is left
    while hi - lo > BISECT_RTOL * hi and not passed(None if deadline is None else deadline - last):
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
    G, a proven upper bound on G (``inf`` when the deadline had passed before the first programme),
    and counters."""

    status: Status
    batches: list[list[int]]
    G: float
    bound: float
    nodes: int = 0
    info: dict = field(default_factory=dict)


class _Search:
    """The depth-first search of :func:`branch_and_bound` (module docstring)."""

    def __init__(self, problem: GmaxProblem, suffix: SuffixBound, batches: list[list[int]], lam_hi: float):
        self.p, self.v, self.lam_hi = problem, suffix, lam_hi
        self.lam0 = suffix.lam
        n, t = g_core(problem, batches)
        self.best, self.lam = batches, n / t
        self.emin = problem.times.exec.min(axis=1)
        self.e2e_task = np.array(problem.e2e_task, dtype=bool)
        self.memo: dict[int, list[tuple[float, int, float]]] = {}
        self.nodes = 0
        self.swapped = 0
        self.restricted_pruned = 0
        self.remaining_bound = SuffixBound(problem, suffix.lam, RESTRICTED_STEP)
        self.remaining_bound.pi = suffix.pi
        t = problem.times
        self.tables = (np.stack(suffix.order).astype(np.int64), t.exec, t.prefill, self.e2e_task, problem.slo_e2e,
                       problem.slo_ttft, t.tpot <= problem.slo_tpot[:, None], suffix.pi, self.emin,
                       np.asarray(problem.need, dtype=float),
                       math.inf if problem.capacity is None else float(problem.capacity))

    def dominated(self, rest: int, start: float, n: int, t: float) -> bool:
        entries = self.memo.setdefault(rest, [])
        lo, hi = self.lam, self.lam_hi
        for s2, n2, t2 in entries:
            if s2 <= start and n2 - n >= lo * (t2 - t) and n2 - n >= hi * (t2 - t):
                return True
        entries.append((start, n, t))
        return False

    def children(self, node: tuple, member: np.ndarray) -> list[tuple]:
        """The children of a node whose adjusted bound exceeds EPS, as nodes (bound, tmin, ...);
        ``member``: :meth:`member` of the node's remaining requests."""
        _, _, rest, q, start, n_acc, t_acc, pisum, emin_sum, sched, last_start = node
        last = np.full(self.p.max_batch_size, -1, dtype=np.int64)
        if sched is not None:
            last[: len(sched[0])] = sched[0]
        members, sizes, fields = _node_children(  # scalars cast: one compiled signature
            self.tables, self.v.value, float(self.v.step), member, last, float(last_start), int(q),
            float(start), float(n_acc), float(t_acc), float(pisum), float(emin_sum), float(self.lam0),
            float(self.lam - self.lam0))
        self.swapped += int(fields[-1, 0])
        out = []
        for batch, size, (ub, tmin, child_start, child_n, child_t, child_pi, child_emin) in zip(
                members.tolist(), sizes.tolist(), fields[:-1].tolist()):
            batch = batch[:size]
            mask = sum(1 << j for j in batch)
            out.append((ub, tmin, rest & ~mask, q + size, child_start, child_n, child_t, child_pi, child_emin,
                        (batch, sched), start))
        return out

    def member(self, rest: int) -> np.ndarray:
        """0/1 per request: whether it is in the bit mask ``rest``."""
        nreq = self.p.n_requests
        return np.unpackbits(np.frombuffer(rest.to_bytes(nreq // 8 + 1, "little"), np.uint8), bitorder="little")[:nreq]

    def adjusted(self, node: tuple) -> float:
        return node[0] - (self.lam - self.lam0) * node[1]

    def leaf(self, sched) -> None:
        batches = []
        while sched is not None:
            batches.append(sched[0])
            sched = sched[1]
        batches.reverse()
        n, t = g_core(self.p, batches)
        if g_value(n, t) > self.lam * (1 + 1e-12):
            self.best, self.lam = batches, n / t

    def run(self, deadline: float | None) -> tuple[Status, list[tuple]]:
        p = self.p
        full = (1 << p.n_requests) - 1
        root_ub = float(self.v.pi.sum() + self.v.value[0, 0])
        stack = [(root_ub, float(self.emin.sum()), full, 0, 0.0, 0, 0.0, float(self.v.pi.sum()), float(self.emin.sum()), None, 0.0)]
        while stack:
            if self.nodes % 256 == 0 and passed(deadline):
                return Status.TIME_LIMIT, stack
            node = stack.pop()
            self.nodes += 1
            if self.adjusted(node) <= EPS:
                continue
            rest = node[2]
            if rest == 0:
                self.leaf(node[9])
                continue
            if self.dominated(rest, node[4], node[5], node[6]):
                continue
            member = self.member(rest)
            ub = node[5] - self.lam0 * node[6] + node[7] + self.remaining_bound.restricted(member, node[3], node[4])
            if ub - (self.lam - self.lam0) * node[1] <= EPS:  # the bound over the remaining requests
                self.restricted_pruned += 1
                continue
            kids = self.children(node, member)
            kids.sort(key=lambda k: k[0] - (self.lam - self.lam0) * k[1])
            stack.extend(kids)
        return Status.OPTIMAL, []


def branch_and_bound(
    problem: GmaxProblem, incumbent: list[list[int]], deadline: float | None, t_lb: float,
    step: float = 0.005, cg_step: float = 0.01, cg_share: float = 0.3,
) -> BnbResult:
    """Maximise G exactly from an incumbent (module docstring).

    Parameters
    ----------
    incumbent
        A schedule with n > 0 (its G is :math:`\\lambda_0`).
    deadline
        ``time.perf_counter()`` time by which to stop (None: none).
    t_lb
        A lower bound on t of every schedule (> 0), for the bound at the end.
    step, cg_step
        Grid step h of the suffix programme of the search and of the column generation, seconds
        (the multipliers of a coarse grid are as valid as any).
    cg_share
        Share of the remaining time the column generation may use.
    """
    begin = time.perf_counter()
    n0, t0 = g_core(problem, incumbent)
    lam0 = n0 / t0
    if passed(deadline):  # not even one programme (0.7 s at N = 70) fits: no bound from here
        return BnbResult(status=Status.TIME_LIMIT, batches=incumbent, G=lam0, bound=math.inf, info={"wall": 0.0})
    cg_deadline = None if deadline is None else begin + cg_share * (deadline - begin)
    pi, root, master, iters, support = lagrangian_multipliers(problem, lam0, [incumbent], cg_step, cg_deadline)
    for pseudo in support[:REPAIRS]:  # the master's schedules, made real, as incumbents
        candidate = repair(problem, pseudo, deadline)
        if g_value(*g_core(problem, candidate)) > g_value(*g_core(problem, incumbent)) * (1 + 1e-12):
            incumbent = candidate
    candidates = [pi]
    if g_value(*g_core(problem, incumbent)) > lam0:  # multipliers for the new lambda too (any are valid)
        lam0 = g_value(*g_core(problem, incumbent))
        again = lagrangian_multipliers(problem, lam0, [incumbent, *support], cg_step, cg_deadline)
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
    search = _Search(problem, suffix, incumbent, lam0 + max(root, 0.0) / t_lb)
    status, stack = search.run(None if deadline is None else deadline - reserve)
    info = {"root_bound": root, "master": master, "cg_iterations": iters, "cg_wall": cg_wall,
            "nodes": search.nodes, "swapped_leaders": search.swapped, "remaining_pruned": search.restricted_pruned,
            "wall": time.perf_counter() - begin}
    if status == Status.OPTIMAL:
        bound = search.lam + EPS / t_lb
    else:
        open_bound = max((lam0 + max(node[0], 0.0) / max(node[1], t_lb) for node in stack), default=0.0)
        refuted = refuted_lambda(problem, pi, stack, search.lam, open_bound, step, deadline)
        info["refuted"] = refuted
        bound = max(search.lam, min(open_bound, refuted + EPS / t_lb))
    return BnbResult(status=status, batches=search.best, G=search.lam, bound=bound, nodes=search.nodes, info=info)


@njit(cache=True)
def _programme(ontime, dur, order, shift, pi, member, lam, q, cell0):  # pragma: no cover - compiled
    """The grid programme :math:`V_h` (module docstring) over pseudo-schedules of the requests with
    ``member`` 1, for the positions after q and the cells from ``cell0`` on. Returns (``[s-1, row,
    g]`` the best batch value of size s led by that row, its s - 1 best predecessors among the
    members; ``[k, g]`` the value after q + k positions), rows and cells counted from the first
    member and ``cell0``; with every request a member, q = 0 and cell0 = 0 these are the tables of
    :meth:`SuffixBound.solve`."""
    nsize, nreq, cells = ontime.shape
    width = cells - cell0
    left = nreq - q
    smax = min(nsize, left)
    best = np.full((smax, left, width), -np.inf)
    rowdur = np.zeros((smax, left))
    rowshift = np.zeros((smax, left, width), dtype=np.int64)
    for si in range(smax):
        top = np.full((si + 1, width), -np.inf)
        r = 0
        for row in range(nreq):
            j = order[si, row]
            if member[j] == 0:
                continue
            rowdur[si, r] = dur[si, row]
            for g in range(width):
                val = ontime[si, row, cell0 + g] - lam * dur[si, row] - pi[j]
                tot = val
                for k in range(si):
                    tot += top[k, g]
                best[si, r, g] = tot
                rowshift[si, r, g] = min(shift[si, row, cell0 + g] - cell0, width - 1)
                cur = val
                for k in range(si):
                    if cur > top[k, g]:
                        cur, top[k, g] = top[k, g], cur
            r += 1
    value = np.full((left + 1, width), -np.inf)
    value[left, :] = 0.0
    for k in range(left - 1, -1, -1):
        for si in range(min(smax, left - k)):
            s = si + 1
            for r in range(left):
                w = lam * (left - k - s) * rowdur[si, r]
                for g in range(width):
                    cand = best[si, r, g] - w + value[k + s, rowshift[si, r, g]]
                    if cand > value[k, g]:
                        value[k, g] = cand
    return best, value


@njit(cache=True)
def _on_time(tables, j, start, s):  # pragma: no cover - compiled
    """:func:`on_time` (the same comparisons) from the search's tables."""
    _, exec_, prefill, e2e, slo_e2e, slo_ttft, tpot_ok, _, _, _, _ = tables
    if e2e[j]:
        return start + exec_[j, s - 1] <= slo_e2e[j]
    return start + prefill[j, s - 1] <= slo_ttft[j] and tpot_ok[j, s - 1]


@njit(cache=True)
def _cell(start, step, cells):  # pragma: no cover - compiled
    """:meth:`SuffixBound.cell` (the same arithmetic)."""
    return min(max(int(np.floor(start / step * (1 - 1e-12))), 0), cells - 1)


@njit(cache=True)
def _node_children(tables, value, step, member, last, last_start, q, start, n_acc, t_acc, pisum, emin_sum,
                   lam0, delta):  # pragma: no cover - compiled
    """The children of a node (``_Search.children``): per batch size s, the remaining rows in size
    order, their member values u, and every batch of a leader and s - 1 rows before it whose bound
    exceeds EPS and which fits the capacity. The s - 1 rows are enumerated in lexicographic order of
    the predecessors sorted by (-u, request), a level stopping at the first head whose sum with the
    next rows cannot beat what is left of the threshold (later heads are no larger); leaders that
    the swap rule settles are skipped. Returns (members padded
    with -1, sizes, rows of (bound, tmin, start, n, t, pisum, emin_sum)) plus a last row whose first
    field counts the skipped leaders."""
    order, exec_, prefill, e2e, slo_e2e, slo_ttft, _, pi, emin, need, capacity = tables
    nreq, bmax = exec_.shape
    cells = value.shape[1]
    # swap rule: the node's last batch (size sk, duration dk, start last_start)
    sk = 0
    dk = 0.0
    delay = np.inf
    for j in last:
        if j >= 0:
            sk += 1
    for j in last:
        if j >= 0:
            dk = max(dk, exec_[j, sk - 1])
            if _on_time(tables, j, last_start, sk):
                if e2e[j]:
                    own, slo = exec_[j, sk - 1], slo_e2e[j]
                else:
                    own, slo = prefill[j, sk - 1], slo_ttft[j]
                delay = min(delay, (slo - own - last_start) - SWAP_MARGIN)
    left_total = 0
    for j in range(nreq):
        left_total += member[j]
    cap = 16
    members = np.full((cap, bmax), -1, np.int64)
    sizes = np.empty(cap, np.int64)
    fields = np.empty((cap + 1, 7))
    count = 0
    skipped = 0
    idx = np.empty(nreq, np.int64)
    u = np.empty(nreq)
    gain = np.empty(nreq)
    fixed = np.empty(nreq)
    tail = np.empty(nreq)
    dur = np.empty(nreq)
    preds = np.empty(nreq, np.int64)
    pos = np.empty(bmax, np.int64)
    rem = np.empty(bmax + 1)
    for s in range(1, min(bmax, left_total) + 1):
        col = s - 1
        after = nreq - q - s
        m = 0
        for row in range(nreq):
            j = order[col, row]
            if member[j]:
                idx[m] = j
                dur[m] = exec_[j, col]
                gain[m] = 1.0 if _on_time(tables, j, start, s) else 0.0
                u[m] = gain[m] - lam0 * dur[m] - pi[j] - delta * (dur[m] - emin[j])
                tail[m] = value[q + s, _cell(start + dur[m], step, cells)]
                fixed[m] = (n_acc - lam0 * t_acc + pisum + u[m] - lam0 * after * dur[m] + tail[m]
                            - delta * (t_acc + after * dur[m] + emin_sum))
                m += 1
        first = 0
        if sk > 0:  # leaders (sorted by duration) shorter than s dk / sk and within the delay
            limit = dk / sk * s * (1 - 1e-12)
            while first < m and dur[first] < limit and dur[first] <= delay:
                first += 1
        skipped += first
        k = s - 1
        npred = 0
        for li in range(m):
            if li >= first and li >= k:
                depth = 0
                pos[0] = 0
                rem[0] = EPS - fixed[li]
                while depth >= 0:
                    at = pos[depth]
                    need_left = k - depth
                    ok = at <= npred - need_left
                    head = 0.0
                    if ok and need_left == 0:
                        ok = rem[depth] < 0
                    elif ok:
                        head = u[preds[at]]
                        rest_sum = 0.0
                        for r in range(at + 1, at + need_left):
                            rest_sum += u[preds[r]]
                        ok = head + rest_sum > rem[depth]
                    if not ok:  # later heads are no larger
                        depth -= 1
                        if depth >= 0:
                            pos[depth] += 1
                        continue
                    if need_left <= 1:  # a batch: the leader and the rows chosen so far (and this head)
                        total = need[idx[li]]
                        for d in range(k):
                            total += need[idx[preds[pos[d]]]]
                        if total <= capacity:
                            if count == cap:
                                cap *= 2
                                members = np.concatenate((members, np.full((cap - count, bmax), -1, np.int64)))
                                sizes = np.concatenate((sizes, np.empty(cap - count, np.int64)))
                                fields = np.concatenate((fields, np.empty((cap - count, 7))))
                            members[count, 0] = idx[li]
                            won = gain[li]
                            time_sum = dur[li]
                            emin_used = emin[idx[li]]
                            pi_used = pi[idx[li]]
                            for d in range(k):
                                r = preds[pos[d]]
                                members[count, d + 1] = idx[r]
                                won += gain[r]
                                time_sum += dur[r]
                                emin_used += emin[idx[r]]
                                pi_used += pi[idx[r]]
                            child_n = n_acc + won
                            child_t = t_acc + time_sum + after * dur[li]
                            child_pi = pisum - pi_used
                            child_emin = emin_sum - emin_used
                            sizes[count] = s
                            fields[count, 0] = child_n - lam0 * child_t + child_pi + tail[li]
                            fields[count, 1] = child_t + child_emin
                            fields[count, 2] = start + dur[li]
                            fields[count, 3] = child_n
                            fields[count, 4] = child_t
                            fields[count, 5] = child_pi
                            fields[count, 6] = child_emin
                            count += 1
                        if need_left == 0:
                            depth = -1  # the size-1 batch is the only one
                        else:
                            pos[depth] += 1
                    else:
                        rem[depth + 1] = rem[depth] - head
                        pos[depth + 1] = at + 1
                        depth += 1
            at = npred  # insert li into the predecessors, sorted by (-u, request)
            while at > 0 and (u[preds[at - 1]] < u[li] or (u[preds[at - 1]] == u[li] and idx[preds[at - 1]] > idx[li])):
                preds[at] = preds[at - 1]
                at -= 1
            preds[at] = li
            npred += 1
    fields[count, 0] = skipped
    return members[:count], sizes[:count], fields[: count + 1]

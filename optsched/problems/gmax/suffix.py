r"""The Lagrangian bound of the exact G-maximisation: a grid programme over pseudo-schedules.

Used by the branch-and-bound of :mod:`.lagrange` (its search in :mod:`.bnb`).

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
:math:`\pi`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .problem import GmaxProblem

__all__ = ["MAX_CELLS", "SuffixBound", "grid_programme", "latest_starts", "on_time"]

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
        self.ontime = [
            (grid[None, :] <= self.sigma[o, s - 1][:, None]).astype(float)
            for s, o in zip(range(1, bmax + 1), self.order)
        ]
        self.shift = [
            np.minimum(np.arange(self.cells)[None, :] + self.steps(d)[:, None], self.cells - 1) for d in self.dur
        ]
        self.pi = np.zeros(nreq)
        self.value = np.zeros((nreq + 1, self.cells))
        self._packed = None

    def steps(self, durations: np.ndarray) -> np.ndarray:
        r""":math:`\lfloor D / h \rfloor`, never rounded up."""
        return np.maximum(np.floor(durations / self.step * (1 - 1e-12)).astype(int), 0)

    def cell(self, start: float | np.ndarray) -> int | np.ndarray:
        """The grid cell of a start, or the cells of an array of starts (never a later one)."""
        cells = np.minimum(
            np.maximum(np.floor(np.asarray(start) / self.step * (1 - 1e-12)).astype(int), 0), self.cells - 1
        )
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
        r""":func:`grid_programme` on this grid and :math:`\pi` (the size tables stacked once)."""
        if self._packed is None:
            self._packed = (
                np.stack(self.ontime),
                np.stack(self.dur),
                np.stack(self.order).astype(np.int64),
                np.stack(self.shift).astype(np.int64),
            )
        return grid_programme(*self._packed, self.pi, member, float(self.lam), q, cell)

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
        firsts = sorted(
            (
                (float(total), s, row)
                for s in range(1, min(bmax, nreq) + 1)
                for row, total in enumerate(self.totals(0, s, 0))
            ),
            reverse=True,
        )[:k]
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


@njit(cache=True)
def grid_programme(ontime, dur, order, shift, pi, member, lam, q, cell0):  # pragma: no cover - compiled
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

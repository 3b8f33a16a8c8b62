r"""Data of the batch-end-position model of exact G-maximisation and its result type.

A slot model (docs/gmax.md, "The MILP") charges waiting time through big-M products
:math:`St_k |B_k|`, whose LP relaxation is empty; this model indexes a batch by the *position of its
last member* in the execution order, which makes the waiting cost linear with constant weights
(every request after position c waits for the batch that ends at c):

- indices: requests :math:`i`, end positions :math:`c \in \{1..N\}`, sizes :math:`s \in \{1..B_{max}\}`,
  :math:`s \le c`;
- binaries :math:`w_{ics}` (i is in the batch of size s that ends at position c),
  :math:`z_{cs}` (such a batch exists), :math:`v_{ics}` (i is there and meets its SLO);
  continuous :math:`D_c \ge 0` (duration of the batch ending at c, 0 if none);
- each request once: :math:`\sum_{c,s} w_{ics} = 1`; batch sizes: :math:`\sum_i w_{ics} = s z_{cs}`;
  the batches tile the positions: :math:`\sum_{(c,s): c-s < p \le c} z_{cs} = 1` for every p;
- memory (Eq. 20): :math:`\sum_i r_i w_{ics} \le C z_{cs}`;
- slowest member (Eq. 11 fixed): :math:`D_c = \sum_{i,s} E_i(s) l_{ics}` with the leader binaries
  :math:`l_{ics}` (i is the member of the batch that comes last in the order of :math:`E(s)`; every
  member is no later in that order, and the leader's batch holds s members no later than it), and the valid cut
  :math:`D_c \ge \sum_s \frac1s \sum_i E_i(s) w_{ics}` (a batch's longest member is at least as long as its mean
  member; at most one batch ends at c);
- **leader count cut**: with :math:`\succeq r` the requests at 0-based rank r or later in the order of
  :math:`E(s)`, :math:`\sum_{j \succeq r} w_{jcs} \le \min(s, N - r) \sum_{j \succeq r} l_{jcs}`.
  Proof: if the batch (c, s) exists and has a member at rank >= r, its leader (the member of
  highest rank) is at rank >= r, so the right-hand sum is 1, and the batch holds at most s members,
  at most N - r of them at rank >= r; otherwise both sides are 0. It is the single-batch hull
  fact :math:`P(\max \ge E_{(r)}) \ge \sum_{j \succeq r} w_j / s` that the leader rows
  (:math:`w_j \le \sum_{k \succeq j} l_k`, i.e. :math:`P(\max \ge E_{(r)}) \ge \max_j w_j`) miss:
  the LP may spread long requests thinly over many batches. On N = 30 (seeds 0-4) it lowers the
  root LP bound of the first Dinkelbach step from 2.4-3.2 to 1.9-2.5 requests;
- **t (Eqs. 3, 4, 11)** :math:`= \sum_{i,c,s} E_i(s) w_{ics} + \sum_c (N - c) D_c`;
- the batch ending at c with size s starts at :math:`St_{cs} = \sum_{c' \le c-s} D_{c'}`; SLO
  (Eq. 7): :math:`v_{ics} \le w_{ics}` and :math:`St_{cs} + T_i(s) \le SLO_i + M_{ics}(1 - v_{ics})`
  with :math:`T = E, SLO = SLO^{e2e}` (h=1) or :math:`T = F, SLO = SLO^{ttft}` (h=0); :math:`v_{ics}`
  is absent where it can never be 1: TPOT over its SLO at size s (Eq. 9/19), or
  :math:`\underline{St}_i(c-s) + T_i(s) > SLO_i` with :math:`\underline{St}_i(p)` the earliest
  start after p requests other than i (below);
- :math:`n = \sum_{i,c,s} v_{ics}`.

**Earliest start (group-max bound).** Let :math:`e_{(1)} \le e_{(2)} \le \dots` be the sorted
:math:`e_j = \min_b E_j(b)` of a set of requests. Then
:math:`\underline{St}(p) = \sum_{j \ge 0,\ p - jB_{max} \ge 1} e_{(p - jB_{max})}` is a lower bound
on the total duration of any batches (of size :math:`\le B_{max}`) holding p of those requests.
Proof: the longest of those batches lasts at least the largest of the p members' :math:`e_j`, which
is :math:`\ge e_{(p)}` (the p-th smallest of a subset is at least the p-th smallest of the whole
set); removing that batch removes at most :math:`B_{max}` members, and by induction the others last
at least :math:`\underline{St}(p - B_{max})`. A batch preceded by p requests therefore starts no
earlier than :math:`\underline{St}(p)`; for request i the bound is taken over the requests other than
i (:math:`\underline{St}_i`), since i does not precede itself. It also bounds t: the request at
position p (0-based) of the execution order has at least :math:`p - B_{max} + 1` requests in earlier
batches, so :math:`t \ge \sum_j e_j + \sum_{p} \underline{St}((p - B_{max} + 1)^+)`.

**Time-budget bound on starts.** In a schedule with :math:`t \le t_{max}`, the :math:`N - q`
requests at positions :math:`p \ge q` (0-based) wait at least :math:`St_q` plus the least duration
of the batches between (at least :math:`p - q - B_{max} + 1` requests), and those at :math:`p < q`
at least :math:`\underline{St}((p - B_{max} + 1)^+)`; hence
:math:`St_q \le \overline{St}_{t_{max}}(q) = (t_{max} - \sum_j e_j - \sum_{p<q} \underline{St}((p - B_{max}
+ 1)^+) - \sum_{p \ge q} \underline{St}((p - q - B_{max} + 1)^+)) / (N - q)`. Dinkelbach's
sub-problem only needs the schedules with :math:`n - \lambda t \ge 0` (the incumbent has 0), so it
adds that constraint and uses :math:`t_{max} = \bar n / \lambda` (:math:`\bar n` the requests able
to meet their SLO at all): :math:`St_q \le \overline{St}_{t_{max}}(q)` and the big-M below shrink
from the sum of the longest executions to a few seconds on the benchmark instances.

Big-M: :math:`M_{ics} = \overline{St}(c-s) + T_i(s) - SLO_i` with :math:`\overline{St}(p)` the sum of
the p largest :math:`\max_b E_j(b)`, or :math:`\overline{St}_{t_{max}}(c-s)` where smaller. Objectives (docs/gmax.md,
"Ratio objective"): Dinkelbach's :math:`\max\, n - \lambda t` and the epsilon-constraint's :math:`\min t` s.t.
:math:`n \ge n_0`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ...budget import TimeBudget
from ...result import Status
from .problem import GmaxProblem

__all__ = ["SlotData", "SubResult", "SlotBackend", "group_max_bound"]


def group_max_bound(lengths: np.ndarray, bmax: int) -> np.ndarray:
    """``[p]``: the least total duration of batches of size <= ``bmax`` holding p of the requests
    whose shortest execution times are ``lengths`` (p = 0..len; module docstring, group-max bound).
    """
    srt = np.sort(np.asarray(lengths, float))
    out = np.zeros(len(srt) + 1)
    for p in range(1, len(srt) + 1):
        out[p] = srt[p - 1] + (out[p - bmax] if p > bmax else 0.0)
    return out


@dataclass(frozen=True)
class SlotData:
    """Preprocessed data of the slot model (seconds).

    Attributes
    ----------
    problem
        The instance.
    start_ub, start_lb
        ``[p]``: upper and lower bounds on the start of a batch preceded by p requests.
    can_meet
        ``can_meet[i, s-1]``: whether i can meet its SLO at all in a batch of size s (at start 0).
    start_lb_excl
        ``[i, p]``: the earliest start of a batch preceded by p requests other than i.
    """

    problem: GmaxProblem
    start_ub: np.ndarray
    start_lb: np.ndarray
    can_meet: np.ndarray
    start_lb_excl: np.ndarray

    @classmethod
    def build(cls, problem: GmaxProblem) -> SlotData:
        e = problem.times.exec
        longest = np.sort(e.max(axis=1))[::-1]
        start_ub = np.concatenate([[0.0], np.cumsum(longest)])
        can = np.zeros(e.shape, dtype=bool)
        for i in range(problem.n_requests):
            for s in range(1, problem.max_batch_size + 1):
                if problem.e2e_task[i]:
                    can[i, s - 1] = e[i, s - 1] <= problem.slo_e2e[i]
                else:
                    can[i, s - 1] = problem.times.prefill[i, s - 1] <= problem.slo_ttft[i] and problem.meets_tpot(i, s)
        shortest = e.min(axis=1)
        bmax = problem.max_batch_size
        start_lb = group_max_bound(shortest, bmax)
        start_lb_excl = np.array([group_max_bound(np.delete(shortest, i), bmax) for i in range(problem.n_requests)])
        return cls(problem, start_ub, start_lb, can, start_lb_excl)

    def keys(self) -> list[tuple[int, int]]:
        """The (end position c, size s) pairs, c = 1..N, s <= min(c, B_max)."""
        n, bmax = self.problem.n_requests, self.problem.max_batch_size
        return [(c, s) for c in range(1, n + 1) for s in range(1, min(c, bmax) + 1)]

    def may_meet(self, i: int, c: int, s: int) -> bool:
        """Whether request i in the batch of size s ending at position c can possibly meet its SLO."""
        if not self.can_meet[i, s - 1]:
            return False
        return self.start_lb_excl[i, c - s] + self.slo_time(i, s) <= self.slo_value(i)

    def order(self, s: int) -> list[int]:
        """Requests by :math:`E_i(s)` ascending (ties by index): the leader of a batch of size s is
        its last member in this order."""
        col = self.problem.times.exec[:, s - 1]
        return sorted(range(self.problem.n_requests), key=lambda i: (col[i], i))

    def big_m(self, i: int, c: int, s: int, start_cap: np.ndarray | None = None) -> float:
        """:math:`M_{ics}`, >= 0, with the start bounded by ``start_cap`` where given."""
        top = float(self.start_ub[c - s] if start_cap is None else min(self.start_ub[c - s], start_cap[c - s]))
        return max(top + self.slo_time(i, s) - self.slo_value(i), 0.0)

    def wait_floor(self, p: int) -> float:
        """Least waiting time of the request at 0-based execution position p: at least
        :math:`p - B_{max} + 1` requests are in earlier batches."""
        return float(self.start_lb[max(p - self.problem.max_batch_size + 1, 0)])

    def start_cap(self, t_max: float) -> np.ndarray:
        r"""``[q]``: the latest :math:`St_q` of any schedule with :math:`t \le` ``t_max`` (the
        time-budget bound of the module docstring)."""
        nreq = self.problem.n_requests
        base = float(self.problem.times.exec.min(axis=1).sum())
        cap = np.full(nreq + 1, np.inf)
        for q in range(nreq):
            rest = (
                t_max
                - base
                - sum(self.wait_floor(p) for p in range(q))
                - sum(self.wait_floor(p - q) for p in range(q, nreq))
            )
            cap[q] = max(rest, 0.0) / (nreq - q)
        return cap

    def meetable(self) -> int:
        """Requests that can meet their SLO at all (an upper bound on n)."""
        return int(self.can_meet.any(axis=1).sum())

    @property
    def sizes(self) -> range:
        return range(1, self.problem.max_batch_size + 1)

    def slo_value(self, i: int) -> float:
        """The threshold that the time :math:`St_k + (E_i \\text{ or } F_i)` must meet (h=1: e2e, h=0: TTFT)."""
        p = self.problem
        return float(p.slo_e2e[i] if p.e2e_task[i] else p.slo_ttft[i])

    def slo_time(self, i: int, s: int) -> float:
        """E_i(s) for an e2e task, F_i(s) for a chat task."""
        tab = self.problem.times.exec if self.problem.e2e_task[i] else self.problem.times.prefill
        return float(tab[i, s - 1])

    def t_lower_bound(self) -> float:
        """A valid lower bound on t: every request's shortest execution time plus the earliest start
        of each execution position (module docstring)."""
        waits = sum(self.wait_floor(q) for q in range(self.problem.n_requests))
        return float(self.problem.times.exec.min(axis=1).sum()) + waits


@dataclass(kw_only=True)
class SubResult:
    """One solve of the slot model.

    Attributes
    ----------
    status
        ``OPTIMAL``, ``FEASIBLE`` (stopped by the time limit with a solution), ``INFEASIBLE`` or
        ``TIME_LIMIT`` (no solution).
    batches
        Ordered batches of request indices, or None.
    n, t
        The model's n and t of that solution (t in seconds).
    objective, bound
        The sub-problem's objective and proven dual bound, in the sub-problem's sense (max for
        Dinkelbach, min t for fixed-n), in seconds / requests.
    """

    status: Status
    batches: list[list[int]] | None = None
    n: int = 0
    t: float = math.nan
    objective: float = math.nan
    bound: float = math.nan
    wall: float = 0.0
    info: dict = field(default_factory=dict)


class SlotBackend(Protocol):
    """What :mod:`.exact` needs from a backend (``budget``: the solve's time, model building
    included)."""

    name: str

    def parametric(self, n_inc: int, batches_inc: list[list[int]], budget: TimeBudget) -> SubResult:
        """Maximise :math:`n - \\lambda t` at the incumbent's :math:`\\lambda = G` (Dinkelbach);
        objective and bound in requests."""

    def min_t(self, n_min: int, budget: TimeBudget) -> SubResult:
        """Minimise t subject to :math:`n \\ge n_{min}` (``n_min = 0``: no SLO constraint)."""

    def max_n(self, budget: TimeBudget) -> SubResult:
        """Maximise n alone."""

"""Data of the batch-slot model of exact G-maximisation (digest 000 section 6.2) and its result type.

Both backends (:mod:`.milp`, :mod:`.cpsat`) build the same model from :class:`SlotData`:

- indices: requests :math:`i \\in I`, batch slots :math:`k \\in K = \\{0..N-1\\}` (at most N batches),
  sizes :math:`s \\in S = \\{1..B_{max}\\}`;
- binaries :math:`y_{iks}` (i in slot k, which has size s), :math:`z_{ks}` (slot k has size s),
  :math:`x_i` (i meets its SLO); continuous :math:`D_k` (duration), :math:`St_k` (start);
- :math:`\\sum_{k,s} y_{iks} = 1`; :math:`\\sum_i y_{iks} = s z_{ks}`;
  :math:`\\sum_s z_{ks} \\ge \\sum_s z_{k+1,s}` (no gaps), :math:`\\sum_s z_{ks} \\le 1`;
- memory (Eq. 20): :math:`\\sum_{i,s} r_i y_{iks} \\le C`;
- :math:`D_k \\ge \\sum_s E_i(s) y_{iks}` (the slowest member, Eq. 11 fixed); :math:`St_0 = 0`,
  :math:`St_{k+1} = St_k + D_k`;
- :math:`t = \\sum_{k} St_k |B_k| + \\sum_{i,k,s} E_i(s) y_{iks}` (Eqs. 3-4: every member of slot
  k waits :math:`St_k`), linearised by the backend;
- SLO (Eq. 7) for i in slot k: h=1: :math:`St_k + \\sum_s E_i(s) y_{iks} \\le SLO^{e2e}_i`;
  h=0: :math:`St_k + \\sum_s F_i(s) y_{iks} \\le SLO^{ttft}_i` — both enforced only when
  :math:`x_i = 1` and i is in slot k; TPOT is a pure size cap, :math:`x_i + \\sum_k y_{iks} \\le 1`
  for every s with :math:`TP_i(s) > SLO^{tpot}_i`;
- :math:`n = \\sum_i x_i`.

Objectives (digest 6.1): Dinkelbach's :math:`\\max\\, n - \\lambda t` and the epsilon-constraint's
:math:`\\min t` s.t. :math:`n \\ge n_0`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .problem import GmaxProblem

__all__ = ["SlotData", "SubResult", "SlotBackend"]


@dataclass(frozen=True)
class SlotData:
    """Preprocessed data of the slot model (seconds).

    Attributes
    ----------
    problem
        The instance.
    slots
        Number of batch slots.
    start_ub
        ``start_ub[k]``: an upper bound on :math:`St_k`, the sum of the k largest request times.
    can_meet
        ``can_meet[i, s-1]``: whether i can meet its SLO at all in a batch of size s (at start 0).
    """

    problem: GmaxProblem
    slots: int
    start_ub: np.ndarray
    can_meet: np.ndarray

    @classmethod
    def build(cls, problem: GmaxProblem) -> "SlotData":
        e = problem.times.exec
        longest = np.sort(e.max(axis=1))[::-1]
        start_ub = np.concatenate([[0.0], np.cumsum(longest)])
        can = np.zeros(e.shape, dtype=bool)
        for i in range(problem.n_requests):
            for s in range(1, problem.max_batch_size + 1):
                if problem.e2e_task[i]:
                    can[i, s - 1] = e[i, s - 1] <= problem.slo_e2e[i]
                else:
                    can[i, s - 1] = (
                        problem.times.prefill[i, s - 1] <= problem.slo_ttft[i] and problem.meets_tpot(i, s)
                    )
        return cls(problem, problem.n_requests, start_ub, can)

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
        """A valid lower bound on t: every request's shortest execution time."""
        return float(self.problem.times.exec.min(axis=1).sum())


@dataclass
class SubResult:
    """One solve of the slot model.

    Attributes
    ----------
    status
        ``optimal``, ``feasible`` (stopped by the time limit with a solution), ``infeasible`` or
        ``time_limit`` (no solution).
    batches
        Ordered batches of request indices, or None.
    n, t
        The model's n and t of that solution (t in seconds).
    objective, bound
        The sub-problem's objective and proven dual bound, in the sub-problem's sense (max for
        Dinkelbach, min t for fixed-n), in seconds / requests.
    """

    status: str
    batches: list[list[int]] | None = None
    n: int = 0
    t: float = math.nan
    objective: float = math.nan
    bound: float = math.nan
    wall: float = 0.0
    info: dict = field(default_factory=dict)


class SlotBackend(Protocol):
    """What :mod:`.exact` needs from a backend."""

    name: str

    def parametric(self, n_inc: int, batches_inc: list[list[int]], time_limit: float | None) -> SubResult:
        """Maximise :math:`n - \\lambda t` at the incumbent's :math:`\\lambda = G` (Dinkelbach);
        objective and bound in requests."""

    def min_t(self, n_min: int, time_limit: float | None) -> SubResult:
        """Minimise t subject to :math:`n \\ge n_{min}` (``n_min = 0``: no SLO constraint)."""

    def max_n(self, time_limit: float | None) -> SubResult:
        """Maximise n alone."""

r"""SCLS serving-time-oriented batching, P-BATCH (Cheng et al., Sec. 4.4; docs/scls.md, "P-BATCH").

Given the pooled requests with current input lengths :math:`\ell_r` (raw input plus tokens generated
in earlier slices, docs/scls.md, G1) and the slice length S, partition them into batches :math:`B_1..B_K`
to

.. math::

    \min \sum_k T_{serve}(|B_k|, \max_{r \in B_k} \ell_r, S)
    \quad \text{s.t. } |B_k| \le N_{cap}(\max_{r \in B_k} \ell_r) \text{ whenever } |B_k| \ge 2,

with :math:`T_{serve}` the static-batch model (SCLS Eqs. 1-4, :mod:`..static_latency`) and the
memory rule :math:`N_{cap}` of :class:`MemoryRule`: HF's Eq. 8/9,
:math:`N_{max} = \lfloor \zeta M_{ava} / (\Delta (L_i + S)) \rfloor`; DeepSpeed's Algorithm 2 table;
or a fixed cap. Singletons always fit (docs/scls.md, G6).

- :func:`dp_batches` is Algorithm 1 / Eq. 10: sort by length, then
  :math:`T[i] = \min_{j} T[j-1] + T_{serve}(i-j+1, \ell_{(i)}, S)` over batches that do not OOM, the
  inner loop stopping at the first OOM (monotone rule). Exact when :math:`T_{serve}` is
  nondecreasing in L and the rule is monotone (docs/scls.md, "Contiguity").
- :func:`mip_batches` is the compact assignment MIP of docs/scls.md, which does *not* assume
  contiguity, used as the cross-check: binaries :math:`x_{rk}` (r in slot k), :math:`y_k` (slot
  used), :math:`z_{kv}` (slot k's max length is level v); integer :math:`N_k = \sum_r x_{rk}`;
  :math:`w_{kv} = N_k z_{kv}` linearised by :math:`w \le \bar N z`, :math:`w \le N_k`,
  :math:`w \ge N_k - \bar N (1 - z)`; :math:`x_{rk} \le \sum_{v \ge \ell_r} z_{kv}`;
  :math:`\sum_v z_{kv} = y_k`; :math:`N_k \le \sum_v \max(1, N_{cap}(v)) z_{kv}`; objective
  :math:`\sum_k A_S \sum_v v w_{kv} + B_S N_k + C_S \sum_v v z_{kv} + E_S y_k` (closed form of
  docs/scls.md); symmetry breaking :math:`y_k \ge y_{k+1}`.
- :func:`total_serve_time` is the one judge of a batching: it checks the partition and the memory
  rule and sums :math:`T_{serve}`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pulp

from ...budget import NO_LIMIT, TimeBudget
from ...mipsolvers import pulp_solver, solve_model, solver_budget
from ...result import Status
from ..static_latency import StaticLatencyModel

__all__ = ["DS_TABLE", "MemoryRule", "dp_batches", "mip_batches", "total_serve_time"]

#: DeepSpeed's rule (SCLS Algorithm 2): (upper bound on L_i + S, max batch size).
DS_TABLE: tuple[tuple[float, int], ...] = ((512, 28), (1024, 22), (math.inf, 12))


@dataclass(frozen=True)
class MemoryRule:
    """The OOM predicate as a batch-size cap :math:`N_{cap}(L_i)` for slice length S.

    Attributes
    ----------
    kind
        ``"none"``, ``"fixed"`` (``max_batch_size``), ``"memory"`` (Eq. 8/9: ``kv_bytes_per_token``
        Delta, ``available_bytes`` M_ava, ``zeta``) or ``"table"`` (``table`` of (L_i + S upper
        bound, cap), ascending; Algorithm 2 is :data:`DS_TABLE`).
    """

    kind: str = "none"
    max_batch_size: int | None = None
    kv_bytes_per_token: float | None = None
    available_bytes: float | None = None
    zeta: float = 1.0
    table: tuple[tuple[float, int], ...] = DS_TABLE

    def cap(self, length: int, slice_len: int) -> float:
        """Largest batch size that does not OOM at batch input length ``length`` (>= 1)."""
        if self.kind == "none":
            return math.inf
        if self.kind == "fixed":
            return max(1, int(self.max_batch_size or 1))
        if self.kind == "memory":
            total = self.kv_bytes_per_token * (length + slice_len)  # type: ignore[operator]
            return max(1, math.floor(self.zeta * self.available_bytes / total))  # type: ignore[operator]
        if self.kind == "table":
            for upper, cap in self.table:
                if length + slice_len <= upper:
                    return max(1, cap)
            return 1
        raise ValueError(f"unknown memory rule {self.kind!r}")


def _serve(model: StaticLatencyModel, n: int, length: int, slice_len: int) -> float:
    return model.serve_time(n, length, slice_len)


def total_serve_time(
    lengths: Sequence[int],
    batches: Sequence[Sequence[int]],
    model: StaticLatencyModel,
    slice_len: int,
    rule: MemoryRule,
) -> float:
    """Sum of :math:`T_{serve}` over the batches (request indices), after checking them.

    Raises
    ------
    ValueError
        When the batches are not a partition of the requests or a batch breaks the memory rule.
    """
    seen = sorted(i for b in batches for i in b)
    if seen != list(range(len(lengths))):
        raise ValueError("batches must hold every request exactly once")
    total = 0.0
    for k, batch in enumerate(batches):
        top = max(lengths[i] for i in batch)
        if len(batch) > rule.cap(top, slice_len):
            raise ValueError(f"batch {k}: {len(batch)} requests at length {top} break the memory rule")
        total += _serve(model, len(batch), top, slice_len)
    return total


def dp_batches(
    lengths: Sequence[int], model: StaticLatencyModel, slice_len: int, rule: MemoryRule
) -> tuple[list[list[int]], float]:
    """Algorithm 1 (Eq. 10). Returns (batches of request indices, in descending-length order; total)."""
    order = sorted(range(len(lengths)), key=lambda r: (lengths[r], r))
    n = len(order)
    best = [0.0] * (n + 1)
    split = [0] * (n + 1)
    for i in range(1, n + 1):
        top = lengths[order[i - 1]]
        best[i], split[i] = best[i - 1] + _serve(model, 1, top, slice_len), i - 1
        cap = rule.cap(top, slice_len)
        j = i - 1
        while j > 0 and i - j + 1 <= cap:
            t = best[j - 1] + _serve(model, i - j + 1, top, slice_len)
            if t < best[i]:
                best[i], split[i] = t, j - 1
            j -= 1
    batches, i = [], n
    while i > 0:
        batches.append([order[r] for r in range(split[i], i)])
        i = split[i]
    return batches, best[n]


def mip_batches(
    lengths: Sequence[int],
    model: StaticLatencyModel,
    slice_len: int,
    rule: MemoryRule,
    solver: str = "highs",
    budget: TimeBudget = NO_LIMIT,
) -> tuple[list[list[int]] | None, float | None, Status]:
    """The compact assignment MIP (docs/scls.md, "P-BATCH"); returns (batches, objective, status).

    ``budget`` covers building (PuLP takes seconds at a hundred requests) and solving; when it
    expires first, or the solver finds no batching within it, the result is ``(None, None,
    "time_limit")``.
    """
    start = time.perf_counter()
    n = len(lengths)
    a_s, b_s, c_s, e_s = model.slice_coefficients(slice_len)
    levels = sorted(set(lengths))
    caps = {v: min(rule.cap(v, slice_len), n) for v in levels}
    n_bar = max(caps.values())
    prob = pulp.LpProblem("scls_batch", pulp.LpMinimize)
    slots = range(n)
    x = {(r, k): prob.add_variable(f"x_{r}_{k}", cat="Binary") for r in range(n) for k in slots}
    y = [prob.add_variable(f"y_{k}", cat="Binary") for k in slots]
    z = {(k, v): prob.add_variable(f"z_{k}_{v}", cat="Binary") for k in slots for v in levels}
    size = [prob.add_variable(f"N_{k}", lowBound=0, upBound=n_bar, cat="Integer") for k in slots]
    w = {(k, v): prob.add_variable(f"w_{k}_{v}", lowBound=0) for k in slots for v in levels}
    prob += pulp.lpSum(a_s * v * w[k, v] + c_s * v * z[k, v] for k in slots for v in levels) + pulp.lpSum(
        b_s * size[k] + e_s * y[k] for k in slots
    )
    for r in range(n):
        prob += pulp.lpSum(x[r, k] for k in slots) == 1
    for k in slots:
        if budget.expired():
            return None, None, Status.TIME_LIMIT
        prob += size[k] == pulp.lpSum(x[r, k] for r in range(n))
        prob += pulp.lpSum(z[k, v] for v in levels) == y[k]
        prob += size[k] <= pulp.lpSum(caps[v] * z[k, v] for v in levels)
        if k + 1 < n:
            prob += y[k] >= y[k + 1]
        for r in range(n):
            prob += x[r, k] <= pulp.lpSum(z[k, v] for v in levels if v >= lengths[r])
        for v in levels:
            prob += w[k, v] <= n_bar * z[k, v]
            prob += w[k, v] <= size[k]
            prob += w[k, v] >= size[k] - n_bar * (1 - z[k, v])
    solve_by = solver_budget(budget, time.perf_counter() - start)  # PuLP's hand-over of the model
    if solve_by.expired():
        return None, None, Status.TIME_LIMIT
    # every request alone in its own slot is a solution: "infeasible" is a solver fault
    solve_model(
        prob,
        pulp_solver(solver, budget=solve_by, gap_rel=0.0),
        known_feasible=True,
        budget=solve_by,
    )
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        if budget.limited and prob.sol_status == pulp.LpSolutionNoSolutionFound:
            return None, None, Status.TIME_LIMIT
        raise RuntimeError(f"P-BATCH MIP found no solution (status {pulp.LpStatus[prob.status]})")
    batches = [[r for r in range(n) if (x[r, k].varValue or 0) > 0.5] for k in slots]
    batches = [b for b in batches if b]
    status = Status.OPTIMAL if prob.sol_status == pulp.LpSolutionOptimal else Status.FEASIBLE
    return batches, float(pulp.value(prob.objective)), status

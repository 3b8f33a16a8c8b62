"""The batch-slot MILP of exact G-maximisation (digest 000 section 6.2) in PuLP -> HiGHS / CBC / Gurobi.

The model is the one stated in :mod:`.slots`. Linearisations used here:

- :math:`t = \\sum_{k,s} s\\, q_{ks} + \\sum_{i,k,s} E_i(s) y_{iks}` with
  :math:`q_{ks} \\ge St_k - \\overline{St}_k (1 - z_{ks})`, :math:`q_{ks} \\ge 0` (:math:`q_{ks}` is
  :math:`St_k` when slot k has size s; t is pushed down by every objective used);
- SLO for i in slot k (Eq. 7): :math:`St_k + \\sum_s T_i(s) y_{iks} \\le SLO_i +
  M_{ik}(2 - x_i - \\sum_s y_{iks})` with :math:`T = E` (h=1) or :math:`F` (h=0) and
  :math:`M_{ik} = \\overline{St}_k + \\max_s T_i(s) - SLO_i`;
- :math:`x_i + \\sum_k y_{iks} \\le 1` whenever i cannot meet its SLO in a batch of size s at all
  (TPOT cap of Eq. 9/19, or :math:`T_i(s)` alone over the SLO).

Here :math:`\\overline{St}_k` is the sum of the k longest request times, a valid bound on
:math:`St_k`. The relative MIP gap is set to 0 so that "optimal" means proven optimal.
"""

from __future__ import annotations

import time
from typing import Any

import pulp

from .problem import g_core
from .slots import SlotData, SubResult

__all__ = ["MilpBackend", "MILP_SOLVERS"]

MILP_SOLVERS = ("highs", "cbc", "gurobi")


class MilpBackend:
    """Slot-model MILP through PuLP (``solver`` in :data:`MILP_SOLVERS`)."""

    def __init__(self, data: SlotData, solver: str = "highs", threads: int | None = None, log: bool = False):
        if solver not in MILP_SOLVERS:
            raise ValueError(f"unknown MILP solver {solver!r} (known: {', '.join(MILP_SOLVERS)})")
        self.data, self.solver, self.threads, self.log = data, solver, threads, log
        self.name = f"milp-{solver}"

    # ------------------------------------------------------------------------------ model

    def _build(self, sense: int) -> tuple[pulp.LpProblem, dict[str, Any]]:
        d, p = self.data, self.data.problem
        nreq, slots, sizes = p.n_requests, d.slots, list(d.sizes)
        prob = pulp.LpProblem("gmax", sense)
        y = {
            (i, k, s): pulp.LpVariable(f"y_{i}_{k}_{s}", cat="Binary")
            for i in range(nreq)
            for k in range(slots)
            for s in sizes
        }
        z = {(k, s): pulp.LpVariable(f"z_{k}_{s}", cat="Binary") for k in range(slots) for s in sizes}
        x = [pulp.LpVariable(f"x_{i}", cat="Binary") for i in range(nreq)]
        st = [pulp.LpVariable(f"St_{k}", lowBound=0, upBound=float(d.start_ub[k])) for k in range(slots)]
        dur = [pulp.LpVariable(f"D_{k}", lowBound=0) for k in range(slots)]
        q = {(k, s): pulp.LpVariable(f"q_{k}_{s}", lowBound=0) for k in range(slots) for s in sizes}
        e = p.times.exec

        for i in range(nreq):
            prob += pulp.lpSum(y[i, k, s] for k in range(slots) for s in sizes) == 1, f"assign_{i}"
        for k in range(slots):
            for s in sizes:
                prob += pulp.lpSum(y[i, k, s] for i in range(nreq)) == s * z[k, s], f"size_{k}_{s}"
                prob += q[k, s] >= st[k] - float(d.start_ub[k]) * (1 - z[k, s]), f"wait_{k}_{s}"
            prob += pulp.lpSum(z[k, s] for s in sizes) <= 1, f"one_size_{k}"
            if k + 1 < slots:
                prob += (
                    pulp.lpSum(z[k, s] for s in sizes) >= pulp.lpSum(z[k + 1, s] for s in sizes),
                    f"no_gap_{k}",
                )
                prob += st[k + 1] == st[k] + dur[k], f"start_{k}"
            if p.capacity is not None:
                prob += (
                    pulp.lpSum(p.need[i] * y[i, k, s] for i in range(nreq) for s in sizes) <= p.capacity,
                    f"memory_{k}",
                )
            for i in range(nreq):
                in_k = pulp.lpSum(y[i, k, s] for s in sizes)
                prob += dur[k] >= pulp.lpSum(float(e[i, s - 1]) * y[i, k, s] for s in sizes), f"dur_{i}_{k}"
                slo = d.slo_value(i)
                if slo < float("inf"):
                    big_m = float(d.start_ub[k]) + max(d.slo_time(i, s) for s in sizes) - slo
                    if big_m > 0:
                        prob += (
                            st[k] + pulp.lpSum(d.slo_time(i, s) * y[i, k, s] for s in sizes)
                            <= slo + big_m * (2 - x[i] - in_k),
                            f"slo_{i}_{k}",
                        )
        for i in range(nreq):
            for s in sizes:
                if not d.can_meet[i, s - 1]:
                    prob += x[i] + pulp.lpSum(y[i, k, s] for k in range(slots)) <= 1, f"cap_{i}_{s}"
        n_expr = pulp.lpSum(x)
        t_expr = pulp.lpSum(s * q[k, s] for k in range(slots) for s in sizes) + pulp.lpSum(
            float(e[i, s - 1]) * y[i, k, s] for (i, k, s) in y
        )
        return prob, {"y": y, "n": n_expr, "t": t_expr, "x": x}

    def _command(self, time_limit: float | None) -> pulp.LpSolver:
        common: dict[str, Any] = {"msg": self.log, "timeLimit": time_limit, "gapRel": 0.0}
        if self.solver == "highs":
            return pulp.HiGHS(threads=self.threads, mip_feasibility_tolerance=1e-9, **common)
        if self.solver == "cbc":
            return pulp.PULP_CBC_CMD(threads=self.threads, **common)
        return pulp.GUROBI(threads=self.threads, MIPGap=0.0, IntFeasTol=1e-9, **{k: v for k, v in common.items() if k != "gapRel"})

    def _run(self, prob: pulp.LpProblem, parts: dict[str, Any], time_limit: float | None) -> SubResult:
        start = time.perf_counter()
        try:
            prob.solve(self._command(time_limit))
        except pulp.PulpSolverError as exc:
            if self.solver == "gurobi":
                raise RuntimeError(f"Gurobi could not solve the MILP (restricted licence size limit?): {exc}") from exc
            raise
        wall = time.perf_counter() - start
        has_solution = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        if prob.status == pulp.LpStatusInfeasible:
            return SubResult("infeasible", wall=wall)
        if not has_solution:
            return SubResult("time_limit", wall=wall, bound=self._bound(prob))
        batches = self._batches(parts["y"])
        n = int(round(pulp.value(parts["n"])))
        t = float(pulp.value(parts["t"]))
        obj = float(pulp.value(prob.objective))
        status = "optimal" if prob.sol_status == pulp.LpSolutionOptimal else "feasible"
        bound = obj if status == "optimal" else self._bound(prob)
        return SubResult(status, batches, n, t, obj, bound, wall)

    def _bound(self, prob: pulp.LpProblem) -> float:
        """The solver's proven dual bound in the problem's own sense (nan when unavailable)."""
        model = getattr(prob, "solverModel", None)
        if model is None:
            return float("nan")
        if self.solver == "highs":
            raw = model.getInfo().mip_dual_bound
            return -raw if prob.sense == pulp.LpMaximize else raw
        return float(model.ObjBound)

    def _batches(self, y: dict[tuple[int, int, int], pulp.LpVariable]) -> list[list[int]]:
        slots: dict[int, list[int]] = {}
        for (i, k, _s), var in y.items():
            if (var.varValue or 0.0) > 0.5:
                slots.setdefault(k, []).append(i)
        return [sorted(slots[k]) for k in sorted(slots)]

    # ------------------------------------------------------------------------------ objectives

    def parametric(self, n_inc: int, batches_inc: list[list[int]], time_limit: float | None) -> SubResult:
        """Dinkelbach step at :math:`\lambda = n_{inc} / t_{inc}` (the incumbent's G)."""
        lam = n_inc / g_core(self.data.problem, batches_inc)[1]
        prob, parts = self._build(pulp.LpMaximize)
        prob += parts["n"] - lam * parts["t"]
        res = self._run(prob, parts, time_limit)
        res.info["lambda"] = lam
        return res

    def min_t(self, n_min: int, time_limit: float | None) -> SubResult:
        prob, parts = self._build(pulp.LpMinimize)
        prob += parts["t"]
        if n_min > 0:
            prob += parts["n"] >= n_min, "n_min"
        return self._run(prob, parts, time_limit)

    def max_n(self, time_limit: float | None) -> SubResult:
        prob, parts = self._build(pulp.LpMaximize)
        prob += parts["n"]
        return self._run(prob, parts, time_limit)

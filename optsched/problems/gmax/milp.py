"""The batch-end-position MILP of exact G-maximisation in PuLP -> HiGHS / CBC / Gurobi.

The model is the one stated in :mod:`.slots` (variables :math:`w_{ics}, z_{cs}, v_{ics}, D_c`),
written here constraint by constraint. The relative MIP gap is set to 0 so that "optimal" means
proven optimal.
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
        self.highs_options: dict[str, Any] = {}
        self.hint: list[list[int]] | None = None  # unused: PuLP's HiGHS API takes no MIP start

    # ------------------------------------------------------------------------------ model

    def _build(self, sense: int) -> tuple[pulp.LpProblem, dict[str, Any]]:
        d, p = self.data, self.data.problem
        nreq, keys = p.n_requests, self.data.keys()
        e = p.times.exec
        prob = pulp.LpProblem("gmax", sense)
        w = {(i, c, s): prob.add_variable(f"w_{i}_{c}_{s}", cat="Binary") for i in range(nreq) for c, s in keys}
        z = {(c, s): prob.add_variable(f"z_{c}_{s}", cat="Binary") for c, s in keys}
        v = {
            (i, c, s): prob.add_variable(f"v_{i}_{c}_{s}", cat="Binary")
            for i in range(nreq)
            for c, s in keys
            if d.may_meet(i, c, s)
        }
        lead = {(i, c, s): prob.add_variable(f"l_{i}_{c}_{s}", cat="Binary") for i in range(nreq) for c, s in keys}
        dur = {c: prob.add_variable(f"D_{c}", lowBound=0) for c in range(1, nreq + 1)}
        # start[p]: start of the batch that follows the first p positions
        start = [prob.add_variable(f"S_{q}", lowBound=0) for q in range(nreq + 1)]
        prob += start[0] == 0, "start_0"
        for c in range(1, nreq + 1):
            prob += (
                dur[c] == pulp.lpSum(float(e[i, s - 1]) * lead[i, c, s] for i in range(nreq) for s in d.sizes if s <= c),
                f"dur_{c}",
            )
            prob += start[c] == start[c - 1] + dur[c], f"start_{c}"

        for i in range(nreq):
            prob += pulp.lpSum(w[i, c, s] for c, s in keys) == 1, f"assign_{i}"
        for c, s in keys:
            prob += pulp.lpSum(w[i, c, s] for i in range(nreq)) == s * z[c, s], f"size_{c}_{s}"
            prob += pulp.lpSum(lead[i, c, s] for i in range(nreq)) == z[c, s], f"one_leader_{c}_{s}"
            order = d.order(s)
            # above[r] = sum of l over order[r:], below[r] = sum of w over order[:r+1]
            above = [prob.add_variable(f"la_{r}_{c}_{s}", lowBound=0) for r in range(nreq)]
            below = [prob.add_variable(f"wb_{r}_{c}_{s}", lowBound=0) for r in range(nreq)]
            for rank, i in enumerate(order):
                nxt = above[rank + 1] if rank + 1 < nreq else 0
                prev = below[rank - 1] if rank > 0 else 0
                prob += above[rank] == lead[i, c, s] + nxt, f"above_{rank}_{c}_{s}"
                prob += below[rank] == w[i, c, s] + prev, f"below_{rank}_{c}_{s}"
                prob += lead[i, c, s] <= w[i, c, s], f"lead_member_{i}_{c}_{s}"
                # every member is no slower than the leader; the leader's batch holds s such members
                prob += w[i, c, s] <= above[rank], f"lead_max_{i}_{c}_{s}"
                prob += below[rank] >= s * lead[i, c, s], f"lead_cover_{i}_{c}_{s}"
            if p.capacity is not None:
                prob += pulp.lpSum(p.need[i] * w[i, c, s] for i in range(nreq)) <= p.capacity * z[c, s], f"mem_{c}_{s}"
        for pos in range(1, nreq + 1):
            prob += pulp.lpSum(z[c, s] for c, s in keys if c - s < pos <= c) == 1, f"tile_{pos}"
        for (i, c, s), var in v.items():
            prob += var <= w[i, c, s], f"v_{i}_{c}_{s}"
            slo = d.slo_value(i)
            if slo < float("inf"):
                prob += (
                    start[c - s] + d.slo_time(i, s) <= slo + d.big_m(i, c, s) * (1 - var),
                    f"slo_{i}_{c}_{s}",
                )
        n_expr = pulp.lpSum(v.values())
        t_expr = pulp.lpSum(float(e[i, s - 1]) * var for (i, c, s), var in w.items()) + pulp.lpSum(
            (nreq - c) * dur[c] for c in dur
        )
        return prob, {"w": w, "n": n_expr, "t": t_expr}

    def _command(self, time_limit: float | None) -> pulp.LpSolver:
        common: dict[str, Any] = {"msg": self.log, "timeLimit": time_limit, "gapRel": 0.0}
        if self.solver == "highs":
            return pulp.HiGHS(threads=self.threads, mip_feasibility_tolerance=1e-9, **self.highs_options, **common)
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
        batches = self._batches(parts["w"])
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

    def _batches(self, w: dict[tuple[int, int, int], pulp.LpVariable]) -> list[list[int]]:
        ends: dict[int, list[int]] = {}
        for (i, c, _s), var in w.items():
            if (var.varValue or 0.0) > 0.5:
                ends.setdefault(c, []).append(i)
        return [sorted(ends[c]) for c in sorted(ends)]

    # ------------------------------------------------------------------------------ objectives

    def parametric(self, n_inc: int, batches_inc: list[list[int]], time_limit: float | None) -> SubResult:
        r"""Dinkelbach step at :math:`\lambda = n_{inc} / t_{inc}` (the incumbent's G)."""
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

"""The batch-end-position MILP of exact G-maximisation in PuLP -> HiGHS / CBC / Gurobi.

The model is the one stated in :mod:`.slots` (variables :math:`w_{ics}, z_{cs}, v_{ics}, D_c`),
written here constraint by constraint. The relative MIP gap is set to 0 so that "optimal" means
proven optimal.
"""

from __future__ import annotations

import time
from typing import Any

import pulp

from ...budget import NO_LIMIT, TimeBudget
from ...mipsolvers import MIP_BACKENDS, pulp_solver
from ...result import Status
from .problem import g_core
from .slots import SlotData, SubResult

__all__ = ["MilpBackend"]


#: Slack on Dinkelbach's ``n - lambda t >= 0`` restriction (requests), for floating-point round-off.
EPS = 1e-6


class MilpBackend:
    """Slot-model MILP through PuLP (``solver`` in :data:`MIP_BACKENDS`)."""

    def __init__(self, data: SlotData, solver: str = "highs", threads: int | None = None, log: bool = False):
        if solver not in MIP_BACKENDS:
            raise ValueError(f"unknown MILP solver {solver!r} (known: {', '.join(MIP_BACKENDS)})")
        self.data, self.solver, self.threads, self.log = data, solver, threads, log
        self.name = f"milp-{solver}"
        self.hint: list[list[int]] | None = None  # MIP start (HiGHS and Gurobi)

    # ------------------------------------------------------------------------------ model

    def build_model(self, sense: int, t_max: float | None = None) -> tuple[pulp.LpProblem, dict[str, Any]]:
        r"""The model; with ``t_max``, only schedules with :math:`t \le t_{max}` (starts capped by
        :meth:`~.slots.SlotData.start_cap`, big-M shrunk accordingly)."""
        d, p = self.data, self.data.problem
        cap = None if t_max is None else d.start_cap(t_max)
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
        start = [
            prob.add_variable(f"S_{q}", lowBound=0, upBound=None if cap is None or q == nreq else float(cap[q]))
            for q in range(nreq + 1)
        ]
        prob += start[0] == 0, "start_0"
        for c in range(1, nreq + 1):
            prob += (
                dur[c]
                == pulp.lpSum(float(e[i, s - 1]) * lead[i, c, s] for i in range(nreq) for s in d.sizes if s <= c),
                f"dur_{c}",
            )
            prob += start[c] == start[c - 1] + dur[c], f"start_{c}"

        cumulative: dict[tuple[int, int], tuple[list, list]] = {}
        for i in range(nreq):
            prob += pulp.lpSum(w[i, c, s] for c, s in keys) == 1, f"assign_{i}"
        for c, s in keys:
            prob += pulp.lpSum(w[i, c, s] for i in range(nreq)) == s * z[c, s], f"size_{c}_{s}"
            prob += pulp.lpSum(lead[i, c, s] for i in range(nreq)) == z[c, s], f"one_leader_{c}_{s}"
            order = d.order(s)
            # above[r] = sum of l over order[r:], below[r] = sum of w over order[:r+1]
            above = [prob.add_variable(f"la_{r}_{c}_{s}", lowBound=0) for r in range(nreq)]
            below = [prob.add_variable(f"wb_{r}_{c}_{s}", lowBound=0) for r in range(nreq)]
            cumulative[c, s] = (above, below)
            for rank, i in enumerate(order):
                nxt = above[rank + 1] if rank + 1 < nreq else 0
                prev = below[rank - 1] if rank > 0 else 0
                prob += above[rank] == lead[i, c, s] + nxt, f"above_{rank}_{c}_{s}"
                prob += below[rank] == w[i, c, s] + prev, f"below_{rank}_{c}_{s}"
                prob += lead[i, c, s] <= w[i, c, s], f"lead_member_{i}_{c}_{s}"
                # every member is no slower than the leader; the leader's batch holds s such members
                prob += w[i, c, s] <= above[rank], f"lead_max_{i}_{c}_{s}"
                prob += below[rank] >= s * lead[i, c, s], f"lead_cover_{i}_{c}_{s}"
                if rank > 0:  # members no earlier than rank in the order: at most min(s, N - rank)
                    prob += (
                        s * z[c, s] - below[rank - 1] <= min(s, nreq - rank) * above[rank],
                        f"lead_count_{rank}_{c}_{s}",
                    )
            if p.capacity is not None:
                prob += pulp.lpSum(p.need[i] * w[i, c, s] for i in range(nreq)) <= p.capacity * z[c, s], f"mem_{c}_{s}"
        for pos in range(1, nreq + 1):
            prob += pulp.lpSum(z[c, s] for c, s in keys if c - s < pos <= c) == 1, f"tile_{pos}"
        for c in range(1, nreq + 1):  # the longest member is at least as long as the mean member
            prob += (
                dur[c]
                >= pulp.lpSum(float(e[i, s - 1]) / s * w[i, c, s] for i in range(nreq) for s in d.sizes if s <= c),
                f"mean_{c}",
            )
        for (i, c, s), var in v.items():
            prob += var <= w[i, c, s], f"v_{i}_{c}_{s}"
            slo = d.slo_value(i)
            if slo < float("inf"):
                prob += (
                    start[c - s] + d.slo_time(i, s) <= slo + d.big_m(i, c, s, cap) * (1 - var),
                    f"slo_{i}_{c}_{s}",
                )
        n_expr = pulp.lpSum(v.values())
        t_expr = pulp.lpSum(float(e[i, s - 1]) * var for (i, c, s), var in w.items()) + pulp.lpSum(
            (nreq - c) * dur[c] for c in dur
        )
        if t_max is not None:
            prob += t_expr <= t_max, "t_max"
        if self.hint:
            self._set_start(self.hint, w, z, lead, v, dur, start, cumulative)
        return prob, {"w": w, "n": n_expr, "t": t_expr}

    def _set_start(self, batches, w, z, lead, v, dur, start, cumulative) -> None:
        """MIP start: every variable's value in the schedule ``batches`` (passed on by
        :class:`_HighsWithStart`)."""
        d, p = self.data, self.data.problem
        chosen: dict[tuple[int, int], list[int]] = {}
        pos = 0
        for batch in batches:
            pos += len(batch)
            chosen[pos, len(batch)] = list(batch)
        elapsed = 0.0
        for c in range(1, p.n_requests + 1):
            start[c - 1].setInitialValue(elapsed)
            length = 0.0
            for s in d.sizes:
                members = chosen.get((c, s), [])
                if s <= c:
                    z[c, s].setInitialValue(1 if members else 0)
                    order = d.order(s)
                    leader = max(members, key=order.index) if members else None
                    above, below = cumulative[c, s]
                    acc_w = 0
                    for rank, i in enumerate(order):
                        w[i, c, s].setInitialValue(1 if i in members else 0)
                        lead[i, c, s].setInitialValue(1 if i == leader else 0)
                        acc_w += i in members
                        below[rank].setInitialValue(acc_w)
                        above[rank].setInitialValue(1 if leader is not None and order.index(leader) >= rank else 0)
                if members:
                    length = float(p.times.exec[leader, s - 1])
                    for i in members:
                        if (i, c, s) in v:
                            ok = elapsed + d.slo_time(i, s) <= d.slo_value(i)
                            v[i, c, s].setInitialValue(1 if ok else 0)
            for (i, cc, s), var in v.items():
                if cc == c and i not in chosen.get((c, s), []):
                    var.setInitialValue(0)
            dur[c].setInitialValue(length)
            elapsed += length
        start[p.n_requests].setInitialValue(elapsed)

    def _command(self, budget: TimeBudget) -> pulp.LpSolver:
        tolerance = {"highs": {"mip_feasibility_tolerance": 1e-9}, "gurobi": {"IntFeasTol": 1e-9}}
        return pulp_solver(
            self.solver,
            budget=budget,
            threads=self.threads,
            msg=self.log,
            gap_rel=0.0,
            warm_start=self.hint is not None,
            **tolerance.get(self.solver, {}),
        )

    def _run(self, prob: pulp.LpProblem, parts: dict[str, Any], budget: TimeBudget) -> SubResult:
        start = time.perf_counter()
        try:
            prob.solve(self._command(budget))
        except Exception as exc:  # gurobipy.GurobiError is not a PulpSolverError
            if self.solver == "gurobi":
                raise RuntimeError(
                    f"Gurobi could not solve the MILP ({exc}); the restricted licence is limited to "
                    "2000 variables and constraints: use --solver highs or cpsat"
                ) from exc
            raise
        wall = time.perf_counter() - start
        has_solution = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        if prob.status == pulp.LpStatusInfeasible:
            return SubResult(status=Status.INFEASIBLE, wall=wall)
        if not has_solution:
            return SubResult(status=Status.TIME_LIMIT, wall=wall, bound=self._bound(prob))
        batches = self._batches(parts["w"])
        n = int(round(pulp.value(parts["n"])))
        t = float(pulp.value(parts["t"]))
        obj = float(pulp.value(prob.objective))
        status = Status.OPTIMAL if prob.sol_status == pulp.LpSolutionOptimal else Status.FEASIBLE
        bound = obj if status == Status.OPTIMAL else self._bound(prob)
        return SubResult(status=status, batches=batches, n=n, t=t, objective=obj, bound=bound, wall=wall)

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

    def parametric(self, n_inc: int, batches_inc: list[list[int]], budget: TimeBudget) -> SubResult:
        r"""Dinkelbach step at :math:`\lambda = n_{inc} / t_{inc}` (the incumbent's G)."""
        lam = n_inc / g_core(self.data.problem, batches_inc)[1]
        # only schedules with n - lambda t >= 0 matter (the incumbent has 0); -EPS for float slack
        prob, parts = self.build_model(pulp.LpMaximize, t_max=(self.data.meetable() + EPS) / lam)
        prob += parts["n"] - lam * parts["t"]
        prob += parts["n"] - lam * parts["t"] >= -EPS, "no_worse"
        res = self._run(prob, parts, budget)
        if res.status == Status.INFEASIBLE:  # no schedule has n - lambda t >= -EPS: F(lambda) < 0
            res = SubResult(status=Status.OPTIMAL, objective=-EPS, bound=-EPS, wall=res.wall)
        res.info["lambda"] = lam
        return res

    def min_t(self, n_min: int, budget: TimeBudget) -> SubResult:
        prob, parts = self.build_model(pulp.LpMinimize)
        prob += parts["t"]
        if n_min > 0:
            prob += parts["n"] >= n_min, "n_min"
        return self._run(prob, parts, budget)

    def t_relaxation(self, budget: TimeBudget = NO_LIMIT) -> float:
        r"""LP-relaxation lower bound on :math:`\min t` over every schedule (0 when the LP fails or
        is not solved within ``budget``)."""
        return self._lp(pulp.LpMinimize, lambda parts: parts["t"], 0.0, budget)

    def f_relaxation(self, n_inc: int, batches_inc: list[list[int]], budget: TimeBudget = NO_LIMIT) -> float:
        r"""LP-relaxation upper bound on :math:`\max n - \lambda t` at the incumbent's :math:`\lambda`
        (inf when the LP fails or is not solved within ``budget``), used to prove a bound when the MIP
        stopped without a dual bound."""
        lam = n_inc / g_core(self.data.problem, batches_inc)[1]
        return self._lp(pulp.LpMaximize, lambda parts: parts["n"] - lam * parts["t"], float("inf"), budget)

    def _lp(self, sense: int, objective: Any, failed: float, budget: TimeBudget) -> float:
        """Optimal value of the model's LP relaxation for ``objective(parts)``, ``failed`` when the LP
        is not solved to optimality within ``budget`` (the weakest bound in that direction; PuLP reports
        a HiGHS stopped by its time limit as status "Optimal", so the solution status decides)."""
        if budget.expired():
            return failed
        prob, parts = self.build_model(sense)
        prob += objective(parts)
        prob.solve(pulp_solver("highs", mip=False, msg=self.log, budget=budget))
        return float(pulp.value(prob.objective)) if prob.sol_status == pulp.LpSolutionOptimal else failed

    def max_n(self, budget: TimeBudget) -> SubResult:
        prob, parts = self.build_model(pulp.LpMaximize)
        prob += parts["n"]
        return self._run(prob, parts, budget)

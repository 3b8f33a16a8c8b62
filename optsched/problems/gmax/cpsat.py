"""The batch-slot model of exact G-maximisation in CP-SAT (digest 000 section 6.3).

Same variables and constraints as :mod:`.slots`, on integer times: every time is rounded to a tick
of ``resolution`` seconds (default 1 microsecond), so the model is exact for data on that grid and
otherwise optimal up to that rounding (the returned schedule is always re-judged by
:func:`~optsched.problems.gmax.problem.evaluate_g` on the exact times). CP-SAT-specific forms:

- :math:`P_k = St_k \\cdot |B_k|` by ``AddMultiplicationEquality``; :math:`t = \\sum_k P_k +
  \\sum E_i(s) y_{iks}`;
- the SLO of i in slot k as a reified linear constraint, enforced only if :math:`x_i` and
  :math:`a_{ik}` (:math:`a_{ik} = \\sum_s y_{iks}`);
- Dinkelbach with a rational :math:`\\lambda = num/den`: maximise :math:`den \\cdot n - num \\cdot t`
  exactly in integers (``AddDivisionEquality`` truncates and is not used for G).
"""

from __future__ import annotations

import time
from typing import Any

from ortools.sat.python import cp_model

from .slots import SlotData, SubResult

__all__ = ["CpsatBackend"]


class CpsatBackend:
    """Slot model in CP-SAT."""

    name = "cpsat"

    def __init__(
        self,
        data: SlotData,
        threads: int | None = None,
        log: bool = False,
        resolution: float = 1e-6,
        hint: list[list[int]] | None = None,
    ):
        self.data, self.threads, self.log, self.res = data, threads, log, resolution
        self.hint = hint

    def ticks(self, seconds: float) -> int:
        return int(round(seconds / self.res))

    def _build(self) -> tuple[cp_model.CpModel, dict[str, Any]]:
        d, p = self.data, self.data.problem
        nreq, slots, sizes = p.n_requests, d.slots, list(d.sizes)
        e = [[self.ticks(p.times.exec[i, s - 1]) for s in sizes] for i in range(nreq)]
        horizon = self.ticks(float(d.start_ub[-1])) + 1
        m = cp_model.CpModel()
        y = {(i, k, s): m.NewBoolVar(f"y_{i}_{k}_{s}") for i in range(nreq) for k in range(slots) for s in sizes}
        z = {(k, s): m.NewBoolVar(f"z_{k}_{s}") for k in range(slots) for s in sizes}
        a = {(i, k): m.NewBoolVar(f"a_{i}_{k}") for i in range(nreq) for k in range(slots)}
        x = [m.NewBoolVar(f"x_{i}") for i in range(nreq)]
        st = [m.NewIntVar(0, self.ticks(float(d.start_ub[k])) + slots, f"St_{k}") for k in range(slots)]
        dur = [m.NewIntVar(0, horizon, f"D_{k}") for k in range(slots)]
        size = [m.NewIntVar(0, p.max_batch_size, f"b_{k}") for k in range(slots)]
        prod = [m.NewIntVar(0, horizon * p.max_batch_size, f"P_{k}") for k in range(slots)]

        for i in range(nreq):
            m.AddExactlyOne(y[i, k, s] for k in range(slots) for s in sizes)
            for k in range(slots):
                m.Add(a[i, k] == sum(y[i, k, s] for s in sizes))
        m.Add(st[0] == 0)
        for k in range(slots):
            for s in sizes:
                m.Add(sum(y[i, k, s] for i in range(nreq)) == s * z[k, s])
            m.AddAtMostOne(z[k, s] for s in sizes)
            m.Add(size[k] == sum(s * z[k, s] for s in sizes))
            if k + 1 < slots:
                m.Add(sum(z[k, s] for s in sizes) >= sum(z[k + 1, s] for s in sizes))
                m.Add(st[k + 1] == st[k] + dur[k])
            if p.capacity is not None:
                m.Add(sum(p.need[i] * y[i, k, s] for i in range(nreq) for s in sizes) <= int(p.capacity))
            m.AddMultiplicationEquality(prod[k], [st[k], size[k]])
            for i in range(nreq):
                m.Add(dur[k] >= sum(e[i][s - 1] * y[i, k, s] for s in sizes))
                slo = d.slo_value(i)
                if slo < float("inf"):
                    lhs = st[k] + sum(self.ticks(d.slo_time(i, s)) * y[i, k, s] for s in sizes)
                    m.Add(lhs <= self.ticks(slo)).OnlyEnforceIf([x[i], a[i, k]])
        for i in range(nreq):
            for s in sizes:
                if not d.can_meet[i, s - 1]:
                    for k in range(slots):
                        m.AddImplication(x[i], y[i, k, s].Not())
        t_expr = sum(prod) + sum(e[i][s - 1] * y[i, k, s] for (i, k, s) in y)
        if self.hint:
            for k, batch in enumerate(self.hint):
                for i in batch:
                    m.AddHint(y[i, k, len(batch)], 1)
        return m, {"y": y, "n": sum(x), "t": t_expr}

    def _run(self, m: cp_model.CpModel, parts: dict[str, Any], time_limit: float | None) -> SubResult:
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = self.threads or 2
        solver.parameters.log_search_progress = self.log
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = max(time_limit, 0.01)
        start = time.perf_counter()
        code = solver.Solve(m)
        wall = time.perf_counter() - start
        if code == cp_model.INFEASIBLE:
            return SubResult("infeasible", wall=wall)
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return SubResult("time_limit", wall=wall, bound=solver.BestObjectiveBound())
        slots: dict[int, list[int]] = {}
        for (i, k, _s), var in parts["y"].items():
            if solver.Value(var):
                slots.setdefault(k, []).append(i)
        batches = [sorted(slots[k]) for k in sorted(slots)]
        n = int(solver.Value(parts["n"]))
        t = solver.Value(parts["t"]) * self.res
        status = "optimal" if code == cp_model.OPTIMAL else "feasible"
        return SubResult(status, batches, n, t, solver.ObjectiveValue(), solver.BestObjectiveBound(), wall)

    # ------------------------------------------------------------------------------ objectives
    # Objective values and bounds are returned in the common units (requests and seconds).

    def tick_t(self, batches: list[list[int]]) -> int:
        """t of a schedule in the model's integer arithmetic (ticks)."""
        e = self.data.problem.times.exec
        wait = total = 0
        for batch in batches:
            ex = [self.ticks(e[i, len(batch) - 1]) for i in batch]
            total += len(batch) * wait + sum(ex)
            wait += max(ex)
        return total

    def parametric(self, n_inc: int, batches_inc: list[list[int]], time_limit: float | None) -> SubResult:
        """Dinkelbach step at the rational :math:`\lambda = n_{inc} / T_{inc}` (per tick):
        maximise :math:`T_{inc} n - n_{inc} t` exactly in integers."""
        t_inc = self.tick_t(batches_inc)
        m, parts = self._build()
        m.Maximize(t_inc * parts["n"] - n_inc * parts["t"])
        res = self._run(m, parts, time_limit)
        res.objective, res.bound = res.objective / t_inc, res.bound / t_inc
        res.info["lambda"] = n_inc / (t_inc * self.res)
        return res

    def min_t(self, n_min: int, time_limit: float | None) -> SubResult:
        m, parts = self._build()
        if n_min > 0:
            m.Add(parts["n"] >= n_min)
        m.Minimize(parts["t"])
        res = self._run(m, parts, time_limit)
        res.objective, res.bound = res.objective * self.res, res.bound * self.res
        return res

    def max_n(self, time_limit: float | None) -> SubResult:
        m, parts = self._build()
        m.Maximize(parts["n"])
        return self._run(m, parts, time_limit)

r"""The batch-end-position model of exact G-maximisation in CP-SAT (docs/gmax.md, "The MILP").

Same variables and constraints as :mod:`.slots` (and :mod:`.milp`), on integer times: every time is
rounded to a tick of ``resolution`` seconds (default 1 microsecond), so the model is exact for data
on that grid and otherwise optimal up to that rounding (the returned schedule is always re-judged
by :func:`~optsched.problems.gmax.problem.evaluate_g` on the exact times). CP-SAT-specific forms:
the SLO of i at (c, s) is a linear constraint enforced only if :math:`v_{ics}` (no big-M), and
Dinkelbach uses the rational :math:`\lambda = n_{inc} / T_{inc}` per tick, maximising
:math:`T_{inc} n - n_{inc} t` exactly in integers (``AddDivisionEquality`` truncates and is not used
for G). A hint (e.g. the simulated annealing's schedule) may seed the search.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ortools.sat.python import cp_model

from ...budget import TimeBudget
from ...cpsat_solver import run_model
from ...result import Status
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

    def _build(self, t_max: float | None = None) -> tuple[cp_model.CpModel, dict[str, Any]]:
        """The model; with ``t_max`` (seconds), starts capped by :meth:`~.slots.SlotData.start_cap`."""
        d, p = self.data, self.data.problem
        cap = None if t_max is None else d.start_cap(t_max)
        nreq, keys = p.n_requests, d.keys()
        e = [[self.ticks(p.times.exec[i, s - 1]) for s in d.sizes] for i in range(nreq)]
        horizon = self.ticks(float(d.start_ub[-1])) + nreq
        m = cp_model.CpModel()
        w = {(i, c, s): m.NewBoolVar(f"w_{i}_{c}_{s}") for i in range(nreq) for c, s in keys}
        lead = {(i, c, s): m.NewBoolVar(f"l_{i}_{c}_{s}") for i in range(nreq) for c, s in keys}
        z = {(c, s): m.NewBoolVar(f"z_{c}_{s}") for c, s in keys}
        v = {(i, c, s): m.NewBoolVar(f"v_{i}_{c}_{s}") for i in range(nreq) for c, s in keys if d.may_meet(i, c, s)}
        dur = {c: m.NewIntVar(0, horizon, f"D_{c}") for c in range(1, nreq + 1)}
        top = [
            horizon if cap is None or q == nreq else min(horizon, int(cap[q] / self.res) + nreq + 1)
            for q in range(nreq + 1)
        ]
        start = [m.NewIntVar(0, top[q], f"S_{q}") for q in range(nreq + 1)]
        m.Add(start[0] == 0)
        for c in range(1, nreq + 1):
            m.Add(dur[c] == sum(e[i][s - 1] * lead[i, c, s] for i in range(nreq) for s in d.sizes if s <= c))
            m.Add(start[c] == start[c - 1] + dur[c])
        for i in range(nreq):
            m.AddExactlyOne(w[i, c, s] for c, s in keys)
        for c, s in keys:
            m.Add(sum(w[i, c, s] for i in range(nreq)) == s * z[c, s])
            m.Add(sum(lead[i, c, s] for i in range(nreq)) == z[c, s])
            order = d.order(s)
            for rank, i in enumerate(order):
                m.AddImplication(lead[i, c, s], w[i, c, s])
                # members are no slower than the leader
                m.AddBoolOr([w[i, c, s].Not()] + [lead[j, c, s] for j in order[rank:]])
                if rank > 0:  # leader count cut (slots docstring)
                    m.Add(
                        sum(w[j, c, s] for j in order[rank:])
                        <= min(s, nreq - rank) * sum(lead[j, c, s] for j in order[rank:])
                    )
            if p.capacity is not None:
                m.Add(sum(p.need[i] * w[i, c, s] for i in range(nreq)) <= int(p.capacity))
        for pos in range(1, nreq + 1):
            m.AddExactlyOne(z[c, s] for c, s in keys if c - s < pos <= c)
        scale = math.lcm(*d.sizes)
        for c in range(1, nreq + 1):  # the longest member is at least as long as the mean member
            m.Add(
                scale * dur[c]
                >= sum(scale // s * e[i][s - 1] * w[i, c, s] for i in range(nreq) for s in d.sizes if s <= c)
            )
        for (i, c, s), var in v.items():
            m.AddImplication(var, w[i, c, s])
            slo = d.slo_value(i)
            if slo < float("inf"):
                m.Add(start[c - s] + self.ticks(d.slo_time(i, s)) <= self.ticks(slo)).OnlyEnforceIf(var)
        t_expr = sum(e[i][s - 1] * var for (i, c, s), var in w.items()) + sum((nreq - c) * dur[c] for c in dur)
        if self.hint:
            self._add_hint(m, w, lead, z)
        return m, {"w": w, "n": sum(v.values()), "t": t_expr}

    def _add_hint(self, m: cp_model.CpModel, w: dict, lead: dict, z: dict) -> None:
        exec_ = self.data.problem.times.exec
        pos = 0
        chosen_w, chosen_l, chosen_z = set(), set(), set()
        for batch in self.hint or []:
            s = len(batch)
            pos += s
            chosen_z.add((pos, s))
            leader = max(batch, key=lambda i: (exec_[i, s - 1], self.data.order(s).index(i)))
            chosen_l.add((leader, pos, s))
            chosen_w.update((i, pos, s) for i in batch)
        for key, var in w.items():
            m.AddHint(var, key in chosen_w)
        for key, var in lead.items():
            m.AddHint(var, key in chosen_l)
        for key, var in z.items():
            m.AddHint(var, key in chosen_z)

    def _run(self, m: cp_model.CpModel, parts: dict[str, Any], budget: TimeBudget) -> SubResult:
        start = time.perf_counter()
        run = run_model(m, budget=budget, workers=self.threads or 2, log=self.log)
        wall = time.perf_counter() - start
        if run.status == Status.INFEASIBLE:
            return SubResult(status=Status.INFEASIBLE, wall=wall)
        if not run.found:
            # UNKNOWN: CP-SAT then reports a best bound of 0, which is no proof; no bound is claimed
            return SubResult(status=Status.TIME_LIMIT, wall=wall)
        ends: dict[int, list[int]] = {}
        for (i, c, _s), var in parts["w"].items():
            if run.value(var):
                ends.setdefault(c, []).append(i)
        batches = [sorted(ends[c]) for c in sorted(ends)]
        n = run.value(parts["n"])
        t = run.value(parts["t"]) * self.res
        return SubResult(
            status=run.status,
            batches=batches,
            n=n,
            t=t,
            objective=run.objective,
            bound=run.bound,
            wall=wall,
        )

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

    def parametric(self, n_inc: int, batches_inc: list[list[int]], budget: TimeBudget) -> SubResult:
        r"""Dinkelbach step at the rational :math:`\lambda = n_{inc} / T_{inc}` (per tick):
        maximise :math:`T_{inc} n - n_{inc} t` exactly in integers."""
        t_inc = self.tick_t(batches_inc)
        # only schedules with n - lambda t >= 0 matter (the incumbent has exactly 0 in ticks); t in
        # ticks is within N^2 / 2 ticks of t in seconds, a start within N / 2 (rounded durations)
        nreq = self.data.problem.n_requests
        m, parts = self._build(t_max=(self.data.meetable() / n_inc * t_inc + nreq * nreq) * self.res)
        m.Add(t_inc * parts["n"] - n_inc * parts["t"] >= 0)
        m.Maximize(t_inc * parts["n"] - n_inc * parts["t"])
        res = self._run(m, parts, budget)
        res.objective, res.bound = res.objective / t_inc, res.bound / t_inc
        res.info["lambda"] = n_inc / (t_inc * self.res)
        return res

    def min_t(self, n_min: int, budget: TimeBudget) -> SubResult:
        m, parts = self._build()
        if n_min > 0:
            m.Add(parts["n"] >= n_min)
        m.Minimize(parts["t"])
        res = self._run(m, parts, budget)
        res.objective, res.bound = res.objective * self.res, res.bound * self.res
        return res

    def max_n(self, budget: TimeBudget) -> SubResult:
        m, parts = self._build()
        m.Maximize(parts["n"])
        return self._run(m, parts, budget)

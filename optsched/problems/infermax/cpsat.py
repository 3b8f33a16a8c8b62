"""CP-SAT backend of the InferMax model (:mod:`.model`): native reified constraints, integer times.

Every conditional row of the model is an ``OnlyEnforceIf`` constraint, the quadratic prefill term and
the prefill-context term are ``AddMultiplicationEquality``, the longest decode context of a batch
(step-shape term ``decode.per_max_kv``) is ``AddMaxEquality`` over its ``kv_ij``, its started tiles
(``per_tile``) an integer pinned to the ceiling by two rows, and times are integers in units of ``10**-power`` seconds
(:func:`.data.integer_scaling`). The proven bound is CP-SAT's objective bound divided by the scale,
lowered by the rounding slack (0 for the shipped profiles, whose coefficients scale exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from ...budget import NO_LIMIT, TimeBudget
from ...cpsat_solver import run_model
from ...deadline import BuildStopped
from ...result import Status
from .data import ModelData, check_size, integer_scaling, request_batch_grid
from .model import Scaling
from .relax import add_count_fact
from .schedules import earliest_starts


@dataclass(kw_only=True)
class BackendResult:
    """What a backend returns to :func:`optsched.problems.infermax.solve.solve`.

    Attributes
    ----------
    status
        ``OPTIMAL``, ``FEASIBLE`` (incumbent, limit reached), ``INFEASIBLE``, ``UNSUPPORTED`` (a
        backend that cannot take this model) or ``UNKNOWN`` (neither a solution nor a proof).
    c, e
        Per (i, j) token counts and evictions of the incumbent (None without one).
    waits
        Per batch: the arrival it waits for, or None (:func:`.schedules.earliest_starts`; None when the
        model has no times).
    objective
        The incumbent's objective in seconds, evaluated with the exact float coefficients.
    bound
        Proven lower bound in seconds (None when unknown).
    message
        Why the backend cannot take the model (status ``UNSUPPORTED``).
    info
        Backend statistics for ``extra``.
    """

    status: Status
    c: list[list[int]] | None = None
    e: list[list[int]] | None = None
    waits: list[float | None] | None = None
    objective: float | None = None
    bound: float | None = None
    message: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class ModelBuilder:
    """Builds the CP-SAT model for one :class:`ModelData` (names follow the model docstring)."""

    def __init__(self, data: ModelData, scale: Scaling, budget: TimeBudget = NO_LIMIT) -> None:
        check_size(data, "CP-SAT model")
        self.data = data
        self.scale = scale
        self.budget = budget
        self.m = cp_model.CpModel()
        J = data.J
        mdl = self.m
        self.c = self._grid(lambda i, j: mdl.NewIntVar(0, min(data.C, data.U(i)), f"c_{i}_{j}"))
        self.cz = self._grid(lambda i, j: mdl.NewBoolVar(f"cz_{i}_{j}"))
        self.e = self._grid(self._evict_var)
        self.g = self._grid(lambda i, j: mdl.NewBoolVar(f"g_{i}_{j}"))
        self.d = self._grid(lambda i, j: mdl.NewBoolVar(f"d_{i}_{j}"))
        self.dg = self._grid(lambda i, j: mdl.NewBoolVar(f"dg_{i}_{j}"))
        self.mh = self._grid(lambda i, j: mdl.NewIntVar(0, data.U(i), f"mh_{i}_{j}"))
        self.mk = self._grid(lambda i, j: mdl.NewIntVar(0, data.U(i) - 1, f"m_{i}_{j}"))
        self.G = self._grid(lambda i, j: mdl.NewIntVar(0, data.output[i], f"G_{i}_{j}"))
        self.done = self._grid(lambda i, j: mdl.NewBoolVar(f"done_{i}_{j}"))
        self.pc = self._grid(lambda i, j: mdl.NewIntVar(0, min(data.P, data.U(i)), f"pc_{i}_{j}"))
        self.sq = self._grid(lambda i, j: mdl.NewIntVar(0, min(data.P, data.U(i)) ** 2, f"sq_{i}_{j}"))
        self.kv = self._grid(lambda i, j: mdl.NewIntVar(0, data.U(i) - 1, f"kv_{i}_{j}"))
        self.x = self._grid(self._context_var) if scale.coef.prefill_per_ctx else None
        self.y = [mdl.NewBoolVar(f"y_{j}") for j in range(J)]
        self.hp = [mdl.NewBoolVar(f"hp_{j}") for j in range(J)]
        self.hd = [mdl.NewBoolVar(f"hd_{j}") for j in range(J)]
        self.tl = [self._tiles(j) for j in range(J)] if data.coef.per_tile else None
        self.kvm = [self._longest_context(j) for j in range(J)] if data.coef.decode_per_max_kv else None
        self.mz: list[list[cp_model.IntVar]] = []  # per batch, when R_max binds
        for i in range(data.N):
            budget.check("CP-SAT model")
            self._request(i)
        for j in range(J):
            budget.check("CP-SAT model")
            self._batch(j)
        self._symmetry()
        self._redundant()
        self.T = [self._batch_time(j) for j in range(J)]
        self.add_objective()

    def _grid(self, make: Callable[[int, int], Any]) -> list[list[Any]]:
        return request_batch_grid(self.data, make, self.budget, "CP-SAT model")

    def _context_var(self, i: int, j: int) -> cp_model.IntVar:
        """x = pc * (mh - c): prefill tokens times the KV before the item (model docstring)."""
        top = min(self.data.P, self.data.U(i)) * (self.data.U(i) - 1)
        return self.m.NewIntVar(0, top, f"x_{i}_{j}")

    def _tiles(self, j: int) -> cp_model.IntVar:
        """tl_j = ceil(sum_i c_ij / t): t tl >= sum c and t tl <= sum c + t - 1 (model docstring)."""
        t, tokens = self.data.coef.token_tile, sum(self.c[i][j] for i in range(self.data.N))
        tl = self.m.NewIntVar(0, self.data.coef.tiles(self.data.C), f"tl_{j}")
        self.m.Add(t * tl >= tokens)
        self.m.Add(t * tl <= tokens + t - 1)
        return tl

    def _longest_context(self, j: int) -> cp_model.IntVar:
        """kvm_j = max_i kv_ij: the longest decode context of batch j (0 without decode items)."""
        kvm = self.m.NewIntVar(0, self.data.max_context(), f"kvm_{j}")
        self.m.AddMaxEquality(kvm, [self.kv[i][j] for i in range(self.data.N)])
        return kvm

    def _evict_var(self, i: int, j: int) -> cp_model.IntVar:
        if self.data.options.no_evict or j == 0:
            return self.m.NewConstant(0)
        return self.m.NewBoolVar(f"e_{i}_{j}")

    # ------------------------------------------------------------------ per request
    def _request(self, i: int) -> None:
        data, mdl = self.data, self.m
        I_i, O_i = data.prompt[i], data.output[i]
        for j in range(data.J):
            c, cz, e, g, d, dg = self.c[i][j], self.cz[i][j], self.e[i][j], self.g[i][j], self.d[i][j], self.dg[i][j]
            mh, m, G, done = self.mh[i][j], self.mk[i][j], self.G[i][j], self.done[i][j]
            m_prev = self.mk[i][j - 1] if j else 0
            G_prev = self.G[i][j - 1] if j else 0
            # cz = [c > 0]
            mdl.Add(c >= 1).OnlyEnforceIf(cz)
            mdl.Add(c == 0).OnlyEnforceIf(cz.Not())
            # (2)+(3) memory; an eviction happens before the batch's processing (see the model's note
            # on (4)); C13 an eviction needs KV
            mdl.Add(mh == c).OnlyEnforceIf(e)
            mdl.Add(mh == m_prev + c).OnlyEnforceIf(e.Not()) if j else mdl.Add(mh == c)
            if j:
                mdl.Add(m_prev >= 1).OnlyEnforceIf(e)
            mdl.Add(mh <= I_i + G_prev)  # row 3 of (3): no overrun past the (refill) prompt
            # C1 generation link
            mdl.Add(mh == I_i + G_prev).OnlyEnforceIf(g)
            mdl.Add(mh <= I_i + G_prev - 1).OnlyEnforceIf(g.Not())
            mdl.AddImplication(g, cz)
            mdl.Add(G == G_prev + g)
            # C2 completion and release
            mdl.Add(G >= O_i).OnlyEnforceIf(done)
            mdl.Add(G <= O_i - 1).OnlyEnforceIf(done.Not())
            mdl.Add(m == 0).OnlyEnforceIf(done)
            mdl.Add(m == mh).OnlyEnforceIf(done.Not())
            if j:
                mdl.AddImplication(self.done[i][j - 1], cz.Not())
                mdl.AddImplication(self.done[i][j - 1], done)
            # redundant invariant: m <= I_i + G - 1 (equality in decode)
            mdl.Add(m <= I_i + G - 1)
            mdl.Add(m_prev == I_i + G_prev - 1).OnlyEnforceIf(d)
            # phase: d_1 = 0; d_{j+1} = ((d_j and not e_j) or g_j) and not done_j
            if j == 0:
                mdl.Add(d == 0)
            if j + 1 < data.J:
                dn = self.d[i][j + 1]
                mdl.AddBoolOr([d, g]).OnlyEnforceIf(dn)
                mdl.AddBoolOr([e.Not(), g]).OnlyEnforceIf(dn)
                mdl.AddImplication(dn, done.Not())
                mdl.AddBoolOr([dn, e, done]).OnlyEnforceIf(d)
                mdl.AddBoolOr([dn, done]).OnlyEnforceIf(g)
            # dg = d and not e and cz (a decode item); pc = prefill tokens; sq = pc^2; kv = dg * m_prev
            mdl.AddImplication(dg, d)
            mdl.AddImplication(dg, cz)
            mdl.AddImplication(dg, e.Not())
            mdl.AddBoolOr([d.Not(), cz.Not(), e, dg])
            mdl.Add(self.pc[i][j] == c - dg)
            mdl.AddMultiplicationEquality(self.sq[i][j], [self.pc[i][j], self.pc[i][j]])
            if self.x is not None:
                mdl.AddMultiplicationEquality(self.x[i][j], [self.pc[i][j], mh - c])
            mdl.Add(self.kv[i][j] == m_prev).OnlyEnforceIf(dg)
            mdl.Add(self.kv[i][j] == 0).OnlyEnforceIf(dg.Not())
            # C9 no chunked prefill: a prefill item completes its prompt
            if data.options.no_chunk:
                mdl.AddBoolOr([cz.Not(), d, g])
            # C5 empty batches carry nothing
            mdl.AddImplication(cz, self.y[j])
            mdl.AddImplication(e, self.y[j])
            mdl.AddImplication(dg, self.hd[j])
        # (1) termination: the goal's tokens generated (done when the goal is O_i)
        mdl.Add(self.G[i][data.J - 1] >= data.goal[i]).OnlyEnforceIf(self.served(i))

    def served(self, i: int) -> list[Any]:
        """Literals under which request ``i`` must reach its goal (termination, R6-R8): none here
        (always); the goodput model (:mod:`.goodput`) serves only the requests it counts."""
        return []

    # ------------------------------------------------------------------ per batch
    def _batch(self, j: int) -> None:
        data, mdl, N = self.data, self.m, self.data.N
        # (5) with R1-R4: an empty batch holds nothing, a batch without prefill (decode) items has
        # no prefill tokens (decode items)
        mdl.Add(sum(self.c[i][j] for i in range(N)) <= data.C * self.y[j])
        mdl.Add(sum(self.pc[i][j] for i in range(N)) <= data.P * self.hp[j])
        mdl.Add(sum(self.dg[i][j] for i in range(N)) <= N * self.hd[j])
        if data.M is not None:
            mdl.Add(sum(self.mh[i][j] for i in range(N)) <= data.M * self.y[j])
        if data.R is not None and data.R < N:
            mz = [mdl.NewBoolVar(f"mz_{i}_{j}") for i in range(N)]
            for i in range(N):
                mdl.Add(self.mh[i][j] >= 1).OnlyEnforceIf(mz[i])
                mdl.Add(self.mh[i][j] == 0).OnlyEnforceIf(mz[i].Not())
            mdl.Add(sum(mz) <= data.R * self.y[j])  # (5) with R5
            self.mz.append(mz)
        mdl.AddBoolOr([self.cz[i][j] for i in range(N)]).OnlyEnforceIf(self.y[j])
        pre = []
        for i in range(N):
            p = mdl.NewBoolVar(f"pre_{i}_{j}")
            mdl.Add(p + self.dg[i][j] == self.cz[i][j])
            mdl.AddImplication(p, self.hp[j])
            pre.append(p)
        mdl.AddBoolOr(pre).OnlyEnforceIf(self.hp[j])
        mdl.AddBoolOr([self.dg[i][j] for i in range(N)]).OnlyEnforceIf(self.hd[j])
        mdl.AddBoolOr([self.hp[j], self.hd[j]]).OnlyEnforceIf(self.y[j])
        if j + 1 < data.J:
            mdl.AddImplication(self.y[j + 1], self.y[j])
        if data.options.no_hybrid:
            mdl.Add(self.hp[j] + self.hd[j] <= 1)

    def _redundant(self) -> None:
        """Per-request valid rows R6-R8 and the least batch counts (model docstring, C5)."""
        data, mdl, N, J = self.data, self.m, self.data.N, self.data.J
        for i in range(N):
            mdl.Add(sum(self.mh[i]) >= data.area(i)).OnlyEnforceIf(self.served(i))  # R6
            mdl.Add(sum(self.c[i]) >= data.reach(i)).OnlyEnforceIf(self.served(i))  # R8
            if self.mz:
                mdl.Add(sum(self.mz[j][i] for j in range(J)) >= data.goal[i]).OnlyEnforceIf(self.served(i))  # R7
        mdl.Add(sum(self.y) >= data.b_min)
        mdl.Add(sum(self.hp) >= data.bp_min)
        for p, B in data.count_facts:  # at most p prefill batches => more than B batches (relax.count_bound)
            add_count_fact(mdl, self.hp, self.y, p, B)

    def _symmetry(self) -> None:
        for a, b in self.data.symmetric_pairs:
            for j in range(self.data.J):
                self.m.AddImplication(self.done[b][j], self.done[a][j])

    # ------------------------------------------------------------------ objective
    def _batch_time(self, j: int) -> cp_model.LinearExpr:
        k, N = self.scale.coef, self.data.N
        return (
            k.base * self.y[j]
            + k.per_token * sum(self.c[i][j] for i in range(N))
            + k.prefill_bias * self.hp[j]
            + k.prefill_per_token * sum(self.pc[i][j] for i in range(N))
            + k.prefill_per_token_sq * sum(self.sq[i][j] for i in range(N))
            + k.decode_bias * self.hd[j]
            + k.decode_per_token * sum(self.dg[i][j] for i in range(N))
            + k.decode_per_kv * sum(self.kv[i][j] for i in range(N))
            + (k.prefill_per_ctx * sum(self.x[i][j] for i in range(N)) if self.x is not None else 0)
            + (k.per_tile * self.tl[j] if self.tl is not None else 0)
            + (k.decode_per_max_kv * self.kvm[j] if self.kvm is not None else 0)
        )

    def add_objective(self) -> None:
        data, mdl, J, N = self.data, self.m, self.data.J, self.data.N
        self.S = self.E = None
        if not data.needs_time:
            top = math.ceil(data.upper * self.scale.factor * (1 + 1e-9)) + 1
            mdl.Add(sum(self.T) <= top)  # UB cutoff
            mdl.Minimize(sum(self.T))
            if 0 < data.lower < math.inf:  # a proven bound (residency relaxation) as the objective's domain
                low = math.floor((data.lower - self.scale.slack) * self.scale.factor * (1 - 1e-12))
                mdl.Proto().objective.domain.extend([min(low, top), top])
            return
        cap = self.add_times()
        obj = data.options.objective
        if obj == "makespan":
            mdl.Minimize(self.E[J - 1])
            return
        F = [mdl.NewIntVar(0, cap, f"F_{i}") for i in range(N)]
        for i in range(N):
            for j in range(J):
                if obj == "latency":
                    event = self.done[i][j] if j == 0 else self._and(self.done[i][j], self.done[i][j - 1].Not())
                else:  # ttft: first token in batch j
                    event = self.g[i][j] if j == 0 else self._and(self.g[i][j], self._zero(self.G[i][j - 1]))
                mdl.Add(F[i] >= self.E[j]).OnlyEnforceIf(event)
        mdl.Minimize(sum(F))

    def add_times(self) -> int:
        """Start and end times S_j, E_j (C10), integers of the scaling; returns their upper end."""
        data, mdl, J, N = self.data, self.m, self.data.J, self.data.N
        cap = math.ceil(data.time_cap() * self.scale.factor * (1 + 1e-9)) + N + 2
        self.S = [mdl.NewIntVar(0, cap, f"S_{j}") for j in range(J)]
        self.E = [mdl.NewIntVar(0, cap, f"E_{j}") for j in range(J)]
        for j in range(J):
            mdl.Add(self.E[j] == self.S[j] + self.T[j])
            if j:
                mdl.Add(self.S[j] >= self.E[j - 1])
            for i in range(N):
                a = self.scale.to_int_time(data.arrival[i])
                if a > 0:
                    mdl.Add(self.S[j] >= a).OnlyEnforceIf(self.cz[i][j])
                    mdl.Add(self.S[j] >= a).OnlyEnforceIf(self.e[i][j])
        return cap

    def _and(self, a: Any, b: Any) -> cp_model.IntVar:
        z = self.m.NewBoolVar("")
        self.m.AddBoolAnd([a, b]).OnlyEnforceIf(z)
        self.m.AddBoolOr([a.Not(), b.Not(), z])
        return z

    def _zero(self, x: cp_model.IntVar) -> cp_model.IntVar:
        z = self.m.NewBoolVar("")
        self.m.Add(x == 0).OnlyEnforceIf(z)
        self.m.Add(x >= 1).OnlyEnforceIf(z.Not())
        return z

    def add_hint(self, c: list[list[int]], e: list[list[int]]) -> None:
        for i in range(self.data.N):
            for j in range(self.data.J):
                self.m.AddHint(self.c[i][j], c[i][j])
                self.m.AddHint(self.cz[i][j], int(c[i][j] > 0))
                if not self.data.options.no_evict and j:
                    self.m.AddHint(self.e[i][j], e[i][j])


def true_objective(data: ModelData, T_sec: list[float], E_sec: list[float] | None, F_sec: list[float] | None) -> float:
    """The objective in seconds from per-batch times (and end/finish times when timed)."""
    obj = data.options.objective
    if not data.needs_time:
        return math.fsum(T_sec)
    if obj == "makespan":
        assert E_sec is not None
        return E_sec[-1]
    assert F_sec is not None
    return objective_units(data, math.fsum(F_sec))


def objective_units(data: ModelData, value: float) -> float:
    """A value of the model's objective function in the objective's unit: for ``latency`` and
    ``ttft`` the model minimises the sum of the event times, and the objective is that sum less the
    constant sum of arrivals, over N (a bound maps the same way: the map is increasing)."""
    if data.options.objective == "makespan" or not data.needs_time:
        return value
    return (value - math.fsum(data.arrival)) / data.N


def solve_cpsat(
    data: ModelData, hint: tuple[list[list[int]], list[list[int]]] | None, budget: TimeBudget = NO_LIMIT
) -> BackendResult:
    """Build and solve the model with CP-SAT within ``budget`` (CP-SAT gets its time left, :func:`run_model`).

    A model larger than option ``max_cells``, or one not built within the budget, is not solved
    (status ``UNKNOWN``, ``info['stopped']`` says why).
    """
    scale = integer_scaling(data)
    try:
        b = ModelBuilder(data, scale, budget)
    except BuildStopped as exc:
        return BackendResult(status=Status.UNKNOWN, info={"stopped": str(exc)})
    if hint is not None:
        b.add_hint(*hint)
    opts = data.options
    run = run_model(b.m, budget=budget, workers=opts.threads or 2, log=opts.log)
    solver = run.solver
    info = {
        "cpsat_status": run.name,
        "scale_power": scale.power,
        "scale_exact": scale.exact,
        "rounding_slack": scale.slack,
        "variables": len(b.m.Proto().variables),
        "constraints": len(b.m.Proto().constraints),
        "branches": solver.NumBranches(),
    }
    if run.status == Status.INFEASIBLE:
        return BackendResult(status=Status.INFEASIBLE, info=info)
    bound = objective_units(data, run.bound / scale.factor - scale.slack)
    if not run.found:
        return BackendResult(status=Status.UNKNOWN, bound=bound if run.status != Status.ERROR else None, info=info)
    N, J = data.N, data.J
    c = [[solver.Value(b.c[i][j]) for j in range(J)] for i in range(N)]
    e = [[solver.Value(b.e[i][j]) for j in range(J)] for i in range(N)]
    T_sec = [_batch_seconds(data, solver, b, j) for j in range(J)]
    waits = E_sec = F_sec = None
    if b.S is not None:  # the earliest starts, not the solver's S (C10 bounds S from below only)
        waits, E_sec = earliest_starts(data, c, e, T_sec)
        F_sec = _event_times(data, solver, b, E_sec)
    objective = true_objective(data, T_sec, E_sec, F_sec)
    return BackendResult(status=run.status, c=c, e=e, waits=waits, objective=objective, bound=bound, info=info)


def _batch_seconds(data: ModelData, solver: cp_model.CpSolver, b: ModelBuilder, j: int) -> float:
    k, N, v = data.coef, data.N, solver.Value
    return (
        k.base * v(b.y[j])
        + k.per_token * sum(v(b.c[i][j]) for i in range(N))
        + k.prefill_bias * v(b.hp[j])
        + k.prefill_per_token * sum(v(b.pc[i][j]) for i in range(N))
        + k.prefill_per_token_sq * sum(v(b.sq[i][j]) for i in range(N))
        + k.decode_bias * v(b.hd[j])
        + k.decode_per_token * sum(v(b.dg[i][j]) for i in range(N))
        + k.decode_per_kv * sum(v(b.kv[i][j]) for i in range(N))
        + (k.prefill_per_ctx * sum(v(b.x[i][j]) for i in range(N)) if b.x is not None else 0.0)
        + (k.per_tile * v(b.tl[j]) if b.tl is not None else 0.0)
        + (k.decode_per_max_kv * v(b.kvm[j]) if b.kvm is not None else 0.0)
    )


def _event_times(data: ModelData, solver: cp_model.CpSolver, b: ModelBuilder, E_sec: list[float]) -> list[float]:
    """Finish (latency) or first-token (ttft) time of every request from the solution."""
    out = []
    for i in range(data.N):
        G = [solver.Value(b.G[i][j]) for j in range(data.J)]
        target = data.output[i] if data.options.objective == "latency" else 1
        out.append(E_sec[next(j for j in range(data.J) if G[j] >= target)])
    return out

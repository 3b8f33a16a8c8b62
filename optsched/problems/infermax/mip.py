r"""MIP backend of the InferMax model (:mod:`.model`) through PuLP: HiGHS, CBC or Gurobi.

Every conditional row of the model is written with per-request big-M constants taken from the
variable bounds (:math:`U_i = I_i + O_i - 1`, :math:`I_i + O_i`), as the paper's (6) does for (2);
products are exact McCormick rows of a binary and a bounded integer:

- :math:`kv_{ij} = dg_{ij}\, m_{i,j-1}`: :math:`kv \le (U_i - 1) dg`, :math:`kv \le m_{i,j-1}`,
  :math:`kv \ge m_{i,j-1} - (U_i - 1)(1 - dg)`;
- :math:`sq_{ij} = pc_{ij}^2` through the binary expansion :math:`pc = \sum_b 2^b z_b`,
  :math:`sq = \sum_b 2^b w_b`, :math:`w_b = z_b \cdot pc` (McCormick), exact at every integer;
- :math:`x_{ij} = pc_{ij} (\hat m_{ij} - c_{ij})` (when :math:`k_{pc} > 0`) over the same bits:
  :math:`x = \sum_b 2^b v_b`, :math:`v_b = z_b \cdot (\hat m - c)` (McCormick, :math:`0 \le \hat m - c
  \le U_i - 1`), exact at every integer;
- the step-shape terms (when their coefficient is > 0): the started tiles :math:`tl_j`, an
  integer with :math:`t\, tl_j \ge \sum_i c_{ij}` and :math:`t\, tl_j \le \sum_i c_{ij} + t - 1`
  (exact); the longest decode context :math:`kvm_j \ge kv_{ij}` for every i, exact at the optimum
  (every objective is non-decreasing in the batch times, :math:`k_{mk} > 0`: the module docstring
  of :mod:`.model`); the batch times of a solution take :math:`\max_i kv_{ij}` itself;
- :math:`m_{ij} = \hat m_{ij} (1 - done_{ij})`, :math:`\hat m_{ij} = (1 - e_{ij})(m_{i,j-1} + c_{ij})`;
- :math:`mz_{ij} = [\hat m_{ij} > 0]` both ways, as in CP-SAT: :math:`U_i mz \ge \hat m`,
  :math:`mz \le \hat m` (:math:`\hat m` is integral at every integer point). With the first direction
  alone the model is still exact, but HiGHS 1.14's presolve returned a point violating R5
  (:math:`\sum_i mz_{ij} \le R_{max} y_j`) and declared a feasible :math:`R_{max} = 1` model
  infeasible (tests/problems/infermax/test_infermax_mip.py, ``test_bias_dominated_max_running_1``).

The objective is in microseconds (better conditioned than seconds) with the float coefficients;
gaps are set to 1e-10 (relative) and 1e-12 s (absolute), so "optimal" is optimal up to the solver's floating-point
tolerances. The proven bound is HiGHS's ``mip_dual_bound`` / Gurobi's ``ObjBound``; CBC reports none short of
optimality. Warm start: CBC and Gurobi take the warm-start schedule's token counts and evictions
(``warmStart``); PuLP's HiGHS interface has no MIP start. A warm-start schedule is a point of the
model (up to renaming identical requests), so "infeasible" from HiGHS with one is a presolve fault:
the model is solved again with presolve off (:func:`optsched.mipsolvers.solve_model`,
``info['presolve_off']``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pulp

from ...bounds import batch_counts
from ...budget import NO_LIMIT, TimeBudget
from ...deadline import BuildStopped
from ...instance import Instance
from ...mipsolvers import HANDOVER_PER_BUILD, licence_refused, pulp_solver, solve_model, solver_budget
from ...result import Bound, Status
from .cpsat import BackendResult, objective_units, true_objective
from .data import ModelData, build_data, check_size, request_batch_grid
from .model import InferMaxOptions
from .schedules import earliest_starts, serial_schedule

__all__ = ["lp_relaxation_bound", "solve_mip"]

#: A MIP cell (PuLP objects, the binary expansion of the prefill square) costs about ten times a
#: CP-SAT cell to build (N = 64, J = 349: 150 s against 11.6 s), so option ``max_cells`` counts it ten times.
MIP_CELL_COST = 10

GAP_REL = 1e-10
#: The MIP works in microseconds (coefficients from about 1e-3 to 1e4: better conditioned than seconds).
UNIT = 1e6
GAP_ABS = 1e-12 * UNIT


class MipModel:
    """The PuLP model for one :class:`ModelData` (names follow the model docstring)."""

    def __init__(self, data: ModelData, relax: bool = False, budget: TimeBudget = NO_LIMIT) -> None:
        check_size(data, "MIP model", MIP_CELL_COST)
        self.data = data
        self.relax = relax
        self.budget = budget
        self.p = pulp.LpProblem("infermax", pulp.LpMinimize)
        N, J = data.N, data.J
        self._n = 0
        self.c = self._grid(lambda i, j: self._int(0, min(data.C, data.U(i))))
        self.cz = self._grid(lambda i, j: self._bin())
        self.e = self._grid(lambda i, j: 0 if data.options.no_evict or j == 0 else self._bin())
        self.g = self._grid(lambda i, j: self._bin())
        self.d = self._grid(lambda i, j: 0 if j == 0 else self._bin())
        self.dg = self._grid(lambda i, j: self._bin())
        self.mh = self._grid(lambda i, j: self._cont(0, data.U(i)))
        self.mk = self._grid(lambda i, j: self._cont(0, data.U(i) - 1))
        self.G = self._grid(lambda i, j: self._cont(0, data.output[i]))
        self.done = self._grid(lambda i, j: self._bin())
        self.pc = self._grid(lambda i, j: self._int(0, min(data.P, data.U(i))))
        self.bits: dict[tuple[int, int], list[Any]] = {}  # binary expansion of pc, per (i, j)
        self.sq = self._grid(lambda i, j: self._square(self.pc[i][j], min(data.P, data.U(i)), (i, j)))
        self.kv = self._grid(lambda i, j: self._cont(0, data.U(i) - 1))
        self.y = [self._bin() for _ in range(J)]
        self.hp = [self._bin() for _ in range(J)]
        self.hd = [self._bin() for _ in range(J)]
        self.mz: list[list[Any]] = []  # per batch, when R_max binds
        for j in range(J):
            budget.check("MIP model")
            self._batch(j)
        for i in range(N):
            budget.check("MIP model")
            self._request(i)
        for a, b in data.symmetric_pairs:
            for j in range(J):
                self.p += self.done[b][j] <= self.done[a][j]
        for i in range(N):  # R6-R8
            self.p += pulp.lpSum(self.mh[i]) >= data.area(i)
            self.p += pulp.lpSum(self.c[i]) >= data.reach(i)
            if self.mz:
                self.p += pulp.lpSum(self.mz[j][i] for j in range(J)) >= data.goal[i]
        self.p += pulp.lpSum(self.y) >= data.b_min
        self.p += pulp.lpSum(self.hp) >= data.bp_min
        self.x = None
        if data.coef.prefill_per_ctx:  # x = pc * (mh - c) over pc's bits (module docstring)
            self.x = self._grid(
                lambda i, j: self._times_bits(self.bits[i, j], self.mh[i][j] - self.c[i][j], data.U(i) - 1)
            )
        self.tl = [self._tiles(j) for j in range(J)] if data.coef.per_tile else None
        self.kvm = [self._longest_context(j) for j in range(J)] if data.coef.decode_per_max_kv else None
        self.T = [self._batch_time(j) for j in range(J)]
        self._objective()

    # ------------------------------------------------------------------ variables
    def _grid(self, make: Callable[[int, int], Any]) -> list[list[Any]]:
        return request_batch_grid(self.data, make, self.budget, "MIP model")

    def _name(self, kind: str) -> str:
        self._n += 1
        return f"{kind}{self._n}"

    def _int(self, lo: int, hi: int) -> pulp.LpVariable:
        cat = pulp.LpContinuous if self.relax else pulp.LpInteger
        return self.p.add_variable(self._name("n"), lo, hi, cat)

    def _bin(self) -> pulp.LpVariable:
        cat = pulp.LpContinuous if self.relax else pulp.LpInteger
        return self.p.add_variable(self._name("b"), 0, 1, cat)

    def _cont(self, lo: float, hi: float | None) -> pulp.LpVariable:
        return self.p.add_variable(self._name("x"), lo, hi, pulp.LpContinuous)

    def _square(self, x: pulp.LpVariable, hi: int, cell: tuple[int, int]) -> Any:
        """An expression equal to x**2 at every integer x in [0, hi] (binary expansion, kept in
        ``self.bits[cell]`` for :meth:`_times_bits`)."""
        if hi <= 1:
            self.bits[cell] = [x]
            return x
        z = [self._bin() for _ in range(hi.bit_length())]
        self.p += x == pulp.lpSum((1 << b) * z[b] for b in range(len(z)))
        self.bits[cell] = z
        return self._times_bits(z, x, hi)

    def _times_bits(self, z: list[Any], y: Any, hi: float) -> Any:
        """An expression equal to (sum_b 2^b z_b) * y for binaries z and 0 <= y <= hi (McCormick)."""
        w = [self._cont(0, hi) for _ in z]
        for b, zb in enumerate(z):
            self.p += w[b] <= hi * zb
            self.p += w[b] <= y
            self.p += w[b] >= y - hi * (1 - zb)
        return pulp.lpSum((1 << b) * w[b] for b in range(len(z)))

    def _tiles(self, j: int) -> pulp.LpVariable:
        """tl_j = ceil(sum_i c_ij / t) (module docstring)."""
        t, tokens = self.data.coef.token_tile, pulp.lpSum(self.c[i][j] for i in range(self.data.N))
        tl = self._int(0, self.data.coef.tiles(self.data.C))
        self.p += t * tl >= tokens
        self.p += t * tl <= tokens + t - 1
        return tl

    def _longest_context(self, j: int) -> pulp.LpVariable:
        """kvm_j >= kv_ij for every i (exact at the optimum, module docstring)."""
        kvm = self._cont(0, self.data.max_context())
        for i in range(self.data.N):
            self.p += kvm >= self.kv[i][j]
        return kvm

    # ------------------------------------------------------------------ per request
    def _request(self, i: int) -> None:
        data, p = self.data, self.p
        I_i, O_i, U = data.prompt[i], data.output[i], data.U(i)
        big = I_i + O_i
        for j in range(data.J):
            c, cz, e, g, d, dg = self.c[i][j], self.cz[i][j], self.e[i][j], self.g[i][j], self.d[i][j], self.dg[i][j]
            mh, m, G, done = self.mh[i][j], self.mk[i][j], self.G[i][j], self.done[i][j]
            m_prev = self.mk[i][j - 1] if j else 0
            G_prev = self.G[i][j - 1] if j else 0
            done_prev = self.done[i][j - 1] if j else 0
            p += c >= cz
            p += c <= min(data.C, U) * cz
            # (2)+(3), (4), C13
            p += mh <= c + U * (1 - e)
            p += mh >= c
            p += mh <= m_prev + c
            p += mh >= m_prev + c - U * e
            p += cz <= 1 - done_prev
            if j:
                p += m_prev >= e
                p += done >= done_prev
            p += mh <= I_i + G_prev
            # C1 generation link
            p += mh >= I_i + G_prev - big * (1 - g)
            p += mh <= I_i + G_prev - 1 + g
            p += g <= cz
            p += G == G_prev + g
            # C2 completion and release
            p += G >= O_i * done
            p += G <= O_i - 1 + done
            p += m <= U * (1 - done)
            p += m <= mh
            p += m >= mh - U * done
            p += m <= I_i + G - 1
            if j:
                p += m_prev >= I_i + G_prev - 1 - big * (1 - d)
            if j + 1 < data.J:  # d_{j+1} = ((d and not e) or g) and not done; de = d and not e
                dn = self.d[i][j + 1]
                de = self._cont(0, 1)
                p += de <= d
                p += de <= 1 - e
                p += de >= d - e
                p += dn <= de + g
                p += dn <= 1 - done
                p += dn >= de - done
                p += dn >= g - done
            p += dg <= d
            p += dg <= cz
            p += dg <= 1 - e
            p += dg >= d + cz - e - 1
            p += self.pc[i][j] == c - dg
            kv = self.kv[i][j]
            p += kv <= (U - 1) * dg
            p += kv <= m_prev
            p += kv >= m_prev - (U - 1) * (1 - dg)
            if data.options.no_chunk:
                p += g >= cz - dg
            p += self.y[j] >= cz
            p += self.y[j] >= e
            p += self.hp[j] >= cz - dg
            p += self.hd[j] >= dg
        p += self.G[i][data.J - 1] >= data.goal[i]  # (1): the goal's tokens (done when it is O_i)

    # ------------------------------------------------------------------ per batch
    def _batch(self, j: int) -> None:
        data, p, N = self.data, self.p, self.data.N
        # (5) with R1-R5
        p += pulp.lpSum(self.c[i][j] for i in range(N)) <= data.C * self.y[j]
        p += pulp.lpSum(self.pc[i][j] for i in range(N)) <= data.P * self.hp[j]
        p += pulp.lpSum(self.dg[i][j] for i in range(N)) <= N * self.hd[j]
        if data.M is not None:
            p += pulp.lpSum(self.mh[i][j] for i in range(N)) <= data.M * self.y[j]
        if data.R is not None and data.R < N:
            mz = [self._bin() for _ in range(N)]
            for i in range(N):  # mz = [mh > 0] exactly, as in CP-SAT (mh is integral)
                p += data.U(i) * mz[i] >= self.mh[i][j]
                p += mz[i] <= self.mh[i][j]
            p += pulp.lpSum(mz) <= data.R * self.y[j]
            self.mz.append(mz)
        p += self.y[j] <= pulp.lpSum(self.cz[i][j] for i in range(N))
        p += self.y[j] <= self.hp[j] + self.hd[j]
        p += self.hp[j] <= pulp.lpSum(self.cz[i][j] - self.dg[i][j] for i in range(N))
        p += self.hd[j] <= pulp.lpSum(self.dg[i][j] for i in range(N))
        if j + 1 < data.J:
            p += self.y[j + 1] <= self.y[j]
        if data.options.no_hybrid:
            p += self.hp[j] + self.hd[j] <= 1

    def _batch_time(self, j: int) -> Any:
        k, N = self.data.coef, self.data.N
        return UNIT * (
            k.base * self.y[j]
            + k.per_token * pulp.lpSum(self.c[i][j] for i in range(N))
            + k.prefill_bias * self.hp[j]
            + k.prefill_per_token * pulp.lpSum(self.pc[i][j] for i in range(N))
            + k.prefill_per_token_sq * pulp.lpSum(self.sq[i][j] for i in range(N))
            + k.decode_bias * self.hd[j]
            + k.decode_per_token * pulp.lpSum(self.dg[i][j] for i in range(N))
            + k.decode_per_kv * pulp.lpSum(self.kv[i][j] for i in range(N))
            + (k.prefill_per_ctx * pulp.lpSum(self.x[i][j] for i in range(N)) if self.x is not None else 0)
            + (k.per_tile * self.tl[j] if self.tl is not None else 0)
            + (k.decode_per_max_kv * self.kvm[j] if self.kvm is not None else 0)
        )

    def _objective(self) -> None:
        data, p, J, N = self.data, self.p, self.data.J, self.data.N
        self.S = self.E = None
        if not data.needs_time:
            p += pulp.lpSum(self.T)
            return
        cap = UNIT * (data.time_cap() * (1 + 1e-9) + 1e-9)
        self.S = [self._cont(0, cap) for _ in range(J)]
        self.E = [self._cont(0, cap) for _ in range(J)]
        for j in range(J):
            p += self.E[j] == self.S[j] + self.T[j]
            if j:
                p += self.S[j] >= self.E[j - 1]
            for i in range(N):
                if data.arrival[i] > 0:
                    p += self.S[j] >= UNIT * data.arrival[i] * self.cz[i][j]
                    if not isinstance(self.e[i][j], int):
                        p += self.S[j] >= UNIT * data.arrival[i] * self.e[i][j]
        obj = data.options.objective
        if obj == "makespan":
            p += self.E[J - 1]
            return
        F = [self._cont(0, cap) for _ in range(N)]
        for i in range(N):
            if obj == "ttft":
                st = [self._bin() for _ in range(J)]
                for j in range(J):
                    p += st[j] <= self.G[i][j]
                    p += data.output[i] * st[j] >= self.G[i][j]
                events = [st[0]] + [st[j] - st[j - 1] for j in range(1, J)]
            else:
                events = [self.done[i][0]] + [self.done[i][j] - self.done[i][j - 1] for j in range(1, J)]
            for j in range(J):
                p += F[i] >= self.E[j] - cap * (1 - events[j])
        p += pulp.lpSum(F)

    def set_warm_start(self, c: list[list[int]], e: list[list[int]]) -> None:
        for i in range(self.data.N):
            for j in range(self.data.J):
                self.c[i][j].setInitialValue(c[i][j])
                self.cz[i][j].setInitialValue(int(c[i][j] > 0))
                if not isinstance(self.e[i][j], int):
                    self.e[i][j].setInitialValue(e[i][j])


def _solver(data: ModelData, warm: bool, budget: TimeBudget, relax: bool = False) -> pulp.LpSolver:
    opts: InferMaxOptions = data.options
    return pulp_solver(
        "highs" if relax else opts.solver,
        budget=budget,
        threads=opts.threads,
        msg=opts.log,
        gap_rel=GAP_REL,
        gap_abs=GAP_ABS,
        mip=not relax,
        warm_start=warm,
    )


def _val(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) else float(pulp.value(x) or 0.0)


def _bound(prob: pulp.LpProblem, solver: pulp.LpSolver, optimal: bool) -> float | None:
    if isinstance(solver, pulp.HiGHS):
        return float(prob.solverModel.getInfo().mip_dual_bound) / UNIT
    if isinstance(solver, pulp.GUROBI):
        return float(prob.solverModel.ObjBound) / UNIT
    return float(pulp.value(prob.objective)) / UNIT if optimal else None


def solve_mip(
    data: ModelData, hint: tuple[list[list[int]], list[list[int]]] | None, budget: TimeBudget = NO_LIMIT
) -> BackendResult:
    """Build and solve the model as a MIP with the backend named by ``data.options.solver``, within
    ``budget`` (as :func:`.cpsat.solve_cpsat`); the solver is given the time left after the
    expected hand-over of the model (:func:`optsched.mipsolvers.solver_budget`) and is not started
    when none is left."""
    start = time.perf_counter()
    try:
        mip = MipModel(data, budget=budget)
        budget.check("MIP model")  # the last loops and the objective are built
    except BuildStopped as exc:
        return BackendResult(status=Status.UNKNOWN, info={"stopped": str(exc)})
    built = time.perf_counter() - start
    solve_by = solver_budget(budget, built)
    if solve_by.expired():
        return BackendResult(
            status=Status.UNKNOWN,
            info={
                "stopped": f"MIP not solved: {budget.left(0.01):.3g} s left, handing the model over "
                f"takes about {HANDOVER_PER_BUILD * built:.3g} s"
            },
        )
    if hint is not None:
        mip.set_warm_start(*hint)
    solver = _solver(data, warm=hint is not None, budget=solve_by)
    info: dict[str, Any] = {"variables": len(mip.p.variables()), "constraints": len(mip.p.constraints())}
    try:
        with _stdout_to_stderr(data.options.log):
            # The hint's schedule (or its renaming of identical requests) is a point of the model.
            code, note = solve_model(mip.p, solver, known_feasible=hint is not None, budget=solve_by)
    except pulp.PulpSolverError as exc:
        return _unsupported(exc, info)
    except Exception as exc:  # gurobipy raises its own GurobiError
        if licence_refused(exc):
            return _unsupported(exc, info)
        raise
    status = pulp.LpStatus[code]
    info["mip_status"] = status
    if note is not None:
        info["presolve_off"] = note
    sol = mip.p.sol_status
    has_solution = sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if status == "Infeasible":
        return BackendResult(status=Status.INFEASIBLE, info=info)
    optimal = status == "Optimal" and sol == pulp.LpSolutionOptimal
    bound = _bound(mip.p, solver, optimal)
    bound = None if bound is None else objective_units(data, bound)
    if not has_solution:
        return BackendResult(status=Status.UNKNOWN, bound=bound, info=info)
    N, J = data.N, data.J
    c = [[round(_val(mip.c[i][j])) for j in range(J)] for i in range(N)]
    e = [[round(_val(mip.e[i][j])) for j in range(J)] for i in range(N)]
    T_sec = [_batch_seconds(data, mip, j) for j in range(J)]
    waits = E_sec = F_sec = None
    if mip.S is not None:  # the earliest starts, not the solver's S (C10 bounds S from below only)
        waits, E_sec = earliest_starts(data, c, e, T_sec)
        F_sec = _event_times(data, mip, E_sec)
    objective = true_objective(data, T_sec, E_sec, F_sec)
    return BackendResult(
        status=Status.OPTIMAL if optimal else Status.FEASIBLE,
        c=c,
        e=e,
        waits=waits,
        objective=objective,
        bound=bound,
        info=info,
    )


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """Send the solver's log (written by C code to file descriptor 1) to stderr while active."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _unsupported(exc: Exception, info: dict[str, Any]) -> BackendResult:
    message = (
        f"the MIP solver refused the model ({exc}); with gurobipy's restricted licence the size limit "
        f"is 2000 variables and 2000 constraints (this model: {info['variables']} variables, "
        f"{info['constraints']} constraints). Use --solver cpsat or highs."
    )
    return BackendResult(status=Status.UNSUPPORTED, message=message, info=info)


def _batch_seconds(data: ModelData, mip: MipModel, j: int) -> float:
    """Batch time from the rounded solution (integers, so the squares are exact)."""
    k, N = data.coef, data.N
    c = [round(_val(mip.c[i][j])) for i in range(N)]
    dg = [round(_val(mip.dg[i][j])) for i in range(N)]
    e = [round(_val(mip.e[i][j])) for i in range(N)]
    m_prev = [round(_val(mip.mk[i][j - 1])) if j else 0 for i in range(N)]
    pc = [c[i] - dg[i] for i in range(N)]
    cached = [0 if e[i] else m_prev[i] for i in range(N)]  # the KV a prefill item's chunk attends to
    if not any(c):
        return 0.0
    return (
        k.base
        + k.per_token * sum(c)
        + (k.prefill_bias if any(pc) else 0.0)
        + k.prefill_per_token * sum(pc)
        + k.prefill_per_token_sq * sum(x * x for x in pc)
        + (k.decode_bias if any(dg) else 0.0)
        + k.decode_per_token * sum(dg)
        + k.decode_per_kv * sum(dg[i] * m_prev[i] for i in range(N))
        + k.prefill_per_ctx * sum(pc[i] * cached[i] for i in range(N))
        + k.per_tile * k.tiles(sum(c))
        + k.decode_per_max_kv * max(dg[i] * m_prev[i] for i in range(N))
    )


def _event_times(data: ModelData, mip: MipModel, E_sec: list[float]) -> list[float]:
    out = []
    for i in range(data.N):
        G = [round(_val(mip.G[i][j])) for j in range(data.J)]
        target = data.output[i] if data.options.objective == "latency" else 1
        out.append(E_sec[next(j for j in range(data.J) if G[j] >= target)])
    return out


def lp_relaxation_bound(
    instance: Instance, options: Mapping[str, Any] | InferMaxOptions, budget: TimeBudget = NO_LIMIT
) -> Bound | None:
    """The LP relaxation of the MIP over the proven horizon of the serial schedule (HiGHS), within
    ``budget``.

    Only an LP solved to optimality bounds the optimum: when it is not built (option ``max_cells``,
    checked first against N times the least batch count of :func:`optsched.bounds.batch_counts`,
    at most the horizon J, before the serial schedule is built), stops at the time limit or gives
    no positive value (the big-M links of the per-request objectives let a fractional point finish
    every request at time 0), there is no bound and None is returned.
    """
    from ...result import replayed_objective

    opts = InferMaxOptions.parse(options)
    if len(instance.requests) * batch_counts(instance)[0] * MIP_CELL_COST > opts.max_cells:
        return None  # J is at least the least batch count: the model would not be built
    sched = serial_schedule(instance, no_chunk=opts.no_chunk)
    if budget.expired():
        return None
    mk = replayed_objective(instance, sched, "makespan")[0]
    val = replayed_objective(instance, sched, opts.objective)[0]
    data = build_data(instance, opts, mk, val, 0)
    try:
        mip = MipModel(data, relax=True)
    except BuildStopped:
        return None
    solver = _solver(data, warm=False, budget=budget, relax=True)
    mip.p.solve(solver)
    if mip.p.sol_status != pulp.LpSolutionOptimal:  # PuLP reports a stopped HiGHS as status "Optimal"
        return None
    value = objective_units(data, float(pulp.value(mip.p.objective)) / UNIT)
    if value <= 0.0:
        return None
    return Bound(
        "lp-relaxation",
        value,
        data.horizon_proven,
        f"LP relaxation of the MIP over J = {data.J} batches ({data.horizon_note})",
    )

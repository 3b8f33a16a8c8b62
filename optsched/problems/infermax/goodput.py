r"""InferMax with the goodput objective: the most requests meeting their SLOs, maximised exactly.

Goodput is the number of requests that finish and meet every SLO they carry
(:attr:`optsched.metrics.RequestOutcome.meets_slo`; the instance's ``slo`` fields or the
``--slo-ttft`` / ``--slo-tpot`` transforms). :func:`solve_goodput` runs, within the time limit:

1. the candidates (:func:`.candidates.initial_candidates`: every policy and ``serial``, replayed;
   the best is the one of most goodput);
2. the proven upper bound of :mod:`.goodput_bounds` (requests lost alone, windows);
3. unless a candidate meets that bound, the CP-SAT model below (``solver`` ``cpsat``); its schedule
   is replayed, and the replayed goodput must be at least the solver's own value.

The model (:class:`GoodputBuilder`) is the InferMax model of :mod:`.model` over the requests that
carry an SLO and are not lost alone, with one indicator :math:`met_i` per request:

- :math:`met_i \Rightarrow` request i finishes within J batches (termination and R6-R8 only under
  :math:`met_i`); :math:`\neg met_i \Rightarrow c_{ij} = e_{ij} = 0` for every j (it is not served in
  the model);
- :math:`FT_i = E_j` where i generates its first token, :math:`F_i = E_j` where it finishes (start
  and end times of C10, with waits: a batch may start later than the previous one ends);
- :math:`met_i \Rightarrow FT_i \le a_i + \tau_i`, :math:`F_i - FT_i \le \pi_i (O_i - 1)`,
  :math:`F_i \le a_i + \epsilon_i` (targets loosened by the replay's tolerance ``TIME_RTOL``);
- maximise :math:`\sum_i met_i`.

The schedule is the model's batches at the solver's start times, followed by
:func:`.schedules.serial_completion` of every request left (lost, or without an SLO).

Exactness. Take an optimal schedule and drop every item and eviction of the requests that miss
their SLOs (or carry none), keeping each remaining batch's *end* time by starting it later: it still
starts after the previous end and after its requests' arrivals, since batch times only shrink when
items are dropped ((F2) of :mod:`optsched.bounds`), and C, P, M, R_max only loosen. Every kept
request has the same first-token and finish times, so it still meets its SLOs. So some optimal
schedule's met requests are served by batches that all end by
:math:`H = \max_i D_i` (:math:`D_i` the latest finish meeting the SLOs, :mod:`.goodput_bounds`)
and start at or after the earliest arrival :math:`a_{min}`; each costs at least the least batch time
:math:`t_{min}`, so there are at most :math:`J = \lfloor (H - a_{min}) / t_{min} \rfloor` of them
(and at most :math:`\sum_i (I_i + O_i - 1)` without evictions): the model over J batches contains
it, and the requests it drops (no SLO: always met once served) are served by the completion.
A request with only a TTFT target is judged at its first token: with evictions allowed the model
asks for its first token only (goal 1, as the first-token model of :mod:`.model`; in the schedule
above, evict it in the batch after its first token, which only frees memory, and drop its later
items), so :math:`D_i = a_i + \tau_i`; without evictions it must finish, and the batches after H
serve only such requests, at least one token each, so J grows by their tokens. The horizon is
proven without evictions, and with them when every :math:`D_i` is finite. Without evictions J is
also at most the model's tokens :math:`\sum_i (I_i + O_i - 1)`.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from ...budget import NO_LIMIT, TimeBudget
from ...costmodel import Coefficients
from ...cpsat_solver import run_model
from ...deadline import BuildStopped
from ...instance import Instance
from ...metrics import TIME_RTOL
from ...result import SolveResult, Status
from ...schedule import Schedule, replay
from .candidates import GOODPUT_FIRST_POLICIES, initial_candidates
from .cpsat import ModelBuilder
from .data import ModelData, fits, instance_fields, integer_scaling
from .goodput_bounds import (
    BOUND_SHARE,
    RequestFacts,
    SloArrays,
    alive_requests,
    goodput_upper_bound,
    request_facts,
    require_slos,
    slo_arrays,
)
from .model import SCALE_MIN_REQUESTS, InferMaxInputError, InferMaxOptions, Scaling
from .schedules import schedule_from_solution, serial_completion

__all__ = ["GoodputBuilder", "goodput_model_data", "solve_goodput"]


class GoodputBuilder(ModelBuilder):
    """The CP-SAT model of the module docstring for ``data`` (the requests it serves) and ``slo``."""

    def __init__(self, data: ModelData, scale: Scaling, slo: SloArrays, budget: TimeBudget = NO_LIMIT) -> None:
        self.slo = slo
        self.met: dict[int, cp_model.IntVar] = {}
        super().__init__(data, scale, budget)

    def served(self, i: int) -> list[Any]:
        if i not in self.met:
            self.met[i] = self.m.NewBoolVar(f"met_{i}")
        return [self.met[i]]

    def add_objective(self) -> None:
        cap = self.add_times()
        data, mdl, J = self.data, self.m, self.data.J
        loose, factor = 1 + TIME_RTOL, self.scale.factor
        for i in range(data.N):
            met = self.served(i)[0]
            for j in range(J):
                mdl.Add(self.c[i][j] == 0).OnlyEnforceIf(met.Not())
                mdl.Add(self.e[i][j] == 0).OnlyEnforceIf(met.Not())
            FT, F = mdl.NewIntVar(0, cap, f"FT_{i}"), mdl.NewIntVar(0, cap, f"F_{i}")
            for j in range(J):
                first = self.g[i][j] if j == 0 else self._and(self.g[i][j], self._zero(self.G[i][j - 1]))
                finish = self.done[i][j] if j == 0 else self._and(self.done[i][j], self.done[i][j - 1].Not())
                mdl.Add(FT == self.E[j]).OnlyEnforceIf(first)
                mdl.Add(F == self.E[j]).OnlyEnforceIf(finish)
            a, O = data.arrival[i], data.output[i]
            ttft, tpot, e2e = self.slo.ttft[i], self.slo.tpot[i], self.slo.e2e[i]
            if math.isfinite(ttft):
                mdl.Add(FT <= math.floor((a + ttft * loose) * factor)).OnlyEnforceIf(met)
            if math.isfinite(tpot) and O > 1:
                mdl.Add(F - FT <= math.floor(tpot * loose * (O - 1) * factor)).OnlyEnforceIf(met)
            if math.isfinite(e2e):
                mdl.Add(F <= math.floor((a + e2e * loose) * factor)).OnlyEnforceIf(met)
        mdl.Maximize(sum(self.served(i)[0] for i in range(data.N)))


def _least_batch(instance: Instance) -> float:
    """The least time of a non-empty batch: one prefill token or one decode item (F2)."""
    cm = instance.cost_model
    return min(cm.batch_time(1, 1, 1, 0, 0), cm.batch_time(1, 0, 0, 1, 0))


def goodput_model_data(
    instance: Instance, options: InferMaxOptions, facts: RequestFacts | None = None, slo: SloArrays | None = None
) -> tuple[ModelData, SloArrays, int]:
    """The model's data over the requests that carry an SLO and are not lost alone, its targets and
    the number of requests that carry no SLO (met once served; module docstring: the horizon J).
    ``facts`` and ``slo``: the instance's :func:`.goodput_bounds.request_facts` and
    :func:`.goodput_bounds.slo_arrays` where the caller has them."""
    facts = request_facts(instance) if facts is None else facts
    slo = slo_arrays(instance) if slo is None else slo
    alive = alive_requests(facts, slo)
    carries = np.isfinite(slo.ttft) | np.isfinite(slo.tpot) | np.isfinite(slo.e2e)
    keep = [i for i in range(len(instance.requests)) if alive[i] and carries[i]]
    reqs = [instance.requests[i] for i in keep]
    sub = replace(instance, requests=tuple(reqs))
    O = np.array([r.output_tokens for r in reqs], dtype=np.float64)
    a = np.array([r.arrival for r in reqs], dtype=np.float64)
    ttft, tpot, e2e = slo.ttft[keep], slo.tpot[keep], slo.e2e[keep]
    loose = 1 + TIME_RTOL
    span = np.where(O > 1, tpot * loose * np.maximum(O - 1, 1), 0.0)
    D = a + np.minimum(e2e * loose, ttft * loose + span)
    # only the first token is judged: the model asks for it alone when evictions are allowed
    at_first = np.isfinite(ttft) & ~np.isfinite(D) & (not options.no_evict)
    D = np.where(at_first, a + ttft * loose, D)
    proven = options.no_evict or bool(np.isfinite(D).all())
    finite = D[np.isfinite(D)]
    J = int(math.floor((finite.max() - a.min()) / _least_batch(instance) + 1e-9)) if len(finite) else 0
    J += sum(r.prompt_tokens + r.output_tokens - 1 for r, d in zip(reqs, D) if not math.isfinite(d))
    if options.no_evict:  # every batch processes a token of the model's requests
        J = min(J, sum(r.prompt_tokens + r.output_tokens - 1 for r in reqs))
    J = max(J, 1)
    note = f"J = {J} from the latest SLO deadline and the least batch time" + ("" if proven else " (not proven)")
    if options.horizon is not None:
        proven, note = proven and options.horizon >= J, f"J = {options.horizon} from option 'horizon' (proven: {J})"
        J = options.horizon
    data = ModelData(
        **instance_fields(sub),
        options=options,
        coef=Coefficients.of(instance.cost_model).folded(),
        J=J,
        horizon_proven=proven,
        horizon_note=note,
        upper=0.0,
        upper_makespan=0.0,
        goal=tuple(1 if first else r.output_tokens for r, first in zip(reqs, at_first)),
        b_min=0,
        bp_min=0,
    )
    targets = SloArrays(slo.ttft[keep], slo.tpot[keep], slo.e2e[keep])
    return data, targets, int((~carries).sum())


def _model_schedule(
    instance: Instance, data: ModelData, slo: SloArrays, budget: TimeBudget
) -> tuple[Schedule | None, int | None, dict[str, Any]]:
    """Solve the model; its schedule completed serially, its value and the solver's bound (of the
    model's requests), and statistics."""
    scale = integer_scaling(data)
    try:
        b = GoodputBuilder(data, scale, slo, budget)
    except BuildStopped as exc:
        return None, None, {"stopped": str(exc)}
    run = run_model(b.m, budget=budget, workers=data.options.threads or 2)
    solver = run.solver
    info: dict[str, Any] = {"cpsat_status": solver.StatusName(run.code), "J": data.J, "horizon": data.horizon_note}
    if not run.found:
        return None, None, info
    info["model_bound"] = round(solver.BestObjectiveBound())
    info["model_value"] = round(solver.ObjectiveValue())
    N, J = data.N, data.J
    c = [[solver.Value(b.c[i][j]) for j in range(J)] for i in range(N)]
    e = [[solver.Value(b.e[i][j]) for j in range(J)] for i in range(N)]
    starts: list[float | None] = [solver.Value(b.S[j]) / scale.factor for j in range(J)]
    prefix = schedule_from_solution(data, c, e, starts, {"solver": "infermax-goodput"})
    return serial_completion(instance, prefix), info["model_value"], info


def _exact_phase(
    instance: Instance, opts: InferMaxOptions, budget: TimeBudget, bound: float, facts: RequestFacts | None
) -> tuple[tuple[Schedule, float, Any] | None, float, dict[str, Any]]:
    """The model of the module docstring: its schedule (replayed, with its goodput and replay) or
    None, the bound lowered by the model's proof (over a proven horizon) and statistics."""
    data, slo, free = goodput_model_data(instance, opts, facts)
    if not fits(data):
        return None, bound, {"stopped": f"model not built: {data.N} x {data.J} cells exceed max_cells"}
    found, model_value, info = _model_schedule(instance, data, slo, budget)
    if data.horizon_proven and "model_bound" in info:
        bound = min(bound, float(info["model_bound"] + free))
    if found is None:
        return None, bound, info
    rep = replay(instance, found)
    if not rep.feasible:
        raise RuntimeError("goodput model: schedule does not replay: " + "; ".join(rep.violations[:3]))
    got = float(sum(o.meets_slo for o in rep.outcomes.values()))
    if got < model_value + free:
        raise RuntimeError(f"goodput model: solver value {model_value + free} above the replayed {got:g}")
    return (found, got, rep), bound, info


#: At scale, the part of the time limit after which no more policies are started (one is always
#: there); the upper bound's intervals take :data:`.goodput_bounds.BOUND_SHARE`.
CANDIDATE_SHARE = 0.5


def solve_goodput(instance: Instance, opts: InferMaxOptions, budget: TimeBudget) -> SolveResult:
    """The goodput solve of the module docstring (``opts.objective == 'goodput'``) within ``budget``."""
    t0 = time.perf_counter()
    require_slos(instance)
    candidates_by = budget.part(CANDIDATE_SHARE) if len(instance.requests) >= SCALE_MIN_REQUESTS else budget
    try:
        pool = initial_candidates(instance, opts, candidates_by, budget, first=GOODPUT_FIRST_POLICIES)
    except InferMaxInputError as exc:
        return SolveResult(problem="infermax", solver=opts.solver, status=Status.INFEASIBLE, message=str(exc))
    pool.check_warm_start()
    best, name = pool.best, pool.best_name
    facts = None if best.value >= len(instance.requests) else request_facts(instance)
    upper = goodput_upper_bound(instance, facts, budget.part(BOUND_SHARE), met=int(best.value))
    extra: dict[str, Any] = {
        "objective_name": "goodput",
        "candidates": pool.values(),
        "bounds": {"goodput-windows": upper},
    }
    schedule, value, rep, incumbent = best.schedule, best.value, best.replay, name
    bound = float(upper)
    if value < upper:
        found, bound, info = _exact_phase(instance, opts, budget, bound, facts)
        extra["model"] = info
        if found is not None and found[1] > value:
            schedule, value, rep, incumbent = found[0], found[1], found[2], None
    if value > bound:
        raise RuntimeError(
            f"goodput: schedule {incumbent or 'infermax'!r} meets {value:g} SLOs, above the proven bound {bound:g}"
        )
    late = budget.expired()
    status = Status.OPTIMAL if value >= bound else Status.TIME_LIMIT if late else Status.FEASIBLE
    return SolveResult(
        problem="infermax",
        solver=opts.solver,
        status=status,
        objective=value,
        bound=bound,
        wall_time=time.perf_counter() - t0,
        schedule=schedule,
        sense="max",
        incumbent=incumbent,
        extra=extra,
        replay=rep,
    )

"""InferMax optimal scheduler (seed001 section 3.3): ``solve`` and ``bounds`` for the registries.

The model is stated in :mod:`.model`; backends: :mod:`.cpsat` (OR-Tools CP-SAT) and :mod:`.mip`
(PuLP to HiGHS / CBC, gurobipy). :func:`solve`:

1. reads the options (:class:`.model.InferMaxOptions`);
2. builds the candidate schedules (the serial schedule of :func:`.model.serial_schedule` and every
   registered policy whose schedule replays and respects the options) and keeps the best as the
   upper bound UB and the warm start (or the policy named by ``warm_start``); the main solve gets
   what is left of ``time_limit`` (at least ``MIN_PHASE_SHARE`` of it). The whole
   call keeps within the limit up to the final replay and bounds: policies, the relaxation,
   the eviction-free phase and the model build are not started, or are stopped, once the limit has passed, and
   a model of more than ``max_cells`` request-batch cells is not built (then the best candidate
   and the proven bounds are the result, ``extra['stopped']`` says why);
3. derives the horizon J from UB (:func:`.model.horizon`: proven for makespan and completion, and
   for ttft when its model is small; ttft with evictions uses the first-token model, whose
   solution is completed by :func:`.model.serial_completion`);
   for the makespan with a KV capacity, solves the residency relaxation (:mod:`.relax`, first by the
   exact search of :mod:`.search`) with the
   option ``relax``'s share of the limit, gives its proven bound and count facts to the model and
   its best point, as a schedule, to the candidates (a better one re-derives UB, J and the hint);
   when the relaxation is solved within one prefill bias of UB, the bound of :mod:`.chunks` (the
   quadratic prefill term priced over every relaxation path below UB) raises its bound and its
   best path, chunked, is a candidate too; a candidate that meets the bound ends the solve there
   (option ``early_exit``, no model); otherwise, when evictions are allowed, the eviction-free
   optimum (solved with a quarter of the time limit, at most half of the time left) is a
   candidate too (since session 13 after the relaxation, whose search proves most instances
   before it would have ended);
4. solves, turns the solution into a schedule, replays it and reports the replayed objective after
   :func:`~optsched.result.check_agreement` with the solver's own value (the best candidate
   instead when it is better: a stopped solver may not have reached its hint);
5. reports the bound: the largest of the solver's proven bound (lowered by any rounding slack),
   the relaxation's and the bounds of :mod:`optsched.bounds`. ``optimal`` means the replayed objective is within
   ``OPTIMAL_RTOL`` of a proven bound and J is proven; otherwise ``feasible`` or ``time_limit``.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from importlib import import_module
from typing import Any, Mapping

from ...instance import Instance
from ...result import Bound, SolveResult, Status, check_agreement, objective_of, replayed_objective
from ...schedule import ReplayResult, Schedule, replay
from ...bounds import generic_bounds
from ...deadline import passed, seconds_left
from .model import (
    Coefficients,
    InferMaxInputError,
    InferMaxOptions,
    ModelData,
    build_data,
    first_token_prefix,
    fits,
    hint_from_schedule,
    schedule_from_solution,
    serial_completion,
    serial_schedule,
)

__all__ = ["bounds", "solve", "candidate_schedules", "OPTIMAL_RTOL"]

#: The main solve gets what is left of the time limit, but at least this share of it.
MIN_PHASE_SHARE = 0.05

#: Share of the time left that the bound of :mod:`.chunks` may take: it runs when the best
#: candidate is within one prefill bias of the relaxation's optimum, a gap that the model's bound
#: does not close at N >= 5, so most of the time left is its (0.5 before session 15).
CHUNK_SHARE = 0.8

#: A solution counts as optimal when its replayed objective exceeds a proven bound by at most this.
OPTIMAL_RTOL = 1e-9


def _respects(rep: ReplayResult, options: InferMaxOptions) -> bool:
    """Whether a replay-feasible schedule respects the options the model imposes."""
    if options.no_evict and rep.metrics is not None and rep.metrics.evictions:
        return False
    if options.no_hybrid and any(p > 0 and d > 0 for p, d in zip(rep.prefill_tokens, rep.decode_items)):
        return False
    return True


#: A candidate: its schedule, its replayed objective and its replay.
Candidate = tuple[Schedule, float, ReplayResult]


def candidate_schedules(instance: Instance, options: InferMaxOptions) -> dict[str, Schedule]:
    """Feasible schedules that respect the options: every registered policy and ``serial``
    (:func:`_candidates` without a deadline)."""
    return {name: cand[0] for name, cand in _candidates(instance, options, None).items()}


def _candidates(instance: Instance, options: InferMaxOptions, deadline: float | None) -> dict[str, Candidate]:
    """:func:`candidate_schedules` with their replays, by ``deadline`` (a ``time.perf_counter()`` value).

    Policies are skipped when chunked prefill is off (their chunking cannot be checked without
    re-implementing the semantics) or when they do not apply to the instance, fail or violate an
    option. After the deadline nothing more is started once there is one candidate, except the
    ``warm_start`` policy; ``serial`` (one request at a time: hundreds of thousands of batches on
    a large trace) comes last, and always when no policy gave a candidate.
    """
    out: dict[str, Candidate] = {}

    def offer(name: str, schedule: Schedule) -> None:
        cand = _candidate(instance, schedule, options)
        if cand is not None:
            out[name] = cand

    if not options.no_chunk:
        from ...policies import policy_names, simulator_for

        for name in policy_names():
            if out and passed(deadline) and name != options.warm_start:
                continue
            try:
                offer(name, simulator_for(name)(instance))
            except Exception:  # noqa: BLE001 - a failing policy is only a missing candidate
                continue
    if not out or not passed(deadline):
        offer("serial", serial_schedule(instance, no_chunk=options.no_chunk))
    return out


def _candidate(instance: Instance, schedule: Schedule, options: InferMaxOptions) -> Candidate | None:
    """``schedule`` replayed once, when it replays cleanly and respects the options; else None."""
    rep = replay(instance, schedule)
    if not (rep.feasible and _respects(rep, options)):
        return None
    return schedule, objective_of(rep, options.objective), rep


def _meets(value: float, bound: float) -> bool:
    """Whether ``value`` is within :data:`OPTIMAL_RTOL` of the proven ``bound`` (then it is optimal)."""
    return value - bound <= OPTIMAL_RTOL * max(abs(value), 1e-12)


def _nonempty(schedule: Schedule) -> int:
    return sum(1 for b in schedule.batches if b.items)


#: Modules a solve may need, imported before its clock starts: importing CP-SAT takes about a second
#: (ortools loads pandas), which a first import after the deadline would add to the call.
SOLVE_MODULES = (f"{__name__}.chunks", f"{__name__}.cpsat", f"{__name__}.mip", f"{__name__}.residency",
                 "optsched.policies")


def solve(instance: Instance, options: Mapping[str, Any]) -> SolveResult:
    """Solve the InferMax model for ``instance`` (see the module docstring for the steps).

    Parameters
    ----------
    instance
        The instance (limits C, P, M, R_max and the cost model are read from it).
    options
        ``solver`` (cpsat|highs|cbc|gurobi), ``objective`` (makespan|completion|ttft), ``no_evict``,
        ``no_hybrid``, ``no_chunk``, ``time_limit``, ``threads``, ``log``, ``warm_start`` (policy
        name), ``horizon`` (force J).
    """
    for module in SOLVE_MODULES:  # start-up, before the clock
        import_module(module)
    t0 = time.perf_counter()
    opts = InferMaxOptions.from_dict(options)
    deadline = None if opts.time_limit is None else t0 + opts.time_limit
    try:
        found = _candidates(instance, opts, deadline)
    except InferMaxInputError as exc:
        return SolveResult(problem="infermax", solver=opts.solver, status=Status.INFEASIBLE,
                           wall_time=time.perf_counter() - t0, message=str(exc))
    proven = [b.value for b in generic_bounds(instance, opts.objective)]
    met = opts.early_exit and bool(proven) and _meets(min(value for _, value, _ in found.values()), max(proven))
    cands = {name: schedule for name, (schedule, _, _) in found.items()}
    values = {name: value for name, (_, value, _) in found.items()}
    makespans = {name: rep.metrics.makespan for name, (_, _, rep) in found.items()}
    best = min(values, key=lambda k: values[k])
    warm = opts.warm_start or best
    if warm not in cands:
        raise InferMaxInputError(
            f"option 'warm_start': policy {warm!r} gives no schedule respecting the options "
            f"(available: {', '.join(sorted(cands))})"
        )
    limit = opts.time_limit  # the whole solve (candidates, relaxation, eviction-free phase) keeps within it

    def model_data() -> tuple[ModelData, Schedule]:
        """The model's data for the time left, J from the best candidate, and the warm start (its
        first tokens for ttft)."""
        prefix = first_token_prefix(cands[warm], found[warm][2]) if opts.objective == "ttft" else cands[warm]
        return build_data(instance, _left(opts, limit, t0), makespans[best], values[best], _nonempty(cands[warm]),
                          _nonempty(prefix)), prefix

    data, warm_prefix = model_data()

    def offer(name: str, schedule: Schedule | None, point: Candidate | None = None) -> None:
        """Add ``schedule`` (replayed here) or its replayed ``point`` to the candidates."""
        nonlocal best, warm
        point = point or (None if schedule is None else _candidate(instance, schedule, opts))
        if point is not None:
            found[name] = point
            cands[name], values[name], rep = point
            makespans[name] = rep.metrics.makespan
            if values[name] < values[best]:
                best = name
                warm = opts.warm_start or best

    relax = None if met or passed(deadline) else _relaxation(data, limit)
    paths = None
    if relax is not None:
        if relax.bound == math.inf:
            raise RuntimeError(
                f"residency relaxation infeasible although {best!r} gives a schedule within J = {data.J}"
            )
        offer("residency-relaxation", relax.schedule)  # the relaxation's best point as a schedule
        if not passed(deadline):
            relax, paths, chunked = _with_chunk_bound(
                instance, relax, makespans[best], None if limit is None else _left(opts, limit, t0).time_limit * CHUNK_SHARE)
            offer("residency-relaxation-chunked", chunked)  # the chunk bound's best path, chunked
        met = opts.early_exit and _meets(values[best], relax.bound)
    if not (opts.no_evict or met or passed(deadline)):  # the eviction-free optimum seeds the full model
        first = solve(instance, {**options, "no_evict": True, "warm_start": None, "relax": 0,
                                 "time_limit": None if limit is None else min(limit / 4, seconds_left(deadline) / 2)})
        if first.schedule is not None:
            offer("infermax-no-evict", None, (first.schedule, first.objective, first.replay))
    if relax is not None or "infermax-no-evict" in found:
        data, warm_prefix = model_data()
    if relax is not None:
        data = replace(data, lower=relax.bound, count_facts=relax.facts)  # (makespan only: no first-token model)
    if met:  # a candidate meets a proven bound: nothing left to prove, no model
        from .cpsat import BackendResult

        backend = BackendResult(status=Status.UNKNOWN, info={"stopped": f"model not built: {best!r} meets a proven bound"})
    else:
        hint = hint_from_schedule(data, warm_prefix if data.first_tokens_only else cands[warm]) if fits(data) else None
        backend = _run_backend(data, hint, deadline)
    extra: dict[str, Any] = {
        "horizon": data.J,
        "horizon_proven": data.horizon_proven,
        "horizon_note": data.horizon_note,
        "first_token_model": data.first_tokens_only,
        "objective_name": opts.objective,
        "upper_bound_policy": best,
        "policy_values": values,
        **backend.info,
    }
    if relax is not None:
        extra["relaxation"] = {"bound": relax.bound, "value": relax.value, "status": relax.status, "cpu": relax.cpu,
                               "count_facts": [list(f) for f in relax.facts], "chunk_paths": paths}
    if backend.status == Status.UNSUPPORTED:
        return SolveResult(problem="infermax", solver=opts.solver, status=Status.UNSUPPORTED,
                           wall_time=time.perf_counter() - t0, message=backend.message, extra=extra)
    if backend.status == Status.INFEASIBLE:
        if data.horizon_proven:
            raise RuntimeError(f"InferMax model infeasible although {best!r} gives a schedule within J = {data.J}")
        return SolveResult(problem="infermax", solver=opts.solver, status=Status.INFEASIBLE,
                           wall_time=time.perf_counter() - t0,
                           message=f"no schedule within the horizon J = {data.J}; a longer horizon is needed",
                           extra=extra)
    incumbent = None
    if backend.c is not None:
        schedule = schedule_from_solution(data, backend.c, backend.e, backend.waits,
                                          {"solver": opts.solver, "problem": "infermax"})
        if data.first_tokens_only:  # the model stops at the first tokens (model docstring)
            schedule = serial_completion(instance, schedule)
        value, rep = replayed_objective(instance, schedule, opts.objective)
        check_agreement(backend.objective, value, f"infermax/{opts.solver}")
        if values[best] < value:  # a stopped solver may not have reached its hint: keep the better
            incumbent = f"the solver's schedule ({value:.9g}) is worse than {best!r}'s; schedule of {best!r}"
            schedule, value, rep = found[best]
    else:  # no model, or no incumbent within the limit: report the best candidate
        schedule, value, rep = found[best]
        incumbent = f"no schedule from the solver; schedule of {best!r}"
    if data.horizon_proven and backend.bound is not None:
        proven.append(backend.bound)
    elif backend.bound is not None:
        extra["bound_within_horizon"] = backend.bound
    if relax is not None:  # run only over a proven horizon (see _relaxation)
        proven.append(relax.bound)
    bound = min(max(proven), value) if proven else None
    optimal = bound is not None and _meets(value, bound)
    if optimal:
        status = Status.OPTIMAL
    elif backend.status == Status.OPTIMAL:  # optimal only relative to the horizon J
        status = Status.FEASIBLE
        extra["optimal_within_horizon"] = True
    else:
        status = Status.TIME_LIMIT if opts.time_limit is not None else Status.FEASIBLE
    return SolveResult(problem="infermax", solver=opts.solver, status=status, objective=value, bound=bound,
                       wall_time=time.perf_counter() - t0, schedule=schedule, incumbent=incumbent, extra=extra,
                       replay=rep)


def _left(opts: InferMaxOptions, limit: float | None, t0: float) -> InferMaxOptions:
    """``opts`` with the time left of ``limit`` since ``t0`` (at least ``MIN_PHASE_SHARE`` of it)."""
    if limit is None:
        return opts
    return replace(opts, time_limit=max(limit - (time.perf_counter() - t0), MIN_PHASE_SHARE * limit))


def _relaxation(data: ModelData, limit: float | None) -> Any:
    """The residency relaxation's bound (:mod:`.relax`) when it applies, else None.

    It bounds the makespan over the proven horizon when memory binds; it gets the option
    ``relax``'s share of ``limit`` (at most the time left; no limit without a time limit).
    """
    opts = data.options
    if not (opts.relax > 0 and opts.objective == "makespan" and data.M is not None and data.horizon_proven):
        return None
    if not fits(data):  # as the model (model.check_size)
        return None
    from .residency import residency_bound

    share = None if limit is None or opts.time_limit is None else min(opts.relax * limit, opts.time_limit)
    return residency_bound(data.instance, data.J, share, opts.threads)


def _with_chunk_bound(
    instance: Instance, relax: Any, upper: float, time_limit: float | None
) -> tuple[Any, int | None, Schedule | None]:
    """The relaxation's result with the bound of :mod:`.chunks` when the relaxation is solved and
    below ``upper`` (the best candidate's makespan) by less than one prefill bias: the gap is then
    the quadratic prefill term, which that bound prices. Also the number of paths priced one by
    one (None when it did not run or could not list the nodes) and its chunked schedule (a
    candidate; None without one)."""
    from .chunks import chunk_bound

    if relax.status != "OPTIMAL" or not 0 < upper - relax.bound < Coefficients.from_cost_model(instance.cost_model).k_pb:
        return relax, None, None
    found = chunk_bound(instance, upper, time_limit)
    if found.bound is None:
        return relax, None, None
    return replace(relax, bound=max(relax.bound, found.bound)), found.paths, found.schedule


def _run_backend(data: ModelData, hint: Any, deadline: float | None) -> Any:
    if data.options.solver == "cpsat":
        from .cpsat import solve_cpsat

        return solve_cpsat(data, hint, deadline)
    from .mip import solve_mip

    return solve_mip(data, hint, deadline)


#: Default time limit (seconds) of ``optsched bound --method relax``.
RELAX_BOUND_TIME = 10.0


def bounds(instance: Instance, options: Mapping[str, Any]) -> list[Bound]:
    """Registry entry: proven lower bounds for ``options['objective']`` (default makespan).

    The model computes its objectives exactly as :func:`optsched.schedule.replay` does, so every
    bound of :mod:`optsched.bounds` (proven for every schedule that replays cleanly) holds for its
    optimum. ``method='lp'`` adds the LP relaxation of the MIP (:mod:`.mip`; proven, usually weaker
    than the work bound on large instances but independent of it). ``method='relax'`` adds, for the
    makespan with a KV capacity, the residency bound of :mod:`.relax` over the proven horizon of the
    best candidate schedule (the serial one and every policy), raised by the bound of :mod:`.chunks`
    when it applies (the relaxation solved within one prefill bias of the best schedule known),
    within ``time_limit`` (default :data:`RELAX_BOUND_TIME` s).
    """
    objective = options.get("objective") or "makespan"
    out = generic_bounds(instance, objective)
    if options.get("method") == "lp":
        from .mip import lp_relaxation_bound

        out.append(lp_relaxation_bound(instance, dict(options)))
    if options.get("method") != "relax" or objective != "makespan":
        return out
    if instance.limits.kv_capacity is None:
        return out
    from .residency import residency_bound

    opts = InferMaxOptions.from_dict({**options, "objective": "makespan"})
    schedule, value, _ = min(_candidates(instance, opts, None).values(), key=lambda cand: cand[1])
    data = build_data(instance, opts, value, value, _nonempty(schedule))
    limit = opts.time_limit if opts.time_limit is not None else RELAX_BOUND_TIME
    deadline = time.perf_counter() + limit
    res = residency_bound(instance, data.J, limit, opts.threads)
    if res.schedule is not None and (point := replay(instance, res.schedule)).feasible:
        value = min(value, point.metrics.makespan)
    res, paths, _ = _with_chunk_bound(instance, res, value, seconds_left(deadline, 0.0))
    chunked = "" if paths is None else f"; quadratic prefill term, infermax/chunks.py ({paths} paths priced one by one)"
    note = (f"residency relaxation over J = {data.J} batches ({res.status}; count facts "
            f"{[list(f) for f in res.facts]}; infermax/relax.py{chunked})")
    out.append(Bound("relaxation", res.bound, data.horizon_proven, note))
    return out

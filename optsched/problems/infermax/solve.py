"""InferMax's solve entry (seed001 section 3.3): ``solve`` and ``bounds`` for the registries.

The model is stated in :mod:`.model`; backends: :mod:`.cpsat` (OR-Tools CP-SAT) and :mod:`.mip`
(PuLP to HiGHS / CBC, gurobipy). Every schedule a phase finds goes into the solve's
:class:`.candidates.CandidatePool` (replayed; the best is the upper bound UB and the warm start),
every proven bound into its list of bounds. :func:`solve` runs these phases, each a function:

1. the options (:class:`.model.InferMaxOptions`) and the first candidates
   (:func:`.candidates.initial_candidates`: every registered policy whose schedule replays and
   respects the options, and the serial schedule of :func:`.schedules.serial_schedule`), the bounds of
   :mod:`optsched.bounds`;
   for the makespan with a KV capacity also the KV-time bound of :mod:`.kvtime` (via :mod:`.scale`);
   with :data:`.model.SCALE_MIN_REQUESTS` requests or more, the scale phase (:func:`_scale_phase`:
   the segment-list search and the trajectory bound of :mod:`.scale`) takes the rest of the time budget
   (60 s without a limit; no policy is started after :data:`CANDIDATE_SHARE` of it), its best
   segment list becomes a candidate, its bounds join the proven ones, and phases 3 to 5 are skipped (no
   model is built; ``extra['scale']`` holds what it found);
2. the model's data (:func:`_model_data`): the horizon J from UB (:func:`.data.horizon`: proven
   for makespan and completion, and for ttft when its model is small; ttft with evictions uses the
   first-token model, whose solution is completed by :func:`.schedules.serial_completion`);
   for ``latency`` and ``ttft`` (option ``early_exit``; short chunks: :func:`.meanphase.search_applies`),
   the exact search of :mod:`.meansearch`
   (:func:`.meanphase.search_phase`, most of the time left; for ``latency`` with evictions allowed
   but no KV or running limit, the search without them first, whose schedule lowers the incumbent)
   below the best candidate: its proven bound joins the others and its schedule (proven optimal,
   or its best dive's when stopped) the candidates;
3. for the makespan with a KV capacity, the residency relaxation (:func:`_relaxation_phase`:
   :mod:`.residency`, the exact search of :mod:`.search` first) with the option ``relax``'s part of
   the budget: its proven bound and count facts go to the model, its best point, as a schedule, to
   the candidates; when it is solved within one prefill bias of UB, the bound of :mod:`.chunks`
   (the quadratic prefill term priced over every relaxation path below UB) raises its bound and
   its best path, chunked, is a candidate too;
4. when evictions are allowed, the eviction-free optimum (:func:`_eviction_free_phase`, a quarter
   of the budget, at most half of the time left) as a candidate; with a better candidate, the
   model's data again (UB, J and the warm start);
5. the model (:func:`_run_backend`), unless a candidate meets a proven bound (option
   ``early_exit``; :func:`_skipped`) or the model has more than ``max_cells`` request-batch cells
   (``extra['stopped']`` says why);
6. the result (:func:`_result`): the solution as a schedule, replayed, its objective after
   :func:`~optsched.result.check_agreement` with the solver's own value, or the best candidate when
   it is better (a stopped solver may not have reached its hint) or the solver has none
   (:func:`_incumbent`); the bound is the largest of the solver's proven bound (lowered by any
   rounding slack), the relaxation's and those of :mod:`optsched.bounds`. ``optimal`` means the
   replayed objective is within ``optsched.result.OPTIMAL_RTOL`` of a proven bound and J is proven; otherwise
   ``feasible`` or ``time_limit``.

The whole call keeps within its :class:`~optsched.budget.TimeBudget` (made by
:func:`optsched.api.solve` and passed to every phase, each taking a part of it) up to the final
replay and bounds: policies, the relaxation, the eviction-free phase and the model build are not
started, or are stopped, once it has expired.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ...budget import TimeBudget
from ...costmodel import Coefficients
from ...instance import Instance
from ...load_bounds import lp_bounds
from ...result import Bound, SolveResult, Status, check_agreement, replayed_objective
from ...schedule import ReplayResult, Schedule, replay
from ...ttft_batch_bounds import block_bounds
from .candidates import Candidate, CandidatePool, candidate_schedules, initial_candidates
from .data import ModelData, build_data, fits
from .first_answer import generic_bounds, meets
from .meanphase import search_applies, search_phase
from .model import SCALE_MIN_REQUESTS, InferMaxBoundOptions, InferMaxInputError, InferMaxOptions
from .scale import kv_time_bound
from .schedules import first_token_prefix, hint_from_schedule, schedule_from_solution, serial_completion

if TYPE_CHECKING:  # relax.py loads CP-SAT, which the solve imports before its clock (SOLVE_MODULES)
    from .relax import RelaxationResult

__all__ = [
    "Candidate",
    "CandidatePool",
    "InferMaxBoundOptions",
    "InferMaxOptions",
    "bounds",
    "candidate_schedules",
    "solve",
]

#: Share of the time left that the bound of :mod:`.chunks` may take: it runs when the best
#: candidate is within one prefill bias of the relaxation's optimum, a gap that the model's bound
#: does not close at N >= 5, so most of the time left is its.
CHUNK_SHARE = 0.8


def _nonempty(schedule: Schedule) -> int:
    return schedule.columns().nonempty_batches


#: Modules a solve may need, imported before its clock starts: importing CP-SAT takes about a second
#: (ortools loads pandas), which a first import after the deadline would add to the call.
SOLVE_MODULES = (
    f"{__package__}.colgen",
    f"{__package__}.lns",
    f"{__package__}.chunks",
    f"{__package__}.cpsat",
    f"{__package__}.mip",
    f"{__package__}.residency",
    "optsched.policies",
)


#: At scale, the part of the time budget after which no more policies are started for the
#: candidate pool (one is always there): the scale phase's segment-list search and bounds get the rest.
CANDIDATE_SHARE = 0.5


def prepare() -> None:
    """A solve's start-up work: import :data:`SOLVE_MODULES` and load the search's compiled kernels
    (:func:`.search.load_kernels`, about a second from numba's disk cache). :func:`solve` calls it
    before its clock starts; ``optsched solve`` calls it before it reads the time left, so that the
    command's time limit covers it."""
    for module in SOLVE_MODULES:
        import_module(module)
    from .search import load_kernels

    load_kernels()


def solve(instance: Instance, options: Mapping[str, Any] | InferMaxOptions | None, budget: TimeBudget) -> SolveResult:
    """Solve the InferMax model for ``instance`` (see the module docstring for the steps).

    Parameters
    ----------
    instance
        The instance (limits C, P, M, R_max and the cost model are read from it).
    options
        ``solver`` (cpsat|highs|cbc|gurobi), ``objective`` (makespan|latency|ttft; ``completion`` is an
        alias of latency), ``no_evict``, ``no_hybrid``, ``no_chunk``, ``threads``, ``log``,
        ``warm_start`` (policy name), ``horizon`` (force J); their ``time_limit`` is in ``budget``.
    budget
        The solve's time (:func:`optsched.api.solve` makes it), shared among the phases.
    """
    prepare()  # start-up work (a no-op once done)
    t0 = time.perf_counter()
    opts = InferMaxOptions.parse(options)
    if opts.objective == "goodput":  # maximised: its own phases (goodput.py)
        from .goodput import solve_goodput

        return solve_goodput(instance, opts, budget)
    candidates_by = budget
    if len(instance.requests) >= SCALE_MIN_REQUESTS:  # the scale phase keeps the rest
        candidates_by = budget.part(CANDIDATE_SHARE)
    try:
        pool = initial_candidates(instance, opts, candidates_by, budget)
    except InferMaxInputError as exc:
        return SolveResult(
            problem="infermax",
            solver=opts.solver,
            status=Status.INFEASIBLE,
            wall_time=time.perf_counter() - t0,
            message=str(exc),
        )
    if not len(pool):
        return SolveResult(
            problem="infermax",
            solver=opts.solver,
            status=Status.TIME_LIMIT,
            wall_time=time.perf_counter() - t0,
            message="no schedule within the time limit: every policy was stopped at the deadline",
        )
    proven = [b.value for b in generic_bounds(instance, opts.objective)]
    if opts.objective == "makespan" and instance.limits.kv_capacity is not None:
        proven.append(kv_time_bound(instance)[0])
    met = opts.early_exit and bool(proven) and meets(pool.best.value, max(proven))
    pool.check_warm_start()
    scaled = len(instance.requests) >= SCALE_MIN_REQUESTS and not met  # beyond the exact phases' reach
    scale_info = _scale_phase(pool, proven, budget) if scaled else None
    data = _model_data(pool, scaled)
    searched = None
    applies = search_applies(instance, opts.objective, not opts.no_evict)
    if applies and opts.early_exit and not (met or scaled or budget.expired()):
        bound, searched = search_phase(pool, budget)
        proven.append(bound)
        met = meets(pool.best.value, max(proven))
    relax = paths = None
    if not (met or scaled or budget.expired()):
        relax, paths = _relaxation_phase(pool, data, budget)
        met = relax is not None and opts.early_exit and meets(pool.best.value, relax.bound)
    if not (opts.no_evict or met or scaled or budget.expired()):
        _eviction_free_phase(pool, budget)
    if relax is not None or NO_EVICT in pool:  # a better candidate: J and the warm start again
        data = _model_data(pool)
    if relax is not None:
        data = replace(data, lower=relax.bound, count_facts=relax.facts)  # (makespan only: no first-token model)
    backend = _skipped(pool, scaled) if met or scaled else _run_backend(data, _hint(pool, data), budget)
    result = _result(pool, data, backend, relax, paths, proven, t0, budget.limited)
    if scale_info is not None:
        result.extra["scale"] = scale_info
    if searched is not None:
        result.extra["mean_search"] = searched
    return result


#: Names of the candidates the solve's phases add: the relaxation's best path, that path chunked
#: by the chunk bound, and the eviction-free optimum.
RELAXATION, CHUNKED, NO_EVICT = "residency-relaxation", "residency-relaxation-chunked", "infermax-no-evict"


def _model_data(pool: CandidatePool, scaled: bool = False) -> ModelData:
    """The model's data: J from the best candidate, at least the warm start's batches (up to its
    last first token in the first-token model, unless ``scaled``: no model is built at scale)."""
    opts, warm = pool.options, pool.found[pool.warm_name]
    ttft = opts.objective == "ttft" and not scaled
    prefix = _nonempty(first_token_prefix(warm.schedule, warm.replay)) if ttft else None
    best = pool.best
    return build_data(
        pool.instance,
        opts,
        best.makespan,
        best.value,
        _nonempty(warm.schedule),
        prefix if prefix is not None else _nonempty(warm.schedule),
    )


def _relaxation_phase(
    pool: CandidatePool, data: ModelData, budget: TimeBudget
) -> tuple[RelaxationResult | None, int | None]:
    """The residency bound (:func:`_relaxation`) when it applies, its best path as a candidate, and,
    time left, the chunk bound (:func:`_with_chunk_bound`) with its chunked path as a candidate.

    Returns the relaxation's result (None when it does not apply) and the number of paths the chunk
    bound priced one by one (None when it did not run)."""
    relax = _relaxation(data, budget)
    if relax is None:
        return None, None
    if relax.bound == math.inf:
        raise RuntimeError(
            f"residency relaxation infeasible although {pool.best_name!r} gives a schedule within J = {data.J}"
        )
    pool.offer(RELAXATION, relax.schedule)
    paths = None
    if not budget.expired():
        relax, paths, chunked = _with_chunk_bound(pool.instance, relax, pool.best.makespan, budget.share(CHUNK_SHARE))
        pool.offer(CHUNKED, chunked)
    return relax, paths


def _eviction_free_phase(pool: CandidatePool, budget: TimeBudget) -> None:
    """The eviction-free optimum (a quarter of the budget, at most half of the time left) as a
    candidate: it seeds the full model."""
    opts = pool.options
    first = solve(
        pool.instance,
        replace(opts, no_evict=True, warm_start=None, relax=0.0 if opts.objective == "makespan" else opts.relax),
        budget.part(1 / 4).within(budget.share(1 / 2).left()),
    )
    if first.schedule is not None:
        pool.add(NO_EVICT, Candidate(first.schedule, first.objective, first.replay))


def _hint(pool: CandidatePool, data: ModelData) -> Any:
    """The warm start as the model's values (its first tokens in the first-token model), or None
    when the model is too large to build."""
    if not fits(data):
        return None
    warm = pool.found[pool.warm_name]
    schedule = first_token_prefix(warm.schedule, warm.replay) if data.first_tokens_only else warm.schedule
    return hint_from_schedule(data, schedule)


def _skipped(pool: CandidatePool, scaled: bool = False) -> Any:
    """The backend's result when a candidate meets a proven bound, or the instance was solved at
    scale: no model is built."""
    from .cpsat import BackendResult

    why = (
        f"{len(pool.instance.requests)} requests: solved at scale (infermax/scale.py)"
        if scaled
        else f"{pool.best_name!r} meets a proven bound"
    )
    return BackendResult(status=Status.UNKNOWN, info={"stopped": f"model not built: {why}"})


def _scale_phase(pool: CandidatePool, proven: list[float], budget: TimeBudget) -> dict[str, Any]:
    """The scale phase (:func:`.scale.scale_phase`) within ``budget`` less :data:`.scale.TAIL_REPLAYS`
    replays (``SCALE_DEFAULT_TIME`` s without a limit): its schedules become candidates, its proven
    makespan bounds join ``proven``; returns what it found, for the result's ``extra['scale']``."""
    from .scale import SCALE_DEFAULT_TIME, TAIL_REPLAYS, scale_phase

    opts = pool.options
    until = budget.reserve(TAIL_REPLAYS * pool.replays.seconds) if budget.limited else budget.within(SCALE_DEFAULT_TIME)
    ranked = sorted(pool.found.values(), key=lambda cand: cand.value)
    phase = scale_phase(
        pool.instance,
        opts.objective,
        until,
        pool.best.makespan,
        [cand.schedule for cand in ranked[:2]],
        opts.no_evict,
        opts.no_hybrid,
        opts.no_chunk,
        seeds=[(name, cand.value) for name, cand in pool.found.items()],
    )
    for name, schedule in phase.schedules.items():
        pool.offer(name, schedule)
    proven.extend(value for value, _ in phase.bounds.values())
    return {
        "bounds": {name: {"value": value, "note": note} for name, (value, note) in phase.bounds.items()},
        **phase.info,
    }


def _result(
    pool: CandidatePool,
    data: ModelData,
    backend: Any,
    relax: RelaxationResult | None,
    paths: int | None,
    proven: list[float],
    t0: float,
    limited: bool,
) -> SolveResult:
    """The solve's result: the solver's schedule, replayed, or the best candidate when it is better
    or the solver has none; the largest proven bound; the status (module docstring, steps 4 and 5)."""
    opts, best = pool.options, pool.best_name
    extra = _extra(pool, data, backend, relax, paths)
    if backend.status == Status.UNSUPPORTED:
        return SolveResult(
            problem="infermax",
            solver=opts.solver,
            status=Status.UNSUPPORTED,
            wall_time=time.perf_counter() - t0,
            message=backend.message,
            extra=extra,
        )
    if backend.status == Status.INFEASIBLE:
        if data.horizon_proven:
            raise RuntimeError(f"InferMax model infeasible although {best!r} gives a schedule within J = {data.J}")
        return SolveResult(
            problem="infermax",
            solver=opts.solver,
            status=Status.INFEASIBLE,
            wall_time=time.perf_counter() - t0,
            message=f"no schedule within the horizon J = {data.J}; a longer horizon is needed",
            extra=extra,
        )
    schedule, value, rep, incumbent = _incumbent(pool, data, backend)
    source = "model" if incumbent is None else pool.best_name
    extra["schedule_source"], extra["schedule_is_seed"] = source, source in pool.seeds
    if data.horizon_proven and backend.bound is not None:
        proven.append(backend.bound)
    elif backend.bound is not None:
        extra["bound_within_horizon"] = backend.bound
    if relax is not None:  # run only over a proven horizon (see _relaxation)
        proven.append(relax.bound)
    bound = min(max(proven), value) if proven else None
    if bound is not None and meets(value, bound):
        status = Status.OPTIMAL
    elif backend.status == Status.OPTIMAL:  # optimal only relative to the horizon J
        status = Status.FEASIBLE
        extra["optimal_within_horizon"] = True
    else:
        status = Status.TIME_LIMIT if limited else Status.FEASIBLE
    return SolveResult(
        problem="infermax",
        solver=opts.solver,
        status=status,
        objective=value,
        bound=bound,
        wall_time=time.perf_counter() - t0,
        schedule=schedule,
        incumbent=incumbent,
        extra=extra,
        replay=rep,
    )


def _extra(
    pool: CandidatePool, data: ModelData, backend: Any, relax: RelaxationResult | None, paths: int | None
) -> dict[str, Any]:
    """The result's ``extra``: the horizon, the candidates' values, the backend's and the
    relaxation's information."""
    extra: dict[str, Any] = {
        "horizon": data.J,
        "horizon_proven": data.horizon_proven,
        "horizon_note": data.horizon_note,
        "first_token_model": data.first_tokens_only,
        "objective_name": pool.options.objective,
        "upper_bound_policy": pool.best_name,
        "policy_values": pool.values(),
        **backend.info,
    }
    if relax is not None:
        extra["relaxation"] = {
            "bound": relax.bound,
            "value": relax.value,
            "status": relax.status,
            "cpu": relax.cpu,
            "count_facts": [list(f) for f in relax.facts],
            "chunk_paths": paths,
        }
    return extra


def _incumbent(pool: CandidatePool, data: ModelData, backend: Any) -> tuple[Schedule, float, ReplayResult, str | None]:
    """The solver's solution as a schedule, replayed and checked against the solver's own value,
    unless the best candidate is better (a stopped solver may not have reached its hint) or the
    solver has none; then also why the result is that candidate's (the result's ``incumbent``)."""
    opts, best = pool.options, pool.best
    if backend.c is None:  # no model, or no incumbent within the limit: report the best candidate
        return best.schedule, best.value, best.replay, f"no schedule from the solver; schedule of {pool.best_name!r}"
    schedule = schedule_from_solution(
        data, backend.c, backend.e, backend.waits, {"solver": opts.solver, "problem": "infermax"}
    )
    if data.first_tokens_only:  # the model stops at the first tokens (model docstring)
        schedule = serial_completion(pool.instance, schedule)
    value, rep = replayed_objective(pool.instance, schedule, opts.objective)
    check_agreement(backend.objective, value, f"infermax/{opts.solver}")
    if best.value < value:
        return (
            best.schedule,
            best.value,
            best.replay,
            (f"the solver's schedule ({value:.9g}) is worse than {pool.best_name!r}'s; schedule of {pool.best_name!r}"),
        )
    return schedule, value, rep, None


def _relaxation(data: ModelData, budget: TimeBudget) -> RelaxationResult | None:
    """The residency relaxation's bound (:mod:`.relax`) when it applies, else None.

    It bounds the makespan over the proven horizon when memory binds; it gets the option
    ``relax``'s part of ``budget`` (at most the time left; no limit without one).
    """
    opts = data.options
    if not (opts.relax > 0 and opts.objective == "makespan" and data.M is not None and data.horizon_proven):
        return None
    if not fits(data):  # as the model (data.check_size)
        return None
    from .residency import residency_bound

    return residency_bound(data.instance, data.J, budget.part(opts.relax), opts.threads)


def _with_chunk_bound(
    instance: Instance, relax: RelaxationResult, upper: float, budget: TimeBudget
) -> tuple[RelaxationResult, int | None, Schedule | None]:
    """The relaxation's result with the bound of :mod:`.chunks` when the relaxation is solved and
    below ``upper`` (the best candidate's makespan) by less than one prefill bias: the gap is then
    the quadratic prefill term, which that bound prices. Also the number of paths priced one by
    one (None when it did not run or could not list the nodes) and its chunked schedule (a
    candidate; None without one)."""
    from .chunks import chunk_bound

    if (
        relax.status != Status.OPTIMAL
        or not 0 < upper - relax.bound < Coefficients.of(instance.cost_model).folded().prefill_bias
    ):
        return relax, None, None
    found = chunk_bound(instance, upper, budget)
    if found.bound is None:
        return relax, None, None
    return replace(relax, bound=max(relax.bound, found.bound)), found.paths, found.schedule


def _run_backend(data: ModelData, hint: Any, budget: TimeBudget) -> Any:
    if data.options.solver == "cpsat":
        from .cpsat import solve_cpsat

        return solve_cpsat(data, hint, budget)
    from .mip import solve_mip

    return solve_mip(data, hint, budget)


def _trajectory(instance: Instance, opts: InferMaxOptions, budget: TimeBudget) -> Bound:
    """The trajectory bound of :mod:`.colgen` within ``budget``, over the batch counts that the best
    candidate leaves open."""
    from .colgen import trajectory_bound

    ranked = sorted(initial_candidates(instance, opts, budget).found.values(), key=lambda cand: cand.value)
    tb = trajectory_bound(instance, ranked[0].value, budget, seed=[cand.schedule for cand in ranked[:2]])

    return Bound(
        name="trajectory",
        value=tb.value,
        valid=True,
        note=f"trajectory LP over B = {tb.batch_floor}..{tb.batch_ceiling} batches, {len(tb.points)} grid "
        "points (infermax/colgen.py)",
    )


#: Default time limit (seconds) of ``optsched bound --method relax``.
RELAX_BOUND_TIME = 10.0


def _relax_budget(budget: TimeBudget) -> TimeBudget:
    """The budget of the bounds ``method='relax'`` and ``'trajectory'``: ``budget``, or
    :data:`RELAX_BOUND_TIME` seconds without a limit."""
    return budget if budget.limited else budget.within(RELAX_BOUND_TIME)


def bounds(
    instance: Instance, options: Mapping[str, Any] | InferMaxBoundOptions | None, budget: TimeBudget
) -> list[Bound]:
    """Registry entry: proven lower bounds for option ``objective`` (:class:`.model.InferMaxBoundOptions`).

    The model computes its objectives exactly as :func:`optsched.schedule.replay` does, so every
    bound of :mod:`optsched.bounds` (proven for every schedule that replays cleanly) holds for its
    optimum; for ``latency`` and ``ttft`` so does every load-aware bound of :mod:`optsched.load_bounds`
    (the busy-time LP, ``pair-wait-lp`` and the fluid LP within ``budget``, each its part of the time left:
    :func:`optsched.load_bounds.lp_seconds`), for ``ttft`` the block bounds of
    :mod:`optsched.ttft_block_bounds` and :mod:`optsched.ttft_batch_bounds` (within ``budget``, each at
    most :data:`~optsched.ttft_block_bounds.BLOCK_TIME` s), and for ``latency`` the first of them plus the
    rest after each first token (:mod:`optsched.phase_bounds`).
    ``method='lp'`` adds the LP relaxation of the MIP (:mod:`.mip`; proven, usually weaker than the
    work bound on large instances but independent of it) when it is solved to a positive value.
    ``method='relax'`` adds, for the makespan with a KV capacity, the residency bound of
    :mod:`.relax` over the proven horizon of the best candidate schedule (the serial one and every
    policy), raised by the bound of :mod:`.chunks` when it applies (the relaxation solved within one
    prefill bias of the best schedule known), within ``budget`` (:data:`RELAX_BOUND_TIME` s without
    a limit, the candidates included). For the makespan with a KV capacity the KV-time bound of
    :mod:`.kvtime` is always added, and ``method='trajectory'`` adds the trajectory bound of
    :mod:`.colgen` within ``budget`` (the same default).
    """
    bound_opts = InferMaxBoundOptions.parse(options)
    objective = bound_opts.objective
    if objective == "goodput":
        from .goodput_bounds import goodput_bound

        return [goodput_bound(instance, bound_opts.method, budget)]
    out = generic_bounds(instance, objective)
    out += lp_bounds(instance, objective, budget)  # the LPs, within the budget (load_bounds.lp_seconds)
    if objective in ("ttft", "latency") and instance.requests:  # batch-end flushes on blocks (ttft_*_bounds.py)
        out += block_bounds(instance, budget, objective)  # latency: plus the rest after each first token
    if objective == "makespan" and instance.limits.kv_capacity is not None:
        value, count = kv_time_bound(instance)
        out.append(
            Bound(
                name="kv-time",
                value=value,
                valid=True,
                note=f"work bound with at least {count} batches (KV-time count, infermax/kvtime.py)",
            )
        )
        if bound_opts.method == "trajectory":
            out.append(_trajectory(instance, bound_opts.solve_options(), _relax_budget(budget)))
    if bound_opts.method == "lp":
        from .mip import lp_relaxation_bound

        lp = lp_relaxation_bound(instance, bound_opts.solve_options(), budget)
        out.extend([lp] if lp is not None else [])
    if bound_opts.method != "relax" or objective != "makespan":
        return out
    if instance.limits.kv_capacity is None:
        return out
    from .residency import residency_bound

    opts = bound_opts.solve_options()
    budget = _relax_budget(budget)  # the candidates (the horizon's schedule) count too
    best = initial_candidates(instance, opts, budget).best
    value = best.value
    data = build_data(instance, opts, value, value, _nonempty(best.schedule))
    res = residency_bound(instance, data.J, budget, opts.threads)
    if res.schedule is not None and (point := replay(instance, res.schedule)).feasible:
        value = min(value, point.metrics.makespan)
    res, paths, _ = _with_chunk_bound(instance, res, value, budget)
    chunked = "" if paths is None else f"; quadratic prefill term, infermax/chunks.py ({paths} paths priced one by one)"
    note = (
        f"residency relaxation over J = {data.J} batches ({res.status}; count facts "
        f"{[list(f) for f in res.facts]}; infermax/relax.py{chunked})"
    )
    out.append(Bound("relaxation", res.bound, data.horizon_proven, note))
    return out

"""The InferMax solve at scale: schedules by segment-list search, bounds that see KV memory, anytime.

Beyond the exact methods' reach (:data:`.model.SCALE_MIN_REQUESTS` requests and more) the solve spends
its time limit here (:func:`scale_phase`):

1. **Bounds, instant.** For the makespan, the KV-time count of :mod:`.kvtime` raises the least
   batch count of the count program of :mod:`optsched.bounds`.
2. **Schedules.** The segment-list search of :mod:`.lns` (serial schedule generation, :mod:`.segments`, and
   simulated annealing over placement orders, chunk sizes and evictions), when segment lists apply
   (:func:`.segments.segments_refused`): :data:`SEARCH_SHARE` of the time when the trajectory bound runs,
   else all of it. When requests arrive at different times (segment lists carry no clock), the policy
   search of :mod:`.online` instead: hill climbing over the unified scheduler's configurations
   from the best seed policy, each run with the arrivals and judged by its replayed objective (for mean
   latency then the search of :mod:`.key_search` over per-request priority keys from its best). For
   mean latency (:data:`POLICY_OBJECTIVES`) the policy search runs where segment lists apply too, first,
   within :data:`POLICY_SHARE` of the time (the segment lists' serial schedules pack batches for the
   makespan, where mean latency gains from batches of one token tile that let short requests finish
   first). For
   mean TTFT first the prefill-first schedules of :mod:`.prefill_first` (every prompt as soon as it may
   run, the decodes deferred to the gaps between arrivals), within :data:`PREFILL_FIRST_SHARE` of the time,
   then the local search of :mod:`.prefill_search` over per-request keys of the best of them, within
   :data:`PREFILL_SEARCH_SHARE`.
3. **The trajectory bound.** For the makespan with a KV capacity, when memory decides the batch
   count (the KV-time count is at least :data:`MEMORY_BINDS` of the other counts), the bound of
   :mod:`.colgen` (a linear relaxation over request trajectories by column generation) with the
   time left but the :data:`FINAL_SEARCH_SHARE` the search keeps for its end, its column pools
   seeded with the trajectories of the best schedules.
4. **Schedules again.** The search goes on, first (half of the time left) from the segment lists that
   follow the relaxation's solutions at the :data:`GUIDED_POINTS` batch counts of least
   overhead plus extras (:func:`.lns.segments_from_trajectories`: on ``infermax-i64-o1024-n32-m10k``
   they lead to schedules the search does not find from its own start), then from its best segment list.

When the budget has already expired on entry (the candidates took the whole limit), only the
instant bounds of step 1 are given.

The best segment list's schedule is returned for the caller to replay and offer with its other candidates
(the policies'); every value reported is a replayed schedule's or a proven bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...bounds import batch_counts, least_bias, request_work
from ...budget import SlowestRun, TimeBudget
from ...instance import Instance
from ...schedule import Schedule
from .kvtime import kv_time_count
from .lns import improve_segment_lists, segments_from_trajectories, starting_segment_lists
from .model import linear_instance
from .segments import SegmentArrays, SegmentList, segment_arrays, segments_cost, segments_refused, segments_schedule

__all__ = ["SCALE_DEFAULT_TIME", "TAIL_REPLAYS", "ScalePhase", "kv_time_bound", "scale_phase"]

#: Time (seconds) of the scale phase in a solve without a time limit (it is anytime).
SCALE_DEFAULT_TIME = 60.0
#: Replays the solve keeps time for after the scale phase, each as slow as the slowest replay of a
#: candidate so far: those of the phase's schedules offered to the candidates (at most three an
#: objective) and the check of the result (:func:`optsched.api.checked`).
TAIL_REPLAYS = 4
#: Share of the time limit the segment-list search gets before the trajectory bound (all of it when the
#: bound does not run).
SEARCH_SHARE = 0.3
#: Share of the time limit the segment-list search keeps for after the trajectory bound.
FINAL_SEARCH_SHARE = 0.3
#: Solutions of the relaxation (at as many batch counts) that start the final search.
GUIDED_POINTS = 2
#: Most of the time limit the prefill-first schedules of mean TTFT may take (they end sooner).
PREFILL_FIRST_SHARE = 0.2
#: Most of the time limit the local search over prefill plans (mean TTFT) may take (it may end sooner).
PREFILL_SEARCH_SHARE = 0.5
#: Objectives for which the policy search runs first where segment lists apply.
POLICY_OBJECTIVES = ("latency",)
#: Most of the time limit the policy search may take there before the segment-list search.
POLICY_SHARE = 0.5
#: Evaluations' worth of time each segment-list search keeps for the phase's end, where the best
#: segment list becomes a schedule (:func:`.segments.segments_schedule`: on 19,366 requests 2.8 s
#: against 1.3-1.7 s for an evaluation).
BUILD_KEPT = 2.0
#: The trajectory bound runs when the KV-time count is at least this share of the other counts.
MEMORY_BINDS = 0.9


@dataclass
class ScalePhase:
    """What the scale phase found: schedules (name -> schedule, not yet replayed by the caller),
    proven makespan bounds (name -> value, each with a note), and the search's history."""

    schedules: dict[str, Schedule] = field(default_factory=dict)
    bounds: dict[str, tuple[float, str]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def kv_time_bound(instance: Instance) -> tuple[float, int]:
    """The work bound with the KV-time count as its least batch count (offline: the whole set of
    requests after the earliest arrival), and that count."""
    instance = linear_instance(instance)  # the costs every bound reads (.model docstring)
    count = kv_time_count(instance)
    start = min((r.arrival for r in instance.requests), default=0.0)
    return start + float(request_work(instance).sum()) + least_bias(instance, batch_floor=count), count


def scale_phase(
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    upper: float,
    start: list[Schedule],
    no_evict: bool = False,
    no_hybrid: bool = False,
    no_chunk: bool = False,
    seeds: list[tuple[str, float]] | None = None,
) -> ScalePhase:
    """Search segment lists and bound the makespan within ``budget`` (module docstring).

    ``upper``: the best candidate's makespan so far; ``start``: schedules whose trajectories seed
    the trajectory bound (the best candidates); ``seeds``: (name, objective) of the candidates,
    whose best policy starts the policy search of :mod:`.online` when segment lists do not apply.
    """
    out = ScalePhase()
    t0 = time.perf_counter()
    phase = budget.share(1.0)  # what is left, its length known: the parts below are of it
    why_not = (
        "the time limit passed before the scale phase"
        if budget.expired()
        else segments_refused(instance, no_hybrid, no_chunk)
    )
    data = segment_arrays(instance) if why_not is None else None
    history: list[tuple[float, float]] = []
    best: list[tuple[float, SegmentList]] = []

    evaluations = SlowestRun()  # of every segment-list search of the phase

    def search(part: TimeBudget, begin: list[tuple[float, SegmentList]] | None) -> None:
        steps = improve_segment_lists(
            data, objective, part, evictions=not no_evict, start=begin, kept=BUILD_KEPT, slowest=evaluations
        )
        for step in steps:
            if not best or step.cost < best[0][0]:
                best[:] = [(step.cost, step.segments)]
                history.append((round(time.perf_counter() - t0, 3), step.cost))

    trajectories = False
    if objective == "makespan":
        value, count = kv_time_bound(instance)
        out.bounds["kv-time"] = (value, f"work bound with at least {count} batches (KV-time count, infermax/kvtime.py)")
        trajectories = (
            instance.limits.kv_capacity is not None
            and count >= MEMORY_BINDS * batch_counts(instance)[0]
            and not budget.expired()
        )
    if objective == "ttft" and not budget.expired():
        _prefill_first(out, instance, phase.part(PREFILL_FIRST_SHARE), no_chunk, no_evict)
        if "prefill-first" not in out.schedules or budget.expired():
            why = "the time limit passed" if budget.expired() else "no prefill-first schedule"
            out.info["prefill_search"] = f"not run: {why}"
        else:
            _prefill_search(out, instance, phase.part(PREFILL_SEARCH_SHARE), no_evict)
    first = SEARCH_SHARE if trajectories else 1.0
    if data is not None and objective in POLICY_OBJECTIVES and not budget.expired():
        _policy_search(out, instance, objective, phase.part(POLICY_SHARE), seeds or [], no_evict, no_hybrid)
    if data is not None:
        first_part = phase.part(first)
        search(first_part, starting_segment_lists(data, objective, first_part, BUILD_KEPT, evaluations))
    else:
        out.info["plan_search"] = f"not run: {why_not}"
        if not budget.expired() and len({r.arrival for r in instance.requests}) > 1:
            _policy_search(out, instance, objective, budget, seeds or [], no_evict, no_hybrid)
    guided: list[tuple[float, SegmentList]] = []
    if trajectories:
        from .colgen import TrajectoryLP, trajectory_bound

        lp = TrajectoryLP(instance)
        if best:
            upper = min(upper, best[0][0])
            start = start + [segments_schedule(instance, data, best[0][1])]
        bound_part = phase.reserve(FINAL_SEARCH_SHARE * (phase.length or 0.0) if data is not None else 0.0)
        began = time.perf_counter() - t0
        tb = trajectory_bound(instance, upper, bound_part, lp, seed=start)
        out.bounds["trajectory"] = (
            tb.value,
            f"trajectory LP over B = {tb.batch_floor}..{tb.batch_ceiling} batches, "
            f"{len(tb.points)} grid points (infermax/colgen.py)",
        )
        out.info["trajectory_points"] = [(p.batches, p.bound, p.solved) for p in tb.points]
        out.info["trajectory_history"] = [(round(began + t, 3), value) for t, value in tb.history]
        if data is not None:
            guided = _guided_segment_lists(data, lp)
    if data is not None and not budget.expired():
        if guided:  # half of what is left from the relaxation's segment lists, then from the best segment list
            search(budget.share(0.5), guided)
        search(budget, best[:1])
    if data is not None and best:
        out.schedules["plan-search"] = segments_schedule(
            instance, data, best[0][1], {"problem": "infermax", "method": "plan-search"}
        )
        out.info["plan_search_value"] = best[0][0]
    out.info["plan_search_history"] = history
    return out


def _policy_search(
    out: ScalePhase,
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    seeds: list[tuple[str, float]],
    no_evict: bool,
    no_hybrid: bool,
) -> None:
    """The policy search of :mod:`.online` within ``budget``: its schedule, when better than its
    seed, as ``online-search``; its summary in ``info``; then the key search
    (:func:`.key_search.key_search_phase`)."""
    from .key_search import kept_for_key_search, key_search_phase
    from .online import online_search

    found = online_search(
        instance, objective, budget.reserve(kept_for_key_search(objective, budget)), seeds, no_evict, no_hybrid
    )
    out.info["online_search"] = found.info()
    if found.schedule is not None:
        meta = {**found.schedule.meta, "problem": "infermax", "method": "online-search", "seed": found.seed}
        meta["max_running"] = found.cap  # the admission cap the search ran the policy under (None: R_max)
        out.schedules["online-search"] = Schedule(instance.name, meta=meta, columns=found.schedule.columns())
    key_search_phase(
        out.schedules, out.info, instance, objective, budget, (found.config, found.cap), seeds, no_evict, no_hybrid
    )


def _prefill_first(out: ScalePhase, instance: Instance, budget: TimeBudget, no_chunk: bool, no_evict: bool) -> None:
    """The best prefill-first schedule of :mod:`.prefill_first` (mean TTFT) as ``prefill-first``; its
    summary in ``info``."""
    from .prefill_first import best_prefill_first

    schedule, value, built = best_prefill_first(instance, "ttft", budget, chunked=not no_chunk, evictions=not no_evict)
    out.info["prefill_first"] = {
        "schedules": built,
        "value": None if schedule is None else value,
        "knobs": None if schedule is None else schedule.meta.get("knobs"),
    }
    if schedule is not None:
        out.schedules["prefill-first"] = schedule


def _prefill_search(out: ScalePhase, instance: Instance, budget: TimeBudget, no_evict: bool) -> None:
    """The local search of :mod:`.prefill_search` from the knobs of the ``prefill-first`` schedule: its
    schedule, when better, as ``prefill-search``; its summary in ``info``."""
    from .prefill_first import PrefillFirst
    from .prefill_search import prefill_search

    knobs = PrefillFirst(**out.schedules["prefill-first"].meta["knobs"])
    found = prefill_search(instance, knobs, budget, evictions=not no_evict)
    out.info["prefill_search"] = found.info()
    if found.schedule is not None:
        out.schedules["prefill-search"] = found.schedule


def _guided_segment_lists(data: SegmentArrays, lp: Any) -> list[tuple[float, SegmentList]]:
    """Segment lists following the relaxation's solutions (:func:`.lns.segments_from_trajectories`) at the
    :data:`GUIDED_POINTS` batch counts of least overhead plus extras (its master values), by cost."""
    cm = lp.cost_per_batch
    ranked = sorted(lp.solutions, key=lambda b: cm * b + lp.points[b].master)[:GUIDED_POINTS]
    classes = [(c.prompt, c.output) for c in lp.classes]
    segment_lists = [segments_from_trajectories(data, classes, lp.solutions[b]) for b in ranked]
    return sorted(((segments_cost(data, p, "makespan"), p) for p in segment_lists), key=lambda x: x[0])

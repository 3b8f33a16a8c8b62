"""The InferMax solve at scale: schedules by plan search, bounds that see KV memory, anytime.

Beyond the exact methods' reach (:data:`SCALE_MIN_REQUESTS` requests and more) the solve spends
its time limit here (:func:`scale_phase`):

1. **Schedules.** The plan search of :mod:`.lns` (serial schedule generation, :mod:`.plans`, and
   simulated annealing over placement orders, chunk sizes and evictions), when plans apply
   (:func:`.plans.plannable`), for :data:`SEARCH_SHARE` of the time; the best plan's schedule is
   replayed and offered with the other candidates (the policies').
2. **Bounds.** The KV-time count of :mod:`.kvtime` raises the least batch count of the count
   program of :mod:`optsched.bounds` (instant). For the makespan with a KV capacity, when memory
   decides the batch count (the KV-time count is at least :data:`MEMORY_BINDS` of the other
   counts), the trajectory bound of :mod:`.colgen` (a linear relaxation over request
   trajectories by column generation) with the time left but what the search keeps for its end,
   its column pools seeded with the trajectories of the best schedules.
3. **Schedules again.** The search continues from its best plan until the deadline.

Every value reported is a replayed schedule's or a proven bound; the bound is capped at the best
schedule's value (a bound above it would prove that schedule optimal, and the two can only meet).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...bounds import batch_counts, least_bias, request_work
from ...instance import Instance
from ...schedule import Schedule
from .kvtime import kv_time_count
from .lns import improve_plans, starting_plans
from .plans import Plan, plan_cost, plan_data, plan_schedule, plannable

__all__ = ["SCALE_MIN_REQUESTS", "ScalePhase", "kv_time_bound", "scale_phase"]

#: Instances with at least this many requests are solved at scale (the exact search of the
#: residency relaxation handles up to about 10 requests; the CP-SAT model is too large beyond).
SCALE_MIN_REQUESTS = 12
#: Share of the time limit the plan search gets before the trajectory bound.
SEARCH_SHARE = 0.5
#: Share of the time limit the plan search keeps for after the trajectory bound.
FINAL_SEARCH_SHARE = 0.1
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
    count = kv_time_count(instance)
    start = min((r.arrival for r in instance.requests), default=0.0)
    return start + float(request_work(instance).sum()) + least_bias(instance, batch_floor=count), count


def scale_phase(
    instance: Instance,
    objective: str,
    deadline: float,
    upper: float,
    start: list[Schedule],
    no_evict: bool = False,
    no_hybrid: bool = False,
    no_chunk: bool = False,
) -> ScalePhase:
    """Search plans and bound the makespan until ``deadline`` (module docstring).

    ``upper``: the best candidate's objective so far; ``start``: schedules whose trajectories seed
    the trajectory bound (the best candidates).
    """
    out = ScalePhase()
    t0 = time.perf_counter()
    span = max(0.0, deadline - t0)
    why_not = plannable(instance, no_hybrid, no_chunk)
    data = plan_data(instance) if why_not is None else None
    history: list[tuple[float, float]] = []
    best: tuple[float, Plan] | None = None

    def search(until: float, begin: list[tuple[float, Plan]] | None) -> None:
        nonlocal best
        for step in improve_plans(data, objective, until, evictions=not no_evict, start=begin):
            best = (step.cost, step.plan)
            history.append((round(time.perf_counter() - t0, 3), step.cost))

    if data is not None:
        search(t0 + SEARCH_SHARE * span, starting_plans(data, objective, t0 + SEARCH_SHARE * span))
        out.schedules["plan-search"] = plan_schedule(instance, data, best[1], {"problem": "infermax", "method": "plan-search"})
    else:
        out.info["plan_search"] = f"not run: {why_not}"
    if objective == "makespan":
        value, count = kv_time_bound(instance)
        out.bounds["kv-time"] = (value, f"work bound with at least {count} batches (KV-time count, infermax/kvtime.py)")
        if instance.limits.kv_capacity is not None and count >= MEMORY_BINDS * batch_counts(instance)[0]:
            from .colgen import trajectory_bound

            if best is not None:
                upper = min(upper, best[0])
            seeds = list(start) + list(out.schedules.values())
            until = deadline - (FINAL_SEARCH_SHARE * span if data is not None else 0.0)
            tb = trajectory_bound(instance, upper, until, seed=seeds)
            out.bounds["trajectory"] = (tb.value, f"trajectory LP over B = {tb.batch_floor}..{tb.batch_ceiling} batches, "
                                                  f"{len(tb.points)} grid points (infermax/colgen.py)")
            out.info["trajectory_points"] = [(p.batches, p.bound, p.solved) for p in tb.points]
    if data is not None and time.perf_counter() < deadline:
        search(deadline, [best])
        out.schedules["plan-search"] = plan_schedule(instance, data, best[1], {"problem": "infermax", "method": "plan-search"})
    out.info["plan_search_history"] = history
    if data is not None:
        out.info["plan_search_value"] = plan_cost(data, best[1], objective)
    return out

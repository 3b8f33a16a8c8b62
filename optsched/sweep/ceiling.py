"""The proven capacity ceiling of a capacity search, and capacities in requests and tokens per second.

For each configuration (workload, cost model, limits) :func:`ceiling_rows` scans the capacity
search's rate grid from its high end down and stops at the first rate at which the bounds of
:mod:`optsched.problems.infermax.goodput_bounds` (:func:`~optsched.problems.infermax.goodput_bounds.target_unreachable`)
do not prove the SLO target unreachable: every grid rate above that one is proven unreachable for
every schedule, so no scheduler serves more on that grid. The scan never assumes that
unreachability is monotone in the rate: it checks every grid point above the ceiling. The result is
a ``kind = capacity`` row with ``policy = "ceiling"``, ``status`` ``ok`` (``above_range`` when even
the high end is not refuted) and the reason of the first refuted point in ``error``.

:func:`throughputs` turns a rate scale into requests per second and tokens per second (prompt plus
output) of the scaled workload: requests (tokens) divided by the span of their arrivals.
:func:`steady_state_warning` flags a slice whose queue still grows at its end near a capacity.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..instance import Instance
from ..workload import WorkloadTransforms, apply_transforms
from .cells import Cell, SloTarget, make_row

__all__ = ["ceiling_rows", "steady_state_warning", "throughputs"]


def throughputs(instance: Instance, rate_scale: float | None) -> tuple[float | None, float | None]:
    """(requests/s, tokens/s) of ``instance`` (at rate scale 1) run at ``rate_scale``; None when the
    arrivals span no time or there is no rate."""
    if rate_scale is None:
        return None, None
    arrivals = [r.arrival for r in instance.requests]
    span = (max(arrivals) - min(arrivals)) / rate_scale
    if span <= 0:
        return None, None
    tokens = sum(r.prompt_tokens + r.output_tokens for r in instance.requests)
    return len(arrivals) / span, tokens / span


def _scan(instance: Instance, grid: list[float], target: SloTarget) -> tuple[int, str | None, int]:
    """(index of the ceiling on the grid, -1 when every point is refuted; the reason the point above it
    is refuted; points checked)."""
    # imported here: the CLI starts without InferMax's modules
    from ..problems.infermax.goodput_bounds import request_facts, scaled_arrivals, target_unreachable

    facts = request_facts(instance)
    reason = None
    for k in range(len(grid) - 1, -1, -1):
        why = target_unreachable(facts, scaled_arrivals(instance, grid[k]), target.ttft, target.tpot, target.attainment)
        if why is None:
            return k, reason, len(grid) - k
        reason = f"rate scale {grid[k]:.4g}: {why}"
    return -1, reason, len(grid)


def ceiling_rows(
    cells_by_config: list[list[Cell]], instances: list[Instance], target: SloTarget
) -> Iterator[dict[str, Any]]:
    """One ``policy = "ceiling"`` capacity row per configuration (module docstring); each list of
    cells is one configuration's rate grid, in rate order, and ``instances`` the workloads' bases."""
    from .workloads import cell_instance

    for cells in cells_by_config:
        t0 = time.perf_counter()
        first = cells[0]
        base = cell_instance(instances[first.workload_index], first.cost_model, dict(first.limits), 1.0)
        grid = [c.rate_scale for c in cells]
        k, reason, checked = _scan(base, grid, target)
        status = "above_range" if k == len(grid) - 1 else "below_range" if k < 0 else "ok"
        rate = grid[k] if k >= 0 else None
        req_s, tok_s = throughputs(base, rate)
        yield make_row(
            first,
            base,
            kind="capacity",
            policy="ceiling",
            status=status,
            error=f"{reason} ({checked} grid points checked)" if reason else None,
            wall_time=time.perf_counter() - t0,
            rate_scale=rate,
            requests=len(base.requests),
            req_per_s=req_s,
            tokens_per_s=tok_s,
        )


def steady_state_warning(base: Instance, policy: str, rate_scale: float, target: SloTarget) -> str | None:
    """A warning when ``policy`` at ``rate_scale`` (a capacity) ends the slice with a growing queue:
    more requests waiting for their first token at the last arrival than at the median arrival, and
    at least 2 % of them. Such a slice is too short for a steady state near the capacity. A policy
    that schedules by SLO targets runs with the ``target``'s, as in the capacity probes."""
    from ..policies import reads_slo, simulator_for
    from ..schedule import replay

    instance = apply_transforms(base, WorkloadTransforms(rate_scale=rate_scale)) if rate_scale != 1.0 else base
    slos = WorkloadTransforms(slo_ttft=target.ttft, slo_tpot=target.tpot)
    rep = replay(instance, simulator_for(policy)(apply_transforms(instance, slos) if reads_slo(policy) else instance))
    if not rep.feasible:
        return None
    arrival = np.array([r.arrival for r in instance.requests])
    first = np.array([rep.outcomes[r.id].first_token for r in instance.requests], dtype=np.float64)
    mid, end = float(np.quantile(arrival, 0.5)), float(arrival.max())
    waiting_mid, waiting_end = (int(((arrival <= t) & (first > t)).sum()) for t in (mid, end))
    if waiting_end <= max(waiting_mid, 0.02 * len(arrival)):
        return None
    return (
        f"{policy} at rate scale {rate_scale:.4g}: {waiting_end} requests wait for a first token at the last "
        f"arrival against {waiting_mid} at the median one; the queue still grows at the end of the slice, "
        "too short for a steady state near the capacity: take a longer one (workload 'window' or 'first')"
    )

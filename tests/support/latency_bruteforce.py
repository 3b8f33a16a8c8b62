"""Exhaustive least mean latency / mean TTFT of a tiny instance, arrivals included.

The offline search of :mod:`tests.support.infermax_bruteforce` prices a batch by the number of
requests still waiting, which needs every arrival at 0. Here every label is a pair (time, sum of
event times) per request state, with labels dominated in both dropped; every batch starts at the
earliest time the replay allows (the previous end, or the latest arrival of its requests): a later
start only delays every later time, so an optimal schedule starts every batch at the earliest.
The successors (every legal batch, evictions and chunks included) are the offline search's.
"""

from __future__ import annotations

import heapq
import itertools
import math

from optsched.instance import Instance
from optsched.schedule import Batch, Schedule
from tests.support.infermax_bruteforce import _successors


def exhaustive_mean(inst: Instance, objective: str, evict: bool = True) -> tuple[float, Schedule] | None:
    """Least mean latency (``latency``) or mean TTFT (``ttft``) over all schedules, with an optimal
    schedule; None if none finishes."""
    reqs = inst.requests
    goal = tuple(r.output_tokens for r in reqs)
    arrival = {r.id: r.arrival for r in reqs}
    start = tuple((0, r.prompt_tokens, 0) for r in reqs)
    labels: dict[tuple, list[tuple[float, float]]] = {start: [(0.0, 0.0)]}
    tick = itertools.count()
    heap = [(0.0, 0.0, next(tick), start, ())]
    best: tuple[float, tuple] | None = None
    while heap:
        t, acc, _, state, path = heapq.heappop(heap)
        if best is not None and acc >= best[0]:
            continue  # event sums only grow
        if any(lt <= t and la <= acc and (lt, la) != (t, acc) for lt, la in labels.get(state, ())):
            continue
        if tuple(g for _, _, g in state) == goal:
            best = (acc, path)
            continue
        for cost, nxt, batch in _successors(inst, state, evict, True, True):
            ready = max([arrival[it.id] for it in batch.items] + [arrival[i] for i in batch.evict] + [0.0])
            end = max(t, ready) + cost
            if ready > t:
                batch = Batch(batch.items, batch.evict, start=ready)
            if objective == "latency":
                events = sum(g < o and g2 == o for (_, _, g), (_, _, g2), o in zip(state, nxt, goal))
            else:
                events = sum(g == 0 and g2 > 0 for (_, _, g), (_, _, g2) in zip(state, nxt))
            nacc = acc + end * events
            kept = labels.setdefault(nxt, [])
            if any(lt <= end and la <= nacc for lt, la in kept):
                continue
            kept[:] = [(lt, la) for lt, la in kept if not (end <= lt and nacc <= la)] + [(end, nacc)]
            heapq.heappush(heap, (end, nacc, next(tick), nxt, (*path, batch)))
    if best is None:
        return None
    value = (best[0] - math.fsum(r.arrival for r in reqs)) / len(reqs)
    return value, Schedule(inst.name, tuple(best[1]), {"solver": "exhaustive"})

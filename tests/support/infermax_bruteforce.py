"""Independent exhaustive search for the InferMax optimum (tests only; NOT the model).

Shortest path (Dijkstra) over joint request states, written from the contract (docs/schedule.md) without
any of the model's variables: a request's state is ``(m, I, g)`` (KV held, current prompt, tokens
generated; finished when g == O). From a state, every batch is enumerated: each unfinished request
either idles, is evicted (if it holds KV and evictions are allowed) or processes a legal item
(a prefill chunk 1..I-m, all of it without chunking, or one decode token); the batch must respect
C, P (prefill tokens), M and R_max after processing, and hybrid batching when it is off. Batches
with evictions only are allowed (they cost 0). The path is returned as a schedule so that tests
replay it too.

Each objective is a shortest path with its own edge cost (T = the cost model's batch time, every
term priced, the step-shape terms included):

- ``makespan``: the label is the end time of the last batch; a batch starts at the later of that
  and the arrivals of the requests it names (waiting is never useful otherwise). The end time is
  non-decreasing in the start time, so the earliest label of a state dominates (label setting is
  exact with arrivals too).
- ``completion`` (sum of finish times, all arrivals at 0): a request's finish time is the sum of T
  over the batches up to its finishing one, so the sum over requests is the sum over batches of
  T times the number of requests unfinished before the batch.
- ``ttft`` (mean first-token time, all arrivals at 0): likewise T times the number of requests
  without a token before the batch, divided by N; the path still has to finish every request.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from optsched.instance import Instance
from optsched.schedule import Batch, Item, Schedule

State = tuple[tuple[int, int, int], ...]


def _actions(state: tuple[int, int, int], out: int, evict: bool, chunk: bool) -> list[tuple[str, int]]:
    """Per request: ("idle", 0), ("evict", 0), ("pre", c) or ("dec", 1)."""
    m, prompt, g = state
    if g == out:
        return [("idle", 0)]
    acts = [("idle", 0)]
    if evict and m > 0:
        acts.append(("evict", 0))
    if m < prompt:
        sizes = range(1, prompt - m + 1) if chunk else [prompt - m]
        acts.extend(("pre", c) for c in sizes)
    else:
        acts.append(("dec", 1))
    return acts


def _successors(
    inst: Instance, state: State, evict: bool, chunk: bool, hybrid: bool
) -> Iterator[tuple[float, State, Batch]]:
    lim = inst.limits
    reqs = inst.requests
    per = [_actions(s, r.output_tokens, evict, chunk) for s, r in zip(state, reqs)]
    for combo in itertools.product(*per):
        if all(a == "idle" for a, _ in combo):
            continue
        n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0
        kv = running = 0
        new: list[tuple[int, int, int]] = []
        items: list[Item] = []
        ev: list[str] = []
        for (a, c), (m, prompt, g), r in zip(combo, state, reqs):
            if a == "evict":
                prompt = m + 1 if m >= prompt else prompt
                m = 0
                ev.append(r.id)
            elif a == "pre":
                x_pre += c * m  # the chunk attends to the m keys cached before it
                m += c
                n_tok += c
                n_pre += c
                s_pre += c * c
                if m == prompt:
                    g += 1
                items.append(Item(r.id, c))
            elif a == "dec":
                kv_dec += m
                kv_max = max(kv_max, m)  # the longest decode context (step-shape term)
                m += 1
                n_tok += 1
                n_dec += 1
                g += 1
                items.append(Item(r.id, 1))
            kv += m  # limits are checked after processing, finishing requests included
            running += m > 0
            if g == r.output_tokens:
                m = 0
            new.append((m, prompt, g))
        if n_tok > lim.token_budget or n_pre > lim.prefill_budget:
            continue
        if lim.kv_capacity is not None and kv > lim.kv_capacity:
            continue
        if lim.max_running is not None and running > lim.max_running:
            continue
        if not hybrid and n_pre > 0 and n_dec > 0:
            continue
        cost = inst.cost_model.batch_time(n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max)
        yield cost, tuple(new), Batch(tuple(items), tuple(ev))


def exhaustive_optimum(
    inst: Instance, objective: str = "makespan", evict: bool = True, chunk: bool = True, hybrid: bool = True
) -> tuple[float, Schedule] | None:
    """Least ``objective`` over all schedules, with an optimal schedule; None if none finishes.

    Arrivals are allowed for ``makespan`` only (the other objectives' edge costs assume time 0).
    """
    reqs = inst.requests
    if objective != "makespan" and any(r.arrival > 0 for r in reqs):
        raise ValueError(f"exhaustive search of {objective!r} handles offline instances only")
    start: State = tuple((0, r.prompt_tokens, 0) for r in reqs)
    goal_g = tuple(r.output_tokens for r in reqs)
    arrival = {r.id: r.arrival for r in reqs}
    dist = {start: 0.0}
    parent: dict[State, tuple[State, Batch]] = {}
    heap = [(0.0, 0, start)]
    tick = itertools.count(1)
    while heap:
        d, _, s = heapq.heappop(heap)
        if d > dist[s]:
            continue
        if tuple(g for _, _, g in s) == goal_g:
            batches = []
            while s in parent:
                s, b = parent[s]
                batches.append(b)
            return d, Schedule(inst.name, tuple(reversed(batches)), {"solver": "exhaustive"})
        for cost, t, batch in _successors(inst, s, evict, chunk, hybrid):
            if objective == "makespan":
                ready = max([arrival[it.id] for it in batch.items] + [arrival[i] for i in batch.evict])
                if ready > d:
                    batch = Batch(batch.items, batch.evict, start=ready)
                nd = max(d, ready) + cost
            elif objective == "completion":
                nd = d + cost * sum(g < o for (_, _, g), o in zip(s, goal_g))
            elif objective == "ttft":
                nd = d + cost * sum(g == 0 for _, _, g in s) / len(reqs)
            else:
                raise ValueError(f"unknown objective {objective!r}")
            if nd < dist.get(t, float("inf")) - 1e-15:
                dist[t] = nd
                parent[t] = (s, batch)
                heapq.heappush(heap, (nd, next(tick), t))
    return None


def exhaustive_makespan(
    inst: Instance, evict: bool = True, chunk: bool = True, hybrid: bool = True
) -> tuple[float, Schedule] | None:
    """Least makespan over all schedules, with an optimal schedule; None if none."""
    return exhaustive_optimum(inst, "makespan", evict, chunk, hybrid)

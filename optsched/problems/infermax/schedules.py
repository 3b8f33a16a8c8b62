"""Schedules of the InferMax model: the serial schedule and completion, and solutions as schedules.

:func:`serial_schedule` is the trivially feasible schedule (every request alone);
:func:`first_token_prefix` and :func:`serial_completion` cut a schedule at its last first token and
complete it (the first-token model of :mod:`.model`); :func:`earliest_starts`,
:func:`schedule_from_solution` and :func:`hint_from_schedule` turn the backends' values into a
schedule and a schedule into their values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Any

import numpy as np

from ...bounds import equal_splits
from ...costmodel import Coefficients, CostModel
from ...instance import Instance
from ...schedule import Batch, Item, ReplayResult, Schedule, replay
from .data import ModelData
from .model import InferMaxInputError

__all__ = [
    "earliest_starts",
    "first_token_prefix",
    "hint_from_schedule",
    "lone_prefill_chunks",
    "schedule_from_solution",
    "serial_completion",
    "serial_schedule",
]


@lru_cache(maxsize=65536)
def lone_prefill_chunks(cost: CostModel, tokens: int, cap: int) -> tuple[int, ...]:
    """The chunks (each at most ``cap``) in which a prompt of ``tokens`` tokens prefilled alone, one
    chunk a batch, takes the least time among the splits into k equal parts (sizes q and q + 1, k
    from ceil(tokens / cap) up: :func:`optsched.bounds.equal_splits`) and the fewest full chunks of
    ``cap`` then the rest. For chunks c_1..c_k in order, the context term sums to ``pc (X^2 - sum_j c_j^2) / 2`` (as in
    :func:`optsched.bounds.prefill_alone_time`), so the k equal parts cost ``L (k (b + pb) + (a + pa) X
    + tc (tiles of its chunks) + pc X^2 / 2 + (pq - pc / 2) sum_j c_j^2)``; the best k by that form is
    compared with the full chunks by their batch times."""
    k, q, r, squares = equal_splits(tokens, cap)
    coef = Coefficients.of(cost)
    tile = max(coef.token_tile, 1)
    tiles = (k - r) * -(-q // tile) + r * -(-(q + 1) // tile)
    pq, pc = coef.prefill_per_token_sq, coef.prefill_per_ctx
    best = int(np.argmin(k * (coef.base + coef.prefill_bias) + coef.per_tile * tiles + (pq - pc / 2) * squares))
    equal = (int(q[best]) + 1,) * int(r[best]) + (int(q[best]),) * int(k[best] - r[best])
    full = (cap,) * (tokens // cap) + ((tokens % cap,) if tokens % cap else ())
    return min((equal, full), key=lambda chunks: _alone_time(cost, chunks))


def _alone_time(cost: CostModel, chunks: tuple[int, ...]) -> float:
    """The time of a prompt's ``chunks`` prefilled alone, one batch each, in order."""
    return sum(cost.prefill_time(c, cached) for c, cached in zip(chunks, accumulate(chunks, initial=0)))


def serial_schedule(instance: Instance, no_chunk: bool = False) -> Schedule:
    """The trivially feasible schedule: requests one at a time, in arrival order.

    Each request waits for its arrival, prefills its prompt in the chunks of least time alone
    (:func:`lone_prefill_chunks`, chunks of at most min(C, P) tokens; one chunk when ``no_chunk``)
    and then decodes alone. For one request, or requests that never overlap, it meets the bound of
    each request alone wherever that bound's least prefill is one of those splits (the solve then
    ends at once). It is feasible exactly when every request is on its own (I + O - 1 <= M, R_max
    >= 1, C and P >= 1, and I <= min(C, P) without chunking); otherwise :class:`InferMaxInputError`
    names the request that can never be served.
    """
    lim = instance.limits
    chunk_cap = min(lim.token_budget, lim.prefill_budget)
    cost = instance.cost_model
    batches: list[Batch] = []
    clock = 0.0
    for r in sorted(instance.requests, key=lambda r: (r.arrival, instance.index(r.id))):
        if lim.max_running is not None and lim.max_running < 1:
            raise InferMaxInputError(f"request {r.id!r}: max_running = {lim.max_running} admits no request")
        if lim.kv_capacity is not None and r.max_kv > lim.kv_capacity:
            raise InferMaxInputError(
                f"request {r.id!r}: needs {r.max_kv} KV slots (prompt_tokens + output_tokens - 1) "
                f"> kv_capacity {lim.kv_capacity}"
            )
        if chunk_cap < 1 or (no_chunk and r.prompt_tokens > chunk_cap):
            raise InferMaxInputError(
                f"request {r.id!r}: prompt_tokens {r.prompt_tokens} cannot be prefilled "
                f"(min(token_budget, prefill_budget) = {chunk_cap}{', chunked prefill off' if no_chunk else ''})"
            )
        wait = r.arrival if r.arrival > clock else None  # a batch may not start before the last ends
        clock = max(clock, r.arrival)
        chunks = (r.prompt_tokens,) if no_chunk else lone_prefill_chunks(cost, r.prompt_tokens, chunk_cap)
        for c, cached in zip(chunks, accumulate(chunks, initial=0)):
            batches.append(Batch((Item(r.id, c),), start=wait))
            wait = None
            clock += cost.prefill_time(c, cached=cached)
        for k in range(r.output_tokens - 1):
            batches.append(Batch((Item(r.id, 1),)))
            clock += cost.decode_time(1, r.prompt_tokens + k, r.prompt_tokens + k)
    return Schedule(instance.name, tuple(batches), {"policy": "serial"})


def first_token_prefix(schedule: Schedule, rep: ReplayResult) -> Schedule:
    """The batches of ``schedule`` (replayed as ``rep``) up to the one generating its last first token.

    Batches with items end strictly later one after the other (each costs > 0, :func:`.data.horizon`), so
    that batch is the first with items ending at the last first-token time.
    """
    last = max(o.first_token for o in rep.outcomes.values() if o.first_token is not None)
    end = next(j for j, b in enumerate(schedule.batches) if b.items and rep.ends[j] >= last)
    return Schedule(schedule.instance, schedule.batches[: end + 1], dict(schedule.meta))


def serial_completion(instance: Instance, prefix: Schedule, evict: bool = True) -> Schedule:
    """``prefix`` followed by a serial completion of every request it leaves unfinished.

    With ``evict``, an eviction-only batch drops every unfinished request holding KV; then each
    unfinished request in instance order refills its prompt plus the g tokens it has generated
    (I + g tokens, the contract's refill prompt; I when g = 0) in chunks of at most min(C, P), which
    generates token g + 1, and decodes alone to its last token. Feasible whenever
    :func:`serial_schedule` is (each request alone: I + O - 1 <= M, R_max >= 1). Without ``evict``
    (for a prefix without evictions, where every prompt is still the request's own), each unfinished
    request keeps its KV m and goes on from it: the rest of its prompt (I - m tokens, when it has no
    token yet) and then its decodes, alone; feasible where the KV held at the prefix's end and the
    running requests leave room (no KV capacity and no running limit, for instance). The completion
    waits for the latest arrival among them.
    """
    state = replay(instance, prefix)
    lim = instance.limits
    chunk_cap = min(lim.token_budget, lim.prefill_budget)
    left = [(r, g, kv) for r, g, kv in zip(instance.requests, state.generated, state.kv_held) if g < r.output_tokens]
    holders = tuple(r.id for r, _, kv in left if kv > 0)
    latest = max((r.arrival for r, _, _ in left), default=0.0)
    tail: list[Batch] = [Batch((), holders)] if holders and evict else []
    for r, g, kv in left:
        if evict:
            refill = r.prompt_tokens + g
        else:
            refill = r.prompt_tokens - kv if g == 0 else 0
        decodes = r.output_tokens - g - (refill > 0)
        while refill > 0:
            tail.append(Batch((Item(r.id, min(refill, chunk_cap)),)))
            refill -= chunk_cap
        tail.extend(Batch((Item(r.id, 1),)) for _ in range(decodes))
    if tail and latest > (state.ends[-1] if state.ends else 0.0):
        tail[0] = Batch(tail[0].items, tail[0].evict, latest)
    return Schedule(prefix.instance, prefix.batches + tuple(tail), dict(prefix.meta))


def earliest_starts(
    data: ModelData, c: Sequence[Sequence[int]], e: Sequence[Sequence[int]], T_sec: Sequence[float]
) -> tuple[list[float | None], list[float]]:
    r"""Waits and ends (seconds) of every model batch for the items ``c`` and evictions ``e``, started
    as early as possible.

    :math:`S_j = \max(E_{j-1}, a_i` of every request with an item or eviction in j), :math:`E_j = S_j
    + T_j`. C10 bounds S only from below, so a solution's own :math:`S_j` may be later (a time-limited
    solve need not push it down); the replay starts every batch of :func:`schedule_from_solution`
    this early, so times and objectives computed from these ends agree with it.

    Returns
    -------
    (waits, ends)
        ``waits[j]`` is the arrival batch j waits for when one starts it later than :math:`E_{j-1}`
        (the batch's ``start``), else None.
    """
    waits: list[float | None] = []
    ends: list[float] = []
    for j in range(data.J):
        previous = ends[-1] if ends else 0.0
        latest = max([data.arrival[i] for i in range(data.N) if c[i][j] > 0 or e[i][j]], default=0.0)
        waits.append(latest if latest > previous else None)
        ends.append(max(previous, latest) + T_sec[j])
    return waits, ends


def schedule_from_solution(
    data: ModelData,
    c: Sequence[Sequence[int]],
    e: Sequence[Sequence[int]],
    waits: Sequence[float | None] | None,
    meta: Mapping[str, Any],
) -> Schedule:
    """Turn solution values ``c[i][j]``, ``e[i][j]`` (and the waits of :func:`earliest_starts`) into a schedule.

    Empty batches (no item, no eviction) are dropped; they cost nothing and change nothing. When a
    request is evicted and processed in the same model batch, the evictions go into an
    eviction-only batch (cost 0) placed just before it (the model's note on (4)).
    """
    batches: list[Batch] = []
    for j in range(data.J):
        items = tuple(Item(data.ids[i], int(c[i][j])) for i in range(data.N) if c[i][j] > 0)
        evict = tuple(data.ids[i] for i in range(data.N) if e[i][j])
        if not items and not evict:
            continue
        start = waits[j] if waits is not None else None
        if any(e[i][j] and c[i][j] > 0 for i in range(data.N)):
            batches.append(Batch((), evict, start))
            evict = ()
        batches.append(Batch(items, evict, start))
    return Schedule(data.instance.name, tuple(batches), dict(meta))


def hint_from_schedule(data: ModelData, schedule: Schedule) -> tuple[list[list[int]], list[list[int]]] | None:
    """Per (i, j) token counts and evictions of a schedule, padded to J (None if it does not fit).

    Evictions of a batch without items move to the next batch with items (the model's note on (4)).
    """
    batches = [b for b in schedule.batches if b.items]
    if len(batches) > data.J:
        return None
    index = {rid: i for i, rid in enumerate(data.ids)}
    c = [[0] * data.J for _ in range(data.N)]
    e = [[0] * data.J for _ in range(data.N)]
    j = 0
    for b in schedule.batches:
        for rid in b.evict:
            e[index[rid]][min(j, data.J - 1)] = 1
        if b.items:
            for it in b.items:
                c[index[it.id]][j] = it.tokens
            j += 1
    return c, e

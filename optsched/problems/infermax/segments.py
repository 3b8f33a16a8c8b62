r"""Segment lists: schedules built by serial schedule generation over resource profiles (any instance size).

A *segment list* lists *segments* in a placement order. A segment :math:`(i, g_0, g_1)` of request i
generates its tokens :math:`g_0 + 1 .. g_1`: a (re)fill of :math:`X = I_i + g_0` tokens (the
original prompt when :math:`g_0 = 0`, else the prompt plus every token generated, docs/schedule.md,
rule 2) in chunks of at most q tokens over :math:`\lceil X / q \rceil` consecutive batches, the last one
generating token :math:`g_0 + 1`, then :math:`g_1 - g_0 - 1` decode steps in the batches right
after, one per batch. A request's segments cover its tokens in order; between two of them it is
evicted (it holds no KV until its refill starts), so a request with one segment is never evicted.

Placing a segment at batch t fixes, for every batch :math:`t + k` it spans, what it adds to that
batch: KV held after processing (:math:`\min(X, q (k+1))` while filling, :math:`X + j` after its
j-th decode step), prefill tokens (its chunk), tokens (its chunk, or 1 for a decode) and one running
request. *Serial schedule generation* (the scheme of project scheduling) places the segments one by
one in the segment list's order, each at the earliest batch t (from its release: 0, or one batch after the
end of the request's previous segment; a multiple of the segment list's ``grid``) where every batch it
spans stays within M, P, C and :math:`R_{max}` with what is already placed. Placed segments never
move, so the profiles are exact: the batch at index t holds exactly the items placed there, and its
KV after processing is exactly the profile (each request's KV follows the contract's rules: a chunk
adds its tokens, a decode one slot, a finishing request releases after the check, an evicted one
holds nothing).

:func:`segments_schedule` writes the batches in index order, with the evictions of the requests whose
segment ended at batch t - 1 (and are not finished) in an eviction-only batch just before batch t
(cost 0; the contract forbids an item for a request evicted in the same batch), and skips empty
batches. The objective of a segment list (:func:`segments_cost`) is computed from the profiles with the cost
model of docs/costmodel.md (the prefill-context and step-shape terms included); every schedule a caller keeps is
still replayed (:func:`optsched.schedule.replay`) before a number is reported.

Segment lists need an offline instance (every request arrives at the same time): batch indices carry no
clock. :func:`segments_refused` says whether an instance and the options admit segment lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...costmodel import Coefficients
from ...instance import Instance
from ...schedcols import ScheduleColumns
from ...schedule import Schedule

__all__ = [
    "SegmentList",
    "SegmentArrays",
    "segments_cost",
    "segment_arrays",
    "segments_schedule",
    "segments_refused",
    "OBJECTIVE_CODES",
]

#: Objectives a segment list's cost can be: makespan, sum of finish times, mean time to first token.
OBJECTIVE_CODES = {"makespan": 0, "latency": 1, "ttft": 2}

#: An unlimited KV capacity or running count, as an integer the kernels can compare.
UNLIMITED = 1 << 60


@dataclass(frozen=True)
class SegmentArrays:
    """An instance as arrays for the kernels.

    Attributes
    ----------
    prompt, output
        I_i and O_i per request (instance order).
    M, P, C, R
        Limits (``UNLIMITED`` for no KV capacity or running limit).
    coef
        The cost model's coefficients (:meth:`~optsched.costmodel.Coefficients.of`).
    start
        The common arrival time (the first batch starts there).
    """

    prompt: np.ndarray
    output: np.ndarray
    M: int
    P: int
    C: int
    R: int
    coef: Coefficients
    start: float


def segments_refused(instance: Instance, no_hybrid: bool = False, no_chunk: bool = False) -> str | None:
    """None when segment lists apply to ``instance`` under the options; else the reason they do not."""
    if len({r.arrival for r in instance.requests}) > 1:
        return "requests arrive at different times (segment lists carry no clock)"
    if no_hybrid:
        return "segment lists mix prefill and decode items in a batch (no_hybrid)"
    P = instance.limits.prefill_budget
    if no_chunk and any(r.prompt_tokens > P for r in instance.requests):
        return "a prompt exceeds P and chunked prefill is off"
    return None


def segment_arrays(instance: Instance) -> SegmentArrays:
    """The arrays of ``instance`` for :func:`segments_cost`."""
    lim, cm = instance.limits, instance.cost_model
    return SegmentArrays(
        prompt=np.array([r.prompt_tokens for r in instance.requests], dtype=np.int64),
        output=np.array([r.output_tokens for r in instance.requests], dtype=np.int64),
        M=UNLIMITED if lim.kv_capacity is None else int(lim.kv_capacity),
        P=int(lim.prefill_budget),
        C=int(lim.token_budget),
        R=UNLIMITED if lim.max_running is None else int(lim.max_running),
        coef=Coefficients.of(cm),
        start=float(instance.requests[0].arrival) if instance.requests else 0.0,
    )


@dataclass(frozen=True)
class SegmentList:
    """Segments in placement order: request, first and last token generated (``g0`` exclusive),
    chunk size; and the start grid (segments start at multiples of ``grid``)."""

    request: np.ndarray
    g0: np.ndarray
    g1: np.ndarray
    chunk: np.ndarray
    grid: int = 1

    @classmethod
    def whole(cls, order: np.ndarray, output: np.ndarray, chunk: np.ndarray, grid: int = 1) -> SegmentList:
        """One segment per request (no eviction), in ``order``, with per-request ``chunk`` sizes."""
        order = np.asarray(order, dtype=np.int64)
        return cls(
            order,
            np.zeros(len(order), np.int64),
            np.asarray(output, np.int64)[order],
            np.asarray(chunk, np.int64)[order],
            grid,
        )


@njit(cache=True)
def segment_at(X: int, q: int, k: int) -> tuple[int, int, int]:
    """(KV after processing, prefill tokens, KV before a prefill chunk) of a segment of fill X and
    chunk q at its k-th batch (a decode step has 0 prefill tokens)."""
    n_fill = (X + q - 1) // q
    if k < n_fill:
        c = q if k < n_fill - 1 else X - q * (n_fill - 1)
        return min(X, q * (k + 1)), c, q * k
    return X + k - n_fill + 1, 0, 0


@njit(cache=True)
def _grow(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[: len(a)] = a
    return out


@njit(cache=True)
def _fill_fits(kv, pre, tok, run, t, X, q, n_fill, M, P, C, R):  # noqa: ANN001, ANN202
    """Whether the fill batches of a segment started at t fit with what is placed."""
    for k in range(n_fill):
        m, c, _ = segment_at(X, q, k)
        u = t + k
        if kv[u] + m > M or pre[u] + c > P or tok[u] + c > C or run[u] >= R:
            return False
    return True


@njit(cache=True)
def earliest_start(kv, pre, tok, run, t0, X, q, n_fill, length, grid, M, P, C, R):  # noqa: ANN001, ANN202
    """The earliest start t >= t0 (a multiple of ``grid``) where a segment fits (arrays long
    enough for every start tried: the caller sizes them).

    A decode step k (k >= n_fill) at batch u = t + k adds X + u - t - n_fill + 1 KV, so it fits iff
    H[u] = M - kv[u] - u >= X - n_fill + 1 - t, one token and one running request iff u is not
    blocked (tok[u] >= C or run[u] >= R). The least H over the decode window [t + n_fill, t +
    length) is kept by a monotone deque as t grows, and the last blocked batch pushed: linear time.
    A start that fails skips the starts that fail for the same reason: while the batch d of least H
    stays in the window, every start below X - n_fill + 1 - H[d] fails; while a blocked batch b
    does, every start up to b (a blocked batch fits no fill batch either).
    """
    T = len(kv)
    dq = np.empty(T, np.int64)
    head = 0
    tail = 0
    last_blocked = -1
    pushed = t0 + n_fill  # next index to push into the window
    t = t0
    while True:
        lo, hi = t + n_fill, t + length  # decode window [lo, hi)
        if pushed < lo:
            pushed = lo
            head = tail
        while pushed < hi:
            h = M - kv[pushed] - pushed
            while tail > head and M - kv[dq[tail - 1]] - dq[tail - 1] >= h:
                tail -= 1
            dq[tail] = pushed
            tail += 1
            if tok[pushed] >= C or run[pushed] >= R:
                last_blocked = pushed
            pushed += 1
        while tail > head and dq[head] < lo:
            head += 1
        nxt = t + grid
        fits = True
        if hi > lo:
            if last_blocked >= lo:
                fits = False
                nxt = max(nxt, last_blocked + 1)  # b blocks a fill batch too
            d = dq[head]
            need = X - n_fill + 1 - (M - kv[d] - d)  # least start at which batch d fits
            if need > t:
                fits = False
                nxt = max(nxt, min(d - n_fill + 1, need))
        if fits and _fill_fits(kv, pre, tok, run, t, X, q, n_fill, M, P, C, R):
            return t
        if nxt % grid:
            nxt += grid - nxt % grid
        t = nxt
        if t + length > T:
            return -1


@njit(cache=True)
def _place(prompt, req, g0, g1, chunk, grid, M, P, C, R):  # noqa: ANN001, ANN202 - numba kernel
    """Serial schedule generation: the start batch of every segment and the horizon (module
    docstring), placing each at the earliest batch where it fits."""
    n = len(req)
    T = 256
    kv = np.zeros(T, np.int64)
    pre = np.zeros(T, np.int64)
    tok = np.zeros(T, np.int64)
    run = np.zeros(T, np.int64)
    start = np.empty(n, np.int64)
    end_of = np.full(len(prompt), -1, np.int64)  # last batch of each request's latest placed segment
    horizon = 0
    for s in range(n):
        i = req[s]
        X = prompt[i] + g0[s]
        q = chunk[s]
        n_fill = (X + q - 1) // q
        length = n_fill + g1[s] - g0[s] - 1
        t0 = 0 if g0[s] == 0 else end_of[i] + 1
        if t0 % grid:
            t0 += grid - t0 % grid
        # past the horizon every batch is empty, so a start there fits (each segment fits alone)
        need = max(horizon, t0) + grid + length + 1
        if need > T:
            T = max(2 * T, need)
            kv = _grow(kv, T)
            pre = _grow(pre, T)
            tok = _grow(tok, T)
            run = _grow(run, T)
        t = earliest_start(kv, pre, tok, run, t0, X, q, n_fill, length, grid, M, P, C, R)
        for k in range(length):
            m, c, _ = segment_at(X, q, k)
            u = t + k
            kv[u] += m
            pre[u] += c
            tok[u] += c if c > 0 else 1
            run[u] += 1
        start[s] = t
        end_of[i] = t + length - 1
        horizon = max(horizon, t + length)
    return start, horizon


@njit(cache=True)
def _batch_times(prompt, req, g0, g1, chunk, start, horizon, coef):  # noqa: ANN001, ANN202
    """Time of every batch index (0 for an empty one) from the placed segments."""
    tok = np.zeros(horizon, np.int64)
    pre = np.zeros(horizon, np.int64)
    sq = np.zeros(horizon, np.float64)
    ctx = np.zeros(horizon, np.float64)
    ndec = np.zeros(horizon, np.int64)
    kvdec = np.zeros(horizon, np.float64)
    kvmax = np.zeros(horizon, np.float64)
    for s in range(len(req)):
        X = prompt[req[s]] + g0[s]
        q = chunk[s]
        length = (X + q - 1) // q + g1[s] - g0[s] - 1
        for k in range(length):
            m, c, before = segment_at(X, q, k)
            u = start[s] + k
            if c > 0:
                tok[u] += c
                pre[u] += c
                sq[u] += c * c
                ctx[u] += c * before
            else:
                tok[u] += 1
                ndec[u] += 1
                kvdec[u] += m - 1
                kvmax[u] = max(kvmax[u], m - 1)
    times = np.zeros(horizon, np.float64)
    for u in range(horizon):
        if tok[u] == 0:
            continue
        x = coef.base + coef.per_token * tok[u]
        if coef.per_tile != 0.0:
            x += coef.per_tile * ((tok[u] + coef.token_tile - 1) // coef.token_tile)
        if pre[u] > 0:
            x += (
                coef.prefill_bias
                + coef.prefill_per_token * pre[u]
                + coef.prefill_per_token_sq * sq[u]
                + coef.prefill_per_ctx * ctx[u]
            )
        if ndec[u] > 0:
            x += (
                coef.decode_bias
                + coef.decode_per_token * ndec[u]
                + coef.decode_per_kv * kvdec[u]
                + coef.decode_per_max_kv * kvmax[u]
            )
        times[u] = coef.layers * x
    return times


@njit(cache=True)
def _objective(prompt, output, req, g0, g1, chunk, start, times, objective):  # noqa: ANN001, ANN202
    """The segment list's objective from its batch times (arrival 0): makespan, mean latency or mean time
    to first token."""
    ends = np.cumsum(times)
    if objective == 0:
        return ends[-1] if len(ends) else 0.0
    total = 0.0
    for s in range(len(req)):
        X = prompt[req[s]] + g0[s]
        q = chunk[s]
        n_fill = (X + q - 1) // q
        if objective == 1 and g1[s] == output[req[s]]:  # the request's last token
            total += ends[start[s] + n_fill + g1[s] - g0[s] - 2]
        elif objective == 2 and g0[s] == 0:  # its first token
            total += ends[start[s] + n_fill - 1]
    return total / len(prompt)


def _placement(data: SegmentArrays, segments: SegmentList) -> tuple[np.ndarray, int]:
    """Each segment's first batch and the batches used (:func:`_place` on ``segments``)."""
    return _place(
        data.prompt,
        segments.request,
        segments.g0,
        segments.g1,
        segments.chunk,
        segments.grid,
        data.M,
        data.P,
        data.C,
        data.R,
    )


def segments_cost(data: SegmentArrays, segments: SegmentList, objective: str = "makespan") -> float:
    """The objective of ``segments`` (computed from its profiles, arrival time included)."""
    start, horizon = _placement(data, segments)
    times = _batch_times(
        data.prompt, segments.request, segments.g0, segments.g1, segments.chunk, start, horizon, data.coef
    )
    value = _objective(
        data.prompt,
        data.output,
        segments.request,
        segments.g0,
        segments.g1,
        segments.chunk,
        start,
        times,
        OBJECTIVE_CODES[objective],
    )
    if objective == "makespan":
        return data.start + value
    return value


def segments_schedule(
    instance: Instance, data: SegmentArrays, segments: SegmentList, meta: dict | None = None
) -> Schedule:
    """The schedule of ``segments`` (module docstring): batches in index order, evictions in an
    eviction-only batch before the batch after a segment's last, empty batches skipped; within a
    batch, items and evictions in segment order. Built as columns (one array row per item)."""
    start, _ = _placement(data, segments)
    request = segments.request.astype(np.int64)
    filled = (data.prompt[request] + segments.g0).astype(np.int64)  # tokens its prefill chunks hold
    chunk = segments.chunk.astype(np.int64)
    n_fill = -(-filled // chunk)
    n_items = n_fill + (segments.g1 - segments.g0 - 1).astype(np.int64)
    owner = np.repeat(np.arange(len(request)), n_items)  # each item's segment
    k = np.arange(len(owner)) - np.repeat(np.cumsum(n_items) - n_items, n_items)  # its place in the segment
    tokens = np.where(k < n_fill[owner] - 1, chunk[owner], 1)
    last_chunk = k == n_fill[owner] - 1
    tokens[last_chunk] = (filled - chunk * (n_fill - 1))[owner[last_chunk]]
    evicting = np.flatnonzero(segments.g1 < data.output[request])
    # batch keys: 2 t for the eviction-only batch before index t, 2 t + 1 for the items of index t
    item_key = 2 * (start[owner] + k) + 1
    evict_key = 2 * (start[evicting] + n_items[evicting])
    item_rows = np.argsort(item_key, kind="stable")  # by batch, then segment (owner is non-decreasing)
    evict_rows = np.argsort(evict_key, kind="stable")
    item_key, evict_key = item_key[item_rows], evict_key[evict_rows]
    keys = np.union1d(item_key, evict_key)
    batch_start = np.full(len(keys), np.nan)
    if data.start > 0:
        batch_start[np.flatnonzero(keys % 2 == 1)[:1]] = data.start
    refs = np.concatenate([request[owner[item_rows]], request[evicting[evict_rows]]])  # instance positions
    used, first_use = np.unique(refs, return_index=True)
    used = used[np.argsort(first_use)]  # the ids the schedule names, first use first
    number = np.empty(len(instance.requests), np.int64)
    number[used] = np.arange(len(used))
    ids = [r.id for r in instance.requests]
    edges = np.append(keys, keys[-1] + 1 if len(keys) else 0)  # batch j: rows with keys[j] <= key < edges[j + 1]
    columns = ScheduleColumns(
        ids=tuple(ids[i] for i in used.tolist()),
        item_ptr=np.searchsorted(item_key, edges).astype(np.int64),
        item_ref=number[refs[: len(item_rows)]],
        item_tokens=tokens[item_rows].astype(np.int64),
        evict_ptr=np.searchsorted(evict_key, edges).astype(np.int64),
        evict_ref=number[refs[len(item_rows) :]],
        start=batch_start,
    )
    return Schedule(instance.name, meta=meta or {}, columns=columns)

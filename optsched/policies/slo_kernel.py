"""The SLO-aware batching of :mod:`optsched.policies.slo` as numba kernels, for the compiled engine.

:func:`fit_chunk` cuts a prefill chunk to the time budget, :func:`fits_decode` admits a deferred
decode, :func:`mark_optional` applies the laxity rule of :mod:`optsched.policies.slo_lazy` and
:func:`late_last` reorders the FCFS R_w (a ring buffer) by Moore-Hodgson's rule, with the
reference's arithmetic in the reference's order (the same floating-point sums, the same bisection,
the same heap ties: the largest work, then the later position), so :mod:`.fastengine`'s batches stay
the reference engine's. They allocate nothing: the scratch arrays come from the caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..replaykernel import batch_time

__all__ = ["fit_chunk", "fits_decode", "late_last", "mark_optional"]

_kernel = njit(cache=True, _nrt=False)


@_kernel
def _fits(coef, budget, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max, k, m):  # noqa: ANN001, ANN202 - kernel
    return batch_time(coef, n_tok + k, n_pre + k, s_pre + k * k, n_dec, kv_dec, x_pre + k * m, kv_max) <= budget


@_kernel
def fit_chunk(coef, budget, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max, c, m, cut):  # noqa: ANN001, ANN201
    """:func:`optsched.policies.slo.fit_chunk` on the batch's counters (``cut``: the draft's)."""
    if (
        c <= 0
        or (n_dec == 0 and not cut)
        or _fits(coef, budget, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max, c, m)
    ):
        return c
    lo = 0
    hi = c - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(coef, budget, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max, mid, m):
            lo = mid
        else:
            hi = mid - 1
    return lo


@_kernel
def fits_decode(coef, budget, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max, m):  # noqa: ANN001, ANN201
    """:func:`optsched.policies.slo.fits_decode` on the batch's counters."""
    if n_tok == 0 or budget == np.inf:
        return True
    return batch_time(coef, n_tok + 1, n_pre, s_pre, n_dec + 1, kv_dec + m, x_pre, max(kv_max, m)) <= budget


@_kernel
def _urgent(start, m, prompt, gen, running, wq, head, wlen, due, urge):  # noqa: ANN001, ANN202
    """Whether a request of R_w (``wlen`` from ``head`` in the ring ``wq``) or a running prefill without its
    first token is urgent: ``urge[j] <= start < due[j]`` (:func:`optsched.policies.slo_lazy.urgent_from`)."""
    for pos in range(wlen):
        j = wq[(head + pos) % len(wq)]
        if urge[j] <= start < due[j]:
            return True
    for j in running:
        if m[j] < prompt[j] and gen[j] == 0 and urge[j] <= start < due[j]:
            return True
    return False


@_kernel
def mark_optional(budget, start, m, prompt, gen, out, shed, skip, running, wq, head, wlen, X):  # noqa: ANN001, ANN201
    """:func:`optsched.policies.slo_lazy.mark_optional` on the state rows and R_w's ring buffer; ``X``:
    the SLO arguments of :mod:`.fastengine` (each request's TTFT deadline, TPOT target (NaN without one),
    first token's time and urgency start); the first token's time is set here at the first batch after
    it (NaN before), which starts when the batch of the first token ends."""
    due, tpot, first, urge = X[2], X[4], X[5], X[6]
    urgent = _urgent(start, m, prompt, gen, running, wq, head, wlen, due, urge)
    cut = False
    for i in running:
        if shed[i] or m[i] < prompt[i] or np.isnan(tpot[i]):
            skip[i] = shed[i]
            continue
        cut = True
        if np.isnan(first[i]):
            first[i] = start
        skip[i] = urgent and not (first[i] + tpot[i] * (out[i] - 1) < start + (out[i] - gen[i] + 1) * budget)
    return cut


@_kernel
def _prefill_work(coef, left, m, factor):  # noqa: ANN001, ANN202
    return (batch_time(coef, left, left, left * left, 0, 0, left * m, 0) - coef.layers * coef.base) * factor


@_kernel
def _above(work, heap, a, b):  # noqa: ANN001, ANN202
    """Whether heap entry ``a`` pops before ``b``: the larger work, then the later position."""
    pa, pb = heap[a], heap[b]
    return work[pa] > work[pb] or (work[pa] == work[pb] and pa > pb)


@_kernel
def _push(work, heap, size, pos):  # noqa: ANN001, ANN202
    heap[size] = pos
    k = size
    while k > 0 and _above(work, heap, k, (k - 1) // 2):
        parent = (k - 1) // 2
        heap[k], heap[parent] = heap[parent], heap[k]
        k = parent


@_kernel
def _pop(work, heap, size):  # noqa: ANN001, ANN202
    """The top position of the max-heap ``heap[:size]``, removed (the heap then has ``size - 1``)."""
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    k = 0
    while 2 * k + 1 < size:
        child = 2 * k + 1
        if child + 1 < size and _above(work, heap, child + 1, child):
            child += 1
        if not _above(work, heap, child, k):
            break
        heap[k], heap[child] = heap[child], heap[k]
        k = child
    return top


@_kernel
def _factor(coef, budget, m, prompt, shed, running):  # noqa: ANN001, ANN202
    """``f`` of :func:`optsched.policies.slo.work_factor` for the decodes of ``running`` but the deferred."""
    if budget == np.inf:
        return 1.0
    n = 0
    kv = 0
    top = 0
    for i in running:
        if m[i] >= prompt[i] and not shed[i]:
            n += 1
            kv += m[i]
            top = max(top, m[i])
    return budget / max(budget - batch_time(coef, n, 0, 0, n, kv, 0, top), budget / 10)


@_kernel
def late_last(coef, budget, start, m, prompt, shed, running, wq, head, wlen, due, work, queue, heap, dropped):  # noqa: ANN001, ANN201
    """:func:`optsched.policies.slo.late_last` on the ring buffer ``wq`` (``wlen`` requests from
    ``head``); ``due``: each request's TTFT deadline (arrival + TTFT target); ``work``, ``queue``,
    ``heap`` and ``dropped`` are scratch arrays of at least ``wlen``."""
    f = _factor(coef, budget, m, prompt, shed, running)
    t = start
    for i in running:
        if m[i] < prompt[i]:
            t += _prefill_work(coef, prompt[i] - m[i], m[i], f)
    n = len(wq)
    size = 0
    for pos in range(wlen):
        i = wq[(head + pos) % n]
        queue[pos] = i
        work[pos] = _prefill_work(coef, prompt[i] - m[i], m[i], f)
        dropped[pos] = 0
        if start + work[pos] > due[i]:
            dropped[pos] = 1
            continue
        t += work[pos]
        _push(work, heap, size, pos)
        size += 1
        if t > due[i]:
            top = _pop(work, heap, size)
            size -= 1
            t -= work[top]
            dropped[top] = 1
    k = 0
    for late in range(2):
        for pos in range(wlen):
            if dropped[pos] == late:
                wq[(head + k) % n] = queue[pos]
                k += 1

"""The replay's rules 1-6 (docs/schedule.md) compiled, over a schedule's columns: the kernels.

:func:`_replay` (called by :func:`optsched.fastreplay.replay_columns`, the driver) walks a
:class:`~optsched.schedcols.ScheduleColumns` with the state of :func:`optsched.schedule.replay` (per
request ``m``, ``I``, ``g`` as arrays) and the same arithmetic in the same order, so that a schedule
without violation gives the same per-batch trace, the same per-request times and the same batch
times, bit for bit. It does not write violation messages: at the first broken rule (or an unfinished
request at the end) it stops and reports that the schedule has a violation;
:func:`optsched.schedule.replay` then replays it on the readable reference path, which lists them
all. So the verdict and every message come from one implementation.

The kernel is compiled by numba at its first call and cached on disk (``cache=True``); importing
this module compiles nothing. :mod:`optsched.aotkernels` loads it compiled ahead of time where
``optsched warmup`` built it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .metrics import TIME_RTOL

__all__ = ["batch_time"]

#: The per-batch kernels' decorator: cached on disk and compiled without numba's reference counting
#: (``_nrt=False``; they allocate nothing), so that a call pays no atomic increment and decrement
#: per array it is passed.
_kernel = njit(cache=True, _nrt=False)


@_kernel
def batch_time(coef, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max):  # noqa: ANN001, ANN202 - numba kernel
    """:meth:`CostModel.batch_time`, term by term in its order (``coef``: :meth:`Coefficients.of`)."""
    if n_tok == 0:
        return 0.0
    t = coef.base + coef.per_token * n_tok
    if coef.per_tile != 0.0:
        t += coef.per_tile * -(-n_tok // coef.token_tile)
    if n_pre > 0:
        t += (
            coef.prefill_bias
            + coef.prefill_per_token * n_pre
            + coef.prefill_per_token_sq * s_pre
            + coef.prefill_per_ctx * x_pre
        )
    if n_dec > 0:
        t += (
            coef.decode_bias
            + coef.decode_per_token * n_dec
            + coef.decode_per_kv * kv_dec
            + coef.decode_per_max_kv * kv_max
        )
    return coef.layers * t


@_kernel
def _evict(j, lo, hi, evict_req, arrival, prompt, m, finished, mark, evicted, limit):  # noqa: ANN001, ANN202
    """Rule 2 for batch ``j``'s evictions; returns (KV freed, requests stopped), or (-1, 0) at a violation."""
    freed = 0
    stopped = 0
    for e in range(lo, hi):
        i = evict_req[e]
        if i < 0 or arrival[i] > limit or finished[i] or m[i] == 0:
            return -1, 0
        mark[i] = -(j + 1)
        if m[i] >= prompt[i]:
            prompt[i] = m[i] + 1
        freed += m[i]
        stopped += 1
        m[i] = 0
        evicted[i] += 1
    return freed, stopped


@_kernel
def _items(
    j, lo, hi, item_req, item_tok, arrival, prompt, m, finished, mark, first_scheduled, start, limit, feat, gen_buf
):  # noqa: ANN001, ANN202
    """Rule 3 for batch ``j``'s items: ``feat`` receives the cost-model features and ``gen_buf``
    the requests that generate a token; returns (ok, number of those, requests started)."""
    n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0
    n_gen = 0
    started = 0
    for k in range(lo, hi):
        i = item_req[k]
        c = item_tok[k]
        if i < 0 or mark[i] == j + 1 or mark[i] == -(j + 1) or finished[i] or arrival[i] > limit or c < 1:
            return False, 0, 0
        mark[i] = j + 1
        held = m[i]
        if held < prompt[i]:  # prefill
            room = prompt[i] - held
            if c > room:
                return False, 0, 0
            if held == 0:
                started += 1
            x_pre += c * held
            n_pre += c
            s_pre += c * c
            if c == room:
                gen_buf[n_gen] = i
                n_gen += 1
        else:  # decode
            if c != 1:
                return False, 0, 0
            kv_dec += held
            if held > kv_max:
                kv_max = held
            n_dec += 1
            gen_buf[n_gen] = i
            n_gen += 1
        m[i] = held + c
        n_tok += c
        if np.isnan(first_scheduled[i]):
            first_scheduled[i] = start
    feat[0], feat[1], feat[2], feat[3], feat[4], feat[5], feat[6] = n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max
    return True, n_gen, started


@njit(cache=True)
def _replay(req, sched, caps, coef, batch_out, times_out, per_req):  # noqa: ANN001, ANN202
    """Rules 1-6 over every batch (the loop of ``schedule._run_batches``).

    ``req`` = (arrival, output length, prompt) per request; ``sched`` = the columns (item_ptr,
    item_req, item_tok, evict_ptr, evict_req, start); per batch ``batch_out`` (kv_used, running,
    then the 7 features) and ``times_out`` (start, end); per request ``per_req`` (first token,
    finish, first scheduled, evictions). Returns (no violation, total evictions); at the first
    violation it stops (the outputs are then incomplete).
    """
    arrival, out_len, prompt0 = req
    item_ptr, item_req, item_tok, evict_ptr, evict_req, start_at = sched
    first_token, finish, first_scheduled, evicted = per_req
    n = len(arrival)
    prompt = prompt0.copy()
    m = np.zeros(n, np.int64)
    gen = np.zeros(n, np.int64)
    finished = np.zeros(n, np.bool_)
    mark = np.zeros(n, np.int64)  # j + 1 when in batch j; -(j + 1) when evicted in batch j
    gen_buf = np.empty(n, np.int64)
    kv_total = running = total_evictions = 0
    prev_end = 0.0
    for j in range(len(start_at)):
        start = prev_end
        if not np.isnan(start_at[j]):  # rule 1
            if start_at[j] < prev_end - _tol(prev_end):
                return False, 0
            if start_at[j] > prev_end:
                start = start_at[j]
        limit = start + _tol(start)
        freed, stopped = _evict(
            j, evict_ptr[j], evict_ptr[j + 1], evict_req, arrival, prompt, m, finished, mark, evicted, limit
        )
        if freed < 0:
            return False, 0
        kv_total -= freed
        running -= stopped
        total_evictions += stopped
        feat = batch_out[j, 2:]
        ok, n_gen, started = _items(
            j, item_ptr[j], item_ptr[j + 1], item_req, item_tok, arrival, prompt, m, finished, mark,
            first_scheduled, start, limit, feat, gen_buf,
        )  # fmt: skip
        running += started
        kv_total += feat[0]
        if not ok or feat[0] > caps[0] or feat[1] > caps[1] or kv_total > caps[2] or running > caps[3]:  # rule 4
            return False, 0
        end = start + batch_time(coef, feat[0], feat[1], feat[2], feat[3], feat[4], feat[5], feat[6])  # rule 6
        batch_out[j, 0] = kv_total
        batch_out[j, 1] = running
        for g in range(n_gen):  # rule 5
            i = gen_buf[g]
            gen[i] += 1
            if np.isnan(first_token[i]):
                first_token[i] = end
            if gen[i] == out_len[i]:
                finished[i] = True
                finish[i] = end
                kv_total -= m[i]
                running -= 1
                m[i] = 0
        times_out[j, 0] = start
        times_out[j, 1] = end
        prev_end = end
    return bool(finished.all()), total_evictions


@_kernel
def _tol(t):  # noqa: ANN001, ANN201 - numba kernel
    """The replay's time tolerance at time ``t``: ``TIME_RTOL * max(1, |t|)``."""
    return TIME_RTOL * max(1.0, abs(t))

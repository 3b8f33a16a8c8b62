"""The unified scheduler of :mod:`optsched.policies.engine`, compiled, for whole-instance runs: the kernels.

:func:`_simulate` runs a :class:`~optsched.policies.config.PolicyConfig` on an instance with the
per-request state as arrays (their layout: :mod:`.enginelayout`) and the loops of GetNextBatch
compiled by numba; :func:`optsched.policies.fastsim.simulate_columns` (the driver) allocates the
arrays and returns the schedule as :class:`~optsched.schedcols.ScheduleColumns`. It follows
:class:`~optsched.policies.engine.Engine` step for step (the same queues as arrays: R_r sorted by
priority, R_w as a double-ended queue for FCFS or sorted by priority for the ``all`` group; the same
candidate order, budgets, reservations in whole KV blocks of ``kv_block`` slots with the admission
watermark ``kv_watermark``, and victims; the same cost model arithmetic), so its batches
are the reference engine's, batch for batch (``tests/policies/test_fastengine.py``).

The priority order is a rank per request (computed by the driver); ties fall to the arrival, then
the request's position (as the reference engine's tuples). The dynamic order ``remaining-prefill``
(``srpf``) adds a key row, prompt - m, set where the reference engine recomputes its keys (R_r
before each batch, an evicted request) and compared before the rank. MC-SF's KV look-ahead
admission (``kv_lookahead``) runs :func:`.lookahead_kernel.fits`, the adaptive prompt share
(``prefill_share``) the reference's own rule (:func:`.share.batch_prefill_budget`). An empty batch or a livelock
returns a status: the reference engine then runs (and raises).

Kernels compile at their first call and are cached on disk; importing this module compiles nothing.
:mod:`optsched.aotkernels` loads them compiled ahead of time where ``optsched warmup`` built them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..replaykernel import batch_time
from .enginelayout import D_SLOTS, F_SLOTS, L_SLOTS, Q_ROWS, S_SLOTS
from .lookahead_kernel import fits
from .share import batch_prefill_budget
from .slo_kernel import fit_chunk, fits_decode, late_last, mark_optional

# the arrays' rows and slots (:mod:`.enginelayout`): the per-request state Q, the scalars S, the
# batch being built D (the reference's _Draft), the flags F and the limits L
_M, _PROMPT, _GEN, _FIXED, _MARK, _OUT, _RANK, _KEY, _SHED, _SKIP = range(len(Q_ROWS))
_KVRES, _NRUN, _WHEAD, _WLEN, _NITEMS, _NEVICT = range(len(S_SLOTS))
_NO, _NTOK, _NPRE, _SPRE, _NDEC, _KVDEC, _XPRE, _KVMAX, _PHASE, _NGEN, _BITEMS, _BEVICT, _CUT, _PB = range(len(D_SLOTS))
_PRE, _DEC = 1, 2
_HYBRID, _CHUNKED, _EF, _PCD, _EFW, _FRONT, _FCFS, _DYN, _LOOK, _DROP, _SHEDS, _LAZY = range(len(F_SLOTS))
_C, _P, _MCAP, _RCAP, _BLOCK, _WATERMARK, _TILE = range(len(L_SLOTS))

#: The kernels' decorator: cached on disk, and compiled without numba's reference counting
#: (``_nrt=False``): they allocate nothing (every buffer comes from the driver), and
#: without it each call between them pays an atomic increment and decrement per array it is
#: passed, most of the run time of a call per item.
_kernel = njit(cache=True, _nrt=False)
#: The adaptive share's rule (:mod:`.share`), the reference engine's function compiled.
_share_rule = _kernel(batch_prefill_budget)


@_kernel
def _blocks(L, slots):  # noqa: ANN001, ANN202 - numba kernel
    """``slots`` rounded up to whole KV blocks (in slots)."""
    return (slots + L[_BLOCK] - 1) // L[_BLOCK] * L[_BLOCK]


@_kernel
def _held(Q, F, L, i):  # noqa: ANN001, ANN202
    """KV slots reserved for running request ``i`` (whole blocks)."""
    if F[_EF]:
        return Q[_FIXED, i]
    return _blocks(L, max(Q[_M, i], Q[_PROMPT, i]))


@_kernel
def _decode_need(Q, F, L, i):  # noqa: ANN001, ANN202
    """KV slots a decode of ``i`` adds: a new block when its KV fills its last one (none for eviction-free)."""
    if F[_EF] or Q[_M, i] % L[_BLOCK]:
        return 0
    return L[_BLOCK]


@_kernel
def _before(Q, a, b):  # noqa: ANN001, ANN202
    """Whether request ``a`` precedes ``b`` in the priority order: (dynamic key, rank)."""
    if Q[_KEY, a] != Q[_KEY, b]:
        return Q[_KEY, a] < Q[_KEY, b]
    return Q[_RANK, a] < Q[_RANK, b]


@_kernel
def _insert_sorted(arr, S, slot, Q, i):  # noqa: ANN001, ANN202
    """``insort`` by priority into ``arr[:S[slot]]``."""
    k = S[slot]
    while k > 0 and _before(Q, i, arr[k - 1]):
        arr[k] = arr[k - 1]
        k -= 1
    arr[k] = i
    S[slot] += 1


@_kernel
def _remove(arr, S, slot, i):  # noqa: ANN001, ANN202
    n = S[slot]
    k = 0
    while arr[k] != i:
        k += 1
    for x in range(k, n - 1):
        arr[x] = arr[x + 1]
    S[slot] = n - 1


@_kernel
def _push_waiting(wq, S, i, front):  # noqa: ANN001, ANN202
    """Append to the FCFS queue R_w (a ring buffer), at its front when ``front``."""
    n = len(wq)
    if front:
        S[_WHEAD] = (S[_WHEAD] - 1) % n
        wq[S[_WHEAD]] = i
    else:
        wq[(S[_WHEAD] + S[_WLEN]) % n] = i
    S[_WLEN] += 1


@_kernel
def _push_item(E, i, c):  # noqa: ANN001, ANN202
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    k = S[_NITEMS]
    if k < len(it_req):
        it_req[k] = i
        it_tok[k] = c
    S[_NITEMS] = k + 1
    D[_BITEMS] += 1


@_kernel
def _evict(E, F, L, i):  # noqa: ANN001, ANN202
    """Drop request ``i``'s KV (recomputation) and put it back into R_w (B1)."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    S[_KVRES] -= _held(Q, F, L, i)
    if Q[_M, i] >= Q[_PROMPT, i]:
        Q[_PROMPT, i] = Q[_M, i] + 1
    Q[_M, i] = 0
    Q[_FIXED, i] = 0
    Q[_MARK, i] = D[_NO]
    _remove(run, S, _NRUN, i)
    if S[_NEVICT] < len(ev_req):
        ev_req[S[_NEVICT]] = i
    S[_NEVICT] += 1
    D[_BEVICT] += 1
    if not F[_FCFS]:
        if F[_DYN]:
            Q[_KEY, i] = Q[_PROMPT, i]
        _insert_sorted(wq, S, _WLEN, Q, i)
    else:
        _push_waiting(wq, S, i, F[_FRONT])


@_kernel
def _make_room(E, F, L, cand, need):  # noqa: ANN001, ANN202
    """Evict lower-priority running requests outside the batch until ``need`` slots are free."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    if F[_EF]:
        return False
    deficit = S[_KVRES] + need - L[_MCAP]
    nv = 0
    for k in range(S[_NRUN] - 1, -1, -1):
        v = run[k]
        if not _before(Q, cand, v):
            break
        if Q[_MARK, v] == D[_NO]:
            continue
        vbuf[nv] = v
        nv += 1
        deficit -= _held(Q, F, L, v)
        if deficit <= 0:
            for x in range(nv):
                _evict(E, F, L, vbuf[x])
            return True
    return False


@_kernel
def _lookahead_fits(E, L, i):  # noqa: ANN001, ANN202
    """MC-SF's test on R_r and ``i`` (:func:`.orders.projection`, into the free ``vbuf`` and ``dec``)."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    n = S[_NRUN]
    for k in range(n + 1):
        j = run[k] if k < n else i
        m = Q[_M, j] if k < n else 0
        dec[k] = Q[_OUT, j] - Q[_GEN, j]
        vbuf[k] = Q[_PROMPT, j] + dec[k] - 1 if m < Q[_PROMPT, j] else m + dec[k]
    return fits(vbuf, dec, n + 1, L[_MCAP])


@_kernel
def _take_prefill(E, F, L, X, i, admit):  # noqa: ANN001, ANN202
    """Add a prefill chunk of request ``i`` (admitting it from R_w when ``admit``); ``X``: the SLO
    arguments (cost coefficients, time budget, TTFT deadlines, scratch, then the laxity rule's TPOT
    targets, first-token times and urgency starts, and the adaptive prompt share), the chunk cut to the
    budget."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    if not F[_HYBRID] and D[_PHASE] == _DEC:
        return False
    want = Q[_PROMPT, i] - Q[_M, i]
    used = D[_NTOK] if F[_PCD] else D[_NPRE]
    room = min(L[_C] - D[_NTOK], D[_PB] - used)
    if F[_CHUNKED] or want > L[_P]:
        c = min(want, room)
    else:
        c = want if want <= room else 0
    if X[1] != np.inf:
        args = (D[_NTOK], D[_NPRE], D[_SPRE], D[_NDEC], D[_KVDEC], D[_XPRE], D[_KVMAX])
        c = fit_chunk(X[0], X[1], *args, c, Q[_M, i], D[_CUT])
    if c <= 0:
        return False
    if admit:
        if S[_NRUN] >= L[_RCAP] or (F[_LOOK] and not _lookahead_fits(E, L, i)):
            return False
        need = _blocks(L, Q[_PROMPT, i] + (Q[_OUT, i] - Q[_GEN, i] - 1 if F[_EF] else 0))
        free = need + (L[_WATERMARK] if S[_NRUN] else 0)  # free slots it needs (vLLM's watermark)
        if S[_KVRES] + free > L[_MCAP] and not (F[_EFW] and _make_room(E, F, L, i, free)):
            return False
        S[_KVRES] += need
        if F[_EF]:
            Q[_FIXED, i] = need
        _insert_sorted(run, S, _NRUN, Q, i)
    D[_XPRE] += c * Q[_M, i]
    Q[_M, i] += c
    Q[_MARK, i] = D[_NO]
    _push_item(E, i, c)
    D[_NTOK] += c
    D[_NPRE] += c
    D[_SPRE] += c * c
    D[_PHASE] = _PRE
    if Q[_M, i] == Q[_PROMPT, i]:
        gbuf[D[_NGEN]] = i
        D[_NGEN] += 1
    return True


@_kernel
def _add_decodes(E, chosen):  # noqa: ANN001, ANN202
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    top = D[_KVMAX]
    for i in chosen:
        held = Q[_M, i]
        D[_KVDEC] += held
        if held > top:
            top = held
        Q[_M, i] = held + 1
        Q[_MARK, i] = D[_NO]
        _push_item(E, i, 1)
        gbuf[D[_NGEN]] = i
        D[_NGEN] += 1
    D[_KVMAX] = top
    D[_NTOK] += len(chosen)
    D[_NDEC] += len(chosen)
    D[_PHASE] = _DEC


@_kernel
def _take_decodes(E, F, L, run_):  # noqa: ANN001, ANN202
    """Decode candidates in priority order: in bulk when KV and C allow, else one by one."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    if not F[_HYBRID] and D[_PHASE] == _PRE:
        return
    k = min(len(run_), L[_C] - D[_NTOK])
    if k <= 0:
        return
    need = 0
    if not F[_EF]:
        if L[_BLOCK] == 1:
            need = k
        else:
            for x in range(k):
                need += _decode_need(Q, F, L, run_[x])
    if S[_KVRES] + need <= L[_MCAP]:
        _add_decodes(E, run_[:k])
        S[_KVRES] += need
        return
    for x in range(len(run_)):
        i = run_[x]
        if L[_C] - D[_NTOK] < 1:
            return
        if Q[_MARK, i] == D[_NO]:
            continue
        step = _decode_need(Q, F, L, i)
        if S[_KVRES] + step > L[_MCAP] and not _make_room(E, F, L, i, step):
            _evict(E, F, L, i)
            continue
        _add_decodes(E, run_[x : x + 1])
        S[_KVRES] += step


@_kernel
def _fill_fcfs_waiting(E, F, L, X):  # noqa: ANN001, ANN202
    """R_w in its order (FCFS, or sorted by priority), stopping at the first candidate that cannot
    be admitted (B2). A sorted R_w keeps its head during the admission: its victims sort after it."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    while S[_WLEN] > 0:
        i = wq[S[_WHEAD]]
        if Q[_MARK, i] == D[_NO]:
            return
        if not F[_FCFS]:
            if not _take_prefill(E, F, L, X, i, True):
                return
            _remove(wq, S, _WLEN, i)
            continue
        S[_WHEAD] = (S[_WHEAD] + 1) % len(wq)
        S[_WLEN] -= 1
        if not _take_prefill(E, F, L, X, i, True):
            _push_waiting(wq, S, i, True)
            return


@_kernel
def _batch_budget(E, L, share):  # noqa: ANN001, ANN202
    """The prefill budget of the batch being built: P, or P_b of the adaptive share ``share`` (0: none)."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    if share == 0.0:
        return L[_P]
    decoding = 0
    for k in range(S[_NRUN]):
        i = run[k]
        if Q[_M, i] >= Q[_PROMPT, i]:
            decoding += 1
    return _share_rule(L[_P], share, L[_TILE], S[_WLEN] + S[_NRUN] - decoding, decoding)


@_kernel
def _resort_running(E):  # noqa: ANN001, ANN202
    """The dynamic keys (remaining prefill) of R_r recomputed, and R_r re-sorted (insertion sort)."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    for k in range(S[_NRUN]):
        i = run[k]
        Q[_KEY, i] = Q[_PROMPT, i] - Q[_M, i]
        j = k
        while j > 0 and _before(Q, i, run[j - 1]):
            run[j] = run[j - 1]
            j -= 1
        run[j] = i


@_kernel
def _group(E, kind):  # noqa: ANN001, ANN202
    """Snapshot of a running group (1: R_r, 2: its decodes but the deferred or optional ones, 3: its
    prefills, 4: R_r of ``all``, 5: the deferred and optional decodes, marked ones included) into ``grp``;
    returns its length."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    n = 0
    for k in range(S[_NRUN]):
        i = run[k]
        decode = Q[_M, i] >= Q[_PROMPT, i]
        if kind == 5:
            if decode and Q[_SKIP, i]:
                grp[n] = i
                n += 1
            continue
        if Q[_MARK, i] == D[_NO] or (kind == 2 and (not decode or Q[_SKIP, i])) or (kind == 3 and decode):
            continue
        grp[n] = i
        n += 1
    return n


@_kernel
def _take_deferred(E, F, L, X):  # noqa: ANN001, ANN202
    """The deferred and optional decodes in R_r's order, each while the batch is empty or stays within
    the budget."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    n = _group(E, 5)
    for x in range(n):
        i = grp[x]
        args = (D[_NTOK], D[_NPRE], D[_SPRE], D[_NDEC], D[_KVDEC], D[_XPRE], D[_KVMAX])
        if Q[_MARK, i] != D[_NO] and fits_decode(X[0], X[1], *args, Q[_M, i]):
            _take_decodes(E, F, L, grp[x : x + 1])


@_kernel
def _fill_group(E, F, L, X, kind):  # noqa: ANN001, ANN202
    """Walk a running group, merged with the sorted R_w by priority for ``all`` (kind 4)."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    merge = kind == 4
    running = grp[: _group(E, kind)]
    nd = 0
    w = 0
    blocked = False
    for i in running:
        while merge and not blocked and w < S[_WLEN] and _before(Q, wq[w], i):
            if nd:
                _take_decodes(E, F, L, dec[:nd])
                nd = 0
            cand = wq[w]
            if Q[_MARK, cand] == D[_NO] or not _take_prefill(E, F, L, X, cand, True):
                blocked = True
            else:
                w += 1
        if Q[_MARK, i] == D[_NO]:
            continue
        if Q[_M, i] >= Q[_PROMPT, i]:
            dec[nd] = i
            nd += 1
            continue
        if nd:
            _take_decodes(E, F, L, dec[:nd])
            nd = 0
        if Q[_MARK, i] != D[_NO]:
            _take_prefill(E, F, L, X, i, False)
    if nd:
        _take_decodes(E, F, L, dec[:nd])
    while merge and not blocked and w < S[_WLEN]:
        cand = wq[w]
        if Q[_MARK, cand] == D[_NO] or not _take_prefill(E, F, L, X, cand, True):
            break
        w += 1
    if w:
        n = S[_WLEN]
        for k in range(n - w):
            wq[k] = wq[k + w]
        S[_WLEN] = n - w


@_kernel
def _finish(E, F, L):  # noqa: ANN001, ANN202
    """Generate the batch's tokens; finished requests release their KV (B10). Returns how many finished."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    done = 0
    for g in range(D[_NGEN]):
        i = gbuf[g]
        Q[_GEN, i] += 1
        if Q[_GEN, i] == Q[_OUT, i]:
            S[_KVRES] -= _held(Q, F, L, i)
            Q[_M, i] = 0
            Q[_FIXED, i] = 0
            done += 1
    if done:
        kept = 0
        for k in range(S[_NRUN]):
            i = run[k]
            if Q[_GEN, i] != Q[_OUT, i]:
                run[kept] = i
                kept += 1
        S[_NRUN] = kept
    return done


@_kernel
def _stalled(Q, S, run, wq, F, stall):  # noqa: ANN001, ANN202
    """The reference engine's livelock guard: no token in more batches than it can explain."""
    if stall <= 1000:
        return False
    bound = 1 + S[_WLEN] + S[_NRUN]
    for k in range(S[_WLEN]):
        bound += Q[_PROMPT, wq[(S[_WHEAD] + k) % len(wq) if F[_FCFS] else k]]
    for k in range(S[_NRUN]):
        bound += Q[_PROMPT, run[k]]
    return stall > bound


@_kernel
def _intake(E, F, order, arrival, p, time):  # noqa: ANN001, ANN202
    """Move requests that arrived by ``time`` into R_w; returns the next pending position."""
    Q, S, D, run, wq, gbuf, vbuf, it_req, it_tok, ev_req, grp, dec = E
    while p < len(order) and arrival[order[p]] <= time:
        if F[_FCFS]:
            _push_waiting(wq, S, order[p], False)
        else:
            _insert_sorted(wq, S, _WLEN, Q, order[p])
        p += 1
    return p


@_kernel
def _simulate(Q, order, arrival, groups, F, L, coef, E, batch_out, starts, X):  # noqa: ANN001, ANN202
    """Every batch until all requests finished; returns (status, batches): 0 done, 1 an empty
    batch, 2 a livelock (the reference engine then raises). ``X``: see :func:`_take_prefill`, and the
    X[4:] of :func:`.slo_kernel.mark_optional`."""
    S, D = E[1], E[2]
    unfinished = Q.shape[1]
    now = 0.0
    p = 0
    nb = 0
    stall = 0
    while True:
        start = now
        explicit = False
        p = _intake(E, F, order, arrival, p, start)
        if S[_WLEN] == 0 and S[_NRUN] == 0:
            if p == len(order):
                return 0, nb
            start = max(start, arrival[order[p]])
            explicit = True
            p = _intake(E, F, order, arrival, p, start)
        D[:] = 0
        D[_NO] = nb + 1
        if F[_DYN]:
            _resort_running(E)
        D[_PB] = _batch_budget(E, L, X[7])
        if F[_DROP]:  # late requests last (.slo); vbuf, grp and dec are free scratch here
            run, wq, vbuf, grp, dec = E[3][: S[_NRUN]], E[4], E[6], E[10], E[11]
            args = (Q[_M], Q[_PROMPT], Q[_SHED], run, wq, S[_WHEAD], S[_WLEN], X[2], X[3], vbuf, grp, dec)
            late_last(coef, X[1], start, *args)
        if F[_LAZY]:  # optional decodes after the prefill (.slo_lazy)
            rows = (Q[_M], Q[_PROMPT], Q[_GEN], Q[_OUT], Q[_SHED], Q[_SKIP], E[3][: S[_NRUN]])
            D[_CUT] = mark_optional(X[1], start, *rows, E[4], S[_WHEAD], S[_WLEN], X)
        for g in groups:
            if g == 0:
                _fill_fcfs_waiting(E, F, L, X)
            else:
                _fill_group(E, F, L, X, g)
        if F[_SHEDS] or F[_LAZY]:  # deferred and optional decodes last, within the budget (.slo, .slo_lazy)
            _take_deferred(E, F, L, X)
        if D[_BITEMS] == 0 and D[_BEVICT] == 0:
            return 1, nb
        now = start + batch_time(coef, D[_NTOK], D[_NPRE], D[_SPRE], D[_NDEC], D[_KVDEC], D[_XPRE], D[_KVMAX])
        if nb < len(starts):
            batch_out[nb, 0] = D[_BITEMS]
            batch_out[nb, 1] = D[_BEVICT]
            starts[nb] = start if explicit else np.nan
        nb += 1
        unfinished -= _finish(E, F, L)
        stall = 0 if D[_NGEN] else stall + 1
        if _stalled(Q, S, E[3], E[4], F, stall):
            return 2, nb

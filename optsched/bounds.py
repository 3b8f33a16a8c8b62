"""Generic lower bounds from the cost model, proven under the contract's semantics.

These bounds hold for *every* complete schedule of an instance (any policy, any formulation, with or
without evictions), so they are valid for every problem whose objective is computed by
:func:`optsched.schedule.replay`. Each is a relaxation of the contract's semantics (docs/schedule.md)
and its cost model (docs/costmodel.md); the proofs below rely only on these facts:

(F0) **A cheaper cost model gives lower optima.** Let T' be a cost at or below the profile's
     batch time T on every batch of the instance's schedules: the *context-free* twin
     (``prefill.per_ctx`` set to 0, T' = T - L pc X_pre) and the *linear twin*
     :meth:`~optsched.costmodel.CostModel.linear_twin` (T' = T - L(tc (ceil(N_tok / t) - N_tok / t)
     + dx KV_max) <= T, as ceil(N / t) >= N / t and dx KV_max >= 0), or both at once. Take any
     schedule S that replays cleanly under the profile, with batch starts s_j and ends e_j, and let
     S' be S with every batch's ``start`` set to s_j. Under T', by induction on j, S' starts batch j
     at max(e'_{j-1}, s_j) = s_j (as e'_{j-1} <= e_{j-1} <= s_j) and ends it at e'_j = s_j + T'_j <=
     s_j + T_j = e_j. Arrivals hold at the same starts, every start is at least the previous end,
     and C, P, M, R_max and the request states do not depend on time: S' replays cleanly under T',
     with the same batches and every first token, finish and end time no later. So T''s optimum of
     every objective that is non-decreasing in those times (makespan, sum of finish times, mean
     TTFT, latencies) is at most the profile's, over any class of schedules closed under this change
     (evictions or not, hybrid batches or not, at most J batches), and T''s least batch counts
     among schedules ending by a time T hold for the profile's. The bounds below read the linear
     twin's coefficients (:class:`~optsched.costmodel.Coefficients`: the tile cost stays in them as ``tc / t`` per
     token) and leave ``per_ctx`` out, but for the lone batches of the critical path, priced exactly
     ((F2)), and the work bound's tile floor (whole tiles per batch); every bound of a formulation
     that reads the cost model without ``per_ctx``, through the linear twin or through another such
     cost (InferMax's ``linear_instance``: its relaxation, search and chunk bound, its horizon;
     Hybrid's strict bound) is proven for that cost and so holds under the profile; an upper bound
     on G or the throughput likewise (they only fall when times grow).
(F1) **Batches are sequential.** start_j >= end_{j-1} and end_j = start_j + T_j, so batches occupy
     disjoint time intervals ending by the makespan; a batch holding an item of request i starts at or
     after arrival_i.
(F2) **T is monotone and splits.** All coefficients are >= 0 (the loader rejects negatives), and
     dropping items never increases T: N_tok, N_pre, S_pre, N_dec, KV_dec and X_pre only shrink,
     ceil(N_tok / t) is non-decreasing in N_tok and the largest KV of fewer decode items is no
     larger. With L = layers, the linear twin of (F0) costs a batch (prefill-context term left out)
     ``T' = L (b + a N_tok + [N_pre>0](pb + pa N_pre + pq S_pre) + [N_dec>0](db + da N_dec + dk KV_dec))``
     with ``a`` the profile's per_token plus tc / t: the per-batch *overhead* L(b + [pre] pb + [dec] db)
     plus a sum of per-item terms: L(a + pa) c + L pq c^2 for a prefill chunk c, L(a + da + dk m)
     for a decode item reading m slots. Since c^2 >= c, a prefill chunk's item term is
     >= L (a + pa + pq) c. A batch of one request alone is priced exactly: a lone decode item
     reading m slots costs L(b + a + tc + db + da + dk m + dx m) (one tile, KV_max = m), and k
     chunks of X tokens in all hold >= max(k, ceil(X / t)) tiles (each chunk at least one, and
     sum ceil(c / t) >= ceil(X / t)).
(F3) **Per-request work.** Request i (prompt I_i, output O_i) generates O_i tokens, at most one per
     batch. The first needs its prompt prefilled: >= I_i prefill tokens, in chunks <= P (P <= C), so
     >= ceil(I_i / P) batches. In decode with g tokens generated a request holds m = I_i + g - 1
     slots, with or without earlier evictions (an eviction sets the prompt to m + 1 and the re-prefill
     restores m = I_i + g). So token g + 1 (g >= 1) costs either a decode item reading I_i + g - 1
     slots, with item term L(a + da + dk (I_i + g - 1)), or (after an eviction) a re-prefill of
     >= I_i + g tokens, with item terms >= L (a + pa + pq)(I_i + g), over >= ceil((I_i + g) / P)
     batches. The cheaper of the two is a lower bound either way.
(F4) **Per-batch capacity.** After processing, a batch holds <= C tokens, <= P prefill tokens,
     <= M KV slots and <= R_max requests with KV; a request generating its g-th token holds
     I_i + g - 1 slots then (finishing requests included, contract step 4).
(F5) **Memory as bin packing.** By (F4) every *item* (i, g), g = 1..O_i, of height I_i + g - 1 (the KV
     request i holds in the batch generating its g-th token) goes into a distinct batch, and the
     heights in one batch add up to <= M (other KV held is >= 0). So the number of batches is at
     least the Martello-Toth bound L2 = max_{0 <= alpha <= M/2} |J1| + |J2| + max(0, ceil((sum_{J3} h
     - (|J2| M - sum_{J2} h)) / M)), J1 = {h > M - alpha}, J2 = {M - alpha >= h > M/2}, J3 = {M/2 >=
     h >= alpha} (no two items above M/2 share a batch, J1's share none with J3's, J3 fills at most
     the room J2's batches leave; :func:`packing_bound`). It dominates the area count
     ceil(sum h / M) and exceeds it when requests must take turns in memory; when every item is at
     most M/2 (J1 = J2 = {}, J3 at most the area) it is the area count, computed without a
     histogram of the M + 1 heights (M may be 10^12).

Bounds (each returned as a :class:`~optsched.result.Bound` with ``valid=True``):

- ``work`` (makespan): for each distinct arrival time t, let S = requests arriving at or after t. By
  (F1) every batch touching S starts after t, so makespan >= t + sum of their costs. By (F2) that sum
  is >= L(b B + pb B_pre + db B_dec) + sum_{i in S} w_i, where w_i sums the cheapest item terms of
  (F3): ``w_i = L((a+pa+pq) I_i + sum_{g=1}^{O_i-1} min(a + da + dk (I_i+g-1), (a+pa+pq)(I_i+g)))``.
  B (batches touching S) is at least each count of (F3)/(F4) restricted to S: ceil(tokens / C) with
  tokens >= sum (I_i + O_i - 1), max_i ceil(I_i/P) + O_i - 1, ceil(sum O_i / R_max) and
  ceil(sum_i sum_{g=1}^{O_i} (I_i+g-1) / M); B_pre >= max(ceil(sum I_i / P), max_i ceil(I_i / P)).
  Every such batch has prefill or decode items, so B_pre + B_dec >= B and the overhead is
  >= pb B_pre^lb + min(pb, db) max(0, B^lb - B_pre^lb) on top of b B^lb.
  **Refinement** (for the :data:`REFINED_SUFFIXES` best sets S and the whole set;
  :func:`least_bias`): B^lb also takes the packing count L2 of (F5) (:func:`batch_counts`), and the
  overhead is replaced by the least value beta(S) of a count program over D, the number of batches
  with decode items, and x, the number with prefill tokens. Tokens 2..O_i of request i are each
  generated in a distinct batch, by a decode item (a batch with decode items) or by the end of a
  refill (a batch with prefill tokens), so with D decode batches request i refills at least
  r_i = (O_i - 1 - D)^+ tokens, each costing rho_ig = L((a+pa+pq)(I_i+g) - (a+da+dk(I_i+g-1)))^+
  more than w_i counts, in r_i prefill batches distinct from the ceil(I_i/P) that generate its
  first token: at least the sum of its r_i smallest rho_ig, and x >= max(B_pre^lb, max_i
  (ceil(I_i/P) + r_i)), B >= max(B^lb, D, x), x >= B - D. Each prompt prefilled in <= x chunks has
  sum c^2 >= max(I_i, I_i^2 / x) (Cauchy-Schwarz), L pq sum_{I_i > x} (I_i^2/x - I_i) more than w_i
  counts. So beta(S) = min_D min_x L(b max(B^lb, D, x) + pb x + db D) + refills(D) + chunks(x); for
  fixed D the cost is convex in x, so its least value is at the larger of x's lower bound and the
  unconstrained minimiser. beta(S) is at least the plain overhead above and exceeds it when the
  longest request's decodes force batches with both prefill and decode items.
  **Tile floor** (a profile with ``per_tile = tc > 0``, tile t): a batch of n tokens holds
  ceil(n / t) >= max(1, n / t) started tiles, so the batches touching S cost at least their linear
  form without the step-shape terms (a = the profile's per_token) plus L tc max(B^lb, N_S / t),
  N_S = sum_{i in S} (I_i + O_i - 1) tokens at least. The value of that linear form (its w_i and,
  for the refined sets, its beta(S)) plus this floor is a second bound on each set, and the larger
  of the two is taken (:func:`_tile_free`); it exceeds the linear twin's when batches are many and
  small (decode rounds), each paying a whole tile.
- ``critical-path`` (makespan): makespan >= max_i (arrival_i + A_i), where A_i is the least time
  request i alone needs: by (F1)-(F3) its batches are disjoint and each costs at least the batch of
  its own item alone. A_i = F(I_i) + sum_{g=1}^{O_i-1} min(D_i(g), R_i(g)) with F(X) the cheapest
  prefill of X tokens in k >= ceil(X/P) chunks (k L(b + pb) + L(a+pa) X + L (pc/2) X^2 +
  L (pq - pc/2) sq(X, k) + L tc tiles(X, k): the chunks c_j of the pass that builds the KV from
  empty (an eviction empties it) read the S_{j-1} tokens before them, and sum_j c_j S_{j-1} =
  (X^2 - sum_j c_j^2) / 2; sq(X, k) the least sum of squares of k positive parts of X (equal parts)
  when pq >= pc/2, else min(P, X - k + 1) X, at least the largest; tiles(X, k) = max(k, ceil(X/t))
  (F2)), D_i(g) = L(b + a + tc + db + da + (dk + dx)(I_i+g-1)) a lone decode and
  R_i(g) = L(k (b + pb) + tc tiles(I_i+g, k) + (a+pa+pq)(I_i+g)), k = ceil((I_i+g)/P), a re-prefill;
  here a is the profile's own per_token and every batch is priced exactly ((F2)), so a request
  alone on an empty engine meets A_i when serial chunks of P are its best.
- ``critical-path`` (latency, mean end-to-end latency): mean_i A_i, since finish_i >= arrival_i + A_i.
  The load-aware bounds of these objectives are in :mod:`optsched.load_bounds`.
- ``prefill-alone`` (ttft, mean TTFT): mean_i F(I_i), since request i's first token needs a prefill
  of >= I_i tokens in batches starting after its arrival.

Per request (:func:`request_bounds`, used by ``optsched info`` to flag unattainable SLOs): TTFT_i >=
F(I_i); latency_i >= A_i; finish_i - first_token_i >= A_i - F(I_i) (the O_i - 1 later tokens, each in
its own later batch), so TPOT_i >= (A_i - F(I_i)) / (O_i - 1). :func:`instance_bounds` collects the
makespan bounds, the means of these, and the throughput upper bound (total output tokens / the
makespan lower bound): the default report of ``optsched bound``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from .costmodel import Coefficients, CostModel
from .instance import Instance, Limits, Request
from .result import MAXIMISED, Bound, objective_named
from .tokensums import smallest_clipped_sums, sum_of_runs

__all__ = [
    "RequestBounds",
    "batch_counts",
    "least_bias",
    "packing_bound",
    "request_work",
    "critical_path_times",
    "equal_splits",
    "generic_bounds",
    "instance_bounds",
    "prefill_alone_time",
    "prefill_alone_times",
    "request_bounds",
    "work_bound",
]


def _tiles(tokens: np.ndarray, chunks: np.ndarray, cm: CostModel) -> np.ndarray:
    """Least number of started tiles of ``tokens`` tokens split into ``chunks`` chunks, each alone
    in its batch: max(chunks, ceil(tokens / t)) ((F2)); 0 without a tile term."""
    if not cm.per_tile:
        return np.zeros(np.broadcast(tokens, chunks).shape)
    return np.maximum(chunks, np.ceil(tokens / cm.token_tile))


def equal_splits(tokens: int, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each chunk count k from ceil(tokens / cap) to tokens: k, q = floor(tokens / k), r (parts of q + 1) and
    the least sum of squares of k positive parts of ``tokens`` (equal parts)."""
    k = np.arange(-(-tokens // cap), tokens + 1, dtype=np.int64)
    q, r = tokens // k, tokens % k
    return k, q, r, (k - r) * q * q + r * (q + 1) * (q + 1)


@lru_cache(maxsize=65536)
def _prefill_alone(cm: CostModel, tokens: int, chunk_cap: int) -> float:
    """F(X): least time to prefill ``tokens`` tokens of one request alone, chunks <= ``chunk_cap``.

    Scans every chunk count k >= ceil(X / cap) (the quadratic term favours more chunks, the batch
    overhead fewer); the least sum of squares of k positive parts of X is attained by equal parts.
    The context term of chunks c_1..c_k over the S_{j-1} tokens before each is
    ``pc sum_j c_j S_{j-1} = pc (X^2 - sum_j c_j^2) / 2``, so the attention terms are
    ``pc X^2 / 2 + (pq - pc / 2) sum_j c_j^2``: at the least sum of squares when pq >= pc / 2, else
    at most ``min(cap, X - k + 1) X`` (no chunk is longer).
    """
    coef = Coefficients.of(cm)
    L, b, a, pb, pa = coef.layers, coef.base, coef.per_token, coef.prefill_bias, coef.prefill_per_token
    pq, pc = coef.prefill_per_token_sq, coef.prefill_per_ctx
    k, _, _, least = equal_splits(tokens, chunk_cap)
    if pq - pc / 2 <= 0.0:  # more chunks only add overhead (and tiles): the least k has the least cost
        k, least = k[:1], least[:1]
    squares = least if pq >= pc / 2 else np.minimum(chunk_cap, tokens - k + 1) * tokens
    attention = pc / 2 * tokens * tokens + (pq - pc / 2) * squares
    tiles = cm.per_tile * _tiles(np.float64(tokens), k, cm)
    return float(L * np.min(k * (b + pb) + (a + pa) * tokens + attention + tiles))


def prefill_alone_time(instance: Instance, prompt_tokens: int) -> float:
    """F(X) of the module docstring for ``X = prompt_tokens`` under ``instance``'s cost model and P."""
    return _prefill_alone(instance.cost_model, int(prompt_tokens), instance.limits.prefill_budget)


#: Most per-token entries the per-token sums below hold at once: memory bounded however long the outputs.
TOKEN_BLOCK = 1 << 20


def _decode_terms(I: np.ndarray, O: np.ndarray, cm: CostModel, P: int, alone: bool) -> np.ndarray:
    """Per request, sum over g = 1..O-1 of the cheaper way to generate token g+1 (F3).

    ``alone=False`` gives item terms only (overhead is counted per batch by the work bound);
    ``alone=True`` gives whole lone-batch times D_i(g), R_i(g) of the critical-path bound. The
    term of token g+1 depends only on the slots h = I + g - 1 it reads (:func:`_decode_term`).
    """
    return sum_of_runs(I, np.maximum(O - 1, 0), lambda held: _decode_term(held, cm, P, alone), TOKEN_BLOCK)


def _decode_term(held: np.ndarray, cm: CostModel, P: int, alone: bool) -> np.ndarray:
    """The term of :func:`_decode_terms` of a token whose decode reads ``held`` slots."""
    coef = Coefficients.of(cm if alone else cm.linear_twin())
    L, b, a, pb, pa = coef.layers, coef.base, coef.per_token, coef.prefill_bias, coef.prefill_per_token
    pq, db, da, dk = coef.prefill_per_token_sq, coef.decode_bias, coef.decode_per_token, coef.decode_per_kv
    tc, dx = cm.per_tile, cm.decode.per_max_kv
    if alone:  # lone batches, priced exactly (F2)
        decode = b + a + tc + db + da + (dk + dx) * held
        chunks = np.ceil((held + 1.0) / P)
        refill = chunks * (b + pb) + tc * _tiles(held + 1.0, chunks, cm) + (a + pa + pq) * (held + 1.0)
    else:
        decode = a + da + dk * held
        refill = (a + pa + pq) * (held + 1.0)
    return L * np.minimum(decode, refill)


def prefill_alone_times(instance: Instance, I: Sequence[int] | np.ndarray) -> np.ndarray:
    """:func:`prefill_alone_time` of each prompt length of ``I`` (computed once per distinct length)."""
    lengths, where = np.unique(np.asarray(I), return_inverse=True)
    return np.array([prefill_alone_time(instance, int(x)) for x in lengths], dtype=np.float64)[where.reshape(-1)]


def _alone_parts(instance: Instance, I: np.ndarray, O: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request: F(I_i) (first token alone) and the least time of its O_i - 1 later tokens alone."""
    later = _decode_terms(I, O, instance.cost_model, instance.limits.prefill_budget, alone=True)
    return prefill_alone_times(instance, I), later


def critical_path_times(instance: Instance) -> np.ndarray:
    """A_i of the module docstring: least time each request needs alone, in request order."""
    _, I, O = instance.columns
    first, later = _alone_parts(instance, I, O)
    return first + later


@dataclass(frozen=True)
class RequestBounds:
    """Lower bounds on one request's times (seconds), valid under every feasible schedule."""

    ttft: float
    e2e: float
    tpot: float | None


def request_bounds(instance: Instance, request: Request) -> RequestBounds:
    """TTFT, latency and TPOT lower bounds of ``request`` (module docstring, "Per request")."""
    ttft, e2e, tpot = request_bound_arrays(
        instance, np.array([request.prompt_tokens]), np.array([request.output_tokens])
    )
    return RequestBounds(ttft=float(ttft[0]), e2e=float(e2e[0]), tpot=None if np.isnan(tpot[0]) else float(tpot[0]))


def request_bound_arrays(instance: Instance, I: np.ndarray, O: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`request_bounds` of the requests of prompt lengths ``I`` and output lengths ``O`` at
    once: TTFT, latency and TPOT lower bounds (TPOT NaN where O = 1)."""
    first, later = _alone_parts(instance, I, O)
    return first, first + later, np.where(O > 1, later / np.maximum(O - 1, 1), np.nan)


def _member_lengths(
    instance: Instance, members: np.ndarray | None, first_tokens: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of the requests ``members`` (indices; None: all); with
    ``first_tokens`` every output length is 1 (only the first token counts)."""
    _, I, O = instance.columns
    if first_tokens:
        O = np.ones_like(O)
    return (I, O) if members is None else (I[members], O[members])


def request_work(instance: Instance, first_tokens: bool = False) -> np.ndarray:
    """w_i of the ``work`` bound (module docstring): least item work of each request, request order.

    ``first_tokens``: only the work up to each request's first token (the proof with O_i = 1).
    """
    return _request_work(*_member_lengths(instance, None, first_tokens), instance)


def _request_work(I: np.ndarray, O: np.ndarray, instance: Instance) -> np.ndarray:
    """:func:`request_work` of the requests of prompt lengths ``I`` and output lengths ``O``."""
    cm = instance.cost_model
    coef = Coefficients.of(cm.linear_twin())
    L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
    return L * (a + pa + pq) * I + _decode_terms(I, O, cm, instance.limits.prefill_budget, alone=False)


def packing_bound(heights: np.ndarray | list[int], capacity: int) -> int:
    """Martello-Toth L2: least number of bins of ``capacity`` for items of ``heights`` (all <= it).

    Dominates the area count ceil(sum h / capacity) (module docstring, (F5)).
    """
    heights = np.asarray(heights, dtype=np.int64)
    small = _area_count_of_small_items(int(heights.sum()), int(heights.max(initial=0)), capacity)
    if small is not None:
        return small
    return packing_from_counts(np.bincount(heights, minlength=capacity + 1), capacity)


def _area_count_of_small_items(area: int, largest: int, M: int) -> int | None:
    """L2 without its histogram (of M + 1 entries) when every item is at most M/2: then it is the
    area count ceil(area / M), as no item is in J1 or J2 and J3 is at most the area; None otherwise.
    """
    return -(-area // M) if 2 * largest <= M else None


def packing_from_counts(counts: np.ndarray, M: int) -> int:
    """:func:`packing_bound` from ``counts[h]`` (items of height h, h = 0..M), every alpha at once."""
    h = np.arange(M + 1, dtype=np.int64)
    n_le = np.cumsum(counts)  # items of height <= h
    s_le = np.cumsum(counts * h)  # their total height
    half = M // 2  # h <= half  <=>  2h <= M
    alpha = np.arange(half + 1)
    top = M - alpha  # J2 = (half, M - alpha], J1 = (M - alpha, M]
    j1 = n_le[M] - n_le[top]
    j2 = n_le[top] - n_le[half]
    room = j2 * M - (s_le[top] - s_le[half])
    j3 = s_le[half] - np.where(alpha > 0, s_le[np.maximum(alpha - 1, 0)], 0)
    extra = np.maximum(0, -((room - j3) // M))  # ceil((j3 - room) / M), at least 0
    return int(max(-(-int(s_le[M]) // M), int(np.max(j1 + j2 + extra))))


def batch_counts(instance: Instance, members: np.ndarray | None = None, first_tokens: bool = False) -> tuple[int, int]:
    """(B, B_pre): least numbers of non-empty batches and of batches with prefill tokens serving the
    requests ``members`` (indices; default all), by the counts of (F3)-(F5).

    ``first_tokens``: the least numbers among the batches up to the one generating the last first
    token (the same counts with O_i = 1: each request's prompt is prefilled and its first token
    generated there, holding I_i slots).
    """
    return _batch_counts(*_member_lengths(instance, members, first_tokens), instance.limits)


def _batch_counts(I: np.ndarray, O: np.ndarray, lim: Limits) -> tuple[int, int]:
    """:func:`batch_counts` of the requests of prompt lengths ``I`` and output lengths ``O``."""
    P, C = lim.prefill_budget, lim.token_budget
    b_pre = max(-(-int(I.sum()) // P), int(np.max(-(-I // P))))
    b = max(int(np.max(-(-I // P) + O - 1)), -(-int((I + O - 1).sum()) // C), b_pre)
    if lim.max_running is not None:
        b = max(b, -(-int(O.sum()) // lim.max_running))
    if lim.kv_capacity is not None:  # (F5): items of heights I_i .. I_i + O_i - 1, as a histogram
        M = lim.kv_capacity  # (heights above M, of requests that can never run, are left out)
        area = int((O * I + O * (O - 1) // 2).sum())
        small = _area_count_of_small_items(area, int(np.max(I + O - 1)), M)
        if small is not None:  # no histogram of M + 1 entries (M may be 10^12)
            return max(b, small), b_pre
        runs = np.zeros(M + 2, dtype=np.int64)
        np.add.at(runs, np.minimum(I, M + 1), 1)
        np.add.at(runs, np.minimum(I + O, M + 1), -1)
        b = max(b, packing_from_counts(np.cumsum(runs)[: M + 1], M))
    return b, b_pre


def _refill_extra_by_decodes(I: np.ndarray, O: np.ndarray, cm: CostModel, d_max: int) -> np.ndarray:
    """``[D]`` for D = 0..d_max: the least refill extra sum_i sum_{k <= r_i} rho_(ik), r_i = (O_i - 1 - D)^+.

    rho_ig = L((a+pa+pq)(I_i+g) - (a+da+dk(I_i+g-1)))^+ (g = 1..O_i-1) is the clipped value of a
    function linear in g with one slope for all requests, so its ascending order is g's order
    (slope >= 0) or the reverse; the r smallest are a prefix of that order.
    """
    return _refill_extra_of_prefixes(I, O, cm, d_max, [len(I)])[0]


def _refill_extra_of_prefixes(
    I: np.ndarray, O: np.ndarray, cm: CostModel, d_max: int, lengths: Sequence[int]
) -> list[np.ndarray]:
    """:func:`_refill_extra_by_decodes` of the first n requests for each n of ``lengths``, summed in
    closed form over each request's positions (:func:`optsched.tokensums.smallest_clipped_sums`):
    rho_ig = L (s (I_i + g) + k)^+ with s = a + pa + pq - dk and k = dk - a - da."""
    coef = Coefficients.of(cm.linear_twin())
    L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
    da, dk = coef.decode_per_token, coef.decode_per_kv
    cuts = np.unique(np.asarray(lengths, dtype=np.int64))
    I, O = I[: int(cuts[-1])], O[: int(cuts[-1])]
    by_prefix = L * smallest_clipped_sums(I, O - 1, (a + pa + pq) - dk, dk - a - da, d_max + 1, cuts)
    return [by_prefix[int(np.searchsorted(cuts, n))] for n in lengths]


def _chunk_extra(prompts_sorted: np.ndarray, x: np.ndarray, coef: Coefficients) -> np.ndarray:
    """L pq sum_{I_i > x} (I_i^2 / x - I_i) for each x: the quadratic prefill cost beyond w_i's
    linear share when every prompt is prefilled in at most x chunks (Cauchy-Schwarz); ``coef``:
    those of the profile's linear twin."""
    L, pq = coef.layers, coef.prefill_per_token_sq
    if pq == 0.0:
        return np.zeros(len(x))
    rev = prompts_sorted[::-1].astype(np.float64)
    s1 = np.append(np.cumsum(rev)[::-1], 0.0)  # sums over sorted[k:]
    s2 = np.append(np.cumsum(rev * rev)[::-1], 0.0)
    at = np.searchsorted(prompts_sorted, x, side="right")
    return L * pq * np.maximum(0.0, s2[at] / x - s1[at])


def least_bias(
    instance: Instance, members: np.ndarray | None = None, *, batch_floor: int = 0, refills: bool = True
) -> float:
    """beta(S) of the module docstring: the count program's least overhead, refill and chunking
    extra of the batches serving the requests ``members`` (indices; default all).

    Vectorised over the number D of batches with decode items; for each D the least cost over the
    number x of prefill batches is that of a convex function of x at max(lo(D), its unconstrained
    minimiser). ``batch_floor``: a proven least number of batches from elsewhere (the program's B
    is at least it); ``refills=False`` leaves the refill extras out (for a caller that bounds them
    another way and must not count them twice).
    """
    return _least_bias(*_member_lengths(instance, members), instance, batch_floor, refills)


def _least_bias(
    I: np.ndarray,
    O: np.ndarray,
    instance: Instance,
    batch_floor: int = 0,
    refills: bool = True,
    extra_of: np.ndarray | None = None,
) -> float:
    """:func:`least_bias` of the requests of prompt lengths ``I`` and output lengths ``O``;
    ``extra_of``: their :func:`_refill_extra_by_decodes` when computed already (up to any d_max)."""
    cm, P = instance.cost_model, instance.limits.prefill_budget
    coef = Coefficients.of(cm.linear_twin())
    L, b, pb, db = coef.layers, coef.base, coef.prefill_bias, coef.decode_bias
    if len(I) == 0:
        return 0.0
    B, B_pre = _batch_counts(I, O, instance.limits)
    B = max(B, batch_floor)
    first = -(-I // P)
    reach = int(np.max(first + O - 1))
    d_max = max(B, int(O.max()))
    D = np.arange(d_max + 1)
    if not refills:
        extra = np.zeros(d_max + 1)
    elif extra_of is not None and len(extra_of) > d_max:
        extra = extra_of[: d_max + 1]
    else:
        extra = _refill_extra_by_decodes(I, O, cm, d_max)
    bp0 = np.maximum(max(B_pre, int(first.max())), reach - D)
    m = np.maximum(B, D)  # batches counted at least, before x
    lo = np.maximum(bp0, np.maximum(m, bp0) - D)
    prompts = np.sort(I)
    xs = np.arange(1, int(prompts[-1]) + 2)  # beyond the longest prompt chunking costs nothing more
    h = L * pb * xs + _chunk_extra(prompts, xs, coef)
    a_h = int(xs[np.argmin(h)])
    a_hk = int(xs[np.argmin(h + L * b * xs)])
    x_free = np.where(a_h <= m, a_h, np.maximum(m, a_hk))
    x = np.maximum(lo, x_free)
    cost = L * (b * np.maximum(m, x) + pb * x + db * D) + extra + _chunk_extra(prompts, x, coef)
    return float(np.min(cost)) * (1.0 - 1e-12)


def _tile_free(instance: Instance) -> Instance | None:
    """``instance`` under its profile without the step-shape terms (the linear part of the work
    bound's tile floor, module docstring), or None when the profile has no tile term."""
    cm = instance.cost_model
    if not cm.per_tile:
        return None
    plain = replace(cm, token_tile=0, per_tile=0.0, decode=replace(cm.decode, per_max_kv=0.0))
    return replace(instance, cost_model=plain)


#: How many of the best suffix sets the work bound refines with :func:`least_bias`.
REFINED_SUFFIXES = 16


def work_bound(instance: Instance) -> tuple[float, float]:
    """The ``work`` makespan bound and the arrival time t at which it is attained (module docstring)."""
    cm, lim = instance.cost_model, instance.limits
    coef = Coefficients.of(cm.linear_twin())
    L, b, pb, db = coef.layers, coef.base, coef.prefill_bias, coef.decode_bias
    arrival, I, O = instance.columns
    P, C = lim.prefill_budget, lim.token_budget
    order = np.argsort(-arrival, kind="stable")  # latest arrival first: prefix = suffix set S
    arr, Is, Os = arrival[order], I[order], O[order]
    Is_f, Os_f = Is.astype(np.float64), Os.astype(np.float64)
    cum_w = np.cumsum(_request_work(Is, Os, instance))

    def ceil_div(x: np.ndarray, y: float) -> np.ndarray:
        return np.ceil(x / y - 1e-12)

    b_pre = np.maximum(ceil_div(np.cumsum(Is_f), P), np.maximum.accumulate(ceil_div(Is_f, P)))
    counts = [
        ceil_div(np.cumsum(Is_f + Os_f - 1.0), C),
        np.maximum.accumulate(ceil_div(Is_f, P) + Os_f - 1.0),
        b_pre,
    ]
    if lim.max_running is not None:
        counts.append(ceil_div(np.cumsum(Os_f), lim.max_running))
    if lim.kv_capacity is not None:
        counts.append(ceil_div(np.cumsum(Os_f * Is_f + Os_f * (Os_f - 1.0) / 2.0), lim.kv_capacity))
    b_all = np.maximum.reduce(counts)
    overhead = L * (b * b_all + pb * b_pre + min(pb, db) * np.maximum(0.0, b_all - b_pre))
    # only the last request of each group of equal arrivals closes a suffix set S
    closes = np.append(arr[1:] != arr[:-1], True)
    values = np.where(closes, arr + overhead + cum_w, -np.inf)
    plain = _tile_free(instance)
    if plain is not None:  # the tile floor (module docstring)
        floor = L * cm.per_tile * np.maximum(b_all, np.cumsum(Is_f + Os_f - 1.0) / cm.token_tile)
        cum_plain = np.cumsum(_request_work(Is, Os, plain)) + floor
        values = np.maximum(values, np.where(closes, arr + overhead + cum_plain, -np.inf))
    # refine the most promising suffix sets (and the whole set) with the count program
    best = set(np.argsort(-values, kind="stable")[:REFINED_SUFFIXES].tolist()) | {len(arr) - 1}
    refined = sorted(k for k in best if closes[k])
    d_max = max(_batch_counts(Is, Os, lim)[0], int(Os.max()))  # the whole set's: at least every prefix's
    twins = [(instance, cum_w)] + ([(plain, cum_plain)] if plain is not None else [])
    for inst, cum in twins:
        extras = _refill_extra_of_prefixes(Is, Os, inst.cost_model, d_max, [k + 1 for k in refined])
        for k, extra in zip(refined, extras):
            bias = _least_bias(Is[: k + 1], Os[: k + 1], inst, extra_of=extra)
            values[k] = max(values[k], arr[k] + cum[k] + bias)
    k = int(np.argmax(values))
    return float(values[k]), float(arr[k])


def generic_bounds(instance: Instance, objective: str = "makespan") -> list[Bound]:
    """The generic proven lower bounds of this module on ``objective`` (a name of
    :data:`optsched.result.OBJECTIVE_TABLE` or an alias), in its unit; none for an objective other
    than ``makespan``, ``latency`` and ``ttft``.

    See the module docstring for the statement and proof of each.
    """
    objective = objective_named(objective).name
    if objective in MAXIMISED:  # goodput: its upper bound is the InferMax bounder's (goodput_bounds.py)
        return []
    arrival, I, _ = instance.columns
    if objective == "ttft":
        first = prefill_alone_times(instance, I)
        return [
            Bound(
                "prefill-alone",
                math.fsum(first) / len(first),
                True,
                "mean over requests of the least time to prefill its prompt alone",
            )
        ]
    alone = critical_path_times(instance)
    if objective == "latency":
        return [
            Bound(
                "critical-path",
                math.fsum(alone) / len(alone),
                True,
                "mean over requests of the least time to run it alone",
            )
        ]
    if objective != "makespan":  # an objective this module has no bound for
        return []
    return _makespan_bounds(instance, arrival, alone)


def _makespan_bounds(instance: Instance, arrival: np.ndarray, alone: np.ndarray) -> list[Bound]:
    """The ``work`` and ``critical-path`` makespan bounds, ``alone`` the :func:`critical_path_times`."""
    value, at = work_bound(instance)
    k = int(np.argmax(arrival + alone))
    return [
        Bound(
            "work",
            value,
            True,
            f"sequential batches: least overhead + item work of the requests arriving at or after t = {at:g} s",
        ),
        Bound(
            "critical-path",
            float(arrival[k] + alone[k]),
            True,
            f"request {instance.requests[k].id!r}: arrival + least time to run it alone",
        ),
    ]


def instance_bounds(instance: Instance) -> list[Bound]:
    """The default bounds of an instance: makespan (critical path, work, their max), mean latency,
    mean TTFT (lower bounds) and throughput (upper bound), all proven (module docstring)."""
    arrival, I, O = instance.columns
    first, later = _alone_parts(instance, I, O)
    makespan_bounds = {b.name: b.value for b in _makespan_bounds(instance, arrival, first + later)}
    critical, work = makespan_bounds["critical-path"], makespan_bounds["work"]
    makespan = max(critical, work)
    tokens = int(O.sum())
    return [
        Bound("makespan-critical-path", critical, True, "max over requests of arrival + least time alone"),
        Bound("makespan-work", work, True, "least summed batch times of the requests arriving from some t on"),
        Bound("makespan", makespan, True, "max of the two makespan bounds"),
        Bound("mean-latency", math.fsum(first + later) / len(I), True, "mean of per-request least times alone"),
        Bound("mean-ttft", math.fsum(first) / len(I), True, "mean of per-request least prefill times alone"),
        Bound(
            "throughput-upper",
            tokens / makespan if makespan > 0 else math.inf,
            True,
            "total output tokens / makespan lower bound (an upper bound)",
        ),
    ]

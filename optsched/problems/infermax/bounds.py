r"""Proven lower bounds for the InferMax model, cheap enough for any instance size.

Notation of :mod:`.model` (:math:`k_\cdot` are the cost coefficients with ``layers`` folded in,
:math:`K = \min(C, P)` the largest prefill chunk, :math:`q = k_t + k_{pt} + k_{pq}` the least cost of
one prefill token since :math:`c^2 \ge c`).

Work of request i (``work``). Its prompt is prefilled once at least: :math:`I_i q`. Its k-th
output token (:math:`k \ge 2`) needs the (k-1)-th token processed, either as a decode item reading
:math:`m = I_i + k - 2` KV, :math:`k_t + k_{dt} + k_{dk}(I_i + k - 2)`, or as the end of a refill that
re-processes the whole sequence, at least :math:`(I_i + k - 1) q`. So
:math:`W_i = I_i q + \sum_{k=2}^{O_i} \min(k_t + k_{dt} + k_{dk}(I_i+k-2), (I_i+k-1) q)`.

Batch biases. A set R of requests needs at least
:math:`B = \max(\max_R (\lceil I_i/K \rceil + O_i - 1), \lceil \sum_R U_i / C \rceil, B_p)` non-empty batches, of which at
least :math:`B_p = \max(\lceil \sum_R I_i / P \rceil, \max_R \lceil I_i / K \rceil)` hold prefill
tokens; also :math:`B \ge \lceil \sum_R \sum_{k=1}^{O_i} (I_i + k - 1) / M \rceil` (the batch
that generates the k-th token of request i holds its :math:`I_i + k - 1` KV, and a batch holds at
most M). This is a bin packing: every *item* (i, k) of height :math:`h_{ik} = I_i + k - 1` goes
into one batch, whose items' heights add up to at most M (other KV held is >= 0). So
:math:`B` is also at least the Martello-Toth bound :math:`L_2 = \max_{0 \le \alpha \le M/2} |J_1| + |J_2| +
\max(0, \lceil (\sum_{J_3} h - (|J_2| M - \sum_{J_2} h)) / M \rceil)` with
:math:`J_1 = \{h > M - \alpha\}`, :math:`J_2 = \{M - \alpha \ge h > M/2\}`,
:math:`J_3 = \{M/2 \ge h \ge \alpha\}` (no two items above M/2 share a batch; items of
:math:`J_1` share none with :math:`J_3`; :math:`J_3` fills at most the room :math:`J_2`'s batches
leave). It exceeds the area count when memory is tight (requests that must take turns).
Also :math:`B \ge \lceil \sum_R O_i / R_{max} \rceil`; every batch pays :math:`k_b` and a prefill (:math:`k_{pb}`) or decode (:math:`k_{db}`) bias.
Tokens :math:`2..O_i` of request i are each generated in a distinct batch, by a decode item (the
batch has decode items) or by the end of a refill (the batch has prefill tokens; the refill of token
k costs :math:`\rho_{ik} = \max(0, (I_i+k-1) q - (k_t + k_{dt} + k_{dk}(I_i+k-2)))` more than
:math:`W_i` counts for it). So with D batches holding decode items, request i refills at least
:math:`r_i = \max(0, O_i - 1 - D)` tokens, paying at least the sum of its :math:`r_i` smallest
:math:`\rho_{ik}`, in :math:`r_i` prefill batches distinct from the
:math:`\lceil I_i/K \rceil` that generate its first token; and every batch has prefill or decode
items. Hence :math:`\beta(R) = \min_D k_b B_D + k_{pb} P_D + k_{db} D + \sum_i \sum_{k \le r_i} \rho_{i(k)}`
with :math:`P^0_D = \max(B_p, \max_i (\lceil I_i/K \rceil + r_i))`,
:math:`B_D = \max(B, D, P^0_D)`, :math:`P_D = \max(P^0_D, B_D - D)` (the cost grows with the
counts, so the least counts are taken), plus the quadratic prefill term: a prompt of
:math:`I_i` tokens prefilled in at most :math:`n = \min(P_D, I_i)` chunks costs
:math:`k_{pq} \sum c^2 \ge k_{pq} I_i^2 / n` (Cauchy-Schwarz), :math:`k_{pq}(I_i^2/n - I_i)` more than
:math:`W_i` counts; as this falls and the biases grow with the number of prefill batches, the
least sum over :math:`P \ge P_D` (a convex function of P) is taken. It is at least :math:`k_b B + k_{pb} B_p + \min(k_{pb},
k_{db})(B - B_p)` and exceeds it when the longest request's decodes force batches with both
prefill and decode items (for instance N = 8, M unlimited: the proof closes).

- ``makespan``: the requests arriving at or after t are all served after t, and batch times add
  up: :math:`\max_t \, t + \sum_{a_i \ge t} W_i + \beta(\{i: a_i \ge t\})` (for the
  thresholds after the first arrival, :math:`\beta` is replaced by its cheaper lower bound
  :math:`k_b B + k_{pb} B_p + \min(k_{pb}, k_{db})(B - B_p)`, so that the bound stays fast on
  online traces).
- ``completion``: request i alone needs :math:`\lceil I_i/K \rceil + O_i - 1` batches after
  :math:`a_i`: :math:`F_i \ge a_i + W_i + (\lceil I_i/K \rceil + O_i - 1) k_b +
  \lceil I_i/K \rceil k_{pb} + (O_i - 1)\min(k_{pb}, k_{db})`; the bound is :math:`\sum_i` of that.
- ``ttft``: the first token needs the prompt: :math:`\frac1N \sum_i (I_i q + \lceil I_i/K \rceil
  (k_b + k_{pb}))`.

Every bound holds for every schedule that replays cleanly (with or without evictions, chunking or
hybrid batches), hence for the optimum; the solvers' own proven bounds are usually much tighter.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any, Mapping

import numpy as np

from ...instance import Instance, Request
from ...result import Bound
from .model import Coefficients

__all__ = ["batch_counts", "bounds", "lower_bound", "packing_bound", "request_work"]


def request_work(r: Request, k: Coefficients) -> float:
    """:math:`W_i`: least token work of request ``r`` in seconds (module docstring)."""
    q = k.k_t + k.k_pt + k.k_pq
    I = r.prompt_tokens
    tail = math.fsum(
        min(k.k_t + k.k_dt + k.k_dk * (I + t - 2), (I + t - 1) * q) for t in range(2, r.output_tokens + 1)
    )
    return I * q + tail


def batch_counts(reqs: list[Request], instance: Instance) -> tuple[int, int]:
    """:math:`(B, B_p)`: least numbers of non-empty batches and of batches with prefill tokens."""
    lim = instance.limits
    chunk = min(lim.token_budget, lim.prefill_budget)
    b_p = max(math.ceil(sum(r.prompt_tokens for r in reqs) / lim.prefill_budget),
              max(math.ceil(r.prompt_tokens / chunk) for r in reqs))
    b = max(max(math.ceil(r.prompt_tokens / chunk) + r.output_tokens - 1 for r in reqs),
            math.ceil(sum(r.max_kv for r in reqs) / lim.token_budget), b_p)
    if lim.kv_capacity is not None:  # memory-time: the k-th token needs I + k - 1 KV held in its batch
        M = lim.kv_capacity
        runs = np.zeros(M + 2, dtype=np.int64)  # heights I .. I + O - 1 of each request, as a histogram
        np.add.at(runs, [r.prompt_tokens for r in reqs], 1)
        np.add.at(runs, [min(r.prompt_tokens + r.output_tokens, M + 1) for r in reqs], -1)
        b = max(b, _packing_from_counts(np.cumsum(runs)[: M + 1], M))
    if lim.max_running is not None and lim.max_running > 0:  # each token's batch holds its request
        b = max(b, math.ceil(sum(r.output_tokens for r in reqs) / lim.max_running))
    return b, b_p


def packing_bound(heights: list[int], capacity: int) -> int:
    """Martello-Toth :math:`L_2`: least number of bins of ``capacity`` for items of ``heights``.

    Dominates the area bound :math:`\\lceil \\sum h / M \\rceil` (module docstring).
    """
    return _packing_from_counts(np.bincount(np.asarray(heights, dtype=np.int64), minlength=capacity + 1), capacity)


def _packing_from_counts(counts: np.ndarray, M: int) -> int:
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


def _refill_extra(r: Request, k: Coefficients) -> list[float]:
    """:math:`\\rho_{ik}` for k = 2..O_i, ascending: what a refill costs beyond :math:`W_i`'s share."""
    q = k.k_t + k.k_pt + k.k_pq
    I = r.prompt_tokens
    return sorted(
        max(0.0, (I + t - 1) * q - (k.k_t + k.k_dt + k.k_dk * (I + t - 2))) for t in range(2, r.output_tokens + 1)
    )


def _bias(reqs: list[Request], instance: Instance, k: Coefficients) -> float:
    """:math:`\\beta(R)`: least total bias (plus refill and chunking excess) of the batches serving ``reqs``.

    The minimum over the number D of batches with decode items of the module docstring's count
    program; only requests with :math:`O_i - 1 > D` refill, so the work is :math:`O(\\sum_i O_i)`.
    """
    if not reqs:
        return 0.0
    b, b_p = batch_counts(reqs, instance)
    chunk = min(instance.limits.token_budget, instance.limits.prefill_budget)
    prefix = [list(itertools.accumulate(_refill_extra(r, k), initial=0.0)) for r in reqs]
    first = [math.ceil(r.prompt_tokens / chunk) for r in reqs]
    f_max = max(first)
    reach = max(f + r.output_tokens - 1 for f, r in zip(first, reqs))  # max_i (first_i + O_i - 1)
    chunks = _ChunkExtra([r.prompt_tokens for r in reqs], k.k_pq)
    order = sorted(range(len(reqs)), key=lambda i: -reqs[i].output_tokens)
    best = math.inf
    for D in range(max(b, max(r.output_tokens for r in reqs)) + 1):
        extra = 0.0
        for i in order:  # requests that must refill at D: O_i - 1 > D
            n = reqs[i].output_tokens - 1 - D
            if n <= 0:
                break
            extra += prefix[i][n]
        bp0 = max(b_p, f_max, reach - D)  # = max(B_p, max_i (first_i + r_i))
        Bp = max(bp0, max(b, D, bp0) - D)
        cost = math.inf
        while True:  # convex in the number of prefill batches: stop at its first increase
            nxt = k.k_b * max(b, D, Bp) + k.k_pb * Bp + k.k_db * D + extra + chunks(Bp)
            if nxt >= cost:
                break
            cost, Bp = nxt, Bp + 1
        best = min(best, cost)
    return best


def _plain_bias(reqs: list[Request], instance: Instance, k: Coefficients) -> float:
    """:math:`k_b B + k_{pb} B_p + \\min(k_{pb}, k_{db})(B - B_p)`: the count program's value without
    refills and chunking, at most :func:`_bias` (cheap: used for the later arrival thresholds)."""
    b, b_p = batch_counts(reqs, instance)
    return k.k_b * b + k.k_pb * b_p + min(k.k_pb, k.k_db) * (b - b_p)


class _ChunkExtra:
    """Least quadratic prefill cost beyond :math:`W_i`'s :math:`k_{pq}` per token, over n prefill batches.

    :math:`k_{pq} \\sum_{I_i > n} (I_i^2 / n - I_i)` (Cauchy-Schwarz; a prompt of at most n tokens may
    be prefilled one token per batch), from suffix sums over the sorted prompts.
    """

    def __init__(self, prompts: list[int], k_pq: float) -> None:
        self.sorted = sorted(prompts)
        self.s1 = list(itertools.accumulate(reversed(self.sorted), initial=0))[::-1]
        self.s2 = list(itertools.accumulate((I * I for I in reversed(self.sorted)), initial=0))[::-1]
        self.k_pq = k_pq

    def __call__(self, n: int) -> float:
        at = bisect.bisect_right(self.sorted, n)  # prompts longer than n
        return self.k_pq * max(0.0, self.s2[at] / n - self.s1[at])


def _alone(r: Request, instance: Instance, k: Coefficients) -> float:
    """Least finish time of request ``r`` counting only its own batches."""
    lim = instance.limits
    n_pre = math.ceil(r.prompt_tokens / min(lim.token_budget, lim.prefill_budget))
    n_dec = r.output_tokens - 1
    return (r.arrival + request_work(r, k) + (n_pre + n_dec) * k.k_b + n_pre * k.k_pb
            + n_dec * min(k.k_pb, k.k_db))


def lower_bound(instance: Instance, objective: str = "makespan") -> list[Bound]:
    """The proven work bounds of the module docstring for ``objective``."""
    k = Coefficients.from_cost_model(instance.cost_model)
    reqs = list(instance.requests)
    lim = instance.limits
    chunk = min(lim.token_budget, lim.prefill_budget)
    if objective == "makespan":
        best = 0.0
        for n, t in enumerate(sorted({r.arrival for r in reqs})):
            later = [r for r in reqs if r.arrival >= t]
            bias = _bias(later, instance, k) if n == 0 else _plain_bias(later, instance, k)
            best = max(best, t + math.fsum(request_work(r, k) for r in later) + bias)
        best = max(best, max(_alone(r, instance, k) for r in reqs))
        return [Bound("work", best, True, "token work + batch biases after each arrival time (infermax/bounds.py)")]
    if objective == "completion":
        value = math.fsum(_alone(r, instance, k) for r in reqs)
        return [Bound("work", value, True, "sum over requests of their own least finish time")]
    if objective == "ttft":
        q = k.k_t + k.k_pt + k.k_pq
        value = math.fsum(
            r.prompt_tokens * q + math.ceil(r.prompt_tokens / chunk) * (k.k_b + k.k_pb) for r in reqs
        ) / len(reqs)
        return [Bound("work", value, True, "mean least prefill time of each prompt")]
    raise ValueError(f"unknown objective {objective!r} (known: makespan, completion, ttft)")


def bounds(instance: Instance, options: Mapping[str, Any]) -> list[Bound]:
    """Registry entry: proven lower bounds for ``options['objective']`` (default makespan).

    With ``method='lp'`` the LP relaxation of the MIP (:mod:`.mip`) is added (proven, usually weaker
    than the work bound on large instances but independent of it).
    """
    objective = options.get("objective") or "makespan"
    out = lower_bound(instance, objective)
    if options.get("method") == "lp":
        from .mip import lp_relaxation_bound

        out.append(lp_relaxation_bound(instance, dict(options)))
    return out

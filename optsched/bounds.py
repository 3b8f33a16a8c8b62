"""Generic lower bounds from the cost model, proven under the contract's semantics.

These bounds hold for *every* complete schedule of an instance (any policy, any formulation, with or
without evictions), so they are valid for every problem whose objective is computed by
:func:`optsched.schedule.replay`. Each is a relaxation of the contract (section 2) and its cost model
(section 3); the proofs below rely only on these facts:

(F1) **Batches are sequential.** start_j >= end_{j-1} and end_j = start_j + T_j, so batches occupy
     disjoint time intervals ending by the makespan; a batch holding an item of request i starts at or
     after arrival_i.
(F2) **T is monotone and splits.** All coefficients are >= 0 (the loader rejects negatives). With
     L = layers, one batch costs
     ``T = L (b + a N_tok + [N_pre>0](pb + pa N_pre + pq S_pre) + [N_dec>0](db + da N_dec + dk KV_dec))``.
     Dropping items never increases T, and T is the per-batch *overhead* L(b + [pre] pb + [dec] db)
     plus a sum of per-item terms: L(a + pa) c + L pq c^2 for a prefill chunk c, L(a + da + dk m)
     for a decode item reading m slots. Since c^2 >= c, a prefill chunk's item term is
     >= L (a + pa + pq) c.
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

Bounds (each returned as a :class:`~optsched.result.Bound` with ``valid=True``):

- ``work`` (makespan): for each distinct arrival time t, let S = requests arriving at or after t. By
  (F1) every batch touching S starts after t, so makespan >= t + sum of their costs. By (F2) that sum
  is >= L(b B + pb B_pre + db B_dec) + sum_{i in S} w_i, where w_i sums the cheapest item terms of
  (F3): ``w_i = L((a+pa+pq) I_i + sum_{g=1}^{O_i-1} min(a + da + dk (I_i+g-1), (a+pa+pq)(I_i+g)))``.
  B (batches touching S) is at least each count of (F3)/(F4) restricted to S: ceil(tokens / C) with
  tokens >= sum (I_i + O_i - 1), max_i ceil(I_i/P) + O_i - 1, ceil(sum O_i / R_max) and
  ceil(sum_i sum_{g=1}^{O_i} (I_i+g-1) / M); B_pre >= ceil(sum I_i / P). Every such batch has
  prefill or decode items, so B_pre + B_dec >= B and the overhead is
  >= pb B_pre^lb + min(pb, db) max(0, B^lb - B_pre^lb) on top of b B^lb. Refinement (for the
  :data:`REFINED_SUFFIXES` best sets S): with x the actual number of prefill batches, each prompt is
  prefilled in <= x chunks, so its sum of c^2 is >= max(I_i, I_i^2 / x), and the overhead is
  >= L(b max(B^lb, x) + pb x + db max(0, B^lb - x)); the least value of this convex function of the
  integer x >= B_pre^lb replaces the overhead and the linear pq I_i term (:func:`_least_overhead`).
- ``critical-path`` (makespan): makespan >= max_i (arrival_i + A_i), where A_i is the least time
  request i alone needs: by (F1)-(F3) its batches are disjoint and each costs at least the batch of
  its own item alone. A_i = F(I_i) + sum_{g=1}^{O_i-1} min(D_i(g), R_i(g)) with F(X) the cheapest
  prefill of X tokens in k >= ceil(X/P) chunks (k L(b + pb) + L(a+pa) X + L pq minsq(X, k), minsq the
  least sum of squares of k positive parts of X: equal parts), D_i(g) = L(b + a + db + da +
  dk(I_i+g-1)) a lone decode and R_i(g) = L(ceil((I_i+g)/P)(b + pb) + (a+pa+pq)(I_i+g)) a re-prefill.
- ``critical-path`` (completion, sum of finish times): sum_i (arrival_i + A_i), since finish_i >=
  arrival_i + A_i.
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
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .costmodel import CostModel
from .instance import Instance, Request
from .result import OBJECTIVES, Bound

__all__ = [
    "RequestBounds",
    "critical_path_times",
    "generic_bounds",
    "instance_bounds",
    "prefill_alone_time",
    "request_bounds",
    "work_bound",
]


def _coefficients(cm: CostModel) -> tuple[float, ...]:
    """(L, b, a, pb, pa, pq, db, da, dk) of a cost model."""
    p, d = cm.prefill, cm.decode
    return (cm.layers, cm.base, cm.per_token, p.bias, p.per_token, p.per_token_sq, d.bias, d.per_token, d.per_kv)


@lru_cache(maxsize=65536)
def _prefill_alone(cm: CostModel, tokens: int, chunk_cap: int) -> float:
    """F(X): least time to prefill ``tokens`` tokens of one request alone, chunks <= ``chunk_cap``.

    Scans every chunk count k >= ceil(X / cap) (the quadratic term favours more chunks, the batch
    overhead fewer); the least sum of squares of k positive parts of X is attained by equal parts.
    """
    L, b, a, pb, pa, pq, *_ = _coefficients(cm)
    k_min = -(-tokens // chunk_cap)
    k = np.arange(k_min, tokens + 1, dtype=np.float64)
    if pq == 0.0:  # more chunks only add overhead
        k = k[:1]
    q = np.floor(tokens / k)
    r = tokens - q * k
    minsq = q * q * (k - r) + (q + 1) ** 2 * r
    return float(L * np.min(k * (b + pb) + (a + pa) * tokens + pq * minsq))


def prefill_alone_time(instance: Instance, prompt_tokens: int) -> float:
    """F(X) of the module docstring for ``X = prompt_tokens`` under ``instance``'s cost model and P."""
    return _prefill_alone(instance.cost_model, int(prompt_tokens), instance.limits.prefill_budget)


def _decode_terms(I: np.ndarray, O: np.ndarray, cm: CostModel, P: int, alone: bool) -> np.ndarray:
    """Per request, sum over g = 1..O-1 of the cheaper way to generate token g+1 (F3).

    ``alone=False`` gives item terms only (overhead is counted per batch by the work bound);
    ``alone=True`` gives whole lone-batch times D_i(g), R_i(g) of the critical-path bound.
    """
    L, b, a, pb, pa, pq, db, da, dk = _coefficients(cm)
    n_dec = np.maximum(O - 1, 0)
    owner = np.repeat(np.arange(len(I)), n_dec)
    starts = np.cumsum(n_dec) - n_dec
    g = np.arange(int(n_dec.sum()), dtype=np.float64) - np.repeat(starts, n_dec) + 1.0
    held = np.repeat(I.astype(np.float64), n_dec) + g - 1.0  # slots read by the decode of token g+1
    if alone:
        decode = b + a + db + da + dk * held
        refill = np.ceil((held + 1.0) / P) * (b + pb) + (a + pa + pq) * (held + 1.0)
    else:
        decode = a + da + dk * held
        refill = (a + pa + pq) * (held + 1.0)
    return L * np.bincount(owner, weights=np.minimum(decode, refill), minlength=len(I))


def _arrays(instance: Instance) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    reqs = instance.requests
    arrival = np.array([r.arrival for r in reqs], dtype=np.float64)
    I = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
    O = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    return arrival, I, O


def _alone_parts(instance: Instance, I: np.ndarray, O: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request: F(I_i) (first token alone) and the least time of its O_i - 1 later tokens alone."""
    first = np.array([prefill_alone_time(instance, int(x)) for x in I], dtype=np.float64)
    return first, _decode_terms(I, O, instance.cost_model, instance.limits.prefill_budget, alone=True)


def critical_path_times(instance: Instance) -> np.ndarray:
    """A_i of the module docstring: least time each request needs alone, in request order."""
    _, I, O = _arrays(instance)
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
    first, later = _alone_parts(instance, np.array([request.prompt_tokens]), np.array([request.output_tokens]))
    tpot = float(later[0]) / (request.output_tokens - 1) if request.output_tokens > 1 else None
    return RequestBounds(ttft=float(first[0]), e2e=float(first[0] + later[0]), tpot=tpot)


def _least_overhead(prompts: np.ndarray, b_lb: float, bpre_lb: float, cm: CostModel) -> float:
    """Least batch overhead plus quadratic prefill work of a request set, over its prefill-batch count x.

    With x prefill batches (x >= ``bpre_lb``) and B >= max(``b_lb``, x) batches in all, of which the
    B - x without prefill have decode items, the overhead is >= L(b max(B_lb, x) + pb x + db max(0,
    B_lb - x)); each prompt I, prefilled in at most x chunks, has sum c^2 >= max(I, I^2 / x). The sum
    f(x) is convex, so a binary search on f(x + 1) - f(x) finds its least integer value.
    """
    L, b, _, pb, _, pq, db, *_ = _coefficients(cm)
    sq = prompts * prompts

    def f(x: float) -> float:
        quad = pq * float(np.sum(np.maximum(prompts, sq / x))) if pq else pq * float(prompts.sum())
        return L * (b * max(b_lb, x) + pb * x + db * max(0.0, b_lb - x) + quad)

    lo, hi = int(bpre_lb), int(max(bpre_lb, b_lb, prompts.max()))
    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid + 1) >= f(mid):
            hi = mid
        else:
            lo = mid + 1
    return f(lo) * (1.0 - 1e-12)


#: How many of the best suffix sets the work bound refines with :func:`_least_overhead`.
REFINED_SUFFIXES = 16


def work_bound(instance: Instance) -> tuple[float, float]:
    """The ``work`` makespan bound and the arrival time t at which it is attained (module docstring)."""
    cm, lim = instance.cost_model, instance.limits
    L, b, a, pb, pa, pq, db, *_ = _coefficients(cm)
    arrival, I, O = _arrays(instance)
    P, C = lim.prefill_budget, lim.token_budget
    order = np.argsort(-arrival, kind="stable")  # latest arrival first: prefix = suffix set S
    arr, Is, Os = arrival[order], I[order], O[order]
    Is_f, Os_f = Is.astype(np.float64), Os.astype(np.float64)
    w = L * (a + pa + pq) * Is_f + _decode_terms(Is, Os, cm, P, alone=False)

    def ceil_div(x: np.ndarray, y: float) -> np.ndarray:
        return np.ceil(x / y - 1e-12)

    cum_w = np.cumsum(w)
    b_pre = ceil_div(np.cumsum(Is_f), P)
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
    # refine the most promising suffix sets (and the whole set) with the exact overhead trade-off
    best = set(np.argsort(-values, kind="stable")[:REFINED_SUFFIXES].tolist()) | {len(arr) - 1}
    linear_quad = L * pq * np.cumsum(Is_f)
    for k in best:
        if closes[k]:
            refined = arr[k] + cum_w[k] - linear_quad[k] + _least_overhead(Is_f[: k + 1], b_all[k], b_pre[k], cm)
            values[k] = max(values[k], refined)
    k = int(np.argmax(values))
    return float(values[k]), float(arr[k])


def generic_bounds(instance: Instance, objective: str = "makespan") -> list[Bound]:
    """All generic proven lower bounds on ``objective`` (``makespan``, ``completion``, ``ttft``).

    See the module docstring for the statement and proof of each.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (known: {', '.join(OBJECTIVES)})")
    arrival, I, _ = _arrays(instance)
    if objective == "ttft":
        first = [prefill_alone_time(instance, int(x)) for x in I]
        return [Bound("prefill-alone", math.fsum(first) / len(first), True,
                      "mean over requests of the least time to prefill its prompt alone")]
    alone = critical_path_times(instance)
    if objective == "completion":
        return [Bound("critical-path", math.fsum(arrival + alone), True,
                      "sum over requests of arrival + least time to run it alone")]
    value, at = work_bound(instance)
    k = int(np.argmax(arrival + alone))
    return [
        Bound("work", value, True,
              f"sequential batches: least overhead + item work of the requests arriving at or after t = {at:g} s"),
        Bound("critical-path", float(arrival[k] + alone[k]), True,
              f"request {instance.requests[k].id!r}: arrival + least time to run it alone"),
    ]


def instance_bounds(instance: Instance) -> list[Bound]:
    """The default bounds of an instance: makespan (critical path, work, their max), mean latency,
    mean TTFT (lower bounds) and throughput (upper bound), all proven (module docstring)."""
    _, I, O = _arrays(instance)
    first, later = _alone_parts(instance, I, O)
    makespan_bounds = {b.name: b.value for b in generic_bounds(instance, "makespan")}
    critical, work = makespan_bounds["critical-path"], makespan_bounds["work"]
    makespan = max(critical, work)
    tokens = int(O.sum())
    return [
        Bound("makespan-critical-path", critical, True, "max over requests of arrival + least time alone"),
        Bound("makespan-work", work, True, "least summed batch times of the requests arriving from some t on"),
        Bound("makespan", makespan, True, "max of the two makespan bounds"),
        Bound("mean-latency", math.fsum(first + later) / len(I), True, "mean of per-request least times alone"),
        Bound("mean-ttft", math.fsum(first) / len(I), True, "mean of per-request least prefill times alone"),
        Bound("throughput-upper", tokens / makespan if makespan > 0 else math.inf, True,
              "total output tokens / makespan lower bound (an upper bound)"),
    ]

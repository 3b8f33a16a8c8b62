"""Trivial, always-valid bounds of an instance under the contract's cost model.

These hold for *every* schedule that replays cleanly (evictions allowed), because every
coefficient of the cost model is >= 0 (validated on load), batches run one after another, a
request has at most one item per batch, and a batch costs at least the sum of its items' own terms.
Write :math:`L` for ``layers``, :math:`b, a` for ``base, per_token``, :math:`p_b, p_a, p_q` and
:math:`d_b, d_a, d_k` for the prefill and decode terms.

Per request r (prompt I, output O, arrival A):

- **TTFT.** The first token needs the whole prompt prefilled, in k >= ceil(I / min(P, C)) batches
  with chunks c_1..c_k summing to I; each of those batches costs at least
  :math:`L(b + p_b + (a + p_a) c_i + p_q c_i^2)` and :math:`\\sum c_i^2 >= I^2 / k` (Cauchy-Schwarz),
  so :math:`TTFT >= \\min_k L(k (b + p_b) + (a + p_a) I + p_q I^2 / k)`.
- **Later tokens.** Token g (2..O) is generated in its own later batch, either by a decode item
  reading exactly x = I + g - 2 KV slots (the context is the same after recomputation), or by the
  last chunk of a recomputation, at least one prefill token. So it costs at least
  :math:`L(b + a + \\min(d_b + d_a + d_k x, p_b + p_a + p_q))`. Their sum bounds
  ``latency - TTFT``; divided by O - 1 it bounds TPOT.

Makespan: the ``critical-path`` and ``work`` bounds of :mod:`optsched.bounds` (stated and proved
there; they dominate the per-request bounds above).

The throughput upper bound is the total output divided by the makespan lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .costmodel import CostModel
from .instance import Instance, Request
from .bounds import generic_bounds
from .result import Bound

__all__ = ["RequestBounds", "instance_bounds", "request_bounds"]


@dataclass(frozen=True)
class RequestBounds:
    """Lower bounds on one request's times (seconds), valid under every feasible schedule."""

    ttft: float
    e2e: float
    tpot: float | None


def _min_ttft(cm: CostModel, prompt: int, chunk_cap: int) -> float:
    fixed = cm.layers * (cm.base + cm.prefill.bias)
    linear = cm.layers * (cm.per_token + cm.prefill.per_token) * prompt
    quad = cm.layers * cm.prefill.per_token_sq * prompt * prompt
    k_min = math.ceil(prompt / chunk_cap)
    candidates = {k_min, prompt}
    if fixed > 0 and quad > 0:
        k_star = min(math.sqrt(quad / fixed), float(prompt))  # may overflow to inf
        candidates.update({math.floor(k_star), math.ceil(k_star)})
    return min(k * fixed + linear + quad / k for k in candidates if k_min <= k <= prompt)


def _sum_min_linear(a1: float, k1: float, a2: float, k2: float, lo: int, hi: int) -> float:
    """sum over integer x in [lo, hi] of min(a1 + k1 x, a2 + k2 x) (0 when hi < lo)."""
    if hi < lo:
        return 0.0

    def total(a: float, k: float, x0: int, x1: int) -> float:
        return 0.0 if x1 < x0 else (x1 - x0 + 1) * (a + k * (x0 + x1) / 2)

    if k1 == k2:
        return total(min(a1, a2), k1, lo, hi)
    # a1 + k1 x <= a2 + k2 x  <=>  x (k1 - k2) <= a2 - a1
    cross = min(max((a2 - a1) / (k1 - k2), lo - 1.0), hi + 1.0)  # clamped: may overflow to +-inf
    if k1 < k2:  # line 1 is lower for x >= cross
        split = min(max(math.ceil(cross), lo), hi + 1)
        return total(a2, k2, lo, split - 1) + total(a1, k1, split, hi)
    split = min(max(math.floor(cross) + 1, lo), hi + 1)  # line 1 is lower for x <= cross
    return total(a1, k1, lo, split - 1) + total(a2, k2, split, hi)


def request_bounds(instance: Instance, request: Request) -> RequestBounds:
    """Lower bounds on TTFT, end-to-end latency and TPOT of ``request`` (see the module docstring)."""
    cm, lim = instance.cost_model, instance.limits
    chunk_cap = min(lim.prefill_budget, lim.token_budget)
    ttft = _min_ttft(cm, request.prompt_tokens, chunk_cap)
    step_fixed = cm.base + cm.per_token
    d, p = cm.decode, cm.prefill
    later = cm.layers * (
        (request.output_tokens - 1) * step_fixed
        + _sum_min_linear(
            d.bias + d.per_token,
            d.per_kv,
            p.bias + p.per_token + p.per_token_sq,
            0.0,
            request.prompt_tokens,
            request.prompt_tokens + request.output_tokens - 2,
        )
    )
    tpot = later / (request.output_tokens - 1) if request.output_tokens > 1 else None
    return RequestBounds(ttft=ttft, e2e=ttft + later, tpot=tpot)


def instance_bounds(instance: Instance) -> list[Bound]:
    """The trivial bounds of an instance: makespan (critical path, work), mean latency, mean TTFT
    (lower bounds) and throughput (upper bound). All are proven (``valid=True``)."""
    per = [request_bounds(instance, r) for r in instance.requests]
    n = len(per)
    # The makespan bounds are optsched.bounds' (stronger, and proven there): one implementation.
    makespan_bounds = {b.name: b.value for b in generic_bounds(instance, "makespan")}
    critical, work = makespan_bounds["critical-path"], makespan_bounds["work"]
    makespan = max(critical, work)
    tokens = sum(r.output_tokens for r in instance.requests)
    return [
        Bound("makespan-critical-path", critical, True, "max over requests of arrival + isolated latency bound"),
        Bound("makespan-work", work, True, "first arrival + lower bound on the summed batch times"),
        Bound("makespan", makespan, True, "max of the two makespan bounds"),
        Bound("mean-latency", math.fsum(b.e2e for b in per) / n, True, "mean of per-request latency bounds"),
        Bound("mean-ttft", math.fsum(b.ttft for b in per) / n, True, "mean of per-request TTFT bounds"),
        Bound("throughput-upper", tokens / makespan if makespan > 0 else math.inf, True,
              "total output tokens / makespan lower bound (an upper bound)"),
    ]

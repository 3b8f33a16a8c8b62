r"""The KV-time count: the least number of batches when memory fills up only as requests grow.

The area count of :mod:`optsched.bounds` (F5) says that the batches together hold at least the
*KV area* :math:`A = \sum_i \sum_{g=1}^{O_i} (I_i + g - 1)`, at most M each. Early batches cannot
hold M: request i generates at most one token per batch, and its first token needs
:math:`f_i = \lceil I_i / P \rceil` batches with its prompt's tokens. So in the t-th non-empty batch
of any schedule (t = 1, 2, ...) request i generates at most its token :math:`t - f_i + 1`, and the
KV it holds for a token it generates there is at most

.. math::  h_i(t) = I_i + \min(O_i,\ t - f_i + 1) - 1 \quad (t \ge f_i;\ \text{none before}).

**Proof that** :math:`B \ge B_{kv}`, the least B with :math:`\sum_{t=1}^{B} cap_t \ge A`, where
:math:`cap_t = \min(M,\ t C,\ \sum_i h_i(t))`. The batch generating token g of request i holds
:math:`I_i + g - 1` KV for it after processing, whether by a decode or by the end of a (re)fill
(F3, F4 of :mod:`optsched.bounds`), so the KV held after processing batch t is at least the sum of
the heights of the tokens generated there: at most one per request, each at most
:math:`h_i(t)`; the KV is also at most M, and at most the tokens processed in batches 1..t (KV only
grows by processed tokens), at most tC. Every token is generated in some batch, so the batches'
KV sums to at least A, and :math:`\sum_{t \le B} cap_t \ge A`. Empty batches (evictions only)
generate nothing and are not counted. The count is at least the area count
:math:`\lceil A / M \rceil` and exceeds it when few requests must fill a large M: with 32 requests
of I = 64 tokens and M = 10,000 (``infermax-i64-o1024-n32-m10k``) the first 250 batches hold less
than M, and the count is 1,985 batches instead of 1,886.

:func:`kv_time_count` computes :math:`B_{kv}` without building :math:`cap_t` past the batch where
every :math:`h_i` reaches its largest value (from there on :math:`cap_t` only grows with tC, capped
at M and at :math:`\sum_i (I_i + O_i - 1)`), so its cost is linear in the longest request.
"""

from __future__ import annotations

import math

import numpy as np

from ...instance import Instance

__all__ = ["kv_area", "kv_capacities", "kv_time_count"]


def kv_area(prompt: np.ndarray, output: np.ndarray) -> int:
    """A: the sum over every request and generated token g of the KV it holds, I + g - 1."""
    prompt = prompt.astype(np.int64)
    output = output.astype(np.int64)
    return int((output * prompt + output * (output - 1) // 2).sum())


def kv_capacities(prompt: np.ndarray, output: np.ndarray, P: int, C: int, M: float, batches: int) -> np.ndarray:
    """cap_t for t = 1..``batches`` (module docstring)."""
    first = -(-prompt.astype(np.int64) // P)
    t = np.arange(1, batches + 1, dtype=np.int64)
    # sum_i h_i(t) as a piecewise-linear function: slope +1 per request between f_i and f_i + O_i - 1
    start = np.zeros(batches + 2, np.int64)
    slope_on = np.minimum(first, batches + 1)
    slope_off = np.minimum(first + output - 1, batches + 1)
    np.add.at(start, slope_on, prompt)  # h_i(f_i) = I_i
    d_slope = np.zeros(batches + 2, np.int64)
    np.add.at(d_slope, np.minimum(first + 1, batches + 1), 1)
    np.add.at(d_slope, np.minimum(slope_off + 1, batches + 1), -1)
    del slope_on
    level = np.cumsum(start)[1 : batches + 1] + np.cumsum(np.cumsum(d_slope))[1 : batches + 1]
    return np.minimum(np.minimum(float(M), (t * C).astype(np.float64)), level.astype(np.float64))


def kv_time_count(instance: Instance) -> int:
    """B_kv: the least number of non-empty batches by the KV-time count (module docstring); the
    area count when the instance has no KV capacity (then 0)."""
    M = instance.limits.kv_capacity
    if M is None or not instance.requests:
        return 0
    prompt = np.array([r.prompt_tokens for r in instance.requests], dtype=np.int64)
    output = np.array([r.output_tokens for r in instance.requests], dtype=np.int64)
    lim = instance.limits
    area = kv_area(prompt, output)
    full = int((-(-prompt // lim.prefill_budget) + output - 1).max())  # every h_i at its largest from here
    caps = kv_capacities(prompt, output, lim.prefill_budget, lim.token_budget, M, full)
    held = np.cumsum(caps)
    if held[-1] >= area:
        return int(np.searchsorted(held, area) + 1)
    top = float(min(M, (prompt + output - 1).sum()))  # cap_t from batch `full` on, once tC >= top
    left = area - held[-1]
    t, count = full, 0  # the few batches where tC still binds, then whole batches at `top`
    while left > 0 and (t + 1) * lim.token_budget < top:
        t += 1
        count += 1
        left -= t * lim.token_budget
    return full + count + max(0, math.ceil(left / top - 1e-12))

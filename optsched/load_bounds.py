r"""Lower bounds on mean latency and mean TTFT that see the load: one machine processing work.

The bounds of :mod:`optsched.bounds` for the per-request objectives are each request run alone
(its critical path): they do not move when requests queue behind each other. The bounds here
relax the engine to *one machine that processes work* and price the queueing exactly on that
machine. They hold for every schedule that replays cleanly under the contract (any policy, any
formulation, evictions or not), and use only the facts (F0)-(F5) of :mod:`optsched.bounds`.

**Work and its shares.** Take the linear twin's coefficients (F0, F2): a batch B costs at least its
overhead :math:`\beta = L(b + \min(p_b, d_b))` plus the item terms of its items (a prefill chunk of
c tokens at least :math:`L(a+p_a+p_q)c`, a decode item reading m slots :math:`L(a+d_a+d_k m)`).
Let K be the most items one batch can hold: at most one per request (the replay rejects a second),
each of a request holding KV (at most :math:`R_{max}`), of at least one token (at most C) and
holding at least one slot (at most M); :math:`K = \min(N, R_{max}, C, M)`. Give each item x of B
the *share* :math:`\beta(\lambda_1 / K + \lambda_2\, tok_x / C + \lambda_3\, h_x / M)` of B's
overhead, with :math:`\lambda \ge 0`, :math:`\sum \lambda = 1` (the M term only with a capacity),
tok_x its tokens and h_x the KV its request holds after B. By (F4) the items of B number at most
K, hold at most C tokens and at most M slots, so their shares add up to at most :math:`\beta`, and
**the item terms plus the shares of B's items are at most B's time**.

Request i's items are at least :math:`n_i = \lceil I_i/P \rceil + O_i - 1` (F3), hold at least
:math:`\tau_i = I_i + O_i - 1` tokens and, over the items generating its O_i tokens,
:math:`\eta_i = \sum_{g=1}^{O_i} (I_i + g - 1)` slots (F4: the item generating token g holds
:math:`I_i + g - 1`, after an eviction too). So its item terms and shares add up to at least

.. math:: p_i = w_i + \beta(\lambda_1 n_i / K + \lambda_2 \tau_i / C + \lambda_3 \eta_i / M),

with :math:`w_i` the least item work of :func:`optsched.bounds.request_work` (the cheaper of a
decode and a re-prefill for every later token).

**The relaxation.** Given a schedule with finish times :math:`F_i`, build a preemptive schedule of
one machine: inside each batch's interval :math:`[s_B, e_B]` run each of its items, one after the
other, for its item term plus share (they fit: the sum is at most :math:`e_B - s_B`). Job i is
released at :math:`r_i` (arrival; a batch holding i's item starts after it, (F1)), needs
:math:`p_i` (stop it once it has had :math:`p_i`; it gets at least that) and completes at
:math:`C_i \le F_i` (its last batch ends at :math:`F_i`). Batches are sequential (F1), so this is a
feasible schedule of :math:`1|r_j, pmtn|\sum C_j`.

**Sorted combination.** Preemptive SRPT (shortest remaining processing time) on that machine
completes, at every time t, the most jobs that any schedule completes by t (Schrage, "A proof of the
optimality of the shortest remaining processing time discipline", Oper. Res. 16, 1968: SRPT
minimises the number of jobs in the system at every time; the jobs released by t do not depend on
the schedule). Hence the k-th smallest :math:`C_i`, so the k-th smallest :math:`F_i`, is at least
SRPT's k-th completion :math:`S_{(k)}`. Every :math:`F_i \ge e_i = r_i + A_i` (the critical path of
:func:`optsched.bounds.critical_path_times`), so the k-th smallest :math:`F_i` is also at least the
k-th smallest :math:`e_{(k)}` (componentwise domination survives sorting). Summing,

.. math:: \text{mean latency} = \frac{1}{N}\Big(\sum_i F_i - \sum_i r_i\Big)
          \ge \frac{1}{N}\Big(\sum_k \max(S_{(k)}, e_{(k)}) - \sum_i r_i\Big).

Each weight vector :math:`\lambda` gives a valid bound; ``srpt-work`` is the largest over
:data:`SHARE_WEIGHTS`. It grows with load (the SRPT queue) and with memory pressure (the
:math:`\lambda_3` share prices each slot-iteration at :math:`\beta / M`).

**TTFT** (``srpt-prefill``). The first token of i ends the batch generating it, :math:`FT_i`. Keep
in the relaxation only the items up to each request's first token: at least
:math:`\lceil I_i/P \rceil` items, :math:`I_i` tokens, :math:`I_i` slots in the item generating it,
item work at least :math:`L(a+p_a+p_q) I_i` (:func:`~optsched.bounds.request_work` with
``first_tokens``); dropping the other items keeps every batch's kept terms and shares within its
time. The same argument with :math:`e_i = r_i + F(I_i)` (the least prefill alone,
:func:`optsched.bounds.prefill_alone_time`) bounds :math:`\frac1N(\sum_i FT_i - \sum_i r_i)`.

Both are proven under the profile's linear twin, hence under the profile (F0); a caller may also
evaluate them under another cost at or below the profile (InferMax's linear form).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from .bounds import critical_path_times, generic_bounds, prefill_alone_time, request_work
from .costmodel import CostModel
from .instance import Instance
from .result import Bound, objective_named

__all__ = [
    "SHARE_WEIGHTS",
    "load_bounds",
    "most_items",
    "proven_bounds",
    "share_work",
    "srpt_completions",
    "srpt_mean_bound",
]

#: The overhead-share weights (lambda_count, lambda_tokens, lambda_memory) tried; each gives a valid bound.
SHARE_WEIGHTS = (
    (1.0, 0.0, 0.0),
    (0.0, 1.0, 0.0),
    (0.0, 0.0, 1.0),
    (0.5, 0.5, 0.0),
    (0.5, 0.0, 0.5),
    (0.0, 0.5, 0.5),
    (1 / 3, 1 / 3, 1 / 3),
)

#: Relative safety margin taken off every value (floating-point sums).
SAFETY = 1e-12


def most_items(instance: Instance) -> int:
    """K of the module docstring: the most items one batch can hold, min(N, R_max, C, M)."""
    lim = instance.limits
    caps = [len(instance.requests), lim.token_budget]
    caps += [c for c in (lim.max_running, lim.kv_capacity) if c is not None]
    return max(1, min(caps))


def _overhead(cm: CostModel) -> float:
    """beta: the least overhead of a non-empty batch under the profile's linear twin."""
    tw = cm.linear_twin()
    return tw.layers * (tw.base + min(tw.prefill.bias, tw.decode.bias))


def share_work(
    instance: Instance, weights: tuple[float, float, float], first_tokens: bool = False, items_cap: int | None = None
) -> np.ndarray:
    """p_i of the module docstring for one weight vector: least item work plus overhead shares.

    ``first_tokens``: only the work up to each request's first token. ``items_cap``: K (default
    :func:`most_items`; a test plants a smaller, invalid one).
    """
    lim = instance.limits
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.float64)
    O = np.ones_like(I) if first_tokens else np.array([r.output_tokens for r in instance.requests], dtype=np.float64)
    K = most_items(instance) if items_cap is None else items_cap
    n_items = np.ceil(I / lim.prefill_budget) + O - 1.0
    tokens = I + O - 1.0
    slots = O * I + O * (O - 1.0) / 2.0
    w_count, w_tok, w_mem = weights
    share = w_count * n_items / K + w_tok * tokens / lim.token_budget
    if lim.kv_capacity is not None:
        share = share + w_mem * slots / lim.kv_capacity
    elif w_mem:
        raise ValueError("a memory share needs a KV capacity")
    return request_work(instance, first_tokens=first_tokens) + _overhead(instance.cost_model) * share


def srpt_completions(release: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Completion times, ascending, of preemptive SRPT on one unit-speed machine (jobs released at
    ``release`` needing ``work``): the least k-th completion of any preemptive schedule, every k."""
    order = np.argsort(release, kind="stable")
    rel, rem = release[order].tolist(), work[order].tolist()
    n, t, nxt = len(rel), 0.0, 0
    heap: list[tuple[float, int]] = []
    out: list[float] = []
    while len(out) < n:
        if not heap:
            t = max(t, rel[nxt])
        while nxt < n and rel[nxt] <= t:
            heapq.heappush(heap, (rem[nxt], nxt))
            nxt += 1
        left, j = heapq.heappop(heap)
        until = rel[nxt] if nxt < n else math.inf
        if t + left <= until:
            t += left
            out.append(t)
        else:
            heapq.heappush(heap, (left - (until - t), j))
            t = until
    return np.array(out, dtype=np.float64)


def srpt_mean_bound(release: np.ndarray, work: np.ndarray, alone: np.ndarray) -> float:
    """(1/N) (sum_k max(S_(k), e_(k)) - sum_i r_i) with S the SRPT completions of (release, work) and
    e = release + alone (module docstring), less the safety margin."""
    s = srpt_completions(release, work)
    e = np.sort(release + alone)
    total = math.fsum(np.maximum(s, e)) - math.fsum(release)
    scale = math.fsum(np.abs(e)) + math.fsum(np.abs(release))
    return max(0.0, (total - SAFETY * scale) / len(release))


def _best_over_weights(instance: Instance, first_tokens: bool, alone: np.ndarray) -> tuple[float, tuple[float, ...]]:
    release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    weights = [w for w in SHARE_WEIGHTS if instance.limits.kv_capacity is not None or not w[2]]
    found = [(srpt_mean_bound(release, share_work(instance, w, first_tokens), alone), w) for w in weights]
    return max(found, key=lambda f: f[0])


def load_bounds(instance: Instance, objective: str) -> list[Bound]:
    """The load-aware bounds of ``objective`` (module docstring): ``srpt-work`` for ``latency``,
    ``srpt-prefill`` for ``ttft`` (seconds, mean over requests); none for other objectives."""
    name = objective_named(objective).name
    if name not in ("latency", "ttft") or not instance.requests:
        return []
    K = most_items(instance)
    if name == "latency":
        value, w = _best_over_weights(instance, False, critical_path_times(instance))
        what = "each request's work + overhead shares"
        bound = "srpt-work"
    else:
        alone = np.array([prefill_alone_time(instance, r.prompt_tokens) for r in instance.requests])
        value, w = _best_over_weights(instance, True, alone)
        what = "each request's prefill work + overhead shares"
        bound = "srpt-prefill"
    note = (
        f"one machine, SRPT over {what} (K = {K} items a batch, share weights count/tokens/memory "
        f"{w[0]:.2g}/{w[1]:.2g}/{w[2]:.2g}), sorted against arrival + least time alone (optsched/load_bounds.py)"
    )
    return [Bound(bound, value, True, note)]


def proven_bounds(instance: Instance, objective: str) -> list[Bound]:
    """Every generic proven bound on ``objective``: those of :func:`optsched.bounds.generic_bounds`
    and the load-aware ones of :func:`load_bounds`, each in the objective's unit."""
    return generic_bounds(instance, objective) + load_bounds(instance, objective)

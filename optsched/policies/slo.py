"""SLO-aware batching (``slo-budget``): a batch time budget from the TPOT target, and Moore-Hodgson's
rule on the TTFT deadlines.

A request's TPOT is the mean time between its later tokens, and under decode-first batching every
running decode is in every batch: its TPOT is then the mean time of the batches it decodes in.
Sarathi-Serve (Agrawal et al., OSDI 2024) derives its token budget from the TPOT SLO; optsched's
policies have the cost model at hand, so they budget the time itself:

**Time budget** (``PolicyConfig.time_budget``, by default with ``tpot_budget`` the least TPOT target
``pi`` among the requests, :func:`resolve`). The decodes are taken first and never cut; a prefill
chunk of ``c`` tokens of a request holding ``m`` KV slots is cut to the largest ``k <= c`` with

    batch_time(N_tok + k, N_pre + k, S_pre + k^2, N_dec, KV_dec, X_pre + k m, KV_max) <= budget

(:func:`fit_chunk`; the batch time does not decrease in ``k``, so bisection finds it). A batch
without decodes is not cut: no request is between its first token and its finish during it (under
decode-first batching every such request decodes in every batch), so its time is in no TPOT; this
also lets every batch make progress. When every batch with decodes stays within ``pi`` (its decodes
alone do), every request's TPOT is at most ``pi``; a larger chunk would buy prefill throughput, and
with it TTFT, with TPOT.

**Late requests last** (``ttft_drop``). Under overload FCFS makes every waiting request late, one
after the other. Before each batch R_w is split with Moore-Hodgson's rule, which serves the most
jobs of a single machine by their deadlines (Moore 1968), on estimates (:func:`on_time_first`): the
deadline of request j is ``d_j = a_j + ttft_j`` (infinite without a TTFT target), its work the time
its remaining prompt ``r_j`` adds to batches,

    w_j = f (batch_time(r_j, r_j, r_j^2, 0, 0, r_j m_j, 0) - L base),

scaled by ``f = b / max(b - D, b / 10)``, the batches' time per unit of prefill time when the
decodes of the running requests (but the deferred ones, below) take ``D`` (their decode-only batch
time) of each budget ``b``
(``f = 1`` without a time budget). The running prefills come first (they are served before R_w):
``t = start + sum of their w``. R_w is walked in its order: a request with ``start + w_j > d_j``
is dropped (by the estimate it is late even served alone); otherwise ``t += w_j`` and, when
``t > d_j``, the kept request of the largest work (ties: the later one) is dropped and ``t`` goes
down by its work. R_w becomes the kept
requests followed by the dropped ones, each in R_w's order. The rule needs an FCFS R_w
(``order="arrival"``, no ``all`` group), where R_w's order is the deadlines' when every request has
the same TTFT target.

**TPOT given up** (``tpot_shed`` q). A P99 target tolerates floor(0.01 (N - 1)) requests above the
TPOT limit, and a decode is the costlier the longer its context: the decode work of a request
(:func:`decode_work`, the time of one batch holding all its O - 1 decode items) is largest for long
prompts with long outputs. The floor(q (N - 1)) requests of the largest decode work (ties: none of the
tied ones cross the count; :func:`shed_threshold`) leave the ``running_decode`` group: their decodes
are taken after every other candidate, in R_r's order, each only when the batch is empty or stays
within the budget with it (:func:`fits_decode`). Under load their TPOT is lost and the budget their
decodes took goes to prefill; with room to spare they decode in every batch as before.

The compiled engine runs the same arithmetic in the same order (:mod:`.slo_kernel`), so the two
engines' schedules are identical batch for batch.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from ..costmodel import CostModel
from ..instance import InstanceError, Request
from .config import PolicyConfig

__all__ = [
    "Draft",
    "deadline",
    "decode_time",
    "decode_work",
    "fits_decode",
    "fit_chunk",
    "late_last",
    "on_time_first",
    "prefill_work",
    "resolve",
    "resolved",
    "shed_threshold",
    "sheds",
    "work_factor",
]


class Draft(Protocol):
    """The batch being built, as the cost model reads it (the reference engine's draft)."""

    n_tok: int
    n_pre: int
    s_pre: int
    n_dec: int
    kv_dec: int
    x_pre: int
    kv_max: int
    cut: bool


def resolve(config: PolicyConfig, requests: Sequence[Request], cost: CostModel | None = None) -> PolicyConfig:
    """``config`` with its time budget in seconds: with ``tpot_budget`` and no ``time_budget``, the
    least TPOT target among ``requests``; with ``tpot_shed`` and no ``shed_work``, the threshold of
    :func:`shed_threshold` under the cost model ``cost`` (needed then).

    Raises
    ------
    InstanceError
        When the policy needs a TPOT target (``tpot_budget`` without ``time_budget``) or TTFT targets
        (``ttft_drop``) and no request carries one.
    """
    if config.ttft_drop and not any(r.slo is not None and r.slo.ttft is not None for r in requests):
        raise InstanceError(
            f"policy {config.name!r} orders requests by their TTFT deadlines, and no request has a TTFT"
            " target: give the requests an SLO (--slo-ttft SECONDS) or use a policy without ttft_drop"
        )
    if config.tpot_shed > 0 and config.shed_work is None:
        if cost is None:
            raise ValueError(f"policy {config.name!r}: tpot_shed needs the cost model to rank the decode work")
        config = replace(config, shed_work=shed_threshold(cost, requests, config.tpot_shed))
    if not config.tpot_budget or config.time_budget is not None:
        return config
    targets = [r.slo.tpot for r in requests if r.slo is not None and r.slo.tpot is not None]
    if not targets:
        raise InstanceError(
            f"policy {config.name!r} takes its batch time budget from the requests' TPOT targets, and no"
            " request has one: give the requests an SLO (--slo-tpot SECONDS) or set time_budget"
        )
    return replace(config, time_budget=min(targets))


def resolved(config: PolicyConfig) -> PolicyConfig:
    """``config``, refused (ValueError) while its time budget still waits for the requests' TPOT
    targets (``tpot_budget`` without ``time_budget``) or its deferral threshold for their decode work
    (``tpot_shed`` without ``shed_work``): :func:`resolve` sets them."""
    if config.tpot_budget and config.time_budget is None:
        raise ValueError(
            f"policy {config.name!r} takes its time budget from the requests' TPOT targets: build the engine"
            " with Engine.from_instance, or set time_budget (optsched.policies.slo.resolve)"
        )
    if config.tpot_shed > 0 and config.shed_work is None:
        raise ValueError(
            f"policy {config.name!r} ranks the requests' decode work (tpot_shed): build the engine with"
            " Engine.from_instance, or set shed_work (optsched.policies.slo.resolve)"
        )
    return config


def deadline(request: Request) -> float:
    """The request's TTFT deadline ``a + ttft`` (infinite without a TTFT target)."""
    slo = request.slo
    return request.arrival + slo.ttft if slo is not None and slo.ttft is not None else math.inf


def fit_chunk(cost: CostModel, budget: float, draft: Draft, c: int, m: int) -> int:
    """The largest chunk ``k <= c`` of a request holding ``m`` KV slots whose batch ``draft`` stays
    within ``budget`` seconds (module docstring); ``c`` when the batch holds no decode and is not ``cut``
    (:mod:`.slo_lazy`)."""
    d = draft

    def fits(k: int) -> bool:
        return (
            cost.batch_time(d.n_tok + k, d.n_pre + k, d.s_pre + k * k, d.n_dec, d.kv_dec, d.x_pre + k * m, d.kv_max)
            <= budget
        )

    if c <= 0 or (d.n_dec == 0 and not d.cut) or fits(c):
        return c
    lo, hi = 0, c - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_work(cost: CostModel, request: Request) -> float:
    """Seconds: the time of one batch holding all the request's O - 1 decode items (0 for O = 1)."""
    n, p = request.output_tokens - 1, request.prompt_tokens
    return cost.batch_time(n, 0, 0, n, n * p + n * (n - 1) // 2, 0, 0)


def shed_threshold(cost: CostModel, requests: Sequence[Request], fraction: float) -> float:
    """The least decode work that at most floor(``fraction`` (N - 1)) of ``requests`` reach (infinite
    when that is none): the ``shed_work`` of ``tpot_shed``."""
    k = math.floor(fraction * (len(requests) - 1)) if requests else 0
    works = sorted((decode_work(cost, r) for r in requests), reverse=True)
    if k <= 0:
        return math.inf
    above = [w for w in works[:k] if k == len(works) or w > works[k]]
    return min(above, default=math.inf)


def sheds(cost: CostModel, config: PolicyConfig, request: Request) -> bool:
    """Whether the policy defers the request's decodes (``shed_work``)."""
    return config.shed_work is not None and decode_work(cost, request) >= config.shed_work


def fits_decode(cost: CostModel, budget: float | None, draft: Draft, m: int) -> bool:
    """Whether a deferred decode of a request holding ``m`` KV slots joins ``draft``: the batch is
    empty, or stays within ``budget`` seconds (None: no budget) with it."""
    d = draft
    return (
        d.n_tok == 0
        or budget is None
        or (
            cost.batch_time(d.n_tok + 1, d.n_pre, d.s_pre, d.n_dec + 1, d.kv_dec + m, d.x_pre, max(d.kv_max, m))
            <= budget
        )
    )


def decode_time(cost: CostModel, held: Sequence[int]) -> float:
    """The decode-only batch time of decodes holding ``held`` KV slots (0 without any)."""
    return cost.batch_time(len(held), 0, 0, len(held), sum(held), 0, max(held, default=0))


def work_factor(budget: float | None, decodes: float) -> float:
    """``f``: batch time per unit of prefill time when decodes take ``decodes`` of each budget."""
    if budget is None:
        return 1.0
    return budget / max(budget - decodes, budget / 10)


def prefill_work(cost: CostModel, left: int, m: int, factor: float) -> float:
    """``w``: the batch time ``left`` prompt tokens over ``m`` cached ones add, times ``factor``."""
    return (cost.batch_time(left, left, left * left, 0, 0, left * m, 0) - cost.layers * cost.base) * factor


def on_time_first(works: Sequence[float], deadlines: Sequence[float], start: float, ahead: float) -> list[int]:
    """Positions of R_w in its new order: kept, then dropped, each ascending (module docstring);
    ``ahead`` is the time at which R_w's prefill can begin (``start`` plus the running prefills)."""
    t = ahead
    heap: list[tuple[float, int]] = []  # (-work, -position): the largest work, the later on ties, first
    dropped = [False] * len(works)
    for pos, (w, d) in enumerate(zip(works, deadlines, strict=True)):
        if start + w > d:
            dropped[pos] = True
            continue
        t += w
        heapq.heappush(heap, (-w, -pos))
        if t > d:
            w_max, neg = heapq.heappop(heap)
            t += w_max
            dropped[-neg] = True
    return [p for p in range(len(works)) if not dropped[p]] + [p for p in range(len(works)) if dropped[p]]


def late_last(
    cost: CostModel,
    config: PolicyConfig,
    start: float,
    running: Sequence[int],
    waiting: deque[int] | list[int],
    m: Sequence[int],
    prompt: Sequence[int],
    requests: Sequence[Request],
    shed: Sequence[bool],
) -> None:
    """Reorder the FCFS R_w ``waiting`` (engine indices) in place by :func:`on_time_first`, from the
    running requests ``running`` (in R_r's order) and the per-request KV ``m``, ``prompt`` and
    deferral ``shed`` (deferred decodes are not in ``D``)."""
    decodes = [m[i] for i in running if m[i] >= prompt[i] and not shed[i]]
    f = work_factor(config.time_budget, decode_time(cost, decodes))
    ahead = start
    for i in running:
        if m[i] < prompt[i]:
            ahead += prefill_work(cost, prompt[i] - m[i], m[i], f)
    queue = list(waiting)
    works = [prefill_work(cost, prompt[i] - m[i], m[i], f) for i in queue]
    order = on_time_first(works, [deadline(requests[i]) for i in queue], start, ahead)
    waiting.clear()
    waiting.extend(queue[p] for p in order)

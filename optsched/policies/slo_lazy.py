"""The laxity rule of ``slo-lazy`` (``PolicyConfig.tpot_lazy``): decodes wait while their TPOT has slack.

A request's TPOT is a mean, ``(finish - F) / (O - 1)`` with ``F`` the end of the batch of its first
token (contract), so it meets a target ``pi`` exactly when it finishes by its *TPOT deadline*

    D = F + pi (O - 1).

Decode-first batching (``slo-budget``, :mod:`.slo`) puts every running decode in every batch, which
under overload leaves the prefill chunks only what the decodes leave of each batch's time budget
``b``. The laxity rule uses the freedom of the mean: a request that decoded in short batches has
time in hand and may skip batches while it lasts.

**Rule.** Before the batch that starts at ``t``, a running request in its decode phase with ``g``
tokens generated, ``r = O - g`` later tokens left and a TPOT target is *mandatory* when

    D < t + (r + 1) b,

and *optional* otherwise (a request without a TPOT target, or whose decodes ``tpot_shed`` defers,
is never mandatory: it has nothing the rule protects). The optional decodes wait only while the
batch has an *urgent* prefill: a request of R_w, or of R_r without its first token, whose TTFT
deadline ``d_j = a_j + ttft_j`` lies ahead within ``h ttft_j`` (``lazy_horizon`` h,
:func:`urgent_from`: ``d_j - h ttft_j <= t < d_j``). Otherwise every decode is taken first, as in
``slo-budget``: slack spent on a prefill that is not yet at risk moves decode work into later
batches, which under a rising load are busier. With an urgent prefill, the mandatory decodes are
taken first (the ``running_decode`` group), then the prefill chunks (R_r's, then R_w's in
Moore-Hodgson's order, ``ttft_drop``), then the optional decodes in R_r's order, each while the
batch is empty or stays within ``b`` with it (:func:`optsched.policies.slo.fits_decode`, as the
deferred decodes of ``tpot_shed``). While any request with a TPOT target decodes (mandatory or not),
every prefill chunk is cut to ``b``, also in a batch that holds no decode yet (``cut``). Calm
periods, where batches are shorter than ``b``, bank slack that busy ones spend.

**Guarantee.** Let ``b <= pi`` (``tpot_budget`` takes ``b`` as the least target), and let every
batch that starts while the request decodes last at most ``b`` (the rule cuts every prefill chunk to
``b`` then, and the optional decodes join only within ``b``; what can break it is what breaks
``slo-budget``'s: mandatory decodes alone beyond ``b``, or a request evicted or left out of its
batch for KV or the token budget C). Then the request finishes by ``D``. Proof: batches run back to
back while the request runs, and the invariant is ``D >= t + r b`` at the start ``t`` of each batch.
It holds at the first: ``t = F``, ``r = O - 1`` and ``D - F = pi (O - 1) >= b (O - 1)``. If the
request decodes in the batch (it does whenever it is mandatory), the batch ends by ``t + b`` and
leaves ``r - 1`` tokens: ``D >= t + r b >= (t + b) + (r - 1) b``. If it skips the batch it was
optional, ``D >= t + (r + 1) b``, and the batch ends by ``t + b`` with ``r`` tokens left:
``D >= (t + b) + r b``. At the end of the batch of its last token ``r = 0``, so it finishes by
``D``. A request of one output token has no decode phase; ``O - 1 = 0`` later tokens have no TPOT.

The same arithmetic runs in the compiled engine (:func:`optsched.policies.slo_kernel.mark_optional`),
so the two engines' schedules are identical batch for batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..instance import Request
from .config import PolicyConfig
from .slo import deadline

__all__ = ["mandatory", "mark_optional", "urgent_from"]


def mandatory(first: float, tpot: float, output: int, generated: int, start: float, budget: float) -> bool:
    """Whether the decode of a request (first token at ``first``, TPOT target ``tpot`` seconds, ``output``
    tokens of which ``generated`` are out) must join the batch starting at ``start`` (module docstring)."""
    return first + tpot * (output - 1) < start + (output - generated + 1) * budget


def urgent_from(request: Request, horizon: float) -> float:
    """Seconds: the time from which the request's prefill is urgent, ``d - h ttft`` (infinite without a
    TTFT target)."""
    slo = request.slo
    return deadline(request) - horizon * slo.ttft if slo is not None and slo.ttft is not None else math.inf


def mark_optional(
    config: PolicyConfig,
    start: float,
    running: Sequence[int],
    waiting: Iterable[int],
    skip: list[bool],
    m: Sequence[int],
    prompt: Sequence[int],
    generated: Sequence[int],
    first: Sequence[float | None],
    requests: Sequence[Request],
    shed: Sequence[bool],
) -> bool:
    """Set ``skip[i]`` for every running request ``i`` (engine indices; ``waiting``: R_w's): whether its
    decode waits for the end of the batch starting at ``start`` (deferred by ``shed``, or optional by
    the rule while a prefill is urgent); returns whether the batch's prefill chunks are cut to the time
    budget (a request with a TPOT target decodes)."""
    budget, h = config.time_budget, config.lazy_horizon
    assert budget is not None  # tpot_lazy needs one (PolicyConfig)
    prefills = [j for j in running if m[j] < prompt[j] and generated[j] == 0]
    urgent = any(urgent_from(requests[j], h) <= start < deadline(requests[j]) for j in (*waiting, *prefills))
    cut = False
    for i in running:
        slo = requests[i].slo
        if shed[i] or m[i] < prompt[i] or slo is None or slo.tpot is None:
            skip[i] = shed[i]
            continue
        cut = True
        when = first[i]
        assert when is not None  # in its decode phase: its first token is out
        skip[i] = urgent and not mandatory(when, slo.tpot, requests[i].output_tokens, generated[i], start, budget)
    return cut

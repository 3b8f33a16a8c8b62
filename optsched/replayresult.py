"""The outcome of a replay (:func:`optsched.schedule.replay`): :class:`ReplayResult`.

Apart from :mod:`optsched.schedule` so that the compiled replay (:mod:`optsched.fastreplay`), which
that module calls, builds its results without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .metrics import Metrics, RequestOutcome

__all__ = ["ReplayResult"]


@dataclass
class ReplayResult:
    """Outcome of :func:`~optsched.schedule.replay`.

    Attributes
    ----------
    feasible
        True when there is no violation and every request finished.
    violations
        Human-readable violations, each naming the batch and the request.
    outcomes
        Per request id, its :class:`RequestOutcome`.
    starts, ends
        Start and end time of every batch.
    kv_used, running
        KV slots held and requests holding KV after each batch's processing (before release).
    prefill_tokens, decode_items
        Per batch, the prefill tokens and decode items processed.
    metrics
        The schedule's :class:`Metrics` (None when infeasible).
    features
        Per batch, the cost model's arguments ``(n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max)``
        (docs/costmodel.md), e.g. to refit a profile from measured batch times.
    generated, kv_held
        Per request (instance order), tokens generated and KV slots held after the last batch (the
        state an unfinished schedule leaves, e.g. to complete it).
    """

    feasible: bool
    violations: list[str]
    outcomes: dict[str, RequestOutcome]
    starts: list[float]
    ends: list[float]
    kv_used: list[int]
    running: list[int]
    prefill_tokens: list[int]
    decode_items: list[int]
    metrics: Metrics | None
    features: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    kv_held: list[int] = field(default_factory=list)

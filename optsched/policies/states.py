"""The engine's state between batches, as :meth:`.engine.Engine.snapshot` and
:meth:`.engine.Engine.request_state` give it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineSnapshot", "RequestState"]


@dataclass(frozen=True)
class RequestState:
    """One request's state in an :class:`EngineSnapshot`.

    Attributes
    ----------
    id, arrival, output_tokens
        From the request.
    prompt
        Current prompt length I (grows after a decode-phase eviction).
    m
        KV slots held.
    generated
        Tokens generated so far.
    reserved
        KV slots the scheduler reserves for it (>= m; 0 when not running).
    first_token, finish
        End of the batch that generated its first (resp. last) token; None before.
    """

    id: str
    arrival: float
    output_tokens: int
    prompt: int
    m: int
    generated: int
    reserved: int
    first_token: float | None = None
    finish: float | None = None


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's state between batches (see :meth:`Engine.snapshot`)."""

    now: float
    kv_used: int
    kv_reserved: int
    running: tuple[RequestState, ...]
    waiting: tuple[RequestState, ...]
    pending: tuple[RequestState, ...]

"""The batches (edges) of the exact search of :mod:`.meansearch` from one joint state.

Each request's legal parts of a batch (the search problem's ``actions``) become :class:`Part` records
holding the counts that the batch's limits and its cost read; a batch is one part per request within
C, P, M and :math:`R_{max}` (and, without hybrid batches, not prefill and decode together), less the
batches that the rules E1 and E2 of :mod:`.meansearch` leave out. Requests whose only part is to idle
holding nothing (the finished ones) are left out of the product. Each batch is handed, as it is
found, to the caller's visit function as an :data:`Edge` (cost, next state, earliest start,
events): a state's batches multiply with the chunk sizes its requests may take, so they are never
held all at once, and the clock is read between visits. A batch's parts, needed only to write a
path out as the contract's batches, are found again by listing the batches of the path's states
(:meth:`EdgeLister.parts_of`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["CLOCK_BATCHES", "Edge", "EdgeLister", "Part", "Stopped"]

#: Batches visited between two looks at the clock.
CLOCK_BATCHES = 128

Sub = tuple[int, int, int]


class Part(NamedTuple):
    """One request's part of a batch with its counts: tokens, prefill tokens, their squares, decode
    items, decode KV, prefill context, decode context, KV held after processing, running; whether it
    is an idle eviction; the request's arrival when it takes part; whether its event comes; the action."""

    new: Sub
    tokens: int
    pre: int
    sq: int
    dec: int
    kvdec: int
    xpre: int
    ctx: int
    kv: int
    run: int
    idle_evict: bool
    arrival: float
    event: int
    action: Any


#: A batch from a state: its cost (s), the next state, its earliest start and its events.
Edge = tuple[float, tuple[Sub, ...], float, int]


class Stopped(Exception):
    """The search's time or memory ran out while a state's batches were visited."""


def _part(action: Any) -> Part:
    c, m, kv, new = action.tokens, action.cached, action.kv, action.new
    rest = (kv, int(kv > 0), action.evict and not c, action.arrival, int(action.event), action)
    if action.decode:
        return Part(new, c, 0, 0, 1, m, 0, m, *rest)
    return Part(new, c, c, c * c, 0, 0, c * m, 0, *rest)


class EdgeLister:
    """The batches from a joint state of the search problem ``pb`` (its ``actions``, limits and cost)."""

    def __init__(self, pb: Any) -> None:
        self.pb = pb
        self.cache: dict[tuple[int, Sub], tuple[Part, ...]] = {}

    def parts(self, i: int, sub: Sub) -> tuple[Part, ...]:
        """Request i's parts from ``sub``."""
        key = (i, sub)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = tuple(_part(a) for a in self.pb.actions(i, sub))
        return found

    def visit_edges(self, state: tuple[Sub, ...], stop: Callable[[], bool], visit: Callable[[Edge], None]) -> None:
        """Call ``visit`` on every batch from ``state`` that the search keeps, one at a time. Raises
        :class:`Stopped` once ``stop()`` is true (asked every :data:`CLOCK_BATCHES` batches visited,
        so the visits' own time and memory count)."""
        self._list(state, (stop, visit), None)

    def parts_of(self, state: tuple[Sub, ...], nxt: tuple[Sub, ...], t: float, end: float) -> tuple[list[Any], float]:
        """The actions (one per request) and the earliest start of a batch from ``state`` at ``t`` to
        ``nxt`` that ends at ``end``."""
        found = self._list(state, None, (nxt, t, end))
        if found is None:
            raise ValueError("meanedges: no batch leads from the state to the next one at that time")
        return found

    def _list(
        self,
        state: tuple[Sub, ...],
        visitor: tuple[Callable[[], bool], Callable[[Edge], None]] | None,
        match: tuple[tuple[Sub, ...], float, float] | None,
    ) -> tuple[list[Any], float] | None:
        """Visit the batches with ``visitor`` = (stop, visit) (:meth:`visit_edges`), or with
        ``match`` = (next state, t, end) return the actions and start of the first batch that leads
        there."""
        pb = self.pb
        active: list[int] = []
        options: list[tuple[Part, ...]] = []
        kv0 = run0 = 0
        for i, sub in enumerate(state):
            parts = self.parts(i, sub)
            if len(parts) == 1 and not parts[0].tokens and not parts[0].idle_evict:
                kv0, run0 = kv0 + parts[0].kv, run0 + parts[0].run
            else:
                active.append(i)
                options.append(parts)
        n = len(active)
        chosen: list[Part] = [options[0][0]] * n if n else []
        visited = [0]
        hit: list[tuple[list[Any], float]] = []
        C, P, hybrid, batch_time = pb.C, pb.P, pb.hybrid, pb.cost.batch_time
        M = pb.M if pb.M is not None else math.inf
        R = pb.R if pb.R is not None else math.inf

        def leaf(tok: int, pre: int, sq: int, dec: int, kvdec: int, xpre: int, ctx: int, kv: int, run: int,
                 ready: float, events: int, idle: int) -> None:  # fmt: skip
            if idle:  # E2: each idle eviction is needed by M or R_max
                for p, i in zip(chosen, active):
                    if p.idle_evict and kv + state[i][0] <= M and run + 1 <= R:
                        return
            cost = batch_time(tok, pre, sq, dec, kvdec, xpre, ctx)
            nxt = list(state)
            for p, i in zip(chosen, active):
                nxt[i] = p[0]
            edge = (cost, tuple(nxt), ready, events)
            if match is not None:
                if edge[1] == match[0] and max(match[1], ready) + cost == match[2]:
                    acts = [self.parts(i, sub)[0].action for i, sub in enumerate(state)]
                    for p, i in zip(chosen, active):
                        acts[i] = p.action
                    hit.append((acts, ready))
                return
            if visitor is not None:
                visitor[1](edge)
                visited[0] += 1
                if visited[0] % CLOCK_BATCHES == 0 and visitor[0]():
                    raise Stopped

        def walk(k: int, tok: int, pre: int, sq: int, dec: int, kvdec: int, xpre: int, ctx: int, kv: int,
                 run: int, ready: float, events: int, idle: int) -> None:  # fmt: skip
            if k == n:
                if tok and not hit:  # E1: a batch holds an item
                    leaf(tok, pre, sq, dec, kvdec, xpre, ctx, kv, run, ready, events, idle)
                return
            for p in options[k]:
                _, ptok, ppre, psq, pdec, pkvdec, pxpre, pctx, pkv, prun, pidle, parr, pev, _ = p
                if tok + ptok > C or pre + ppre > P or kv + pkv > M or run + prun > R:
                    continue
                if not hybrid and ((ppre and dec) or (pdec and pre)):
                    continue
                chosen[k] = p
                walk(
                    k + 1,
                    tok + ptok,
                    pre + ppre,
                    sq + psq,
                    dec + pdec,
                    kvdec + pkvdec,
                    xpre + pxpre,
                    ctx if ctx >= pctx else pctx,
                    kv + pkv,
                    run + prun,
                    ready if ready >= parr else parr,
                    events + pev,
                    idle + pidle,
                )

        try:
            walk(0, 0, 0, 0, 0, 0, 0, 0, kv0, run0, 0.0, 0, 0)
        finally:  # walk refers to itself, a cycle through leaf to the visitor: the search must not be in it
            visitor = None
        return hit[0] if hit else None

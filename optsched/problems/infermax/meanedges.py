"""The batches (edges) of the exact search of :mod:`.meansearch` from one joint state.

Each request's legal parts of a batch (the search problem's ``actions``) become :class:`Part` records
holding the counts that the batch's limits and its cost read; a batch is one part per request within
C, P, M and :math:`R_{max}` (and, without hybrid batches, not prefill and decode together), less the
batches that the rules E1 and E2 of :mod:`.meanproblem` leave out. Requests whose only part is to idle
holding nothing (the finished ones) are left out of the product. Each batch is handed, as it is
found, to the caller's visit function as an :data:`Edge` (cost, next state, earliest start,
events): a state's batches multiply with the chunk sizes its requests may take, so they are never
held all at once, and the clock is read between visits. A batch's parts, needed only to write a
path out as the contract's batches, are found again by listing the batches of the path's states
from the parts that lead to the next state's subs alone (:meth:`EdgeLister.batches_of`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Any, NamedTuple

from ...schedule import Batch, Item

__all__ = ["CLOCK_BATCHES", "Edge", "EdgeLister", "Floor", "Part", "Sampling", "Stopped"]

#: Batches visited or partial batches pruned between two looks at the clock.
CLOCK_BATCHES = 128

#: Listings in which the partial-batch floors are always checked (:meth:`EdgeLister.visit_edges`).
FLOOR_TRIAL = 64
#: The least share of the batches met that the partial-batch floors must prune to be checked in
#: every listing after the first :data:`FLOOR_TRIAL`.
FLOOR_PAYS = 0.01
#: Otherwise they are checked in every this-many-th listing, so that the share stays measured.
FLOOR_SAMPLE = 16

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


class Floor(NamedTuple):
    """What prunes a partial batch from a state reached at ``t``. ``pending[i]``: request i has an
    event to come; ``part_floor(i, part)``: 0 when ``part`` brings that event, else a floor on the
    time from the batch's end to it (its job's own cost after the part). Each pending request's
    event comes at least max(end, arrival[i]) + its part's floor after the batch (a request taking
    part has arrived by its start); a partial batch whose sum of these at its least end so far
    reaches ``limit`` is not completed (every part added makes the end no earlier)."""

    t: float
    limit: float
    pending: list[bool]
    arrival: list[float]
    part_floor: Callable[[int, Part], float]


class Stopped(Exception):
    """The search's time or memory ran out while a state's batches were visited."""


def _part(action: Any) -> Part:
    c, m, kv, new = action.tokens, action.cached, action.kv, action.new
    rest = (kv, int(kv > 0), action.evict and not c, action.arrival, int(action.event), action)
    if action.decode:
        return Part(new, c, 0, 0, 1, m, 0, m, *rest)
    return Part(new, c, c, c * c, 0, 0, c * m, 0, *rest)


class Sampling:
    """Whether a check that costs time and never changes an answer (a floor that prunes, a part of
    the estimate that raises it) is made: in each of its first ``trial`` uses, and after that in
    every use while it has paid for at least ``pays`` of what it met, else in one use in ``sample``
    (so that its share stays measured). The caller adds to ``met`` and ``paid`` after the uses in
    which the check is made."""

    def __init__(self, trial: int, pays: float, sample: int) -> None:
        self.trial, self.pays, self.sample = trial, pays, sample
        self.uses = self.met = self.paid = 0

    def due(self) -> bool:
        """Whether the check is made in this use (counted)."""
        uses = self.uses
        self.uses += 1
        return uses < self.trial or self.paid >= self.pays * self.met or uses % self.sample == 0


class EdgeLister:
    """The batches from a joint state of the search problem ``pb`` (its ``actions``, limits and cost)."""

    def __init__(self, pb: Any) -> None:
        self.pb = pb
        self.cache: dict[tuple[int, Sub], tuple[Part, ...]] = {}
        #: The partial-batch floors' checks: listings, batches met in those checked and batches pruned.
        self.floors = Sampling(FLOOR_TRIAL, FLOOR_PAYS, FLOOR_SAMPLE)

    def parts(self, i: int, sub: Sub) -> tuple[Part, ...]:
        """Request i's parts from ``sub``."""
        key = (i, sub)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = tuple(_part(a) for a in self.pb.actions(i, sub))
        return found

    def visit_edges(
        self,
        state: tuple[Sub, ...],
        stop: Callable[[], bool],
        visit: Callable[[Edge], None],
        floor: Floor | None = None,
    ) -> None:
        """Call ``visit`` on every batch from ``state`` that the search keeps, one at a time, less
        those that ``floor`` prunes with their parts so far (:class:`Floor`: the batch's least end
        grows with every part, as the cost model's terms are non-negative). Raises :class:`Stopped`
        once ``stop()`` is true (asked every :data:`CLOCK_BATCHES` batches visited or partial batches
        pruned, so the visits' own time and memory count). After :data:`FLOOR_TRIAL` listings,
        the partial batches are checked against ``floor`` only in every :data:`FLOOR_SAMPLE`-th
        listing while those checks have pruned less than :data:`FLOOR_PAYS` of the batches met
        (a check costs about a batch's time; skipping one prunes less, never wrongly)."""
        if not self.floors.due():
            floor = None
        self._list(state, (stop, visit), None, floor)

    def batches_of(
        self, state: tuple[Sub, ...], nxt: tuple[Sub, ...], t: float, end: float, ids: list[str]
    ) -> tuple[list[Batch], tuple[Sub, ...]]:
        """A batch from ``state`` at ``t`` to ``nxt`` that ends at ``end``, as the contract's batches
        (``ids[k]``: the request at position k of ``state``; an eviction-only batch before it when a
        request it evicts refills in it), with the state it leads to before the canonical order of
        requests alike (the search problem's ``canonical``)."""
        found = self._list(state, None, (nxt, t, end))
        if found is None:
            raise ValueError("meanedges: no batch leads from the state to the next one at that time")
        acts, ready, raw = found
        items = tuple(Item(ids[i], a.tokens) for i, a in enumerate(acts) if a.tokens)
        evicted = tuple(ids[i] for i, a in enumerate(acts) if a.evict)
        start = ready if ready > t else None
        if any(a.evict and a.tokens for a in acts):
            return [Batch((), evicted), Batch(items, (), start)], raw
        return [Batch(items, evicted, start)], raw

    def _options(
        self, state: tuple[Sub, ...], nxt: tuple[Sub, ...] | None
    ) -> tuple[list[int], list[tuple[Part, ...]], int, int]:
        """The requests of ``state`` with a choice in a batch and their parts (with ``nxt``, only
        those leading to a sub of ``nxt`` in the request's class of requests alike), and the KV and
        running count of the others (idle, holding what they hold)."""
        active: list[int] = []
        options: list[tuple[Part, ...]] = []
        kv0 = run0 = 0
        for i, sub in enumerate(state):
            parts = self.parts(i, sub)
            if len(parts) == 1 and not parts[0].tokens and not parts[0].idle_evict:
                kv0, run0 = kv0 + parts[0].kv, run0 + parts[0].run
                continue
            if nxt is not None:
                allowed = {nxt[j] for j in self.pb.class_of[i]}
                parts = tuple(p for p in parts if p.new in allowed)
            active.append(i)
            options.append(parts)
        return active, options, kv0, run0

    def _list(
        self,
        state: tuple[Sub, ...],
        visitor: tuple[Callable[[], bool], Callable[[Edge], None]] | None,
        match: tuple[tuple[Sub, ...], float, float] | None,
        floor: Floor | None = None,
    ) -> tuple[list[Any], float, tuple[Sub, ...]] | None:
        """Visit the batches with ``visitor`` = (stop, visit) (:meth:`visit_edges`), or with
        ``match`` = (next state, t, end) return the actions, start and next state (before the
        canonical order) of the first batch that leads there."""
        pb = self.pb
        active, options, kv0, run0 = self._options(state, None if match is None else match[0])
        if any(not parts for parts in options):
            return None
        n, last = len(active), len(active) - 1
        chosen: list[Part] = [options[0][0]] * n if n else []
        paired, low0, due, t0, limit = _floors(active, options, floor)
        tails = [sum(due[j:]) for j in range(len(due) + 1)]  # due is sorted
        steps, hit = [0, 0], []  # batches visited and partial batches pruned (the clock), and the latter; a match
        C, P, hybrid, batch_time, canonical = pb.C, pb.P, pb.hybrid, pb.cost.batch_time, pb.canonical
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
            edge = (cost, canonical(tuple(nxt)), ready, events)
            if match is not None:
                if edge[1] == match[0] and max(match[1], ready) + cost == match[2]:
                    acts = [self.parts(i, sub)[0].action for i, sub in enumerate(state)]
                    for p, i in zip(chosen, active):
                        acts[i] = p.action
                    hit.append((acts, ready, tuple(nxt)))
                return
            if visitor is not None:
                visitor[1](edge)
                steps[0] += 1
                if steps[0] % CLOCK_BATCHES == 0 and visitor[0]():
                    raise Stopped

        def walk(k: int, tok: int, pre: int, sq: int, dec: int, kvdec: int, xpre: int, ctx: int, kv: int,
                 run: int, ready: float, events: int, idle: int, low: float) -> None:  # fmt: skip
            if k == n:  # no request with a choice: no batch
                return
            for p, extra in paired[k]:
                _, ptok, ppre, psq, pdec, pkvdec, pxpre, pctx, pkv, prun, pidle, parr, pev, _ = p
                if tok + ptok > C or pre + ppre > P or kv + pkv > M or run + prun > R:
                    continue
                if not hybrid and ((ppre and dec) or (pdec and pre)):
                    continue
                plow = low + extra
                ctx2, ready2 = (ctx if ctx >= pctx else pctx), (ready if ready >= parr else parr)
                if due and k < last:  # the floor (Floor) at the batch's least end so far (leaves: push)
                    end = max(t0, ready2) + batch_time(
                        tok + ptok, pre + ppre, sq + psq, dec + pdec, kvdec + pkvdec, xpre + pxpre, ctx2
                    )
                    arrived = bisect_right(due, end)  # the pending requests wait to end or to their arrival
                    if plow + arrived * end + tails[arrived] >= limit:
                        steps[0], steps[1] = steps[0] + 1, steps[1] + 1
                        if steps[0] % CLOCK_BATCHES == 0 and visitor is not None and visitor[0]():
                            raise Stopped
                        continue
                chosen[k] = p
                if k == last:  # the batch is whole: its leaf at once
                    if tok + ptok and not hit:  # E1: a batch holds an item
                        leaf(tok + ptok, pre + ppre, sq + psq, dec + pdec, kvdec + pkvdec, xpre + pxpre, ctx2,
                             kv + pkv, run + prun, ready2, events + pev, idle + pidle)  # fmt: skip
                    continue
                walk(
                    k + 1,
                    tok + ptok,
                    pre + ppre,
                    sq + psq,
                    dec + pdec,
                    kvdec + pkvdec,
                    xpre + pxpre,
                    ctx2,
                    kv + pkv,
                    run + prun,
                    ready2,
                    events + pev,
                    idle + pidle,
                    plow,
                )

        try:
            walk(0, 0, 0, 0, 0, 0, 0, 0, kv0, run0, 0.0, 0, 0, low0)
        finally:  # walk refers to itself, a cycle through leaf to the visitor: the search must not be in it
            visitor = None
            if floor is not None:
                self.floors.met += steps[0]
                self.floors.paid += steps[1]
        return hit[0] if hit else None


def _floors(
    active: list[int], options: list[tuple[Part, ...]], floor: Floor | None
) -> tuple[list[list[tuple[Part, float]]], float, list[float], float, float]:
    """For :meth:`EdgeLister._list`: each active request's parts, each with its floor less the least
    of its parts' (0 for a request without an event to come), the sum of those least floors, the
    arrivals of the requests with an event to come (sorted), the state's time and the limit (none
    of them without ``floor``)."""
    floors = [[0.0] * len(parts) for parts in options]
    due = []
    if floor is not None:
        for k, (i, parts) in enumerate(zip(active, options)):
            if floor.pending[i]:
                floors[k] = [floor.part_floor(i, p) for p in parts]
                due.append(floor.arrival[i])
    least = [min(f, default=0.0) for f in floors]
    paired = [list(zip(parts, [f - low for f in fl])) for parts, fl, low in zip(options, floors, least)]
    if floor is None:
        return paired, 0.0, due, 0.0, math.inf
    return paired, sum(least), sorted(due), floor.t, floor.limit

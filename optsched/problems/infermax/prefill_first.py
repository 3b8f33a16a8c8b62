"""Prefill-first schedules for mean TTFT: every prompt as soon as it may run, the decodes in the gaps.

Mean TTFT counts first tokens only: request i's first token is the end of the batch that completes
its prompt, so a decode batch delays first tokens exactly when it runs while a prompt waits or
when it is still running at the next arrival. A *prefill-first* schedule (:func:`prefill_first_schedule`)
is built batch by batch, one simulated clock t:

1. The requests that arrived by t join the waiting queue.
2. **Prefill batch.** The prompts being prefilled and the waiting ones, in the order ``order``
   (``remaining-prefill``: fewest prompt tokens left first, a shortest-remaining-processing-time
   rule on the work that decides the first token; ``arrival``: FCFS), each take a chunk of their
   remaining prompt (whole prompts only without chunking) while the batch has fewer than ``cap``
   prefill tokens (``cap`` <= min(C, P)). A waiting request is admitted only when fewer than R_max
   requests hold KV and its reservation fits in M beside the reservations of the admitted ones,
   and is otherwise passed over, not the ones after it. Without ``evict`` the reservation is
   I + O - 1 (as the eviction-free policies do: the schedule never evicts, and the KV use, at most
   the sum of reservations, stays within M). With ``evict`` it is the prompt I alone, counted
   only until the first token: KV for a chunk (and the R_max place of an admission) is made by
   evicting requests past their first token, most output left first (their prompt becomes
   m + 1, docs/schedule.md rule 2), so a first prompt never waits for another request's decodes;
   their recompute is background work of step 3, which costs no first token.
   With ``ratio`` the batch is cut after the prefix of its items that completes the most prompts
   per second of batch time (Smith's ratio rule for batches: of the requests waiting, those served
   by a shorter batch stop waiting sooner); with ``fill`` too, a chunk of the first item the cut
   left out fills the last token tile the batch has started. With ``preempt`` (and ``remaining-prefill``), when the
   batch would run past the next arrival and that prompt is shorter than what the batch's last
   request would have left, the last chunk is cut so that the batch ends by the arrival (whole
   tiles of the cost model; below :data:`MIN_CAP` tokens the clock waits for the arrival), as
   preemptive shortest remaining processing time would.
3. **Background batch**, when no prompt can take a chunk: the requests in decode, fewest output
   tokens left first (with ``evict``, at most the free slots, all but the nearest to finish evicted
   when none is free); else the recompute of one evicted request (the one started, else the
   shortest), in a chunk of the free slots. With ``defer`` and while arrivals are still to come
   and nothing waits, only the longest prefix of decodes (the chunk) that ends by the next arrival
   runs (none: the clock jumps to the arrival and the next batch starts there); otherwise
   (``defer`` off, a prompt waiting, or no arrival left) all of them, up to C.

**Keys** (:class:`PrefillKeys`, all zero by default) change the rules request by request: a bias
b_i in tokens is added to request i's remaining prompt wherever ``remaining-prefill`` ranks it and
wherever preemption compares an arriving prompt k with the last chunk's request i (k goes first
when I_k + b_k < rest_i + b_i - min(chunk, :data:`MIN_CAP`)); a hold flag makes i's arrival never
preempt (preemption then looks at the first later arrival not held); a reach flag lets i's chunk
pass the cap: it takes up to min(C, P) tokens less the batch's chunks before it (whole prompts
without chunking), and the candidates after it in the order only what is left of the cap. The
local search of :mod:`.prefill_search` searches over them.

With deferral and nothing waiting, every background batch (decodes, a recompute chunk, the one that
carries evictions) ends by the next arrival, so a background batch delays a first token only when a
prompt waits for room; with evictions none does (room is made by evicting), nor does any when M and
R_max never bind. :func:`prefill_first_ttft` then skips the background batches before the last first
token: the same first-token times, from fewer batches.

Every batch is decode-only or prefill-only, so the schedule is also valid without hybrid batches.
Its batch times are the instance's cost model's, as replay computes them; the caller replays it.
:func:`best_prefill_first` tries the variants of :func:`variants` within a budget, then climbs
from the best over one-knob changes (the cap by a quarter, the ratio rule and its tile fill,
preemption, evictions, the deferral, the order), and keeps the best by replayed objective (the
InferMax solve's scale phase offers it as the candidate ``prefill-first`` for mean TTFT).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from ...budget import TimeBudget
from ...instance import Instance
from ...result import objective_of
from ...schedule import Batch, Item, Schedule, replay
from .prefill_batches import (
    MIN_CAP,
    PrefillState,
    best_ratio,
    cut_at_arrival,
    decode_items,
    prefill_seconds,
    tile_filled,
)

__all__ = [
    "PrefillFirst",
    "PrefillKeys",
    "best_prefill_first",
    "cap_steps",
    "knob_steps",
    "prefill_first_schedule",
    "prefill_first_tokens",
    "prefill_first_ttft",
    "variants",
]

#: Orders of the prefill candidates.
PREFILL_ORDERS = ("remaining-prefill", "arrival")


@dataclass(frozen=True)
class PrefillFirst:
    """One prefill-first schedule's knobs (module docstring).

    Attributes
    ----------
    cap
        Most prefill tokens in one batch (at most min(C, P)).
    defer
        Decode only in the gaps that end by the next arrival, unless a prompt is blocked.
    order
        Order of the prefill candidates: ``remaining-prefill`` or ``arrival``.
    chunked
        Whether a prompt may be prefilled in chunks (else whole).
    ratio
        Cut the batch at the prefix of most first tokens per second (module docstring).
    preempt
        With ``remaining-prefill``: cut the last chunk at the next arrival when that prompt is shorter
        than what the chunk's request would have left (module docstring).
    evict
        Admit on the first prompt alone and evict requests past their first token for room (module
        docstring), instead of reserving I + O - 1 slots at admission.
    fill
        With ``ratio``: fill the cut batch's last started token tile with a chunk of the first item
        the cut left out (module docstring).
    """

    cap: int
    defer: bool = True
    order: str = "remaining-prefill"
    chunked: bool = True
    ratio: bool = False
    preempt: bool = False
    evict: bool = False
    fill: bool = False

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError("prefill-first: cap must be >= 1")
        if self.order not in PREFILL_ORDERS:
            raise ValueError(f"prefill-first: order must be one of {PREFILL_ORDERS}")


@dataclass(frozen=True)
class PrefillKeys:
    """Per-request changes to the rules of a prefill-first schedule, each array indexed by the requests
    in arrival order (a stable sort of ``instance.requests`` by arrival).

    Attributes
    ----------
    bias
        Tokens added to a request's remaining prompt wherever ``remaining-prefill`` ranks it and
        wherever preemption compares it with an arrival (negative: served sooner).
    hold
        Whether the request's arrival never preempts a batch (``preempt`` passes it by, to the first
        later arrival not held).
    reach
        Whether the request's chunk may pass ``cap``, up to min(C, P) tokens in its batch.
    """

    bias: np.ndarray
    hold: np.ndarray
    reach: np.ndarray

    @classmethod
    def none(cls, n: int) -> PrefillKeys:
        """The keys that change nothing, for ``n`` requests."""
        return cls(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))


def variants(instance: Instance, chunked: bool = True) -> list[PrefillFirst]:
    """The knobs :func:`best_prefill_first` tries, most promising first: deferred decodes, shortest
    remaining prompt first, with caps min(C, P), half, a quarter, ... down to :data:`MIN_CAP`; then
    the same without deferral, then FCFS."""
    top = min(instance.limits.token_budget, instance.limits.prefill_budget)
    caps = [top]
    while chunked and caps[-1] // 2 >= MIN_CAP and len(caps) < 4:
        caps.append(caps[-1] // 2)
    ratio = [PrefillFirst(top, defer, order, chunked, True) for order in PREFILL_ORDERS for defer in (True, False)]
    capped = [PrefillFirst(c, d, o, chunked) for o in PREFILL_ORDERS for d in (True, False) for c in caps]
    preempt = [PrefillFirst(top, True, "remaining-prefill", chunked, r, True) for r in (False, True) if chunked]
    evict = [replace(k, evict=True) for k in (ratio[0], *preempt)]
    fill = [replace(k, fill=True) for k in (ratio[0], *preempt) if k.ratio]
    return ratio[:1] + capped + ratio[1:] + preempt + evict + fill


class _Builder:
    """The state of one prefill-first schedule being built (:func:`prefill_first_schedule`).

    Lists of request indices: ``waiting`` (arrived, never admitted), ``fore`` (admitted, first
    prompt not complete), ``decoding`` (prompt complete, holding KV), ``back`` (evicted after their
    first token: the recompute is background work, done one request at a time).
    """

    def __init__(self, instance: Instance, knobs: PrefillFirst, keys: PrefillKeys | None) -> None:
        lim = instance.limits
        self.knobs, self.cm, self.C = knobs, instance.cost_model, lim.token_budget
        self.reqs = sorted(instance.requests, key=lambda r: r.arrival)
        n = len(self.reqs)
        self.keys = PrefillKeys.none(n) if keys is None else keys
        self.st = PrefillState(
            np.array([r.prompt_tokens for r in self.reqs], dtype=np.int64),
            np.array([r.output_tokens for r in self.reqs], dtype=np.int64),
            np.array([r.arrival for r in self.reqs], dtype=float),
            np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
        )
        # the admission's reservation: the whole first prompt with evictions, else I + O - 1
        self.need = self.st.prompt.copy() if knobs.evict else self.st.prompt + self.st.output - 1
        self.M = math.inf if lim.kv_capacity is None else lim.kv_capacity
        self.r_max = math.inf if lim.max_running is None else lim.max_running
        self.top = min(lim.token_budget, lim.prefill_budget)
        self.cap = min(knobs.cap, self.top)
        self.waiting: list[int] = []
        self.fore: list[int] = []
        self.decoding: list[int] = []
        self.back: list[int] = []
        self.reserved = self.held = 0  # reservations of the admitted; KV slots held
        self.left = n
        # whether no first token depends on the background batches: with evictions a prompt's admission
        # and chunks never wait for them (room is made by evicting), else when M and R_max never bind
        roomy = int((self.st.prompt + self.st.output).sum()) <= self.M and n <= self.r_max
        self.apart = knobs.evict or roomy

    def holders(self) -> int:
        """Requests holding KV."""
        return len(self.fore) + len(self.decoding) + (int(np.count_nonzero(self.st.m[self.back])) if self.back else 0)

    def evict_for(self, tokens: int, admitted: int, keep: set[int]) -> list[int]:
        """Evict decoding requests (most output left first), then a partial recompute, none of ``keep``,
        until ``tokens`` more slots and ``admitted`` more requests fit in M and R_max; the victims."""
        st, out = self.st, []
        if self.held + tokens <= self.M and self.holders() + admitted <= self.r_max:
            return out
        cand = np.array([i for i in self.decoding if i not in keep], dtype=np.int64)
        victims = cand[np.lexsort((-st.m[cand], st.g[cand] - st.output[cand]))].tolist()  # stable, as sorted()
        victims += [i for i in self.back if st.m[i] > 0 and i not in keep]
        for i in victims:
            if self.held + tokens <= self.M and self.holders() + admitted <= self.r_max:
                break
            self.held -= int(st.m[i])
            if i in self.decoding:
                self.decoding.remove(i)
                self.back.append(i)
                st.prompt[i] = st.m[i] + 1
            st.m[i] = 0
            out.append(i)
        return out

    def record(self, chunks: list[tuple[int, int]], decodes: list[int]) -> None:
        """Process one batch's items (prefill ``chunks`` or ``decodes``) and finish requests."""
        st = self.st
        for i, c in chunks:
            if i in self.waiting:
                self.waiting.remove(i)
                self.fore.append(i)
                self.reserved += int(self.need[i])
            st.m[i] += c
            self.held += c
            if st.m[i] == st.prompt[i]:  # the prompt completes: a token
                st.g[i] += 1
                (self.fore if i in self.fore else self.back).remove(i)
                self.decoding.append(i)
                if self.knobs.evict and st.g[i] == 1:
                    self.reserved -= int(self.need[i])
        for i in decodes:
            st.m[i] += 1
            st.g[i] += 1
            self.held += 1
        touched = [i for i, _ in chunks] + decodes  # only a request given a token here can finish
        for i in [i for i in touched if st.g[i] >= st.output[i] and i in self.decoding]:
            self.decoding.remove(i)
            self.held -= int(st.m[i])
            if not self.knobs.evict:
                self.reserved -= int(self.need[i])
            self.left -= 1


def prefill_first_schedule(
    instance: Instance, knobs: PrefillFirst, budget: TimeBudget, keys: PrefillKeys | None = None
) -> Schedule | None:
    """The prefill-first schedule of ``knobs`` and ``keys`` (module docstring, :class:`PrefillKeys`), or
    None when ``budget`` expires first or some request can never be admitted (I + O - 1 > M, or a whole
    prompt over ``cap``)."""
    built = _build(instance, knobs, budget, keys, first_only=False)
    if built is None:
        return None
    meta = {"problem": "infermax", "method": "prefill-first", "knobs": asdict(knobs)}
    return Schedule(instance.name, tuple(built[0]), meta)


def prefill_first_ttft(
    instance: Instance, knobs: PrefillFirst, budget: TimeBudget, keys: PrefillKeys | None = None
) -> float | None:
    """The mean TTFT (seconds) of :func:`prefill_first_schedule`'s schedule, from its own batch times
    (the cost model's, as replay computes them), built only up to the last first token; None as there."""
    first = prefill_first_tokens(instance, knobs, budget, keys)
    if first is None:
        return None
    arrival = np.array(sorted(r.arrival for r in instance.requests), dtype=float)
    return float(np.mean(first - arrival)) if len(arrival) else 0.0


def prefill_first_tokens(
    instance: Instance, knobs: PrefillFirst, budget: TimeBudget, keys: PrefillKeys | None = None
) -> np.ndarray | None:
    """Each request's first-token time (seconds, requests in arrival order) in :func:`prefill_first_schedule`'s
    schedule, from its own batch times, built only up to the last first token; None as there."""
    built = _build(instance, knobs, budget, keys, first_only=True)
    return None if built is None else built[1]


def _build(
    instance: Instance, knobs: PrefillFirst, budget: TimeBudget, keys: PrefillKeys | None, first_only: bool
) -> tuple[list[Batch], np.ndarray] | None:
    """The batches of :func:`prefill_first_schedule` (up to the last first token with ``first_only``)
    and each request's first-token time, in arrival order; None as there."""
    b = _Builder(instance, knobs, keys)
    st, n = b.st, len(b.reqs)
    if n and ((st.prompt + st.output - 1).max() > b.M or (not knobs.chunked and st.prompt.max() > b.cap)):
        return None
    batches: list[Batch] = []
    first = np.full(n, math.nan)
    firsts = n  # first tokens still to come
    t = end = 0.0
    k = 0  # next arrival
    while b.left and (firsts or not first_only):
        if budget.expired():
            return None
        while k < n and st.arrival[k] <= t:
            b.waiting.append(k)
            k += 1
        nxt = float(st.arrival[k]) if k < n else math.inf
        step = _foreground(b, k, t) if b.waiting or b.fore else ()
        if step is None:  # the next arrival goes first and nothing fits before it
            t = nxt
            continue
        if not step and first_only and knobs.defer and b.apart and nxt < math.inf:
            t = nxt  # the deferred background ends by the next arrival and moves no first token
            continue
        step = step or _background(b, t, nxt)
        if step is None:  # nothing to run before the next arrival
            if nxt == math.inf:
                return None
            t = max(t, nxt)
            continue
        chunks, decodes, evicted, seconds = step
        items = tuple(Item(b.reqs[i].id, c) for i, c in chunks) + tuple(Item(b.reqs[i].id, 1) for i in decodes)
        victims = tuple(b.reqs[i].id for i in evicted)
        batches.append(Batch(items, evict=victims, start=t if t > end else None))
        b.record(chunks, decodes)
        t = end = t + seconds
        for i, _ in chunks:
            if st.g[i] == 1 and math.isnan(first[i]):
                first[i] = t
                firsts -= 1
    return batches, first


#: One batch of :func:`prefill_first_schedule`: prefill chunks, decodes, victims evicted first, seconds.
_Step = tuple[list[tuple[int, int]], list[int], list[int], float]


def _foreground(b: _Builder, k: int, t: float) -> _Step | tuple[()] | None:
    """The next batch of first prompts (module docstring's step 2); () when none can take a chunk,
    None when the next arrival (``k``) goes first and no chunk fits before it."""
    st, knobs = b.st, b.knobs
    running = len(b.fore) if knobs.evict else len(b.fore) + len(b.decoding)
    bias = b.keys.bias
    chunks = _prefill_items(
        st, knobs, (b.cap, b.top), b.waiting, b.fore, running, b.reserved, b.need, b.M, b.r_max, b.keys
    )
    if knobs.ratio and len(chunks) > 1:
        chunks = tile_filled(chunks, best_ratio(st, chunks, b.cm), b.cm) if knobs.fill else best_ratio(st, chunks, b.cm)
    while k < len(b.reqs) and b.keys.hold[k]:  # held arrivals never preempt: the first one that may
        k += 1
    if knobs.preempt and chunks and k < len(b.reqs) and knobs.order == "remaining-prefill":
        arriving = int(st.prompt[k] + bias[k] - bias[chunks[-1][0]])  # compared with the last one's rest
        chunks = cut_at_arrival(st, chunks, b.cm, float(st.arrival[k]) - t, arriving)
        if not chunks:
            return None
    if not chunks:
        return ()
    evicted: list[int] = []
    if knobs.evict:
        admitted = sum(1 for i, _ in chunks if i in b.waiting)
        evicted = b.evict_for(sum(c for _, c in chunks), admitted, {i for i, _ in chunks})
    return chunks, [], evicted, prefill_seconds(st, chunks, b.cm)


def _background(b: _Builder, t: float, nxt: float) -> _Step | None:
    """The next batch of later tokens (module docstring's step 3): decodes, else one evicted request's
    recompute; with deferral only what ends by the next arrival; None when nothing runs."""
    st = b.st
    gap = nxt - t if b.knobs.defer and not b.waiting and nxt < math.inf else math.inf
    if b.decoding:
        evicted: list[int] = []
        if b.held + 1 > b.M:  # (evictions only) no slot for one decode: evict all but the nearest to finish
            keep = min(b.decoding, key=lambda i: (st.output[i] - st.g[i], i))
            if not decode_items(st, [keep], b.cm, 1, gap)[0]:
                return None  # its decode alone would run past the next arrival: wait for it, evicting nothing
            evicted = b.evict_for(1, 0, {keep})
        chosen, seconds = decode_items(st, b.decoding, b.cm, int(min(b.C, b.M - b.held)), gap)
        if not chosen and evicted:  # a batch must carry the evictions: the nearest to finish decodes
            chosen, seconds = decode_items(st, b.decoding, b.cm, 1, math.inf)
        return ([], chosen, evicted, seconds) if chosen else None
    if not b.back:
        return None
    i = max(b.back, key=lambda j: (st.m[j], -st.prompt[j], -j))  # the started recompute, else the shortest
    c = int(min(st.prompt[i] - st.m[i], b.cap, b.M - b.held))
    if c < 1 or (st.m[i] == 0 and b.holders() + 1 > b.r_max):
        return None
    chunks = cut_at_arrival(st, [(i, c)], b.cm, gap, -1)  # -1: always cut, even its last tokens
    return (chunks, [], [], prefill_seconds(st, chunks, b.cm)) if chunks else None


def _prefill_items(
    st: PrefillState,
    knobs: PrefillFirst,
    caps: tuple[int, int],
    waiting: list[int],
    prefilling: list[int],
    running: int,
    reserved: int,
    need: np.ndarray,
    capacity: float,
    r_max: float,
    keys: PrefillKeys,
) -> list[tuple[int, int]]:
    """(request, chunk) of the next prefill batch: candidates in ``knobs.order`` (remaining prompt plus
    the keys' bias for ``remaining-prefill``) while tokens are left of ``caps``' cap, a candidate with
    the reach key up to ``caps``' top (min(C, P)); a waiting one only when it is admitted (fewer than
    R_max of ``running`` requests holding KV and the ones admitted here, its reservation within M)."""
    cap, top = caps
    bias, reach = keys.bias, keys.reach
    if knobs.order == "remaining-prefill":
        ranked = sorted(prefilling + waiting, key=lambda i: (st.prompt[i] - st.m[i] + bias[i], i))
    else:
        ranked = sorted(prefilling + waiting)
    out: list[tuple[int, int]] = []
    room = cap
    admitted = 0
    waiting_set = set(waiting)
    for i in ranked:
        if room <= 0:
            break
        if i in waiting_set:
            if running + admitted >= r_max or reserved + need[i] > capacity:
                continue
        rest = int(st.prompt[i] - st.m[i])
        limit = room + top - cap if reach[i] else room
        c = min(rest, limit) if knobs.chunked else (rest if rest <= limit else 0)
        if c <= 0:
            continue
        if i in waiting_set:
            admitted += 1
            reserved += int(need[i])
        out.append((i, c))
        room -= c
    return out


def best_prefill_first(
    instance: Instance, objective: str, budget: TimeBudget, chunked: bool = True, evictions: bool = True
) -> tuple[Schedule | None, float, int]:
    """The best replayed prefill-first schedule within ``budget``: over :func:`variants`, then a
    first-improvement climb from the best over one-knob changes (:func:`knob_steps`); without
    ``evictions``, only the knobs that never evict.

    Returns (schedule, its objective, schedules built); (None, inf, built) when none replayed cleanly
    in time.
    """
    best: tuple[Schedule | None, float, PrefillFirst | None] = (None, math.inf, None)
    tried: set[PrefillFirst] = set()

    def attempt(knobs: PrefillFirst) -> bool:
        nonlocal best
        tried.add(knobs)
        schedule = prefill_first_schedule(instance, knobs, budget)
        rep = None if schedule is None else replay(instance, schedule)
        if rep is None or not rep.feasible or (rep.metrics.evictions and not evictions):
            return False
        value = objective_of(rep, objective)
        if value < best[1]:
            best = (schedule, value, knobs)
            return True
        return False

    for knobs in variants(instance, chunked):
        if knobs.evict and not evictions:
            continue
        if budget.expired():
            return best[0], best[1], len(tried)
        attempt(knobs)
    improved = best[2] is not None
    while improved and not budget.expired():
        steps = [k for k in knob_steps(best[2], instance) if k not in tried and (evictions or not k.evict)]
        improved = any(attempt(k) for k in steps if not budget.expired())
    return best[0], best[1], len(tried)


def knob_steps(knobs: PrefillFirst, instance: Instance) -> list[PrefillFirst]:
    """The knobs one change away from ``knobs``: the cap's steps (:func:`cap_steps`, with chunking),
    the ratio rule, the deferral and the order switched."""
    out = [replace(knobs, cap=c) for c in cap_steps(knobs.cap, instance)] if knobs.chunked else []
    other = next(o for o in PREFILL_ORDERS if o != knobs.order)
    return out + [
        replace(knobs, ratio=not knobs.ratio),
        *([replace(knobs, fill=not knobs.fill)] if knobs.ratio else []),
        replace(knobs, preempt=not knobs.preempt),
        replace(knobs, evict=not knobs.evict),
        replace(knobs, defer=not knobs.defer),
        replace(knobs, order=other),
    ]


def cap_steps(cap: int, instance: Instance) -> list[int]:
    """The caps next to ``cap`` the climb tries: 3/4 and 5/4 of it, within [:data:`MIN_CAP`, min(C, P)]."""
    top = min(instance.limits.token_budget, instance.limits.prefill_budget)
    return sorted({max(MIN_CAP, min(top, c)) for c in (cap * 3 // 4, cap * 5 // 4)} - {cap})

"""An independent generator of random LEGAL schedules, written from the contract (docs/schedule.md) only.

It keeps its own request state (m, I, g) and its own clock, so that tests can compare
:func:`optsched.schedule.replay` with an implementation that shares no code with it: the batch
times, first-token and finish times recorded here must equal replay's.

Each batch: choose a start (right away, a short wait, or the next arrival when nothing is
waiting), evict some holders at random, then add random legal items (prefill chunks within the
remaining prompt, decode steps of 1) within C, P, M and R_max. When random choices stall, or after
a batch cap, it falls back to serving one request at a time after evicting the others, which is
always legal because every request fits in M on its own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from optsched.instance import Instance
from optsched.schedule import Batch, Item, Schedule


@dataclass
class ItemRecord:
    """What the generator knows about one item it emitted."""

    batch: int
    id: str
    phase: str  # "prefill" or "decode"
    room: int  # remaining prompt before the item (prefill) or 0


@dataclass
class LegalSchedule:
    schedule: Schedule
    ends: list[float]
    first_token: dict[str, float]
    finish: dict[str, float]
    items: list[ItemRecord] = field(default_factory=list)
    n_tok: list[int] = field(default_factory=list)
    n_pre: list[int] = field(default_factory=list)
    kv_after: list[int] = field(default_factory=list)
    running_after: list[int] = field(default_factory=list)
    evictions: int = 0


def _batch_time(
    inst: Instance, n_tok: int, n_pre: int, s_pre: int, n_dec: int, kv_dec: int, x_pre: int, kv_max: int
) -> float:
    """The cost model of docs/costmodel.md, written out again here."""
    cm = inst.cost_model
    if n_tok == 0:
        return 0.0
    t = cm.base + cm.per_token * n_tok
    if cm.token_tile:
        t += cm.per_tile * math.ceil(n_tok / cm.token_tile)
    if n_pre:
        t += (
            cm.prefill.bias
            + cm.prefill.per_token * n_pre
            + cm.prefill.per_token_sq * s_pre
            + cm.prefill.per_ctx * x_pre
        )
    if n_dec:
        t += cm.decode.bias + cm.decode.per_token * n_dec + cm.decode.per_kv * kv_dec + cm.decode.per_max_kv * kv_max
    return cm.layers * t


def random_legal_schedule(
    inst: Instance, rng: random.Random, p_evict: float = 0.1, max_batches: int = 400
) -> LegalSchedule:
    reqs = inst.requests
    lim = inst.limits
    C, P = lim.token_budget, lim.prefill_budget
    M = lim.kv_capacity if lim.kv_capacity is not None else float("inf")
    R = lim.max_running if lim.max_running is not None else float("inf")
    m = {r.id: 0 for r in reqs}
    prompt = {r.id: r.prompt_tokens for r in reqs}
    g = {r.id: 0 for r in reqs}
    out = {r.id: r.output_tokens for r in reqs}
    arrival = {r.id: r.arrival for r in reqs}
    done: set[str] = set()
    now = 0.0
    res = LegalSchedule(Schedule(inst.name, ()), [], {}, {})
    batches: list[Batch] = []
    serial = False

    while len(done) < len(reqs):
        j = len(batches)
        if j >= max_batches:
            serial = True
        pending = [r.id for r in reqs if r.id not in done]
        start_opt = None
        waiting = [i for i in pending if arrival[i] <= now]
        if not waiting:
            start_opt = min(arrival[i] for i in pending)
        elif rng.random() < 0.1:
            start_opt = now + rng.choice([0.0, 0.001, 0.5])
        start = now if start_opt is None else max(now, start_opt)
        avail = [i for i in pending if arrival[i] <= start]
        holders = [i for i in avail if m[i] > 0]
        evict: list[str] = []
        if serial:
            focus = max(avail, key=lambda i: (m[i], -reqs[inst.index(i)].arrival))
            evict = [i for i in holders if i != focus]
            order = [focus]
        else:
            evict = [i for i in holders if rng.random() < p_evict]
            order = [i for i in avail if i not in evict]
            rng.shuffle(order)
        for i in evict:
            if m[i] >= prompt[i]:
                prompt[i] = m[i] + 1
            m[i] = 0
        res.evictions += len(evict)
        kv = sum(m[i] for i in pending)
        running = sum(1 for i in pending if m[i] > 0)
        items: list[Item] = []
        n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0  # x_pre: sum of chunk * KV before it
        gen: list[str] = []
        for i in order:
            if not serial and rng.random() < 0.2:
                continue
            if m[i] == 0 and running + 1 > R:
                continue
            if m[i] < prompt[i]:
                room = prompt[i] - m[i]
                cap = min(room, C - n_tok, P - n_pre, M - kv)
                if cap < 1:
                    continue
                c = int(cap) if serial else rng.randint(1, int(cap))
                res.items.append(ItemRecord(j, i, "prefill", room))
                if m[i] == 0:
                    running += 1
                x_pre += c * m[i]
                m[i] += c
                n_pre += c
                s_pre += c * c
                if m[i] == prompt[i]:
                    gen.append(i)
            else:
                if C - n_tok < 1 or M - kv < 1:
                    continue
                c = 1
                res.items.append(ItemRecord(j, i, "decode", 0))
                kv_dec += m[i]
                kv_max = max(kv_max, m[i])
                n_dec += 1
                m[i] += 1
                gen.append(i)
            kv += c
            n_tok += c
            items.append(Item(i, c))
        if not items and not evict and not serial and j > 0:
            serial = any(m[i] > 0 for i in pending)  # stalled: fall back to one request at a time
        end = start + _batch_time(inst, n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max)
        res.n_tok.append(n_tok)
        res.n_pre.append(n_pre)
        res.kv_after.append(kv)
        res.running_after.append(running)
        for i in gen:
            g[i] += 1
            res.first_token.setdefault(i, end)
            if g[i] == out[i]:
                done.add(i)
                res.finish[i] = end
                m[i] = 0
        if serial and not any(m[i] > 0 for i in pending if i not in done):
            serial = j + 1 >= max_batches  # one request finished: back to random choices if allowed
        batches.append(Batch(tuple(items), tuple(evict), start_opt))
        res.ends.append(end)
        now = end
    res.schedule = Schedule(inst.name, tuple(batches))
    return res


def policy_random(instance: Instance) -> Schedule:
    """A test-only 'policy': a random legal schedule (seed 0)."""
    return random_legal_schedule(instance, random.Random(0)).schedule


def policy_broken(instance: Instance) -> Schedule:
    """A test-only 'policy' with a bug: it schedules nothing."""
    return Schedule(instance.name, ())


def policy_needs_max_running(instance: Instance) -> Schedule:
    """A test-only 'policy' with a precondition: it refuses instances without max_running."""
    from optsched.instance import InstanceError

    if instance.limits.max_running is None:
        raise InstanceError(f"{instance.name}: field 'limits.max_running': this policy needs it")
    return policy_random(instance)

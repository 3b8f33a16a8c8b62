"""Test-only helpers for the bound and report tests: a serial FCFS policy and random legal schedules.

These generate schedules; :func:`optsched.schedule.replay` judges them (tests assert they replay
cleanly before using them).
"""

from __future__ import annotations

import random

from optsched.instance import Instance
from optsched.schedule import Batch, Item, Schedule


def serial_fcfs(instance: Instance) -> Schedule:
    """One request at a time in arrival order: prefill in chunks of P, then decode one token a batch."""
    P = instance.limits.prefill_budget
    cost = instance.cost_model
    batches: list[Batch] = []
    now = 0.0
    for r in sorted(instance.requests, key=lambda r: (r.arrival, r.id)):
        left = r.prompt_tokens
        if r.arrival > now:
            now = r.arrival
            batches.append(Batch((), start=now))  # an empty batch (cost 0) waits for the arrival
        while left > 0:
            c = min(P, left)
            batches.append(Batch((Item(r.id, c),)))
            now += cost.prefill_time(c, r.prompt_tokens - left)
            left -= c
        for g in range(1, r.output_tokens):
            batches.append(Batch((Item(r.id, 1),)))
            now += cost.decode_time(1, r.prompt_tokens + g - 1)
    return Schedule(instance.name, tuple(batches), {"policy": "serial-fcfs"})


def random_schedule(instance: Instance, rng: random.Random, evict_prob: float = 0.05) -> Schedule:
    """A random legal schedule: random subsets, random chunk sizes, random evictions, random waits."""
    lim = instance.limits
    C, P = lim.token_budget, lim.prefill_budget
    M = lim.kv_capacity if lim.kv_capacity is not None else float("inf")
    R = lim.max_running if lim.max_running is not None else float("inf")
    reqs = {r.id: r for r in instance.requests}
    m = dict.fromkeys(reqs, 0)
    prompt = {rid: r.prompt_tokens for rid, r in reqs.items()}
    gen = dict.fromkeys(reqs, 0)
    done: set[str] = set()
    order = sorted(reqs, key=lambda rid: (reqs[rid].arrival, rid))
    now = 0.0
    batches: list[Batch] = []
    cost = instance.cost_model
    while len(done) < len(reqs):
        live = [rid for rid in order if rid not in done]
        start = now
        if all(reqs[rid].arrival > now for rid in live):
            start = min(reqs[rid].arrival for rid in live)
        if rng.random() < 0.05:  # an idle wait now and then
            start += rng.random() * 0.01
        arrived = [rid for rid in live if reqs[rid].arrival <= start]
        anchor = arrived[0]  # never evicted at random, so that it can always make progress
        evict = [rid for rid in arrived[1:] if m[rid] > 0 and rng.random() < evict_prob]

        def do_evict(rid: str) -> None:
            if m[rid] >= prompt[rid]:
                prompt[rid] = m[rid] + 1
            m[rid] = 0

        for rid in evict:
            do_evict(rid)
        items, tok, pre = [], 0, 0
        kv = sum(m.values())
        running = sum(1 for v in m.values() if v > 0)
        cand = [rid for rid in arrived if rid not in evict]
        rng.shuffle(cand)
        for rid in cand:
            if rng.random() < 0.3:
                continue
            if m[rid] < prompt[rid]:
                room = min(prompt[rid] - m[rid], C - tok, P - pre, M - kv)
                if room < 1 or (m[rid] == 0 and running + 1 > R):
                    continue
                c = rng.randint(1, int(room))
                running += m[rid] == 0
                pre += c
            else:
                if tok + 1 > C or kv + 1 > M:
                    continue
                c = 1
            items.append(Item(rid, c))
            tok += c
            kv += c
        if not items:  # make progress: evict everyone else, then the anchor fits alone
            extra = [o for o in arrived if o != anchor and m[o] > 0 and o not in evict]
            for o in extra:
                do_evict(o)
            evict = evict + extra
            c = 1 if m[anchor] >= prompt[anchor] else min(prompt[anchor] - m[anchor], P)
            items = [Item(anchor, c)]
        # apply the items (same rules as the contract) to track the state
        n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0
        for it in items:
            rid, c = it.id, it.tokens
            if m[rid] < prompt[rid]:
                x_pre += c * m[rid]
                m[rid] += c
                n_pre += c
                s_pre += c * c
                if m[rid] == prompt[rid]:
                    gen[rid] += 1
            else:
                kv_dec += m[rid]
                kv_max = max(kv_max, m[rid])
                n_dec += 1
                m[rid] += 1
                gen[rid] += 1
            n_tok += c
        for it in items:
            if gen[it.id] == reqs[it.id].output_tokens:
                done.add(it.id)
                m[it.id] = 0
        batches.append(Batch(tuple(items), tuple(evict), start if start > now else None))
        now = start + cost.batch_time(n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max)
    return Schedule(instance.name, tuple(batches), {"policy": "random"})

"""Tests of :func:`optsched.schedule.replay`, the judge of every schedule.

- Hand-computed schedules: batch times, TTFT, TPOT and makespan worked out in the comments with a
  dyadic cost model (every coefficient a power of two or a sum of them), so float arithmetic is
  exact and the asserts use ``==``.
- Property tests (hypothesis): random instances and random legal schedules from an independent
  generator (tests/support/legal_schedules.py) replay cleanly, with the same times the generator computed;
  each kind of violation is detected and reported naming the batch and the request.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsched.bounds import instance_bounds, request_bounds
from optsched.costmodel import cost_model_from_mapping
from optsched.instance import Instance, Limits, Request, parse_instance
from optsched.schedule import Batch, Item, Schedule, load_schedule, replay
from tests.support.legal_schedules import random_legal_schedule

# T = 1 * (base 1 + 0.5 N_tok + [N_pre>0](2 + 0.25 S_pre) + [N_dec>0](1 + 0.5 N_dec + 0.125 KV_dec))
DYADIC = {
    "layers": 1,
    "base": 1.0,
    "per_token": 0.5,
    "prefill": {"bias": 2.0, "per_token": 0.0, "per_token_sq": 0.25},
    "decode": {"bias": 1.0, "per_token": 0.5, "per_kv": 0.125},
}


def make(requests: list[dict], **limits) -> Instance:
    return parse_instance({"name": "hand", "cost_model": DYADIC, "limits": limits, "requests": requests})


def sched(*batches: Batch) -> Schedule:
    return Schedule("hand", tuple(batches))


def B(*items: tuple[str, int], evict: tuple[str, ...] = (), start: float | None = None) -> Batch:
    return Batch(tuple(Item(i, c) for i, c in items), evict, start)


# --------------------------------------------------------------------------- hand-computed


def test_hand_single_request_prefill_then_decodes():
    # r0: I = 4, O = 3, arrival 0.
    # batch 0: prefill 4.  N_tok 4, N_pre 4, S_pre 16: T = 1 + 0.5*4 + 2 + 0.25*16 = 9    -> end 9
    #          m = 4 = I: first token (g = 1) at 9.
    # batch 1: decode, KV_dec = 4: T = 1 + 0.5 + 1 + 0.5 + 0.125*4 = 3.5            -> end 12.5
    # batch 2: decode, KV_dec = 5: T = 1 + 0.5 + 1 + 0.5 + 0.125*5 = 3.625          -> end 16.125
    # TTFT 9, latency 16.125, TPOT (16.125 - 9) / 2 = 3.5625, makespan 16.125, throughput 3/16.125.
    inst = make([{"id": "r0", "prompt_tokens": 4, "output_tokens": 3}])
    res = replay(inst, sched(B(("r0", 4)), B(("r0", 1)), B(("r0", 1))))
    assert res.feasible, res.violations
    assert res.ends == [9.0, 12.5, 16.125]
    o = res.outcomes["r0"]
    assert (o.ttft, o.latency, o.tpot) == (9.0, 16.125, 3.5625)
    assert res.metrics.makespan == 16.125
    assert res.metrics.throughput == 3 / 16.125
    assert res.kv_used == [4, 5, 6]  # before release; I + O - 1 = 6 at the end


def test_hand_chunked_prefill_mixed_batch_and_start():
    # r0: I = 6, O = 2, arrival 0; r1: I = 2, O = 2, arrival 5. C = P = 4, M = 10.
    # batch 0 (start 1): prefill r0:4. T = 1 + 2 + 2 + 0.25*16 = 9                   -> 1 .. 10
    # batch 1: prefill r0:2 and r1:2 (r1 arrived at 5 <= 10). N_tok 4, S_pre 4 + 4 = 8:
    #          T = 1 + 2 + 2 + 0.25*8 = 7                                              -> 10 .. 17
    #          both prompts complete: first tokens at 17. KV after = 6 + 2 = 8.
    # batch 2: decode r0 (m 6) and r1 (m 2): KV_dec 8, N_dec 2, N_tok 2:
    #          T = 1 + 1 + 1 + 0.5*2 + 0.125*8 = 5                                     -> 17 .. 22
    #          KV after = 7 + 3 = 10 <= M (finishing requests still count); both finish at 22.
    # r0: TTFT 17, latency 22, TPOT 5.  r1: TTFT 12, latency 17, TPOT 5.
    # makespan 22, mean latency 19.5, mean TTFT 14.5, mean TPOT 5, throughput 4/22.
    reqs = [
        {"id": "r0", "prompt_tokens": 6, "output_tokens": 2},
        {"id": "r1", "arrival": 5.0, "prompt_tokens": 2, "output_tokens": 2},
    ]
    schedule = sched(B(("r0", 4), start=1.0), B(("r0", 2), ("r1", 2)), B(("r0", 1), ("r1", 1)))
    res = replay(make(reqs, token_budget=4, kv_capacity=10), schedule)
    assert res.feasible, res.violations
    assert res.starts == [1.0, 10.0, 17.0]
    assert res.ends == [10.0, 17.0, 22.0]
    assert res.kv_used == [4, 8, 10]
    o0, o1 = res.outcomes["r0"], res.outcomes["r1"]
    assert (o0.ttft, o0.latency, o0.tpot) == (17.0, 22.0, 5.0)
    assert (o1.ttft, o1.latency, o1.tpot) == (12.0, 17.0, 5.0)
    m = res.metrics
    assert (m.makespan, m.mean_latency, m.mean_ttft, m.mean_tpot) == (22.0, 19.5, 14.5, 5.0)
    assert m.throughput == 4 / 22
    # one slot less: the last batch holds 10 > 9
    tight = replay(make(reqs, token_budget=4, kv_capacity=9), schedule)
    assert tight.violations == ["batch 2: KV capacity exceeded: 10 > M = 9 (requests 'r0', 'r1')"]


def test_hand_eviction_recomputes_prompt_plus_generated():
    # r0: I = 3, O = 3.
    # batch 0: prefill 3: T = 1 + 1.5 + 2 + 0.25*9 = 6.75                            -> end 6.75
    #          g = 1 (first token at 6.75), m = 3.
    # batch 1: decode, KV_dec 3: T = 1 + 0.5 + 1 + 0.5 + 0.375 = 3.375               -> end 10.125
    #          g = 2, m = 4.
    # batch 2: evict r0 in decode: I := m + 1 = 5, m := 0. No items: T = 0             -> end 10.125
    # batch 3: prefill 5 (the recomputed prompt): T = 1 + 2.5 + 2 + 0.25*25 = 11.75   -> end 21.875
    #          m = 5 = I: g = 3 = O, finished at 21.875.
    # TTFT 6.75 (first token ever), latency 21.875, TPOT (21.875 - 6.75)/2 = 7.5625, 1 eviction.
    inst = make([{"id": "r0", "prompt_tokens": 3, "output_tokens": 3}])
    res = replay(inst, sched(B(("r0", 3)), B(("r0", 1)), B(evict=("r0",)), B(("r0", 5))))
    assert res.feasible, res.violations
    assert res.ends == [6.75, 10.125, 10.125, 21.875]
    o = res.outcomes["r0"]
    assert (o.ttft, o.latency, o.tpot, o.evictions) == (6.75, 21.875, 7.5625, 1)
    assert res.metrics.makespan == 21.875 and res.metrics.evictions == 1
    # evicted in prefill: the prompt stays 3, so a 5-token chunk runs past it
    bad = replay(inst, sched(B(("r0", 2)), B(evict=("r0",)), B(("r0", 5))))
    assert "batch 2: request 'r0': prefill chunk 5 exceeds the remaining prompt 3" in bad.violations


def test_hand_slo_and_goodput():
    # Same schedule as the first hand test (latency 16.125, TTFT 9, TPOT 3.5625), with SLOs:
    # ttft 9 met exactly (<=), e2e 16 missed -> attainment 0, G = 0 / 16.125.
    inst = make([{"id": "r0", "prompt_tokens": 4, "output_tokens": 3, "slo": {"ttft": 9.0, "e2e": 16.0}}])
    res = replay(inst, sched(B(("r0", 4)), B(("r0", 1)), B(("r0", 1))))
    assert res.metrics.slo_attainment == 0.0 and res.metrics.G == 0.0
    inst = make([{"id": "r0", "prompt_tokens": 4, "output_tokens": 3, "slo": {"ttft": 9.0, "tpot": 3.5625}}])
    res = replay(inst, sched(B(("r0", 4)), B(("r0", 1)), B(("r0", 1))))
    assert res.metrics.slo_attainment == 1.0 and res.metrics.G == 1 / 16.125


def test_schedule_json_roundtrip(tmp_path):
    s = sched(B(("r0", 4), start=1.5), B(("r0", 1), evict=("r1",)))
    path = tmp_path / "s.json"
    s.save(path)
    assert load_schedule(path) == s


# --------------------------------------------------------------------------- property tests


@st.composite
def instances(draw) -> Instance:
    n = draw(st.integers(1, 5))
    online = draw(st.booleans())
    reqs = [
        Request(
            f"q{k}",
            draw(st.sampled_from([0.0, 0.5, 2.0, 7.25])) if online else 0.0,
            draw(st.integers(1, 12)),
            draw(st.integers(1, 5)),
        )
        for k in range(n)
    ]
    C = draw(st.integers(1, 16))
    P = draw(st.integers(1, C))
    need = max(r.max_kv for r in reqs)
    M = draw(st.one_of(st.none(), st.integers(need, need + 30)))
    R = draw(st.one_of(st.none(), st.integers(1, 4)))
    coef = st.sampled_from([0.0, 1e-3, 0.25, 1.0])
    cm = cost_model_from_mapping({
        "layers": draw(st.sampled_from([1, 2, 32])),
        "base": draw(coef),
        "per_token": draw(coef),
        "prefill": {"bias": draw(coef), "per_token": draw(coef), "per_token_sq": draw(coef), "per_ctx": draw(coef)},
        "decode": {"bias": draw(coef), "per_token": draw(coef), "per_kv": draw(coef)},
    })
    return Instance("prop", cm, Limits(C, P, M, R), tuple(reqs))


PROP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@PROP
@given(inst=instances(), seed=st.integers(0, 2**32 - 1), p_evict=st.sampled_from([0.0, 0.1, 0.4]))
def test_random_legal_schedules_replay_cleanly(inst, seed, p_evict):
    legal = random_legal_schedule(inst, random.Random(seed), p_evict)
    res = replay(inst, legal.schedule)
    assert res.feasible, res.violations
    assert all(close(a, b) for a, b in zip(res.ends, legal.ends)) and len(res.ends) == len(legal.ends)
    assert res.kv_used == legal.kv_after and res.running == legal.running_after
    assert res.metrics.evictions == legal.evictions
    for r in inst.requests:
        o = res.outcomes[r.id]
        assert close(o.first_token, legal.first_token[r.id]) and close(o.finish, legal.finish[r.id])
    m = res.metrics
    assert close(m.makespan, legal.ends[-1])
    if m.makespan > 0:  # an all-zero cost model gives makespan 0 and infinite throughput
        assert close(m.throughput * m.makespan, sum(r.output_tokens for r in inst.requests))
    # the trivial bounds hold for every feasible schedule
    for r in inst.requests:
        lb, o = request_bounds(inst, r), res.outcomes[r.id]
        assert o.ttft >= lb.ttft * (1 - 1e-9) - 1e-12
        assert o.latency >= lb.e2e * (1 - 1e-9) - 1e-12
        if lb.tpot is not None:
            assert o.tpot >= lb.tpot * (1 - 1e-9) - 1e-12
    bounds = {b.name: b.value for b in instance_bounds(inst)}
    assert m.makespan >= bounds["makespan"] * (1 - 1e-9) - 1e-12
    assert m.mean_latency >= bounds["mean-latency"] * (1 - 1e-9) - 1e-12


def _with_limits(inst: Instance, **kw) -> Instance:
    return dataclasses.replace(inst, limits=dataclasses.replace(inst.limits, **kw))


def _names(msgs: list[str], j: int, rid: str | None = None) -> bool:
    return any(v.startswith(f"batch {j}:") and (rid is None or repr(rid) in v) for v in msgs)


@PROP
@given(inst=instances(), seed=st.integers(0, 2**32 - 1))
def test_limit_violations_are_reported_with_batch_and_request(inst, seed):
    legal = random_legal_schedule(inst, random.Random(seed))
    sched_ = legal.schedule
    cases = [
        ("token budget exceeded", "token_budget", legal.n_tok),
        ("prefill budget exceeded", "prefill_budget", legal.n_pre),
        ("KV capacity exceeded", "kv_capacity", legal.kv_after),
        ("max running exceeded", "max_running", legal.running_after),
    ]
    for text, key, trace in cases:
        peak = max(trace)
        if peak <= 1:
            continue
        j = trace.index(peak)
        res = replay(_with_limits(inst, **{key: peak - 1}), sched_)
        assert not res.feasible
        hits = [v for v in res.violations if text in v]
        assert hits and _names(hits, j)
        batch_ids = {it.id for it in sched_.batches[j].items}
        assert any(f"'{rid}'" in hits[0] for rid in batch_ids)


@PROP
@given(inst=instances(), seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10**6))
def test_item_violations_are_reported_with_batch_and_request(inst, seed, pick):
    legal = random_legal_schedule(inst, random.Random(seed))
    batches = list(legal.schedule.batches)

    def mutated(j: int, rid: str, tokens: int) -> list[str]:
        b = batches[j]
        items = tuple(Item(it.id, tokens) if it.id == rid else it for it in b.items)
        changed = batches[:j] + [dataclasses.replace(b, items=items)] + batches[j + 1 :]
        return replay(inst, changed).violations

    prefills = [r for r in legal.items if r.phase == "prefill"]
    p = prefills[pick % len(prefills)]
    assert (
        f"batch {p.batch}: request {p.id!r}: prefill chunk {p.room + 1} exceeds the remaining prompt {p.room}"
        in mutated(p.batch, p.id, p.room + 1)
    )
    decodes = [r for r in legal.items if r.phase == "decode"]
    if decodes:
        d = decodes[pick % len(decodes)]
        assert f"batch {d.batch}: request {d.id!r}: decode item with tokens = 2 (must be 1)" in mutated(
            d.batch, d.id, 2
        )
    # unfinished: drop the last batch that generates the last token of some request
    res = replay(inst, batches[:-1])
    assert not res.feasible and any("unfinished after the last batch" in v for v in res.violations)
    # early arrival: the request of the first item arrives after its batch starts
    first = legal.items[0]
    start = replay(inst, batches).starts[first.batch]
    late = [dataclasses.replace(r, arrival=start + 1.0) if r.id == first.id else r for r in inst.requests]
    res = replay(inst.with_requests(late), batches)
    assert f"batch {first.batch}: request {first.id!r}: processed before its arrival" in "\n".join(res.violations)
    # eviction without KV: nothing holds KV before the first batch
    arrived = [r.id for r in inst.requests if r.arrival <= replay(inst, batches).starts[0]]
    b0 = dataclasses.replace(batches[0], evict=(arrived[0],))
    res = replay(inst, [b0] + batches[1:])
    assert f"batch 0: request {arrived[0]!r}: evicted without holding KV" in res.violations


def test_other_structural_violations():
    inst = make([
        {"id": "a", "prompt_tokens": 2, "output_tokens": 1},
        {"id": "b", "prompt_tokens": 2, "output_tokens": 1},
    ])
    v = replay(inst, sched(B(("a", 2), ("a", 1)), B(("b", 2)))).violations
    assert v == ["batch 0: request 'a': more than one item in the batch"]
    v = replay(inst, sched(B(("a", 2)), B(("a", 1), ("b", 2)))).violations
    assert v == ["batch 1: request 'a': processed after it finished"]
    v = replay(inst, sched(B(("a", 2)), B(("b", 2), start=0.0))).violations
    assert v[0].startswith("batch 1: start 0.0 is earlier than the previous batch's end")
    v = replay(inst, sched(B(("a", 2), start=-1.0), B(("b", 2)))).violations
    assert v == ["batch 0: start -1.0 is earlier than time 0"]
    v = replay(inst, sched(B(("a", 2), ("b", 0)), B(("b", 2)))).violations
    assert v == ["batch 0: request 'b': tokens = 0 < 1"]
    v = replay(inst, sched(B(("a", 2), ("zz", 1)), B(("b", 2)))).violations
    assert v == ["batch 0: request 'zz': unknown request"]


@pytest.mark.parametrize("name", ["toy-4"])
def test_empty_schedule_reports_every_request_unfinished(name):
    from optsched.instance import load_instance

    inst = load_instance(name)
    res = replay(inst, Schedule(name, ()))
    assert len(res.violations) == len(inst.requests) and res.metrics is None


def test_hand_worked_example_of_the_docs():
    # docs/schedule.md, "Worked example": r0 (I 6, O 2, arrival 0), r1 (I 2, O 3, arrival 5), C = P = 4, M = 10.
    # batch 0 (start 1): r0:4.         T = 1 + 2 + 2 + 0.25*16 = 9                  -> 1 .. 10
    # batch 1: r0:2, r1:2 (prefill).   T = 1 + 2 + 2 + 0.25*8 = 7                   -> 10 .. 17, first tokens 17
    # batch 2: r0:1, r1:1 (decode).    KV_dec = 6 + 2: T = 1 + 1 + 1 + 1 + 1 = 5    -> 17 .. 22, r0 finishes
    # batch 3: evict r1 (m 3 -> I 4).  empty: T = 0                                 -> 22 .. 22
    # batch 4: r1:4 (recompute).       T = 1 + 2 + 2 + 0.25*16 = 9                  -> 22 .. 31, r1 finishes
    # r0: TTFT 17, latency 22, TPOT 5; r1: TTFT 12, latency 26, TPOT (31 - 17)/2 = 7.
    # makespan 31, mean latency 24, mean TTFT 14.5, mean TPOT 6, throughput 5/31, G = 2/48.
    reqs = [
        {"id": "r0", "prompt_tokens": 6, "output_tokens": 2},
        {"id": "r1", "arrival": 5.0, "prompt_tokens": 2, "output_tokens": 3},
    ]
    schedule = sched(
        B(("r0", 4), start=1.0), B(("r0", 2), ("r1", 2)), B(("r0", 1), ("r1", 1)), B(evict=("r1",)), B(("r1", 4))
    )
    res = replay(make(reqs, token_budget=4, kv_capacity=10), schedule)
    assert res.feasible, res.violations
    assert res.starts == [1.0, 10.0, 17.0, 22.0, 22.0] and res.ends == [10.0, 17.0, 22.0, 22.0, 31.0]
    assert res.kv_used == [4, 8, 10, 0, 4]
    o0, o1 = res.outcomes["r0"], res.outcomes["r1"]
    assert (o0.first_token, o0.finish, o0.ttft, o0.latency, o0.tpot) == (17.0, 22.0, 17.0, 22.0, 5.0)
    assert (o1.first_token, o1.finish, o1.ttft, o1.latency, o1.tpot, o1.evictions) == (17.0, 31.0, 12.0, 26.0, 7.0, 1)
    m = res.metrics
    assert (m.makespan, m.mean_latency, m.mean_ttft, m.mean_tpot, m.evictions, m.batches) == (
        31.0,
        24.0,
        14.5,
        6.0,
        1,
        5,
    )
    assert m.throughput == 5 / 31 and m.G == 2 / 48


def test_hand_prefill_context_term():
    # The worked example with prefill.per_ctx = 0.125: X_pre = sum over prefill items of c * m
    # (m the request's KV before the item). Only batch 1 has a chunk over cached keys: r0:2 at
    # m = 4 gives X_pre = 8 (r1:2 starts at m = 0), so T_1 = 7 + 0.125 * 8 = 8; the recompute of
    # r1 in batch 4 starts from m = 0 again (X_pre = 0). Ends 10, 18, 23, 23, 32.
    model = {**DYADIC, "prefill": {**DYADIC["prefill"], "per_ctx": 0.125}}
    reqs = [
        {"id": "r0", "prompt_tokens": 6, "output_tokens": 2},
        {"id": "r1", "arrival": 5.0, "prompt_tokens": 2, "output_tokens": 3},
    ]
    inst = parse_instance({
        "name": "hand",
        "cost_model": model,
        "limits": {"token_budget": 4, "kv_capacity": 10},
        "requests": reqs,
    })
    schedule = sched(
        B(("r0", 4), start=1.0), B(("r0", 2), ("r1", 2)), B(("r0", 1), ("r1", 1)), B(evict=("r1",)), B(("r1", 4))
    )
    res = replay(inst, schedule)
    assert res.feasible, res.violations
    assert res.ends == [10.0, 18.0, 23.0, 23.0, 32.0]
    assert [f[5] for f in res.features] == [0, 8, 0, 0, 0]
    assert res.features[1] == (4, 4, 8, 0, 0, 8, 0)
    assert res.metrics.makespan == 32.0 and res.outcomes["r0"].first_token == 18.0


def test_hand_prefill_context_after_an_eviction_in_prefill():
    # r0: I = 6, O = 1, per_ctx = 0.5 (other terms as DYADIC). Chunks 3 (m 0), evict (m 3 -> 0, prefill:
    # I stays 6), 4 (m 0), 2 (m 4): X_pre = 0, -, 0, 8.
    # T = 1 + 0.5 c + 2 + 0.25 c^2 + 0.5 X: 3 -> 1 + 1.5 + 2 + 2.25 = 6.75; 4 -> 1 + 2 + 2 + 4 = 9;
    # 2 -> 1 + 1 + 2 + 1 + 4 = 9. Ends 6.75, 6.75, 15.75, 24.75.
    model = {**DYADIC, "prefill": {**DYADIC["prefill"], "per_ctx": 0.5}}
    inst = parse_instance({
        "name": "hand",
        "cost_model": model,
        "limits": {},
        "requests": [{"id": "r0", "prompt_tokens": 6, "output_tokens": 1}],
    })
    res = replay(inst, sched(B(("r0", 3)), B(evict=("r0",)), B(("r0", 4)), B(("r0", 2))))
    assert res.feasible, res.violations
    assert res.ends == [6.75, 6.75, 15.75, 24.75]
    assert [f[5] for f in res.features] == [0, 0, 0, 8]

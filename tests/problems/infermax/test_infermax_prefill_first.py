"""Prefill-first schedules for mean TTFT (optsched/problems/infermax/prefill_first.py).

- Every variant's schedule replays cleanly on random instances with arrivals, KV, C, P and R_max
  limits, without an eviction, every batch prefill-only or decode-only.
- Lone requests (arrivals far apart) get their first token after their prompt alone: the least
  possible; a request arriving while another decodes is prefilled at once with deferred decodes and
  waits for the decode batch without.
- The best of the variants is never worse than the variant it starts from, and an expired budget
  gives no schedule.
- A solve for mean TTFT at scale offers the best as ``prefill-first`` and returns no worse than it
  or any policy.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.policies import reads_slo
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.problems.infermax.prefill_first import (
    PrefillFirst,
    best_prefill_first,
    cap_steps,
    knob_steps,
    prefill_first_schedule,
    variants,
)
from optsched.result import objective_of
from optsched.schedule import replay
from tests.problems.infermax.test_infermax_online import online_instance
from tests.support.solving import solver

solve = solver("infermax")


def two_requests(second_arrival: float):
    """r0 (I = 100, O = 50) at 0 and r1 (I = 80, O = 5) at ``second_arrival``."""
    reqs = [
        {"id": "r0", "arrival": 0.0, "prompt_tokens": 100, "output_tokens": 50},
        {"id": "r1", "arrival": second_arrival, "prompt_tokens": 80, "output_tokens": 5},
    ]
    data = {"name": "two", "cost_model": "llama2-7b-h200", "limits": {"token_budget": 512}, "requests": reqs}
    return parse_instance(data, "two")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("memory", [0.2, 1.0])
def test_every_variant_replays_cleanly(seed, memory):
    inst = online_instance(seed, n=30, memory=memory)
    knobs = variants(inst) + [replace(k, chunked=False) for k in variants(inst, chunked=False)]
    for k in knobs:
        schedule = prefill_first_schedule(inst, k, NO_LIMIT)
        if schedule is None:  # only a whole prompt over the cap
            assert not k.chunked and max(r.prompt_tokens for r in inst.requests) > k.cap
            continue
        rep = replay(inst, schedule)
        assert rep.feasible, (k, rep.violations[:3])
        assert rep.metrics.evictions == 0 or k.evict
        assert all(not (p and d) for p, d in zip(rep.prefill_tokens, rep.decode_items))
        assert schedule.meta["method"] == "prefill-first"


def test_lone_requests_get_their_first_token_after_their_prompt_alone():
    inst = online_instance(1, n=12)
    P = inst.limits.prefill_budget  # prompts of one chunk
    lone = (replace(r, arrival=10.0 * k, prompt_tokens=min(r.prompt_tokens, P)) for k, r in enumerate(inst.requests))
    inst = replace(inst, requests=tuple(lone))
    rep = replay(inst, prefill_first_schedule(inst, variants(inst)[0], NO_LIMIT))
    cm = inst.cost_model
    for r in inst.requests:
        alone = cm.batch_time(r.prompt_tokens, r.prompt_tokens, r.prompt_tokens**2, 0, 0)
        assert rep.outcomes[r.id].ttft == pytest.approx(alone, rel=1e-12)


def test_deferred_decodes_leave_the_next_arrival_alone():
    inst = two_requests(0.02)  # r0 decodes from about 0.015 s to 0.3 s
    alone = inst.cost_model.batch_time(80, 80, 80**2, 0, 0)
    top = PrefillFirst(cap=512, defer=True)
    deferred = replay(inst, prefill_first_schedule(inst, top, NO_LIMIT))
    eager = replay(inst, prefill_first_schedule(inst, replace(top, defer=False), NO_LIMIT))
    srpf = replay(inst, simulate(inst, POLICY_CONFIGS["srpf"]))
    assert deferred.outcomes["r1"].ttft == pytest.approx(alone, rel=1e-12)
    assert eager.outcomes["r1"].ttft > alone * (1 + 1e-9)
    assert deferred.metrics.mean_ttft < srpf.metrics.mean_ttft


def test_preemption_at_an_arrival_serves_the_shorter_prompt_first():
    """r1 (80 tokens) arrives while r0's 3,000-token prompt would still run: with ``preempt`` the
    chunk is cut at the arrival and r1 gets its first token after its prompt alone."""
    reqs = [
        {"id": "r0", "arrival": 0.0, "prompt_tokens": 3000, "output_tokens": 2},
        {"id": "r1", "arrival": 0.03, "prompt_tokens": 80, "output_tokens": 2},
    ]
    limits = {"token_budget": 4096}
    inst = parse_instance({"name": "cut", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs}, "cut")
    alone = inst.cost_model.batch_time(80, 80, 80**2, 0, 0)
    knobs = PrefillFirst(cap=4096, ratio=True, preempt=True)
    cut = replay(inst, prefill_first_schedule(inst, knobs, NO_LIMIT))
    whole = replay(inst, prefill_first_schedule(inst, replace(knobs, preempt=False), NO_LIMIT))
    assert cut.feasible and cut.outcomes["r1"].ttft == pytest.approx(alone, rel=1e-12)
    assert whole.outcomes["r1"].ttft > alone * 2
    assert cut.metrics.mean_ttft < whole.metrics.mean_ttft


def test_evictions_free_the_memory_a_reservation_holds():
    """M = 300: r0 (I = 100, O = 200) would reserve 299 slots and block r1 until it finishes; admitted
    on its prompt alone, r1 gets its first token after its prompt alone (r0 is evicted if need be)."""
    reqs = [
        {"id": "r0", "arrival": 0.0, "prompt_tokens": 100, "output_tokens": 200},
        {"id": "r1", "arrival": 0.05, "prompt_tokens": 100, "output_tokens": 2},
    ]
    limits = {"token_budget": 512, "kv_capacity": 300}
    inst = parse_instance({"name": "kv", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs}, "kv")
    alone = inst.cost_model.batch_time(100, 100, 100**2, 0, 0)
    knobs = PrefillFirst(cap=512, evict=True)
    evicting = replay(inst, prefill_first_schedule(inst, knobs, NO_LIMIT))
    reserving = replay(inst, prefill_first_schedule(inst, replace(knobs, evict=False), NO_LIMIT))
    assert evicting.feasible and reserving.feasible and reserving.metrics.evictions == 0
    assert evicting.outcomes["r1"].ttft == pytest.approx(alone, rel=1e-12)
    assert reserving.outcomes["r1"].ttft > 10 * alone
    schedule, _, _ = best_prefill_first(inst, "ttft", NO_LIMIT, evictions=False)
    assert replay(inst, schedule).metrics.evictions == 0


@pytest.mark.parametrize("seed", range(4))
def test_best_is_never_worse_than_its_start(seed):
    inst = online_instance(seed, n=25, memory=0.4)
    schedule, value, built = best_prefill_first(inst, "ttft", NO_LIMIT)
    start = objective_of(replay(inst, prefill_first_schedule(inst, variants(inst)[0], NO_LIMIT)), "ttft")
    assert schedule is not None and built >= len(variants(inst))
    assert value == objective_of(replay(inst, schedule), "ttft") <= start


def test_steps_change_one_knob_within_the_budgets():
    inst = online_instance(0)
    top = min(inst.limits.token_budget, inst.limits.prefill_budget)
    assert cap_steps(top, inst) == [top * 3 // 4]
    assert all(64 <= c <= top for cap in (64, 100, top) for c in cap_steps(cap, inst))
    knobs = variants(inst)[0]
    for other in knob_steps(knobs, inst):
        knob_names = ("cap", "defer", "order", "ratio", "preempt", "evict", "chunked", "fill")
        changed = [f for f in knob_names if getattr(other, f) != getattr(knobs, f)]
        assert len(changed) == 1 and changed != ["chunked"]


def test_expired_budget_gives_no_schedule():
    inst = online_instance(2)
    expired = TimeBudget.of(0.0)
    assert prefill_first_schedule(inst, variants(inst)[0], expired) is None
    assert best_prefill_first(inst, "ttft", expired) == (None, math.inf, 0)


def test_solve_for_ttft_offers_prefill_first_and_is_never_worse():
    inst = online_instance(5, n=30, memory=0.5)
    res = solve(inst, {"objective": "ttft", "time_limit": 10})
    values = res.extra["policy_values"]
    assert "prefill-first" in values and res.extra["scale"]["prefill_first"]["schedules"] >= 1
    rep = replay(inst, res.schedule)
    assert rep.feasible and res.objective == pytest.approx(objective_of(rep, "ttft"), rel=1e-12)
    for name, config in POLICY_CONFIGS.items():
        if reads_slo(name):  # slo-budget schedules by SLO targets; this instance has none
            continue
        policy = objective_of(replay(inst, simulate(inst, config)), "ttft")
        assert res.objective <= policy + 1e-12, name
    assert res.objective <= values["prefill-first"] + 1e-12


def short_and_long(cost_model: str | dict = "llama2-7b-h200"):
    """r0 (I = 100) and r1 (I = 1,030, 2 tokens past 8 tiles of 128) both at time 0: the ratio rule
    serves r0 alone first."""
    reqs = [
        {"id": "r0", "arrival": 0.0, "prompt_tokens": 100, "output_tokens": 3},
        {"id": "r1", "arrival": 0.0, "prompt_tokens": 1030, "output_tokens": 3},
    ]
    data = {"name": "short-long", "cost_model": cost_model, "limits": {"token_budget": 4096}, "requests": reqs}
    return parse_instance(data, "short-long")


def test_the_tile_fill_completes_the_started_tile_and_gains():
    """The ratio rule cuts the first batch after r0 (100 tokens, one tile of 128 started); the fill adds
    28 tokens of r1 to it, so r1's own batch needs one tile less: a lower mean TTFT, replayed."""
    inst = short_and_long()
    plain = PrefillFirst(4096, ratio=True)
    values = {}
    for knobs in (plain, replace(plain, fill=True)):
        schedule = prefill_first_schedule(inst, knobs, NO_LIMIT)
        rep = replay(inst, schedule)
        assert rep.feasible
        values[knobs.fill] = rep.metrics.mean_ttft
        first = {item.id: item.tokens for item in schedule.batches[0].items}
        assert first == ({"r0": 100, "r1": 28} if knobs.fill else {"r0": 100})
    assert values[True] < values[False]


def test_the_tile_fill_changes_nothing_without_a_tile_term():
    profile = {"base": 0.003, "per_token": 1e-5, "prefill": {"per_token_sq": 1e-9}}
    for inst in (short_and_long(profile), online_instance(2, n=30)):
        if inst.cost_model.per_tile:
            inst = replace(inst, cost_model=replace(inst.cost_model, per_tile=0.0, token_tile=0))
        for knobs in variants(inst):
            if knobs.ratio:
                filled = prefill_first_schedule(inst, replace(knobs, fill=True), NO_LIMIT)
                assert filled.batches == prefill_first_schedule(inst, knobs, NO_LIMIT).batches


def test_the_fill_is_a_step_of_the_ratio_rule_only():
    inst = online_instance(0, n=10)
    assert any(k.fill for k in knob_steps(PrefillFirst(256, ratio=True), inst))
    assert not any(k.fill for k in knob_steps(PrefillFirst(256, ratio=False), inst))

"""The local search over prefill plans for mean TTFT (optsched/problems/infermax/prefill_search.py).

- The plan builder's mean TTFT (built up to the last first token) equals the replayed mean TTFT of
  the plan's whole schedule, for every prefill-first variant with random per-request keys; keys all
  zero change nothing.
- The search is never worse than its start; its schedules replay cleanly under tight M, R_max and C
  on random small instances, without evictions when they are not allowed; it respects a short
  budget and gives nothing with an expired one.
- On tiny instances its value is never below the exhaustive optimum.
- A reach flag lets its request's chunk pass the cap, never a batch past min(C, P); the search with
  reach moves alone finds schedules with reach flags that replay cleanly and are never worse than
  its start.
- It climbs from several starts, each within its share of the time; the knob moves offer caps of
  whole token tiles; a planted fault (whole schedules that do not replay) is caught: no such schedule
  is ever returned.
- A solve for mean TTFT at scale runs it and returns no worse than its schedule.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

import numpy as np
import pytest

from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.problems.infermax import prefill_search as prefill_search_module
from optsched.problems.infermax.prefill_batches import MIN_CAP
from optsched.problems.infermax.prefill_first import (
    PrefillFirst,
    PrefillKeys,
    best_prefill_first,
    prefill_first_schedule,
    prefill_first_ttft,
    variants,
)
from optsched.problems.infermax.prefill_search import RESTARTS, ROUNDS, STALL, knob_moves, prefill_search
from optsched.result import objective_of
from optsched.schedule import Schedule, replay
from tests.problems.infermax.test_infermax_online import online_instance
from tests.support.bound_checks import TINY
from tests.support.infermax import tiny_instance
from tests.support.latency_bruteforce import exhaustive_mean
from tests.support.solving import solver

solve = solver("infermax")


def random_keys(n: int, seed: int) -> PrefillKeys:
    """Biases of up to +-512 tokens, hold and reach flags, drawn at random."""
    rng = np.random.default_rng(seed)
    return PrefillKeys(rng.integers(-512, 512, size=n), rng.random(n) < 0.3, rng.random(n) < 0.3)


def roomy(inst):
    """``inst`` without KV capacity and R_max (the builder then skips deferred decodes before the last
    first token)."""
    return replace(inst, limits=replace(inst.limits, kv_capacity=None, max_running=None))


def busy_instance(seed: int, n: int = 40, rate: float = 300.0):
    """``n`` requests (I in 1..600, O in 1..40) arriving at ``rate`` per second: prompts queue."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for k in range(n):
        t += rng.expovariate(rate)
        reqs.append({
            "id": f"r{k}",
            "arrival": round(t, 5),
            "prompt_tokens": rng.randint(1, 600),
            "output_tokens": rng.randint(1, 40),
        })
    limits = {"token_budget": 1024, "prefill_budget": 1024}
    return parse_instance(
        {"name": f"busy-{seed}", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs}, f"busy-{seed}"
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("memory", [0.2, 1.0, None])
def test_plan_value_is_the_replayed_mean_ttft(seed, memory):
    inst = online_instance(seed, n=30, memory=memory or 1.0)
    inst = roomy(inst) if memory is None else inst
    keys = random_keys(len(inst.requests), seed)
    for k in variants(inst):
        schedule = prefill_first_schedule(inst, k, NO_LIMIT, keys)
        rep = replay(inst, schedule)
        assert rep.feasible, (k, rep.violations[:3])
        assert prefill_first_ttft(inst, k, NO_LIMIT, keys) == pytest.approx(rep.metrics.mean_ttft, rel=1e-12)
        plain = prefill_first_schedule(inst, k, NO_LIMIT)
        assert prefill_first_schedule(inst, k, NO_LIMIT, PrefillKeys.none(len(inst.requests))) == plain


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("evictions", [True, False])
def test_never_worse_than_its_start_and_replays_cleanly(seed, evictions):
    inst = online_instance(seed, n=25, memory=0.2)  # R_max 8 or none, C = 512, P = 256, M tight
    start_schedule, start_value, _ = best_prefill_first(inst, "ttft", NO_LIMIT, evictions=evictions)
    knobs = replace(variants(inst)[0], **start_schedule.meta["knobs"])
    found = prefill_search(inst, knobs, TimeBudget.of(3.0), evictions=evictions, seed=seed)
    assert found.start == pytest.approx(start_value, rel=1e-12)
    assert found.value <= found.start
    if found.schedule is not None:
        rep = replay(inst, found.schedule)
        assert rep.feasible, rep.violations[:3]
        assert evictions or rep.metrics.evictions == 0
        assert found.value == objective_of(rep, "ttft") < found.start
        assert found.schedule.meta["method"] == "prefill-search"


def test_the_search_gains_where_the_rules_are_not_optimal():
    """On random instances under load, the keys find better schedules than the best prefill-first
    ones somewhere."""
    gains = 0
    for seed in range(4):
        inst = busy_instance(seed)
        schedule, value, _ = best_prefill_first(inst, "ttft", NO_LIMIT)
        knobs = replace(variants(inst)[0], **schedule.meta["knobs"])
        gains += prefill_search(inst, knobs, TimeBudget.of(2.0)).value < value * (1 - 1e-6)
    assert gains >= 2


def test_respects_a_short_budget():
    inst = busy_instance(3, n=150)
    began = time.perf_counter()
    found = prefill_search(inst, variants(inst)[0], TimeBudget.of(0.5))
    assert time.perf_counter() - began < 0.5 + 1.0  # the end (one whole schedule and its replay) included
    assert found.evaluations >= 1
    expired = prefill_search(inst, variants(inst)[0], TimeBudget.of(0.0))
    assert expired.schedule is None and expired.evaluations == 0


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_below_the_exhaustive_optimum(arrivals):
    checked = 0
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        if len(inst.requests) < 2:
            continue
        best = exhaustive_mean(inst, "ttft")
        assert best is not None
        chosen = variants(inst)
        for k in (chosen[0], *(v for v in chosen if v.preempt or v.evict)):  # plain, preempting, evicting
            found = prefill_search(inst, k, TimeBudget.of(0.2), seed=seed)
            if found.start < float("inf"):
                assert found.value >= best[0] * (1 - 1e-9), (seed, k, found.value, best[0])
                checked += 1
    assert checked >= 10


def test_solve_for_ttft_runs_the_search_and_is_never_worse():
    inst = busy_instance(5)
    res = solve(inst, {"objective": "ttft", "time_limit": 20})
    info = res.extra["scale"]["prefill_search"]
    assert info["evaluations"] >= 1 and info["value"] <= info["start"]
    values = res.extra["policy_values"]
    assert res.objective <= values["prefill-first"] + 1e-12
    if info["improved"]:
        assert res.objective <= values["prefill-search"] + 1e-12 and values["prefill-search"] < values["prefill-first"]
    rep = replay(inst, res.schedule)
    assert rep.feasible and res.objective == pytest.approx(objective_of(rep, "ttft"), rel=1e-12)


def long_output_instance(seed: int, n: int = 60):
    """``busy_instance`` with long outputs (O in 500..1500): a whole schedule takes far longer to build
    than its first tokens."""
    inst = busy_instance(seed, n=n)
    rng = random.Random(seed)
    return replace(inst, requests=tuple(replace(r, output_tokens=rng.randint(500, 1500)) for r in inst.requests))


#: Seconds added to every whole-schedule build by :func:`slow_whole_schedules` (several times a
#: plan's evaluation, so that the time a machine's load adds to a build is small beside it).
SLOW_BUILD = 0.25


def slow_whole_schedules(monkeypatch) -> None:
    """Make every whole-schedule build of the search take :data:`SLOW_BUILD` seconds more."""
    real = prefill_search_module.prefill_first_schedule

    def slow(instance, knobs, budget, keys):
        time.sleep(SLOW_BUILD)
        return real(instance, knobs, budget, keys)

    monkeypatch.setattr(prefill_search_module, "prefill_first_schedule", slow)


@pytest.mark.parametrize("seed", range(3))
def test_a_better_plan_found_is_returned_when_whole_schedules_are_slow(seed, monkeypatch):
    """The end keeps the time a whole schedule takes (decodes included, here made slower still), not
    the time of first tokens alone: whenever the search finds a better plan, its replayed schedule is
    the result."""
    slow_whole_schedules(monkeypatch)
    inst = long_output_instance(seed)
    found = prefill_search(inst, variants(inst)[0], TimeBudget.of(4.0), seed=seed)
    assert len(found.history) == 1 or found.schedule is not None, found.history
    if found.schedule is not None:
        rep = replay(inst, found.schedule)
        assert rep.feasible and found.value == objective_of(rep, "ttft") < found.start


@pytest.mark.parametrize("seed", range(2))
def test_the_best_schedule_built_on_the_way_is_kept_when_the_last_is_not_built(seed, monkeypatch):
    """Planted fault: the best plan's whole schedule at the end is never built (as if out of time).
    The result is then the best whole schedule built on the way (at a checkpoint or the end of a
    climb), never nothing when one of those was below the start. Checkpoints are made due after each
    longest build's time (not CHECKPOINT times it), so that builds on the way happen on a slow
    machine too."""
    monkeypatch.setattr(prefill_search_module, "CHECKPOINT", 1.0)
    inst = long_output_instance(seed, n=30)
    budget = TimeBudget.of(6.0)
    real, built = prefill_search_module.prefill_first_schedule, []

    def failing_at_the_end(instance, knobs, given, keys):
        if given is budget and built:  # the build at the end (the first one is the start's)
            return None
        schedule = real(instance, knobs, given, keys)
        if schedule is not None:
            built.append(objective_of(replay(instance, schedule), "ttft"))
        return schedule

    monkeypatch.setattr(prefill_search_module, "prefill_first_schedule", failing_at_the_end)
    found = prefill_search(inst, variants(inst)[0], budget, seed=seed)
    assert len(built) >= 2, "no whole schedule built on the way"
    if min(built) < found.start:
        assert found.schedule is not None and found.value == min(built)
        rep = replay(inst, found.schedule)
        assert rep.feasible and objective_of(rep, "ttft") == found.value
    else:
        assert found.schedule is None


def test_starts_from_the_evicting_twin_when_not_worse():
    """With evictions allowed, a start that reserves I + O - 1 slots is searched from its twin that
    evicts (faster to evaluate) when the twin is not worse; without evictions, never evicts."""
    inst = online_instance(1, n=40, memory=0.2)
    knobs = replace(variants(inst)[0], evict=False)
    twin = prefill_first_ttft(inst, replace(knobs, evict=True), NO_LIMIT)
    start = prefill_first_ttft(inst, knobs, NO_LIMIT)
    found = prefill_search(inst, knobs, TimeBudget.of(1.0))
    assert found.start == pytest.approx(start, rel=1e-12)
    if twin < start:  # the twin is the search's first best
        assert found.history[1][1] == pytest.approx(twin, rel=1e-12) and found.value <= twin * (1 + 1e-12)
    kept = prefill_search(inst, knobs, TimeBudget.of(1.0), evictions=False)
    assert kept.schedule is None or replay(inst, kept.schedule).metrics.evictions == 0


def test_ends_by_itself_and_climbs_from_the_next_knobs():
    """On a small instance the search ends before a long budget (its restarts without a new best end
    the climbs, the one from the start's knobs and those from the knobs next to them), never worse."""
    inst = busy_instance(2, n=4)
    start = variants(inst)[0]
    began = time.perf_counter()
    found = prefill_search(inst, start, TimeBudget.of(120.0))
    assert time.perf_counter() - began < 60.0
    assert found.value <= found.start
    assert found.evaluations > STALL * ROUNDS * (RESTARTS + 1)  # the first climb ran to its end, then more


def test_the_knob_moves_include_caps_of_whole_tiles():
    """Under a cost model with token tiles, the knob moves offer the caps of whole tiles next to the cap
    (``evict`` kept), within [MIN_CAP, min(C, P)]."""
    inst = busy_instance(0)
    tile = inst.cost_model.token_tile
    assert tile > 0
    knobs = replace(variants(inst)[0], cap=700)
    caps = {k.cap for k in knob_moves(knobs, inst)}
    assert {700 // tile * tile, (700 // tile + 1) * tile} <= caps
    assert all(k.evict == knobs.evict for k in knob_moves(knobs, inst))
    assert all(MIN_CAP <= c <= 1024 for c in caps)


def test_climbs_from_several_starts(monkeypatch):
    """Besides the start's plan, the search evaluates other starts (keys all zero: the tile fill
    switched) and climbs from them (plans with keys follow); never worse than the start, and its
    schedule replays cleanly."""
    inst = busy_instance(1)
    knobs = replace(variants(inst)[0], ratio=True, preempt=True, fill=True)
    real, plans = prefill_search_module.prefill_first_tokens, []

    def recording(instance, plan_knobs, given, keys=None):
        plans.append((plan_knobs, keys is not None and (keys.bias.any() or keys.hold.any() or keys.reach.any())))
        return real(instance, plan_knobs, given, keys)

    monkeypatch.setattr(prefill_search_module, "prefill_first_tokens", recording)
    found = prefill_search(inst, knobs, TimeBudget.of(3.0))
    bare = [k for k, keyed in plans if not keyed]
    assert knobs in bare and replace(knobs, fill=False) in bare
    other = max(j for j, (k, keyed) in enumerate(plans) if not keyed and not k.fill)
    assert sum(keyed for _, keyed in plans[other:]) >= STALL, "no climb from the other start"
    assert found.value <= found.start
    if found.schedule is not None:
        rep = replay(inst, found.schedule)
        assert rep.feasible and objective_of(rep, "ttft") == found.value


def test_a_schedule_that_does_not_replay_is_never_returned(monkeypatch):
    """Planted fault: every whole schedule after the start's loses its last batch (it no longer
    completes every request). The replay check rejects each one, so the search returns nothing better
    than its start, never a broken schedule."""
    inst = busy_instance(2)
    knobs = replace(variants(inst)[0], ratio=True, preempt=True, fill=True)
    real, broken = prefill_search_module.prefill_first_schedule, []

    def breaking(instance, plan_knobs, given, keys):
        schedule = real(instance, plan_knobs, given, keys)
        if (
            schedule is None
            or keys is None
            or not (keys.bias.any() or keys.hold.any() or keys.reach.any() or plan_knobs != knobs)
        ):
            return schedule  # the start's own schedule stays whole
        cut = Schedule(schedule.instance, schedule.batches[:-1], schedule.meta)
        assert not replay(instance, cut).feasible
        broken.append(cut)
        return cut

    monkeypatch.setattr(prefill_search_module, "prefill_first_schedule", breaking)
    found = prefill_search(inst, knobs, TimeBudget.of(3.0))
    assert broken, "no schedule but the start's was built"
    assert found.schedule is None and found.value == found.start


def test_a_reach_flag_lets_its_chunk_pass_the_cap_up_to_the_budgets():
    """With a cap of 128 tokens, a request with the reach flag takes chunks of up to min(C, P) tokens
    less the batch's other chunks; the others keep to the cap; no batch has more than min(C, P) prefill
    tokens, and the schedule replays cleanly."""
    inst = busy_instance(0)
    n, top = len(inst.requests), min(inst.limits.token_budget, inst.limits.prefill_budget)
    knobs = PrefillFirst(128)
    ids = [r.id for r in sorted(inst.requests, key=lambda r: r.arrival)]
    longest = max(range(n), key=lambda i: inst.requests[i].prompt_tokens)
    reach = np.zeros(n, dtype=bool)
    reach[ids.index(inst.requests[longest].id)] = True
    keys = PrefillKeys(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), reach)
    schedule = prefill_first_schedule(inst, knobs, NO_LIMIT, keys)
    rep = replay(inst, schedule)
    assert rep.feasible, rep.violations[:3]
    chunks = [(it.id, it.tokens, sum(x.tokens for x in b.items)) for b in schedule.batches for it in b.items]
    assert all(total <= top for _, _, total in chunks)
    assert all(tokens <= 128 for rid, tokens, _ in chunks if rid != inst.requests[longest].id)
    assert max(tokens for rid, tokens, _ in chunks if rid == inst.requests[longest].id) > 128
    assert prefill_first_ttft(inst, knobs, NO_LIMIT, keys) == pytest.approx(rep.metrics.mean_ttft, rel=1e-12)


def test_reach_moves_alone_give_clean_schedules_never_worse(monkeypatch):
    """The search with the reach move alone (cap 256 under C = P = 1024; the kicks still shift biases):
    never worse than its start, a schedule it returns replays cleanly, and some carry reach flags."""
    monkeypatch.setattr(prefill_search_module, "MIX", (0, 0, 0, 1, 0))
    flagged = 0
    for seed in range(3):
        inst = busy_instance(seed)
        found = prefill_search(inst, replace(variants(inst)[0], cap=256), TimeBudget.of(2.0), seed=seed)
        assert found.value <= found.start
        assert set(found.kept) <= {"reach"}
        if found.schedule is not None:
            rep = replay(inst, found.schedule)
            assert rep.feasible and objective_of(rep, "ttft") == found.value < found.start
            flagged += bool(found.schedule.meta["reach"])
    assert flagged >= 1

"""InferMax at scale: segment lists and their search, the KV-time count, the trajectory bound.

- Segment lists (optsched/problems/infermax/segments.py): random segment lists (orders, chunk
  sizes, evictions, start grids) on tiny and 20-request instances replay cleanly and their computed objective equals the
  replay's (makespan, latency, ttft); the search never returns worse than its start.
- KV-time count (kvtime.py): equals its definition written out as a loop; no schedule (exhaustive
  optima, every policy, random legal schedules with evictions, segment lists) has fewer non-empty
  batches; the bound never exceeds the exhaustive optimum.
- Trajectory bound (colgen.py): the pricing is the least over every trajectory (enumerated); every
  legal schedule's trajectories are points of the relaxation (KV, running and generating counts at
  most the replay's, legal transitions) and its makespan is at least W plus its overheads plus its
  trajectories' extras; the bound never exceeds the exhaustive optimum nor any schedule found on
  larger instances; the Lagrangian values never exceed the master's.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import numpy as np
import pytest

from optsched.bounds import batch_counts, least_bias, request_work
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.policies import policy_names, simulator_for
from optsched.problems.infermax import candidates, colgen, lns, scale
from optsched.problems.infermax.kvtime import kv_area, kv_time_count
from optsched.problems.infermax.lns import improve_segment_lists, starting_segment_lists
from optsched.problems.infermax.scale import kv_time_bound
from optsched.problems.infermax.segments import (
    SegmentList,
    segment_arrays,
    segments_cost,
    segments_refused,
    segments_schedule,
)
from optsched.result import replayed_objective
from optsched.schedule import replay
from tests.support.infermax import tiny_instance
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.legal_schedules import random_legal_schedule
from tests.support.solving import registered_bounds, registered_solve

REL = 1e-9
TINY = range(32)


def small_instance(seed: int, n: int = 20, share: float = 0.4, profile: str = "llama2-7b-a100"):
    """n requests with I, O in 1..24, M = ``share`` of the KV need (at least the largest request's)."""
    rng = random.Random(seed)
    reqs = [{"id": f"r{k}", "prompt_tokens": rng.randint(1, 24), "output_tokens": rng.randint(1, 24)} for k in range(n)]
    need = [r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs]
    C = rng.choice([32, 64, 4096])
    return parse_instance(
        {
            "name": f"small-{seed}",
            "cost_model": profile,
            "limits": {
                "token_budget": C,
                "prefill_budget": rng.choice([p for p in (16, 32, 64) if p <= C]),
                "kv_capacity": max(max(need), int(share * sum(need))),
                "max_running": rng.choice([None, 6]),
            },
            "requests": reqs,
        },
        f"small-{seed}",
    )


def random_segment_list(data, rng: random.Random, evictions: bool = True) -> SegmentList:
    """A random segment list: random order, chunk sizes, splits and grid."""
    n = len(data.prompt)
    segs = []
    for i in range(n):
        cuts = (
            sorted(rng.sample(range(1, int(data.output[i])), k=min(rng.choice([0, 0, 1, 2]), int(data.output[i]) - 1)))
            if evictions and data.output[i] > 1
            else []
        )
        bounds_ = [0] + cuts + [int(data.output[i])]
        q = rng.choice([1, 2, 3, 8, 1 << 30])
        segs.append([
            (i, a, b, max(1, min(q, data.P, data.C, int(data.prompt[i]) + a))) for a, b in zip(bounds_, bounds_[1:])
        ])
    order = []
    pending = [list(s) for s in segs]
    while any(pending):
        i = rng.choice([k for k in range(n) if pending[k]])
        order.append(pending[i].pop(0))
    arr = np.array(order, dtype=np.int64)
    return SegmentList(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], rng.choice([1, 1, 2, 3]))


# ----------------------------------------------------------------------------------------- segment lists


@pytest.mark.parametrize("seed", list(TINY) + [100, 101, 102])
def test_random_plans_replay_with_their_cost(seed):
    inst = tiny_instance(seed) if seed < 100 else small_instance(seed)
    data = segment_arrays(inst)
    rng = random.Random(seed)
    for _ in range(4):
        segments = random_segment_list(data, rng)
        schedule = segments_schedule(inst, data, segments)
        rep = replay(inst, schedule)
        assert rep.feasible, rep.violations[:3]
        for objective in ("makespan", "latency", "ttft"):
            value, _ = replayed_objective(inst, schedule, objective)
            assert segments_cost(data, segments, objective) == pytest.approx(value, rel=REL)


@pytest.mark.parametrize("seed", range(300))
def test_earliest_start_is_the_first_that_fits(seed):
    """The placement's skips (segments.py, earliest_start) against a scan of every start; seeds from 200
    on are a single wall (a batch nearly full, or blocked) that a skip one batch too far misses."""
    from optsched.problems.infermax import segments as segment_module

    rng = np.random.default_rng(seed)
    T, M, P, C, R = 120, 60, 8, 10, int(rng.integers(3, 8))
    kv = rng.integers(0, 45, T)
    kv[rng.random(T) < 0.2] = 0
    pre, tok, run = rng.integers(0, 6, T), rng.integers(0, 10, T), rng.integers(0, R + 1, T)
    X, q, n_dec, grid = (
        int(rng.integers(1, 12)),
        int(rng.integers(1, 8)),
        int(rng.integers(0, 30)),
        int(rng.integers(1, 4)),
    )
    n_fill = -(-X // q)
    if seed >= 200:
        grid, n_dec = 1, max(n_dec, 2)
        kv, pre, tok, run = (np.zeros(T, np.int64) for _ in range(4))
        wall = int(rng.integers(20, 60))
        if seed % 2:
            kv[wall] = M - (X + 1)  # fits only under the segment's first decode step
        else:
            tok[wall] = C  # blocked
    length = n_fill + n_dec
    t0 = int(rng.integers(0, 20)) * grid
    padded_kv = np.concatenate([kv, np.zeros(length + 2 * grid, np.int64)])
    pad = lambda a: np.concatenate([a, np.zeros(length + 2 * grid, np.int64)])  # noqa: E731
    got = segment_module.earliest_start(
        padded_kv, pad(pre), pad(tok), pad(run), t0, X, q, n_fill, length, grid, M, P, C, R
    )
    want = -1
    for t in range(t0, len(padded_kv) - length + 1, grid):
        if all(
            padded_kv[t + k] + segment_module.segment_at(X, q, k)[0] <= M
            and pad(pre)[t + k] + segment_module.segment_at(X, q, k)[1] <= P
            and pad(tok)[t + k] + max(1, segment_module.segment_at(X, q, k)[1]) <= C
            and pad(run)[t + k] < R
            for k in range(length)
        ):
            want = t
            break
    assert got == want


def test_plans_need_common_arrivals_and_the_options():
    inst = tiny_instance(3, arrivals=True)
    if len({r.arrival for r in inst.requests}) > 1:
        assert "arrive" in segments_refused(inst)
    inst = small_instance(1)
    assert segments_refused(inst) is None
    assert "no_hybrid" in segments_refused(inst, no_hybrid=True)


@pytest.mark.parametrize("part", ["starts", "annealing"])
def test_the_search_starts_no_evaluation_that_would_end_past_its_budget(monkeypatch, part):
    """Evaluations made slow (0.3 s each): the starting segment lists and the annealing stop when one
    more as slow as the slowest so far would end past the budget (a planted fault: checking only
    whether the budget has expired ends up to one evaluation late)."""
    data = segment_arrays(small_instance(7, n=24))
    start = starting_segment_lists(data, "latency", NO_LIMIT)

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return segments_cost(*args, **kwargs)

    monkeypatch.setattr(lns, "segments_cost", slow)
    began = time.perf_counter()
    budget = TimeBudget.of(1.0, start=began)
    if part == "starts":
        found = starting_segment_lists(data, "latency", budget)
        assert 1 <= len(found) <= 3
    else:
        assert list(improve_segment_lists(data, "latency", budget, start=start))
    assert time.perf_counter() - began < 1.0 + 0.1  # an evaluation may take a little more than the slowest before


def test_the_scale_phase_keeps_time_to_build_its_best_segment_list(monkeypatch):
    """Evaluations and the schedule build made slow (0.3 s each): the segment-list searches of the
    scale phase keep ``BUILD_KEPT`` evaluations' time for building the best segment list's schedule,
    so the phase ends within its budget (a planted fault: ``BUILD_KEPT = 0`` ends one build late)."""
    inst = small_instance(7, n=24)
    data = segment_arrays(inst)
    segments_schedule(inst, data, starting_segment_lists(data, "makespan", NO_LIMIT)[0][1])  # compiled before timing

    def slow(real):
        def slowed(*args, **kwargs):
            time.sleep(0.3)
            return real(*args, **kwargs)

        return slowed

    monkeypatch.setattr(lns, "segments_cost", slow(segments_cost))
    monkeypatch.setattr(scale, "segments_schedule", slow(segments_schedule))
    began = time.perf_counter()
    found = scale.scale_phase(inst, "makespan", TimeBudget.of(1.65, start=began), math.inf, [])
    assert "plan-search" in found.schedules
    assert time.perf_counter() - began < 1.65 + 0.1  # an evaluation may take a little more than the slowest before


def test_search_improves_on_its_start_and_replays():
    inst = small_instance(7, n=24)
    data = segment_arrays(inst)
    start = starting_segment_lists(data, "makespan", NO_LIMIT)
    steps = list(improve_segment_lists(data, "makespan", TimeBudget.of(2.0), start=start))
    assert steps[0].cost == start[0][0]
    costs = [s.cost for s in steps]
    assert costs == sorted(costs, reverse=True)
    value, _ = replayed_objective(inst, segments_schedule(inst, data, steps[-1].segments), "makespan")
    assert value == pytest.approx(steps[-1].cost, rel=REL)


# -------------------------------------------------------------------------------------- kv-time


def _kv_time_loop(inst) -> int:
    """The KV-time count written out from its definition (kvtime.py's docstring)."""
    I = np.array([r.prompt_tokens for r in inst.requests])
    O = np.array([r.output_tokens for r in inst.requests])
    P, C, M = inst.limits.prefill_budget, inst.limits.token_budget, inst.limits.kv_capacity
    first = -(-I // P)
    area, held, t = kv_area(I, O), 0, 0
    while held < area:
        t += 1
        h = np.where(t >= first, I + np.minimum(O, t - first + 1) - 1, 0)
        held += min(M, t * C, int(h.sum()))
    return t


def _schedules(inst, rng: random.Random, legal: int = 3):
    """Exhaustive optimum (tiny only), every policy, random legal schedules, random segment lists."""
    out = []
    for name in policy_names():
        try:
            out.append(simulator_for(name)(inst))
        except Exception:  # noqa: BLE001 - a policy that does not apply
            continue
    out += [random_legal_schedule(inst, rng).schedule for _ in range(legal)]
    if segments_refused(inst) is None:
        data = segment_arrays(inst)
        out += [segments_schedule(inst, data, random_segment_list(data, rng)) for _ in range(2)]
    return [s for s in out if replay(inst, s).feasible]


@pytest.mark.parametrize("seed", [s for s in TINY if tiny_instance(s).limits.kv_capacity is not None] + [100, 101, 103])
def test_kv_time_count_is_its_definition_and_below_every_schedule(seed):
    inst = tiny_instance(seed) if seed < 100 else small_instance(seed, share=0.3)
    assert kv_time_count(inst) == _kv_time_loop(inst)
    schedules = _schedules(inst, random.Random(seed))
    if seed < 100:
        schedules.append(exhaustive_makespan(inst)[1])
    for schedule in schedules:
        assert kv_time_count(inst) <= sum(1 for b in schedule.batches if b.items)


@pytest.mark.parametrize("seed", TINY)
def test_kv_time_bound_below_the_exhaustive_optimum(seed):
    inst = tiny_instance(seed)
    best = exhaustive_makespan(inst)[0]
    assert kv_time_bound(inst)[0] <= best * (1 + REL)


def test_kv_time_count_sees_few_requests_filling_a_large_memory():
    inst = parse_instance(
        {
            "name": "m",
            "cost_model": "llama2-7b-a100",
            "limits": {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 10000},
            "requests": [{"id": f"r{k}", "prompt_tokens": 64, "output_tokens": 1024} for k in range(32)],
        },
        "m",
    )
    assert batch_counts(inst)[0] == 1886
    assert kv_time_count(inst) == 1985


# ------------------------------------------------------------------------------ trajectory bound


def _brute_least(I, O, T, mu, rv, iv, rho, dex):
    """Least reduced cost over every trajectory of a request finishing within T batches, by
    enumerating action sequences (docstring of colgen.py)."""
    best = np.inf
    for acts in itertools.product(range(4), repeat=T):
        g, resident, cost, done = 0, False, 0.0, False
        ok = True
        for t, a in enumerate(acts):
            if done:
                if a != colgen.NONE:
                    ok = False
                    break
                continue
            if a == colgen.FILL:
                cost += (rho[g + 1] if g >= 1 else 0.0) + mu[t] * (I + g) + rv[t] + iv[t]
                g, resident = g + 1, True
            elif a == colgen.DECODE:
                if not resident or g < 1:
                    ok = False
                    break
                cost += dex[g + 1] + mu[t] * (I + g) + rv[t] + iv[t]
                g += 1
            elif a == colgen.IDLE:
                if not resident:
                    ok = False
                    break
                cost += mu[t] * (I + g - 1) + rv[t]
            else:
                resident = False
            if g == O:
                done = True
        if ok and done:
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(24))
def test_pricing_is_the_least_over_every_trajectory(seed):
    rng = np.random.default_rng(seed)
    I, O, T = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 7))
    if O > T:
        O = T
    spikes = np.where(rng.random(T) < 0.3, 50.0, 1.0)  # batches where generating costs much: idling pays
    mu, rv, iv = rng.random(T) * 0.1, rng.random(T) * 0.01, rng.random(T) * 0.1 * spikes
    scale = 1.0 if seed % 2 else 0.01  # refills dear (idling pays) or cheap (evicting pays)
    rho, dex = (
        np.concatenate([[0, 0], scale * (1 + rng.random(O - 1))]),
        np.concatenate([[0, 0], rng.random(O - 1) * 0.05]),
    )
    fin, ch_u, ch_r, ch_f = colgen.least_trajectory_cost(I, O, T, mu, rv, iv, rho, dex)
    assert fin.min() == pytest.approx(_brute_least(I, O, T, mu, rv, iv, rho, dex), rel=1e-12, abs=1e-15)
    end = int(np.argmin(fin))
    act, gen = colgen.trajectory_of(O, T, ch_u, ch_r, ch_f, end)
    kv, run, gen_items = colgen.trajectory_usage(I, act, gen)
    cost = rho[gen[(act == colgen.FILL) & (gen >= 2)]].sum() + dex[gen[act == colgen.DECODE]].sum()
    assert cost + mu @ kv + rv @ run + iv @ gen_items == pytest.approx(fin[end], rel=1e-12, abs=1e-15)


def _check_point(inst, schedule, lp):
    """The schedule's trajectories are points of LP(B) with extras within its makespan (module
    docstring of colgen.py). Returns (B, the extras of its trajectories)."""
    rep = replay(inst, schedule)
    nonempty = [j for j, b in enumerate(schedule.batches) if b.items]
    B = len(nonempty)
    trajectories = colgen.schedule_trajectories(inst, schedule, lp)
    kv = np.zeros(B)
    run = np.zeros(B)
    gen_items = np.zeros(B)
    extras = 0.0
    for ci, act in trajectories:
        c = lp.classes[ci]
        gen = colgen.generated_after(act, c.output)
        assert gen[-1] == c.output
        resident = False
        for t, a in enumerate(act):  # legal transitions
            if a in (colgen.DECODE, colgen.IDLE):
                assert resident and gen[t] >= 1
            resident = a != colgen.NONE and gen[t] < c.output
        k, r, g = colgen.trajectory_usage(c.prompt, act, gen)
        kv += k
        run += r
        gen_items += g
        extras += colgen.trajectory_extras(c, act, gen)
    assert np.all(kv <= np.array(rep.kv_used)[nonempty])
    assert np.all(run <= np.array(rep.running)[nonempty])
    assert np.all(gen_items <= inst.limits.token_budget)
    cm = inst.cost_model
    x = sum(1 for j in nonempty if rep.prefill_tokens[j] > 0)
    D = sum(1 for j in nonempty if rep.decode_items[j] > 0)
    overhead = cm.layers * (cm.base * B + cm.prefill.bias * x + cm.decode.bias * D)
    start = min(r.arrival for r in inst.requests)
    assert start + request_work(inst).sum() + overhead + extras <= rep.metrics.makespan * (1 + REL)
    return B, extras


@pytest.mark.parametrize("seed", [s for s in TINY if tiny_instance(s).limits.kv_capacity is not None] + [100, 102])
def test_every_schedule_is_a_point_of_the_trajectory_relaxation(seed):
    inst = tiny_instance(seed) if seed < 100 else small_instance(seed, n=12, share=0.3)
    lp = colgen.TrajectoryLP(inst)
    rng = random.Random(seed)
    schedules = _schedules(inst, rng, legal=6)
    if seed < 100:
        schedules.append(exhaustive_makespan(inst)[1])
    for schedule in schedules:
        B, extras = _check_point(inst, schedule, lp)
        point = lp.solve(B, NO_LIMIT)  # E(B) is at most the schedule's extras
        assert point.bound <= extras + 1e-9
        assert point.bound <= point.master + 1e-9


@pytest.mark.parametrize("seed", [s for s in TINY if tiny_instance(s).limits.kv_capacity is not None])
def test_trajectory_bound_below_the_exhaustive_optimum(seed):
    inst = tiny_instance(seed)
    best, schedule = exhaustive_makespan(inst)
    tb = colgen.trajectory_bound(inst, best * 1.05, NO_LIMIT, seed=[schedule])
    assert tb.value <= best * (1 + REL)


@pytest.mark.parametrize("seed", [100, 101, 104])
def test_trajectory_bound_below_every_schedule_found(seed):
    inst = small_instance(seed, n=16, share=0.25)
    schedules = _schedules(inst, random.Random(seed))
    values = [replay(inst, s).metrics.makespan for s in schedules]
    tb = colgen.trajectory_bound(inst, min(values), TimeBudget.of(20.0), seed=schedules[:3])
    assert tb.value <= min(values) * (1 + REL)
    assert tb.value >= request_work(inst).sum() + least_bias(inst, batch_floor=kv_time_count(inst)) - 1e-12


# --------------------------------------------------------------------------------------- wiring


def test_solve_at_scale_uses_the_time_limit_and_reports_a_proven_bound():
    from optsched.bounds import generic_bounds

    inst = small_instance(11, n=16, share=0.3)
    res = registered_solve("infermax", inst, {"time_limit": 8.0})
    assert "solved at scale" in res.extra["stopped"] and "scale" in res.extra
    value, rep = replayed_objective(inst, res.schedule, "makespan")
    assert rep.feasible and value == pytest.approx(res.objective, rel=REL)
    assert res.objective <= min(res.extra["policy_values"].values()) * (1 + REL)
    assert max(b.value for b in generic_bounds(inst)) <= res.bound <= res.objective * (1 + REL)
    assert res.bound >= kv_time_bound(inst)[0] * (1 - REL)
    assert res.wall_time < 8.0 + 5.0


def test_solve_at_scale_keeps_time_for_the_replays_after_its_scale_phase(monkeypatch):
    """Every replay of a candidate made slow (0.25 s): the solve keeps ``TAIL_REPLAYS`` replays'
    time after the scale phase, for offering its schedules, and ends within its limit (a planted
    fault: ``TAIL_REPLAYS = 0`` ends the solve those replays late)."""
    inst = small_instance(11, n=16, share=0.3)

    def slow(*args, **kwargs):
        time.sleep(0.25)
        return replay(*args, **kwargs)

    monkeypatch.setattr(candidates, "replay", slow)
    began = time.perf_counter()
    res = registered_solve("infermax", inst, {"time_limit": 3.0})
    assert "solved at scale" in res.extra["stopped"] and "plan-search" in res.extra["policy_values"]
    assert time.perf_counter() - began < 3.0 + 0.15


def test_bound_command_bounds_of_infermax():

    inst = small_instance(12, n=14, share=0.25)
    found = {b.name: b for b in registered_bounds("infermax", inst, {"method": "trajectory", "time_limit": 5.0})}
    assert found["kv-time"].valid and found["trajectory"].valid
    assert found["trajectory"].value >= found["kv-time"].value * (1 - REL)
    best = min(replay(inst, s).metrics.makespan for s in _schedules(inst, random.Random(0), legal=0))
    assert found["trajectory"].value <= best * (1 + REL)


def test_report_runs_the_solver_at_any_size():
    from importlib import import_module

    from optsched.problems.infermax.solve import SOLVE_MODULES
    from optsched.report.gather import build_report

    for module in SOLVE_MODULES:  # the solve's start-up (numba kernels compiled at import) is not the point here
        import_module(module)
    inst = small_instance(13, n=24, share=0.3)
    report = build_report(inst, time_limit=25.0)
    assert report.solver is not None and report.solver.result is not None
    assert report.best[0] == "solver:infermax"
    assert report.best_bound.value >= kv_time_bound(inst)[0] * (1 - REL)
    capped = build_report(inst, time_limit=10.0, solve_max_requests=10)
    assert capped.solver.result is None and "not run" in capped.solver.message

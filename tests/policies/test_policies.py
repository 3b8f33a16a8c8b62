"""Every baseline policy produces schedules that replay cleanly (docs/schedule.md).

Instances: an offline 64-request InferMax grid (I, O in {1, 64/32, 128/4, 1024}), the same grid
under a small KV capacity that forces evictions, a seeded random online instance under tight
limits (small M, R_max, P < C), and a 300-request slice of the real splitwise_conv trace.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from optsched import Instance, Limits, Request, load_cost_model, load_trace_csv, replay
from optsched.instance import available_instances, load_instance
from optsched.policies import POLICIES, policy_names, reads_slo, simulator_for
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.workload import WorkloadTransforms, apply_transforms
from tests.support.paths import shared_data

CONV = (shared_data() or Path("../shared/data")) / "traces" / "splitwise_conv.csv"
COST = load_cost_model("llama2-7b-a100")
ALL = sorted(POLICY_CONFIGS)  # the unified scheduler's policies (other modules register more)


def grid_instance(kv_capacity: int = 100_000, max_running: int | None = None) -> Instance:
    """64 offline requests: 4 copies of the 4 x 4 grid I in {1,64,128,1024} x O in {1,4,32,1024}."""
    reqs = [
        Request(f"I{i}-O{o}-{k}", 0.0, i, o) for k in range(4) for i in (1, 64, 128, 1024) for o in (1, 4, 32, 1024)
    ]
    return Instance("grid64", COST, Limits(4096, 4096, kv_capacity, max_running), tuple(reqs))


def random_online_instance(seed: int, n: int = 120) -> Instance:
    """Online arrivals under tight limits: small M (evictions), R_max, P < C."""
    rng = random.Random(seed)
    kv = 3000
    t = 0.0
    reqs = []
    for k in range(n):
        t += rng.expovariate(8.0)
        prompt = rng.randint(1, 1500)
        out = rng.randint(1, min(300, kv - prompt + 1))
        reqs.append(Request(f"r{k}", round(t, 6), prompt, out))
    return Instance(f"rand{seed}", COST, Limits(1024, 384, kv, 16), tuple(reqs))


def assert_replays(instance: Instance, name: str) -> None:
    if reads_slo(name):  # slo-budget schedules by the requests' TTFT and TPOT targets
        instance = apply_transforms(instance, WorkloadTransforms(slo_ttft=1.0, slo_tpot=0.05))
    schedule = simulator_for(name)(instance)
    result = replay(instance, schedule)
    assert result.feasible, f"{name}: {result.violations[:5]}"
    if POLICY_CONFIGS[name].eviction_free:
        assert result.metrics.evictions == 0


def test_registry_lists_every_policy_and_ef_twin():
    base = ["vllm", "vllm-hy", "sarathi", "sarathi-pc", "sarathi-nocp", "sarathi-nohy", "rank-org", "rank-i", "rank-o"]
    base += ["mc-sf", "srpf", "vllm-v1", "slo-budget", "slo-budget-fcfs", "slo-shed", "slo-lazy"]
    assert sorted(base + [b + "-ef" for b in base]) == ALL
    assert set(ALL) <= set(policy_names())
    assert all(POLICIES[n].startswith("optsched.policies.engine:") for n in ALL)


@pytest.mark.parametrize("name", ALL)
def test_grid_replays(name):
    assert_replays(grid_instance(), name)


@pytest.mark.parametrize("name", ALL)
def test_grid_small_memory_replays(name):
    assert_replays(grid_instance(kv_capacity=2200, max_running=24), name)


@pytest.mark.parametrize("name", ALL)
def test_random_online_tight_limits_replay(name):
    for seed in (1, 2):
        assert_replays(random_online_instance(seed), name)


@pytest.mark.parametrize("name", ALL)
def test_splitwise_slice_replays(name):
    if not CONV.exists():
        pytest.skip(f"trace data absent: {CONV}")
    inst = load_trace_csv(CONV, "llama2-7b-a100", Limits(4096, 4096, 100_000, None), first=300)
    assert_replays(inst, name)


def test_small_memory_forces_evictions():
    """The small-M grid is a real eviction test: the evicting policies do evict there."""
    inst = grid_instance(kv_capacity=2200, max_running=24)
    for name in ("vllm", "sarathi"):
        assert replay(inst, simulate(inst, name)).metrics.evictions > 0


#: The policies that target mean latency (mc-sf) and mean TTFT (srpf), with their eviction-free twins.
LATENCY_POLICIES = ["mc-sf", "mc-sf-ef", "srpf", "srpf-ef"]


@pytest.mark.parametrize("name", LATENCY_POLICIES)
@pytest.mark.parametrize("shipped", available_instances())
def test_latency_policies_replay_on_every_shipped_instance(name, shipped):
    assert_replays(load_instance(shipped), name)


@pytest.mark.parametrize("name", LATENCY_POLICIES)
def test_latency_policies_replay_on_the_full_conversation_trace(name):
    if not CONV.exists():
        pytest.skip(f"trace data absent: {CONV}")
    inst = load_trace_csv(CONV, "llama2-7b-h200", Limits(4096, 4096, 200_000, 256))
    assert len(inst.requests) > 19_000
    assert_replays(inst, name)


def test_srpf_serves_the_shortest_waiting_prompt_first():
    """Three requests waiting at t = 0, room for one prompt per batch: the first tokens come
    shortest prompt first under srpf and in arrival order under vllm."""
    reqs = (Request("long", 0.0, 30, 2), Request("mid", 0.0, 20, 2), Request("short", 0.0, 10, 2))
    inst = Instance("srpf", COST, Limits(30, 30, 1000, None), reqs)
    firsts = {
        name: [item.id for batch in simulate(inst, name).batches for item in batch.items if item.tokens > 1]
        for name in ("srpf", "vllm")
    }
    assert firsts == {"srpf": ["short", "mid", "long"], "vllm": ["long", "mid", "short"]}


def test_mc_sf_admits_by_the_kv_look_ahead():
    """M = 40: a running request peaking at 30 KV slots in 20 iterations leaves room now but not at
    its peak for a second one that would still run then; MC-SF holds the second back, while the
    reservation rule of sarathi (prompt only) admits it and must evict later."""
    reqs = (Request("a", 0.0, 11, 20), Request("b", 0.0, 12, 20))
    inst = Instance("la", COST, Limits(64, 64, 40, None), reqs)
    mcsf = replay(inst, simulate(inst, "mc-sf"))
    sarathi = replay(inst, simulate(inst, "sarathi"))
    assert mcsf.feasible and sarathi.feasible
    assert mcsf.metrics.evictions == 0 < sarathi.metrics.evictions

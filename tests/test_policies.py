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
from optsched.policies import POLICIES, policy_names, simulator_for
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
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
    schedule = simulator_for(name)(instance)
    result = replay(instance, schedule)
    assert result.feasible, f"{name}: {result.violations[:5]}"
    if POLICY_CONFIGS[name].eviction_free:
        assert result.metrics.evictions == 0


def test_registry_lists_every_policy_and_ef_twin():
    base = ["vllm", "vllm-hy", "sarathi", "sarathi-pc", "sarathi-nocp", "sarathi-nohy", "rank-org", "rank-i", "rank-o"]
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

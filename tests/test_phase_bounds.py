"""``ttft-plus-rest`` and ``block-ttft-plus-rest`` (optsched/phase_bounds.py): a mean-TTFT bound plus
each request's tokens after the first, alone.

- both are never above the exhaustive optimum of mean latency on random tiny instances (with and
  without arrivals), nor above any policy's replayed mean latency on random instances of 20 to 200
  requests under load and on long prompts;
- the proof's condition holds request by request: in every policy's replayed schedule (evictions
  included) each request's time from its first token to its finish is at least its rest;
- on a burst of long prompts (the prefill queue) the block one is above every other latency bound;
- planted invalid versions (the rest counted with the prefill alone again; the rest 10 % longer)
  are caught, by the optimum, the policies and the per-request condition.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import optsched.phase_bounds as pb
from optsched.bounds import critical_path_times
from optsched.instance import parse_instance
from optsched.load_bounds import proven_bounds
from optsched.phase_bounds import rest_after_first_token
from optsched.policies import policy_names, reads_slo, simulator_for
from optsched.result import replayed_objective
from tests.support.bound_checks import TINY, loaded_instance, optimum, policy_values
from tests.support.infermax import tiny_instance
from tests.support.solving import registered_bounds
from tests.test_load_bounds import long_prompt_instance

NAMES = ("ttft-plus-rest", "block-ttft-plus-rest")
LOADED = [(20, 1), (50, 2), (120, 3), (200, 4), (80, 5), (30, 6)]


def phase_values(inst) -> dict[str, float]:
    """The two bounds' values: the solver-free one and the InferMax bounder's block one."""
    found = {b.name: b for b in proven_bounds(inst, "latency")}
    found.update({b.name: b for b in registered_bounds("infermax", inst, {"objective": "latency"})})
    assert all(found[name].valid for name in NAMES)
    return {name: found[name].value for name in NAMES}


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        best = optimum(inst, "latency")
        for name, value in phase_values(inst).items():
            assert 0.0 < value <= best * (1 + 1e-9), (seed, name, value, best)


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    least = min(policy_values(inst, "latency").values())
    for name, value in phase_values(inst).items():
        assert value <= least * (1 + 1e-9), (name, value, least)


def rest_margins(inst, rest: np.ndarray) -> list[float]:
    """Per policy, the least (finish - first token) - rest over the requests of its replayed schedule."""
    out = []
    for policy in (n for n in policy_names() if not reads_slo(n)):
        _, rep = replayed_objective(inst, simulator_for(policy)(inst), "latency")
        spans = np.array([rep.outcomes[r.id].finish - rep.outcomes[r.id].first_token for r in inst.requests])
        out.append(float(np.min(spans - rest * (1 - 1e-9))))
    return out


@pytest.mark.parametrize("n, seed", [(50, 2), (120, 3)])
def test_the_rest_holds_request_by_request(n: int, seed: int) -> None:
    """The proof's condition F_i - FT_i >= rest_i in every policy's schedule, evictions included."""
    for inst in (loaded_instance(n, seed), long_prompt_instance(n // 2, seed)):
        rest = rest_after_first_token(inst)
        assert np.all(rest >= 0.0) and rest.max() > 0.0
        assert min(rest_margins(inst, rest)) >= 0.0


def burst_instance(n: int, seed: int):
    """N prompts of 1,000 to 4,000 tokens with 1 to 24 output tokens, all arriving within 50 ms, under
    the H200 profile and the limits of the splitwise slices (C = P = 4096): the prefill queue of a burst."""
    rng = random.Random(seed)
    reqs = [
        {
            "id": f"r{k}",
            "prompt_tokens": rng.randint(1000, 4000),
            "output_tokens": rng.randint(1, 24),
            "arrival": round(rng.uniform(0.0, 0.05), 6),
        }
        for k in range(n)
    ]
    limits = {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 200_000, "max_running": 256}
    data = {"name": f"burst-{n}-{seed}", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs}
    return parse_instance(data, data["name"])


@pytest.mark.parametrize(
    "make, n, seed", [(long_prompt_instance, 40, 1), (long_prompt_instance, 100, 2), (burst_instance, 20, 1)]
)
def test_on_long_prompts_never_above_any_policy(make, n: int, seed: int) -> None:
    inst = make(n, seed)
    least = min(policy_values(inst, "latency").values())
    found = phase_values(inst)
    assert found["ttft-plus-rest"] <= found["block-ttft-plus-rest"] * (1 + 1e-9) <= least * (1 + 1e-9), (found, least)


def test_a_burst_of_long_prompts_lifts_it_above_every_other_bound() -> None:
    inst = burst_instance(20, 1)
    found = phase_values(inst)
    others = proven_bounds(inst, "latency") + registered_bounds("infermax", inst, {"objective": "latency"})
    rivals = [b.value for b in others if b.name not in (*NAMES, "phase-latency", "finish-index")]  # those couple it
    assert found["block-ttft-plus-rest"] > max(rivals) * (1 + 1e-3)


def prefill_twice(inst) -> np.ndarray:
    """Planted fault: the rest is each request's whole least time alone, its prefill counted again."""
    return critical_path_times(inst)


def rest_ten_percent_longer(inst) -> np.ndarray:
    """Planted fault: every request's rest 10 % longer than its tokens after the first take alone."""
    return 1.1 * rest_after_first_token(inst)


@pytest.mark.parametrize("fault", [prefill_twice, rest_ten_percent_longer])
def test_a_planted_invalid_bound_is_caught(fault, monkeypatch) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(pb, "rest_after_first_token", fault)
        caught = 0
        for arrivals in (False, True):
            for seed in TINY:
                inst = tiny_instance(seed, arrivals=arrivals)
                caught += max(phase_values(inst).values()) > optimum(inst, "latency") * (1 + 1e-9)
        for n, seed in LOADED[:4]:
            inst = loaded_instance(n, seed)
            caught += max(phase_values(inst).values()) > min(policy_values(inst, "latency").values()) * (1 + 1e-9)
    inst = loaded_instance(50, 2)
    caught_here = min(rest_margins(inst, fault(inst))) < 0.0
    assert caught and caught_here, (caught, caught_here)

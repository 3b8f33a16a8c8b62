"""The least prefill alone F(X) with the context term priced, and the TTFT bounds that read it.

F(X) (:func:`optsched.bounds.prefill_alone_time`) counts ``pc sum_j c_j S_{j-1}`` of the chunks
that build a prompt's KV from empty; every bound sorted against arrival plus F (``prefill-alone``,
``srpt-prefill``, ``srpt-prefill-flush``, ``block-flush-ttft``, ``block-batch-ttft``, the critical
path) reads it. Under cost models with a dear context term and a tile term:

- every mean-TTFT and mean-latency bound is at most the exhaustive optimum on random tiny
  instances, with and without arrivals, and F is above its context-free value on some;
- every mean-TTFT bound is at most every policy's replayed mean TTFT on random loaded instances of
  20 to 200 requests;
- a planted invalid F (the context term counted twice) is caught by those tests.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from optsched.bounds import prefill_alone_time
from optsched.costmodel import load_cost_model
from optsched.instance import parse_instance
from optsched.load_bounds import load_bounds
from optsched.ttft_batch_bounds import block_bounds
from tests.support.bound_checks import optimum, policy_values
from tests.test_load_bounds import tiny_bounds

#: Profiles whose context term matters on tiny prompts: chunking pays (pq >= pc / 2, with a tile of
#: two tokens), chunking never pays (pq < pc / 2), and the H200 profile.
MODELS = (
    {
        "base": 1e-3,
        "per_token": 1e-4,
        "token_tile": 2,
        "per_tile": 5e-4,
        "prefill": {"per_token_sq": 2e-3, "per_ctx": 2e-3},
        "decode": {"bias": 1e-4, "per_kv": 1e-4},
    },
    {"base": 1e-3, "per_token": 1e-4, "prefill": {"per_token_sq": 1e-4, "per_ctx": 2e-3}, "decode": {"per_kv": 1e-4}},
    "llama2-7b-h200",
)


def context_instance(rng: random.Random, model, n: int, arrivals: bool, most: int = 4, rate: float = 0.0):
    """n requests (I in 1..most, O in 1..3) under ``model``; arrivals at random (``rate`` > 0: Poisson)."""
    t, reqs = 0.0, []
    for k in range(n):
        t += rng.expovariate(rate) if rate else 0.0
        arrival = t if rate else (rng.choice([0.0, 0.0, 0.003, 0.011]) if arrivals else 0.0)
        reqs.append({"id": f"r{k}", "prompt_tokens": rng.randint(1, most), "output_tokens": rng.randint(1, 3),
                     "arrival": round(arrival, 6)})  # fmt: skip
    C = rng.choice([3, 4, 6, 4096]) if most <= 4 else rng.choice([64, 256, 2048])
    P = rng.choice([p for p in (2, 3, 4, 32, 64, 4096) if p <= C])
    return parse_instance(
        {
            "name": f"context-{n}",
            "cost_model": model,
            "limits": {"token_budget": C, "prefill_budget": P, "max_running": rng.choice([1, 2, None])},
            "requests": reqs,
        },
        "context",
    )


def tiny_cases() -> list:
    """(instance, exhaustive TTFT optimum, exhaustive latency optimum) of random tiny instances."""
    rng = random.Random(34)
    out = []
    for model in MODELS:
        for arrivals in (False, True):
            for _ in range(4):
                inst = context_instance(rng, model, rng.randint(1, 3), arrivals)
                out.append((inst, optimum(inst, "ttft"), optimum(inst, "latency")))
    return out


@pytest.fixture(scope="module")
def tiny() -> list:
    return tiny_cases()


def alone_times(inst) -> np.ndarray:
    """F(I_i) of every request of ``inst``, seconds."""
    return np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])


def scaled_context(inst, scale: float):
    """``inst`` under its cost model with the context term times ``scale`` (0: left out; 2: a planted
    fault, each chunk priced as if it read twice the KV before it)."""
    data = inst.to_dict()
    cm = load_cost_model(data["cost_model"]).to_dict()
    cm.setdefault("prefill", {})["per_ctx"] = scale * inst.cost_model.prefill.per_ctx
    data["cost_model"] = cm
    return parse_instance(data, "scaled")


def test_every_bound_is_at_most_the_exhaustive_optimum(tiny) -> None:
    above = 0
    for inst, ttft, latency in tiny:
        for name, value in tiny_bounds(inst, "ttft").items():
            assert value <= ttft * (1 + 1e-9), (inst.to_dict(), name, value, ttft)
        for name, value in tiny_bounds(inst, "latency").items():
            assert value <= latency * (1 + 1e-9), (inst.to_dict(), name, value, latency)
        without = alone_times(scaled_context(inst, 0.0))
        above += bool(np.any(alone_times(inst) > without * (1 + 1e-9)))
    assert above >= 6


def test_a_planted_context_term_counted_twice_is_caught(tiny) -> None:
    """The mean of F under twice the context term: above the exhaustive optimum of some instance."""
    caught = sum(alone_times(scaled_context(inst, 2.0)).mean() > ttft * (1 + 1e-9) for inst, ttft, _ in tiny)
    assert caught


@pytest.mark.parametrize("n, seed", [(20, 1), (60, 2), (120, 3), (200, 4)])
def test_never_above_any_policy_on_loaded_instances(n: int, seed: int) -> None:
    rng = random.Random(seed)
    model = MODELS[seed % len(MODELS)]
    inst = context_instance(rng, model, n, True, most=64, rate=rng.choice([200.0, 1000.0]))
    least = min(policy_values(inst, "ttft").values())
    found = load_bounds(inst, "ttft") + block_bounds(inst)
    assert {b.name for b in found} >= {"srpt-prefill", "srpt-prefill-flush", "block-batch-ttft"}
    for b in found:
        assert b.value <= least * (1 + 1e-9), (b.name, b.value, least)

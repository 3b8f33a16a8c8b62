"""The serial schedule's prompt chunks (:func:`lone_prefill_chunks`): the least time alone among
equal splits and full chunks, never below the bound on a prompt alone, and a one-request instance
proven optimal at once."""

from __future__ import annotations

import random
from itertools import accumulate

import pytest

from optsched.bounds import prefill_alone_time
from optsched.costmodel import available_profiles, load_cost_model
from optsched.instance import parse_instance
from optsched.problems.infermax.schedules import lone_prefill_chunks, serial_schedule
from optsched.result import Status
from optsched.schedule import replay
from tests.support.solving import solver

solve = solver("infermax")
PROFILES = sorted(available_profiles())


def alone_time(cost, chunks) -> float:
    """The chunks prefilled alone, one batch each, in order (the cost model's own batch times)."""
    return sum(cost.prefill_time(c, cached) for c, cached in zip(chunks, accumulate(chunks, initial=0)))


def equal_split(tokens: int, k: int) -> list[int]:
    return [tokens // k + 1] * (tokens % k) + [tokens // k] * (k - tokens % k)


def one_request(profile: str, prompt: int, output: int, cap: int) -> object:
    data = {
        "name": "one",
        "cost_model": profile,
        "limits": {"token_budget": cap, "prefill_budget": cap},
        "requests": [{"id": "r0", "arrival": 0.0, "prompt_tokens": prompt, "output_tokens": output}],
    }
    return parse_instance(data, "one")


@pytest.mark.parametrize("profile", PROFILES)
def test_chunks_are_the_least_of_the_splits_and_above_the_bound(profile: str) -> None:
    cost = load_cost_model(profile)
    rng = random.Random(profile)
    for _ in range(40):
        tokens, cap = rng.randint(1, 3000), rng.choice([1, 3, 16, 128, 512, 4096])
        chunks = lone_prefill_chunks(cost, tokens, cap)
        assert sum(chunks) == tokens and all(1 <= c <= cap for c in chunks)
        time = alone_time(cost, chunks)
        full = [cap] * (tokens // cap) + ([tokens % cap] if tokens % cap else [])
        splits = [equal_split(tokens, k) for k in range(-(-tokens // cap), min(tokens, 400) + 1)]
        assert all(time <= alone_time(cost, other) * (1 + 1e-12) for other in [full, *splits])
        inst = one_request(profile, tokens, 1, cap)
        assert time >= prefill_alone_time(inst, tokens) * (1 - 1e-12)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("objective", ["latency", "ttft"])
def test_one_request_above_the_budget_is_proven_optimal_at_once(profile: str, objective: str) -> None:
    """One request whose prompt needs several chunks: the serial schedule in its least chunks meets
    the bound of the request alone, so the solve is optimal without a search."""
    inst = one_request(profile, 4808, 3, 4096)
    res = solve(inst, {"objective": objective, "time_limit": 30})
    assert res.status == Status.OPTIMAL
    serial = replay(inst, serial_schedule(inst))
    assert serial.feasible
    value = serial.metrics.mean_latency if objective == "latency" else serial.metrics.mean_ttft
    assert value == pytest.approx(res.objective, rel=1e-12)

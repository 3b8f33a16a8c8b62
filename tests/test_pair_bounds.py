"""The pairwise-interference bounds (optsched/pair_bounds.py) against exhaustive search and policies.

- never above the exhaustive optimum of mean latency / mean TTFT on random tiny instances, with and
  without arrivals, and above the per-request bounds somewhere;
- never above any policy's replayed value on random instances of 20 to 200 requests under load;
- planted invalid versions (a request waiting for another pays its batches' overheads in full, in
  pair-interference or pair-wait, or 10 % above) are caught by those checks;
- the closed-form token sums agree with term-by-term sums, the lone-time lines stay below the
  critical path, and leaving pairs out only lowers the bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optsched.pair_bounds as pb
from optsched.bounds import critical_path_times
from optsched.pair_bounds import pair_bounds, pair_interference, pair_interference_prefill, pair_wait
from tests.support.bound_checks import TINY, loaded_instance, optimum, policy_values
from tests.support.infermax import tiny_instance
from tests.support.profiles import small_instances


def test_the_closed_form_sums_agree_with_term_by_term_sums() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        f = (rng.uniform(-1, 1), rng.choice([0.0, rng.uniform(-1, 1)]))
        g = (rng.uniform(-1, 1), rng.choice([f[1], rng.uniform(-1, 1)]))
        p, q = rng.integers(0, 40, size=2)
        x = np.arange(p, q, dtype=np.float64)
        want = np.minimum(f[0] + f[1] * x, g[0] + g[1] * x).sum()
        got = pb.min_line_sum((np.array([f[0]]), np.array([f[1]])), (np.array([g[0]]), np.array([g[1]])), p, q)[0]
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_the_lone_time_lines_are_at_most_the_critical_path() -> None:
    inst = loaded_instance(50, 2)
    prefix = pb.lone_prefix(inst)
    k = np.arange(len(inst.requests))
    whole = prefix.alone(prefix.outputs, k)
    A = critical_path_times(inst)
    assert np.all(whole <= A * (1 + 1e-12)) and np.all(whole >= 0.9 * A)
    assert np.all(prefix.rest(prefix.outputs - 1.0, k) == 0.0)
    assert np.all(np.diff(prefix.alone(np.arange(0.0, 8.0), np.zeros(8, dtype=int))) >= 0)


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    gains = {"latency": 0, "ttft": 0}
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        for objective, plain in (("latency", critical_path_times(inst).mean()), ("ttft", None)):
            best = optimum(inst, objective)
            found = pair_bounds(inst, objective)
            assert len(found) == (2 if objective == "latency" else 1)
            for bound in found:
                assert bound.valid and bound.value <= best * (1 + 1e-9), (seed, objective, bound, best)
            if plain is not None:
                gains[objective] += max(b.value for b in found) > plain * (1 + 1e-6)
    assert gains["latency"] >= 3  # the pairs add to the critical path on several instances


def overhead_unshared(inst) -> float:
    """An invalid latency bound: of two requests arriving together, the one finishing later pays the
    other's whole lone time (its batches' overheads included, as if the two never shared a batch)."""
    A = critical_path_times(inst)
    release = np.array([r.arrival for r in inst.requests])
    i, j = pb.overlapping_pairs(release, A)
    together = release[i] == release[j]
    return (A.sum() + np.minimum(A[i], A[j])[together].sum()) / len(A)


def planted(inst, fault: str, monkeypatch) -> float:
    if fault == "overhead-unshared":
        return overhead_unshared(inst)
    if fault == "never-shared":  # pair-wait where the later request always waits, a whole overhead a batch
        with monkeypatch.context() as patch:
            patch.setattr(pb, "_share_cost", lambda units, *_, v: units * v)
            return pair_wait(inst, split=np.ones(len(inst.requests)))
    return 1.1 * pair_interference(inst)


@pytest.mark.parametrize("fault", ["overhead-unshared", "never-shared", "ten-percent"])
def test_a_planted_invalid_bound_is_caught(fault: str, monkeypatch) -> None:
    caught = 0
    for arrivals in (False, True):
        for seed in TINY:
            inst = tiny_instance(seed, arrivals=arrivals)
            caught += planted(inst, fault, monkeypatch) > optimum(inst, "latency") * (1 + 1e-9)
    assert caught


@pytest.mark.parametrize("n, seed", [(20, 1), (50, 2), (120, 3), (200, 4), (80, 5), (30, 6)])
def test_never_above_any_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    for objective in ("latency", "ttft"):
        values = policy_values(inst, objective)
        for bound in pair_bounds(inst, objective):
            assert bound.value <= min(values.values()) * (1 + 1e-9), (objective, bound, values)


def test_fewer_pairs_only_lower_the_bound(monkeypatch) -> None:
    inst = loaded_instance(200, 4)
    full = pair_interference(inst), pair_interference_prefill(inst)
    monkeypatch.setattr(pb, "MAX_PAIRS", 50)
    capped = pair_interference(inst), pair_interference_prefill(inst)
    assert capped[0] <= full[0] and capped[1] <= full[1]  # (pair-wait's overhead shares grow with fewer pairs)
    assert capped[0] >= critical_path_times(inst).mean() * (1 - 1e-9)


def test_requests_of_one_output_token() -> None:
    """No decode tokens at all (no per-token entries): the bounds are the critical path plus the pairs."""
    from optsched.instance import parse_instance

    reqs = [{"id": f"r{k}", "prompt_tokens": 3 + k, "output_tokens": 1, "arrival": 0.001 * (k // 2)} for k in range(4)]
    inst = parse_instance(
        {"name": "ones", "cost_model": "llama2-7b-h200", "limits": {"token_budget": 8}, "requests": reqs}, "ones"
    )
    best = optimum(inst, "latency")
    found = pair_bounds(inst, "latency")
    assert [b.name for b in found] == ["pair-interference", "pair-wait"]
    assert all(critical_path_times(inst).mean() * (1 - 1e-9) <= b.value <= best * (1 + 1e-9) for b in found[:1])
    assert all(b.value <= best * (1 + 1e-9) for b in found)


#: Profiles with every optional term large enough to matter on tiny instances: tiles of 2 tokens, the
#: longest decode context, the prefill context; and the H200 profile's coefficients.
SHAPED = (
    {
        "base": 0.003,
        "per_token": 6e-6,
        "token_tile": 2,
        "per_tile": 0.002,
        "prefill": {"bias": 0.0005, "per_token": 1e-5, "per_token_sq": 2e-6, "per_ctx": 3e-6},
        "decode": {"bias": 0.0002, "per_token": 2e-5, "per_kv": 2e-4, "per_max_kv": 5e-4},
    },
    {
        "base": 3.121e-03,
        "per_token": 6.031e-06,
        "token_tile": 128,
        "per_tile": 1.777e-03,
        "prefill": {"per_token_sq": 1.411e-09, "per_ctx": 1.542e-09},
        "decode": {"per_token": 1.768e-05, "per_kv": 1.796e-07, "per_max_kv": 4.987e-07},
    },
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=small_instances(st.sampled_from(SHAPED)))
def test_never_above_the_exhaustive_optimum_under_the_optional_terms(inst) -> None:
    for objective in ("latency", "ttft"):
        best = optimum(inst, objective)
        for bound in pair_bounds(inst, objective):
            assert bound.value <= best * (1 + 1e-9), (objective, bound, best)

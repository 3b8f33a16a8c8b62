"""The ``phase-latency`` bound (optsched/phase_latency.py): proven, exact where the theory says so.

- its programme is the exact least sum of completions of equal jobs released together (the lockstep
  toy of ``tests/benchmarks/bench_lockstep_toy.py``, dynamic programming over every batch);
- the bound is at most the exhaustive optimum on random tiny instances, with and without arrivals
  (those of ``tests/support/bound_checks.py`` and ones whose item terms are large beside the batch
  overhead, where it is above every other bound), and at most every policy's replayed mean latency
  on random instances of 20 to 200 requests;
- a planted invalid variant (every token counted at the level, no carry) is caught by those checks;
- ``optsched bound --objective latency`` lists it, and on equal requests released together it is
  above every other bound.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from optsched.budget import TimeBudget
from optsched.instance import parse_instance
from optsched.load_bounds import load_bounds, lp_bounds, prompt_attention_extra, proven_bounds
from optsched.phase_latency import counted_items, least_finish_sum, lockstep_finishes, phase_latency
from tests.benchmarks.bench_lockstep_toy import least_sum
from tests.support.bound_checks import loaded_instance, optimum, policy_values, refutations
from tests.support.solving import registered_bounds
from tests.test_phase_bounds import burst_instance


def phase_value(inst) -> float:
    """The bound's value on ``inst`` (seconds; 0 where it gives none)."""
    found = phase_latency(inst, prompt_attention_extra(inst, inst.columns[1]), seconds=30.0)
    return 0.0 if found is None else found.value


@pytest.mark.parametrize("N, O, a, c", [(2, 5, 1.0, 0.3), (2, 5, 1.0, 2.0), (3, 4, 1.0, 0.5), (6, 5, 1.0, 0.3)])
def test_the_programme_is_exact_on_the_lockstep_toy(N: int, O: int, a: float, c: float) -> None:
    n = np.full(N, float(O))
    value = least_finish_sum(n, np.zeros(N), np.zeros(N), a, c, 10.0)
    assert value == pytest.approx(least_sum(N, O, a, c), rel=1e-5)
    assert value <= least_sum(N, O, a, c)
    best_feasible = min(lockstep_finishes(n, np.zeros(N), a, c, one).sum() for one in (False, True))
    assert value <= best_feasible * (1 + 1e-9)


def test_two_equal_jobs_run_in_lockstep_or_in_turn() -> None:
    """min(2 a O + 4 c O, 3 a O + 3 c O) (module docstring)."""
    for a, c in [(1.0, 0.2), (1.0, 1.5), (0.3, 0.3)]:
        value = least_finish_sum(np.array([4.0, 4.0]), np.zeros(2), np.zeros(2), a, c, 10.0)
        assert value == pytest.approx(min(8 * a + 16 * c, 12 * a + 12 * c), rel=1e-5)


def test_counted_items_carry_terms_forward() -> None:
    """n_j: the most items whose carried terms reach the level, by hand."""
    terms, lengths = np.array([[5.0, 1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 3.0, 0.0]]), np.array([5.0, 4.0])
    assert counted_items(terms, lengths, 2.0).tolist() == [4.0, 1.0]  # 5, 3+1, 2+1, 1+1 | the last only: one a batch
    assert counted_items(terms, lengths, 0.4).tolist() == [5.0, 4.0]


def linear_profile(base: float, per_token: float, per_kv: float, per_tile: float = 0.0) -> dict:
    """An inline profile whose item terms are large beside the batch overhead (where coupling bites)."""
    zero = {"bias": 0.0, "per_token": 0.0, "per_token_sq": 0.0, "per_kv": 0.0}
    out = {"name": "coupled", "layers": 1, "base": base, "per_token": per_token, "prefill": zero}
    out["decode"] = zero | {"per_kv": per_kv}
    return out | ({"token_tile": 2, "per_tile": per_tile} if per_tile else {})


PROFILES = (linear_profile(1.0, 0.6, 0.0), linear_profile(1.0, 0.3, 0.1), linear_profile(0.5, 0.2, 0.05, 0.4))


def coupled_instance(seed: int):
    """2 or 3 requests (I in 1..2, O in 2..3, arrivals in {0, 0.5, 1, 2}) under a :data:`PROFILES` profile."""
    rng = random.Random(seed)
    reqs = [
        {"id": f"r{k}", "prompt_tokens": rng.randint(1, 2), "output_tokens": rng.randint(2, 3)}
        | {"arrival": rng.choice([0.0, 0.0, 0.5, 1.0, 2.0])}
        for k in range(rng.randint(2, 3))
    ]
    data = {"name": f"coupled-{seed}", "cost_model": PROFILES[seed % 3], "limits": {"token_budget": 4096}}
    return parse_instance(data | {"requests": reqs}, data["name"])


def test_the_coupling_is_proven_where_it_bites() -> None:
    """On instances whose item terms are large beside the overhead, the bound is at most the exhaustive
    optimum, and above every other latency bound somewhere."""
    above = 0
    for seed in range(12):
        inst = coupled_instance(seed)
        best, value = optimum(inst, "latency"), phase_value(inst)
        assert value <= best * (1 + 1e-9), (seed, value, best)
        others = [b for b in load_bounds(inst, "latency") + lp_bounds(inst, "latency") if b.name != "phase-latency"]
        above += value > max(b.value for b in others) * (1 + 1e-6)
    assert above >= 2


def test_the_bound_is_proven() -> None:
    """Never above the exhaustive optimum (tiny instances, with and without arrivals) nor above any
    policy's replayed mean latency (loaded instances of 50 to 200 requests)."""
    assert refutations(phase_value, "latency") == 0


@pytest.mark.parametrize("n, seed", [(20, 1), (80, 5)])
def test_the_bound_is_at_most_every_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    assert phase_value(inst) <= min(policy_values(inst, "latency").values()) * (1 + 1e-9)


def test_a_planted_invalid_variant_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every token counted at each level (no forward carry: early tokens cost less than the level)."""
    monkeypatch.setattr("optsched.phase_latency.counted_items", lambda terms, lengths, c: lengths)
    coupled = [coupled_instance(seed) for seed in range(12)]
    caught = sum(phase_value(inst) > optimum(inst, "latency") * (1 + 1e-9) for inst in coupled)
    assert caught + refutations(phase_value, "latency") > 0


def test_it_leads_on_a_burst_of_long_prompts() -> None:
    """The burst of ``tests/test_phase_bounds.py`` (20 long prompts within 50 ms): the run of the whole
    burst is above every other latency bound, the first-token queue's included, but ``finish-index``
    (which couples the whole burst too, every token at its own cost: ``tests/test_finish_index.py``)."""
    inst = burst_instance(20, 1)
    others = proven_bounds(inst, "latency") + registered_bounds("infermax", inst, {"objective": "latency"})
    phase = next(b.value for b in others if b.name == "phase-latency")
    assert phase > max(b.value for b in others if b.name not in ("phase-latency", "finish-index")) * (1 + 1e-3)


def equal_requests(n: int) -> object:
    """N equal requests released together under the H200 profile (the relaxed instance of the lockstep toy)."""
    return parse_instance(
        {
            "name": f"equal-{n}",
            "cost_model": "llama2-7b-h200",
            "limits": {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 200000, "max_running": 256},
            "requests": [{"id": f"r{k}", "prompt_tokens": 900, "output_tokens": 64, "arrival": 0.0} for k in range(n)],
        },
        f"equal-{n}",
    )


def test_the_bound_is_listed_and_leads_on_equal_requests_released_together() -> None:
    inst = equal_requests(64)
    found = {b.name: b for b in lp_bounds(inst, "latency", TimeBudget.of(60.0))}
    found.update({b.name: b for b in load_bounds(inst, "latency")})
    phase = found["phase-latency"]
    assert phase.valid and "phase_latency.py" in phase.note
    others = max(b.value for name, b in found.items() if name != "phase-latency")
    assert phase.value > others * 1.05, found

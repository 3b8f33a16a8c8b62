"""``pair-wait-lp`` (optsched/pair_wait_lp.py): pair-wait with its weights chosen by an LP.

- never above the exhaustive optimum of mean latency on random tiny instances (with and without
  arrivals, under the optional cost terms too), never above any policy's replayed value on random
  instances of 20 to 200 requests under load, and never below ``pair-wait``;
- the programme prices every weight choice: no feasible weights (uniform or drawn at random) give a
  larger value than its own, and it gains on loaded instances;
- its weights add up to at most 1 for every request (the condition of pair-wait's proof), and
  pair-wait's closed form at random weights within that budget stays below the exhaustive optimum;
- planted invalid weights (every weight 1; each request's weights budgeted apart in the two orders)
  are caught, by the budget check: pair-wait lies 18 % or more below the exhaustive optimum on
  every tiny instance and 26 % or more below the best policy on the loaded ones, so no instance
  here refutes their values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optsched.pair_wait_lp as pwl
from optsched.pair_bounds import pair_wait, wait_terms
from optsched.pair_wait_lp import pair_wait_lp, wait_weights
from tests.support.bound_checks import LOADED, TINY, loaded_instance, optimum, policy_values, refutations
from tests.support.infermax import tiny_instance
from tests.support.profiles import small_instances
from tests.test_pair_bounds import SHAPED


def lp_value(inst) -> float:
    """The bound's value, or pair-wait's where it gives none (too few pairs)."""
    found = pair_wait_lp(inst)
    return pair_wait(inst) if found is None else found.value


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    listed = 0
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        found = pair_wait_lp(inst)
        if found is None:
            continue
        listed += 1
        assert found.valid and found.name == "pair-wait-lp"
        assert pair_wait(inst) * (1 - 1e-12) <= found.value <= optimum(inst, "latency") * (1 + 1e-9), seed
    assert listed >= len(TINY) // 2  # most tiny instances have a pair whose lifetimes must overlap


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=small_instances(st.sampled_from(SHAPED)))
def test_never_above_the_exhaustive_optimum_under_the_optional_terms(inst) -> None:
    assert lp_value(inst) <= optimum(inst, "latency") * (1 + 1e-9)


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    values = policy_values(inst, "latency")
    assert pair_wait(inst) <= lp_value(inst) <= min(values.values()) * (1 + 1e-9), values


def within_budget(terms, weights) -> bool:
    """Every weight non-negative and every request's weights adding up to at most 1."""
    i, j = terms.pairs.i, terms.pairs.j
    spent = np.bincount(np.concatenate([j, i]), weights=np.concatenate(weights), minlength=len(terms.outputs))
    return bool(np.all(np.concatenate(weights) >= 0) and np.all(spent <= 1 + 1e-12))


def random_weights(terms, rng) -> tuple[np.ndarray, np.ndarray]:
    """Random weights, each request's scaled to add up to exactly 1."""
    i, j = terms.pairs.i, terms.pairs.j
    lam_j, lam_i = rng.exponential(size=len(i)) ** 3, rng.exponential(size=len(i)) ** 3
    spent = np.bincount(np.concatenate([j, i]), weights=np.concatenate([lam_j, lam_i]), minlength=len(terms.outputs))
    scale = 1.0 / np.maximum(spent, 1e-300)
    return lam_j * scale[j], lam_i * scale[i]


@pytest.mark.parametrize("arrivals", [False, True])
def test_pair_wait_at_any_weights_within_the_budget_stays_below_the_optimum(arrivals: bool) -> None:
    rng = np.random.default_rng(1)
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        terms = wait_terms(inst)
        if len(terms.pairs.i) == 0:
            continue
        best = optimum(inst, "latency")
        for _ in range(10):
            assert terms.mean(*random_weights(terms, rng)) <= best * (1 + 1e-9), seed


def test_the_programme_prices_every_weight_choice() -> None:
    gains = 0
    rng = np.random.default_rng(0)
    for n, seed in LOADED[:4]:
        terms = wait_terms(loaded_instance(n, seed))
        weights = wait_weights(terms)
        assert weights is not None and within_budget(terms, weights)
        best = terms.mean(*weights)
        assert terms.mean(*terms.uniform()) <= best * (1 + 1e-7)
        for _ in range(20):
            assert terms.mean(*random_weights(terms, rng)) <= best * (1 + 1e-7)
        gains += best > terms.mean(*terms.uniform()) * (1 + 1e-6)
    assert gains >= 2


def unscaled(terms, seconds: float = pwl.LP_TIME):
    """Planted fault: every weight 1 (each request spends one whole overhead on every partner)."""
    ones = np.ones(len(terms.pairs.i))
    return ones, ones


def each_order_apart(terms, seconds: float = pwl.LP_TIME):
    """Planted fault: each request's weights budgeted apart in the two orders (adding up to 2)."""
    lam_j, lam_i = wait_weights(terms, seconds)
    return 2.0 * lam_j, 2.0 * lam_i


@pytest.mark.parametrize("fault", [unscaled, each_order_apart])
def test_a_planted_invalid_bound_is_caught(fault, monkeypatch) -> None:
    monkeypatch.setattr(pwl, "wait_weights", fault)
    caught = refutations(lp_value, "latency", LOADED)
    for n, seed in LOADED:
        terms = wait_terms(loaded_instance(n, seed))
        caught += not within_budget(terms, pwl.wait_weights(terms))
    assert caught

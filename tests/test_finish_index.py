"""The bound from the batch index of each finish (``optsched/finish_index.py``).

- the relaxed function at an integral point is the direct sum of the module docstring, and its
  gradient (by numpy and by the compiled kernel, which agree bit for bit) the exact change of that
  function along a step;
- that sum is at most the sum of finish times of every policy's schedule on loaded instances, at the
  schedule's own finish indices (the inequality the bound rests on, checked on real schedules);
- the certified value is at most the least of the sum over every integral point of tiny instances;
- the bound is never above the exhaustive optimum of tiny instances (with and without arrivals) nor
  above any policy's replayed mean latency on loaded instances all released at once;
- planted invalid variants (10 % above; each pair paying the larger work; the smaller token cost
  counted three times) are caught by those checks;
- it leads on requests released together whose outputs differ, and on a burst of long prompts within
  50 ms, and is listed by ``optsched bound``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from optsched import finish_index
from optsched.bounds import critical_path_times
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.finish_index import (
    FinishProfile,
    FinishRelaxation,
    add_level_windows,
    cost_levels,
    finish_index_bound,
    finish_index_sum,
    frank_wolfe,
)
from optsched.instance import Instance
from optsched.load_bounds import prompt_attention_extra
from optsched.policies import policy_names, reads_slo, simulator_for
from optsched.schedule import replay
from optsched.workload import WorkloadTransforms, apply_transforms
from tests.support.bound_checks import (
    LOADED,
    TINY,
    check_never_above_any_policy,
    check_never_above_the_exhaustive_optimum,
    loaded_instance,
    refutations,
)
from tests.support.infermax import tiny_instance
from tests.support.solving import registered_bounds
from tests.test_phase_bounds import burst_instance

THETAS = (0.0, 1.0)


def attention(inst: Instance) -> np.ndarray:
    return prompt_attention_extra(inst, inst.columns[1])


def relaxation(inst: Instance, theta: float, span: int | None = None) -> FinishRelaxation:
    profile = FinishProfile(inst, theta, attention(inst))
    floors = critical_path_times(inst) if theta == 1.0 else None
    return FinishRelaxation(profile, floors, span or int(3 * profile.batches.max()) + 1)


def direct_sum(inst: Instance, theta: float, index: np.ndarray, span: int) -> float:
    """The right-hand side of the module docstring at finish indices ``index`` (index >= span: no pair
    terms, ell at span), token by token."""
    p = FinishProfile(inst, theta, attention(inst))
    levels = cost_levels(p)
    delta = np.diff(np.concatenate([[0.0], levels]))
    alone = critical_path_times(inst)
    total = 0.0
    cost_at = []
    for i in range(len(index)):
        t = min(int(index[i]), span)
        ell = p.overhead * t + p.work[i]
        total += max(ell, alone[i]) if theta == 1.0 else ell
        tokens = np.concatenate([[p.first[i]], p.later[i]])  # token g at batch t - (O - g)
        at = {t - (len(tokens) - g): c for g, c in enumerate(tokens, start=1)} if index[i] < span else {}
        cost_at.append(at)
    for i, j in itertools.combinations(range(len(index)), 2):
        total += min(p.work[i], p.work[j])
        for s in set(cost_at[i]) & set(cost_at[j]):
            low = min(cost_at[i][s], cost_at[j][s])
            total += float(np.sum(delta[levels <= low]))
    return total


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("seed", [0, 5, 7, 19, 29])
def test_the_relaxed_value_at_an_integral_point_is_the_direct_sum(theta: float, seed: int) -> None:
    inst = loaded_instance(20, seed) if seed > 20 else tiny_instance(seed, n_max=3)
    relax = relaxation(inst, theta)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        index = np.minimum(FinishProfile(inst, theta, attention(inst)).batches + rng.integers(0, 6, relax.N), relax.T)
        x = np.zeros((relax.N, relax.T + 1))
        x[np.arange(relax.N), index] = 1.0
        assert relax.value(x, relax.counts(index)) == pytest.approx(direct_sum(inst, theta, index, relax.T), rel=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("theta", THETAS)
def test_the_gradient_is_the_change_along_a_step(theta: float, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finish_index, "COMPILED_FROM", 0 if compiled else 10**18)
    inst = loaded_instance(30, 6)
    relax = relaxation(inst, theta)
    rng = np.random.default_rng(1)
    base = FinishProfile(inst, theta, attention(inst)).batches
    a, b = (
        np.minimum(base + rng.integers(0, 40, relax.N), relax.T),
        np.minimum(base + rng.integers(0, 40, relax.N), relax.T),
    )
    xa, xb = np.zeros((relax.N, relax.T + 1)), np.zeros((relax.N, relax.T + 1))
    xa[np.arange(relax.N), a] = 1.0
    xb[np.arange(relax.N), b] = 1.0
    na, nb = relax.counts(a), relax.counts(b)
    g = np.where(relax.allowed, relax.gradient(na), 0.0)
    # f is quadratic: f(b) - f(a) = <g(a), b - a> + 1/2 sum_k delta_k sum_s (n_b - n_a)^2
    curvature = float(np.sum(relax.delta[:, None] * (nb - na) ** 2))
    change = float(np.sum(g * (xb - xa))) + 0.5 * curvature
    assert relax.value(xb, nb) - relax.value(xa, na) == pytest.approx(change, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("n, seed", [(3, 2), (40, 3), (120, 4)])
def test_the_compiled_level_windows_equal_numpys(theta: float, n: int, seed: int) -> None:
    """The kernel adds the same terms in the same order as numpy: the same gradient, bit for bit, at a
    fractional point (the mean of two integral ones)."""
    inst = loaded_instance(n, seed) if n > 3 else tiny_instance(seed, n_max=3)
    relax = relaxation(inst, theta)
    rng = np.random.default_rng(seed)
    base = FinishProfile(inst, theta, attention(inst)).batches
    a, b = (np.minimum(base + rng.integers(0, 30, relax.N), relax.T) for _ in range(2))
    run, padded = relax.level_terms(0.5 * (relax.counts(a) + relax.counts(b)))
    by_numpy, by_kernel = relax.linear.copy(), relax.linear.copy()
    relax.add_windows(by_numpy, run, padded)
    add_level_windows(by_kernel, run, padded, relax.count, relax.prompt, relax.outputs, relax.pad)
    assert np.array_equal(by_numpy, by_kernel)
    assert not np.array_equal(by_numpy, relax.linear)  # the windows add something


def finish_indices(inst: Instance, schedule) -> tuple[np.ndarray, float]:
    """(each request's finish batch in the schedule's time order, 1-based, the sum of finish times)."""
    result = replay(inst, schedule)
    assert result.feasible, result.violations
    position = {r.id: k for k, r in enumerate(inst.requests)}
    index = np.zeros(len(inst.requests), dtype=np.int64)
    for b, batch in enumerate(schedule.batches, start=1):
        for item in batch.items:
            index[position[item.id]] = b
    finish = sum(o.finish for o in result.outcomes.values())
    return index, finish


@pytest.mark.parametrize("n, seed", LOADED[:4])
def test_every_policy_schedule_is_a_point_of_the_relaxation(n: int, seed: int) -> None:
    for inst in (
        loaded_instance(n, seed),
        apply_transforms(loaded_instance(n, seed), WorkloadTransforms(offline=True)),
    ):
        for name in (p for p in policy_names() if not reads_slo(p)):
            index, finish = finish_indices(inst, simulator_for(name)(inst))
            for theta in THETAS:
                relax = relaxation(inst, theta, span=int(index.max()) + 1)
                x = np.zeros((relax.N, relax.T + 1))
                x[np.arange(relax.N), index] = 1.0
                assert relax.value(x, relax.counts(index)) <= finish * (1 + 1e-9), (name, theta)


@pytest.mark.parametrize("seed", TINY[:10])
def test_the_certificate_is_at_most_the_least_integral_value(seed: int) -> None:
    inst = tiny_instance(seed, n_max=3)
    for theta in THETAS:
        relax = relaxation(inst, theta)
        least = np.inf
        ranges = [range(int(lo), relax.T + 1) for lo in FinishProfile(inst, theta, attention(inst)).batches]
        for index in itertools.product(*ranges):
            at = np.array(index)
            x = np.zeros((relax.N, relax.T + 1))
            x[np.arange(relax.N), at] = 1.0
            least = min(least, relax.value(x, relax.counts(at)))
        certified = frank_wolfe(relax, NO_LIMIT)
        assert certified <= least * (1 + 1e-9)
        assert certified >= least * 0.98  # the convex relaxation is close here


def bound_value(inst: Instance) -> float:
    """The certified sum (no skip) less the arrivals, over N."""
    sums = [
        finish_index_sum(inst, t, critical_path_times(inst) if t == 1.0 else None, -np.inf, NO_LIMIT, attention(inst))
        for t in THETAS
    ]
    return (max(s for s in sums if s is not None) - sum(r.arrival for r in inst.requests)) / len(inst.requests)


def listed(inst: Instance) -> float:
    found = finish_index_bound(inst, attention(inst), None)
    return bound_value(inst) if found is None else found.value


@pytest.mark.parametrize("arrivals", [False, True])
def test_the_bound_is_at_most_the_exhaustive_optimum(arrivals: bool) -> None:
    check_never_above_the_exhaustive_optimum(listed, listed, "latency", arrivals)


def released_at_once(n: int, seed: int) -> Instance:
    return apply_transforms(loaded_instance(n, seed), WorkloadTransforms(offline=True))


@pytest.mark.parametrize("n, seed", LOADED)
def test_the_bound_is_at_most_every_policy(n: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.support.bound_checks.loaded_instance", released_at_once)
    check_never_above_any_policy(bound_value, "latency", n, seed)


def planted(inst: Instance, fault: str) -> float:
    if fault == "ten-percent":
        return 1.1 * bound_value(inst)
    best = -np.inf
    for theta in THETAS:
        relax = relaxation(inst, theta)
        p = FinishProfile(inst, theta, attention(inst))
        if fault == "larger-work":
            relax.const = float(np.sum(np.sort(p.work) * np.arange(relax.N)))  # each pair pays the larger w
        else:
            relax.delta = 3.0 * relax.delta  # the smaller token cost counted three times
        best = max(best, frank_wolfe(relax, TimeBudget.of(30.0)))
    return (best - sum(r.arrival for r in inst.requests)) / len(inst.requests)


@pytest.mark.parametrize("fault", ["ten-percent", "larger-work", "triple-overlap"])
def test_a_planted_invalid_variant_is_caught(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.support.bound_checks.loaded_instance", released_at_once)
    assert refutations(lambda inst: planted(inst, fault), "latency") > 0


def test_it_leads_on_requests_released_together(capsys: pytest.CaptureFixture[str]) -> None:
    from optsched.cli import main

    assert (
        main(["bound", "splitwise-conv-100", "--offline", "--problem", "infermax", "--objective", "latency", "--json"])
        == 0
    )
    found = {b["name"]: b["value"] for b in json.loads(capsys.readouterr().out)["bounds"]}
    assert found["finish-index"] == max(found.values())
    assert found["finish-index"] > 1.05 * found["pair-wait-lp"]


def test_it_leads_on_a_burst_of_long_prompts() -> None:
    """The burst of ``tests/test_phase_bounds.py`` (20 long prompts within 50 ms, arrivals subtracted):
    above ``phase-latency`` and every other latency bound of the InferMax bounder."""
    inst = burst_instance(20, 1)
    found = {b.name: b.value for b in registered_bounds("infermax", inst, {"objective": "latency"})}
    assert found["finish-index"] > max(v for name, v in found.items() if name != "finish-index") * (1 + 1e-3)

"""``optsched info`` at trace scale (issue 39 item 18): the per-token sums of the bounds it prints
in closed form, each against its definition summed token by token, and ``info --time-limit``."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.tokensums import smallest_clipped_sums, sum_of_runs


def _smallest_brute_force(base, counts, slope, offset, width, cuts) -> np.ndarray:
    out = np.zeros((len(cuts), width))
    for s, cut in enumerate(cuts):
        for b, n in zip(base[:cut].tolist(), counts[:cut].tolist()):
            terms = np.sort(np.maximum(0.0, slope * (b + np.arange(1, n + 1, dtype=np.float64)) + offset))
            for D in range(width):
                out[s, D] += terms[: max(0, n - D)].sum()
    return out


@pytest.mark.parametrize("seed", range(40))
def test_smallest_clipped_sums_are_the_sums_of_the_smallest_terms(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    base, counts = rng.integers(0, 50, n), rng.integers(0, 30, n)
    slope = [0.0, float(rng.normal()), -abs(float(rng.normal())), abs(float(rng.normal()))][seed % 4]
    offset = float(rng.normal() * 20)
    width = int(rng.integers(1, 40))
    cuts = np.unique(np.append(rng.integers(0, n + 1, 3), n)).astype(np.int64)
    found = smallest_clipped_sums(base, counts, slope, offset, width, cuts)
    assert np.allclose(found, _smallest_brute_force(base, counts, slope, offset, width, cuts), rtol=1e-9, atol=1e-9)


def test_smallest_clipped_sums_stay_exact_beyond_int64() -> None:
    """Positions near 2**31 square beyond int64 over many requests: Python integers take over."""
    base, counts = np.array([2**31, 5, 2**31 + 7]), np.array([3, 4, 2])
    cuts = np.array([1, 3])
    found = smallest_clipped_sums(base, counts, 1e-9, -1.0, 6, cuts)
    assert np.allclose(found, _smallest_brute_force(base, counts, 1e-9, -1.0, 6, cuts), rtol=1e-12)


@pytest.mark.parametrize(("far", "block"), [(10**4, 4), (40, 1 << 20)])  # far runs: in blocks; near: the table
def test_sum_of_runs_is_the_sum_over_each_run(far: int, block: int) -> None:
    rng = np.random.default_rng(block)
    starts, counts = rng.integers(0, far, 30), rng.integers(0, 9, 30)
    counts[3] = 0
    found = sum_of_runs(starts, counts, lambda h: np.sqrt(h) + 0.5 * h, block)
    expected = [sum(np.sqrt(h) + 0.5 * h for h in range(s, s + c)) for s, c in zip(starts, counts)]
    assert np.allclose(found, expected, rtol=1e-12, atol=1e-12)

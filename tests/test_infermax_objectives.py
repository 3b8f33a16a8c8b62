"""InferMax's other objectives against the independent exhaustive search.

``tests/test_infermax.py`` checks the makespan of offline instances against exhaustive search and
the other objectives only backend against backend. Here the exhaustive search
(``infermax_bruteforce.exhaustive_optimum``) is the reference for the sum of completion times and
the mean TTFT (offline) and for the makespan with online arrivals (digest C10, C11).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from infermax_bruteforce import exhaustive_optimum  # noqa: E402
from test_infermax import check_result, policy_values, solve, solve_mip, tiny_instance  # noqa: E402

from optsched.result import replayed_objective  # noqa: E402

REL = 1e-6
#: Seeds whose instances have 2 or 3 requests (1-request instances prove nothing about order).
SEEDS = (0, 5, 6, 7, 9, 10, 11, 13, 26, 38)


def reference(inst, objective: str, evict: bool) -> float:
    """The exhaustive optimum, after checking that its own schedule replays to it."""
    found = exhaustive_optimum(inst, objective, evict=evict)
    assert found is not None
    best, path = found
    assert replayed_objective(inst, path, objective)[0] == pytest.approx(best, rel=1e-12)
    return best


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("evict", [True, False])
def test_completion_time_reaches_exhaustive_optimum(seed: int, evict: bool) -> None:
    inst = tiny_instance(seed)
    best = reference(inst, "completion", evict)
    check_result(inst, solve(inst, objective="completion", no_evict=not evict), best, "completion")
    for name, value in policy_values(inst, "completion", evictions=evict).items():
        assert best <= value * (1 + 1e-9), name


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("evict", [True, False])
def test_online_makespan_reaches_exhaustive_optimum(seed: int, evict: bool) -> None:
    inst = tiny_instance(seed, arrivals=True)
    best = reference(inst, "makespan", evict)
    check_result(inst, solve(inst, no_evict=not evict), best)
    for name, value in policy_values(inst, evictions=evict).items():
        assert best <= value * (1 + 1e-9), name


@pytest.mark.parametrize("seed", [0, 7, 9])
def test_mip_reaches_exhaustive_completion_and_online_optima(seed: int) -> None:
    offline, online = tiny_instance(seed), tiny_instance(seed, arrivals=True)
    check_result(offline, solve_mip(offline, objective="completion"), reference(offline, "completion", True), "completion")
    check_result(online, solve_mip(online), reference(online, "makespan", True))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("evict", [True, False])
def test_ttft_is_bracketed_by_exhaustive_optimum(seed: int, evict: bool) -> None:
    """Mean TTFT: ``optimal`` only when it is the exhaustive optimum; bound never above it.

    The ttft horizon is not proven (docs/infermax.md), so a ``feasible`` result may be above the
    optimum (seed 26 with evictions: 15.60 ms against 12.04 ms); it must never be below it.
    """
    inst = tiny_instance(seed)
    best = reference(inst, "ttft", evict)
    res = solve(inst, objective="ttft", no_evict=not evict)
    check_result(inst, res, best if res.status == "optimal" else None, "ttft")
    assert res.objective >= best * (1 - 1e-9)
    assert res.bound <= best * (1 + 1e-9)

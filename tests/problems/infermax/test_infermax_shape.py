"""InferMax under a profile with the step-shape terms (``token_tile``/``per_tile``, ``decode.per_max_kv``).

- both backends (CP-SAT; the MIP through HiGHS where small) reach the optimum of the independent
  exhaustive search (tests/support/infermax_bruteforce.py, whose batch cost is the profile's
  ``batch_time`` with the tile count and the longest decode context), with status ``optimal`` and a
  bound at most the replayed objective; every bound of ``optsched bound`` stays at most that optimum;
- the terms move the exhaustive optima on some of these instances (so the tests above see them),
  and a backend built without either term is caught by the same check (planted faults);
- the coefficients, their integer scaling for CP-SAT, and the linear twin every bound reads.
"""

from __future__ import annotations

import random

import pytest

from optsched.costmodel import Coefficients
from optsched.instance import parse_instance
from optsched.problems.infermax import cpsat, mip
from optsched.problems.infermax.model import linear_instance
from optsched.schedule import replay
from tests.support.infermax_bruteforce import exhaustive_makespan, exhaustive_optimum
from tests.support.legal_schedules import random_legal_schedule
from tests.support.solving import registered_bounds, registered_solve

#: llama2-7b-a100 with a tile of 4 tokens and a longest-context term, both large enough to change
#: optima on tiny instances.
SHAPE = {
    "layers": 32,
    "base": 6.486e-05,
    "per_token": 1.91e-06,
    "token_tile": 4,
    "per_tile": 3e-05,
    "prefill": {"bias": 9.26e-05, "per_token_sq": 1.6773e-10},
    "decode": {"bias": 1.921e-05, "per_kv": 8.513e-09, "per_max_kv": 4e-06},
}


def tiny(seed: int, model: dict = SHAPE, n_max: int = 3):
    rng = random.Random(seed)
    reqs = [
        {"id": f"r{i}", "prompt_tokens": rng.randint(2, 6), "output_tokens": rng.randint(1, 3)}
        for i in range(rng.randint(2, n_max))
    ]
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = rng.choice([4, 6, 8])
    limits = {
        "token_budget": C,
        "prefill_budget": rng.choice([p for p in (3, 4, 8) if p <= C]),
        "kv_capacity": rng.choice([need + 1, need + 4, None]),
        "max_running": rng.choice([2, None]),
    }
    return parse_instance({"name": f"shape-{seed}", "cost_model": model, "limits": limits, "requests": reqs})


def solve(inst, **opts):
    return registered_solve("infermax", inst, {"threads": 1, "early_exit": False, **opts})


def check_against_exhaustive(inst, solver: str = "cpsat") -> None:
    """The backend's result is the exhaustive optimum, proven, with a bound below it."""
    best, path = exhaustive_makespan(inst, evict=True)
    assert replay(inst, path).metrics.makespan == pytest.approx(best, rel=1e-12)
    res = solve(inst, solver=solver)
    assert res.status == "optimal", res.extra
    assert res.objective == pytest.approx(best, rel=1e-9)
    assert res.objective == pytest.approx(replay(inst, res.schedule).metrics.makespan, rel=1e-12)
    assert res.bound <= res.objective * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_cpsat_reaches_the_exhaustive_optimum_with_the_shape_terms(seed):
    check_against_exhaustive(tiny(seed))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_mip_reaches_the_exhaustive_optimum_with_the_shape_terms(seed):
    inst = tiny(seed)
    if len(inst.requests) * solve(inst).extra["horizon"] > 40:
        pytest.skip("model too large for a quick HiGHS solve")
    check_against_exhaustive(inst, "highs")


@pytest.mark.parametrize("objective", ["latency", "ttft"])
def test_cpsat_reaches_the_exhaustive_optimum_of_the_other_objectives(objective):
    for seed in (0, 4, 5):
        inst = tiny(seed)  # offline: the mean latency is the sum of finish times over N
        best, _ = exhaustive_optimum(inst, "completion" if objective == "latency" else "ttft", evict=True)
        best = best / len(inst.requests) if objective == "latency" else best
        res = solve(inst, objective=objective, time_limit=60)  # the eviction-free phase's share bounded
        assert res.status == "optimal" and res.objective == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_every_infermax_bound_stays_below_the_optimum(seed):
    inst = tiny(seed)
    best, _ = exhaustive_makespan(inst, evict=True)
    methods = [None, "lp", "trajectory"] + (["relax"] if inst.limits.kv_capacity is not None else [])
    for method in methods:
        for b in registered_bounds("infermax", inst, {"method": method, "time_limit": 5}):
            assert b.value <= best * (1 + 1e-9), (method, b)


def test_the_shape_terms_move_infermax_optima():
    """The exhaustive optimum is never below the linear twin's (every batch costs no more under the
    twin) and is above it on some instances; dropping the tile or the longest-context term alone
    moves some optimum too, so each of the tests above sees each term."""
    moved = {"twin": 0, "tile": 0, "max_kv": 0}
    no_tile = {k: v for k, v in SHAPE.items() if k not in ("token_tile", "per_tile")}
    no_max = {**SHAPE, "decode": {k: v for k, v in SHAPE["decode"].items() if k != "per_max_kv"}}
    for seed in range(10):
        inst = tiny(seed)
        value, _ = exhaustive_makespan(inst, evict=True)
        twin, _ = exhaustive_makespan(linear_instance(inst), evict=True)
        assert twin <= value * (1 + 1e-12)
        moved["twin"] += value > twin * (1 + 1e-9)
        for name, model in (("tile", no_tile), ("max_kv", no_max)):
            other, _ = exhaustive_makespan(tiny(seed, model), evict=True)
            moved[name] += abs(other - value) > 1e-9 * value
    assert all(count >= 2 for count in moved.values()), moved


@pytest.mark.parametrize(
    ("backend", "fault"),
    [
        (cpsat.ModelBuilder, "_tiles"),
        (cpsat.ModelBuilder, "_longest_context"),
        (mip.MipModel, "_tiles"),
        (mip.MipModel, "_longest_context"),
    ],
)
def test_a_backend_without_a_shape_term_is_caught(monkeypatch, backend, fault):
    """Planted fault: the term's variable is a free one (the backend prices nothing for it); the
    exhaustive check above fails on some instance (a wrong optimum or objective, or the replay
    disagreeing with the solver's value)."""
    solver = "cpsat" if backend is cpsat.ModelBuilder else "highs"

    def free(self, j):
        if solver == "cpsat":
            return self.m.NewIntVar(0, 0, f"free_{fault}_{j}")
        return 0

    monkeypatch.setattr(backend, fault, free)
    caught = 0
    for seed in range(4):
        try:
            check_against_exhaustive(tiny(seed), solver)
        except (AssertionError, RuntimeError):
            caught += 1
    assert caught >= 1


def test_coefficients_and_their_scaling():
    inst = tiny(0)
    k = Coefficients.of(inst.cost_model).folded()
    assert (k.per_tile, k.token_tile, k.decode_per_max_kv) == pytest.approx((32 * 3e-05, 4, 32 * 4e-06))
    assert "token_tile" not in k.priced() and {"per_tile", "decode_per_max_kv"} <= set(k.priced())
    assert [k.tiles(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    res = solve(inst)
    assert res.extra["scale_exact"] and res.extra["rounding_slack"] == 0.0


@pytest.mark.parametrize("seed", range(20))
def test_the_linear_form_is_below_every_batch_time(seed):
    """(F0) needs the linear form every bound reads at or below each batch's time: checked on every
    batch of random legal schedules (both tile forms occur: per batch and per token)."""
    inst = tiny(seed, n_max=4)
    linear = linear_instance(inst)
    assert not linear.cost_model.has_shape_terms and linear_instance(linear) is linear
    rng = random.Random(seed)
    for _ in range(5):
        rep = replay(inst, random_legal_schedule(inst, rng, p_evict=0.3).schedule)
        assert rep.feasible, rep.violations
        for features in rep.features:
            true_time = inst.cost_model.batch_time(*features)
            assert linear.cost_model.batch_time(*features) <= true_time * (1 + 1e-12)


def test_both_tile_forms_occur():
    """Small batches: the tile as a per-batch cost; long prompts: spread over the tokens."""
    short = tiny(1)  # t B = 4 x 3 >= 10 tokens
    reqs = [{"id": f"r{i}", "prompt_tokens": 400, "output_tokens": 2} for i in range(3)]
    long = parse_instance({"name": "long", "cost_model": SHAPE, "limits": {"token_budget": 64}, "requests": reqs})
    assert linear_instance(short).cost_model.base == pytest.approx(SHAPE["base"] + SHAPE["per_tile"])
    assert linear_instance(long).cost_model.per_token == pytest.approx(SHAPE["per_token"] + SHAPE["per_tile"] / 4)

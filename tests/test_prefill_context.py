"""Every formulation under a profile with the prefill-context term (``prefill.per_ctx > 0``).

- InferMax: both backends (CP-SAT, and the MIP through HiGHS where small) reach the optimum of the
  independent exhaustive search (tests/support/infermax_bruteforce.py, whose batch cost prices ``c * m``),
  and that optimum differs from the one without the term on some instances (so the term is seen);
- the simulator and the Hybrid policies and MIP give schedules whose times are the replayed ones;
- Aladdin (its Eq. 2 prefill law has no such term) refuses with exit 2 naming the field;
- gmax and scls-batch read ``static_latency``, not ``cost_model``: their results do not change;
- property (hypothesis): no proven bound (the generic ones, InferMax's with its relaxation and
  chunk bound, Hybrid's) exceeds the value of a feasible schedule under a ``per_ctx > 0`` profile.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsched.cli import main
from optsched.instance import parse_instance
from optsched.schedule import replay
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.legal_schedules import random_legal_schedule
from tests.support.paths import INSTANCES
from tests.support.profiles import assert_proven_bounds_below, small_instances, static_instances
from tests.support.solving import registered_bounds, registered_solve

#: llama2-7b-a100 with a prefill-context term large enough to change optima on tiny instances.
CTX = {
    "layers": 32,
    "base": 6.486e-05,
    "per_token": 1.91e-06,
    "prefill": {"bias": 9.26e-05, "per_token_sq": 1.6773e-10, "per_ctx": 2e-06},
    "decode": {"bias": 1.921e-05, "per_kv": 8.513e-09},
}
NO_CTX = {**CTX, "prefill": {k: v for k, v in CTX["prefill"].items() if k != "per_ctx"}}


def tiny(seed: int, model: dict = CTX, n_max: int = 3):
    rng = random.Random(seed)
    reqs = [
        {"id": f"r{i}", "prompt_tokens": rng.randint(2, 5), "output_tokens": rng.randint(1, 3)}
        for i in range(rng.randint(1, n_max))
    ]
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = rng.choice([2, 3, 4, 8])
    limits = {
        "token_budget": C,
        "prefill_budget": rng.choice([p for p in (2, 3, 8) if p <= C]),
        "kv_capacity": rng.choice([need, need + 2, None]),
        "max_running": rng.choice([1, 2, None]),
    }
    return parse_instance({"name": f"ctx-{seed}", "cost_model": model, "limits": limits, "requests": reqs})


def solve(inst, **opts):
    return registered_solve("infermax", inst, {"threads": 1, "early_exit": False, **opts})


@pytest.mark.parametrize("seed", range(12))
def test_infermax_backends_reach_the_exhaustive_optimum_with_the_context_term(seed):
    inst = tiny(seed)
    best, path = exhaustive_makespan(inst, evict=True)
    assert replay(inst, path).metrics.makespan == pytest.approx(best, rel=1e-12)
    runs = [solve(inst)]
    if len(inst.requests) * runs[0].extra["horizon"] <= 16:
        runs.append(solve(inst, solver="highs"))
    for res in runs:
        assert res.status == "optimal", res.extra
        assert res.objective == pytest.approx(best, rel=1e-6)
        assert res.bound <= res.objective * (1 + 1e-9)
    for b in registered_bounds("infermax", inst, {"method": "relax"}):
        assert b.value <= best * (1 + 1e-9), b


def test_the_context_term_moves_infermax_optima():
    """The exhaustive optimum with the term is never below the one without (F0) and is above it on
    some tiny instances: the tests above see the term."""
    moved = 0
    for seed in range(12):
        with_ctx, _ = exhaustive_makespan(tiny(seed), evict=True)
        without, _ = exhaustive_makespan(tiny(seed, NO_CTX), evict=True)
        assert with_ctx >= without * (1 - 1e-12)
        moved += with_ctx > without * (1 + 1e-9)
    assert moved >= 3


def test_infermax_mip_prices_the_context_term_like_the_replay():
    """A chunked prompt under the MIP (HiGHS): its objective is the replayed makespan, which includes
    the chunks' context cost (C = 2 forces chunks of a 5-token prompt)."""
    inst = parse_instance({
        "name": "chunks",
        "cost_model": CTX,
        "limits": {"token_budget": 2},
        "requests": [{"id": "a", "prompt_tokens": 5, "output_tokens": 1}],
    })
    res = solve(inst, solver="highs")
    rep = replay(inst, res.schedule)
    assert res.status == "optimal" and res.objective == pytest.approx(rep.metrics.makespan, rel=1e-9)
    assert sum(f[5] for f in rep.features) == 2 * 2 + 1 * 4  # chunks 2, 2, 1 over 0, 2, 4 cached keys


@pytest.mark.parametrize("policy", ["hybrid-baseline", "hybrid-baseline-global", "hybrid", "hybrid-online"])
def test_hybrid_policies_split_long_prompts_at_the_replayed_times(policy):
    """A prompt longer than the stage capacity is split; the policy's clock (which decides when it
    idles until an arrival) must price the later chunks' context. Request b arrives after a would
    end without the term but before it ends with it: a clock without the term would start b's batch
    before a's last one ends (a replay violation)."""
    from optsched.problems.hybrid.online import simulate_policy

    def instance(reqs):
        return parse_instance({
            "name": "split",
            "cost_model": CTX,
            "limits": {"token_budget": 4, "max_running": 2},
            "requests": reqs,
        })

    a = {"id": "a", "prompt_tokens": 9, "output_tokens": 2}
    alone = replay(instance([a]), simulate_policy(instance([a]), policy))
    extra = sum(32 * CTX["prefill"]["per_ctx"] * f[5] for f in alone.features)
    assert extra > 0
    b = {"id": "b", "arrival": alone.metrics.makespan - extra / 2, "prompt_tokens": 3, "output_tokens": 2}
    rep = replay(instance([a, b]), simulate_policy(instance([a, b]), policy))
    assert rep.feasible, rep.violations


def test_hybrid_mip_is_exact_with_the_context_term():
    """The Hybrid model prefills whole prompts from m = 0: X_pre = 0 in its whole model space, so its
    contract time model stays exact; its answer replays and is at most the policies'."""
    reqs = [
        {"id": f"q{k}", "prompt_tokens": p, "output_tokens": o} for k, (p, o) in enumerate([(6, 3), (3, 4), (4, 2)])
    ]
    inst = parse_instance({
        "name": "hyb",
        "cost_model": CTX,
        "limits": {"token_budget": 16, "max_running": 2},
        "requests": reqs,
    })
    res = registered_solve("hybrid", inst, {"time_limit": 20})
    rep = replay(inst, res.schedule)
    assert rep.feasible and res.objective == pytest.approx(rep.metrics.makespan, rel=1e-9)
    assert all(f[5] == 0 for f in rep.features)
    assert res.bound <= res.objective * (1 + 1e-9)


def test_aladdin_refuses_the_context_term_naming_the_field(tmp_path, capsys):
    data = json.loads((INSTANCES / "aladdin-fig3.json").read_text())
    model = data["cost_model"] if isinstance(data["cost_model"], dict) else None
    if model is None:
        pytest.skip("aladdin-fig3 names a profile; the inline form is needed to add the term")
    data["cost_model"] = {**model, "prefill": {**model.get("prefill", {}), "per_ctx": 1e-9}}
    path = tmp_path / "aladdin-ctx.json"
    path.write_text(json.dumps(data))
    for command in (
        ["solve", str(path), "--problem", "aladdin", "--time-limit", "5"],
        ["bound", str(path), "--problem", "aladdin"],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "prefill.per_ctx" in err and str(path) in err


@pytest.mark.parametrize("problem, data", static_instances(), ids=["gmax", "scls-batch"])
def test_static_latency_formulations_do_not_read_the_cost_model(problem, data):
    """gmax and scls-batch use their papers' static-batch model (``static_latency``); the contract's
    cost model, with or without the term, changes nothing."""
    values = []
    for model in (NO_CTX, CTX):
        res = registered_solve(problem, parse_instance({**data, "cost_model": model}), {"time_limit": 10})
        values.append((res.status, res.objective))
    assert values[0] == values[1] and values[0][1] is not None


# --------------------------------------------------------------------------- property


#: Profiles of the property: CTX with a prefill-context term of three sizes.
CTX_MODELS = st.sampled_from([1e-7, 2e-6, 1e-4]).map(lambda pc: {**CTX, "prefill": {**CTX["prefill"], "per_ctx": pc}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=small_instances(CTX_MODELS), seed=st.integers(0, 2**31), p_evict=st.sampled_from([0.0, 0.2]))
def test_no_bound_exceeds_a_feasible_schedule_under_the_context_term(inst, seed, p_evict):
    legal = random_legal_schedule(inst, random.Random(seed), p_evict)
    rep = replay(inst, legal.schedule)
    assert rep.feasible, rep.violations
    assert_proven_bounds_below(inst, legal.schedule, rep)

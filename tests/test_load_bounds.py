"""Mean latency and mean TTFT: the exact solver and every proven bound against exhaustive search.

- the online exhaustive search (``latency_bruteforce``) agrees with the offline one where both apply;
- every bound on ``latency`` and ``ttft`` (:func:`optsched.load_bounds.proven_bounds`, the InferMax
  bounder) is at most the exhaustive optimum on random tiny instances, with and without arrivals,
  with KV limits; and at most every policy's replayed value on random instances of 20 to 200
  requests under load;
- planted invalid bounds (10 % above, the batch overhead not shared) are caught by those checks;
- the exact InferMax solve (CP-SAT and HiGHS) reaches the exhaustive optimum of both objectives.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from optsched.bounds import critical_path_times
from optsched.budget import TimeBudget
from optsched.instance import parse_instance
from optsched.load_bounds import (
    LP_TIME,
    SHARE_WEIGHTS,
    load_bounds,
    lp_bounds,
    proven_bounds,
    share_work,
    srpt_completions,
    srpt_mean_bound,
)
from optsched.result import objective_named
from tests.support.bound_checks import LOADED, TINY, loaded_instance, optimum, policy_values
from tests.support.infermax import check_result, solve, tiny_instance
from tests.support.infermax_bruteforce import exhaustive_optimum
from tests.support.solving import registered_bounds

OBJECTIVES = ("latency", "ttft")


@pytest.mark.parametrize("seed", (0, 5, 9, 13))
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_online_search_agrees_with_the_offline_search(seed: int, objective: str) -> None:
    inst = tiny_instance(seed)
    offline = exhaustive_optimum(inst, "completion" if objective == "latency" else "ttft")
    assert offline is not None
    expected = offline[0] / len(inst.requests) if objective == "latency" else offline[0]
    assert optimum(inst, objective) == pytest.approx(expected, rel=1e-9)


def tiny_bounds(inst, objective: str) -> dict[str, float]:
    """Every bound of the objective: the generic and load-aware ones, and the InferMax bounder's."""
    out = {f"generic:{b.name}": b.value for b in proven_bounds(inst, objective)}
    out.update({f"infermax:{b.name}": b.value for b in registered_bounds("infermax", inst, {"objective": objective})})
    return out


@pytest.mark.parametrize("arrivals", [False, True])
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_bound_is_at_most_the_exhaustive_optimum(objective: str, arrivals: bool) -> None:
    gains = 0
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        best = optimum(inst, objective)
        found = tiny_bounds(inst, objective)
        assert {"generic:srpt-work", "generic:srpt-prefill"} & set(found)
        for name, value in found.items():
            assert value <= best * (1 + 1e-9), (seed, name, value, best)
        load = max(b.value for b in load_bounds(inst, objective))
        plain = max(v for k, v in found.items() if "srpt" not in k)
        gains += load > plain * (1 + 1e-6)
    assert gains >= 2  # the load-aware bound is above the per-request ones somewhere


def planted_latency(inst, fault: str) -> float:
    """An invalid latency bound: 10 % above the real one, or with each batch's overhead paid in full
    by every item (K = 1 instead of the most items a batch holds)."""
    if fault == "ten-percent":
        return 1.1 * load_bounds(inst, "latency")[0].value
    release = np.array([r.arrival for r in inst.requests])
    work = share_work(inst, SHARE_WEIGHTS[0], items_cap=1)
    return srpt_mean_bound(release, work, critical_path_times(inst))


@pytest.mark.parametrize("fault", ["ten-percent", "overhead-unshared"])
def test_a_planted_invalid_bound_is_caught(fault: str) -> None:
    caught = []
    for arrivals in (False, True):
        for seed in TINY:
            inst = tiny_instance(seed, arrivals=arrivals)
            if planted_latency(inst, fault) > optimum(inst, "latency") * (1 + 1e-9):
                caught.append((seed, arrivals))
    assert caught


@pytest.mark.parametrize("n, seed", LOADED)
def test_every_bound_is_at_most_every_policy(n: int, seed: int) -> None:
    inst = loaded_instance(n, seed)
    for objective in OBJECTIVES:
        values = policy_values(inst, objective)
        least = min(values.values())
        found = proven_bounds(inst, objective) + load_bounds(inst, objective)
        found += lp_bounds(inst, objective, TimeBudget.of(LP_TIME))
        if n <= 30:  # a small LP (at most 1,800 cells): solved within its time on a loaded machine too
            assert any(b.name.startswith("busy-time") for b in found)
        for b in found:
            assert b.valid and b.value <= least * (1 + 1e-9), (objective, b, values)
    planted = planted_latency(inst, "overhead-unshared")
    assert planted > 0.0


def test_the_planted_faults_are_caught_at_scale() -> None:
    """On loaded instances the overhead-unshared bound exceeds some policy's replayed latency."""
    caught = 0
    for n, seed in [(50, 2), (120, 3), (200, 4), (80, 5)]:
        inst = loaded_instance(n, seed)
        caught += planted_latency(inst, "overhead-unshared") > min(policy_values(inst, "latency").values())
    assert caught


def test_srpt_is_the_least_kth_completion() -> None:
    """SRPT's k-th completion is at most that of every order-preserving preemptive schedule tried:
    here every non-preemptive order of 5 random jobs (brute force)."""
    import itertools

    rng = np.random.default_rng(0)
    for _ in range(30):
        release = rng.choice([0.0, 1.0, 2.0, 3.5], size=5)
        work = rng.uniform(0.1, 3.0, size=5)
        srpt = srpt_completions(release, work)
        for order in itertools.permutations(range(5)):
            t, done = 0.0, []
            for j in order:
                t = max(t, release[j]) + work[j]
                done.append(t)
            assert np.all(srpt <= np.sort(done) + 1e-12)


@pytest.mark.parametrize(
    "seed, solver", [(s, "cpsat") for s in (0, 5, 7, 9, 13, 25)] + [(s, "highs") for s in (0, 7, 9, 13, 25)]
)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_exact_solve_reaches_the_exhaustive_optimum_with_arrivals(seed: int, objective: str, solver: str) -> None:
    inst = tiny_instance(seed, arrivals=True)
    best = optimum(inst, objective)
    res = solve(inst, objective=objective, solver=solver)
    check_result(inst, res, best, objective)
    assert res.objective == pytest.approx(getattr(res.replay.metrics, objective_named(objective).metric), rel=1e-12)


def test_completion_is_an_alias_of_latency() -> None:
    inst = tiny_instance(5, arrivals=True)
    res = solve(inst, objective="completion")
    assert res.extra["objective_name"] == "latency"
    assert res.objective == pytest.approx(res.replay.metrics.mean_latency, rel=1e-12)
    assert [b.value for b in proven_bounds(inst, "completion")] == [b.value for b in proven_bounds(inst, "latency")]


@pytest.mark.parametrize(
    "objective, names", [("latency", {"critical-path", "srpt-work"}), ("ttft", {"prefill-alone", "srpt-prefill"})]
)
def test_bound_command_lists_every_bound_of_the_objective(capsys, objective: str, names: set[str]) -> None:
    import json

    from optsched.cli import main

    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", objective, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["bounds"]
    assert names <= {b["name"] for b in listed}
    assert all(b["valid"] and b["note"] and b["value"] > 0 for b in listed)


def test_sweep_spec_reads_the_objective_names() -> None:
    from pydantic import ValidationError

    from optsched.sweep.spec import RunSpec

    assert RunSpec(objective="latency").objective == "latency"
    assert RunSpec(objective="completion").objective == "latency"
    with pytest.raises(ValidationError, match="unknown objective 'speed'"):
        RunSpec(objective="speed")


def test_the_one_item_bound_applies_only_with_one_item_a_batch() -> None:
    """``srpt-work-alone`` is listed where a batch holds one item (K = 1) and lifts the bound there;
    planted on instances whose batches hold two or more items, it exceeds the exhaustive optimum."""
    from optsched.load_bounds import most_items

    listed = caught = 0
    for arrivals in (False, True):
        for seed in TINY:
            inst = tiny_instance(seed, arrivals=arrivals)
            names = {b.name for b in load_bounds(inst, "latency")}
            one = most_items(inst) == 1
            assert ("srpt-work-alone" in names) == one
            listed += one
            if not one:
                release = np.array([r.arrival for r in inst.requests])
                alone = critical_path_times(inst)
                caught += srpt_mean_bound(release, alone, alone) > optimum(inst, "latency") * (1 + 1e-9)
    assert listed and caught


def _chunk_attention(I: int, chunks: list[int], L: float, pq: float, px: float) -> float:
    """The attention terms of prefilling I tokens in ``chunks`` from an empty KV (the replay's
    ``per_token_sq * c^2 + per_ctx * c * cached`` of each chunk), less the ``L * pq * I`` that
    request_work counts."""
    cached, total = 0, 0.0
    for c in chunks:
        total += pq * c * c + px * c * cached
        cached += c
    assert cached == I
    return L * (total - pq * I)


@pytest.mark.parametrize("pq, px", [(1.411e-09, 1.542e-09), (1e-10, 2e-9), (3e-9, 0.0), (0.0, 1e-9)])
def test_the_prompt_attention_extra_is_the_least_over_every_chunking(pq: float, px: float) -> None:
    """:func:`prompt_attention_extra` is at most the attention of every chunking of the prompt into
    chunks of at most P (random ones, one token each, P each) and equal to the least of them."""
    from optsched.load_bounds import prompt_attention_extra

    rng = random.Random(7)
    for _ in range(200):
        I, P = rng.randint(1, 300), rng.choice([1, 2, 16, 64, 512])
        profile = {"layers": 2, "base": 1e-3, "per_token": 1e-6, "prefill": {"per_token_sq": pq, "per_ctx": px}}
        inst = parse_instance(
            {
                "name": "a",
                "cost_model": profile,
                "limits": {"token_budget": 512, "prefill_budget": min(P, 512)},
                "requests": [{"id": "r", "prompt_tokens": I, "output_tokens": 1}],
            },
            "a",
        )
        extra = float(prompt_attention_extra(inst, np.array([I]))[0])
        chunkings = [[1] * I, [min(P, I - k) for k in range(0, I, P)]]
        left, random_chunks = I, []
        while left:
            random_chunks.append(rng.randint(1, min(P, left)))
            left -= random_chunks[-1]
        chunkings.append(random_chunks)
        costs = [_chunk_attention(I, ch, 2, pq, px) for ch in chunkings]
        assert extra >= 0.0 and all(extra <= c * (1 + 1e-9) + 1e-18 for c in costs), (I, P, extra, costs)
        if pq >= px / 2 or I % P == 0 or I <= P:  # then one of the first two chunkings reaches it
            assert extra == pytest.approx(min(costs[:2]), rel=1e-9, abs=1e-18)


def long_prompt_instance(n: int, seed: int):
    """N requests with prompts of 64 to 2,048 tokens (the H200 profile's attention terms matter)
    arriving fast enough to queue, with C, P, M and R_max drawn at random."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for k in range(n):
        t += rng.expovariate(rng.choice([20.0, 100.0]))
        reqs.append({
            "id": f"r{k}",
            "prompt_tokens": rng.randint(64, 2048),
            "output_tokens": rng.randint(1, 16),
            "arrival": round(t, 6),
        })
    big = -(-max(r["prompt_tokens"] + r["output_tokens"] for r in reqs) // 16) * 16  # whole blocks (vllm-v1)
    C = rng.choice([2048, 4096])
    limits = {
        "token_budget": C,
        "prefill_budget": rng.choice([256, 1024, C]),
        "kv_capacity": rng.choice([big, 8 * big, None]),
        "max_running": rng.choice([8, None]),
    }
    return parse_instance(
        {"name": f"long-{n}-{seed}", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs},
        f"long-{n}-{seed}",
    )


@pytest.mark.parametrize("n, seed", [(40, 1), (100, 2)])
def test_bounds_with_attention_are_at_most_every_policy(n: int, seed: int) -> None:
    """With prompts long enough for the attention terms, every bound is at most every policy's
    replayed value, and the prompts' attention lifts the SRPT bounds."""
    inst = long_prompt_instance(n, seed)
    for objective in OBJECTIVES:
        least = min(policy_values(inst, objective).values())
        for b in proven_bounds(inst, objective):
            assert b.valid and b.value <= least * (1 + 1e-9), (objective, b, least)


def test_the_prompts_attention_lifts_the_srpt_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """On long prompts under the H200 profile the attention floor raises both SRPT bounds."""
    inst = long_prompt_instance(100, 2)
    with_attention = {o: max(b.value for b in load_bounds(inst, o)) for o in OBJECTIVES}
    monkeypatch.setattr("optsched.load_bounds.prompt_attention_extra", lambda instance, prompts: 0.0)
    without = {o: max(b.value for b in load_bounds(inst, o)) for o in OBJECTIVES}
    assert all(with_attention[o] > without[o] * (1 + 1e-6) for o in OBJECTIVES), (with_attention, without)


@pytest.mark.parametrize("arrivals", [False, True])
def test_bounds_under_the_h200_profile_are_at_most_the_exhaustive_optimum(arrivals: bool) -> None:
    """The tiny instances again under ``llama2-7b-h200`` (its attention terms: per_token_sq and
    per_ctx): every bound on both objectives is at most the exhaustive optimum."""
    for seed in TINY[:10]:
        data = tiny_instance(seed, arrivals=arrivals).to_dict()
        data["cost_model"] = "llama2-7b-h200"
        inst = parse_instance(data, data["name"])
        for objective in OBJECTIVES:
            best = optimum(inst, objective)
            for b in proven_bounds(inst, objective):
                assert b.value <= best * (1 + 1e-9), (seed, objective, b, best)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_an_expired_budget_lists_the_first_srpt_bound_only(objective: str) -> None:
    """Within a budget the load-aware bounds stop when the time is up: an expired one still gives the
    first SRPT bound (the same value as without a limit: the first share weights), the others left out."""
    inst = loaded_instance(120, 3)
    whole = {b.name: b.value for b in load_bounds(inst, objective)}
    cut = load_bounds(inst, objective, budget=TimeBudget.of(0.0))
    assert [b.name for b in cut] == [f"srpt-{'work' if objective == 'latency' else 'prefill'}"]
    assert cut[0].value <= whole[cut[0].name]
    assert len(whole) > 1
    generic = {b.name for b in proven_bounds(inst, objective, TimeBudget.of(0.0))}
    assert generic == {b.name for b in proven_bounds(inst, objective)} - (set(whole) - {cut[0].name})

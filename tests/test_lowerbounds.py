"""Tests of the trivial bounds: valid against every policy, tight where they should be, and the
closed forms equal brute force."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched.instance import InstanceError, load_instance, parse_instance
from optsched.lowerbounds import _min_ttft, _sum_min_linear, instance_bounds, request_bounds
from optsched.costmodel import cost_model_from_mapping
from optsched.policies import policy_names, simulator_for
from optsched.schedule import replay

RTOL = 1e-9


@settings(max_examples=200, deadline=None)
@given(
    a1=st.floats(0, 5), k1=st.floats(0, 2), a2=st.floats(0, 5), k2=st.floats(0, 2),
    lo=st.integers(0, 30), span=st.integers(-1, 30),
)
def test_sum_min_linear_equals_brute_force(a1, k1, a2, k2, lo, span):
    hi = lo + span
    brute = math.fsum(min(a1 + k1 * x, a2 + k2 * x) for x in range(lo, hi + 1))
    assert _sum_min_linear(a1, k1, a2, k2, lo, hi) == pytest.approx(brute, rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(1, 60), cap=st.integers(1, 60), fixed=st.floats(0, 3), quad=st.floats(0, 1))
def test_min_ttft_equals_brute_force_over_chunk_counts(prompt, cap, fixed, quad):
    cm = cost_model_from_mapping({"base": fixed, "prefill": {"per_token_sq": quad}})
    brute = min(k * fixed + quad * prompt * prompt / k for k in range(math.ceil(prompt / cap), prompt + 1))
    assert _min_ttft(cm, prompt, cap) == pytest.approx(brute, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", ["toy-4", "infermax-i1024-o32-n64", "infermax-lilo-silo-64"])
def test_no_policy_beats_the_bounds(name):
    inst = load_instance(name)
    bounds = {b.name: b.value for b in instance_bounds(inst)}
    per = {r.id: request_bounds(inst, r) for r in inst.requests}
    for policy in policy_names():
        try:
            schedule = simulator_for(policy)(inst)
        except InstanceError:  # a policy with preconditions this instance does not meet
            continue
        res = replay(inst, schedule)
        m = res.metrics
        assert m.makespan >= bounds["makespan"] * (1 - RTOL), policy
        assert m.mean_latency >= bounds["mean-latency"] * (1 - RTOL), policy
        assert m.mean_ttft >= bounds["mean-ttft"] * (1 - RTOL), policy
        assert m.throughput <= bounds["throughput-upper"] * (1 + RTOL), policy
        for rid, o in res.outcomes.items():
            assert o.latency >= per[rid].e2e * (1 - RTOL) and o.ttft >= per[rid].ttft * (1 - RTOL)


def test_critical_path_bound_is_tight_for_one_request():
    # One request alone: a full prefill then decodes is optimal under llama2-7b-a100 (decode with
    # x KV slots is cheaper than recomputing for x < 8600), and the bound is exactly its time.
    inst = parse_instance({"name": "one", "cost_model": "llama2-7b-a100",
                           "requests": [{"id": "a", "prompt_tokens": 64, "output_tokens": 4}]})
    res = replay(inst, simulator_for("vllm")(inst))
    bounds = {b.name: b.value for b in instance_bounds(inst)}
    assert res.metrics.makespan == pytest.approx(bounds["makespan-critical-path"], rel=1e-12)
    assert res.metrics.makespan == pytest.approx(bounds["makespan"], rel=1e-12)

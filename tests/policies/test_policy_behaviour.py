"""The InferMax paper's reported baseline behaviour holds in simulation (docs/policies.md).

Setting of the paper (section 4.1): Llama-2-7B on an A100 (profile ``llama2-7b-a100``), C = P = 4096,
M = 100,000, offline requests with fixed input and output sizes I and O, B requests.

*Average running size* (section 4.3): the running size is the number of requests holding KV
(section 2.2); we average it over the batches that carry decode items (the iterations in which
requests generate tokens; replay's ``running`` trace counts requests finishing in the batch).
"""

from __future__ import annotations

import functools

import pytest

from optsched import Instance, Limits, Request, load_cost_model, replay
from optsched.policies import reads_slo
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.engine import simulate
from optsched.workload import WorkloadTransforms, apply_transforms

COST = load_cost_model("llama2-7b-a100")
M = 100_000
BASE = [name for name, cfg in POLICY_CONFIGS.items() if not cfg.eviction_free]


@functools.cache
def fixed(I: int, O: int, B: int) -> Instance:
    reqs = tuple(Request(f"r{k}", 0.0, I, O) for k in range(B))
    return Instance(f"I{I}-O{O}-B{B}", COST, Limits(4096, 4096, M, None), reqs)


@functools.cache
def average_running_size(I: int, O: int, B: int, policy: str) -> tuple[float, int, int]:
    """(mean running size over decode batches, max running size, evictions) of a replayed run."""
    instance = fixed(I, O, B)
    result = replay(instance, simulate(instance, policy))
    assert result.feasible, result.violations[:3]
    decode = [run for run, dec in zip(result.running, result.decode_items) if dec > 0]
    return sum(decode) / len(decode), max(result.running), result.metrics.evictions


@pytest.mark.parametrize("I, paper", [(1, 98), (1024, 49)])
def test_eviction_free_vllm_running_size_is_about_M_over_I_plus_O(I, paper):
    """Paper 4.3: with O = B = 1024 the eviction-free schedulers run about 100K/(I+O) requests.

    Each admission reserves I + O - 1 slots, so waves of floor(M / (I + O - 1)) requests run
    together (97 for I = 1, 48 for I = 1024); the last wave is partial (1024 = 10 x 97 + 54 and
    21 x 48 + 16), which pulls the average a few percent below M / (I + O). Tolerance: 6 %.
    """
    avg, peak, evictions = average_running_size(I, 1024, 1024, "vllm-ef")
    assert evictions == 0
    assert peak == M // (I + 1024 - 1)
    assert round(M / (I + 1024)) == paper
    assert avg == pytest.approx(M / (I + 1024), rel=0.06)


def test_eviction_free_vllm_running_size_exact_for_one_token_prompts():
    # I = 1: every wave is one prefill batch (w one-token prompts) then 1023 decode batches, all with
    # w requests running; waves of 97 ten times, then 54. Mean over decode batches (1023 per wave):
    expected = (10 * 97 + 54) / 11
    avg, _, _ = average_running_size(1, 1024, 1024, "vllm-ef")
    assert avg == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("I", [1, 1024])
def test_vllm_evicts_under_high_contention_and_ef_does_not(I):
    """Paper 4.2/4.3: at O = B = 1024 vLLM evicts (and overshoots M/(I+O) running requests)."""
    avg, peak, evictions = average_running_size(I, 1024, 1024, "vllm")
    assert evictions > 0 and peak > M // (I + 1023)
    assert average_running_size(I, 1024, 1024, "vllm-ef")[2] == 0


@pytest.mark.parametrize("name", BASE)
def test_no_policy_evicts_at_low_contention(name):
    """Paper A.1: with B = 32 no scheduler evicts (I, O over the paper's named grid values)."""
    for I in (1, 64, 128, 1024):
        for O in (1, 4, 32, 1024):
            inst = fixed(I, O, 32)
            if reads_slo(name):  # slo-budget schedules by the requests' TTFT and TPOT targets
                inst = apply_transforms(inst, WorkloadTransforms(slo_ttft=1.0, slo_tpot=0.1))
            result = replay(inst, simulate(inst, name))
            assert result.feasible and result.metrics.evictions == 0, (I, O)


def mean_kv_share(I: int, O: int, kv: int, policy: str) -> float:
    """Time-weighted mean of the KV slots in use (after each batch's processing) over M."""
    inst = Instance("kv", COST, Limits(4096, 4096, kv, None), tuple(Request(f"r{k}", 0.0, I, O) for k in range(1024)))
    result = replay(inst, simulate(inst, policy))
    assert result.feasible
    spans = [end - start for start, end in zip(result.starts, result.ends)]
    return sum(k * s for k, s in zip(result.kv_used, spans)) / sum(spans) / kv


@pytest.mark.parametrize("I", [1, 1024])
def test_sarathi_fills_the_kv_cache_at_high_output(I):
    """Paper 4.2: at O = B = 1024 Sarathi occupies more than 90 % of the KV cache (we get 92-95 %)."""
    assert mean_kv_share(I, 1024, M, "sarathi") > 0.90


@pytest.mark.parametrize("policy", ["sarathi", "sarathi-pc"])
def test_sarathi_uses_little_of_a_huge_cache(policy):
    """Paper 4.4: with M = 1M, O = 32, B = 1024, Sarathi and Sarathi_P=C use < 20 % of M on average."""
    for I in (1, 1024):
        assert mean_kv_share(I, 32, 1_000_000, policy) < 0.20

"""Tests of the cost model, its shipped profiles, and fitting (synthetic and on real Vidur profiles)."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.costmodel import (
    CostModelError,
    available_profiles,
    cost_model_from_mapping,
    fit_linear,
    linear_errors,
    load_cost_model,
    read_vidur_mlp_profile,
)


def test_shipped_profiles_load_with_sources():
    assert set(available_profiles()) >= {"llama2-7b-a100", "llama2-70b-a100", "llama-65b-ascend8"}
    for name in available_profiles():
        cm = load_cost_model(name)
        assert cm.name == name and cm.source


#: The code's per-decode-request kernel cost s_d (ms per layer), left out of the shipped profile.
S_D_MS = 0.00074


@pytest.mark.parametrize(
    "batch, ms",
    [
        # sanity values of the InferMax 7B set (digest seed001, appendix X1; quoted to 3 digits)
        ((1024, 1024, 1024**2, 0, 0), 73.3),
        ((4096, 4096, 4 * 1024**2, 0, 0), 278),
        ((4096, 4096, 4096**2, 0, 0), 345),
        ((1, 0, 0, 1, 1024), 3.05),
        ((98, 0, 0, 98, 98 * 1024), 38.3),
        ((49, 0, 0, 49, 49 * 2047), 34.2),
    ],
)
def test_llama2_7b_a100_matches_the_digest(batch, ms):
    # The digest's decode values include the code's s_d * n_dec term per layer, which the shipped
    # profile (the paper's simpler form) leaves out; add it back to compare.
    n_dec = batch[3]
    got = load_cost_model("llama2-7b-a100").batch_time(*batch) * 1e3 + 32 * S_D_MS * n_dec
    assert got == pytest.approx(ms, rel=5e-3)


def test_ascend_profile_is_the_hybrid_papers_laws():
    cm = load_cost_model("llama-65b-ascend8")
    assert cm.prefill_time(100) == pytest.approx(0.025 + 0.00013 * 100)
    assert cm.decode_time(10, 5000) == pytest.approx(0.029 + 0.00021 * 10)


def test_inline_model_validation():
    assert cost_model_from_mapping({"base": 1}).batch_time(0, 0, 0, 0, 0) == 0.0
    for bad, field in [({"base": -1}, "base"), ({"prefill": {"bias": "x"}}, "prefill.bias"),
                       ({"decode": {"slope": 1}}, "unknown"), ({"layers": 0}, "layers")]:
        with pytest.raises(CostModelError, match=field):
            cost_model_from_mapping(bad)


def test_fit_linear_recovers_exact_coefficients():
    x = np.array([1, 2, 8, 100, 4096])
    fit = fit_linear(x, 3e-4 + 2e-6 * x)
    assert fit.base == pytest.approx(3e-4, rel=1e-9) and fit.per_token == pytest.approx(2e-6, rel=1e-9)
    assert fit.max_abs_pct_error < 1e-7 and fit.r_squared == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fit_linear(np.array([1.0]), np.array([1.0]))


VIDUR = [
    ("mlp_a100_meta-llama_Llama-2-7b-hf.csv", "llama2-7b-a100"),
    ("mlp_a100_meta-llama_Llama-2-70b-hf.csv", None),
    ("mlp_h100_meta-llama_Llama-2-7b-hf.csv", None),
]


@pytest.mark.parametrize("filename, shipped", VIDUR)
def test_fit_on_real_vidur_profiles(data_dir, filename, shipped):
    path = data_dir / "vidur_profiling" / filename
    if not path.exists():
        pytest.skip(f"{filename} is not present")
    tokens, seconds = read_vidur_mlp_profile(str(path), tensor_parallel=1)
    assert len(tokens) == 259 and tokens[0] == 1 and tokens[-1] == 4096 and (np.diff(tokens) > 0).all()
    fit = fit_linear(tokens, seconds)
    # a straight line explains the measured non-attention time well at scale ...
    assert fit.r_squared > 0.995 and fit.mean_abs_pct_error < 6.0
    # ... but not at tiny batches, where fixed kernel costs dominate (documented in docs/costmodel.md)
    assert fit.max_abs_pct_error > 20.0
    if shipped:
        cm = load_cost_model(shipped)
        # the InferMax code's 7B "other" term is close to this profile's slope (within 10%)
        assert fit.per_token == pytest.approx(cm.per_token, rel=0.10)
        # at 4096 tokens the profile sums to about 8.1 ms per layer, the shipped term gives 7.89 ms
        assert seconds[-1] * 1e3 == pytest.approx(8.1, rel=0.03)
        assert (cm.base + cm.per_token * 4096) * 1e3 == pytest.approx(7.89, rel=1e-3)
        mean_err, _ = linear_errors(cm.base, cm.per_token, tokens, seconds)
        assert mean_err > fit.mean_abs_pct_error  # least squares beats the shipped coefficients on this data


def test_vidur_reader_rejects_other_files(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("tokens,time\n1,2\n")
    with pytest.raises(CostModelError, match="not a Vidur operator profile"):
        read_vidur_mlp_profile(str(path))

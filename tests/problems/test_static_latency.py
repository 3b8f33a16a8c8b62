"""Static-batch latency model (SLO paper Eqs. 14-19, SCLS Eqs. 1-4): values, closed forms, fitting."""

import numpy as np
import pytest

from optsched.instance import InstanceError
from optsched.problems.static_latency import (
    Phase,
    StaticLatencyModel,
    StaticTimes,
    fit_phase,
    fit_static_latency,
    load_static_latency,
)

# docs/gmax.md, "Latency model" (Table 2 coefficients, ms): (b, l_in, l_out, t_p, t_d, t_exec, TPOT)
CHECK = [
    (1, 500, 200, 104.37, 3354.708, 3459.078, 16.7735),
    (2, 500, 200, 160.07, 3433.728, 3593.798, 17.1686),
    (4, 500, 200, 271.47, 3591.768, 3863.238, 17.9588),
    (1, 1000, 1000, 159.37, 17745.54, 17904.91, 17.7455),
    (4, 100, 50, 107.47, 858.042, 965.512, 17.1608),
    (32, 2000, 2000, 6646.07, 92987.28, 99633.35, 46.4936),
]


@pytest.mark.parametrize("b,li,lo,tp,td,te,tpot", CHECK)
def test_table2_profile_reproduces_the_check_values(b, li, lo, tp, td, te, tpot):
    m = load_static_latency("qwen2.5-7b-2xv100")
    assert m.unit == "ms" and "Table 2" in m.source
    assert m.prefill_time(b, li) * 1e3 == pytest.approx(tp, abs=1e-6)
    assert m.decode_time(b, li, lo) * 1e3 == pytest.approx(td, abs=1e-6)
    assert m.exec_time(b, li, lo) * 1e3 == pytest.approx(te, abs=1e-6)
    assert m.tpot(b, li, lo) * 1e3 == pytest.approx(tpot, abs=1e-4)


def test_closed_form_equals_explicit_sum_of_decode_steps():
    m = load_static_latency("qwen2.5-7b-2xv100")
    for b, li, lo in [(1, 7, 1), (3, 120, 77), (16, 1500, 400)]:
        explicit = sum(m.decode_step(b, li + k) for k in range(1, lo + 1))
        assert m.decode_time(b, li, lo) == pytest.approx(explicit, rel=1e-12)


def test_scls_slice_coefficients_match_serve_time_and_fig11():
    # docs/scls.md, synthetic HF profile (seconds) reproduces Fig. 11: 13.5 s vs 7.6 s
    m = StaticLatencyModel(Phase(1.1e-4, 1.0e-3, 1.0e-5, 0.03), Phase(3.63e-6, 3.0e-4, 1.0e-6, 0.02186))
    assert m.serve_time(16, 1024, 128) == pytest.approx(13.502, abs=1e-3)
    assert m.serve_time(15, 10, 128) + m.serve_time(1, 1024, 128) == pytest.approx(7.600, abs=1e-3)
    a, b, c, e = m.slice_coefficients(128)
    assert (a, b, c, e) == pytest.approx((5.7464e-4, 0.069369, 1.38e-4, 2.836336), rel=1e-4)
    for n, l in [(1, 10), (7, 300), (16, 1024)]:
        assert a * n * l + b * n + c * l + e == pytest.approx(m.serve_time(n, l, 128), rel=1e-12)


def test_least_squares_recovers_coefficients_both_decode_targets():
    truth = load_static_latency("qwen2.5-7b-2xv100")
    rng = np.random.default_rng(3)
    b = rng.integers(1, 33, 200)
    li = rng.integers(100, 2000, 200)
    lo = rng.integers(1, 500, 200)
    tp = [truth.prefill(x, y) for x, y in zip(b, li)]
    steps = [truth.decode(x, y) for x, y in zip(b, li)]
    totals = [truth.decode_time(x, y, z) / truth.scale for x, y, z in zip(b, li, lo)]
    per_step = fit_static_latency((b, li, tp), (b, li, steps), unit="ms")
    whole = fit_static_latency((b, li, tp), (b, li, lo, totals), unit="ms")
    for fitted in (per_step, whole):
        for got, want in [(fitted.prefill, truth.prefill), (fitted.decode, truth.decode)]:
            assert np.allclose(list(got.to_dict().values()), list(want.to_dict().values()), rtol=1e-6, atol=1e-9)
    noisy = fit_phase(b, li, np.asarray(tp) * (1 + rng.normal(0, 0.01, 200)))
    assert noisy.alpha == pytest.approx(0.1, rel=0.05)


def test_tabulated_times_and_errors():
    m = load_static_latency("qwen2.5-7b-2xv100")
    tab = StaticTimes.from_model(m, [500, 100], [200, 50], 4)
    assert tab.exec.shape == (2, 4) and tab.exec[0, 3] == pytest.approx(3.863238)
    with pytest.raises(InstanceError, match="unknown profile"):
        load_static_latency("nope")
    with pytest.raises(InstanceError, match="static_latency.unit"):
        load_static_latency({"unit": "h", "prefill": {}, "decode": {}})

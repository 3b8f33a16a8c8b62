"""Aladdin's output-length predictor (aladdin/predictor.py)."""

from __future__ import annotations

from optsched.problems.aladdin.predictor import BinPredictor


def test_bin_predictor_conditional_means():
    prompts = [10] * 4 + [100] * 4
    outputs = [1, 2, 3, 10, 50, 60, 70, 80]
    p = BinPredictor.fit(prompts, outputs, bins=2)
    assert p.predict(10) == 4  # ceil(16 / 4)
    assert p.predict(100) == 65
    assert p.repredict(10, 4) == 10  # mean of the outputs > 4 in the bin
    assert p.repredict(10, 10) == 11  # no history beyond: g + 1

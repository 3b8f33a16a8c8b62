"""G-maximisation's problem and evaluator (gmax/problem.py): calculateG's semantics, the
paper's toy values (Figs. 3-5), the exhaustive reference's count of schedules."""

import math

import pytest

from optsched.instance import InstanceError, parse_instance
from optsched.problems.gmax.problem import GmaxProblem, evaluate_g
from optsched.problems.gmax.sa import (
    SAParams,
    simulated_annealing,
)
from tests.support.gmax import TOYS, toy
from tests.support.gmax_generate import random_gmax_instance
from tests.support.static_exhaustive import ordered_partitions


def test_toy_values_match_the_paper():
    assert round(TOYS["fig3-slo-order"][1], 4) == 1.0345
    assert round(TOYS["fig4-batch-size"][1], 3) == 1.667
    assert round(TOYS["fig5-defer-strict"][1], 4) == 0.6897
    # the captions' starting points: SPT order (Figs. 3, 5) and all in one batch (Fig. 4)
    assert evaluate_g(toy("fig3-slo-order"), [["J1"], ["J2"], ["J3"]]).G == pytest.approx(0.7407, abs=1e-4)
    assert evaluate_g(toy("fig5-defer-strict"), [["J1"], ["J2"], ["J3"]]).G == pytest.approx(0.3704, abs=1e-4)
    ev = evaluate_g(toy("fig4-batch-size"), [["J1", "J2", "J3"]])
    assert (ev.n, ev.t) == (1, pytest.approx(2.4))
    for name, (_, g_star, _start) in TOYS.items():
        sa = simulated_annealing(toy(name), SAParams(seed=1))
        assert sa.G == pytest.approx(g_star) and not sa.early_exit


def test_evaluator_semantics_chat_and_e2e():
    data = {
        "name": "sem",
        "cost_model": "llama2-7b-a100",
        "max_batch_size": 2,
        "requests": [
            {
                "id": "a",
                "prompt_tokens": 1,
                "output_tokens": 10,
                "task": "chat",
                "slo": {"ttft": 0.35, "tpot": 0.02},
                "static_times": {"unit": "ms", "exec": [200, 300], "prefill": [50, 80], "tpot": [15, 25]},
            },
            {
                "id": "b",
                "prompt_tokens": 1,
                "output_tokens": 10,
                "slo": {"e2e": 0.5},
                "static_times": {"exec": [0.3, 0.4]},
            },
        ],
    }
    p = GmaxProblem.from_instance(parse_instance(data))
    together = evaluate_g(p, [["a", "b"]])  # TPOT 25 ms > 20 ms: a misses; b: 0.4 <= 0.5
    assert (together.n, together.t) == (1, pytest.approx(0.7))
    assert together.tpot["a"] == pytest.approx(0.025) and math.isnan(together.ttft["b"])
    apart = evaluate_g(p, [["b"], ["a"]])  # a waits 0.3: TTFT 0.35 <= 0.35 meets
    assert (apart.n, apart.t, apart.ttft["a"]) == (2, pytest.approx(0.8), pytest.approx(0.35))
    assert apart.starts == (0.0, 0.3) and apart.durations == (0.3, 0.2)
    with pytest.raises(ValueError, match="already in batch"):
        evaluate_g(p, [["a"], ["a", "b"]])
    with pytest.raises(ValueError, match="never scheduled"):
        evaluate_g(p, [["a"]])
    bad = dict(data, max_batch_size=3)
    with pytest.raises(InstanceError, match="static_times'.exec"):
        GmaxProblem.from_instance(parse_instance(bad))
    bad = dict(data, requests=[dict(data["requests"][0], task="code")])
    with pytest.raises(InstanceError, match="field 'task'"):
        GmaxProblem.from_instance(parse_instance(bad))
    bad = {k: v for k, v in data.items() if k != "max_batch_size"}
    with pytest.raises(InstanceError, match="field 'max_batch_size': missing"):
        GmaxProblem.from_instance(parse_instance(bad))
    with pytest.raises(InstanceError, match="field 'max_batch_size': must be an integer >= 1, got 0"):
        GmaxProblem.from_instance(parse_instance(dict(data, max_batch_size=0)))


def test_exhaustive_counts_match_the_ordered_partitions():
    data = random_gmax_instance(5, 0, max_batch_size=1)
    for bmax, count in [(1, 120), (2, 450), (3, 530)]:
        p = GmaxProblem.from_instance(parse_instance(dict(data, max_batch_size=bmax)))
        assert sum(1 for _ in ordered_partitions(p)) == count

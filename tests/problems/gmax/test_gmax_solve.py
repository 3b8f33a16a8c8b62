"""G-maximisation's registry entry and command (gmax/solve.py): the solve reports the evaluated G and
its batches; optsched solve --problem gmax and its bad input."""

import json

import pytest

from optsched.instance import load_instance
from tests.support.paths import INSTANCES
from tests.support.solving import registered_solve


def test_registry_solve_reports_evaluated_g_and_batches():
    inst = load_instance(INSTANCES / "static" / "fig4-batch-size.json")
    for opts in ({}, {"method": "sa", "seed": 3}, {"solver": "cpsat", "exact_method": "fixed-n", "frontier": True}):
        res = registered_solve("gmax", inst, opts)
        assert res.sense == "max" and res.schedule is None
        assert res.objective == pytest.approx(3 / 1.8)
        assert [sorted(b) for b in res.batches] == [["J1", "J2"], ["J3"]]
        assert res.extra["n"] == 3 and res.extra["t"] == pytest.approx(1.8)
        out = res.to_dict()
        assert json.dumps(out) and out["requests"]["J3"]["e2e"] == pytest.approx(0.84)
    frontier = registered_solve("gmax", inst, {"frontier": True}).extra["frontier"]
    assert [(f["n"], round(f["t"], 9)) for f in frontier] == [(1, 1.8), (2, 1.8), (3, 1.8)]


def test_cli_solve_gmax_and_bad_input(capsys):
    from optsched.cli import main

    assert main(["solve", str(INSTANCES / "static" / "fig5-defer-strict.json"), "--problem", "gmax", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == pytest.approx(2 / 2.9) and out["batches"] == [["J2"], ["J1"], ["J3"]]
    assert main(["solve", "toy-4", "--problem", "gmax", "--json"]) == 2
    assert "max_batch_size" in capsys.readouterr().err

"""``optsched info`` at trace scale (issue 39 item 18): the per-token sums of the bounds it prints
in closed form, each against its definition summed token by token, and ``info --time-limit``."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from optsched.bounds import instance_bounds, request_bounds
from optsched.cli import main
from optsched.commands import info as info_command
from optsched.commands.info import describe
from optsched.instance import SLO, load_instance
from optsched.schedule import TIME_RTOL
from optsched.tokensums import smallest_clipped_sums, sum_of_runs
from optsched.workload import load_trace
from tests.support.info_traces import repeated_trace
from tests.support.paths import shared_data

DATA = shared_data()
TRACE = (DATA or Path("/nonexistent")) / "traces" / "splitwise_conv.csv"


def _smallest_brute_force(base, counts, slope, offset, width, cuts) -> np.ndarray:
    out = np.zeros((len(cuts), width))
    for s, cut in enumerate(cuts):
        for b, n in zip(base[:cut].tolist(), counts[:cut].tolist()):
            terms = np.sort(np.maximum(0.0, slope * (b + np.arange(1, n + 1, dtype=np.float64)) + offset))
            for D in range(width):
                out[s, D] += terms[: max(0, n - D)].sum()
    return out


@pytest.mark.parametrize("seed", range(40))
def test_smallest_clipped_sums_are_the_sums_of_the_smallest_terms(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    base, counts = rng.integers(0, 50, n), rng.integers(0, 30, n)
    slope = [0.0, float(rng.normal()), -abs(float(rng.normal())), abs(float(rng.normal()))][seed % 4]
    offset = float(rng.normal() * 20)
    width = int(rng.integers(1, 40))
    cuts = np.unique(np.append(rng.integers(0, n + 1, 3), n)).astype(np.int64)
    found = smallest_clipped_sums(base, counts, slope, offset, width, cuts)
    assert np.allclose(found, _smallest_brute_force(base, counts, slope, offset, width, cuts), rtol=1e-9, atol=1e-9)


def test_smallest_clipped_sums_stay_exact_beyond_int64() -> None:
    """Positions near 2**31 square beyond int64 over many requests: Python integers take over."""
    base, counts = np.array([2**31, 5, 2**31 + 7]), np.array([3, 4, 2])
    cuts = np.array([1, 3])
    found = smallest_clipped_sums(base, counts, 1e-9, -1.0, 6, cuts)
    assert np.allclose(found, _smallest_brute_force(base, counts, 1e-9, -1.0, 6, cuts), rtol=1e-12)


@pytest.mark.parametrize(("far", "block"), [(10**4, 4), (40, 1 << 20)])  # far runs: in blocks; near: the table
def test_sum_of_runs_is_the_sum_over_each_run(far: int, block: int) -> None:
    rng = np.random.default_rng(block)
    starts, counts = rng.integers(0, far, 30), rng.integers(0, 9, 30)
    counts[3] = 0
    found = sum_of_runs(starts, counts, lambda h: np.sqrt(h) + 0.5 * h, block)
    expected = [sum(np.sqrt(h) + 0.5 * h for h in range(s, s + c)) for s, c in zip(starts, counts)]
    assert np.allclose(found, expected, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- optsched info


def test_slo_check_at_once_matches_the_per_request_bounds() -> None:
    """The SLOs found unattainable over the columns are those of :func:`request_bounds`, request by
    request, in request order (the planted SLOs: some below the bound, some above, some missing)."""
    base = load_instance("poisson-mixed-100")
    rng = np.random.default_rng(3)
    reqs = []
    for r in base.requests:
        lb = request_bounds(base, r)
        scale = rng.choice([0.5, 2.0])
        kinds = {k: rng.random() < 0.6 for k in ("ttft", "e2e", "tpot", "atgt")}
        slo = SLO(
            ttft=lb.ttft * scale if kinds["ttft"] else None,
            e2e=lb.e2e * scale if kinds["e2e"] else None,
            tpot=lb.tpot * scale if kinds["tpot"] and lb.tpot else None,
            atgt=lb.tpot * rng.choice([0.5, 2.0]) if kinds["atgt"] and lb.tpot else None,
        )
        reqs.append(replace(r, slo=slo if rng.random() < 0.8 else None))
    instance = base.with_requests(reqs)
    expected = []
    for r in instance.requests:
        if r.slo is None:
            continue
        lb = request_bounds(instance, r)
        for what, target, bound in (
            ("ttft", r.slo.ttft, lb.ttft),
            ("e2e", r.slo.e2e, lb.e2e),
            ("tpot", r.slo.tpot, lb.tpot),
            ("atgt", r.slo.atgt, lb.tpot),
        ):
            if target is not None and bound is not None and bound > target * (1 + TIME_RTOL):
                expected.append({"id": r.id, "slo": what, "target": target, "lower_bound": bound})
    found = describe(instance)["slo_unattainable"]
    assert expected and [(f["id"], f["slo"]) for f in found] == [(e["id"], e["slo"]) for e in expected]
    for f, e in zip(found, expected):
        assert f["target"] == e["target"] and f["lower_bound"] == pytest.approx(e["lower_bound"], rel=1e-12)


def test_info_of_a_repeated_trace_gives_every_figure(tmp_path, capsys) -> None:
    """Issue 39 item 18's reproduction at a small size: the conversation trace repeated to 30,000
    rows; every figure is computed (the speed goal is bench_info's)."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} not available")
    path = repeated_trace(TRACE, 30_000, tmp_path / "conv.csv")
    assert main(["info", str(path), "--cost-model", "llama2-7b-h200", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["requests"] == 30_000 and info["not_computed"] == [] and info["slo_unattainable"] == []
    names = {b["name"]: b["value"] for b in info["bounds"]}
    instance = load_trace(path, cost_model="llama2-7b-h200")
    assert names == {b.name: b.value for b in instance_bounds(instance)}
    assert names["makespan"] >= max(r.arrival for r in instance.requests)


@pytest.mark.parametrize("json_flag", [True, False])
def test_info_time_limit_reports_what_it_did_not_compute(monkeypatch, capsys, json_flag: bool) -> None:
    """Bounds that would take 30 s: ``--time-limit 1`` ends within it, the bounds reported as not
    computed (null in the JSON, named in not_computed and on stderr), the rest complete."""

    def slow_bounds(instance):
        time.sleep(30)
        return []

    monkeypatch.setattr(info_command, "instance_bounds", slow_bounds)
    t0 = time.perf_counter()
    code = main(["info", "toy-4", "--time-limit", "1", *(["--json"] if json_flag else [])])
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert code == 0 and wall < 1.0
    assert "not computed within the time limit: bounds" in err
    if json_flag:
        info = json.loads(out)
        assert info["bounds"] is None and info["not_computed"] == ["bounds"] and info["slo_unattainable"] == []
        assert info["requests"] == 4
    else:
        assert "bounds: not computed within the time limit" in out and "requests" in out


def test_info_without_a_limit_computes_everything(capsys) -> None:
    assert main(["info", "toy-4", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["not_computed"] == [] and info["bounds"]


def test_a_failure_of_the_bounds_under_a_time_limit_is_not_a_missing_figure(monkeypatch, capsys) -> None:
    """The bounds run in a worker thread under a limit: their error is the command's (exit 3 here),
    never reported as "not computed within the time limit"."""

    def broken_bounds(instance):
        raise RuntimeError("planted")

    monkeypatch.setattr(info_command, "instance_bounds", broken_bounds)
    assert main(["info", "toy-4", "--time-limit", "30", "--json"]) == 3
    err = capsys.readouterr().err
    assert "planted" in err and "not computed" not in err

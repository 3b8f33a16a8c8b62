"""One command per answer: export takes the instance options, report --requests-out --policy,
limits as a Limits or a mapping in the API, a time limit on the gmax annealing."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

import optsched
from optsched.cli import main
from optsched.generators import gsm8k_like
from optsched.instance import InstanceError, Limits, as_limits
from optsched.policies import simulator_for
from optsched.schedule import replay
from tests.support.paths import REPO, shared_data

TRACE = (shared_data() or REPO / "no-shared-data") / "traces" / "splitwise_conv.csv"
STATIC = REPO / "instances" / "static" / "fig4-batch-size.json"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_export_takes_the_instance_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A schedule simulated under a changed cost model and KV capacity exports in one command
    with the same options; its makespan is the replay's on that instance."""
    sched = tmp_path / "s.json"
    opts = ["--cost-model", "llama2-70b-a100", "--kv-capacity", "5000"]
    sim = _json(capsys, ["simulate", "toy-4", "--policy", "vllm", "--out", str(sched), *opts])
    out = _json(capsys, ["export", str(sched), "--format", "chrome-trace", "--out", str(tmp_path / "t.json"), *opts])
    assert out["exported"] and out["makespan"] == pytest.approx(sim["metrics"]["makespan"], rel=1e-12)
    plain = _json(capsys, ["export", str(sched), "--format", "chrome-trace", "--out", str(tmp_path / "u.json")])
    assert plain["makespan"] != pytest.approx(out["makespan"], rel=1e-6)  # the options were applied


def test_export_of_a_trace_file_in_one_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is absent")
    opts = ["--cost-model", "llama2-7b-h200", "--first", "40", "--rate-scale", "2"]
    sched = tmp_path / "s.json"
    sim = _json(capsys, ["simulate", str(TRACE), "--policy", "sarathi", "--out", str(sched), *opts])
    argv = ["export", str(sched), "--instance", str(TRACE), "--format", "chrome-trace", "--out", str(tmp_path / "t")]
    out = _json(capsys, [*argv, *opts])
    assert out["makespan"] == pytest.approx(sim["metrics"]["makespan"], rel=1e-12)
    assert main([*argv, "--first", "40"]) == 2  # a trace still needs its cost model
    assert "needs --cost-model" in capsys.readouterr().err


def test_report_requests_out_of_a_chosen_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst = optsched.load_instance("splitwise-conv-100")
    base = ["report", "splitwise-conv-100", "--policies", "vllm,sarathi-nohy", "--solve-max-requests", "0"]
    for policy in ("vllm", "sarathi-nohy"):
        path = tmp_path / f"{policy}.csv"
        assert main([*base, "--quiet", "--requests-out", str(path), "--policy", policy]) == 0
        capsys.readouterr()
        expected = replay(inst, simulator_for(policy)(inst)).outcomes
        with path.open() as fh:
            rows = {r["id"]: r for r in csv.DictReader(fh)}
        assert rows.keys() == expected.keys()
        assert all(float(rows[k]["finish"]) == pytest.approx(o.finish, rel=1e-12) for k, o in expected.items())
    assert main([*base, "--policy", "vllm"]) == 2
    assert "--policy: applies only with --requests-out" in capsys.readouterr().err
    assert main([*base, "--policy", "sarathi", "--requests-out", str(tmp_path / "x.csv")]) == 2
    assert "--policy: 'sarathi' is not among --policies" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_limits_as_a_mapping_or_a_limits(tmp_path: Path) -> None:
    assert as_limits({"kv_capacity": 5000}) == Limits(kv_capacity=5000)
    assert as_limits({"token_budget": 512}) == Limits(token_budget=512, prefill_budget=512)
    assert as_limits(None) == Limits() and as_limits(Limits(max_running=3)) == Limits(max_running=3)
    with pytest.raises(InstanceError, match="field 'limits.kv_capcity'"):
        as_limits({"kv_capcity": 5000})
    with pytest.raises(InstanceError, match="field 'limits.prefill_budget'"):
        as_limits({"token_budget": 100, "prefill_budget": 200})
    assert gsm8k_like(seed=1, limits=Limits(kv_capacity=50_000)).limits.kv_capacity == 50_000
    assert gsm8k_like(seed=1, limits={"kv_capacity": 50_000}).limits.kv_capacity == 50_000
    if TRACE.exists():
        for limits in ({"kv_capacity": 100_000}, Limits(kv_capacity=100_000)):
            inst = optsched.load_trace(TRACE, "llama2-7b-h200", limits=limits, max_rows=20)
            assert inst.limits.kv_capacity == 100_000


def test_gmax_annealing_stops_at_its_time_limit(capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.perf_counter()
    result = optsched.solve(STATIC, problem="gmax", method="sa", iters=10**9, time_limit=0.5)
    assert time.perf_counter() - t0 < 3.0  # 0.5 s, plus the start-up and the check of the result
    assert result.status == "time_limit" and result.objective is not None and result.batches
    unlimited = optsched.solve(STATIC, problem="gmax", method="sa")
    assert unlimited.status == "feasible"
    argv = ["solve", str(STATIC), "--problem", "gmax", "--method", "sa", "--time-limit", "20", "--quiet"]
    assert main(argv) == 0
    assert "status" in capsys.readouterr().out

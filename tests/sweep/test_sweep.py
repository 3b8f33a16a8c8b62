"""``optsched sweep`` on the local process pool: spec checks, rows, gaps, resume, faults, capacity.

The Ray executor has its own module (tests/sweep/test_sweep_ray.py); the HTML of ``sweep-report`` is
opened in headless Chromium in tests/sweep/test_sweep_report.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.cli import main
from optsched.commands.simulate import run_policy
from optsched.instance import load_instance, parse_instance
from optsched.schedule import Metrics
from optsched.sweep.capacity import rate_grid
from optsched.sweep.cells import COLUMNS, expand_cells
from optsched.sweep.runner import load_workloads
from optsched.sweep.spec import load_spec, parse_spec
from tests.support.sweep import (
    SMALL_SPEC,
    SOLVE_STATUSES,
    assert_same_rows,
    check_exactly_once,
    descendants,
    expected_keys,
    part_files,
    pool_workers,
    read_rows,
    run_cli,
    slow_spec,
    start_cli,
    wait_for_parts,
    write_spec,
)


def _sweep(tmp_path, spec: dict, *extra: str, out: str = "out") -> int:
    return main(["sweep", str(write_spec(tmp_path, spec)), "--out", str(tmp_path / out), "--no-progress", *extra])


# --------------------------------------------------------------------------- the spec


@pytest.mark.parametrize(
    "change, message",
    [
        ({"workloads": []}, "workloads: List should have at least 1 item"),
        ({"workloads": [{"instance": "toy-4", "trace": "x.csv"}]}, "workloads[0]: give exactly one of"),
        ({"run": {"simulate": ["vllm", "nope"]}}, "run.simulate[1]: unknown policy 'nope'"),
        ({"run": {"solve": [{"problem": "nope"}]}}, "run.solve[0].problem: unknown problem 'nope'"),
        (
            {"run": {"solve": [{"problem": "infermax", "solver": "glpk"}]}},
            "run.solve[0].solver: problem 'infermax' has no backend",
        ),
        (
            {"run": {"solve": [{"problem": "infermax", "time_limit": -1}]}},
            "run.solve[0].time_limit: Input should be greater than 0",
        ),
        ({"limits": {"kv_capacity": [0]}}, "limits: kv_capacity: must be integers from 1 to 1e+15 or null, got 0"),
        (
            {"limits": {"kv_capacity": [2**63]}},
            "limits: kv_capacity: must be integers from 1 to 1e+15 or null, got 9223372036854775808",
        ),
        (
            {"limits": {"max_running": [10**7]}},
            "limits: max_running: must be integers from 1 to 1e+06 or null, got 10000000",
        ),
        ({"limits": {"kv_cap": [10]}}, "limits.kv_cap.[key]"),
        ({"rate_scale": [0]}, "rate_scale: must be finite numbers > 0"),
        ({"cost_model": ["nope"]}, "cost_model: cost_model: unknown profile 'nope'"),
        ({"typo": 1}, "typo: Extra inputs are not permitted"),
        (
            {"capacity": {"low": 0.25, "high": 16, "tolerance": 1e-5}},
            "capacity: tolerance 1e-05 over [0.25, 16.0] makes 4.16e+05 grid points, more than 100,000",
        ),
        # a solve's or bounder's options are parsed as the cells will, before any cell runs
        (
            {"run": {"solve": [{"problem": "infermax", "foo": 1}]}},
            "run.solve[0]: problem 'infermax' has no solve option 'foo'",
        ),
        ({"run": {"solve": [{"problem": "infermax", "method": "sa"}]}}, "has no solve option 'method'"),
        (
            {"run": {"solve": [{"problem": "infermax", "objective": "nope"}]}},
            "run.solve[0]: option 'objective': unknown 'nope'",
        ),
        (
            {"run": {"solve": [{"problem": "infermax", "threads": "x"}]}},
            "run.solve[0]: option 'threads': must be an integer >= 1, got 'x'",
        ),
        (
            {"run": {"solve": [{"problem": "infermax", "warm_start": "nope"}]}},
            "run.solve[0]: option 'warm_start': unknown policy 'nope'",
        ),
        (
            {"run": {"solve": [{"problem": "hybrid-offline", "method": "lpt", "solver": "highs"}]}},
            "run.solve[0]: option 'solver': has no effect unless method is",
        ),
        ({"run": {"bound": {"time_limit": 5}}}, "run.bound.time_limit: the time limit of the bounders of run.bound"),
        (
            {"limits": {"token_budget": [None]}},
            "limits: token_budget: must be integers from 1 to 1e+15 (null, unlimited, is for kv_capacity and",
        ),
        ({"workloads": [{"instance": "toy-4", "limits": {"prefill_budget": None}}]}, "limits: prefill_budget: must"),
        # a repeated entry would run (or be reported as stored) twice
        ({"rate_scale": [1, 1.0]}, "rate_scale[1]: repeats rate_scale[0] (1.0)"),
        ({"limits": {"kv_capacity": [3000, 3000]}}, "limits.kv_capacity[1]: repeats limits.kv_capacity[0] (3000)"),
        (
            {"workloads": [{"instance": "toy-4"}, {"instance": "toy-4"}]},
            "workloads[1]: its name 'toy-4' (the workload column) is that of workloads[0]",
        ),
        ({"run": {"simulate": ["vllm", "vllm"]}}, "run.simulate[1]: repeats run.simulate[0] ('vllm')"),
        (
            {"run": {"solve": [{"problem": "infermax"}, {"problem": "infermax", "time_limit": 30}]}},
            "run.solve[1]: repeats run.solve[0]",
        ),
        (
            {"run": {"bound": {"problems": ["infermax", "infermax"]}}},
            "run.bound.problems[1]: repeats run.bound.problems[0] ('infermax')",
        ),
        ({"cost_model": ["llama2-7b-a100"] * 2}, "cost_model[1]: repeats cost_model[0] ('llama2-7b-a100')"),
        ({"cost_model": []}, "cost_model: an axis needs at least one value"),
        # a section the mode does not read
        ({"capacity": {"low": 0.5}}, "capacity: the rate range of --capacity, which a plain sweep"),
        ({"replicas": {"max_replicas": 4}}, "replicas: the routers and range of --replicas, which a plain sweep"),
    ],
)
def test_bad_specs_are_one_line_errors(tmp_path, capsys, change, message) -> None:
    code = _sweep(tmp_path, {**SMALL_SPEC, **change})
    err = capsys.readouterr().err
    assert code == 2 and "spec.json: " in err and message in err, err
    assert not (tmp_path / "out").exists()


def test_bad_workloads_and_options(tmp_path, capsys) -> None:
    spec = {**SMALL_SPEC, "workloads": [{"trace": "missing.csv", "cost_model": "llama2-7b-a100"}]}
    assert _sweep(tmp_path, spec) == 2 and "workloads[0]: " in capsys.readouterr().err
    spec = {**SMALL_SPEC, "workloads": [{"trace": "t.csv"}]}
    assert _sweep(tmp_path, spec) == 2 and "a trace needs cost_model" in capsys.readouterr().err
    spec = {**SMALL_SPEC, "workloads": [{"instance": "toy-4", "firstt": 3}]}
    assert _sweep(tmp_path, spec) == 2 and "unknown key 'firstt'" in capsys.readouterr().err
    spec = {**SMALL_SPEC, "workloads": [{"instnce": "toy-4"}]}  # named, not read as a missing 'instance'
    assert _sweep(tmp_path, spec) == 2 and "workloads[0]: unknown key 'instnce'" in capsys.readouterr().err
    assert _sweep(tmp_path, SMALL_SPEC, "--address", "127.0.0.1:1") == 2
    assert "--address: only applies with --ray" in capsys.readouterr().err
    assert _sweep(tmp_path, SMALL_SPEC, "--slo-ttft-p99", "1") == 2
    assert "only apply with --capacity" in capsys.readouterr().err
    assert _sweep(tmp_path, SMALL_SPEC, "--workers", "1000000") == 2  # refused before any process forks
    assert "--workers: 1000000 processes on this machine's" in capsys.readouterr().err
    assert _sweep(tmp_path, SMALL_SPEC, "--capacity") == 2 and "needs --slo-ttft-p99" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkloads: [\n")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "bad.yaml: malformed YAML at line" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "name: a\nname: b\nworkloads: [{instance: toy-4}]\nrun: {simulate: [vllm]}\n",
            "duplicate key 'name' at line 2",
        ),
        ("{deep: " + "[" * 900 + "]" * 900 + ", name: x}\n", "malformed YAML: lists or mappings nested too deeply"),
        ("? [a]\n: 1\n", "malformed YAML at line 1: found unhashable key"),
    ],
)
def test_a_yaml_spec_with_a_duplicate_key_or_deep_nesting_is_a_one_line_error(tmp_path, capsys, text, message) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"spec.yaml: {message}" in err and "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_a_yaml_spec_reads_scientific_notation_as_numbers(tmp_path) -> None:
    """YAML 1.2's floats, as JSON's: PyYAML (YAML 1.1) alone reads ``5e-2`` as a string."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: sci\n"
        "workloads: [{instance: toy-4, slo_ttft: 5e-2, slo_tpot: 1.5e-2}]\n"
        "rate_scale: [2e0, 1E1]\n"
        "run: {solve: [{problem: infermax, time_limit: 1e1}]}\n"
        "capacity: {tolerance: 5e-2, high: 1.6e+1}\n"
        "retries: 2\n"
    )
    parsed = load_spec(spec)
    assert parsed.workloads[0].transforms == {"slo_ttft": 0.05, "slo_tpot": 0.015}
    assert parsed.rate_scale == [2.0, 10.0] and parsed.run.solve[0].time_limit == 10.0
    assert (parsed.capacity.tolerance, parsed.capacity.high, parsed.retries) == (0.05, 16.0, 2)
    spec.write_text("name: sci\nworkloads: [{instance: toy-4, name: '5e-2'}]\n")  # quoted: a string
    assert load_spec(spec).workloads[0].name == "5e-2"


@pytest.mark.parametrize(
    "module, extra, message",
    [
        ("ray", ["--ray"], "--ray needs Ray: pip install 'optsched[ray]'"),
        ("pyarrow", [], "needs pyarrow, a dependency of optsched that is missing here: pip install pyarrow"),
    ],
)
def test_a_missing_optional_package_is_a_clear_error(tmp_path, capsys, monkeypatch, module, extra, message) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    assert _sweep(tmp_path, SMALL_SPEC, *extra) == 2
    assert message in capsys.readouterr().err


def test_yaml_spec_and_relative_paths(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    load_instance("toy-4").save(tmp_path / "sub" / "mine.json")
    spec = tmp_path / "sub" / "s.yaml"
    spec.write_text("name: y\nworkloads:\n  - {instance: mine.json, name: mine}\nrun: {simulate: [vllm]}\n")
    parsed = parse_spec({"name": "y", "workloads": [{"instance": "mine.json"}]}, "s", tmp_path / "sub")
    assert load_workloads(parsed).instances[0].name == "toy-4"
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"]) == 0
    rows = read_rows(tmp_path / "o")
    assert [(r["workload"], r["policy"], r["status"]) for r in rows] == [("mine", "vllm", "ok")]


# --------------------------------------------------------------------------- rows


def test_rows_workers_1_and_2_are_equal_and_complete(tmp_path) -> None:
    assert _sweep(tmp_path, SMALL_SPEC, "--workers", "1", out="w1") == 0
    assert _sweep(tmp_path, SMALL_SPEC, "--workers", "2", out="w2") == 0
    one, two = read_rows(tmp_path / "w1"), read_rows(tmp_path / "w2")
    assert_same_rows(one, two)
    # 8 cells, each: 2 generic bounds + 3 policies; every cell stored once under its key
    assert {r["cell"] for r in one} == expected_keys(tmp_path, SMALL_SPEC)
    assert len(part_files(tmp_path / "w1")) == 8 and len(one) == 8 * 5
    assert all(r["status"] in ("ok", "proven") for r in one)
    # every metric of the replay is a column, and the rows carry them
    assert set(Metrics.__dataclass_fields__) <= set(COLUMNS)
    sim = [r for r in one if r["kind"] == "simulate"]
    assert all(r[k] is not None for r in sim for k in ("makespan", "mean_ttft", "throughput", "objective"))


def test_rows_match_a_direct_replay(tmp_path) -> None:
    """A row's metrics are the replay's of the policy on the cell's instance (independently built)."""
    spec = {
        "name": "direct",
        "workloads": [{"instance": "poisson-mixed-100", "first": 12}],
        "limits": {"kv_capacity": [5000], "token_budget": [1024]},
        "rate_scale": [3],
        "run": {"simulate": ["sarathi"], "bound": True},
    }
    assert _sweep(tmp_path, spec, "--workers", "1") == 0
    rows = read_rows(tmp_path / "out")
    sim = next(r for r in rows if r["kind"] == "simulate")
    data = load_instance("poisson-mixed-100").to_dict()
    data["requests"] = [{**r, "arrival": r["arrival"] / 3} for r in data["requests"][:12]]
    data["limits"].update(kv_capacity=5000, token_budget=1024, prefill_budget=512)
    _, result = run_policy(parse_instance(data), "sarathi")
    for key, value in result.metrics.to_dict().items():
        assert sim[key] == pytest.approx(value, rel=1e-12, abs=0), key
    assert (sim["kv_capacity"], sim["token_budget"], sim["prefill_budget"], sim["rate_scale"]) == (5000, 1024, 512, 3.0)
    best = max(r["bound"] for r in rows if r["kind"] == "bound")
    assert sim["bound"] == best and sim["gap"] == pytest.approx((sim["makespan"] - best) / sim["makespan"], abs=1e-15)
    assert sim["makespan"] >= best * (1 - 1e-12)


def test_failures_are_rows_and_never_stop_the_sweep(tmp_path) -> None:
    spec = {
        "name": "fail",
        "workloads": [{"instance": "poisson-mixed-100", "first": 12}],
        "limits": {"kv_capacity": [500, 20000]},  # 500: a request can never fit
        "run": {"simulate": ["vllm", "sarathi"], "bound": True},
    }
    assert _sweep(tmp_path, spec) == 0
    rows = read_rows(tmp_path / "out")
    bad = [r for r in rows if r["kv_capacity"] == 500]
    assert len(bad) == 3 and all(r["status"] == "error" and "can never finish" in r["error"] for r in bad)
    assert {r["policy"]: r["status"] for r in rows if r["kv_capacity"] == 20000} == {
        "generic:work": "proven",
        "generic:critical-path": "proven",
        "vllm": "ok",
        "sarathi": "ok",
    }


def test_solve_rows_are_replayed_with_their_bound(tmp_path) -> None:
    spec = {
        "name": "solve",
        "workloads": [{"instance": "toy-4"}],
        "run": {
            "simulate": ["vllm"],
            "solve": [{"problem": "infermax", "time_limit": 30}],
            "bound": {"problems": ["infermax"], "time_limit": 5},
        },
    }
    assert _sweep(tmp_path, spec, "--workers", "1") == 0
    rows = {r["policy"]: r for r in read_rows(tmp_path / "out")}
    bounder = [r for p, r in rows.items() if p.startswith("infermax:")]
    assert bounder and all(
        r["kind"] == "bound" and r["time_limit"] == 5 and r["status"] in ("proven", "estimate") for r in bounder
    )
    solve = rows["solver:infermax"]
    assert solve["kind"] == "solve" and solve["time_limit"] == 30 and solve["status"] in ("optimal", "time_limit")
    assert solve["makespan"] == solve["objective"] and solve["bound"] <= solve["objective"] * (1 + 1e-9)
    # the policy's gap is to the best proven bound of the cell, the solver's included
    best = max(r["bound"] for r in rows.values() if r["kind"] == "bound" or r["policy"] == "solver:infermax")
    assert rows["vllm"]["bound"] == best


# --------------------------------------------------------------------------- resume and faults


def test_resume_skips_stored_cells_and_refuses_a_silent_mix(tmp_path, capsys) -> None:
    assert _sweep(tmp_path, SMALL_SPEC, "--workers", "1") == 0
    first = read_rows(tmp_path / "out")
    assert _sweep(tmp_path, SMALL_SPEC) == 2 and "add --resume" in capsys.readouterr().err
    part_files(tmp_path / "out")[0].unlink()  # as if that cell had been in flight when it stopped
    assert _sweep(tmp_path, SMALL_SPEC, "--resume", "--workers", "1", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["cells"], out["skipped"], out["ran"]) == (8, 7, 1)
    assert_same_rows(read_rows(tmp_path / "out"), first)


def test_a_killed_pool_worker_loses_no_cell(tmp_path) -> None:
    spec = slow_spec()
    out = tmp_path / "out"
    proc = start_cli("sweep", str(write_spec(tmp_path, spec)), "--out", str(out), "--workers", "2")
    wait_for_parts(out, 1, proc)
    workers = [pid for pid, _ in pool_workers(proc.pid)]
    assert workers, descendants(proc.pid)
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "a worker process died" in err
    check_exactly_once(tmp_path, spec, out, statuses=SOLVE_STATUSES)


def test_sigint_then_resume_completes_without_duplicates(tmp_path) -> None:
    spec = slow_spec()
    out = tmp_path / "out"
    path = write_spec(tmp_path, spec)
    proc = start_cli("sweep", str(path), "--out", str(out), "--workers", "2")
    wait_for_parts(out, 2, proc)
    workers = pool_workers(proc.pid)
    assert workers
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "--resume" in err
    stored = len(part_files(out))
    assert 2 <= stored < 12
    time.sleep(1)
    assert not [
        pid
        for pid, cmd in workers
        if os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip() == cmd
    ], "a worker outlived the interrupted sweep"
    assert not list(out.glob(".tmp-*")), "a half-written file was left behind"
    done = run_cli("sweep", str(path), "--out", str(out), "--workers", "2", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["skipped"] == stored
    check_exactly_once(tmp_path, spec, out, statuses=SOLVE_STATUSES)


# --------------------------------------------------------------------------- capacity


def _meets(instance, policy: str, ttft: float, tpot: float, quantile: float) -> bool:
    """Brute force, independent of the sweep's code: simulate, replay, numpy quantiles."""
    _, result = run_policy(instance, policy)
    outs = result.outcomes.values()
    t = [o.ttft for o in outs]
    p = [o.tpot for o in outs if o.tpot is not None]
    return bool(np.quantile(t, quantile) <= ttft and (not p or np.quantile(p, quantile) <= tpot))


def test_capacity_search_equals_a_brute_force_scan(tmp_path, capsys) -> None:
    spec = {
        "name": "cap",
        "workloads": [{"instance": "poisson-mixed-100", "first": 30}],
        "limits": {"kv_capacity": [4000, 20000]},
        "run": {"simulate": ["vllm", "sarathi"]},
        "capacity": {"low": 0.5, "high": 24, "tolerance": 0.1},
    }
    slo = {"ttft": 0.4, "tpot": 0.03, "quantile": 0.9}
    assert (
        _sweep(
            tmp_path,
            spec,
            "--capacity",
            "--workers",
            "2",
            "--slo-ttft-p99",
            str(slo["ttft"]),
            "--slo-tpot-p99",
            str(slo["tpot"]),
            "--attainment",
            str(slo["quantile"]),
            "--json",
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    found = {(r["kv_capacity"], r["policy"]): r for r in summary["capacity"] if r["policy"] != "ceiling"}
    ceilings = {r["kv_capacity"]: r for r in summary["capacity"] if r["policy"] == "ceiling"}
    for (kv, _), row in found.items():  # the proven ceiling is never below a policy's capacity
        if row["rate_scale"] is not None:
            assert ceilings[kv]["rate_scale"] is not None and ceilings[kv]["rate_scale"] >= row["rate_scale"]
            assert row["req_per_s"] > 0 and row["tokens_per_s"] > row["req_per_s"]
    grid = rate_grid(0.5, 24, 0.1)
    base = load_instance("poisson-mixed-100").to_dict()
    statuses = set()
    for (kv, policy), row in found.items():
        meeting = []
        for scale in grid:
            data = {**base, "requests": [{**r, "arrival": r["arrival"] / scale} for r in base["requests"][:30]]}
            data["limits"] = {**base["limits"], "kv_capacity": kv}
            if _meets(parse_instance(data), policy, slo["ttft"], slo["tpot"], slo["quantile"]):
                meeting.append(scale)
        expected = max(meeting) if meeting else None
        assert row["rate_scale"] == expected, (kv, policy, row, meeting)
        statuses.add(row["status"])
    assert "ok" in statuses, "the target should cut the range for some configuration"
    # the stored rows: one capacity row per search, every probe a simulate row with its verdict
    rows = read_rows(tmp_path / "out")
    assert len([r for r in rows if r["kind"] == "capacity"]) == 4 + 2  # and one ceiling per configuration
    probes = [r for r in rows if r["kind"] == "simulate"]
    assert probes and all(r["slo_met"] is not None and r["attainment"] == slo["quantile"] for r in probes)
    assert len(probes) < 4 * len(grid), "the search should not probe every grid point"
    # --resume: nothing to run again
    assert (
        _sweep(
            tmp_path,
            spec,
            "--capacity",
            "--resume",
            "--slo-ttft-p99",
            str(slo["ttft"]),
            "--slo-tpot-p99",
            str(slo["tpot"]),
            "--attainment",
            str(slo["quantile"]),
            "--json",
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["already_stored"] == 4


def test_capacity_rejects_what_it_would_ignore(tmp_path, capsys) -> None:
    spec = {**SMALL_SPEC, "rate_scale": [1]}
    assert _sweep(tmp_path, spec, "--capacity", "--slo-ttft-p99", "1") == 2
    assert "--capacity computes its own proven ceiling" in capsys.readouterr().err
    spec = {**SMALL_SPEC, "run": {"simulate": ["vllm"]}}
    assert _sweep(tmp_path, spec, "--capacity", "--slo-ttft-p99", "1") == 2
    assert "rate_scale: --capacity chooses the rate itself" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, extra, message",
    [
        ({"run": {}}, [], "run: nothing to run (give simulate, solve or bound)"),
        ({"rate_scale": [1]}, ["--capacity", "--slo-ttft-p99", "1"], "--capacity computes its own proven ceiling"),
        (
            {"workloads": [{"instance": "aladdin-fig3"}], "replicas": {"routers": ["nope"]}},
            ["--replicas", "--slo-ttft-p99", "1"],
            "replicas.routers: unknown router 'nope'",
        ),
        (
            {"rate_scale": [1], "run": {"simulate": ["vllm"]}, "replicas": {"max_replicas": 4}},
            ["--capacity", "--slo-ttft-p99", "1"],
            "replicas: the routers and range of --replicas, which --capacity does not read",
        ),
        (
            {"workloads": [{"instance": "aladdin-fig3"}], "run": {"simulate": ["vllm"]}},
            ["--replicas", "--slo-ttft-p99", "1"],
            "run: what a plain sweep or --capacity runs",
        ),
    ],
)
def test_a_sweep_with_nothing_to_do_writes_no_store(tmp_path, capsys, change, extra, message) -> None:
    """The mode's own checks run before the store's folder and _sweep.json are written."""
    assert _sweep(tmp_path, {**SMALL_SPEC, **change}, *extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_replicas_refuses_a_capacity_section(tmp_path, capsys) -> None:
    spec = {"name": "rep", "workloads": [{"instance": "aladdin-fig3"}], "capacity": {"low": 0.5}}
    assert _sweep(tmp_path, spec, "--replicas", "--slo-ttft-p99", "1") == 2
    assert "capacity: the rate range of --capacity, which --replicas does not read" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_replicas_rows_equal_the_direct_search(tmp_path, capsys) -> None:
    from optsched.problems.aladdin.capacity import min_workers

    spec = {
        "name": "rep",
        "workloads": [{"instance": "aladdin-fig3"}],
        "replicas": {"routers": ["bestfit", "jsq", "rr"], "max_replicas": 8},
    }
    slo = {"ttft": 0.02, "atgt": 0.0105}  # one worker serves 3 of the 4 requests within it
    assert (
        _sweep(
            tmp_path,
            spec,
            "--replicas",
            "--slo-ttft-p99",
            str(slo["ttft"]),
            "--slo-tpot-p99",
            str(slo["atgt"]),
            "--attainment",
            "1",
            "--json",
        )
        == 0
    )
    found = json.loads(capsys.readouterr().out)["replicas"]
    assert len(found) == 3
    for row in found:
        data = {**load_instance("aladdin-fig3").to_dict(), "slo": slo}
        direct = min_workers(parse_instance(data), row["policy"], 1.0, hi=8)
        assert row["replicas"] == direct.workers == 2, row
        assert row["status"] == ("ok" if direct.workers is not None else "above_range")


def test_cells_and_keys_are_stable() -> None:
    spec = parse_spec(SMALL_SPEC, "s")
    digests = load_workloads(spec).digests
    a, b = expand_cells(spec, digests), expand_cells(spec, digests)
    assert [c.key for c in a] == [c.key for c in b] and len({c.key for c in a}) == 8
    other = parse_spec({**SMALL_SPEC, "run": {"simulate": ["vllm"]}}, "s")
    assert not {c.key for c in expand_cells(other, digests)} & {c.key for c in a}


def test_capacity_with_a_solve_and_the_proven_ceiling(tmp_path, capsys) -> None:
    """``run.solve`` joins the capacity search (its schedule replayed, its SLO verdict stored); the
    proven ceiling is never below any schedule's capacity; the terminal summary gives req/s."""
    spec = {
        "name": "capsolve",
        "workloads": [{"instance": "poisson-mixed-100", "first": 12}],
        "run": {"simulate": ["vllm"], "solve": [{"problem": "infermax", "time_limit": 3}], "objective": "goodput"},
        "capacity": {"low": 0.5, "high": 32, "tolerance": 0.25},
    }
    args = ["--capacity", "--slo-ttft-p99", "0.3", "--slo-tpot-p99", "0.03", "--attainment", "0.9"]
    assert _sweep(tmp_path, spec, *args, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    by = {r["policy"]: r for r in summary["capacity"]}
    assert set(by) == {"vllm", "solver:infermax", "ceiling"}
    best = max((r["rate_scale"] or 0.0) for name, r in by.items() if name != "ceiling")
    assert by["ceiling"]["rate_scale"] is not None and by["ceiling"]["rate_scale"] >= best
    rows = read_rows(tmp_path / "out")
    solves = [r for r in rows if r["kind"] == "solve"]
    assert solves and all(r["slo_met"] is not None for r in solves if r["status"] != "error")
    assert _sweep(tmp_path, spec, *args, "--resume") == 0
    out = capsys.readouterr().out
    assert "ceiling" in out and "req/s" in out

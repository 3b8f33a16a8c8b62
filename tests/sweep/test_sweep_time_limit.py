"""``optsched sweep --time-limit``: the limit bounds the command; the cells finished within it are
stored and summarised, the others are left for ``--resume`` (grid, capacity and replicas searches).
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.budget import TimeBudget
from optsched.sweep.capacity import capacity_search
from optsched.sweep.cells import SloTarget
from optsched.sweep.executors import LocalPool
from optsched.sweep.replicas import replicas_search
from optsched.sweep.runner import load_workloads
from optsched.sweep.spec import parse_spec
from optsched.sweep.store import SweepStore
from tests.support.sweep import check_exactly_once, part_files, run_cli, solving_spec, write_spec

CAPACITY_SPEC = {
    "name": "cap",
    "workloads": [{"instance": "poisson-mixed-100", "first": 30}],
    "limits": {"kv_capacity": [4000, 20000]},
    "run": {"simulate": ["vllm", "sarathi"]},
    "capacity": {"low": 0.5, "high": 24, "tolerance": 0.1},
}
TARGET = SloTarget(0.4, 0.03, 0.9)


def test_a_time_limit_stores_what_finished_and_resume_completes(tmp_path) -> None:
    spec, out = solving_spec(), tmp_path / "out"
    path = write_spec(tmp_path, spec)
    limit = 5.0
    t0 = time.perf_counter()
    proc = run_cli("sweep", str(path), "--out", str(out), "--workers", "1", "--time-limit", str(limit), "--json")
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["cells"] == 6 and summary["unfinished"] > 0, summary
    assert summary["ran"] + summary["unfinished"] == 6 and len(part_files(out)) == summary["ran"]
    assert "--resume" in proc.stderr
    assert wall < limit + 3, wall  # the whole command (a loaded test machine gets 2 s of slack)
    proc = run_cli("sweep", str(path), "--out", str(out), "--workers", "2", "--resume", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["unfinished"] == 0
    check_exactly_once(tmp_path, spec, out, statuses=("optimal", "feasible", "time_limit"))


def _capacity(tmp_path, budget: TimeBudget, resume: bool = False) -> dict:
    spec = parse_spec(CAPACITY_SPEC, "spec.json", tmp_path)
    store, pool = SweepStore(tmp_path / "out"), LocalPool(1)
    try:
        with store.claim({"spec": CAPACITY_SPEC, "mode": "capacity"}, resume=resume):
            return capacity_search(spec, load_workloads(spec), pool, store, TARGET, budget=budget)
    finally:
        pool.close()


def test_a_capacity_search_cut_short_says_so_and_resumes(tmp_path) -> None:
    """At once past its limit: every search is listed as ``time_limit`` with no capacity and no
    ceiling is computed; without a limit the search then completes to the result of a fresh one."""
    cut = _capacity(tmp_path, TimeBudget.of(0.0))
    assert cut["unfinished"] == cut["searches"] == 4
    assert {r["status"] for r in cut["capacity"]} == {"time_limit"}
    assert all(r["rate_scale"] is None for r in cut["capacity"]) and "ceiling" not in {
        r["policy"] for r in cut["capacity"]
    }
    resumed = _capacity(tmp_path, TimeBudget(), resume=True)
    (tmp_path / "fresh").mkdir()
    fresh = _capacity(tmp_path / "fresh", TimeBudget())
    assert resumed["unfinished"] == fresh["unfinished"] == 0
    assert "time_limit" not in {r["status"] for r in resumed["capacity"]}
    assert resumed["capacity"] == fresh["capacity"]


def test_a_replicas_search_cut_short_says_so_and_resumes(tmp_path) -> None:
    spec_data = {
        "name": "rep",
        "workloads": [{"instance": "aladdin-fig3"}],
        "replicas": {"routers": ["bestfit", "jsq"], "max_replicas": 8},
    }
    spec, store, target = (
        parse_spec(spec_data, "spec.json", tmp_path),
        SweepStore(tmp_path / "out"),
        SloTarget(0.02, 0.0105, 1.0),
    )

    def search(budget: TimeBudget, resume: bool) -> dict:
        pool = LocalPool(1)
        try:
            with store.claim({"spec": spec_data, "mode": "replicas"}, resume=resume):
                return replicas_search(spec, load_workloads(spec), pool, store, target, budget=budget)
        finally:
            pool.close()

    cut = search(TimeBudget.of(0.0), False)
    assert cut["unfinished"] == 2 and [r["status"] for r in cut["replicas"]] == ["time_limit"] * 2
    assert all(r["replicas"] is None for r in cut["replicas"])
    done = search(TimeBudget(), True)
    assert done["unfinished"] == 0 and [r["replicas"] for r in done["replicas"]] == [2, 2]

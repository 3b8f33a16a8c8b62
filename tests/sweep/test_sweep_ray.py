"""``optsched sweep --ray``: the same rows as the local pool, and a killed Ray worker loses no cell.

One local Ray cluster (2 CPUs, bound to 127.0.0.1) serves the module; the sweeps join it with
``--address``. Skipped without Ray (``pip install 'optsched[ray]'``).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

#: Ray's single-machine mode, read when Ray is imported: every Ray process listens on 127.0.0.1.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(LOOPBACK)

ray = pytest.importorskip("ray", reason="Ray is the optional extra optsched[ray]")
pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.cli import main  # noqa: E402
from tests.support.sweep import (  # noqa: E402
    SMALL_SPEC,
    assert_same_rows,
    check_exactly_once,
    descendants,
    part_files,
    read_rows,
    run_cli,
    solving_spec,
    start_cli,
    wait_for_parts,
    write_spec,
)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster started and stopped by this module; its address."""
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = context.address_info["gcs_address"]
        assert address.startswith("127.0.0.1:"), address
        yield address
    finally:
        ray.shutdown()


def test_same_rows_under_workers_1_2_and_ray(cluster, tmp_path) -> None:
    spec = write_spec(tmp_path, SMALL_SPEC)
    for name, extra in (("w1", ["--workers", "1"]), ("w2", ["--workers", "2"])):
        assert main(["sweep", str(spec), "--out", str(tmp_path / name), "--no-progress", *extra]) == 0
    done = run_cli("sweep", str(spec), "--out", str(tmp_path / "ray"), "--ray", "--address", cluster, env=LOOPBACK)
    assert done.returncode == 0, done.stderr
    one = read_rows(tmp_path / "w1")
    assert len(one) == 40
    assert_same_rows(one, read_rows(tmp_path / "w2"))
    assert_same_rows(one, read_rows(tmp_path / "ray"))


def test_a_killed_ray_worker_loses_no_cell(cluster, tmp_path) -> None:
    spec = solving_spec()
    out = tmp_path / "out"
    proc = start_cli(
        "sweep", str(write_spec(tmp_path, spec)), "--out", str(out), "--ray", "--address", cluster, env=LOOPBACK
    )
    wait_for_parts(out, 1, proc)
    killed = None
    end = time.monotonic() + 60
    while killed is None and time.monotonic() < end and proc.poll() is None:
        tasks = [pid for pid, cmd in descendants(os.getpid()) if cmd.startswith("ray::_call_task")]
        if tasks:
            os.kill(tasks[0], signal.SIGKILL)
            killed = tasks[0]
        time.sleep(0.02)
    assert killed is not None, "no Ray task process was found running"
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert len(part_files(out)) == 6
    check_exactly_once(tmp_path, spec, out, statuses=("optimal", "feasible", "time_limit"))


def test_capacity_with_a_solve_on_ray(cluster, tmp_path) -> None:
    """``--capacity`` with ``run.solve`` on Ray: the same capacities and ceiling as the local pool."""
    import json

    spec = write_spec(
        tmp_path,
        {
            "name": "capray",
            "workloads": [{"instance": "poisson-mixed-100", "first": 10}],
            "run": {"simulate": ["vllm"], "solve": [{"problem": "infermax", "time_limit": 2}], "objective": "goodput"},
            "capacity": {"low": 0.5, "high": 16, "tolerance": 0.5},
        },
    )
    args = ["--capacity", "--slo-ttft-p99", "0.3", "--slo-tpot-p99", "0.03", "--attainment", "0.9", "--json"]
    local = run_cli("sweep", str(spec), "--out", str(tmp_path / "w2"), "--workers", "2", *args, env=LOOPBACK)
    on_ray = run_cli(
        "sweep", str(spec), "--out", str(tmp_path / "ray"), "--ray", "--address", cluster, *args, env=LOOPBACK
    )
    assert local.returncode == 0 and on_ray.returncode == 0, (local.stderr, on_ray.stderr)
    caps = [{r["policy"]: r["rate_scale"] for r in json.loads(p.stdout)["capacity"]} for p in (local, on_ray)]
    assert set(caps[0]) == {"vllm", "solver:infermax", "ceiling"}
    assert caps[0]["ceiling"] >= max(v or 0.0 for v in caps[0].values())
    assert caps[0]["vllm"] == caps[1]["vllm"] and caps[0]["ceiling"] == caps[1]["ceiling"]

"""Benchmark: a 48-cell `optsched sweep` on 1 and 2 local workers and on Ray with 2 local workers.

Run on demand (not collected by pytest; needs the [ray] extra for the Ray run):

    python tests/benchmarks/bench_sweep.py [--cells 48] [--skip-ray]

The grid: the shipped instance ``poisson-mixed-100`` (100 requests) x kv_capacity {10k, 20k, 40k,
80k} x token_budget {1024, 2048, 4096} x rate_scale {1, 2, 4, 8} (48 cells; ``--cells 12`` keeps
the first rate scale only), each cell running vllm and sarathi (replayed) and the generic bounds.
Every run is the real command line in a subprocess writing a fresh folder. For each executor it
prints the command's wall time and CPU time (user + system of the command and its workers), the
sweep's own wall time (``wall_time`` of its JSON: workloads
loaded, cells run and stored; for Ray on a cluster already running), cells per second over the
latter, and the executor's overhead per cell: (workers x sweep wall time - the sum of the cells'
own run times) / cells, i.e. the worker time not spent inside a cell (start-up of the workers,
transfers, scheduling, idle tails). Ray's overhead per cell is also given against the 2-worker
pool: (Ray's sweep wall time - the pool's) / cells x 2. The Ray cluster (2 CPUs, 127.0.0.1 only)
is started by this script first, its start-up time printed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def spec(cells: int) -> dict:
    rates = [1, 2, 4, 8] if cells == 48 else [1]
    return {
        "name": f"bench-{cells}",
        "workloads": [{"instance": "poisson-mixed-100"}],
        "limits": {"kv_capacity": [10000, 20000, 40000, 80000], "token_budget": [1024, 2048, 4096]},
        "rate_scale": rates,
        "run": {"simulate": ["vllm", "sarathi"], "bound": True},
    }


def run(spec_path: Path, out: Path, *extra: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "optsched",
            "sweep",
            str(spec_path),
            "--out",
            str(out),
            "--no-progress",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK},
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    import pyarrow.parquet as pq

    cell_times = pq.read_table(out).column("wall_time").to_pylist()
    return {
        "command_s": wall,
        "command_cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
        "sweep_s": result["wall_time"],
        "cells": result["ran"],
        "cell_time_sum_s": sum(cell_times),
    }


def report(name: str, workers: int, r: dict) -> dict:
    per_cell = (workers * r["sweep_s"] - r["cell_time_sum_s"]) / r["cells"]
    row = {"executor": name, **r, "cells_per_s": r["cells"] / r["sweep_s"], "overhead_per_cell_s": per_cell}
    print(
        f"{name:10s} command {r['command_s']:7.2f} s ({r['command_cpu_s']:6.2f} s CPU)  sweep {r['sweep_s']:7.2f} s  "
        f"{row['cells_per_s']:6.3f} cells/s  cells' own time {r['cell_time_sum_s']:7.2f} s  "
        f"overhead/cell {per_cell * 1000:7.1f} ms",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, choices=(12, 48), default=48)
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec(args.cells)))
        for workers in (1, 2):
            rows.append(
                report(
                    f"local-{workers}", workers, run(spec_path, Path(tmp) / f"w{workers}", "--workers", str(workers))
                )
            )
        if not args.skip_ray:
            os.environ.update(LOOPBACK)
            import ray

            t0 = time.perf_counter()
            context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            print(f"ray cluster start-up: {time.perf_counter() - t0:.2f} s", flush=True)
            try:
                ray_row = report(
                    "ray-2",
                    2,
                    run(spec_path, Path(tmp) / "ray", "--ray", "--address", context.address_info["gcs_address"]),
                )
            finally:
                ray.shutdown()
            pool = rows[-1]
            ray_row["ray_overhead_vs_pool_per_cell_s"] = (ray_row["sweep_s"] - pool["sweep_s"]) * 2 / ray_row["cells"]
            print(
                f"Ray against the 2-worker pool: {ray_row['ray_overhead_vs_pool_per_cell_s'] * 1000:.1f} ms per cell",
                flush=True,
            )
            rows.append(ray_row)
    print(f"load average after: {os.getloadavg()}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

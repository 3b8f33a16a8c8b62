"""Test helpers of the sweep tests: specs, running ``optsched sweep``, reading and comparing rows."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from optsched.sweep.cells import expand_cells
from optsched.sweep.runner import load_workloads
from optsched.sweep.spec import parse_spec

#: A small grid: 2 workloads x 2 kv capacities x 2 rate scales = 8 cells; bounds and three
#: policies (deterministic: the rows of two runs are equal).
SMALL_SPEC: dict[str, Any] = {
    "name": "small",
    "workloads": [{"instance": "toy-4"}, {"instance": "poisson-mixed-100", "first": 12}],
    "limits": {"kv_capacity": [3000, 20000]},
    "rate_scale": [1, 2],
    "run": {"simulate": ["vllm", "sarathi", "vllm-ef"], "bound": True},
}

#: Columns that differ between runs by nature.
VOLATILE = ("wall_time",)


def write_spec(folder: Path, spec: dict[str, Any], name: str = "spec.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(spec))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m optsched ARGS`` in a subprocess (text output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "optsched", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "optsched", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """Every stored row, volatile columns dropped, in a canonical order."""
    from optsched.sweep.store import SweepStore

    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in SweepStore(folder).read().to_pylist()]
    return sorted(rows, key=lambda r: (r["cell"], r["kind"], r["policy"]))


def assert_same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]], tol: float = 1e-12) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            u, v = x[k], y[k]
            if isinstance(u, float) and isinstance(v, float):
                assert (math.isnan(u) and math.isnan(v)) or abs(u - v) <= tol * max(1.0, abs(u)), (k, u, v)
            else:
                assert u == v, (k, u, v)


def part_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet"))


def wait_for_parts(folder: Path, count: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until ``count`` cells are stored (the sweep is under way)."""
    end = time.monotonic() + timeout
    while len(part_files(folder)) < count:
        assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
        assert time.monotonic() < end, "the sweep stored no cell in time"
        time.sleep(0.05)


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every descendant process of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out.append((child, cmd.strip()))
            todo.append(child)
    return out


def pool_workers(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the pool workers among the descendants of the sweep process ``pid``:
    spawned ones run ``spawn_main``; forked ones keep the sweep's own command line (the resource
    tracker runs neither)."""
    own = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    return [(child, cmd) for child, cmd in descendants(pid) if "spawn_main" in cmd or cmd == own]


def expected_keys(tmp_path, spec: dict) -> set[str]:
    parsed = parse_spec(spec, "spec.json", tmp_path)
    return {c.key for c in expand_cells(parsed, load_workloads(parsed).digests)}


def slow_spec() -> dict:
    """12 cells: a 1-s InferMax solve of 40 requests with arrivals (not proven optimal in that time)
    under three KV capacities and four rates, so the sweep lasts about 6 s on two workers however
    fast the machine: tests that act while it runs find it running."""
    return {
        "name": "slow",
        "workloads": [{"instance": "poisson-mixed-100", "first": 40}],
        "limits": {"kv_capacity": [20000, 40000, 80000]},
        "rate_scale": [1, 2, 3, 4],
        "run": {"solve": [{"problem": "infermax", "time_limit": 1.0}]},
    }


#: The statuses of a time-limited solve's row.
SOLVE_STATUSES = ("optimal", "feasible", "time_limit")


def solving_spec() -> dict:
    """6 cells of a 2-s InferMax solve each (40 requests with arrivals are not proven optimal in
    that time): long enough to find a cell running, however fast the machine."""
    return {
        "name": "solving",
        "workloads": [{"instance": "poisson-mixed-100", "first": 40}],
        "rate_scale": [1, 2, 3, 4, 5, 6],
        "run": {"solve": [{"problem": "infermax", "time_limit": 2.0}]},
    }


def check_exactly_once(tmp_path, spec: dict, out, statuses: tuple[str, ...] = ("ok",)) -> None:
    """Every cell of ``spec`` stored once under ``out``, each row once, every status in ``statuses``."""
    rows = read_rows(out)
    keys = [r["cell"] for r in rows]
    assert set(keys) == expected_keys(tmp_path, spec)
    assert len(part_files(out)) == len(set(keys))
    assert sorted((r["cell"], r["policy"]) for r in rows) == sorted({(r["cell"], r["policy"]) for r in rows})
    assert all(r["status"] in statuses for r in rows), [r["status"] for r in rows]

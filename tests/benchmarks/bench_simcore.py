"""Benchmark: the compiled simulation core against the reference path, on the full splitwise_conv trace.

Run on demand (not collected by pytest)::

    python tests/benchmarks/bench_simcore.py [--rounds 3] [--policies vllm ...] [--skip-cli]

Instance: ``../shared/data/traces/splitwise_conv.csv`` (19,366 requests), ``llama2-7b-a100``,
C = P = 4096, M = 100,000 (as ``bench_simulator.py``). Each measurement alternates the reference
path (A) and the compiled one (B), ``--rounds`` times, after one untimed compiled run (numba's
compile or disk-cache load); it prints CPU and wall seconds per round (CPU is the figure to compare
on a shared machine):

1. In-process simulate + replay per policy: A = ``simulate(compiled=False)`` + ``replay(compiled=False)``,
   B = both compiled. Before timing, B's schedule is checked batch for batch against A's and both
   replays for equality (bit for bit, ``repr``).
2. Loading the schedule file: A = the strict JSON parser building every Batch object (the path of
   ``load_schedule`` without its fast path); B = ``load_schedule`` of the JSON (msgspec to columns), and of the
   Parquet file.
3. ``optsched check`` of the full-trace schedule, whole process: the JSON file against the Parquet
   one (``--skip-cli`` leaves it out).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optsched.instance import Limits
from optsched.jsonio import gc_paused, loads_json, read_text
from optsched.policies.engine import simulate
from optsched.schedule import Schedule, ScheduleError, load_schedule, replay
from optsched.workload import load_trace_csv

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"
CHECK_ARGS = ["--cost-model", "llama2-7b-a100", "--kv-capacity", "100000", "--token-budget", "4096"]


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """CPU seconds, wall seconds and the result of ``fn()``."""
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - w0, out


def alternate(label: str, a: Callable[[], Any], b: Callable[[], Any], rounds: int) -> None:
    """Run A and B alternately; print each round and the medians."""
    cpu: dict[str, list[float]] = {"A": [], "B": []}
    for k in range(rounds):
        for name, fn in (("A", a), ("B", b)):
            c, w, _ = timed(fn)
            cpu[name].append(c)
            print(f"  {label} round {k + 1} {name}: {c:.3f} s CPU, {w:.3f} s wall", flush=True)
    med = {n: sorted(v)[len(v) // 2] for n, v in cpu.items()}
    print(f"{label}: median CPU A {med['A']:.3f} s, B {med['B']:.3f} s, A/B {med['A'] / med['B']:.1f}x", flush=True)


def strict_load(path: Path) -> Schedule:
    with gc_paused():
        text = read_text(path, ScheduleError)
        schedule = Schedule.from_dict(loads_json(text, str(path), ScheduleError), source=str(path))
    return schedule


def check_process(instance: Path, schedule: Path) -> float:
    """CPU seconds (user + system) of one ``optsched check`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "optsched", "check", str(instance), str(schedule), *CHECK_ARGS],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"optsched check {schedule.name} failed: {done.stderr.strip()[-500:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(f"  optsched check {schedule.name}: {cpu:.2f} s CPU, {wall:.2f} s wall", flush=True)
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policies", nargs="+", default=["vllm"])
    ap.add_argument("--skip-cli", action="store_true")
    args = ap.parse_args()
    if not TRACE.exists():
        raise SystemExit(f"trace not found: {TRACE}")
    inst = load_trace_csv(TRACE, "llama2-7b-a100", Limits(4096, 4096, 100_000, None))
    print(f"{TRACE.name}: {len(inst.requests)} requests, llama2-7b-a100, C = P = 4096, M = 100,000")
    for policy in args.policies:
        c, _, fast = timed(lambda: simulate(inst, policy, compiled=True))  # noqa: B023 - called at once
        c2, _, ref_result = timed(lambda: replay(inst, fast, compiled=True))  # noqa: B023
        print(f"{policy}: first compiled simulate {c:.2f} s CPU, replay {c2:.2f} s CPU (compile or cache load)")
        reference = simulate(inst, policy, compiled=False)
        assert fast.batches == reference.batches, f"{policy}: the compiled engine's batches differ"
        assert repr(replay(inst, reference, compiled=False)) == repr(ref_result), f"{policy}: replays differ"
        print(f"{policy}: {len(reference.batches)} batches, identical batch for batch; replays identical")
        alternate(
            f"simulate + replay ({policy})",
            lambda: replay(inst, simulate(inst, policy, compiled=False), compiled=False),  # noqa: B023
            lambda: replay(inst, simulate(inst, policy, compiled=True), compiled=True),  # noqa: B023
            args.rounds,
        )
    schedule = simulate(inst, args.policies[0], compiled=True)
    with tempfile.TemporaryDirectory() as tmp:
        json_path, parquet_path = Path(tmp) / "full.json", Path(tmp) / "full.parquet"
        schedule.save(json_path)
        schedule.save(parquet_path)
        print(f"schedule files: JSON {json_path.stat().st_size:,} B, Parquet {parquet_path.stat().st_size:,} B")
        assert load_schedule(json_path) == strict_load(json_path) == load_schedule(parquet_path)
        alternate("JSON load (A strict + Batch objects, B msgspec to columns)", lambda: strict_load(json_path),
                  lambda: load_schedule(json_path), args.rounds)  # fmt: skip
        alternate("load (A strict JSON, B Parquet)", lambda: strict_load(json_path),
                  lambda: load_schedule(parquet_path), args.rounds)  # fmt: skip
        if not args.skip_cli:
            for _ in range(args.rounds):
                check_process(TRACE, json_path)
                check_process(TRACE, parquet_path)


if __name__ == "__main__":
    main()

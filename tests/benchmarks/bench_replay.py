"""Benchmark: replay and schedule JSON I/O on the full splitwise_conv trace (run on demand).

    python tests/benchmarks/bench_replay.py [POLICY]

Simulates POLICY (default vllm) on all 19,366 requests (llama2-7b-a100, C = 4096, M = 100,000),
then times replay, Schedule.save and load_schedule (best of 3, CPU time). Results go into
docs/performance.md, section "Replay and schedule I/O".
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from optsched.instance import Limits
from optsched.policies import simulator_for
from optsched.schedule import load_schedule, replay
from optsched.workload import load_trace_csv

REPO = Path(__file__).resolve().parents[2]


def best_of(n: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(n):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> None:
    policy = sys.argv[1] if len(sys.argv) > 1 else "vllm"
    trace = next(
        (
            p / "shared/data/traces/splitwise_conv.csv"
            for p in REPO.parents
            if (p / "shared/data/traces/splitwise_conv.csv").exists()
        ),
        None,
    )
    if trace is None:
        sys.exit("splitwise_conv.csv not found under ../shared/data")
    t_load, inst = best_of(1, lambda: load_trace_csv(trace, "llama2-7b-a100", Limits(4096, 4096, 100_000, None)))
    t_sim, schedule = best_of(1, lambda: simulator_for(policy)(inst))
    t_replay, result = best_of(3, lambda: replay(inst, schedule))
    assert result.feasible, result.violations[:3]
    n_batches = len(schedule.batches)
    n_items = sum(len(b.items) for b in schedule.batches)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.json"
        t_save, _ = best_of(3, lambda: schedule.save(path))
        size = path.stat().st_size
        t_read, loaded = best_of(3, lambda: load_schedule(path))
    assert loaded.batches == schedule.batches
    print(f"requests {len(inst.requests)}, policy {policy}: {n_batches} batches, {n_items} items")
    print(f"load trace   {t_load:7.2f} s")
    print(f"simulate     {t_sim:7.2f} s")
    print(f"replay       {t_replay:7.2f} s  ({n_batches / t_replay:,.0f} batches/s, {n_items / t_replay:,.0f} items/s)")
    print(f"save JSON    {t_save:7.2f} s  ({size / 1e6:.0f} MB)")
    print(f"load JSON    {t_read:7.2f} s")


if __name__ == "__main__":
    main()

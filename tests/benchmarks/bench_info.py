"""Cost of ``optsched info`` against loading the trace (issue 39 item 18): the Splitwise
conversation trace (``<repo>/../shared/data/traces/splitwise_conv.csv``) repeated to each row count
in a temporary folder; per size the best of ``--repeat`` in-process runs of loading the trace, of
the figures read off the columns and of the SLO check and the bounds, then one run of the whole
command (``optsched info --json``, a subprocess) with and without ``--time-limit``. Goal: info
(columns + SLO check + bounds) at most 2x the load.

    python -m tests.benchmarks.bench_info [--rows 200000 2000000] [--repeat 2] [--time-limit 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from optsched.budget import TimeBudget
from optsched.commands.info import column_figures, slow_figures
from optsched.workload import load_trace
from tests.support.info_traces import repeated_trace

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces" / "splitwise_conv.csv"


def _in_process(path: Path, repeat: int) -> tuple[float, float, float]:
    """Best (load, columns, SLO check + bounds) seconds of ``repeat`` runs."""
    best = [float("inf")] * 3
    for _ in range(repeat):
        t0 = time.perf_counter()
        instance = load_trace(path, cost_model="llama2-7b-h200")
        t1 = time.perf_counter()
        _, fits = column_figures(instance)
        t2 = time.perf_counter()
        slow_figures(instance, fits, TimeBudget())
        t3 = time.perf_counter()
        best = [min(b, t) for b, t in zip(best, (t1 - t0, t2 - t1, t3 - t2))]
    return best[0], best[1], best[2]


def _command(path: Path, *extra: str) -> tuple[float, list[str]]:
    """Wall seconds of ``optsched info PATH --json`` and what it did not compute."""
    argv = [sys.executable, "-m", "optsched", "info", str(path), "--cost-model", "llama2-7b-h200", "--json", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    return wall, json.loads(done.stdout)["not_computed"] if done.stdout else [f"exit {done.returncode}"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000, 2_000_000])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=5.0)
    args = ap.parse_args()
    if not DATA.exists():
        print(f"skip: {DATA} not available", file=sys.stderr)
        return 0
    print(
        "| rows | load s | columns s | SLO check + bounds s | info / load | command s | --time-limit: s, not computed |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for rows in args.rows:
            path = repeated_trace(DATA, rows, Path(tmp) / f"conv-{rows}.csv")
            load, columns, slow = _in_process(path, args.repeat)
            wall, _ = _command(path)
            limited, missing = _command(path, "--time-limit", str(args.time_limit))
            print(
                f"| {rows} | {load:.2f} | {columns:.2f} | {slow:.2f} | {(columns + slow) / load:.2f} | {wall:.2f} "
                f"| {limited:.2f} (limit {args.time_limit:g}), {', '.join(missing) or '-'} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

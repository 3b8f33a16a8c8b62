"""Benchmark: loading a large BurstGPT-layout trace (run on demand; goal: 5 M rows in < 10 s, < 2 GB).

    nice -n 10 python tests/benchmarks/bench_trace_load.py [--rows 5000000] [--file PATH] [--methods ...]

Writes a seeded BurstGPT-layout CSV (``Timestamp,Model,Request tokens,Response tokens,Total
tokens,Log Type``; about 2 % failed rows with 0 response tokens) unless ``--file`` names one, then
runs every method in a fresh Python process and prints its wall time, its CPU time (user + system,
imports included) and peak resident memory (``ru_maxrss`` of the child), with the machine's load
average before and after:

- ``optsched``: ``optsched.workload.load_trace`` as shipped (pyarrow fast path when installed),
  down to the :class:`~optsched.instance.Instance` of 5 M requests;
- ``optsched-stdlib``: the same with the pyarrow path turned off (the standard-library reader);
- ``parse-stdlib``, ``parse-pyarrow``, ``parse-pandas``: parsing the three columns only (no
  requests built), to compare the parsers themselves.

Results go into docs/performance.md, section "Loading traces".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

METHODS = {
    "optsched": """
from optsched.workload import load_trace
inst = load_trace(PATH, "llama2-7b-a100")
n = len(inst.requests)
""",
    "optsched-stdlib": """
from optsched.workload import load_trace, loaders
loaders.arrow_available = lambda: False
inst = load_trace(PATH, "llama2-7b-a100")
n = len(inst.requests)
""",
    "parse-stdlib": """
import csv
t, p, o = [], [], []
with open(PATH, newline="", encoding="utf-8-sig") as fh:
    rows = csv.reader(fh)
    next(rows)
    for row in rows:
        t.append(float(row[0])); p.append(int(row[2])); o.append(int(row[3]))
n = len(t)
""",
    "parse-pyarrow": """
import pyarrow.csv as pacsv
table = pacsv.read_csv(PATH, convert_options=pacsv.ConvertOptions(
    include_columns=["Timestamp", "Request tokens", "Response tokens"]))
n = table.num_rows
""",
    "parse-pandas": """
import pandas as pd
frame = pd.read_csv(PATH, usecols=["Timestamp", "Request tokens", "Response tokens"])
n = len(frame)
""",
}

RUNNER = """
import resource, sys, time
PATH = sys.argv[1]
t0 = time.perf_counter()
{code}
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_SELF)
print(n, wall, use.ru_maxrss / 1024, use.ru_utime + use.ru_stime)
"""


def write_trace(path: Path, rows: int, seed: int = 0) -> None:
    """A BurstGPT-layout CSV: Poisson arrivals (mean gap 0.05 s), two models, ~2 % failed rows."""
    rng = np.random.default_rng(seed)
    chunk = 500_000
    t = 0.0
    with open(path, "w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            times = t + np.cumsum(rng.exponential(0.05, n))
            t = float(times[-1])
            req = rng.integers(1, 4000, n)
            resp = np.where(rng.random(n) < 0.02, 0, rng.integers(1, 1000, n))
            model = np.where(rng.random(n) < 0.7, "ChatGPT", "GPT-4")
            fh.writelines(
                f"{a:.3f},{m},{p},{o},{p + o},Conversation log\n"
                for a, m, p, o in zip(times.tolist(), model.tolist(), req.tolist(), resp.tolist())
            )


def run(method: str, path: Path) -> tuple[int, float, float, float] | str:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER.format(code=METHODS[method]), str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[-1]
    n, wall, rss, cpu = proc.stdout.split()
    return int(n), float(wall), float(rss), float(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--file", type=Path, help="an existing BurstGPT-layout CSV (default: write one)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if path is None:
            path = Path(tmp) / "burstgpt.csv"
            t0 = time.perf_counter()
            write_trace(path, args.rows)
            print(
                f"wrote {args.rows:,} rows ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s"
            )
        for method in args.methods:
            out = run(method, path)
            if isinstance(out, str):
                print(f"{method:16s} not run: {out}")
            else:
                n, wall, rss, cpu = out
                print(
                    f"{method:16s} {n:>10,} rows  {wall:7.2f} s wall  {cpu:7.2f} s CPU (with imports)  "
                    f"peak {rss:7.0f} MiB"
                )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

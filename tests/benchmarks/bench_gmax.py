"""Speed and quality benchmark of static batching (run on demand, not collected by pytest).

    python -m tests.benchmarks.bench_gmax [--out results.jsonl] [--parts scls,n30,sa,largest]
                                          [--seeds 5] [--exact-method dinkelbach|bnb] [--summary]

Wall and CPU seconds are both recorded (``cpu``: this process's CPU time; HiGHS's MIP search is
single-threaded), with the 1-minute load average, because the sandbox is shared.

Parts (each result is one JSON line, flushed as it is produced):
- ``scls``: max-min offloading vs the exact makespan (CP-SAT) on DP batchings of random pools;
- ``n20``: exact G for N = 20 (same generator), 600 s limit, seeds 0..seeds-1;
- ``n30``: exact G (HiGHS, Dinkelbach, or ``--exact-method``) for N = 30 random requests (Table 2 coefficients, both
  task types, the paper's SLOs, max batch size 4; ``generate.random_gmax_instance(30, seed)``) with a
  60 s limit, seeds 0..seeds-1;
- ``sa``: the paper's annealing (default parameters, seed = instance seed) vs the exact optimum at
  N = 10, 20, 30 on the same seeds (N = 30: the ``n30`` runs when that part ran in this process,
  else exact runs with a 60 s limit; N = 10, 20: 600 s limit);
- ``largest``: N = 18, 20, 22, ..., 100 (seed 7) with a 600 s limit until one is not proven optimal.

``--summary`` prints the tables of docs/performance.md from an existing ``--out`` file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from optsched.budget import TimeBudget
from optsched.instance import parse_instance
from optsched.problems.gmax.exact import make_backend, solve_exact
from optsched.problems.gmax.problem import GmaxProblem
from optsched.problems.gmax.sa import SAParams, simulated_annealing
from optsched.problems.scls.batching import MemoryRule, dp_batches
from optsched.problems.scls.offload import exact_offload, max_min_offload
from optsched.problems.static_latency import Phase, StaticLatencyModel
from tests.support.gmax_generate import random_gmax_instance


def emit(out, **row) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()


def problem(n: int, seed: int) -> GmaxProblem:
    return GmaxProblem.from_instance(parse_instance(random_gmax_instance(n, seed, max_batch_size=4)))


#: ``solve_exact``'s method for every exact run (``--exact-method``).
METHOD = ["dinkelbach"]


def exact(p: GmaxProblem, limit: float, solver: str = "highs") -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    res = solve_exact(p, make_backend(p, solver, threads=1), METHOD[0], budget=TimeBudget.of(limit))
    return {
        "method": METHOD[0],
        "status": res.status,
        "G": res.G,
        "bound": res.bound,
        "n": res.n,
        "t": res.t,
        "wall": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "load": os.getloadavg()[0],
        "subproblems": res.iterations,
    }


def part_scls(out, _seeds: int) -> None:  # fixed 20 pools per worker count
    hf = StaticLatencyModel(Phase(1.1e-4, 1.0e-3, 1.0e-5, 0.03), Phase(3.63e-6, 3.0e-4, 1.0e-6, 0.02186))
    rule = MemoryRule("memory", kv_bytes_per_token=819200, available_bytes=53.76 * 2**30, zeta=0.9)
    rng = np.random.default_rng(0)
    for workers in (2, 4, 8):
        for seed in range(20):
            lengths = [int(v) for v in np.clip(rng.lognormal(np.log(200), 1.0, int(rng.integers(20, 200))), 8, 1920)]
            batches, _ = dp_batches(lengths, hf, 128, rule)
            times = [hf.serve_time(len(b), max(lengths[i] for i in b), 128) for b in batches]
            loads = list(rng.uniform(0, 20, workers))
            h, ex = max_min_offload(times, loads), exact_offload(times, loads, TimeBudget.of(20), threads=1)
            emit(
                out,
                part="scls",
                workers=workers,
                seed=seed,
                requests=len(lengths),
                batches=len(batches),
                maxmin=h.makespan,
                exact=ex.makespan,
                exact_status=ex.status,
                bound=ex.bound,
                gap=h.makespan / ex.makespan - 1,
            )


_EXACT: dict[tuple[int, int], dict] = {}


def exact_cached(n: int, seed: int, limit: float) -> dict:
    """One exact run per (N, seed) and process (the n30 and sa parts share their N = 30 runs)."""
    if (n, seed) not in _EXACT:
        _EXACT[n, seed] = exact(problem(n, seed), limit)
    return _EXACT[n, seed]


def part_n20(out, seeds: int) -> None:
    for seed in range(seeds):
        emit(out, part="n20", N=20, seed=seed, **exact_cached(20, seed, 600.0))


def part_n30(out, seeds: int) -> None:
    for seed in range(seeds):
        emit(out, part="n30", N=30, seed=seed, **exact_cached(30, seed, 60.0))


def part_sa(out, seeds: int) -> None:
    for n in (10, 20, 30):
        for seed in range(seeds):
            p = problem(n, seed)
            start = time.perf_counter()
            sa = simulated_annealing(p, SAParams(seed=seed))
            sa_wall = time.perf_counter() - start
            ex = exact_cached(n, seed, 60.0 if n == 30 else 600.0)
            emit(
                out,
                part="sa",
                N=n,
                seed=seed,
                sa_G=sa.G,
                sa_wall=sa_wall,
                sa_early_exit=sa.early_exit,
                exact=ex,
                gap_to_best=1 - sa.G / ex["G"],
                gap_to_bound=1 - sa.G / ex["bound"],
            )


def part_largest(out, seeds: int) -> None:
    for n in range(18, 101, 2):
        ex = exact(problem(n, 7), 600.0)
        emit(out, part="largest", N=n, seed=7, **ex)
        if ex["status"] != "optimal":
            break


def summary(path: str) -> None:
    """Markdown tables of the latest row per (part, N, seed) in ``path``."""
    rows: dict[tuple, dict] = {}
    with open(path) as fh:
        for line in fh:
            row = json.loads(line)
            if row["part"] in ("n20", "n30", "largest", "sa"):
                rows[
                    row["part"] + "/" + row.get("method", row.get("exact", {}).get("method", "dinkelbach")),
                    row["N"],
                    row["seed"],
                ] = row
    print("| N | seed | status | G found | proven bound | bound / G - 1 | wall s | cpu s | load |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for (part, n, seed), r in sorted(rows.items()):
        if not part.startswith("sa"):
            print(
                f"| {n} | {seed} | {r['status']} | {r['G']:.5f} | {r['bound']:.5f} | {r['bound'] / r['G'] - 1:.1%} "
                f"| {r['wall']:.1f} | {r['cpu']:.1f} | {r['load']:.1f} |  ({part})"
            )
    print()
    print("| N | seed | SA G | exact G | exact status | gap to exact G | gap to bound |")
    print("|---:|---:|---:|---:|---|---:|---:|")
    for (part, n, seed), r in sorted(rows.items()):
        if part.startswith("sa"):
            ex = r["exact"]
            print(
                f"| {n} | {seed} | {r['sa_G']:.5f} | {ex['G']:.5f} | {ex['status']} | {r['gap_to_best']:.1%} "
                f"| {r['gap_to_bound']:.1%} |"
            )


PARTS = {"scls": part_scls, "n20": part_n20, "n30": part_n30, "sa": part_sa, "largest": part_largest}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_gmax.jsonl")
    ap.add_argument("--parts", default="scls,n30,sa,largest")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--exact-method", default="dinkelbach", choices=("dinkelbach", "bnb"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    METHOD[0] = args.exact_method
    if args.summary:
        summary(args.out)
        sys.exit(0)
    with open(args.out, "a") as fh:
        emit(
            fh,
            part="start",
            date=time.strftime("%Y-%m-%d %H:%M:%S"),
            python=sys.version.split()[0],
            load=os.getloadavg()[0],
        )
        for name in args.parts.split(","):
            PARTS[name](fh, args.seeds)

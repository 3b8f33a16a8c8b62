"""Speed and quality benchmark of static batching (run on demand, not collected by pytest).

    python tests/benchmarks/bench_gmax.py [--out results.jsonl] [--parts scls,n30,sa,largest]

Wall and CPU seconds are both recorded (``cpu``: this process's CPU time, HiGHS runs single-threaded
here), with the 1-minute load average, because the sandbox is shared.

Parts (each result is one JSON line, flushed as it is produced):
- ``scls``: max-min offloading vs the exact makespan (CP-SAT) on DP batchings of random pools;
- ``n30``: exact G (HiGHS, Dinkelbach) for N = 30 random requests (Table 2 coefficients, both task
  types, the paper's SLOs, max batch size 4) with a 60 s limit;
- ``sa``: the paper's annealing (default parameters) vs the exact optimum at N = 10, 20, 30;
- ``largest``: N = 8, 10, 12, ... with a 600 s limit until one is not proven optimal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from optsched.instance import parse_instance
from optsched.problems.gmax.exact import make_backend, solve_exact
from optsched.problems.gmax.generate import random_gmax_instance
from optsched.problems.gmax.problem import GmaxProblem
from optsched.problems.gmax.sa import SAParams, simulated_annealing
from optsched.problems.scls.batching import MemoryRule, dp_batches
from optsched.problems.scls.offload import exact_offload, max_min_offload
from optsched.problems.static_latency import Phase, StaticLatencyModel


def emit(out, **row) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()


def problem(n: int, seed: int) -> GmaxProblem:
    return GmaxProblem.from_instance(parse_instance(random_gmax_instance(n, seed, max_batch_size=4)))


def exact(p: GmaxProblem, limit: float, solver: str = "highs") -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    res = solve_exact(p, make_backend(p, solver, threads=1), "dinkelbach", time_limit=limit)
    return {"status": res.status, "G": res.G, "bound": res.bound, "n": res.n, "t": res.t,
            "wall": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "load": os.getloadavg()[0], "subproblems": res.iterations}


def part_scls(out) -> None:
    hf = StaticLatencyModel(Phase(1.1e-4, 1.0e-3, 1.0e-5, 0.03), Phase(3.63e-6, 3.0e-4, 1.0e-6, 0.02186))
    rule = MemoryRule("memory", kv_bytes_per_token=819200, available_bytes=53.76 * 2**30, zeta=0.9)
    rng = np.random.default_rng(0)
    for workers in (2, 4, 8):
        for seed in range(20):
            lengths = [int(v) for v in np.clip(rng.lognormal(np.log(200), 1.0, int(rng.integers(20, 200))), 8, 1920)]
            batches, _ = dp_batches(lengths, hf, 128, rule)
            times = [hf.serve_time(len(b), max(lengths[i] for i in b), 128) for b in batches]
            loads = list(rng.uniform(0, 20, workers))
            h, ex = max_min_offload(times, loads), exact_offload(times, loads, time_limit=20, threads=1)
            emit(out, part="scls", workers=workers, seed=seed, requests=len(lengths), batches=len(batches),
                 maxmin=h.makespan, exact=ex.makespan, exact_status=ex.status, bound=ex.bound,
                 gap=h.makespan / ex.makespan - 1)


def part_n30(out) -> None:
    for seed in range(3):
        p = problem(30, seed)
        emit(out, part="n30", N=30, seed=seed, **exact(p, 60.0))


def part_sa(out) -> None:
    for n in (10, 20, 30):
        for seed in range(3):
            p = problem(n, 100 + seed)
            start = time.perf_counter()
            sa = simulated_annealing(p, SAParams(seed=seed))
            sa_wall = time.perf_counter() - start
            ex = exact(p, 120.0)
            emit(out, part="sa", N=n, seed=seed, sa_G=sa.G, sa_wall=sa_wall, sa_early_exit=sa.early_exit,
                 exact=ex, gap_to_best=1 - sa.G / ex["G"], gap_to_bound=1 - sa.G / ex["bound"])


def part_largest(out) -> None:
    for n in (10, 12, 14, 16, 18, 20, 25, 30):
        p = problem(n, 7)
        ex = exact(p, 600.0)
        emit(out, part="largest", N=n, seed=7, **ex)
        if ex["status"] != "optimal":
            break


PARTS = {"scls": part_scls, "n30": part_n30, "sa": part_sa, "largest": part_largest}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_gmax.jsonl")
    ap.add_argument("--parts", default="scls,n30,sa,largest")
    args = ap.parse_args()
    with open(args.out, "a") as fh:
        emit(fh, part="start", date=time.strftime("%Y-%m-%d %H:%M:%S"), python=sys.version.split()[0])
        for name in args.parts.split(","):
            PARTS[name](fh)

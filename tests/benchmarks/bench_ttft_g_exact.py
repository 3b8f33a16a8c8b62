"""Benchmark (diagnostic): how far a longer search of the relaxation G could lift ``block-batch-ttft``.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_ttft_g_exact.py [--seconds 30] [--sizes 20 40 80 0] [--only NAME ...]

On the slices of ``bench_latency_gaps.py`` (through ``bench_prefill_search.instances``) solves the
relaxation G of ``block-batch-ttft`` (:func:`optsched.ttft_batch_bounds.batch_relaxation_optimum`,
against each request's least first-token time) on the blocks of consecutive arrivals of
:func:`optsched.ttft_block_bounds.arrival_blocks` of each size (0: the whole slice as one block),
``--seconds`` for all the blocks of one size (each block a share by its jobs). Prints, as mean TTFT
in seconds: the search's proven lower bound (its least open node where cut) and the best point of G
it found, an upper bound on G's optimum over that partition; and whether every block's search ended
(then both are G's optimum there). G's optimum over the whole slice as one block is at least its
optimum summed over any partition's blocks (deleting jobs from a point of G leaves one for the
rest), so the whole slice's best point caps every bound that G solved exactly could give; the listed
bound also raises each block to its SRPT floors (:func:`optsched.ttft_block_bounds.block_mean_bound`),
which this leaves out.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from optsched.bounds import prefill_alone_time
from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.load_bounds import share_terms
from optsched.ttft_batch_bounds import batch_relaxation_optimum
from optsched.ttft_block_bounds import arrival_blocks, busy_runs
from optsched.ttft_bounds import flush_overhead

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prefill_search import instances


def partition_range(inst: Instance, size: int, seconds: float) -> tuple[float, float, bool, int]:
    """(mean lower bound, mean best point, every block exact, blocks) of G on blocks of ``size``
    consecutive arrivals (0: one block), the blocks sharing ``seconds`` by their jobs."""
    release = np.array([r.arrival for r in inst.requests], dtype=np.float64)
    order = np.argsort(release, kind="stable")
    rel = release[order]
    work = share_terms(inst, True)[:, 0][order]
    due = rel + np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])[order]
    beta = flush_overhead(inst)
    n = len(rel)
    blocks = [(0, n)] if size == 0 else arrival_blocks(busy_runs(rel, work), size)
    budget = TimeBudget.of(seconds)
    low = best = 0.0
    exact = True
    for a, b in blocks:
        lo, hi, done = batch_relaxation_optimum(rel[a:b], work[a:b], beta, budget.share((b - a) / (n - a)), due[a:b])
        offset = float(np.sum(rel[a:b]))
        low, best, exact = low + lo - offset, best + hi - offset, exact and done
    return low / n, best / n, exact, len(blocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds for each block size (default 30)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[20, 40, 80, 0], help="block sizes (0: one block)")
    parser.add_argument("--only", nargs="*", help="slices whose name contains one of these")
    opts = parser.parse_args()
    print("| slice | block size | blocks | lower bound (s) | best point of G (s) | exact | wall (s) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, inst in instances(Path(tmp), opts.only):
            for size in opts.sizes:
                t0 = time.perf_counter()
                low, best, exact, count = partition_range(inst, size, opts.seconds)
                wall = time.perf_counter() - t0
                shown = [size or "whole", count, f"{low:.5f}", f"{best:.5f}", "yes" if exact else "no", f"{wall:.0f}"]
                cells = [name, *shown]
                print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()

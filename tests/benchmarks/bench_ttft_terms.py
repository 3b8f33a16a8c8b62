"""Benchmark (diagnostic): which batch cost terms the mean-TTFT relaxation G leaves out, and what each is worth.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_ttft_terms.py [--seconds 10] [--only NAME ...]

On the slices of ``bench_latency_gaps.py`` (through ``bench_prefill_search.instances``) solves the
relaxation G of ``block-batch-ttft`` (:mod:`optsched.ttft_batch_bounds`, on the blocks of
:func:`optsched.ttft_block_bounds.block_mean_bound`, ``--seconds`` each) with each request's work
p_i (:func:`optsched.load_bounds.share_terms`, column 0) replaced as follows, and prints the means
in seconds:

- ``G``: p_i itself (the proven bound ``block-batch-ttft`` on its blocks, before its floors).
- ``+tiles``: p_i plus the whole tiles of the request's prompt prefilled alone in the fewest chunks,
  ``L tc (max(k, ceil(I / t)) - I / t)``, k = ceil(I / P). NOT a bound: prompts that share a batch
  share its tiles.
- ``+attn``: p_i plus the attention of the prompt in k equal chunks beyond p_i's (chunks of one
  token), ``L (pq - pc / 2) (I^2 / k - I)``. NOT a bound: a schedule may cut a prompt into more
  chunks, riding on batches that other requests need anyway.
- ``+both``: both (NOT a bound).
- ``F-beta``: the least prefill alone less one batch overhead, ``F(I) - beta_p`` (NOT a bound).
- ``tile-split`` and ``budget-split``: valid variants of G with the flush and the work split
  differently, every batch paying one whole tile (flush ``beta_p + L tc``, work ``p_i - L tc I / t``)
  or every batch of n <= P prefill tokens paying its overhead as ``beta_p n / P`` (flush 0, work
  ``p_i + beta_p I / P``); proven as G is (docs/infermax.md, ``block-batch-ttft``).
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
from optsched.costmodel import Coefficients
from optsched.instance import Instance
from optsched.load_bounds import share_terms
from optsched.ttft_batch_bounds import batch_relaxation_bound
from optsched.ttft_block_bounds import block_mean_bound, srpt_prefill_works
from optsched.ttft_bounds import flush_overhead

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prefill_search import instances

VARIANTS = ("G", "+tiles", "+attn", "+both", "F-beta", "tile-split", "budget-split")


def variants(inst: Instance) -> dict[str, tuple[np.ndarray, float]]:
    """(work, flush length) of each variant of the module docstring."""
    coef = Coefficients.of(inst.cost_model).folded()
    I = np.array([r.prompt_tokens for r in inst.requests], dtype=np.float64)
    P, t, tc = inst.limits.prefill_budget, max(1, inst.cost_model.token_tile), coef.per_tile
    work = share_terms(inst, True)[:, 0]
    beta = flush_overhead(inst)
    k = np.ceil(I / P)
    tiles = tc * (np.maximum(k, np.ceil(I / t)) - I / t)
    attn = max(0.0, coef.prefill_per_token_sq - coef.prefill_per_ctx / 2) * np.maximum(I * I / k - I, 0.0)
    alone = np.array([prefill_alone_time(inst, int(x)) for x in I])
    return {
        "G": (work, beta),
        "+tiles": (work + tiles, beta),
        "+attn": (work + attn, beta),
        "+both": (work + tiles + attn, beta),
        "F-beta": (np.maximum(work, alone - beta), beta),
        "tile-split": (work - tc * I / t, beta + tc),
        "budget-split": (work + beta * I / P, 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds each variant's blocks get (default 10)")
    parser.add_argument("--only", nargs="*", help="slices whose name contains one of these")
    opts = parser.parse_args()
    print("| slice | " + " | ".join(f"{v} (s)" for v in VARIANTS) + " | wall (s) |")
    print("|---|" + "---|" * (len(VARIANTS) + 1))
    with tempfile.TemporaryDirectory() as tmp:
        for name, inst in instances(Path(tmp), opts.only):
            t0 = time.perf_counter()
            release = np.array([r.arrival for r in inst.requests], dtype=np.float64)
            alone = np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])
            shares = srpt_prefill_works(inst)
            cells = []
            for work, flush in variants(inst).values():
                budget = TimeBudget.of(opts.seconds)
                value, size, exact = block_mean_bound(
                    release, work, alone, flush, budget, shares, batch_relaxation_bound
                )
                cells.append(f"{value:.5f} ({size}{'' if exact else ', cut'})")
            print(f"| {name} | " + " | ".join(cells) + f" | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()

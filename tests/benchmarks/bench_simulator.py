"""Simulator throughput on the full splitwise_conv trace (run on demand, not collected by pytest).

Target (issue 2): 19,366 requests, ``llama2-7b-a100``, M = 100,000, C = P = 4096, policy ``vllm``,
under 30 s on a 2-core machine including the replay check. Anchor: Vidur, 67,065 batches in a
55.4 s event loop (about 1,210 batches/s) with R_max = 128 (shared/specs/anchors.md).

Usage::

    python tests/benchmarks/bench_simulator.py                       # vllm, R_max = none and 128
    python tests/benchmarks/bench_simulator.py --policies vllm sarathi rank-i --rmax 128
    python tests/benchmarks/bench_simulator.py --clip 4096           # Vidur's trace clipping

Prints one markdown table row per (policy, R_max): batches, simulation wall and CPU seconds,
batches per second (wall), replay wall and CPU seconds, end-to-end wall and CPU seconds, makespan
and evictions. CPU seconds (``time.process_time``) are the figure to compare on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from optsched import Limits, load_trace_csv, replay
from optsched.policies.engine import simulate

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
TRACE = next((p for p in CANDIDATES if p.is_dir()), CANDIDATES[0]) / "traces" / "splitwise_conv.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["vllm"])
    parser.add_argument("--rmax", nargs="+", default=["none", "128"], help="R_max values ('none' = unlimited)")
    parser.add_argument("--kv", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--first", type=int, default=None, help="only the first N requests")
    parser.add_argument(
        "--clip",
        type=int,
        default=None,
        help="clip prompts so that I + O <= CLIP, as Vidur's trace generator does with max_tokens",
    )
    args = parser.parse_args()
    if not TRACE.exists():
        raise SystemExit(f"trace not found: {TRACE}")

    print(
        f"trace {TRACE.name}, M = {args.kv}, C = P = {args.budget}"
        + (f", prompts clipped to I+O <= {args.clip}" if args.clip else "")
    )
    print(
        "| policy | R_max | requests | batches | sim wall s | sim CPU s | batches/s (wall) "
        "| replay wall s | replay CPU s"
        " | total wall s | total CPU s | makespan s | evictions |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rmax in args.rmax:
        limits = Limits(args.budget, args.budget, args.kv, None if rmax == "none" else int(rmax))
        inst = load_trace_csv(TRACE, "llama2-7b-a100", limits, first=args.first)
        if args.clip:
            clipped = [
                replace(r, prompt_tokens=max(1, min(r.prompt_tokens, args.clip - r.output_tokens)))
                for r in inst.requests
            ]
            inst = inst.with_requests(clipped, f"{inst.name}-clip{args.clip}")
        for policy in args.policies:
            w0, c0 = time.perf_counter(), time.process_time()
            schedule = simulate(inst, policy)
            w1, c1 = time.perf_counter(), time.process_time()
            result = replay(inst, schedule)
            w2, c2 = time.perf_counter(), time.process_time()
            if not result.feasible:
                raise SystemExit(f"{policy}: schedule does not replay: {result.violations[:3]}")
            n = len(schedule.batches)
            print(
                f"| {policy} | {rmax} | {len(inst.requests)} | {n} | {w1 - w0:.2f} | {c1 - c0:.2f} "
                f"| {n / (w1 - w0):,.0f}"
                f" | {w2 - w1:.2f} | {c2 - c1:.2f} | {w2 - w0:.2f} | {c2 - c0:.2f} | {result.metrics.makespan:.1f}"
                f" | {result.metrics.evictions} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Benchmark: the local search over prefill plans against the prefill-first search, mean TTFT.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_prefill_search.py [--budget 60] [--only NAME ...]

On the slices of ``bench_latency_gaps.py`` (``splitwise-conv-100`` at rate scales 1, 4, 8 and 16;
the first 300 requests of splitwise_code, and of splitwise_conv at 4 times the arrival rate; 200
arxiv length pairs with Poisson arrivals, 2/s, seed 0; a slice whose trace is absent is skipped),
each under the same time budget: the prefill-first search alone
(:func:`optsched.problems.infermax.prefill_first.best_prefill_first`, ``--budget`` seconds), and the
same search followed by the local search over prefill plans from its best knobs
(:func:`optsched.problems.infermax.prefill_search.prefill_search`) with the rest of the same budget.
Every schedule is replayed; prints one row per slice: both mean TTFTs (seconds), the gain, the plans
evaluated and the seconds each took.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from optsched.budget import TimeBudget
from optsched.instance import Instance, Limits, load_instance
from optsched.problems.infermax.prefill_first import PrefillFirst, best_prefill_first
from optsched.problems.infermax.prefill_search import prefill_search
from optsched.schedule import replay
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency_gaps import ARXIV, TRACES, arxiv_instance

#: The limits of ``splitwise-conv-100``, which every trace slice runs under.
LIMITS = Limits(4096, 4096, 200_000, 256)


def instances(folder: Path, only: list[str] | None = None) -> list[tuple[str, Instance]]:
    """(name, instance) of every slice whose data is present; with ``only``, those whose name contains
    one of its strings."""
    base = load_instance("splitwise-conv-100")
    out = [
        (f"splitwise-conv-100 x{r}", apply_transforms(base, WorkloadTransforms(rate_scale=r))) for r in (1, 4, 8, 16)
    ]
    if (TRACES / "splitwise_code.csv").is_file():
        code = load_trace(TRACES / "splitwise_code.csv", "llama2-7b-h200", LIMITS, max_rows=300)
        out.append(("splitwise_code first 300", code))
    if (TRACES / "splitwise_conv.csv").is_file():
        conv = load_trace(TRACES / "splitwise_conv.csv", "llama2-7b-h200", LIMITS, max_rows=300)
        out.append(("splitwise_conv first 300 x4", apply_transforms(conv, WorkloadTransforms(rate_scale=4))))
    if (TRACES / ARXIV).is_file():
        out.append(("arxiv 200, Poisson 2/s", load_instance(str(arxiv_instance(folder)))))
    return [(name, inst) for name, inst in out if not only or any(o in name for o in only)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=60.0, help="seconds each method gets (default 60)")
    parser.add_argument("--only", nargs="*", help="slices whose name contains one of these")
    opts = parser.parse_args()
    print("| slice | prefill-first (s) | prefill-search (s) | gain | plans | wall (s) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, inst in instances(Path(tmp), opts.only):
            t0 = time.perf_counter()
            alone = best_prefill_first(inst, "ttft", TimeBudget.of(opts.budget))
            t1 = time.perf_counter()
            budget = TimeBudget.of(opts.budget)
            start, start_value, _ = best_prefill_first(inst, "ttft", budget)
            found = prefill_search(inst, replace(PrefillFirst(1), **start.meta["knobs"]), budget)
            t2 = time.perf_counter()
            schedule = start if found.schedule is None else found.schedule
            rep = replay(inst, schedule)
            assert rep.feasible and abs(rep.metrics.mean_ttft - found.value) <= 1e-12 * found.value, rep.violations[:3]
            gain = (alone[1] - found.value) / alone[1]
            print(
                f"| {name} | {alone[1]:.5f} | {found.value:.5f} | {100 * gain:.1f} % | {found.evaluations} | "
                f"{t1 - t0:.0f}; {t2 - t1:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

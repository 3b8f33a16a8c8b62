"""Benchmark: the ``finish-index`` bound on mean latency of requests released together.

Usage::

    PYTHONPATH=. python tests/benchmarks/bench_finish_index.py [--only NAME ...]

For each instance (every request at time 0): the value and wall time of ``finish-index``
(:func:`optsched.finish_index.finish_index_bound`, no time limit), the largest of the other latency
bounds that ``optsched bound INSTANCE --problem infermax --objective latency`` lists (the InferMax
bounder, no time limit: each LP within four times its own limit) and the change. Instances: 100 equal requests (I = 900,
O = 256; ``bench_latency_waves.equal_instance``), ``splitwise-conv-100 --offline``, and the first 300
requests of splitwise_conv and splitwise_code with ``--offline`` (``../shared/data/traces``, skipped
where absent), all under ``llama2-7b-h200`` and the gap table's limits.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from optsched.budget import NO_LIMIT
from optsched.finish_index import finish_index_bound
from optsched.instance import Instance, Limits, load_instance
from optsched.load_bounds import prompt_attention_extra
from optsched.problems import bounder_for, options_for
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace
from tests.benchmarks.bench_latency_waves import equal_instance

REPO = Path(__file__).resolve().parents[2]
TRACES = next(
    (base / "shared" / "data" / "traces" for base in REPO.parents if (base / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "traces",
)
LIMITS = Limits(token_budget=4096, prefill_budget=4096, kv_capacity=200_000, max_running=256)


def instances() -> list[tuple[str, Instance]]:
    """(name, instance) of every instance whose data is present."""
    offline = WorkloadTransforms(offline=True)
    out = [
        ("100 equal requests (I = 900, O = 256)", equal_instance()),
        ("splitwise-conv-100 --offline", apply_transforms(load_instance("splitwise-conv-100"), offline)),
    ]
    for trace in ("splitwise_conv", "splitwise_code"):
        path = TRACES / f"{trace}.csv"
        if path.is_file():
            base = load_trace(str(path), "llama2-7b-h200", LIMITS, max_rows=300)
            out.append((f"{trace} first 300 --offline", apply_transforms(base, offline)))
    return out


def other_bounds(inst: Instance) -> dict[str, float]:
    """Every valid latency bound of the InferMax bounder but ``finish-index``, by name."""
    options = options_for("infermax", "bound").parse({"objective": "latency"})
    found = bounder_for("infermax")(inst, options, NO_LIMIT)
    return {b.name: b.value for b in found if b.valid and b.name != "finish-index"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="run the instances whose name contains one of these")
    opts = ap.parse_args()
    print(f"{'instance':<40} {'finish-index (s)':>16} {'wall (s)':>9} {'best other (s)':>15}  {'bound':<14} change")
    for name, inst in instances():
        if opts.only and not any(o in name for o in opts.only):
            continue
        t0 = time.perf_counter()
        found = finish_index_bound(inst, prompt_attention_extra(inst, inst.columns[1]), None)
        wall = time.perf_counter() - t0
        others = other_bounds(inst)
        leader = max(others, key=others.__getitem__)
        value = found.value if found is not None else float("nan")
        change = value / others[leader] - 1.0
        print(f"{name:<40} {value:>16.4f} {wall:>9.1f} {others[leader]:>15.4f}  {leader:<14} {change:+.1%}", flush=True)


if __name__ == "__main__":
    main()

"""vLLM 0.32's own scheduler against optsched's policies on trace slices (docs/policies.md).

Usage (the vLLM venv of tests/e2e/vllm_env.sh; the traces in ../shared/data/traces)::

    python tests/benchmarks/bench_vllm_scheduler.py --vllm-python ~/.cache/optsched/vllm-0.32.0-venv/bin/python

For each trace slice (the first ``--requests`` requests of splitwise_conv and splitwise_code, the
``--cost-model`` profile, C = P = 4096, KV capacity ``--kv-capacity`` tokens) it runs vLLM's
scheduler standalone (:mod:`optsched.executor.native`: no model, the profile's step times as the
clock) with KV blocks of 16 tokens (vLLM's default) and of 1 token (optsched's granularity),
simulates optsched's policies on the same instance, replays every schedule and prints per
schedule: batches, preemptions, mean latency and TTFT (s), and the agreement with vLLM's batches
(identical leading batches, the fraction equal at the same index, the fraction matched anywhere).
Slices whose trace file is absent are skipped. ``--json`` prints the rows as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from optsched.executor.fidelity import comparison_rows, run_vllm_scheduler_in
from optsched.instance import Instance
from optsched.workload import load_trace

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / ".." / "shared" / "data" / "traces"
POLICIES = ("vllm", "vllm-hy", "sarathi-pc", "vllm-v1")


def trace_slice(trace: Path, requests: int, kv_capacity: int, cost_model: str) -> Instance:
    """The first ``requests`` requests of ``trace`` under C = P = 4096 and M = ``kv_capacity``.

    The cost model is written inline so that the vLLM environment reads it without optsched's
    packaged profiles.
    """
    name = f"{trace.stem}-{requests}-m{kv_capacity}"
    inst = load_trace(trace, cost_model, {"kv_capacity": kv_capacity}, max_rows=requests, name=name)
    return replace(inst, cost_model=replace(inst.cost_model, name="inline"))


def table(rows: list[dict]) -> str:
    """The rows as an aligned text table (times in seconds)."""
    head = (
        f"{'instance':<28} {'block':>5} {'schedule':<12} {'batches':>7} {'preempt':>7} {'latency s':>9} "
        f"{'TTFT s':>8} {'ident.':>6} {'same idx':>8} {'matched':>7}"
    )
    out = [head]
    for r in rows:
        agree = f"{r['identical_prefix']:>6} {r['positional']:>8.1%} {r['matched']:>7.1%}" if "matched" in r else ""
        out.append(
            f"{r['instance']:<28} {r['block_size']:>5} {r['schedule']:<12} {r['batches']:>7} {r['evictions']:>7} "
            f"{r['mean_latency']:>9.3f} {r['mean_ttft']:>8.3f} {agree}"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True, help="Python of the vLLM 0.32 venv")
    ap.add_argument("--traces", default="splitwise_conv,splitwise_code", help="trace names in --trace-dir")
    ap.add_argument("--trace-dir", default=str(TRACES))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--kv-capacity", type=int, default=16384, help="M in tokens (1,024 blocks of 16)")
    ap.add_argument("--cost-model", default="llama2-7b-a100")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--block-sizes", default="16,1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    blocks = [int(b) for b in args.block_sizes.split(",")]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-vllm-sched-") as work:
        for name in args.traces.split(","):
            trace = Path(args.trace_dir) / f"{name}.csv"
            if not trace.exists():
                print(f"skipped {name}: {trace} is absent", file=sys.stderr)
                continue
            inst = trace_slice(trace, args.requests, args.kv_capacity, args.cost_model)
            path = Path(work) / f"{inst.name}.json"
            inst.save(path)
            vllm = run_vllm_scheduler_in(args.vllm_python, path, Path(work) / inst.name, blocks, ROOT)
            for row in comparison_rows(inst, vllm, args.policies.split(",")):
                rows.append({"instance": inst.name, **row})
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""vLLM 0.32's own scheduler against optsched's policies on trace slices (docs/policies.md).

Usage (the vLLM venv of tests/e2e/vllm_env.sh; the traces in ../shared/data/traces)::

    python tests/benchmarks/bench_vllm_scheduler.py --vllm-python ~/.cache/optsched/vllm-0.32.0-venv/bin/python

For each trace slice (the first ``--requests`` requests of splitwise_conv and splitwise_code, the
``--cost-model`` profile, C = P = 4096, R_max = 256, KV capacity ``--kv-capacity`` tokens) it runs vLLM's
scheduler standalone (:mod:`optsched.executor.native`: no model, the profile's step times as the
clock) with KV blocks of 16 tokens (vLLM's default) and of 1 token (optsched's granularity),
simulates optsched's policies on the same instance, replays every schedule and prints per
schedule: batches, preemptions, mean latency and TTFT (s), and the agreement with vLLM's batches
(identical leading batches, the fraction equal at the same index, the fraction matched anywhere).
Slices whose trace file is absent are skipped. ``--json`` prints the rows as one JSON object.

``--watermark F`` runs vLLM with that fraction of its KV blocks kept free at admission (vLLM's
``SchedulerConfig.watermark``, 0 by default; Vidur's vLLM model keeps 0.01) and every policy with
the same fraction of its own blocks (``PolicyConfig.kv_watermark``, :func:`watermarked`).

``--instance NAME|FILE`` runs one instance instead (a shipped one or a JSON file, with
``--rate-scale`` and ``--kv-capacity`` applied). ``--check`` exits 1 unless ``vllm-v1`` equals
vLLM's schedule with blocks of 16 and ``sarathi-pc`` vLLM's schedule with blocks of 1, batch for
batch (tests/e2e/vllm_e2e.py runs it so on ``splitwise-conv-100``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from optsched.executor.fidelity import comparison_rows, run_vllm_scheduler_in
from optsched.instance import Instance, load_instance
from optsched.policies.config import PolicyConfig, policy_config
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / ".." / "shared" / "data" / "traces"
POLICIES = ("vllm", "vllm-hy", "sarathi-pc", "vllm-v1")
#: Under ``--check``: the policy that must equal vLLM's schedule with KV blocks of each size.
IDENTICAL = {16: "vllm-v1", 1: "sarathi-pc"}


def trace_slice(trace: Path, requests: int, kv_capacity: int, cost_model: str) -> Instance:
    """The first ``requests`` requests of ``trace`` (0: all) under C = P = 4096, M = ``kv_capacity``
    and R_max = 256 (vLLM 0.32's default ``max_num_seqs`` on an A100).

    The cost model is written inline so that the vLLM environment reads it without optsched's
    packaged profiles.
    """
    name = f"{trace.stem}-{requests}-m{kv_capacity}"
    inst = load_trace(
        trace, cost_model, {"kv_capacity": kv_capacity, "max_running": 256}, max_rows=requests or None, name=name
    )
    return replace(inst, cost_model=replace(inst.cost_model, name="inline"))


def named_instance(spec: str, rate_scale: float, kv_capacity: int) -> Instance:
    """A shipped instance or JSON file with its arrivals divided by ``rate_scale``, M set and R_max
    256 where it has none."""
    inst = load_instance(spec)
    if rate_scale != 1:
        inst = apply_transforms(inst, WorkloadTransforms(rate_scale=rate_scale), source=spec)
    name = f"{inst.name}-m{kv_capacity}"
    limits = replace(inst.limits, kv_capacity=kv_capacity, max_running=inst.limits.max_running or 256)
    return replace(inst, name=name, limits=limits, cost_model=replace(inst.cost_model, name="inline"))


def watermarked(config: PolicyConfig, fraction: float, kv_capacity: int) -> PolicyConfig:
    """``config`` keeping vLLM's watermark ``fraction`` of its KV blocks free at admission: vLLM keeps
    ``int(fraction * num_blocks)`` blocks, its ``num_blocks`` being the usable blocks plus one null block."""
    if not fraction:
        return config
    return replace(config, kv_watermark=int(fraction * (kv_capacity // config.kv_block + 1)))


def check(rows: list[dict]) -> list[str]:
    """The :data:`IDENTICAL` pairs whose schedules are not the same batch for batch (empty: all are)."""
    vllm = {(r["instance"], r["block_size"]): r["batches"] for r in rows if "matched" not in r}
    bad = []
    for (instance, block), batches in vllm.items():
        policy = IDENTICAL.get(block)
        row = next(
            (r for r in rows if (r["instance"], r["block_size"], r["schedule"]) == (instance, block, policy)), None
        )
        if policy is None:
            continue
        if row is None:
            bad.append(f"{instance}: {policy} was not compared with vLLM's schedule with blocks of {block}")
        elif not row["identical_prefix"] == row["batches"] == batches:
            bad.append(
                f"{instance}: {policy} ({row['batches']} batches) differs from vLLM's schedule with blocks of "
                f"{block} ({batches} batches) from batch {row['identical_prefix']} on"
            )
    return bad


def table(rows: list[dict]) -> str:
    """The rows as an aligned text table (times in seconds)."""
    head = (
        f"{'instance':<32} {'block':>5} {'schedule':<12} {'batches':>7} {'preempt':>7} {'latency s':>9} "
        f"{'TTFT s':>8} {'ident.':>6} {'same idx':>8} {'matched':>7}"
    )
    out = [head]
    for r in rows:
        agree = f"{r['identical_prefix']:>6} {r['positional']:>8.1%} {r['matched']:>7.1%}" if "matched" in r else ""
        out.append(
            f"{r['instance']:<32} {r['block_size']:>5} {r['schedule']:<12} {r['batches']:>7} {r['evictions']:>7} "
            f"{r['mean_latency']:>9.3f} {r['mean_ttft']:>8.3f} {agree}"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", required=True, help="Python of the vLLM 0.32 venv")
    ap.add_argument("--traces", default="splitwise_conv,splitwise_code", help="trace names in --trace-dir")
    ap.add_argument("--trace-dir", default=str(TRACES))
    ap.add_argument("--requests", type=int, default=300, help="the first N requests of each trace (0: all)")
    ap.add_argument("--kv-capacity", type=int, default=16384, help="M in tokens (1,024 blocks of 16)")
    ap.add_argument("--cost-model", default="llama2-7b-a100")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--block-sizes", default="16,1")
    ap.add_argument("--instance", help="one shipped instance or JSON file instead of the trace slices")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="with --instance: divide arrivals by this")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the IDENTICAL pairs are identical")
    ap.add_argument("--watermark", type=float, default=0.0, help="vLLM's watermark, given to the policies too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    blocks = [int(b) for b in args.block_sizes.split(",")]
    if args.instance:
        instances = [named_instance(args.instance, args.rate_scale, args.kv_capacity)]
    else:
        instances = []
        for name in args.traces.split(","):
            trace = Path(args.trace_dir) / f"{name}.csv"
            if trace.exists():
                instances.append(trace_slice(trace, args.requests, args.kv_capacity, args.cost_model))
            else:
                print(f"skipped {name}: {trace} is absent", file=sys.stderr)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-vllm-sched-") as work:
        for inst in instances:
            path = Path(work) / f"{inst.name}.json"
            inst.save(path)
            vllm = run_vllm_scheduler_in(args.vllm_python, path, Path(work) / inst.name, blocks, ROOT, args.watermark)
            policies = [
                watermarked(policy_config(p), args.watermark, args.kv_capacity) for p in args.policies.split(",")
            ]
            for row in comparison_rows(inst, vllm, policies):
                rows.append({"instance": inst.name, **row})
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    else:
        print(table(rows))
    problems = check(rows) if args.check else []
    for line in problems:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""InferMax at scale: gaps of ``solve --problem infermax`` on 32 to 1,000-request instances (run on demand).

Usage::

    python -m tests.benchmarks.bench_scale acceptance [--time-limit 300] [--only NAME ...] [--out FILE]
    python -m tests.benchmarks.bench_scale grid [--time-limit 600] [--out FILE]
    python -m tests.benchmarks.bench_scale slice [--time-limit 600] [--out FILE]
    python -m tests.benchmarks.bench_scale curve [--time-limit 300] [--only NAME] [--out FILE]
    python -m tests.benchmarks.bench_scale table --inp FILE [--curve NAME]

- ``acceptance``: the instances of issue 28, each solved with the time limit (the same call as
  ``optsched solve INSTANCE --problem infermax --time-limit S``): ``n64-s0`` .. ``n64-s3`` (64
  requests, I ~ N(256, 128) clipped to [16, 1024], O ~ N(128, 64) clipped to [8, 512], C = P =
  2048, M = 6,000; ``optsched generate --n 64 --prompt normal:256,128,16,1024 --output
  normal:128,64,8,512 --kv-capacity 6000 --token-budget 2048 --prefill-budget 2048 --seed S``),
  ``code300`` (the first 300 requests of ``splitwise_code.csv``, offline, C = P = 4096, M = 10 % of
  their KV need sum(I + O - 1)) and ``infermax-i64-o1024-n32-m10k`` (shipped).
- ``grid``: the InferMax grid (``optsched.generators.infermax_grid``: C = P = 4096, M = 100,000),
  N in {64, 128}, I and O in {64, 1024} (``--sizes`` for others; 600 s a cell).
- ``slice``: the first 1,000 requests of ``splitwise_code.csv``, offline, M = 10 % of their KV need.
- ``curve``: one solve (default ``infermax-i64-o1024-n32-m10k``) and its gap over time: the best
  schedule (best policy from the start, then the segment-list search's improvements) against the best
  proven bound (the work and KV-time bounds from the start, then the trajectory bound's refinements).

Each result is one JSON line (printed, and appended to ``--out``); ``table`` prints the markdown
tables of docs/performance.md. Every figure records the load average (1 min) at the end of its run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from optsched.generators import ClippedNormal, generate, infermax_grid
from optsched.instance import Instance, Limits, load_instance
from tests.support.solving import registered_solve

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("OPTSCHED_SHARED", ROOT.parent / "shared"))
if not SHARED.exists():
    SHARED = Path("/work/shared")
CODE = SHARED / "data" / "traces" / "splitwise_code.csv"


def n64(seed: int) -> Instance:
    """The issue's 64-request instance (module docstring), seed ``seed``."""
    return generate(
        64,
        [(ClippedNormal(256, 128, 16, 1024), ClippedNormal(128, 64, 8, 512))],
        name=f"n64-s{seed}",
        limits={"token_budget": 2048, "prefill_budget": 2048, "kv_capacity": 6000},
        seed=seed,
    )


def code_slice(n: int, share: float = 0.1) -> Instance:
    """The first ``n`` requests of splitwise_code.csv, offline, M = ``share`` of their KV need."""
    from optsched.workload import load_trace_csv

    base = load_trace_csv(CODE, "llama2-7b-a100", first=n, offline=True, check_capacity=False)
    need = sum(r.prompt_tokens + r.output_tokens - 1 for r in base.requests)
    limits = Limits(token_budget=4096, prefill_budget=4096, kv_capacity=round(share * need))
    return Instance(f"code{n}-m{share:g}", base.cost_model, limits, base.requests)


def acceptance_instances() -> dict[str, Any]:
    out: dict[str, Any] = {f"n64-s{s}": (lambda s=s: n64(s)) for s in range(4)}
    out["code300"] = lambda: code_slice(300)
    out["infermax-i64-o1024-n32-m10k"] = lambda: load_instance("infermax-i64-o1024-n32-m10k")
    return out


def emit(row: dict[str, Any], out: str | None) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as fh:
            fh.write(line + "\n")


def run_one(name: str, inst: Instance, time_limit: float) -> dict[str, Any]:
    """One solve, as ``optsched solve --problem infermax --time-limit``: the row of the tables."""
    cpu = time.process_time()
    t = time.perf_counter()
    res = registered_solve("infermax", inst, {"time_limit": time_limit})
    scale = res.extra.get("scale", {})
    policies = {k: v for k, v in res.extra["policy_values"].items() if k not in ("plan-search", "serial")}
    return {
        "bench": "scale",
        "instance": name,
        "N": len(inst.requests),
        "M": inst.limits.kv_capacity,
        "time_limit": time_limit,
        "status": str(res.status),
        "objective": res.objective,
        "bound": res.bound,
        "gap": res.gap,
        "best_policy": min(policies.values()),
        "schedule_from": res.extra["upper_bound_policy"],
        "bounds": {k: v["value"] for k, v in scale.get("bounds", {}).items()},
        "wall": round(time.perf_counter() - t, 1),
        "cpu": round(time.process_time() - cpu, 1),
        "load_avg": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "plan_search_history": scale.get("plan_search_history"),
        "trajectory_history": scale.get("trajectory_history"),
    }


def run_acceptance(args: argparse.Namespace) -> None:
    for name, make in acceptance_instances().items():
        if not args.only or name in args.only:
            emit(run_one(name, make(), args.time_limit), args.out)


def run_grid(args: argparse.Namespace) -> None:
    for N in (64, 128):
        for I in args.sizes:
            for O in args.sizes:
                emit(run_one(f"grid-N{N}-I{I}-O{O}", infermax_grid(N, I, O), args.time_limit), args.out)


def run_slice(args: argparse.Namespace) -> None:
    emit(run_one("code1000", code_slice(1000), args.time_limit), args.out)


def run_curve(args: argparse.Namespace) -> None:
    name = (args.only or ["infermax-i64-o1024-n32-m10k"])[0]
    row = run_one(name, acceptance_instances()[name](), args.time_limit)
    row["bench"] = "curve"
    emit(row, args.out)


#: Times (seconds on the scale phase's clock) at which ``table`` prints the gap over time.
CURVE_TIMES = (0, 5, 10, 20, 30, 45, 60, 90, 120, 150, 180, 210, 240, 270, 300, 400, 500, 600)


def _curve(row: dict[str, Any]) -> list[tuple[float, float, float, float]]:
    """(time, schedule, bound, gap) at the times of CURVE_TIMES within the limit (the scale phase's
    clock, which starts after the policies)."""
    events = [(0.0, "s", row["best_policy"])]
    events += [(t, "s", v) for t, v in row["plan_search_history"] or []]
    events += [(t, "b", v) for t, v in row["trajectory_history"] or []]
    sched, bound, out = row["best_policy"], row["bounds"].get("kv-time", 0.0), []
    events.sort()
    for at in [t for t in CURVE_TIMES if t <= row["time_limit"]]:
        while events and events[0][0] <= at:
            _, kind, v = events.pop(0)
            sched, bound = (min(sched, v), bound) if kind == "s" else (sched, max(bound, v))
        out.append((at, sched, bound, (sched - bound) / sched))
    return out


def run_table(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in open(args.inp) if line.strip()]
    print(
        "| instance | N | M | limit (s) | best policy (s) | schedule (s) | from | bound (s) | gap "
        "| best policy's gap | wall (s) | CPU (s) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["bench"] != "scale":
            continue
        policy_gap = (r["best_policy"] - r["bound"]) / r["best_policy"]
        print(
            f"| {r['instance']} | {r['N']} | {r['M']} | {r['time_limit']:g} | {r['best_policy']:.4f} | "
            f"{r['objective']:.4f} | {r['schedule_from']} | {r['bound']:.4f} | {100 * r['gap']:.2f} % | "
            f"{100 * policy_gap:.1f} % | {r['wall']} | {r['cpu']} | {r['load_avg']} |"
        )
    for r in rows:
        if r["bench"] == "curve" or r["instance"] == args.curve:
            print(f"\nGap over time, {r['instance']} ({r['time_limit']:g} s, load {r['load_avg']}):\n")
            print("| time (s) | schedule (s) | bound (s) | gap |")
            print("|---|---|---|---|")
            for t, s, b, g in _curve(r):
                print(f"| {t:.1f} | {s:.4f} | {b:.4f} | {100 * g:.2f} % |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["acceptance", "grid", "slice", "curve", "table"])
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--only", nargs="*", help="acceptance/curve: instance names")
    ap.add_argument("--sizes", type=int, nargs="*", default=[64, 1024], help="grid: prompt and output lengths")
    ap.add_argument("--curve", help="table: print the gap over time of this instance's row too")
    ap.add_argument("--out")
    ap.add_argument("--inp")
    args = ap.parse_args()
    if args.time_limit is None:
        args.time_limit = 600.0 if args.what in ("grid", "slice") else 300.0
    {"acceptance": run_acceptance, "grid": run_grid, "slice": run_slice, "curve": run_curve, "table": run_table}[
        args.what
    ](args)


if __name__ == "__main__":
    main()

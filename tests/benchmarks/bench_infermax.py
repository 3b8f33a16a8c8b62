"""InferMax benchmarks (run on demand; not collected by pytest).

Usage::

    python -m tests.benchmarks.bench_infermax sec45 [--time-limit S] [--profile NAME] [--out FILE]
    python -m tests.benchmarks.bench_infermax scale --n 8 16 32 64 [--time-limit S] [--memory-share F] [--out FILE]
    python -m tests.benchmarks.bench_infermax crosscheck [--out FILE]
    python -m tests.benchmarks.bench_infermax gaps [--time-limit S] [--out FILE]

- ``sec45``: the paper's section 4.5 ("are evictions evil?"): N = O = 4, I in 1..1024,
  M = max(2I, I+O-1), C = P = 4096, R_max unlimited, llama2-7b-a100 (or --profile); optimum with and without
  evictions (CP-SAT), vLLM and vLLM-ef.
- ``scale``: random instances with I, O in 1..16 (N requests, M = 40 % of the total KV need or
  ``--memory-share`` of it, C = P = 64, llama2-7b-a100), CP-SAT with the given limit; status,
  objective, bound, gap, time.
- ``crosscheck``: the 32 tiny instances of tests/problems/infermax/test_infermax.py, CP-SAT vs HiGHS vs exhaustive.
- ``gaps``: small InferMax-grid instances, every baseline policy's makespan vs the optimum/bound.
- ``table --inp FILE``: markdown tables (section 4.5; every policy's excess over the proven bound)
  from the JSON lines of ``sec45``.

Each result is one JSON line appended to ``--out`` (default: stdout only).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

from optsched.bounds import generic_bounds
from optsched.costmodel import load_cost_model
from optsched.generators import infermax_grid
from optsched.instance import InstanceError
from optsched.policies import simulator_for
from optsched.policies.config import POLICY_CONFIGS
from optsched.result import replayed_objective
from tests.support.infermax import scale_instance, tiny_instance
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.solving import registered_solve


def emit(row: dict[str, Any], out: str | None) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as fh:
            fh.write(line + "\n")


def sec45_instance(I: int, O: int = 4, N: int = 4, profile: str | None = None):
    """The section 4.5 instance of prompt length I, under ``profile`` (default: the generator's)."""
    inst = grid_instance(N, I, O, name=f"sec45-I{I}")
    return inst if profile is None else dataclasses.replace(inst, cost_model=load_cost_model(profile))


def run_sec45(args: argparse.Namespace) -> None:
    for I in args.inputs:
        inst = sec45_instance(I, profile=args.profile)
        row: dict[str, Any] = {"bench": "sec45", "I": I, "profile": inst.cost_model.name}
        for label, no_evict in (("opt", False), ("opt_ef", True)):
            res = registered_solve(
                "infermax", inst, {"no_evict": no_evict, "time_limit": args.time_limit, "threads": args.threads}
            )
            row[label] = {
                "status": res.status,
                "objective": res.objective,
                "bound": res.bound,
                "evictions": res.replay.metrics.evictions,
                "batches": res.replay.metrics.batches,
                "wall": round(res.wall_time, 2),
                "horizon": res.extra["horizon"],
            }
        for pol in ("vllm", "vllm-ef"):
            value, rep = replayed_objective(inst, simulator_for(pol)(inst), "makespan")
            row[pol] = {"objective": value, "evictions": rep.metrics.evictions}
        emit(row, args.out)


def run_scale(args: argparse.Namespace) -> None:
    for n in args.n:
        for seed in args.seed or range(args.seeds):
            inst = scale_instance(n, seed, args.memory_share)
            cpu = time.process_time()
            res = registered_solve("infermax", inst, {"time_limit": args.time_limit, "threads": args.threads})
            emit(
                {
                    "bench": "scale",
                    "N": n,
                    "seed": seed,
                    "memory_share": args.memory_share,
                    "kv_capacity": inst.limits.kv_capacity,
                    "status": res.status,
                    "objective": res.objective,
                    "bound": res.bound,
                    "gap": res.gap,
                    "wall": round(res.wall_time, 2),
                    "cpu": round(time.process_time() - cpu, 2),
                    "load_avg": os.getloadavg()[0],
                    "horizon": res.extra["horizon"],
                    "best_policy": res.extra["upper_bound_policy"],
                    "best_policy_value": min(res.extra["policy_values"].values()),
                    "variables": res.extra.get("variables"),
                    "work_bound": generic_bounds(inst)[0].value,
                    "relaxation": res.extra.get("relaxation"),
                },
                args.out,
            )


def run_crosscheck(args: argparse.Namespace) -> None:
    for seed in range(32):
        inst = tiny_instance(seed)
        for no_evict in (False, True):
            best = exhaustive_makespan(inst, evict=not no_evict)[0]
            row: dict[str, Any] = {"bench": "crosscheck", "seed": seed, "no_evict": no_evict, "exhaustive": best}
            for solver in ("cpsat", "highs"):
                t = time.perf_counter()
                res = registered_solve("infermax", inst, {"solver": solver, "no_evict": no_evict, "threads": 1})
                row[solver] = {
                    "status": res.status,
                    "objective": res.objective,
                    "wall": round(time.perf_counter() - t, 2),
                    "match": abs(res.objective - best) <= 1e-6 * best,
                }
            emit(row, args.out)


def grid_instance(N: int, I: int, O: int, name: str | None = None):
    """N identical requests under the paper's section 4.5 memory rule M = max(2I, I + O - 1)."""
    return infermax_grid(N, I, O, kv_capacity=max(2 * I, I + O - 1), name=name or f"grid-N{N}-I{I}-O{O}")


def run_gaps(args: argparse.Namespace) -> None:
    for N in (4, 8):
        for I in (16, 128, 1024):
            for O in (4, 16):
                inst = grid_instance(N, I, O)
                res = registered_solve("infermax", inst, {"time_limit": args.time_limit, "threads": args.threads})
                pols = {}
                for name in sorted(POLICY_CONFIGS):
                    try:
                        pols[name] = replayed_objective(inst, simulator_for(name)(inst), "makespan")[0]
                    except InstanceError:
                        continue
                emit(
                    {
                        "bench": "gaps",
                        "N": N,
                        "I": I,
                        "O": O,
                        "status": res.status,
                        "objective": res.objective,
                        "bound": res.bound,
                        "wall": round(res.wall_time, 2),
                        "policies": pols,
                    },
                    args.out,
                )


def _pct(a: float, b: float) -> str:
    return f"{100 * (a - b) / a:+.1f}%"


def run_table(args: argparse.Namespace) -> None:
    """Markdown tables (section 4.5 and policy gaps) from the JSON lines of ``sec45``."""
    rows = [json.loads(line) for line in open(args.inp) if '"sec45"' in line]
    print(
        "| I | M | optimum with evictions (ms) | evictions | optimum without (ms) | vLLM (ms) | evictions "
        "| vLLM-ef (ms) | evicting saves | not evicting saves |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, f = r["opt"], r["opt_ef"]
        best = min(o["objective"], f["objective"])
        ev = o["objective"] if o["objective"] <= f["objective"] else f["objective"]
        mark = lambda x: "" if x["status"] == "optimal" else f" (bound {1e3 * x['bound']:.3f})"  # noqa: E731
        print(
            f"| {r['I']} | {max(2 * r['I'], r['I'] + 3)} | {1e3 * ev:.3f}{mark(o)} | {o['evictions']} "
            f"| {1e3 * f['objective']:.3f}{mark(f)} | {1e3 * r['vllm']['objective']:.3f} | {r['vllm']['evictions']} "
            f"| {1e3 * r['vllm-ef']['objective']:.3f} | {_pct(f['objective'], best)} "
            f"| {_pct(r['vllm']['objective'], f['objective'])} |"
        )
    print()
    names = sorted(POLICY_CONFIGS)
    print("| I | proven bound (ms) | best known (ms) | proven optimal | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for r in rows:
        inst = sec45_instance(r["I"], profile=r.get("profile"))
        o, f = r["opt"], r["opt_ef"]
        best = min(o["objective"], f["objective"])
        bound = o["bound"]
        cells = []
        for name in names:
            try:
                v = replayed_objective(inst, simulator_for(name)(inst), "makespan")[0]
            except InstanceError:  # a policy of another formulation that refuses the instance
                cells.append("n/a")
                continue
            cells.append(f"{100 * (v - best) / best:+.1f}")
        proven = "yes" if o["status"] == "optimal" else f"no (gap {100 * (best - bound) / best:.0f}%)"
        print(f"| {r['I']} | {1e3 * bound:.3f} | {1e3 * best:.3f} | {proven} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["sec45", "scale", "crosscheck", "gaps", "table"])
    ap.add_argument("--inp", help="JSON lines of sec45 (for table)")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--profile", help="sec45: cost model profile (name or TOML) instead of the instances' own")
    ap.add_argument("--n", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--seeds", type=int, default=1, help="seeds 0 .. SEEDS-1")
    ap.add_argument("--seed", type=int, nargs="+", help="these seeds instead of --seeds")
    ap.add_argument(
        "--memory-share",
        type=float,
        default=0.4,
        help="scale: M as a share of the requests' total KV need (default 0.4)",
    )
    ap.add_argument("--inputs", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 512, 1024])
    args = ap.parse_args()
    {"sec45": run_sec45, "scale": run_scale, "crosscheck": run_crosscheck, "gaps": run_gaps, "table": run_table}[
        args.what
    ](args)


if __name__ == "__main__":
    main()

"""Speed benchmarks of the Hybrid formulations (docs/performance.md, the "Hybrid" sections).

Usage::

    python -m tests.benchmarks.bench_hybrid offline [--seeds 10] [--moments literal|matched]
    python -m tests.benchmarks.bench_hybrid mip-toy --solver highs|cbc|gurobi [--time-limit 600]
    python -m tests.benchmarks.bench_hybrid mip-scan --solver highs|cbc|gurobi [--time-limit 600]

``offline``: P||Cmax (26)-(30) on the 1319 x 200 GSM8K-like instances: wall time, status, max load and
proven bound of the default method (LPT + local search + re-packing + LNS), and LPT alone for comparison.
``mip-toy``: the full MIP (strengthened, contract time model, K = I) on the paper's toy size, 100 requests x
20 clients, warm-started from the ``hybrid`` policy; best gap within the time limit (one thread).
``mip-scan``: sizes I = 4, 6, 8, 10, 12, 15, 20 (J = max(2, I // 5), the toy's ratio), cold start, until the
first size not proven optimal within the time limit.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

from optsched.budget import TimeBudget
from optsched.generators import gsm8k_like
from optsched.problems.hybrid.pcmax import loads_of, lpt, processing_times, solve_pcmax
from tests.support.hybrid_paper import paper_batch, paper_limits

warnings.filterwarnings("ignore", category=DeprecationWarning)


def offline(seeds: int, moments: str) -> None:
    for seed in range(seeds):
        inst = paper_batch(seed, moments=moments)
        p = processing_times(inst)
        t0 = time.perf_counter()
        found = solve_pcmax(p, 200, budget=TimeBudget.of(10.0))
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        lpt_value = max(loads_of(p, lpt(p, 200), 200))
        lpt_wall = time.perf_counter() - t0
        print(
            json.dumps({
                "seed": seed,
                "moments": moments,
                "status": found.status,
                "max_load": found.makespan,
                "bound": found.bound,
                "gap_pct": 100 * (found.makespan - found.bound) / found.makespan,
                "wall_s": round(wall, 3),
                "method": found.method,
                "lpt": lpt_value,
                "lpt_gap_pct": 100 * (lpt_value - found.bound) / lpt_value,
                "lpt_wall_s": round(lpt_wall, 3),
            }),
            flush=True,
        )


def mip(instance, solver: str, limit: float, warm: str | None) -> dict:
    from optsched.problems.hybrid.solve import solve

    t0 = time.perf_counter()
    res = solve(instance, {"solver": solver, "time_limit": limit, "threads": 1, "warm_start": warm})
    out = {
        "instance": instance.name,
        "solver": solver,
        "status": res.status,
        "objective": res.objective,
        "bound": res.bound,
        "gap": res.gap,
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    out.update(res.extra)
    if res.message is not None:
        out["message"] = res.message
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["offline", "mip-toy", "mip-scan"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--moments", default="literal")
    ap.add_argument("--solver", default="highs")
    ap.add_argument("--time-limit", type=float, default=600.0)
    args = ap.parse_args()
    if args.what == "offline":
        offline(args.seeds, args.moments)
    elif args.what == "mip-toy":
        print(
            json.dumps(mip(gsm8k_like(0, n=100, limits=paper_limits(20)), args.solver, args.time_limit, "hybrid")),
            flush=True,
        )
    else:
        for n in (4, 6, 8, 10, 12, 15, 20):
            row = mip(gsm8k_like(0, n=n, limits=paper_limits(max(2, n // 5))), args.solver, args.time_limit, None)
            print(json.dumps(row), flush=True)
            if row["status"] != "optimal":
                break


if __name__ == "__main__":
    main()

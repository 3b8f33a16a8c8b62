"""Mean latency and TTFT under load: the best policy against the InferMax solve's policy search (run on demand).

Usage::

    python -m tests.benchmarks.bench_online [--time-limit 30] [--scales 1,4,16] [--objectives latency,ttft]

For each rate scale X and objective, ``splitwise-conv-100`` with its arrivals divided by X (the same
instance as ``optsched solve splitwise-conv-100 --rate-scale X --problem infermax --objective OBJ
--time-limit S``) is solved; each line gives the best policy's mean latency and mean TTFT (seconds,
from replay), the solve's returned schedule's (replayed again here), where that schedule came from
(``extra.schedule_source``), how many configurations the policy search tried (and, for TTFT, what
the prefill-first schedules gave), the solve's wall time and the load average (1 min) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from optsched.instance import load_instance
from optsched.policies import policy_names, simulator_for
from optsched.problems.infermax.solve import prepare
from optsched.schedule import replay
from tests.support.solving import solver

solve = solver("infermax")


def run(scale: float, objective: str, time_limit: float) -> dict[str, object]:
    base = load_instance("splitwise-conv-100")
    inst = replace(
        base,
        name=f"{base.name}-rate{scale:g}",
        requests=tuple(replace(r, arrival=r.arrival / scale) for r in base.requests),
    )
    prepare()
    t0 = time.perf_counter()
    res = solve(inst, {"objective": objective, "time_limit": time_limit})
    wall = time.perf_counter() - t0
    values = res.extra["policy_values"]
    seeds = {k: v for k, v in values.items() if k in policy_names()}
    best_policy = min(seeds, key=seeds.get)
    policy = replay(inst, simulator_for(best_policy)(inst)).metrics
    found = replay(inst, res.schedule).metrics
    search = res.extra.get("scale", {}).get("online_search") or {}
    return {
        "scale": scale,
        "objective": objective,
        "time_limit": time_limit,
        "best_policy": best_policy,
        "policy_latency": None if policy is None else policy.mean_latency,
        "policy_ttft": None if policy is None else policy.mean_ttft,
        "solve_latency": found.mean_latency,
        "solve_ttft": found.mean_ttft,
        "source": res.extra.get("schedule_source"),
        "configurations": search.get("configurations"),
        "prefill_first": res.extra.get("scale", {}).get("prefill_first"),
        "wall": round(wall, 2),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--objectives", default="latency,ttft")
    args = ap.parse_args()
    for scale in (float(x) for x in args.scales.split(",")):
        for objective in args.objectives.split(","):
            print(json.dumps(run(scale, objective, args.time_limit)), flush=True)


if __name__ == "__main__":
    main()

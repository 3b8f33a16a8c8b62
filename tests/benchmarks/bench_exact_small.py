"""Exact InferMax solves of small instances with arrivals: how many are proven within the limit (run on demand).

Usage::

    python -m tests.benchmarks.bench_exact_small [--n 8] [--count 10] [--time-limit 60]
        [--objectives latency,ttft] [--family small|wide|random]

Instance ``k`` (seed k) of the ``small`` family: ``n`` requests with I, O uniform in 1..4, arrivals
uniform in {0, 0.003, 0.011} s (the first at 0), C = 6, P = 4, M = the largest request's I + O - 1
plus 2, R_max = 3, ``llama2-7b-a100``. Of the ``wide`` family: I uniform in 1..8, O in 1..6,
arrivals uniform in [0, 0.05] s (to 0.1 ms; the first at 0), C = P = 4,096, no KV or running limit,
``llama2-7b-h200``: every request may take any chunk of its prompt in any batch. Of the
``random`` family: a shape (I, O at most 4 and 4, 8 and 6, 12 and 3, 3 and 12, or 16 and 4), all
requests alike with probability 0.3 (else I and O uniform up to the shape's), each arrival 0,
uniform in [0, 0.03] s or 5 ms times its index, C in {4,096, 16, 8, the shape's I (at least 4)}, P
in {C, 8, 4} up to C, M none (twice as likely), the largest I + O - 1, that plus 4 or twice it,
R_max none (twice as likely), 2 or 4, and one of ``llama2-7b-h200``, ``llama2-7b-a100`` and
``llama2-70b-a100``. Each is solved
with ``solve(instance, objective=OBJ, time_limit=S)`` (the same as ``optsched solve FILE --problem
infermax --objective OBJ --time-limit S``); one JSON line per solve with its status, objective,
bound, wall time and the load average (1 min); the last line counts the proven optima per
objective.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from optsched.instance import Instance, parse_instance
from optsched.problems.infermax.solve import prepare
from tests.support.infermax import wide_instance
from tests.support.solving import solver

solve = solver("infermax")


def small_instance(seed: int, n: int) -> Instance:
    rng = random.Random(seed)
    reqs = [
        {
            "id": f"r{k}",
            "arrival": 0.0 if k == 0 else rng.choice([0.0, 0.003, 0.011]),
            "prompt_tokens": rng.randint(1, 4),
            "output_tokens": rng.randint(1, 4),
        }
        for k in range(n)
    ]
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    limits = {"token_budget": 6, "prefill_budget": 4, "kv_capacity": need + 2, "max_running": 3}
    data = {"name": f"small{n}-{seed}", "cost_model": "llama2-7b-a100", "limits": limits, "requests": reqs}
    return parse_instance(data, f"small{n}-{seed}")


def random_instance(seed: int, n: int) -> Instance:
    rng = random.Random(seed)
    imax, omax = rng.choice([(4, 4), (8, 6), (12, 3), (3, 12), (16, 4)])
    alike = rng.random() < 0.3
    first = (rng.randint(1, imax), rng.randint(1, omax))
    reqs = []
    for k in range(n):
        prompt, output = first if alike else (rng.randint(1, imax), rng.randint(1, omax))
        arrival = rng.choice([0.0, round(rng.uniform(0, 0.03), 4), 0.005 * k])
        reqs.append({"id": f"r{k}", "prompt_tokens": prompt, "output_tokens": output, "arrival": arrival})
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = rng.choice([4096, 16, 8, max(4, imax)])
    limits = {
        "token_budget": C,
        "prefill_budget": rng.choice([p for p in (C, 8, 4) if p <= C]),
        "kv_capacity": rng.choice([None, None, need, need + 4, 2 * need]),
        "max_running": rng.choice([None, None, 2, 4]),
    }
    model = rng.choice(["llama2-7b-h200", "llama2-7b-a100", "llama2-70b-a100"])
    data = {"name": f"random{n}-{seed}", "cost_model": model, "limits": limits, "requests": reqs}
    return parse_instance(data, f"random{n}-{seed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--objectives", default="latency,ttft")
    ap.add_argument("--family", choices=("small", "wide", "random"), default="small")
    args = ap.parse_args()
    make = {"small": small_instance, "wide": wide_instance, "random": random_instance}[args.family]
    prepare()
    proven: dict[str, int] = {}
    for objective in args.objectives.split(","):
        proven[objective] = 0
        for seed in range(args.count):
            inst = make(seed, args.n)
            t0 = time.perf_counter()
            res = solve(inst, {"objective": objective, "time_limit": args.time_limit})
            wall = time.perf_counter() - t0
            proven[objective] += res.status == "optimal"
            line = {
                "instance": inst.name,
                "objective": objective,
                "status": str(res.status),
                "objective_value": res.objective,
            }
            line |= {"bound": res.bound, "wall": round(wall, 2), "load": os.getloadavg()[0]}
            print(json.dumps(line), flush=True)
    summary = {"proven": proven, "count": args.count, "n": args.n, "time_limit": args.time_limit, "family": args.family}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

"""Aladdin test helpers: a small instance with its placement options, random requests, a random
heartbeat's placement problem with ongoing requests, the exact backends."""

from __future__ import annotations

import random

from optsched.instance import parse_instance
from optsched.problems.aladdin.models import AladdinModel
from optsched.problems.aladdin.placement import Job, PlacementProblem

SOLVERS = ("cpsat", "highs", "cbc")


def aladdin_instance(
    requests, *, kv=60, ttft=0.02, atgt=0.05, gamma=0.5, theta=1.0, max_workers=None, budget=100000, slack="paper"
):
    placement = {"kv_capacity": kv, "gamma": gamma, "theta": theta, "slack": slack}
    if max_workers is not None:
        placement["max_workers"] = max_workers
    return parse_instance({
        "name": "rand",
        "cost_model": {
            "layers": 1,
            "prefill": {"bias": 0.002, "per_token": 0.0005},
            "decode": {"bias": 0.02, "per_token": 0.002, "per_kv": 0.0002},
        },
        "limits": {"token_budget": budget, "kv_capacity": kv},
        "slo": {"ttft": ttft, "atgt": atgt},
        "placement": placement,
        "requests": requests,
    })


def random_requests(rng: random.Random, n: int, arrival: bool = False):
    return [
        {
            "id": f"r{k}",
            "arrival": round(rng.uniform(0, 3), 3) if arrival else 0.0,
            "prompt_tokens": rng.randint(1, 20),
            "output_tokens": rng.randint(1, 25),
        }
        for k in range(n)
    ]


def random_heartbeat(rng: random.Random, m: AladdinModel, n_workers: int, n_new: int) -> PlacementProblem:
    ongoing = []
    for w in range(n_workers):
        jobs = []
        for k in range(rng.randint(0, 3)):
            length = rng.randint(2, 20)
            g = rng.randint(1, length)
            jobs.append(Job(f"w{w}o{k}", rng.randint(1, 15), length, g, g * m.atgt * rng.uniform(0.3, 0.9)))
        ongoing.append(tuple(jobs))
    new = tuple(Job(f"n{k}", rng.randint(1, 15), rng.randint(1, 20)) for k in range(n_new))
    return PlacementProblem(m, tuple(ongoing), new)

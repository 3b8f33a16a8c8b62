"""G-maximisation test helpers: the paper's toy instances (Figs. 3-5) with their optima, small random
instances, a schedule's canonical form and the search's node after a prefix."""

import numpy as np

from optsched.instance import load_instance, parse_instance
from optsched.problems.gmax.problem import GmaxProblem
from tests.support.gmax_generate import random_gmax_instance
from tests.support.paths import INSTANCES

TOYS = {  # docs/gmax.md, toy examples: (instance, optimal batches, optimal G in req/s, start G)
    "fig3-slo-order": ([["J2"], ["J1"], ["J3"]], 3 / 2.9, 2 / 2.7),
    "fig4-batch-size": ([["J1", "J2"], ["J3"]], 3 / 1.8, 1 / 2.4),
    "fig5-defer-strict": ([["J2"], ["J1"], ["J3"]], 2 / 2.9, 1 / 2.7),
}


def toy(name: str) -> GmaxProblem:
    return GmaxProblem.from_instance(load_instance(INSTANCES / "static" / f"{name}.json"))


def canonical(problem, batches):
    return [sorted(problem.ids[i] if isinstance(i, int) else i for i in b) for b in batches]


def small_instance(seed: int) -> GmaxProblem:
    """N <= 7, B_max 1..4, SLOs drawn so that SLO attainment varies; memory capacity sometimes."""
    rng = np.random.default_rng(1000 + seed)
    n, bmax = int(rng.integers(2, 8)), int(rng.integers(1, 5))
    data = random_gmax_instance(n, seed, max_batch_size=bmax)
    for r in data["requests"]:
        r["output_tokens"] = int(rng.integers(10, 400))
        if r["task"] == "e2e":
            r["slo"] = {"e2e": float(rng.uniform(1.0, 12.0))}
        else:
            r["slo"] = {"ttft": float(rng.uniform(0.1, 6.0)), "tpot": float(rng.uniform(0.0165, 0.0185))}
    if seed % 3 == 0:
        data["memory"] = {"token_capacity": int(rng.integers(900, 2500))}
        for r in data["requests"]:
            r["prompt_tokens"] = min(r["prompt_tokens"], 800)
            r["output_tokens"] = min(r["output_tokens"], 100)
    return GmaxProblem.from_instance(parse_instance(data))


def prefix_node(p: GmaxProblem, prefix: list[list[int]], pi: np.ndarray, emin: np.ndarray) -> tuple:
    """The search's node (gmax/bnb.py, ``Search``) after the batches of ``prefix``: its
    on-time count, its part of t, the positions filled, the next start and the last batch's start."""
    from optsched.problems.gmax.suffix import on_time

    e, nreq = p.times.exec, p.n_requests
    n = t = start = last_start = 0.0
    q, rest = 0, (1 << nreq) - 1
    for batch in prefix:
        s = len(batch)
        dur = max(e[j, s - 1] for j in batch)
        q += s
        n += sum(on_time(p, j, start, s) for j in batch)
        t += sum(e[j, s - 1] for j in batch) + (nreq - q) * dur
        rest &= ~sum(1 << j for j in batch)
        last_start, start = start, start + dur
    left = [j for j in range(nreq) if rest >> j & 1]
    return (
        0.0,
        t + emin[left].sum(),
        rest,
        q,
        start,
        n,
        t,
        float(pi[left].sum()),
        float(emin[left].sum()),
        None if not prefix else (prefix[-1], None),
        last_start,
    )

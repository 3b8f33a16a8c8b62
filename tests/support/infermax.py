"""InferMax test helpers: tiny and scale instances, the solve as the tests run it, every policy's
schedule, the residency relaxation's point of a schedule and a search path's cost.

The tiny instances (N <= 3, I, O <= 4) are small enough for the exhaustive search of
:mod:`tests.support.infermax_bruteforce`; the scale instances are the benchmarks' (``bench_infermax
scale``).
"""

from __future__ import annotations

import random

import pytest

from optsched.instance import InstanceError, parse_instance
from optsched.policies import simulator_for
from optsched.policies.config import POLICY_CONFIGS
from optsched.problems.infermax import candidate_schedules
from optsched.problems.infermax.data import build_data
from optsched.problems.infermax.graph import Graph
from optsched.problems.infermax.model import InferMaxOptions
from optsched.result import replayed_objective
from optsched.schedule import Schedule, replay
from tests.support.infermax_bruteforce import exhaustive_makespan
from tests.support.solving import registered_solve

#: The relative tolerance of an optimum's agreement with the exhaustive search.
REL = 1e-6

PROFILES = ("llama2-7b-a100", "llama2-70b-a100")


def tiny_instance(seed: int, n_max: int = 3, arrivals: bool = False):
    """A random tiny instance: N <= n_max, I, O in 1..4, varied C, P, M, R_max and profile."""
    rng = random.Random(seed)
    n = rng.randint(1, n_max)
    reqs = []
    for i in range(n):
        reqs.append({
            "id": f"r{i}",
            "prompt_tokens": rng.randint(1, 4),
            "output_tokens": rng.randint(1, 4),
            "arrival": round(rng.choice([0.0, 0.0, 0.003, 0.011]), 3) if arrivals else 0.0,
        })
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    total = sum(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = rng.choice([3, 4, 6, 4096])
    P = rng.choice([p for p in (2, 3, 4, 4096) if p <= C])
    M = rng.choice([need, need + 1, max(need, total - 2), None])
    R = rng.choice([1, 2, None])
    return parse_instance(
        {
            "name": f"tiny-{seed}",
            "cost_model": PROFILES[seed % 2],
            "limits": {"token_budget": C, "prefill_budget": P, "kv_capacity": M, "max_running": R},
            "requests": reqs,
        },
        f"tiny-{seed}",
    )


def wide_instance(seed: int, n: int):
    """``n`` requests with I uniform in 1..8, O in 1..6, arrivals uniform in [0, 0.05] s (to 0.1 ms;
    the first at 0), ``llama2-7b-h200``, C = P = 4,096 and no KV or running limit: every request may
    take any chunk of its prompt in any batch, so the exact mean search's states have many batches."""
    rng = random.Random(seed)
    reqs = [
        {
            "id": f"r{k}",
            "arrival": 0.0 if k == 0 else round(rng.uniform(0.0, 0.05), 4),
            "prompt_tokens": rng.randint(1, 8),
            "output_tokens": rng.randint(1, 6),
        }
        for k in range(n)
    ]
    limits = {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": None, "max_running": None}
    data = {"name": f"wide{n}-{seed}", "cost_model": "llama2-7b-h200", "limits": limits, "requests": reqs}
    return parse_instance(data, f"wide{n}-{seed}")


def eight_staggered_requests() -> dict:
    """The instance JSON of eight requests of 8 prompt and 8 output tokens arriving 4 ms apart, no
    limits: the exact TTFT search finds its optimum in a second through states of thousands of
    batches, which the path written out must not list again."""
    reqs = [{"id": f"r{i}", "prompt_tokens": 8, "output_tokens": 8, "arrival": 0.004 * i} for i in range(8)]
    return {"name": "staggered8", "cost_model": "llama2-7b-h200", "requests": reqs}


def eight_wide_requests() -> dict:
    """The instance JSON of eight requests with prompts of 1 to 8 tokens, arrivals within 50 ms and
    no limits: the exact mean search's states have hundreds of thousands of batches (time limits)."""
    prompts, outputs = (5, 3, 4, 5, 6, 2, 1, 5), (3, 5, 5, 2, 2, 5, 2, 5)
    arrivals = (0.0, 0.0423, 0.0067, 0.0444, 0.0077, 0.0285, 0.0459, 0.0188)
    reqs = [
        {"id": f"r{i}", "prompt_tokens": p, "output_tokens": o, "arrival": a}
        for i, (p, o, a) in enumerate(zip(prompts, outputs, arrivals))
    ]
    return {"name": "wide8", "cost_model": "llama2-7b-h200", "requests": reqs}


def solve(inst, **opts):
    """The InferMax solve; the model is always built (no early exit when a policy meets a bound)."""
    return registered_solve("infermax", inst, {"threads": 1, "early_exit": False, **opts})


def solve_mip(inst, **opts):
    """Gurobi when its (restricted) licence takes the model, else HiGHS."""
    res = solve(inst, solver="gurobi", **opts)
    if res.status == "unsupported":
        res = solve(inst, solver="highs", **opts)
    return res


def policy_schedules(inst) -> dict[str, Schedule]:
    """Every unified-scheduler policy's schedule of ``inst``, by policy name."""
    out = {}
    for name in sorted(POLICY_CONFIGS):
        try:
            out[name] = simulator_for(name)(inst)
        except InstanceError:  # a policy of another formulation that refuses this instance
            continue
    return out


def policy_values(inst, objective: str = "makespan", evictions: bool = True) -> dict[str, float]:
    out = {}
    for name, sched in policy_schedules(inst).items():
        value, rep = replayed_objective(inst, sched, objective)
        if evictions or rep.metrics.evictions == 0:
            out[name] = value
    return out


def check_result(inst, res, expected: float | None, objective: str = "makespan") -> None:
    assert res.schedule is not None
    rep = replay(inst, res.schedule)
    assert rep.feasible, rep.violations
    assert res.objective == pytest.approx(replayed_objective(inst, res.schedule, objective)[0], rel=1e-12)
    if expected is not None:
        assert res.status == "optimal", res.extra
        assert res.objective == pytest.approx(expected, rel=REL)
    assert res.bound is not None and res.bound <= res.objective * (1 + 1e-9)


#: Inline cost models where the bound's unusual branches matter: a large quadratic prefill term
#: (chunking pays), decode dearer than a refill, prefill bias below decode bias.
ADVERSARIAL_COSTS = [
    {
        "layers": 2,
        "base": 1e-3,
        "per_token": 1e-5,
        "prefill": {"bias": 1e-4, "per_token_sq": 1e-4},
        "decode": {"bias": 1e-3, "per_kv": 1e-6},
    },
    {"base": 1e-4, "prefill": {"per_token": 1e-6}, "decode": {"bias": 5e-2, "per_token": 1e-2, "per_kv": 1e-2}},
]


def scale_instance(n: int, seed: int, memory_share: float = 0.4):
    """N random requests (I, O in 1..16), M = ``memory_share`` of their total KV need (at least
    the largest request's), C = P = 64, llama2-7b-a100."""
    rng = random.Random(seed)
    reqs = [{"id": f"r{k}", "prompt_tokens": rng.randint(1, 16), "output_tokens": rng.randint(1, 16)} for k in range(n)]
    need = sum(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    big = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    return parse_instance(
        {
            "name": f"scale-n{n}-s{seed}" + ("" if memory_share == 0.4 else f"-m{memory_share:g}"),
            "cost_model": "llama2-7b-a100",
            "limits": {"token_budget": 64, "prefill_budget": 64, "kv_capacity": max(big, int(memory_share * need))},
            "requests": reqs,
        },
        f"scale-n{n}",
    )


def proven_horizon(inst) -> int:
    """The proven J of the makespan model for the best candidate schedule (as the solve derives it)."""
    opts = InferMaxOptions()
    cands = candidate_schedules(inst, opts)
    best = min(replayed_objective(inst, s, "makespan")[0] for s in cands.values())
    data = build_data(inst, opts, best, best, 1)
    assert data.horizon_proven
    return data.J


def relaxation_point(inst, sched: Schedule) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """x, s, r of the module docstring's proof for a schedule, per request and batch with items.

    Written from the contract (state m, current prompt I, as in replay): an item of a request with
    m < I is a prefill chunk and generates when m reaches I; otherwise it is a decode step; an
    eviction of a decode-phase request sets I := m + 1, then m := 0; a request is released after
    its last token. Residents: requests generating in the batch and idle decode-phase holders.
    """
    reqs = {r.id: r for r in inst.requests}
    m = dict.fromkeys(reqs, 0)
    prompt = {rid: r.prompt_tokens for rid, r in reqs.items()}
    gen = dict.fromkeys(reqs, 0)
    index = {rid: i for i, rid in enumerate(reqs)}
    cols: list[tuple[dict[str, int], dict[str, int], dict[str, int]]] = []
    for batch in sched.batches:
        for rid in batch.evict:
            if m[rid] >= prompt[rid]:
                prompt[rid] = m[rid] + 1
            m[rid] = 0
        if not batch.items:
            continue
        x, s, r = {}, {}, {}
        tokens = {it.id: it.tokens for it in batch.items}
        for rid, req in reqs.items():
            if rid in tokens:
                if m[rid] < prompt[rid]:  # prefill chunk
                    m[rid] += tokens[rid]
                    if m[rid] == prompt[rid]:
                        x[rid] = s[rid] = r[rid] = 1
                else:  # decode step
                    m[rid] += 1
                    x[rid] = r[rid] = 1
                gen[rid] += x.get(rid, 0)
            elif 0 < m[rid] and m[rid] >= prompt[rid] and gen[rid] < req.output_tokens:
                r[rid] = 1  # idle decode-phase resident
            if gen[rid] == req.output_tokens:
                m[rid] = 0
        cols.append((x, s, r))
    n = len(reqs)
    out = tuple([[0] * len(cols) for _ in range(n)] for _ in range(3))
    for j, col in enumerate(cols):
        for k, values in enumerate(col):
            for rid, v in values.items():
                out[k][index[rid]][j] = v
    return out  # type: ignore[return-value]


def schedules(inst) -> dict[str, Schedule]:
    """The exhaustive optima (with and without evictions) and every policy's schedule."""
    out = {f"exhaustive-evict={ev}": exhaustive_makespan(inst, evict=ev)[1] for ev in (True, False)}
    return {**out, **policy_schedules(inst)}


#: Horizons above this are skipped (the second adversarial model's near-free batches prove only
#: J ~ 1700, a model too large to solve exactly in a unit test; the relaxation's point test,
#: tests/problems/infermax/test_infermax_relax.py, covers it).
MAX_TEST_HORIZON = 60


def path_cost(graph: Graph, path: list) -> int:
    """The cost of ``path`` along the graph's edges (each step must be an edge), start to goal."""
    assert path[0] == (tuple([0] * graph.N), 0) and path[-1] == (tuple(int(o) for o in graph.O), 0)
    total = 0
    for node, nxt in zip(path, path[1:]):
        costs = [c for child, c in graph.edges(*node) if child == nxt]
        assert costs, (node, nxt)
        total += min(costs)
    return total

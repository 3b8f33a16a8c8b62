"""Offline request-to-client assignment of the Hybrid paper, Eqs. (26)-(30), as P||Cmax.

Model (paper Sec. IV-B; docs/hybrid.md, O1-O2). Requests ``i`` with processing times ``T_i`` go to ``J`` identical
clients::

    (26)  min  t^max
    (27)  sum_j x_ij = 1                     for every request i
    (28)  sum_i T_i x_ij <= t_j <= t^max     for every client j
    (29)  x_ij in {0, 1};  (30) t_j, t^max >= 0

This is identical-machine makespan minimisation (P||Cmax), which the paper calls "bin packing". Times are
integers here: ``T_i = tau_d * p_i`` with ``p_i`` decode rounds (docs/hybrid.md, O1 and M2), so the problem is
solved on ``p_i`` and the objective reported in seconds is ``tau_d * C*``. ``p_i`` is ``N^d_i - 1``
(``lengths='rounds'``, the contract's semantics: the prefill emits the first token), ``N^d_i``
(``lengths='paper'``, the paper's T_i) or the predicted output length minus one (``'predicted'``,
docs/hybrid.md, M11; falls back to the true length where no prediction is given).

Methods:

- lower bounds: ``ceil(sum p / J)``, ``max p`` and, for k >= 1, the k+1 smallest of the ``kJ + 1``
  largest jobs (some client receives k+1 of them);
- heuristics: LPT (longest processing time first), then a local search that moves or swaps jobs between
  the most loaded client and every other client while that lowers the most loaded client's load;
- re-packing (``method='auto'``): a client above the lower bound and one below it split their jobs
  exactly (subset-sum DP) so that the second is filled up to the bound; then, on models too large for
  CP-SAT as a whole, a large-neighbourhood search where CP-SAT re-packs a most loaded client with a few
  others below the current maximum, until the lower bound is met or 80 % of the time limit is spent;
- exact: when the heuristic meets the lower bound the assignment is proven optimal; otherwise CP-SAT
  (``method='cpsat'``; the heuristic as a hint, symmetry breaking "job i, in decreasing order of p, goes to
  a client of index <= i") or the MIP (26)-(30) through PuLP (HiGHS, CBC, Gurobi) proves or bounds it.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ...budget import TimeBudget
from ...cpsat_solver import run_model
from ...instance import Instance
from ...mipsolvers import pulp_solver, solver_budget
from ...result import Status
from .timing import decode_rounds

__all__ = [
    "Assignment",
    "cpsat_pcmax",
    "local_search",
    "lpt",
    "mip_pcmax",
    "pcmax_lower_bound",
    "processing_times",
    "solve_pcmax",
]

LENGTHS = ("rounds", "paper", "predicted")
#: Above this many x_ij, ``method='auto'`` does not build the full CP-SAT model (it would not help in time).
CPSAT_FULL_MAX = 50_000


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """A P||Cmax solution: ``client[i]`` for every job, the makespan and how it was proven.

    Attributes
    ----------
    client
        Client index of every job (input order).
    makespan
        Max client load (same unit as the processing times).
    bound
        Best proven lower bound on the optimum.
    status
        ``OPTIMAL`` when ``makespan == bound``, else ``FEASIBLE`` / ``TIME_LIMIT``.
    method
        What produced the assignment.
    """

    client: tuple[int, ...]
    makespan: int
    bound: int
    status: Status
    method: str


def processing_times(instance: Instance, lengths: str = "rounds") -> list[int]:
    """The ``p_i`` of every request (see module docstring for ``lengths``)."""
    if lengths not in LENGTHS:
        raise ValueError(f"unknown lengths {lengths!r} (known: {', '.join(LENGTHS)})")
    out = []
    for r in instance.requests:
        if lengths == "paper":
            out.append(r.output_tokens)
        elif lengths == "predicted" and r.predicted_output_tokens is not None:
            out.append(decode_rounds(max(1, r.predicted_output_tokens)))
        else:
            out.append(decode_rounds(r.output_tokens))
    return out


def loads_of(p: Sequence[int], client: Sequence[int], m: int) -> list[int]:
    """Per-client load of an assignment."""
    loads = [0] * m
    for pi, j in zip(p, client):
        loads[j] += pi
    return loads


def pcmax_lower_bound(p: Sequence[int], m: int) -> int:
    """max(ceil(sum/m), max p, max_k sum of the k+1 smallest among the kJ+1 largest jobs)."""
    if not p:
        return 0
    srt = sorted(p, reverse=True)
    best = max(-(-sum(srt) // m), srt[0])
    k = 1
    while k * m < len(srt):
        top = srt[: k * m + 1]
        best = max(best, sum(top[-(k + 1) :]))
        k += 1
    return best


def lpt(p: Sequence[int], m: int) -> list[int]:
    """Longest processing time first: each job, longest first, to the least loaded client."""
    heap = [(0, j) for j in range(m)]
    client = [0] * len(p)
    for i in sorted(range(len(p)), key=lambda i: (-p[i], i)):
        load, j = heapq.heappop(heap)
        client[i] = j
        heapq.heappush(heap, (load + p[i], j))
    return client


def local_search(
    p: Sequence[int], m: int, client: Sequence[int], target: int = 0, max_iter: int = 100_000
) -> list[int]:
    """Lower the most loaded client's load by single moves or pairwise swaps until none helps.

    A move (job ``i`` of the most loaded client ``a`` to client ``b``) or swap (``i`` of ``a`` with ``k``
    of ``b``, ``p_i > p_k``) is taken when it leaves both clients below ``a``'s current load; among those
    the one with the smallest resulting max(load_a, load_b) is taken. Stops at ``target`` (a lower bound).
    """
    client = list(client)
    loads = loads_of(p, client, m)
    jobs: list[list[int]] = [[] for _ in range(m)]
    for i, j in enumerate(client):
        jobs[j].append(i)
    for _ in range(max_iter):
        a = max(range(m), key=lambda j: (loads[j], -j))
        la = loads[a]
        if la <= target:
            break
        best: tuple[int, int, int, int] | None = None  # (new max, i, b, k or -1)
        for b in range(m):
            if b == a:
                continue
            lb = loads[b]
            gap = la - lb
            if gap <= 1:
                continue
            for i in jobs[a]:
                pi = p[i]
                if pi < gap:
                    cand = max(la - pi, lb + pi)
                    if best is None or cand < best[0]:
                        best = (cand, i, b, -1)
                for k in jobs[b]:
                    d = pi - p[k]
                    if 0 < d < gap:
                        cand = max(la - d, lb + d)
                        if best is None or cand < best[0]:
                            best = (cand, i, b, k)
        if best is None:
            break
        _, i, b, k = best
        jobs[a].remove(i)
        jobs[b].append(i)
        client[i] = b
        loads[a] -= p[i]
        loads[b] += p[i]
        if k >= 0:
            jobs[b].remove(k)
            jobs[a].append(k)
            client[k] = a
            loads[b] -= p[k]
            loads[a] += p[k]
    return client


def subset_below(items: Sequence[int], sizes: Sequence[int], cap: int) -> list[int]:
    """A subset of ``items`` of largest total size <= ``cap`` (exact subset-sum DP on integer bitsets)."""
    reach = [1]
    mask = (1 << (cap + 1)) - 1
    for i in items:
        reach.append((reach[-1] | (reach[-1] << sizes[i])) & mask)
    total = reach[-1].bit_length() - 1
    chosen = []
    for k in range(len(items), 0, -1):
        if not (reach[k - 1] >> total) & 1:
            chosen.append(items[k - 1])
            total -= sizes[items[k - 1]]
    return chosen


def repack_pairs(p: Sequence[int], m: int, client: Sequence[int], target: int) -> list[int]:
    """Move load from clients above ``target`` to clients below it by exact two-client re-packing.

    For a client ``a`` above the target and a client ``b`` below it (most slack first), their jobs are
    split so that ``b`` gets the largest subset that fits under ``target`` (subset-sum DP) and ``a`` the
    rest; taken when ``a``'s load drops. Each step either brings ``a`` to the target or fills ``b``.
    """
    client = list(client)
    loads = loads_of(p, client, m)
    jobs: list[list[int]] = [[] for _ in range(m)]
    for i, j in enumerate(client):
        jobs[j].append(i)
    changed = True
    while changed:
        changed = False
        for a in sorted((j for j in range(m) if loads[j] > target), key=lambda j: -loads[j]):
            for b in sorted((j for j in range(m) if loads[j] < target), key=lambda j: loads[j]):
                if loads[a] <= target:
                    break
                pool = jobs[a] + jobs[b]
                to_b = subset_below(pool, p, target)
                new_b = sum(p[i] for i in to_b)
                new_a = loads[a] + loads[b] - new_b
                if new_a >= loads[a]:
                    continue
                in_b = set(to_b)
                jobs[a] = [i for i in pool if i not in in_b]
                jobs[b] = list(to_b)
                for i in jobs[a]:
                    client[i] = a
                for i in jobs[b]:
                    client[i] = b
                loads[a], loads[b] = new_a, new_b
                changed = True
    return client


def lns(
    p: Sequence[int], m: int, client: Sequence[int], target: int, budget: TimeBudget, size: int = 8, seed: int = 0
) -> list[int]:
    """Large-neighbourhood search: re-pack a most loaded client and ``size - 1`` others exactly (CP-SAT).

    Each step takes a random client at the current maximum and ``size - 1`` random clients below
    ``target`` (any others when too few are below), and asks CP-SAT to re-assign all their jobs with every
    load below the current maximum (then as balanced as possible). Every accepted step removes a client from the
    maximum; stops at ``target`` or when ``budget`` expires.
    """
    from ortools.sat.python import cp_model

    rng = random.Random(seed)
    client = list(client)
    loads = loads_of(p, client, m)
    size = min(size, m)
    while not budget.expired() and size > 1:
        top = max(loads)
        if top <= target:
            break
        a = rng.choice([j for j in range(m) if loads[j] == top])
        below = [j for j in range(m) if loads[j] < target]
        others = below if len(below) >= size - 1 else [j for j in range(m) if j != a]
        group = [a] + rng.sample(others, size - 1)
        jobs = [i for i in range(len(p)) if client[i] in group]
        cap = top - 1
        if sum(p[i] for i in jobs) > cap * len(group):
            continue
        model = cp_model.CpModel()
        x = {(i, k): model.NewBoolVar("") for i in jobs for k in range(len(group))}
        for i in jobs:
            model.AddExactlyOne(x[i, k] for k in range(len(group)))
        peak = model.NewIntVar(0, cap, "peak")
        for k in range(len(group)):
            model.Add(sum(p[i] * x[i, k] for i in jobs) <= peak)
        model.Minimize(peak)
        run = run_model(model, budget=budget.within(0.2))
        if not run.found:
            continue
        for i in jobs:
            k = next(k for k in range(len(group)) if run.value(x[i, k]))
            client[i] = group[k]
        loads = loads_of(p, client, m)
    return client


def cpsat_pcmax(
    p: Sequence[int], m: int, hint: Sequence[int] | None, lower: int, budget: TimeBudget, threads: int | None = None
) -> Assignment:
    """P||Cmax (26)-(30) in CP-SAT with symmetry breaking; proves optimality or returns the best found.

    ``budget`` covers building too; a model not built in time is not solved (no assignment,
    value -1, bound ``lower``), like a search that finds none.
    """
    from ortools.sat.python import cp_model

    stopped = Assignment(client=tuple(hint or ()), makespan=-1, bound=lower, status=Status.TIME_LIMIT, method="cpsat")
    n = len(p)
    order = sorted(range(n), key=lambda i: (-p[i], i))
    model = cp_model.CpModel()
    ub = sum(p)
    x = {}
    for rank, i in enumerate(order):
        if budget.expired():
            return stopped
        for j in range(min(m, rank + 1)):  # symmetry breaking: the rank-th longest job on a client <= rank
            x[i, j] = model.NewBoolVar(f"x_{i}_{j}")
        model.AddExactlyOne(x[i, j] for j in range(min(m, rank + 1)))
    cmax = model.NewIntVar(lower, ub, "cmax")
    for j in range(m):
        if budget.expired():
            return stopped
        model.Add(sum(p[i] * x[i, j] for i in range(n) if (i, j) in x) <= cmax)
    model.Minimize(cmax)
    if hint is not None:
        canon = canonical_labels(hint, order)
        for (i, j), var in x.items():
            model.AddHint(var, canon[i] == j)
    run = run_model(model, budget=budget, workers=threads or 2)
    if not run.found:
        bound = max(lower, int(math.ceil(run.bound - 1e-9))) if run.status != Status.UNKNOWN else lower
        return Assignment(client=stopped.client, makespan=-1, bound=bound, status=Status.TIME_LIMIT, method="cpsat")
    client = [next(j for j in range(m) if (i, j) in x and run.value(x[i, j])) for i in range(n)]
    value = max(loads_of(p, client, m))
    bound = max(lower, int(math.ceil(run.bound - 1e-9)))
    status = Status.OPTIMAL if run.status == Status.OPTIMAL or value == bound else Status.TIME_LIMIT
    return Assignment(client=tuple(client), makespan=value, bound=min(bound, value), status=status, method="cpsat")


def canonical_labels(client: Sequence[int], order: Sequence[int]) -> list[int]:
    """Relabel clients by first use along ``order`` (satisfies the "job of rank r on client <= r" rule)."""
    label: dict[int, int] = {}
    out = [0] * len(client)
    for i in order:
        out[i] = label.setdefault(client[i], len(label))
    return out


def mip_pcmax(
    p: Sequence[int], m: int, solver: str, budget: TimeBudget, lower: int, threads: int | None = None
) -> Assignment:
    """The MIP (26)-(30) through PuLP (``highs``, ``cbc`` or ``gurobi``), with the same symmetry breaking.

    ``budget`` covers building and the hand-over to the solver too (PuLP needs minutes for 1,319
    jobs on 200 clients; :func:`optsched.mipsolvers.solver_budget`); a model not built or not
    handed over in time, or a search that finds no assignment, returns none (value -1, bound ``lower``).
    """
    import pulp

    start = time.perf_counter()
    stopped = Assignment(client=(), makespan=-1, bound=lower, status=Status.TIME_LIMIT, method=f"mip-{solver}")
    n = len(p)
    order = sorted(range(n), key=lambda i: (-p[i], i))
    prob = pulp.LpProblem("pcmax", pulp.LpMinimize)
    x = {}
    for rank, i in enumerate(order):
        if budget.expired():
            return stopped
        for j in range(min(m, rank + 1)):
            x[i, j] = prob.add_variable(f"x_{i}_{j}", cat="Binary")
    cmax = prob.add_variable("tmax", lowBound=lower)
    prob += cmax
    for i in range(n):
        if budget.expired():
            return stopped
        prob += pulp.lpSum(x[i, j] for j in range(m) if (i, j) in x) == 1
    for j in range(m):
        if budget.expired():
            return stopped
        prob += pulp.lpSum(p[i] * x[i, j] for i in range(n) if (i, j) in x) <= cmax
    solve_by = solver_budget(budget, time.perf_counter() - start)
    if solve_by.expired():
        return stopped
    prob.solve(pulp_solver(solver, budget=solve_by, threads=threads))
    if any(v.value() is None for v in x.values()) or prob.sol_status not in (
        pulp.LpSolutionOptimal,
        pulp.LpSolutionIntegerFeasible,
    ):
        return stopped
    client = [max((j for j in range(m) if (i, j) in x), key=lambda j: x[i, j].value()) for i in range(n)]
    value = max(loads_of(p, client, m))
    bound = value if prob.sol_status == pulp.LpSolutionOptimal else lower
    status = Status.OPTIMAL if value == bound else Status.TIME_LIMIT
    return Assignment(client=tuple(client), makespan=value, bound=bound, status=status, method=f"mip-{solver}")


#: Methods of :func:`solve_pcmax`.
PCMAX_METHODS = ("auto", "lpt", "local", "cpsat", "mip")


#: The time of :func:`solve_pcmax` called without a budget, in seconds.
PCMAX_TIME = 60.0


def solve_pcmax(
    p: Sequence[int],
    m: int,
    method: str = "auto",
    budget: TimeBudget | None = None,
    solver: str = "highs",
    threads: int | None = None,
) -> Assignment:
    """Solve P||Cmax on integer times ``p`` with ``m`` clients.

    Parameters
    ----------
    budget
        The solve's time (None: :data:`PCMAX_TIME` seconds from now).
    method
        ``auto`` (LPT + local search + re-packing + LNS; proven optimal when they meet the lower bound, else
        CP-SAT from that hint when the model has at most :data:`CPSAT_FULL_MAX` variables), ``lpt``, ``local``
        (heuristics only, with the lower bound), ``cpsat`` or ``mip``.
    solver
        MIP backend for ``method='mip'``.
    """
    if m < 1:
        raise ValueError("P||Cmax needs at least one client")
    lower = pcmax_lower_bound(p, m)
    if not p:
        return Assignment(client=(), makespan=0, bound=0, status=Status.OPTIMAL, method=method)
    budget = budget if budget is not None else TimeBudget.of(PCMAX_TIME)
    client = lpt(p, m)
    name = "lpt"
    if method in ("auto", "local", "cpsat"):
        client = local_search(p, m, client, target=lower)
        name = "lpt+local"
    if method == "auto" and max(loads_of(p, client, m)) > lower:
        client = repack_pairs(p, m, client, lower)
        name = "lpt+local+repack"
    large = len(p) * min(m, len(p)) > CPSAT_FULL_MAX
    if method == "auto" and large and max(loads_of(p, client, m)) > lower:
        client = lns(p, m, client, lower, budget.part(0.8), size=4)
        name = "lpt+local+repack+lns"
    value = max(loads_of(p, client, m))
    if method in ("lpt", "local") or (method == "auto" and (value == lower or large)):
        status = Status.OPTIMAL if value == lower else Status.FEASIBLE
        return Assignment(client=tuple(client), makespan=value, bound=lower, status=status, method=name)
    if method in ("auto", "cpsat"):
        found = cpsat_pcmax(p, m, client, lower, budget, threads)
    elif method == "mip":
        found = mip_pcmax(p, m, solver, budget, lower, threads)
    else:
        raise ValueError(f"unknown method {method!r} (known: {', '.join(PCMAX_METHODS)})")
    if found.makespan < 0 or found.makespan > value:  # a time-limited search keeps the heuristic's incumbent
        status = Status.OPTIMAL if value == found.bound else found.status
        return Assignment(client=tuple(client), makespan=value, bound=found.bound, status=status, method=name)
    return found

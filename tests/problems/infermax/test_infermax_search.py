"""Exact search of the residency relaxation (optsched/problems/infermax/search.py).

- Every schedule that replays cleanly (exhaustive optima with and without evictions, every policy;
  tiny instances and two adversarial cost models) is a path of the search's graph, batch by batch
  among the edges the search generates (or a path that keeps more residents, where the search drops
  evictions of residents able to idle), of cost at most its makespan less W; along it the estimate
  h never exceeds the cost still to come (admissible).
- A* finds exactly the shortest path of a plain Dijkstra over the same edges.
- The search's optimum never exceeds the exhaustive optimum nor the CP-SAT relaxation's optimum, and
  its path replays as a schedule no better than the optimum.
- On scale instances (I, O <= 16) it solves N = 3 and 4 and its path replays within 1e-4 of its bound.
- Known paths prune soundly: A* below the optimum finds nothing, just above it finds the optimum;
  beam searches return paths of the graph at their stated cost, never below the optimum.
- Where every fill fits P and C whole, beam paths hold P and C and their schedules replay, also when
  the shortest path does not.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from dataclasses import replace

import pytest

from optsched.bounds import request_work
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.instance import parse_instance
from optsched.problems.infermax import tables
from optsched.problems.infermax.astar import EMPTY, GOAL, Run
from optsched.problems.infermax.graph import PATTERN_ENTRIES, PATTERN_SIZE, Graph, Node
from optsched.problems.infermax.relax import UNBOUNDED, UNIT, relaxation_bound
from optsched.problems.infermax.residency import candidate_rank
from optsched.problems.infermax.search import beam_search, path_schedule, relaxation_search
from optsched.problems.infermax.tables import LARGEST_TABLE
from optsched.result import Status, replayed_objective
from optsched.schedule import replay
from tests.support.infermax import (
    ADVERSARIAL_COSTS,
    MAX_TEST_HORIZON,
    path_cost,
    policy_schedules,
    proven_horizon,
    relaxation_point,
    scale_instance,
    schedules,
    tiny_instance,
)
from tests.support.infermax_bruteforce import exhaustive_makespan


def instances(seed: int) -> list:
    """The tiny instance of ``seed`` and, for seeds below 12, the same under the adversarial costs."""
    base = tiny_instance(seed)
    costs = ADVERSARIAL_COSTS if seed < 12 else []
    return [base] + [parse_instance({**base.to_dict(), "cost_model": c}, f"adv-{seed}") for c in costs]


def path_of(inst, sched) -> list[tuple[tuple[tuple[int, ...], int], int]]:
    """The schedule's relaxation point (written from the contract in test_infermax_relax) as a path:
    its batches with a generated token, each as (node after it, its cost among the search's edges).

    The search drops an edge that evicts a resident able to idle instead (its sibling keeps one more
    resident at the same cost), so the path may keep more residents than the point: each step goes to
    the cheapest edge whose node has the point's G and at least its residents (the module
    docstring's dominance: from a node with more residents every edge has a twin of no greater cost).
    """
    graph = Graph(inst)
    x, s, r = relaxation_point(inst, sched)
    N = len(inst.requests)
    node = (tuple([0] * N), 0)
    out = []
    for j in range(len(x[0]) if N else 0):
        if not any(x[i][j] for i in range(N)):
            continue
        G = tuple(node[0][i] + x[i][j] for i in range(N))
        res = sum(1 << i for i in range(N) if r[i][j] and G[i] < graph.O[i])
        steps = [(c, nxt) for nxt, c in graph.edges(*node) if nxt[0] == G and nxt[1] & res == res]
        assert steps, (sched.meta, j, node, (G, res))
        cost, node = min(steps)
        out.append((node, cost))
    assert node[0] == tuple(graph.O)
    return out


def proper_subsets(n: int) -> list[tuple[int, ...]]:
    """Every pattern of some but not all of n requests."""
    return [sub for k in range(1, n) for sub in itertools.combinations(range(n), k)]


@pytest.mark.parametrize("seed", range(0, 32, 3))
def test_every_legal_schedule_is_a_path_with_admissible_estimates(seed: int) -> None:
    """Also with every pattern of some of the requests tabulated (the estimate's largest term)."""
    for inst in instances(seed):
        graph = Graph(inst)
        graph.add_patterns(proper_subsets(graph.N))
        work = math.fsum(request_work(inst))
        for name, sched in schedules(inst).items():
            path = path_of(inst, sched)
            total = sum(c for _, c in path)
            assert work + total * UNIT <= replayed_objective(inst, sched, "makespan")[0] * (1 + 1e-9), name
            to_go = total
            start = (tuple([0] * len(inst.requests)), 0)
            for node, cost in [(start, 0)] + path:
                to_go -= cost
                assert graph.estimate(*node) <= to_go, (name, node)


@pytest.mark.parametrize("seed", range(32))
def test_search_below_exhaustive_optimum_and_relaxation(seed: int) -> None:
    for inst in instances(seed):
        best = exhaustive_makespan(inst, evict=True)[0]
        res = relaxation_search(inst)
        assert res.status == Status.OPTIMAL
        assert res.bound <= best * (1 + 1e-9)
        rep = replay(inst, res.schedule)  # the path as a schedule: never below the optimum
        if rep.feasible:
            assert rep.metrics.makespan >= best * (1 - 1e-9)
        J = proven_horizon(inst)
        if J <= MAX_TEST_HORIZON:
            assert res.bound <= relaxation_bound(inst, J, threads=1).bound * (1 + 1e-12)


def shortest_path(graph: Graph) -> int | None:
    """Plain Dijkstra over the graph's edges, start to goal (no estimate, no dominance of nodes)."""
    start = (tuple([0] * graph.N), 0)
    goal = (tuple(int(o) for o in graph.O), 0)
    dist, heap = {start: 0}, [(0, start)]
    while heap:
        d, node = heapq.heappop(heap)
        if node == goal:
            return d
        if d > dist[node]:
            continue
        for nxt, c in graph.edges(*node):
            if d + c < dist.get(nxt, UNBOUNDED):
                dist[nxt] = d + c
                heapq.heappush(heap, (d + c, nxt))
    return None


@pytest.mark.parametrize("seed", range(0, 32, 2))
def test_search_equals_plain_shortest_path(seed: int) -> None:
    """A* (estimate, beam paths, pruning, dominated nodes dropped) finds exactly Dijkstra's shortest
    path over the same edges, on the tiny instances and on scale instances of 3 requests (seeds below
    8)."""
    for inst in instances(seed) + ([scale_instance(3, seed // 2)] if seed < 8 else []):
        graph = Graph(inst)
        res = relaxation_search(inst)
        assert res.status == Status.OPTIMAL
        work = math.fsum(request_work(inst))
        assert res.bound == pytest.approx(work + shortest_path(graph) * UNIT, rel=1e-12, abs=0)


def pattern_instance(inst, members: tuple[int, ...]):
    """The instance of the requests ``members`` of ``inst`` alone (same limits and costs)."""
    data = inst.to_dict()
    return parse_instance({**data, "requests": [data["requests"][i] for i in members]}, "pattern")


def least_costs_to_the_goal(graph: Graph) -> dict[Node, int]:
    """The least cost from every node to the goal over the graph's edges, by relaxing every edge
    until nothing changes (Bellman-Ford, toward the goal); a node without a path is left out."""
    nodes = [
        (G, res)
        for G in itertools.product(*(range(int(o) + 1) for o in graph.O))
        for res in range(1 << graph.N)
        if all(0 < G[i] < graph.O[i] for i in range(graph.N) if res >> i & 1)
    ]
    edges = {node: graph.edges(*node) for node in nodes}
    least = {(tuple(int(o) for o in graph.O), 0): 0}
    changed = True
    while changed:
        changed = False
        for node in nodes:
            for nxt, c in edges[node]:
                if nxt in least and c + least[nxt] < least.get(node, UNBOUNDED):
                    least[node] = c + least[nxt]
                    changed = True
    return least


@pytest.mark.parametrize("seed", range(0, 32, 4))
def test_pattern_tables_are_least_costs_to_the_goal(seed: int) -> None:
    """Every entry of a pattern's table at a node of the pattern's own graph is the least cost from
    there to the goal over that graph with every edge (no path: UNBOUNDED); the estimate with the
    tables never exceeds the full graph's least cost from the start (tiny instances with every
    pattern, and scale N = 4 with its patterns of two and three requests)."""
    for inst in instances(seed)[:2] + [scale_instance(4, seed // 4)]:
        graph = Graph(inst)
        patterns = proper_subsets(graph.N) if graph.N < 4 else [(0, 2), (1, 3), (0, 1, 3)]
        graph.add_patterns(patterns)
        rows, tables = graph.patterns
        for row, members in zip(rows, patterns):
            least = least_costs_to_the_goal(Graph(pattern_instance(inst, members), drop_dominated=False))
            for G in itertools.product(*(range(int(graph.O[i]) + 1) for i in members)):
                partial = [j for j, g in enumerate(G) if 0 < g < graph.O[members[j]]]
                for bits in itertools.product((0, 1), repeat=len(partial)):
                    res = sum(b << j for b, j in zip(bits, partial))
                    held = [graph.I[i] + g - 1 for j, (i, g) in enumerate(zip(members, G)) if res >> j & 1]
                    if sum(held) > graph.limits[0] or len(held) > graph.limits[2]:
                        continue  # not a node: residents beyond M or R_max
                    index = row[0] + sum(g * row[1 + i] for g, i in zip(G, members))
                    index += sum(row[1 + graph.N + i] for j, i in enumerate(members) if res >> j & 1)
                    assert tables[index] == least.get((G, res), UNBOUNDED), (members, G, res)
        assert graph.estimate(tuple([0] * graph.N), 0) <= shortest_path(graph)


@pytest.mark.parametrize("n", [6, 8, 10])
def test_pattern_choice_keeps_the_tables_within_their_entries(n: int) -> None:
    """The patterns chosen start with the heaviest requests (by I + O), are all of one size, the
    heaviest's table holds at most LARGEST_TABLE entries and, with more patterns, their tables at
    most PATTERN_ENTRIES together; a tighter time allows no larger tables."""
    for seed in range(4):
        graph = Graph(scale_instance(n, seed))
        chosen = graph.pattern_choice()
        k = len(chosen[0])
        heaviest = sorted(range(n), key=lambda i: -(graph.I[i] + graph.O[i]))[:k]
        assert chosen[0] == tuple(sorted(heaviest)) and all(len(p) == k for p in chosen)
        assert 3 <= k <= min(PATTERN_SIZE, n - 1)
        assert graph.table_entries(chosen[0]) <= LARGEST_TABLE
        assert len(chosen) == 1 or sum(graph.table_entries(p) for p in chosen) <= PATTERN_ENTRIES
        timed = graph.pattern_choice(0.01)
        assert not timed or (graph.table_seconds(timed[0]) <= 0.01 and len(timed[0]) <= k)


@pytest.mark.usefixtures("infermax_kernels")
def test_a_table_not_done_by_its_deadline_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table predicted far too fast (a slow or loaded machine) is started, stopped between its
    levels once the deadline passes, and dropped with the patterns after it: the estimate is then
    the counts' alone, and the table is not kept for later."""
    monkeypatch.setattr(tables, "ENTRY_SECONDS", 1e-12)
    graph = Graph(scale_instance(8, 1))
    chosen = graph.pattern_choice()
    assert graph.table_entries(chosen[0]) > 10**7  # a table of seconds
    t0 = time.perf_counter()
    graph.add_patterns(chosen, TimeBudget.of(0.05, start=t0))
    assert time.perf_counter() - t0 < 2.0  # generous: a loaded machine
    assert len(graph.patterns[0]) == 0 and len(graph.patterns[1]) == 0
    assert graph.table_seconds(chosen[0]) > 0  # not kept
    counts_only = Graph(scale_instance(8, 1))
    assert graph.estimate(tuple([0] * 8), 0) == counts_only.estimate(tuple([0] * 8), 0)


@pytest.mark.parametrize(("n", "seed"), [(3, 0), (3, 2), (4, 1), (4, 3)])
def test_search_solves_small_scale_instances(n: int, seed: int) -> None:
    """Memory-bound instances: the search is solved and its path replays within 1e-4 of its bound
    (only the quadratic prefill term is missing); a node cap gives a valid bound at once."""
    inst = scale_instance(n, seed)
    res = relaxation_search(inst, TimeBudget.of(30))
    assert res.status == Status.OPTIMAL
    value = replayed_objective(inst, res.schedule, "makespan")[0]
    assert res.bound <= value <= res.bound * (1 + 1e-4)
    early = relaxation_search(inst, max_nodes=10)  # stopped, or solved within 10 nodes
    assert early.bound <= res.bound and (early.status == Status.UNKNOWN or early.bound == res.bound)


@pytest.mark.usefixtures("infermax_kernels")
def test_time_limit_on_a_large_instance() -> None:
    """N = 32: one node has more edges than a second allows; the search still stops in time with a
    bound below every policy's makespan."""
    inst = scale_instance(32, 0)
    t0 = time.perf_counter()
    res = relaxation_search(inst, TimeBudget.of(1.0))
    assert time.perf_counter() - t0 < 3.0
    assert res.status == Status.UNKNOWN and res.schedule is None
    for name, sched in policy_schedules(inst).items():
        assert res.bound <= replayed_objective(inst, sched, "makespan")[0] * (1 + 1e-9), name


@pytest.mark.usefixtures("infermax_kernels")
@pytest.mark.parametrize("n", [8, 10])
def test_time_limit_on_a_searched_instance(n: int) -> None:
    """N = 8 and 10 (searched; not solved in a second; at N = 10 a node has up to 3^10 edges and a
    beam layer of width 64 takes most of the beams' share): the search returns within the limit
    plus one call or layer, with a bound below every policy's makespan."""
    inst = scale_instance(n, 0)
    t0 = time.perf_counter()
    res = relaxation_search(inst, TimeBudget.of(0.5))
    assert time.perf_counter() - t0 < 1.5  # generous: a loaded machine
    assert res.status == Status.UNKNOWN
    if res.schedule is not None:  # a beam search's path (the first width takes about 0.3 s)
        assert res.bound <= res.value <= replayed_objective(inst, res.schedule, "makespan")[0] * (1 + 1e-9)
    for name, sched in policy_schedules(inst).items():
        assert res.bound <= replayed_objective(inst, sched, "makespan")[0] * (1 + 1e-9), name


@pytest.mark.usefixtures("infermax_kernels")
def test_time_limit_when_every_node_has_many_children() -> None:
    """51 requests, C = 8, R_max = 2, M = the largest request's KV (a fuzz instance's limits): each
    node has thousands of edges. It has more than MAX_REQUESTS requests, so it gets the start's
    estimate, and the time limit holds."""
    rng = random.Random(0)
    reqs = [
        {"id": f"r{k}", "prompt_tokens": rng.randint(1, 64), "output_tokens": rng.randint(1, 12)} for k in range(51)
    ]
    M = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    inst = parse_instance({
        "name": "many-children",
        "cost_model": "llama-65b-ascend8",
        "limits": {"token_budget": 8, "kv_capacity": M, "max_running": 2},
        "requests": reqs,
    })
    t0 = time.perf_counter()
    res = relaxation_search(inst, TimeBudget.of(0.5))
    assert time.perf_counter() - t0 < 2.0  # generous: a loaded machine
    assert res.status == Status.UNKNOWN and res.schedule is None
    for name, sched in policy_schedules(inst).items():
        assert res.bound <= replayed_objective(inst, sched, "makespan")[0] * (1 + 1e-9), name


@pytest.mark.parametrize("seed", range(0, 32, 4))
def test_pruning_by_a_known_path_and_beam_paths(seed: int) -> None:
    """With the optimum L known: A* that queues only g + h < L finds no path (an empty queue, which
    the search reads as "the known path is the shortest"), with L + 1 it finds L; every beam width
    returns a path of the graph whose edges sum to its stated cost, at least L."""
    for inst in instances(seed) + ([scale_instance(3, seed // 4)] if seed < 16 else []):
        graph = Graph(inst)
        exact = Run(graph, UNBOUNDED)
        assert exact.until(NO_LIMIT, 10**7) == GOAL
        optimum = exact.value
        assert path_cost(graph, exact.path()) == optimum
        assert Run(graph, optimum).until(NO_LIMIT, 10**7) == EMPTY
        below = Run(graph, optimum + 1)
        assert below.until(NO_LIMIT, 10**7) == GOAL and below.value == optimum
        for width in (1, 4, 64):
            cost, path, _ = beam_search(graph, width, UNBOUNDED, NO_LIMIT)
            assert path is not None and cost >= optimum
            assert path_cost(graph, path) == cost
            assert beam_search(graph, width, cost, NO_LIMIT)[:2] == (cost, None)  # nothing below its own path
        res = relaxation_search(inst)
        assert res.status == Status.OPTIMAL and res.bound == math.fsum(request_work(inst)) + optimum * UNIT


def test_beam_paths_hold_the_budgets_when_whole_fills_fit() -> None:
    """Two prompts of 5 tokens under P = C = 8: the relaxation's shortest path fills both in one
    batch (10 prefill tokens), which its schedule cannot do; the beams search only batches that hold
    P and C, so the schedule returned replays cleanly, at a value above the bound."""
    inst = parse_instance(
        {
            "name": "p",
            "cost_model": "llama2-7b-a100",
            "limits": {"token_budget": 8, "prefill_budget": 8, "kv_capacity": 20},
            "requests": [{"id": f"r{k}", "prompt_tokens": 5, "output_tokens": 3} for k in range(2)],
        },
        "p",
    )
    graph = Graph(inst)
    assert graph.whole_fills_fit
    exact = Run(graph, UNBOUNDED)
    assert exact.until(NO_LIMIT, 10**6) == GOAL and not graph.within_budgets(exact.path())
    res = relaxation_search(inst)
    assert res.status == Status.OPTIMAL and res.bound == math.fsum(request_work(inst)) + exact.value * UNIT
    assert res.value > res.bound
    rep = replay(inst, res.schedule)
    assert rep.feasible, rep.violations
    assert rep.metrics.makespan >= exhaustive_makespan(inst, evict=True)[0] * (1 - 1e-9) >= res.bound
    # the residency phase prefers, of two relaxation results, the schedule that replays
    shortest = replace(res, value=res.bound, schedule=path_schedule(Graph(inst), inst, exact.path()))
    assert not replay(inst, shortest.schedule).feasible
    assert candidate_rank(inst, res) < candidate_rank(inst, shortest)


def test_path_schedule_refills_where_the_edge_does() -> None:
    """N = 8 seed 7 (M = 39): the shortest path has a batch whose edge cost takes the refill branch
    of delta (its residents refilled cost less than k_db); its schedule refills them (evicted just
    before) and replays within 1e-4 of the bound (decoding them instead costs one more k_db,
    52.002 ms against 51.377)."""
    inst = scale_instance(8, 7)
    res = relaxation_search(inst, TimeBudget.of(30))
    assert res.status == Status.OPTIMAL
    rep = replay(inst, res.schedule)
    assert rep.feasible, rep.violations
    assert res.bound <= rep.metrics.makespan <= res.bound * (1 + 1e-4)
    assert any(not batch.items and batch.evict for batch in res.schedule.batches)  # an eviction to refill


@pytest.mark.parametrize("seed", range(4))
def test_beam_paths_replay_within_the_budgets(seed: int) -> None:
    """Scale instances of 6 requests with M = 80 % of the KV need (several prompts fill at once, and
    P = 64 binds: on seed 1 the beams over the whole graph fill more than P at once): every beam path
    over the edges that hold P and C holds them, its schedule replays, and so does the search's."""
    inst = scale_instance(6, seed, memory_share=0.8)
    graph = Graph(inst)
    assert graph.whole_fills_fit
    for width in (1, 16):
        _, path, _ = beam_search(graph, width, UNBOUNDED, NO_LIMIT, budgets=True)
        assert graph.within_budgets(path)
        rep = replay(inst, path_schedule(graph, inst, path))
        assert rep.feasible, rep.violations
    res = relaxation_search(inst, TimeBudget.of(2))
    assert replay(inst, res.schedule).feasible

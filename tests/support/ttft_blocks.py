"""What the tests of the block bounds on mean TTFT (``block-flush-ttft``, ``block-batch-ttft``) share:
random jobs, a node budget that cuts a search at a chosen point, the block bound with its flushes
scaled, the check of a cut search and the check that ``optsched bound`` lists a bound."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import numpy as np
import pytest

from optsched.bounds import prefill_alone_time
from optsched.budget import TimeBudget
from optsched.instance import Instance
from optsched.load_bounds import share_terms
from optsched.ttft_block_bounds import BLOCK_TIME, block_mean_bound, srpt_prefill_works
from optsched.ttft_bounds import flush_overhead

#: A relaxation's search on (release, work, beta[, budget]): (lower bound, best found, done).
Search = Callable[..., tuple[float, float, bool]]


def random_jobs(rng: random.Random, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``n`` jobs arriving by a Poisson process of rate 1, works in [0.05, 1.5], and a flush length."""
    release = np.cumsum([rng.expovariate(1.0) for _ in range(n)])
    work = np.array([rng.uniform(0.05, 1.5) for _ in range(n)])
    return release, work, rng.uniform(0.1, 0.6)


class NodeBudget:
    """A budget that expires after ``nodes`` looks at it (the search looks once a node): a cut at a
    chosen point of the search, the same on every machine."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def expired(self) -> bool:
        self.nodes -= 1
        return self.nodes < 0


def block_value(inst: Instance, overhead_scale: float = 1.0, solver=None) -> float:
    """The block bound with flushes ``overhead_scale`` batch overheads long (1: the proven bound;
    more: a planted, invalid one), each block solved by ``solver`` (default: relaxation F's search)."""
    release = np.array([r.arrival for r in inst.requests], dtype=np.float64)
    alone = np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])
    work = share_terms(inst, True)[:, 0]
    beta = overhead_scale * flush_overhead(inst)
    budget, shares = TimeBudget.of(BLOCK_TIME), srpt_prefill_works(inst)
    return block_mean_bound(release, work, alone, beta, budget, shares, solver)[0]


def check_a_cut_search_answers_at_most_the_optimum(
    search: Search, rng: random.Random, rounds: int, n: int
) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """On ``rounds`` draws of :func:`random_jobs` (``n`` jobs), ``search`` cut after 3, 10 and 40 nodes
    answers at most the optimum (its least open node) and finds no schedule below it; some cut ends
    the search early and the best schedule found is above the optimum somewhere (a planted variant
    answering it would not be a bound). Returns each (release, work, beta, optimum)."""
    cut = above = 0
    drawn = []
    for _ in range(rounds):
        release, work, beta = random_jobs(rng, n)
        best, _, exact = search(release, work, beta)
        assert exact
        drawn.append((release, work, beta, best))
        for nodes in (3, 10, 40):
            lower, found, done = search(release, work, beta, NodeBudget(nodes))
            assert lower <= best * (1 + 1e-12) and found >= best * (1 - 1e-12)
            cut += not done
            above += math.isfinite(found) and found > best * (1 + 1e-9)
    assert cut and above
    return drawn


def check_the_bound_command_lists(capsys: pytest.CaptureFixture[str], name: str, module: str) -> dict[str, dict]:
    """``optsched bound toy-4 --problem infermax`` lists the bound ``name`` for ``ttft`` (valid, at least
    ``srpt-prefill-flush``, its note naming ``module``) and not for ``latency``; returns the TTFT
    bounds by name."""
    from optsched.cli import main

    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "ttft", "--json"]) == 0
    found = {b["name"]: b for b in json.loads(capsys.readouterr().out)["bounds"]}
    bound = found[name]
    assert bound["valid"] and bound["value"] >= found["srpt-prefill-flush"]["value"] * (1 - 1e-9)
    assert module in bound["note"]
    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "latency", "--json"]) == 0
    assert name not in {b["name"] for b in json.loads(capsys.readouterr().out)["bounds"]}
    return found

"""The goodput windows' rows that price TPOT (:mod:`optsched.problems.infermax.tpot_pricing`) are proven.

- never below the exhaustive optimum on random tiny instances with SLOs (those rows alone and with
  the others);
- never below any policy's replayed goodput on random decode-heavy instances of 20 to 200 requests
  whose TPOT targets are 1.5 to 4 times the least TPOT alone, where they do tighten the bound;
- a planted invalid row (TPOT targets read at a third of their value) is caught by the same check.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from optsched.budget import NO_LIMIT
from optsched.instance import SLO, parse_instance
from optsched.problems.infermax import goodput_bounds
from optsched.problems.infermax.tpot_pricing import tpot_pricing, tpot_rows
from optsched.result import objective_of
from optsched.schedule import replay
from tests.problems.infermax.test_infermax_goodput import with_random_slos
from tests.support.goodput_bruteforce import exhaustive_goodput
from tests.support.infermax import policy_schedules, tiny_instance


def tpot_only(facts: goodput_bounds.RequestFacts) -> goodput_bounds.RequestFacts:
    """``facts`` whose windows read the TPOT rows only."""
    n = len(facts.output)
    return replace(facts, cost_full=np.empty((0, n)), cost_first=np.empty((0, n)))


def bounds_of(inst) -> tuple[int, int, int]:
    """max_met of ``inst``'s own SLOs: all rows, without the TPOT rows, the TPOT rows only."""
    facts = goodput_bounds.request_facts(inst)
    arrival = np.array([r.arrival for r in inst.requests])
    slo = goodput_bounds.slo_arrays(inst)
    return (
        goodput_bounds.max_met(facts, arrival, slo),
        goodput_bounds.max_met(replace(facts, tpot=()), arrival, slo),
        goodput_bounds.max_met(tpot_only(facts), arrival, slo),
    )


@pytest.mark.parametrize("seed", range(48))
def test_never_below_the_exhaustive_optimum(seed: int) -> None:
    inst = with_random_slos(tiny_instance(seed, n_max=3), seed)
    small = sum(r.prompt_tokens + r.output_tokens for r in inst.requests) <= 10
    best = max(exhaustive_goodput(inst, evict=evict) for evict in ((False, True) if small else (False,)))
    every, without, alone = bounds_of(inst)
    assert min(every, alone) >= best, (every, alone, best)
    assert every <= without


def test_exhaustive_search_counts_a_missed_ttft_as_lost() -> None:
    """A request with only a TTFT target, missed, stays lost when it later finishes."""
    inst = tiny_instance(3, n_max=1)
    req = replace(inst.requests[0], output_tokens=3, slo=SLO(ttft=1e-6))
    assert exhaustive_goodput(replace(inst, requests=(req,))) == 0


def decode_heavy(seed: int):
    """A random online instance of 20 to 200 requests with long outputs, TTFT <= 1 s and a TPOT
    target of 1.5 to 4 times the median least TPOT alone."""
    rng = random.Random(seed)
    n, t, reqs = rng.randint(20, 200), 0.0, []
    rate = rng.choice([20.0, 50.0, 100.0])
    for i in range(n):
        t += rng.expovariate(rate)
        reqs.append({
            "id": f"r{i}",
            "prompt_tokens": rng.randint(16, 800),
            "output_tokens": rng.randint(8, 150),
            "arrival": round(t, 4),
        })
    profile = rng.choice(["llama2-7b-a100", "llama2-7b-h200"])
    inst = parse_instance(
        {"name": f"dh-{seed}", "cost_model": profile, "limits": {"token_budget": 2048}, "requests": reqs}, "dh"
    )
    least = goodput_bounds.request_facts(inst).least_tpot
    tpot = float(np.median(least[np.isfinite(least)])) * rng.choice([1.5, 2.0, 3.0, 4.0])
    return goodput_bounds.with_slos(inst, 1.0, tpot)


@cache
def policy_goodputs(seed: int) -> dict[str, float]:
    inst = decode_heavy(seed)
    out = {}
    for name, schedule in policy_schedules(inst).items():
        rep = replay(inst, schedule)
        assert rep.feasible, (name, rep.violations)
        out[name] = objective_of(rep, "goodput")
    return out


def violations(seeds: range) -> list[tuple[int, str, float, int]]:
    """(seed, policy, replayed goodput, bound) wherever a policy beats a bound."""
    out = []
    for seed in seeds:
        bounds = bounds_of(decode_heavy(seed))
        out += [(seed, p, g, b) for p, g in policy_goodputs(seed).items() for b in bounds if g > b]
    return out


def test_never_below_any_policy_and_tighter_somewhere() -> None:
    assert violations(range(10)) == []
    tighter = [s for s in range(10) if (b := bounds_of(decode_heavy(s)))[0] < b[1]]
    assert tighter, "the TPOT rows never bite on these instances: the check above would be vacuous"


def test_a_planted_invalid_row_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def tighter(pricing, output, tpot, members, budget=NO_LIMIT):  # reads every TPOT target at a third
        return tpot_rows(pricing, output, tpot / 3, members, budget)

    monkeypatch.setattr(goodput_bounds, "tpot_rows", tighter)
    assert violations(range(10)), "a TPOT row priced at a third of the targets went unnoticed"


@pytest.mark.parametrize("seed", range(6))
def test_decode_sums_equal_the_sum_over_each_later_token(seed: int) -> None:
    """Each request's decode item terms and overheads are those of its tokens 2..O_i, one by one."""
    inst = tiny_instance(seed, n_max=6)
    for p in tpot_pricing(inst):
        L, _, decode, dk = p.coefficients
        for i, (prompt, output) in enumerate(zip(p.prompt, p.output)):
            held = [int(prompt) + g - 1 for g in range(1, int(output))]
            assert p.decode_items[i] == pytest.approx(sum(L * (decode + dk * h) for h in held), rel=1e-12, abs=1e-15)
            assert p.decode_overheads[i] == pytest.approx(
                sum(p.overhead + p.per_slot * h for h in held), rel=1e-12, abs=1e-15
            )

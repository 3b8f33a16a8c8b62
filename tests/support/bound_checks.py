"""The checks every proven bound on mean latency or mean TTFT goes through: the exhaustive optimum
of random tiny instances (with and without arrivals), every policy's replayed value on random loaded
instances of 20 to 200 requests, and the count of the instances that refute a (planted) bound."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from optsched.instance import Instance, parse_instance
from optsched.policies import policy_names, reads_slo, simulator_for
from optsched.result import replayed_objective
from tests.support.infermax import tiny_instance
from tests.support.latency_bruteforce import exhaustive_mean
from tests.support.solving import registered_bounds

#: Tiny instances with several requests (a single request proves little about load).
TINY = (0, 5, 6, 7, 9, 10, 11, 13, 16, 19, 20, 25, 26, 27, 29, 30, 34, 37)

#: (n, seed) of the loaded instances (:func:`loaded_instance`) a bound is checked against every policy on.
LOADED = [(20, 1), (50, 2), (120, 3), (200, 4), (80, 5), (30, 6)]


def optimum(inst: Instance, objective: str) -> float:
    """The exhaustive optimum, after checking that its schedule replays to it."""
    found = exhaustive_mean(inst, objective)
    assert found is not None
    value, path = found
    assert replayed_objective(inst, path, objective)[0] == pytest.approx(value, rel=1e-9)
    return value


def loaded_instance(n: int, seed: int) -> Instance:
    """N requests (I in 1..64, O in 1..32) arriving by a Poisson process fast enough to queue,
    with KV capacity, C, P and R_max drawn at random."""
    rng = random.Random(seed)
    t, reqs = 0.0, []
    rate = rng.choice([50.0, 200.0, 1000.0])
    for k in range(n):
        t += rng.expovariate(rate)
        reqs.append({
            "id": f"r{k}",
            "prompt_tokens": rng.randint(1, 64),
            "output_tokens": rng.randint(1, 32),
            "arrival": round(t, 6),
        })
    big = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    C = rng.choice([64, 256, 2048])
    return parse_instance(
        {
            "name": f"loaded-{n}-{seed}",
            "cost_model": rng.choice(["llama2-7b-a100", "llama2-70b-a100"]),
            "limits": {
                "token_budget": C,
                "prefill_budget": rng.choice([p for p in (32, 64, 256) if p <= C]),
                "kv_capacity": rng.choice([big, 4 * big, 20 * big, None]),
                "max_running": rng.choice([4, 16, None]),
            },
            "requests": reqs,
        },
        f"loaded-{n}-{seed}",
    )


def policy_values(inst: Instance, objective: str) -> dict[str, float]:
    """Every policy's replayed ``objective`` on ``inst`` (those reading SLO targets left out: it has none)."""
    names = [n for n in policy_names() if not reads_slo(n)]
    return {name: replayed_objective(inst, simulator_for(name)(inst), objective)[0] for name in names}


def refutations(value_of: Callable[[Instance], float], objective: str, loaded=((50, 2), (120, 3), (200, 4))) -> int:
    """How many instances refute the bound ``value_of(inst)`` on ``objective``: tiny ones (:data:`TINY`,
    with and without arrivals) where it exceeds the exhaustive optimum, and the ``loaded`` ones ((n,
    seed) of :func:`loaded_instance`) where it exceeds some policy's replayed value (a planted fault
    must give some)."""
    caught = 0
    for arrivals in (False, True):
        for seed in TINY:
            inst = tiny_instance(seed, arrivals=arrivals)
            caught += value_of(inst) > optimum(inst, objective) * (1 + 1e-9)
    for n, seed in loaded:
        inst = loaded_instance(n, seed)
        caught += value_of(inst) > min(policy_values(inst, objective).values()) * (1 + 1e-9)
    return caught


def check_never_above_the_exhaustive_optimum(
    listed_of: Callable[[Instance], float],
    value_of: Callable[[Instance], float],
    objective: str,
    arrivals: bool,
) -> list[tuple[Instance, float]]:
    """On the tiny instances, the listed bound ``listed_of(inst)`` equals ``value_of(inst)`` (the bound
    computed apart) and is at most the exhaustive optimum of ``objective``; returns each (instance,
    listed value)."""
    checked = []
    for seed in TINY:
        inst = tiny_instance(seed, arrivals=arrivals)
        value = listed_of(inst)
        assert value == pytest.approx(value_of(inst), rel=1e-12)
        assert value <= optimum(inst, objective) * (1 + 1e-9), (seed, value)
        checked.append((inst, value))
    return checked


def check_never_above_any_policy(listed_of: Callable[[Instance], float], objective: str, n: int, seed: int) -> None:
    """On a loaded instance, the listed bound is positive and at most every policy's ``objective``."""
    inst = loaded_instance(n, seed)
    least = min(policy_values(inst, objective).values())
    assert 0.0 < listed_of(inst) <= least * (1 + 1e-9)


def check_listed_for_latency_only(capsys: pytest.CaptureFixture[str], name: str) -> None:
    """``optsched bound toy-4 --problem infermax --objective latency`` lists the bound ``name``
    (valid, positive), and the InferMax bounder lists it for ``latency`` but not for ``ttft`` on a
    loaded instance."""
    from optsched.cli import main

    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "latency", "--json"]) == 0
    found = {b["name"]: b for b in json.loads(capsys.readouterr().out)["bounds"]}
    assert found[name]["valid"] and found[name]["value"] > 0
    for objective, listed in (("latency", True), ("ttft", False)):
        names = {b.name for b in registered_bounds("infermax", loaded_instance(50, 2), {"objective": objective})}
        assert (name in names) == listed, objective

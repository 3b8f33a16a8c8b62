"""Helpers of the tests of the cost model's optional terms (``prefill.per_ctx``, the step-shape terms):
small random instances under a given profile, the proven-bounds check against a feasible schedule,
and the instances of the formulations that read ``static_latency`` rather than ``cost_model``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from optsched.bounds import generic_bounds, instance_bounds
from optsched.instance import Instance, InstanceError, parse_instance
from optsched.result import objective_of
from optsched.schedule import ReplayResult, Schedule, replay
from tests.support.paths import INSTANCES
from tests.support.solving import registered_bounds


@st.composite
def small_instances(draw: Any, models: st.SearchStrategy[Mapping[str, Any]]) -> Instance:
    """1-3 requests (prompts <= 6, outputs <= 3, some arriving at 2 ms), random limits, a profile
    drawn from ``models``."""
    n = draw(st.integers(1, 3))
    reqs = [
        {
            "id": f"q{k}",
            "prompt_tokens": draw(st.integers(1, 6)),
            "output_tokens": draw(st.integers(1, 3)),
            "arrival": draw(st.sampled_from([0.0, 0.0, 0.002])),
        }
        for k in range(n)
    ]
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    C = draw(st.integers(2, 8))
    return parse_instance({
        "name": "prop",
        "cost_model": dict(draw(models)),
        "limits": {
            "token_budget": C,
            "prefill_budget": draw(st.integers(1, C)),
            "kv_capacity": draw(st.one_of(st.none(), st.integers(need, need + 6))),
            "max_running": draw(st.one_of(st.none(), st.integers(1, 3))),
        },
        "requests": reqs,
    })


def assert_proven_bounds_below(inst: Instance, schedule: Schedule, rep: ReplayResult) -> int:
    """No proven bound exceeds the replayed value of the feasible ``schedule``: the generic bounds
    (makespan, completion, TTFT), the default report, every problem's ``optsched bound`` that accepts
    the instance (InferMax; Hybrid's on its model space: no evictions, pure batches, with J = 2).
    Returns how many problem bounders took the instance (a caller may require some)."""
    for objective in ("makespan", "completion", "ttft"):
        value = objective_of(rep, objective)
        for b in generic_bounds(inst, objective):
            assert b.value <= value * (1 + 1e-9) + 1e-15, (objective, b)
    makespan = rep.metrics.makespan
    for b in instance_bounds(inst):
        if b.name == "throughput-upper":
            assert b.value >= rep.metrics.throughput * (1 - 1e-9)
        elif b.name.startswith("makespan"):
            assert b.value <= makespan * (1 + 1e-9) + 1e-15, b
    checked = 0
    relax = {"method": "relax", "time_limit": 5} if inst.limits.kv_capacity is not None else {}
    for b in _bounds_if_accepted("infermax", inst, relax):
        checked += 1
        if b.valid:
            assert b.value <= makespan * (1 + 1e-9) + 1e-15, b
    pure = all(p == 0 or d == 0 for p, d in zip(rep.prefill_tokens, rep.decode_items))
    if rep.metrics.evictions == 0 and pure:  # the strict bound's model space (PD competition)
        data = json.loads(json.dumps(inst.to_dict()))
        hyb = parse_instance({**data, "limits": {**data["limits"], "max_running": 2}})
        if replay(hyb, schedule).feasible:
            for b in _bounds_if_accepted("hybrid", hyb, {"time_limit": 5}):
                checked += 1
                if b.valid:
                    assert b.value <= makespan * (1 + 1e-9) + 1e-15, b
    return checked


def _bounds_if_accepted(problem: str, inst: Instance, options: Mapping[str, Any]) -> list:
    """``problem``'s bounds of ``inst``, or none when it refuses the instance (its profile)."""
    try:
        return list(registered_bounds(problem, inst, options))
    except InstanceError:
        return []


def static_instances() -> list[tuple[str, dict[str, Any]]]:
    """The gmax Fig. 3 instance and an scls-batch instance (both carry ``static_latency``)."""
    root = INSTANCES / "static"
    gmax = json.loads((root / "fig3-slo-order.json").read_text())
    reqs = [{"id": f"q{i}", "prompt_tokens": 10 + 90 * (i % 3), "output_tokens": 5} for i in range(8)]
    static = {
        "unit": "ms",
        "prefill": {"alpha": 0.001, "beta": 0.5, "gamma": 0.01, "delta": 20.0},
        "decode": {"alpha": 0.0001, "beta": 0.05, "gamma": 0.001, "delta": 15.0},
    }
    scls = {
        "name": "scls-static",
        "requests": reqs,
        "static_latency": static,
        "scls": {"slice_length": 128, "workers": 2, "worker_loads": [0.0, 1.0]},
    }
    return [("gmax", gmax), ("scls-batch", scls)]

"""The export and executor tests' instance: three requests of the e2e-tiny case, and a schedule
that chunks a prefill and preempts a request in decode (its recompute included)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optsched.export.vllm_replay import ReplayPlan
from optsched.schedule import Batch, Item

INSTANCE = {
    "name": "e2e-tiny",
    "cost_model": "llama2-7b-a100",
    "limits": {"token_budget": 64, "prefill_budget": 64, "kv_capacity": 128, "max_running": None},
    "requests": [
        {"id": "a", "arrival": 0.0, "prompt_tokens": 40, "output_tokens": 4},
        {"id": "b", "arrival": 0.0, "prompt_tokens": 30, "output_tokens": 6},
        {"id": "c", "arrival": 0.0, "prompt_tokens": 20, "output_tokens": 3},
    ],
}


def batch_of(*items: tuple[str, int], evict: tuple[str, ...] = (), start: float | None = None) -> Batch:
    return Batch(tuple(Item(i, c) for i, c in items), evict, start)


#: Chunked prefill of 'a' (32 + 8), preemption of 'b' in decode and its recompute of 30 + 3 tokens.
BATCHES = (
    batch_of(("a", 32), ("b", 30)),
    batch_of(("a", 8), ("b", 1)),
    batch_of(("a", 1), ("b", 1)),
    batch_of(("a", 1), ("c", 20), evict=("b",)),
    batch_of(("a", 1), ("c", 1), ("b", 33)),
    batch_of(("c", 1), ("b", 1)),
    batch_of(("b", 1)),
)


def execute_result(
    plan: ReplayPlan,
    times: Sequence[Any],
    model_times: Sequence[Any] | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A result object as ``optsched execute`` writes it for ``plan``, every step run as planned,
    with the given measured step times (one per step, any JSON value) and model times (default:
    the measured ones)."""
    model_times = times if model_times is None else model_times
    return {
        "format": "optsched-vllm-result",
        "version": 1,
        "ok": True,
        "mismatches": [],
        "length_errors": [],
        "outputs": {r.id: r.output_tokens for r in plan.requests},
        "steps": [
            {
                "step": k,
                "batch": s.batch,
                "planned": dict(s.tokens),
                "scheduled": dict(s.tokens),
                "preempted": list(s.preempt),
                "predicted_time": s.predicted_time,
                "measured_time": t,
                "model_time": m,
                "schedule_time": 1e-4,
                "wall_times": [t],
            }
            for k, (s, t, m) in enumerate(zip(plan.steps, times, model_times))
        ],
        "run": run if run is not None else {"model": "tiny-llama", "device": "cpu"},
        "plan": plan.to_dict(),
    }

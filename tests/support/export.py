"""The export and executor tests' instance: three requests of the e2e-tiny case, and a schedule
that chunks a prefill and preempts a request in decode (its recompute included)."""

from __future__ import annotations

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

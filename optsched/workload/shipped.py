"""Shipped slices of real traces: the recipe of each (trace file, first N rows, profile, limits).

``instances/make_instances.py`` writes them from ``../shared/data`` when it is present, and
``tests/workload/test_workload_shipped.py`` checks that the shipped files equal their recipes. The traces are
published under the MIT licence (Vidur's repository, derived from the Azure LLM inference traces
used by Splitwise); each shipped file says so in its ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..instance import Instance, Limits
from .loaders import load_trace

__all__ = ["TRACE_SLICES", "TraceSlice", "trace_slice"]


@dataclass(frozen=True)
class TraceSlice:
    """The first ``rows`` requests of ``trace`` (a path under shared/data) under a profile and limits."""

    trace: str
    rows: int
    cost_model: str
    limits: Limits
    note: str


TRACE_SLICES: dict[str, TraceSlice] = {
    "splitwise-conv-100": TraceSlice(
        "traces/splitwise_conv.csv",
        100,
        "llama2-7b-h200",
        Limits(4096, 4096, 200_000, 256),
        "the first 100 requests (42.7 s of traffic) of the Splitwise conversation trace, as published in "
        "Vidur's repository (MIT licence; derived from the Azure LLM inference trace 2023), on Llama-2-7B "
        "measured on an NVIDIA H200 (models/llama2-7b-h200.toml); M = 200,000 KV slots (about 100 GB "
        "of bf16 KV at 512 KiB per token), R_max = 256 (vLLM's default max_num_seqs)",
    ),
}


def trace_slice(name: str, data_dir: Path) -> Instance:
    """The instance of recipe ``name``, read from ``data_dir`` (``../shared/data``)."""
    recipe = TRACE_SLICES[name]
    inst = load_trace(data_dir / recipe.trace, recipe.cost_model, recipe.limits, name=name, max_rows=recipe.rows)
    return replace(inst, extra={"source": recipe.note})

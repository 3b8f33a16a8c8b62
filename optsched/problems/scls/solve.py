r"""``SOLVERS["scls-batch"]``: one SCLS scheduling round — batch the pooled requests, offload them.

Instance extension (docs/scls.md): ``"static_latency"`` (profile name or object, as for ``gmax``),
and ``"scls"``: ``{"slice_length": S (128), "memory": {"kind": "none" | "fixed" | "memory" |
"table", ...}, "workers": W (1), "worker_loads": [T_load(w)] (zeros), "lambda": 0.5,
"gamma": 6.0}``. A request's current input length is ``prompt_tokens`` plus its optional
``"generated"`` tokens from earlier slices (docs/scls.md, G1).

Options: :class:`SclsOptions`.
A MIP that finds no batching in time gives status ``time_limit`` without batches; one stopped with a
batching gives status ``time_limit`` and that batching. The objective is the total estimated serving time
in seconds (minimised), recomputed by :func:`~.batching.total_serve_time` from the returned batches
(a stopped MIP's own value only bounds it from above: its level indicators may overshoot a batch's longest request);
``extra`` holds the ``batches`` (request ids), their times, the max-min offloading and the exact
makespan with the heuristic's gap, and the next interval of Eq. 12.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...budget import TimeBudget
from ...instance import Instance, InstanceError
from ...options import Options, PositiveFloat, PositiveInt
from ...result import Bound, SolveResult, Status, check_agreement
from .. import BACKENDS
from ..static_latency import static_latency_of
from .batching import DS_TABLE, MemoryRule, dp_batches, mip_batches, total_serve_time
from .offload import OFFLOAD_TIME, adaptive_interval, exact_offload, max_min_offload

__all__ = ["SclsBoundOptions", "SclsOptions", "bounds", "solve", "scls_settings"]


def _rule(spec: Any, where: str) -> MemoryRule:
    if spec is None:
        return MemoryRule()
    if not isinstance(spec, Mapping) or spec.get("kind") not in ("none", "fixed", "memory", "table"):
        raise InstanceError(f"{where}: 'kind' must be none, fixed, memory or table")
    kind = spec["kind"]
    try:
        if kind == "fixed":
            return MemoryRule("fixed", max_batch_size=int(spec["max_batch_size"]))
        if kind == "memory":
            return MemoryRule(
                "memory",
                kv_bytes_per_token=float(spec["kv_bytes_per_token"]),
                available_bytes=float(spec["available_bytes"]),
                zeta=float(spec.get("zeta", 1.0)),
            )
        if kind == "table":
            table = tuple((float(u), int(c)) for u, c in spec.get("table", DS_TABLE))
            return MemoryRule("table", table=tuple(sorted(table)))
    except (KeyError, TypeError, ValueError) as exc:
        raise InstanceError(f"{where}: bad or missing field ({exc})") from None
    return MemoryRule()


def scls_settings(instance: Instance) -> dict[str, Any]:
    """The instance's SCLS round: lengths, model, slice length, memory rule, workers, loads."""
    where = f"{instance.name}: scls"
    spec = instance.extra.get("scls", {})
    if not isinstance(spec, Mapping):
        raise InstanceError(f"{where}: must be an object")
    model = static_latency_of(instance)
    if model is None:
        raise InstanceError(f"{instance.name}: field 'static_latency': missing (needed by scls-batch)")
    slice_len = spec.get("slice_length", 128)
    workers = spec.get("workers", 1)
    loads = spec.get("worker_loads", [0.0] * workers if isinstance(workers, int) else [])
    if not isinstance(slice_len, int) or slice_len < 1:
        raise InstanceError(f"{where}.slice_length: must be an integer >= 1")
    if not isinstance(workers, int) or workers < 1 or len(loads) != workers:
        raise InstanceError(f"{where}.workers / worker_loads: need an integer >= 1 and one load per worker")
    lengths = []
    for r in instance.requests:
        gen = r.extra.get("generated", 0)
        if not isinstance(gen, int) or gen < 0:
            raise InstanceError(f"{instance.name}: request {r.id!r}: field 'generated': must be an integer >= 0")
        lengths.append(r.prompt_tokens + gen)
    return {
        "lengths": lengths,
        "model": model,
        "slice_len": slice_len,
        "rule": _rule(spec.get("memory"), f"{where}.memory"),
        "loads": [float(a) for a in loads],
        "lam": float(spec.get("lambda", 0.5)),
        "gamma": float(spec.get("gamma", 6.0)),
    }


@dataclass(frozen=True)
class SclsOptions(Options):
    """Options of the scls-batch ``solve``.

    Attributes
    ----------
    method
        ``dp`` (Algorithm 1) or ``mip`` (the compact MIP).
    solver
        The MIP's backend: ``highs`` (default), ``cbc`` or ``gurobi`` (method ``mip`` only).
    time_limit
        Seconds for the whole round: batching, then the exact offloading gets what is left, from
        the max-min assignment (10 s for the offloading without a limit).
    threads
        CP-SAT workers of the exact offloading (default 2).
    """

    problem = "scls-batch"
    method: Literal["dp", "mip"] = "dp"
    solver: Literal[BACKENDS["scls-batch"]] | None = None
    time_limit: PositiveFloat | None = None
    threads: PositiveInt | None = None

    def check(self) -> None:
        self.only_with("solver", self.method == "mip", "method is 'mip'")


def solve(instance: Instance, options: Mapping[str, Any] | SclsOptions | None, budget: TimeBudget) -> SolveResult:
    """One SCLS round (see the module docstring; options: :class:`SclsOptions`) within ``budget``
    (:func:`optsched.api.solve` makes it)."""
    opts = SclsOptions.parse(options)
    start = time.perf_counter()
    s = scls_settings(instance)
    method = opts.method
    if method == "dp":
        batches, own = dp_batches(s["lengths"], s["model"], s["slice_len"], s["rule"])
        status, solver = Status.OPTIMAL, "dp"
    elif method == "mip":
        solver = opts.solver or "highs"
        batches, own, status = mip_batches(s["lengths"], s["model"], s["slice_len"], s["rule"], solver, budget)
    if batches is None:  # the MIP found no batching within the limit
        return SolveResult(
            problem="scls-batch",
            solver=solver,
            status=Status.TIME_LIMIT,
            wall_time=time.perf_counter() - start,
            message="the MIP found no batching within the time limit "
            "(method 'dp' solves the batching exactly in milliseconds)",
        )
    total = total_serve_time(s["lengths"], batches, s["model"], s["slice_len"], s["rule"])
    if status == Status.OPTIMAL:
        check_agreement(own, total, "scls-batch")
    elif total > own * (1 + 1e-9) + 1e-9:  # a stopped MIP's value bounds its batches' time from above
        raise RuntimeError(f"scls-batch: the MIP's value {own!r} is below its batches' time {total!r}")
    if status == Status.FEASIBLE and budget.limited:
        status = Status.TIME_LIMIT
    times = [s["model"].serve_time(len(b), max(s["lengths"][i] for i in b), s["slice_len"]) for b in batches]
    heuristic = max_min_offload(times, s["loads"])
    offload = budget if budget.limited else budget.within(OFFLOAD_TIME)
    exact = exact_offload(times, s["loads"], offload, opts.threads or 2, start=heuristic)
    ids = [r.id for r in instance.requests]
    extra = {
        "batch_times": times,
        "offload": {
            "max_min": {"assignment": list(heuristic.assignment), "makespan": heuristic.makespan},
            "exact": {
                "assignment": list(exact.assignment),
                "makespan": exact.makespan,
                "status": exact.status,
                "bound": exact.bound,
            },
            "gap": heuristic.makespan / exact.makespan - 1 if exact.makespan > 0 else 0.0,
        },
        "next_interval": adaptive_interval(heuristic.loads, s["lam"], s["gamma"]),
    }
    return SolveResult(
        problem="scls-batch",
        solver=solver,
        status=status,
        objective=total,
        bound=total if status == Status.OPTIMAL else None,
        wall_time=time.perf_counter() - start,
        batches=[[ids[i] for i in b] for b in batches],
        extra=extra,
    )


@dataclass(frozen=True)
class SclsBoundOptions(Options):
    """Options of the scls-batch ``bounds``: ``time_limit`` only, honoured by a bound that is exact
    and takes milliseconds (a command's limit bounds its process, :mod:`optsched.exiting`)."""

    problem = "scls-batch"
    what = "bound"
    time_limit: PositiveFloat | None = None


def bounds(instance: Instance, options: Mapping[str, Any] | SclsBoundOptions | None, budget: TimeBudget) -> list[Bound]:
    """``BOUNDERS["scls-batch"]``: the least total serving time of the round's batching.

    Algorithm 1's dynamic programme is exact when ``T_serve`` is nondecreasing in L and the memory
    rule is monotone (docs/scls.md, "Contiguity"; the built-in rules are), so its optimum bounds
    every batching from below (:func:`solve` reports it as ``optimal`` too). The programme takes
    milliseconds: none of ``budget``.
    """
    SclsBoundOptions.parse(options)
    s = scls_settings(instance)
    _, total = dp_batches(s["lengths"], s["model"], s["slice_len"], s["rule"])
    return [Bound("dp-optimum", total, True, "Algorithm 1's DP over the length-sorted requests (docs/scls.md)")]

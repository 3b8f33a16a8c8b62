"""The compiled replay's driver: :func:`replay_columns` runs the kernel of :mod:`optsched.replaykernel`.

:func:`replay_columns` lays out a :class:`~optsched.schedcols.ScheduleColumns` and the instance as
arrays, calls the replay kernel (:func:`optsched.aotkernels.kernel`: compiled ahead of time where
``optsched warmup`` built it, else numba's) and returns a feasible
:class:`~optsched.schedule.ReplayResult`, equal to the reference replay's: its metrics computed on
the arrays, its per-request and per-batch fields (Python objects and lists) built at their first
read (:class:`ColumnsReplayResult`). A schedule that breaks a
rule goes back to :func:`optsched.schedule.replay`, which lists the violations (the kernel writes no
message). This module imports no numba: the kernel is loaded at the first call.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import numpy as np

from .aotkernels import kernel
from .costmodel import Coefficients, CostModel
from .instance import Instance
from .jsonio import gc_paused
from .metrics import Metrics, metrics_of_arrays, outcomes_from_columns
from .replayresult import ReplayResult
from .request import RequestColumns, request_ids
from .schedcols import ScheduleColumns

__all__ = ["ColumnsReplayResult", "replay_columns"]

#: Token counts at or beyond this bound (in absolute value) are left to the reference replay (its
#: Python integers cannot overflow; any such item breaks a rule anyway).
_TOKEN_BOUND = 2**40


def replay_columns(instance: Instance, columns: ScheduleColumns) -> ReplayResult | None:
    """The compiled replay of ``columns`` over ``instance``: a feasible :class:`ReplayResult`
    equal to the reference replay's. None when the schedule breaks a rule or leaves a request
    unfinished, or when the kernel cannot represent it (a cost model other than :class:`CostModel`,
    a token count beyond 2^40): the reference replay then judges it."""
    model = instance.cost_model
    if type(model) is not CostModel or (model.per_tile and model.token_tile <= 0):
        return None
    tokens = columns.item_tokens
    if len(tokens) and (tokens.max() >= _TOKEN_BOUND or tokens.min() <= -_TOKEN_BOUND):
        return None
    reqs = instance.requests
    ids = request_ids(reqs)
    if len(ids) == len(columns.ids) and ids == list(columns.ids) and len(set(ids)) == len(ids):  # the instance's ids
        item_req, evict_req = columns.item_ref, columns.evict_ref
    else:
        item_req, evict_req = columns.refs_in({rid: i for i, rid in enumerate(ids)})
    lim = instance.limits
    caps = list(lim.as_int64())
    n, n_b = len(reqs), columns.n_batches
    batch_out = np.zeros((n_b, 9), np.int64)
    times = np.zeros((n_b, 2))
    per_request = (np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, np.int64))
    arrival, prompt, out_len = (np.array(column) for column in instance.columns)  # writable copies
    ok, total_evictions = kernel("replay")(
        (arrival, out_len, prompt),
        (columns.item_ptr, item_req, tokens, columns.evict_ptr, evict_req, columns.start),
        np.array(caps, np.int64),
        Coefficients.of(model),
        batch_out,
        times,
        per_request,
    )
    if not ok:
        return None
    makespan = float(times[-1, 1]) if n_b else 0.0
    first_token, finish, first_scheduled = per_request[:3]
    met = _met(reqs, per_request)
    metrics = metrics_of_arrays(
        arrival, out_len, first_token, finish, first_scheduled, met, makespan, int(total_evictions), n_b
    )
    return ColumnsReplayResult(reqs, batch_out, times, per_request, metrics)


def _met(reqs: Any, per_request: tuple[np.ndarray, ...]) -> int:
    """How many requests meet every SLO they carry (every request finished): those without one,
    and those with one whose :class:`RequestOutcome` says so."""
    if isinstance(reqs, RequestColumns):  # no SLO
        return len(reqs)
    with_slo = [k for k, r in enumerate(reqs) if r.slo is not None]
    if not with_slo:
        return len(reqs)
    times = [[None if math.isnan(t) else t for t in a[with_slo].tolist()] for a in per_request[:3]]
    evictions = per_request[3][with_slo].tolist()
    outcomes = outcomes_from_columns([reqs[k] for k in with_slo], times[0], times[1], evictions, times[2])
    return len(reqs) - len(with_slo) + sum(o.meets_slo for o in outcomes.values())


#: The fields of :class:`ColumnsReplayResult` built at their first read.
_LAZY = frozenset(f.name for f in fields(ReplayResult)) - {"feasible", "violations", "metrics"}


class ColumnsReplayResult(ReplayResult):
    """A feasible :class:`ReplayResult` of the compiled replay whose per-request and per-batch
    fields are built from the kernel's arrays at the first read of any of them; it then becomes a
    plain :class:`ReplayResult` (equal to, and with the representation of, the reference replay's)."""

    def __init__(
        self,
        requests: Any,
        batch_out: np.ndarray,
        times: np.ndarray,
        per_request: tuple[np.ndarray, ...],
        metrics: Metrics,
    ) -> None:  # the dataclass's fields other than these stay unset until read (__getattr__)
        self.feasible = True
        self.violations = []
        self.metrics = metrics
        self._arrays = (requests, batch_out, times, per_request)

    def _fill(self) -> ReplayResult:
        arrays = self.__dict__.pop("_arrays")
        with gc_paused():  # tens of thousands of acyclic objects
            self.__dict__.update(_result_fields(*arrays))
        self.__class__ = ReplayResult  # type: ignore[assignment]
        return self

    def __getattr__(self, name: str) -> Any:
        if name in _LAZY and "_arrays" in self.__dict__:
            return getattr(self._fill(), name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return self._fill() == other

    def __repr__(self) -> str:
        return repr(self._fill())

    __hash__ = None  # type: ignore[assignment]


def _result_fields(
    reqs: Any, batch_out: np.ndarray, times: np.ndarray, per_request: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    """The per-request and per-batch :class:`ReplayResult` fields of the kernel's outputs."""
    features = batch_out[:, 2:]
    first_token, finish, first_scheduled = ([None if math.isnan(t) else t for t in a.tolist()] for a in per_request[:3])
    outcomes = outcomes_from_columns(reqs, first_token, finish, per_request[3].tolist(), first_scheduled)
    return {
        "outcomes": outcomes,
        "starts": times[:, 0].tolist(),
        "ends": times[:, 1].tolist(),
        "kv_used": batch_out[:, 0].tolist(),
        "running": batch_out[:, 1].tolist(),
        "prefill_tokens": features[:, 1].tolist(),
        "decode_items": features[:, 3].tolist(),
        "features": list(zip(*features.T.tolist(), strict=True)),
        "generated": [r.output_tokens for r in reqs],
        "kv_held": [0] * len(reqs),
    }

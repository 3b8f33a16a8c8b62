"""The compiled replay's driver: :func:`replay_columns` runs the kernel of :mod:`optsched.replaykernel`.

:func:`replay_columns` lays out a :class:`~optsched.schedcols.ScheduleColumns` and the instance as
arrays, calls the replay kernel (:func:`optsched.aotkernels.kernel`: compiled ahead of time where
``optsched warmup`` built it, else numba's) and builds the fields of a feasible
:class:`~optsched.schedule.ReplayResult`, equal to the reference replay's. A schedule that breaks a
rule goes back to :func:`optsched.schedule.replay`, which lists the violations (the kernel writes no
message). This module imports no numba: the kernel is loaded at the first call.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .aotkernels import kernel
from .costmodel import Coefficients, CostModel
from .instance import Instance, Request
from .jsonio import gc_paused
from .metrics import metrics_of_columns, outcomes_from_columns
from .schedcols import ScheduleColumns

__all__ = ["replay_columns"]

#: Token counts at or beyond this bound (in absolute value) are left to the reference replay (its
#: Python integers cannot overflow; any such item breaks a rule anyway).
_TOKEN_BOUND = 2**40
#: An absent (or astronomically large) limit M or R_max in the kernel.
_NO_LIMIT = 2**62


def _cap(limit: int | None) -> int:
    """An optional limit as a 64-bit integer (absent: unreachable)."""
    return _NO_LIMIT if limit is None else min(limit, _NO_LIMIT)


def replay_columns(instance: Instance, columns: ScheduleColumns) -> dict[str, Any] | None:
    """The compiled replay of ``columns`` over ``instance``: the fields of a feasible
    :class:`~optsched.schedule.ReplayResult` after ``feasible`` and ``violations``, equal to the
    reference replay's. None when the schedule breaks a rule or leaves a request unfinished, or
    when the kernel cannot represent it (a cost model other than :class:`CostModel`, a token count
    beyond 2^40): the reference replay then judges it."""
    model = instance.cost_model
    if type(model) is not CostModel or (model.per_tile and model.token_tile <= 0):
        return None
    tokens = columns.item_tokens
    if len(tokens) and (tokens.max() >= _TOKEN_BOUND or tokens.min() <= -_TOKEN_BOUND):
        return None
    reqs = instance.requests
    index = {r.id: i for i, r in enumerate(reqs)}
    if len(index) == len(reqs) == len(columns.ids) and list(index) == list(columns.ids):  # the instance's ids
        item_req, evict_req = columns.item_ref, columns.evict_ref
    else:
        item_req, evict_req = columns.refs_in(index)
    lim = instance.limits
    caps = [_cap(lim.token_budget), _cap(lim.prefill_budget), _cap(lim.kv_capacity), _cap(lim.max_running)]
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
    with gc_paused():  # tens of thousands of acyclic objects
        return _result_fields(reqs, batch_out, times, per_request, int(total_evictions))


def _result_fields(
    reqs: tuple[Request, ...],
    batch_out: np.ndarray,
    times: np.ndarray,
    per_request: tuple[np.ndarray, ...],
    evictions: int,
) -> dict[str, Any]:
    """The :class:`~optsched.schedule.ReplayResult` fields of the kernel's outputs."""
    features = batch_out[:, 2:]
    first_token, finish, first_scheduled = ([None if math.isnan(t) else t for t in a.tolist()] for a in per_request[:3])
    outcomes = outcomes_from_columns(reqs, first_token, finish, per_request[3].tolist(), first_scheduled)
    ends_list = times[:, 1].tolist()
    makespan = ends_list[-1] if ends_list else 0.0
    metrics = metrics_of_columns(list(outcomes.values()), *per_request[:3], makespan, evictions, len(ends_list))
    return {
        "outcomes": outcomes,
        "starts": times[:, 0].tolist(),
        "ends": ends_list,
        "kv_used": batch_out[:, 0].tolist(),
        "running": batch_out[:, 1].tolist(),
        "prefill_tokens": features[:, 1].tolist(),
        "decode_items": features[:, 3].tolist(),
        "metrics": metrics,
        "features": list(zip(*features.T.tolist(), strict=True)),
        "generated": [r.output_tokens for r in reqs],
        "kv_held": [0] * len(reqs),
    }

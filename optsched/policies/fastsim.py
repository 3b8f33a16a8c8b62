"""The compiled engine's driver: :func:`simulate_columns` runs the kernel of :mod:`.fastengine`.

:func:`simulate_columns` runs a :class:`~optsched.policies.config.PolicyConfig` on an instance:
it lays out the per-request state and the buffers as arrays (:mod:`.enginelayout`), calls the
kernel (:func:`optsched.aotkernels.kernel`: compiled ahead of time where ``optsched warmup`` built
it, else numba's), and returns the schedule as :class:`~optsched.schedcols.ScheduleColumns` (no
Python object per item), batch for batch the reference engine's
(``tests/policies/test_fastengine.py``).

The priority order is a rank per request: :data:`ORDER_KEYS` maps a policy's ``order`` to its key
columns (functions of the prompt and output lengths); ties fall to the arrival, then the request's
position (as the reference engine's tuples). The dynamic order ``remaining-prefill`` (``srpf``) is
keyed by the kernel itself (prompt - m). A new static order needs only its key function here. An
order without one, a cost model that is not a :class:`~optsched.costmodel.CostModel`, an instance
the engine refuses (a repeated id, a request larger than M or than its whole KV blocks) or a
livelock returns None: the reference engine then runs (and raises).

This module imports no numba: the kernel is loaded at the first call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..aotkernels import kernel
from ..costmodel import Coefficients, CostModel
from ..instance import Instance
from ..request import request_ids
from ..schedcols import ScheduleColumns
from ..schedule import Schedule
from .config import GROUPS, PolicyConfig
from .enginelayout import D_SLOTS, F_SLOTS, L_SLOTS, Q_ROWS, S_SLOTS
from .slo import deadline, resolve, sheds
from .slo_lazy import urgent_from

__all__ = ["ORDER_KEYS", "compiled_schedule", "compiles", "simulate_columns"]


#: Per ``order`` of :class:`PolicyConfig`: the requests' static priority key columns (smaller first,
#: the first column first) of their prompt and output lengths, before the arrival and the position
#: that break ties (``remaining-prefill``: its dynamic key comes first).
ORDER_KEYS: dict[str, Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]] = {
    "arrival": lambda prompt, output: (),
    "prompt": lambda prompt, output: (prompt,),
    "output": lambda prompt, output: (output,),
    "remaining-prefill": lambda prompt, output: (),
}
#: The dynamic order the kernel keys itself (prompt - m, module docstring).
_REMAINING = "remaining-prefill"
_ITEMS, _EVICTIONS = S_SLOTS.index("items"), S_SLOTS.index("evictions")


def _ranks(key_columns: tuple[np.ndarray, ...], arrival: np.ndarray) -> np.ndarray:
    """Each request's position in the priority order (key, arrival, position): a stable sort on
    the arrival, then on each key column from the last to the first."""
    by_priority = np.lexsort((arrival, *reversed(key_columns)))
    rank = np.empty(len(arrival), np.int64)
    rank[by_priority] = np.arange(len(arrival))
    return rank


def _lazy_rows(instance: Instance, config: PolicyConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The laxity rule's arrays (.slo_lazy): each request's TPOT target (NaN without one), first token's
    time (NaN until the kernel sets it) and urgency start (:func:`.slo_lazy.urgent_from`); empty
    without ``tpot_lazy``."""
    requests = instance.requests if config.tpot_lazy else ()
    tpot = np.array([r.slo.tpot if r.slo is not None and r.slo.tpot is not None else np.nan for r in requests])
    urge = np.array([urgent_from(r, config.lazy_horizon) for r in requests])
    return tpot.astype(np.float64), np.full(len(requests), np.nan), urge.astype(np.float64)


def compiles(config: PolicyConfig) -> bool:
    """Whether the kernel runs ``config``: its order has a key function (:data:`ORDER_KEYS`)."""
    return config.order in ORDER_KEYS


def _flags(instance: Instance, config: PolicyConfig) -> np.ndarray:
    """The flags F (:data:`.enginelayout.F_SLOTS`) of ``config``."""
    flags = {
        "hybrid": config.hybrid,
        "chunked": config.chunked,
        "eviction_free": config.eviction_free,
        "prefill_counts_decodes": config.prefill_counts_decodes,
        "evict_for_waiting": config.evict_for_waiting,
        "evicted_to_front": config.evicted_to_front,
        "fcfs": "all" not in config.groups and config.order == "arrival",  # R_w a queue, else sorted
        "dynamic_order": config.order == _REMAINING,
        "kv_lookahead": config.kv_lookahead and not config.eviction_free and instance.limits.kv_capacity is not None,
        "ttft_drop": config.ttft_drop,
        "tpot_shed": config.shed_work is not None,
        "tpot_lazy": config.tpot_lazy,
    }
    return np.array([flags[name] for name in F_SLOTS], np.bool_)


def _limits(instance: Instance, config: PolicyConfig, m_cap: int) -> np.ndarray:
    """The limits L (:data:`.enginelayout.L_SLOTS`) of ``config`` on ``instance``."""
    lim = instance.limits
    limits = {
        "token_budget": lim.token_budget,
        "chunk": min(config.chunk or lim.prefill_budget, lim.prefill_budget),
        "kv_capacity": m_cap,
        "max_running": lim.as_int64()[3],
        "kv_block": config.kv_block,
        "watermark": config.kv_watermark * config.kv_block,
        "prefill_tile": config.share_tile(instance.cost_model.token_tile),
    }
    return np.array([limits[name] for name in L_SLOTS], np.int64)


def _state(
    instance: Instance, config: PolicyConfig, arrival: np.ndarray, cap: int, ev_cap: int, rank: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    """The per-request state Q and the kernel's buffers E (Q first; the layout of :mod:`.fastengine`);
    ``rank``: the requests' priority ranks, else those of the config's order."""
    _, prompt, out_len = instance.columns
    n = len(prompt)
    Q = np.zeros((len(Q_ROWS), n), np.int64)
    Q[Q_ROWS.index("prompt")], Q[Q_ROWS.index("out")] = prompt, out_len
    Q[Q_ROWS.index("rank")] = _ranks(ORDER_KEYS[config.order](prompt, out_len), arrival) if rank is None else rank
    if config.order == _REMAINING:
        Q[Q_ROWS.index("key")] = prompt
    Q[Q_ROWS.index("shed")] = [sheds(instance.cost_model, config, r) for r in instance.requests]
    Q[Q_ROWS.index("skip")] = Q[Q_ROWS.index("shed")]
    E: tuple[np.ndarray, ...] = (
        Q,
        np.zeros(len(S_SLOTS), np.int64),
        np.zeros(len(D_SLOTS), np.int64),
        np.zeros(n, np.int64),
    )
    E += (np.zeros(max(n, 1), np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64))
    E += (np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(ev_cap, np.int64))
    return E + (np.zeros(n, np.int64), np.zeros(n, np.int64))


def simulate_columns(
    instance: Instance, config: PolicyConfig, items_hint: int | None = None, rank: np.ndarray | None = None
) -> ScheduleColumns | None:
    """The schedule of ``config`` on ``instance`` as columns, batch for batch the reference
    engine's; None where the reference engine must run (module docstring). ``rank``: per request
    (instance order), a priority rank that replaces the order's static key (smaller first; distinct
    ranks; the dynamic key of ``remaining-prefill`` still comes first). ``items_hint``: the
    initial length of the output arrays (default from the token counts; a run that outgrows them
    runs again with the length it needed). An SLO-aware policy on an instance without the SLO
    targets it reads raises the reference's :class:`~optsched.instance.InstanceError` (:func:`.slo.resolve`)."""
    config = resolve(config, instance.requests, instance.cost_model)  # the SLOs of SLO-aware policies (.slo)
    ids = tuple(request_ids(instance.requests))
    n = len(ids)
    arrival_column, prompt, out_len = instance.columns  # read-only, shared with the replay and the bounds
    block = config.kv_block
    m_cap = instance.limits.as_int64()[2] // block * block  # KV in whole blocks: at most floor(M / kv_block)
    big = n > 0 and -(-int((prompt + out_len - 1).max()) // block) * block > m_cap
    if not compiles(config) or type(instance.cost_model) is not CostModel or big or len(set(ids)) != len(ids):
        return None
    arrival = arrival_column.copy()  # the kernel's argument types are writable arrays
    order = np.argsort(arrival, kind="stable")
    flags, limits = _flags(instance, config), _limits(instance, config, m_cap)
    flags[F_SLOTS.index("fcfs")] &= rank is None  # given ranks sort R_w
    groups = np.array([GROUPS.index(g) for g in config.groups], np.int64)
    coef = Coefficients.of(instance.cost_model)
    slo_rows = config.ttft_drop or config.tpot_lazy
    deadlines = np.array([deadline(r) for r in instance.requests] if slo_rows else [], np.float64)
    budget = float(config.time_budget) if config.time_budget is not None else np.inf
    share = float(config.prefill_share or 0.0)  # X[7], the adaptive prompt share (.share; 0: none)
    slo = (coef, budget, deadlines, np.zeros(len(deadlines)), *_lazy_rows(instance, config), share)  # X (.slo_kernel)
    cap = items_hint or int(out_len.sum() + prompt.sum() // 64 + 2 * n + 1024)
    ev_cap = items_hint or max(n, 1024)
    simulate = kernel("simulate")
    while True:
        E = _state(instance, config, arrival, cap, ev_cap, rank)
        batch_out = np.zeros((cap, 2), np.int64)
        starts = np.zeros(cap)
        status, nb = simulate(E[0], order, arrival, groups, flags, limits, coef, E, batch_out, starts, slo)
        if status:
            return None
        S = E[1]
        if max(nb, S[_ITEMS]) <= cap and S[_EVICTIONS] <= ev_cap:
            break
        cap, ev_cap = max(cap, nb, S[_ITEMS]), max(ev_cap, S[_EVICTIONS])
    return ScheduleColumns(
        ids=ids,
        item_ptr=np.concatenate(([0], np.cumsum(batch_out[:nb, 0]))),
        item_ref=E[7][: S[_ITEMS]],
        item_tokens=E[8][: S[_ITEMS]],
        evict_ptr=np.concatenate(([0], np.cumsum(batch_out[:nb, 1]))),
        evict_ref=E[9][: S[_EVICTIONS]].copy(),
        start=starts[:nb].copy(),
    )


def compiled_schedule(instance: Instance, config: PolicyConfig) -> Schedule | None:
    """The compiled engine's :class:`~optsched.schedule.Schedule` (its batches built at first
    read); None where the reference engine runs."""
    config = resolve(config, instance.requests, instance.cost_model)  # its SLO parameters in the schedule's meta
    columns = simulate_columns(instance, config)
    if columns is None:
        return None
    return Schedule(instance.name, meta={"policy": config.name, "policy_config": config.to_dict()}, columns=columns)

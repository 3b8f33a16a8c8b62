"""Lower bounds on the makespan of the Hybrid problem: Eqs. (31)-(32) (``paper``) and a proven ``strict`` one.

``paper`` (docs/hybrid.md, Eqs. (31)-(32), O3): ``T^LB = t^p* + t^d*`` with::

    (31)  t^p* = T^p_L * floor( sum_i N^p_i / N^cap_L )        (N^cap_L = stage capacity, T^p_L its time)
    (32)  t^d* = tau_d * C*(N^d),  C*(N^d) = optimal P||Cmax (26)-(30) on T_i = N^d_i rounds, J clients

It is reported with ``valid = False``: it charges every decode round the full-batch time ``tau_d`` (rounds
with fewer active clients are cheaper, docs/hybrid.md, O5), counts N^d_i rounds per request although the prefill
emits the first token (A7), and floors the prefill count.

``strict`` (docs/hybrid.md, O3-O5, proven for every schedule the replay accepts that has no evictions; when the
profile has a per-batch ``base`` cost it also assumes pure batches, i.e. PD Competition). Prefill and decode
batches never overlap, so the makespan is at least the sum of their times:

- prefill: every prompt token is prefilled once (no eviction, no recomputation) and a stage holds at most
  ``P = min(prefill_budget, token_budget)`` tokens, so the stages cost at least
  ``beta_p * S + alpha_p * ceil(S / P)``, ``S = sum_i N^p_i``;
- decode: the number of decode items is exactly ``D = sum_i (N^d_i - 1)``; the number of rounds ``R`` is at
  least ``C*(N^d - 1)``, the P||Cmax optimum on ``p_i = N^d_i - 1`` rounds with J clients (each request
  holds its KV slot over an interval of rounds containing its p_i decode rounds, at most J such intervals
  overlap, and intervals of an interval graph with clique size J split into J chains: clients); rounds
  cost ``alpha_d + beta_d * n``, so the decode time is at least ``alpha_d * C* + beta_d * D``;
- ``per_token_sq`` and ``per_kv`` terms are >= 0 and dropped; so is ``prefill.per_ctx`` (it only adds
  time: (F0) of :mod:`optsched.bounds`); the laws are the profile's linear twin (:mod:`.timing`): a
  tile term counts ``per_tile / token_tile`` per token (``ceil(n / t) >= n / t``) and
  ``decode.per_max_kv`` (>= 0) is dropped, at or below every batch time, so the bound holds by (F0).

If the P||Cmax solve is not proven optimal, its proven lower bound is used instead of ``C*``. The
``strict-preemptive`` entry replaces ``C*`` by ``max(ceil(D / J), max_i p_i)`` and stays valid with
evictions (recomputation only adds prefill tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...budget import TimeBudget
from ...instance import Instance
from ...options import Options, PositiveFloat
from ...result import Bound
from .pcmax import processing_times, solve_pcmax
from .timing import timing_of

__all__ = ["HybridBoundOptions", "bounds", "paper_bound", "strict_bound"]


#: The time of the bounds' P||Cmax solve called without a budget, in seconds.
BOUND_TIME = 10.0


def paper_bound(instance: Instance, budget: TimeBudget | None = None) -> tuple[float, float, float]:
    """``(T^LB, t^p*, t^d*)`` of Eqs. (31)-(32) as printed (docs/hybrid.md, O3, ``paper`` mode); the
    P||Cmax solve within ``budget`` (None: :data:`BOUND_TIME` seconds)."""
    tm = timing_of(instance)
    total = sum(r.prompt_tokens for r in instance.requests)
    cap = tm.prefill_cap
    t_p = (tm.alpha_p + tm.beta_p * cap) * (total // cap)
    found = solve_pcmax(processing_times(instance, "paper"), tm.clients, budget=budget or TimeBudget.of(BOUND_TIME))
    t_d = tm.tau_d * found.bound
    return t_p + t_d, t_p, t_d


def strict_bound(
    instance: Instance, budget: TimeBudget | None = None, preemptive: bool = False
) -> tuple[float, float, float]:
    """``(bound, prefill part, decode part)`` of the proven ``strict`` bound (module docstring); the
    P||Cmax solve within ``budget`` (None: :data:`BOUND_TIME` seconds)."""
    tm = timing_of(instance)
    total = sum(r.prompt_tokens for r in instance.requests)
    t_p = tm.beta_p * total + tm.alpha_p * math.ceil(total / tm.prefill_cap)
    p = processing_times(instance, "rounds")
    if preemptive:
        rounds = max(-(-sum(p) // tm.clients), max(p, default=0))
    else:
        rounds = solve_pcmax(p, tm.clients, budget=budget or TimeBudget.of(BOUND_TIME)).bound

    t_d = tm.alpha_d * rounds + tm.beta_d * sum(p)
    return t_p + t_d, t_p, t_d


@dataclass(frozen=True)
class HybridBoundOptions(Options):
    """Options of the hybrid ``bounds``.

    Attributes
    ----------
    method
        ``paper`` or ``strict`` to report only that bound (default: both).
    time_limit
        Seconds for each P||Cmax solve (default 10).
    """

    problem = "hybrid"
    what = "bound"
    method: Literal["paper", "strict"] | None = None
    time_limit: PositiveFloat = 10.0


def bounds(
    instance: Instance, options: Mapping[str, Any] | HybridBoundOptions | None, budget: TimeBudget
) -> list[Bound]:
    """``BOUNDERS["hybrid"]``: the ``paper`` (not proven) and ``strict`` (proven) makespan bounds
    (options: :class:`HybridBoundOptions`), their P||Cmax solves within ``budget``."""
    opts = HybridBoundOptions.parse(options)
    which = opts.method
    out = []
    if which in (None, "paper"):
        value, t_p, t_d = paper_bound(instance, budget)
        out.append(
            Bound(
                "paper",
                value,
                False,
                f"Eqs. (31)-(32): t^p* = {t_p:.4f} s (floor), t^d* = tau_d x C*(N^d) = {t_d:.4f} s; "
                "not proven (docs/hybrid.md, O5)",
            )
        )
    if which in (None, "strict"):
        value, t_p, t_d = strict_bound(instance, budget)
        out.append(
            Bound(
                "strict",
                value,
                True,
                f"prefill {t_p:.4f} s + decode {t_d:.4f} s; proven without evictions (pure batches if base > 0)",
            )
        )
        value, t_p, t_d = strict_bound(instance, budget, preemptive=True)
        out.append(
            Bound(
                "strict-preemptive", value, True, f"prefill {t_p:.4f} s + decode {t_d:.4f} s; proven with evictions too"
            )
        )
    return out

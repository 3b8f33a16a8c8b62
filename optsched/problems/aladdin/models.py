"""Aladdin's performance models (seed002, Sec. 3; docs/aladdin.md, "The paper's model") and SLO parameters.

- KV footprint (Eq. 1, typo ``r`` read as the current length, docs/aladdin.md, A1):
  ``kv(t) = h * t + j`` for a context of ``t`` tokens.
- Prefill iteration (Eq. 2): ``t_pre(l) = k1 * l + c1`` for ``l`` prompt tokens in the batch.
- Decode iteration (Eq. 3, total-context form): ``t_d(b, L) = k2 * L + c2 * b + c3`` for ``b``
  requests holding ``L`` context tokens in total (used for every ``b >= 1``, docs/aladdin.md, A4).
- Context limit (Eq. 4): ``l_d(b) = (T_dec - c3 - c2 * b) / k2``, the largest total context a
  decode batch of ``b`` requests may hold so that one iteration meets the ATGT SLO ``T_dec``.

The batch times are the contract's cost model (``layers = 1``): prefill ``per_token = k1``,
``bias = c1``; decode ``per_kv = k2``, ``per_token = c2``, ``bias = c3``. A profile written with
``layers``, ``base`` and the top-level ``per_token`` maps exactly as well (those terms are charged
in both phases), so :meth:`AladdinModel.from_instance` reads any contract cost model without a
quadratic, prefill-context or step-shape term (``per_token_sq``, ``per_ctx``, ``per_tile``,
``decode.per_max_kv``): a profile with one is refused, naming the field, since Eqs. 2-3 would
under-price its batches and every placement built on them. The KV function, the
capacity ``M`` and the knobs gamma, theta, slack come from the instance's ``placement`` object, the SLOs from its
top-level ``slo`` object (docs/aladdin.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...costmodel import CostModel
from ...instance import Instance, InstanceError

__all__ = ["AladdinModel", "SLACKS", "model_from_instance"]

#: The two readings of (d)'s decode slack (:meth:`AladdinModel.decode_slack`).
SLACKS = ("paper", "atgt")


@dataclass(frozen=True)
class AladdinModel:
    """Coefficients of Eqs. 1-4 plus the placement knobs of one (homogeneous) worker.

    Attributes
    ----------
    k1, c1
        Prefill seconds per prompt token and per iteration (Eq. 2).
    k2, c2, c3
        Decode seconds per context token, per request and per iteration (Eq. 3).
    kv_per_token, kv_per_request
        ``h`` and ``j`` of Eq. 1 (KV units per token and per request).
    kv_capacity
        ``M``: KV units one worker holds.
    ttft, atgt
        The SLOs ``T_pre`` and ``T_dec`` in seconds.
    gamma
        Strictness knob of constraint (b) and capacity_norm, in [0, 1].
    theta
        Prediction-error margin of (b) and (d), in (0, 1].
    slack
        Decode slack of (d), see :meth:`decode_slack`: ``"paper"`` (literal, docs/aladdin.md, A6) or ``"atgt"``.
    """

    k1: float
    c1: float
    k2: float
    c2: float
    c3: float
    kv_per_token: float
    kv_per_request: float
    kv_capacity: float
    ttft: float
    atgt: float
    gamma: float = 0.5
    theta: float = 1.0
    slack: str = "paper"

    def kv(self, tokens: float) -> float:
        """KV units of a ``tokens``-token context (Eq. 1)."""
        return self.kv_per_token * tokens + self.kv_per_request

    def prefill_time(self, prompt_tokens: float) -> float:
        """Prefill iteration time for ``prompt_tokens`` tokens in the batch (Eq. 2)."""
        return self.k1 * prompt_tokens + self.c1

    def decode_time(self, batch: int, context: float) -> float:
        """Decode iteration time for ``batch`` requests holding ``context`` tokens (Eq. 3)."""
        return self.k2 * context + self.c2 * batch + self.c3

    def context_limit(self, batch: int) -> float:
        """``l_d(b)`` of Eq. 4: the total context a batch of ``batch`` may hold within ``T_dec``."""
        if self.k2 <= 0:
            return math.inf if self.atgt - self.c3 - self.c2 * batch >= 0 else -math.inf
        return (self.atgt - self.c3 - self.c2 * batch) / self.k2

    def decode_slack(self, generated: int, decode_time: float) -> float:
        """Time an ongoing request has saved against its ATGT budget, the right-hand side of (d).

        ``"paper"``: ``T_dec * g - t_dec`` (the paper's formula, docs/aladdin.md, A6). ``"atgt"``:
        ``T_dec * (g - 1) - t_dec``, the budget of the ``g - 1`` decode intervals that ATGT
        (``(finish - first token) / (O - 1)``) counts; the paper's form credits one interval that
        ATGT does not, so a prefill it admits can push a request that is about to finish over T_dec.
        """
        intervals = generated if self.slack == "paper" else generated - 1
        return self.atgt * intervals - decode_time

    def with_knobs(self, **changes: Any) -> AladdinModel:
        """A copy with some fields changed (e.g. ``gamma``, ``theta``, ``kv_capacity``)."""
        return replace(self, **changes)


#: Largest time (seconds) a coefficient or SLO may have: the placement model's integer data are
#: nanoseconds (:data:`.placement.TIME_SCALE`) summed over many jobs, which must stay in int64.
MAX_SECONDS = 1e6


def _bounded(value: float, where: str) -> float:
    """``value`` if at most :data:`MAX_SECONDS`, else an :class:`InstanceError` naming ``where``."""
    if value > MAX_SECONDS:
        raise InstanceError(
            f"{where}: {value:g} s exceeds {MAX_SECONDS:g} s, the largest time the "
            "placement model's integer nanosecond data can hold"
        )
    return value


def _coefficients(cost: CostModel, source: str) -> tuple[float, float, float, float, float]:
    """(k1, c1, k2, c2, c3) of a contract cost model; error if it is not of Aladdin's form."""
    for term in ("per_token_sq", "per_kv", "per_ctx"):
        if getattr(cost.prefill, term) != 0:
            raise InstanceError(
                f"{source}: field 'cost_model.prefill.{term}': Aladdin's prefill model (Eq. 2) is linear in "
                f"the prompt tokens; per_token_sq, per_kv and per_ctx must be 0"
            )
    if cost.decode.per_token_sq != 0:
        raise InstanceError(f"{source}: field 'cost_model.decode.per_token_sq': must be 0 for Aladdin (Eq. 3)")
    shape = cost.shape_term_field()
    if shape is not None:
        raise InstanceError(
            f"{source}: field '{shape}': Aladdin's batch times (Eqs. 2-3) are linear in the tokens and the "
            "context; the step-shape terms per_tile and decode.per_max_kv must be 0"
        )
    lay = cost.layers
    k1 = lay * (cost.per_token + cost.prefill.per_token)
    c1 = lay * (cost.base + cost.prefill.bias)
    k2 = lay * cost.decode.per_kv
    c2 = lay * (cost.per_token + cost.decode.per_token)
    c3 = lay * (cost.base + cost.decode.bias)
    where = f"{source}: field 'cost_model'"
    return (
        _bounded(k1, f"{where} (prefill time per token)"),
        _bounded(c1, f"{where} (prefill bias)"),
        _bounded(k2, f"{where} (decode time per KV token)"),
        _bounded(c2, f"{where} (decode time per request)"),
        _bounded(c3, f"{where} (decode bias)"),
    )


def _positive(obj: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InstanceError(f"{where}.{key}': must be a finite number >= 0, got {value!r}")
    return float(value)


def model_from_instance(instance: Instance, source: str | None = None) -> AladdinModel:
    """Read the Aladdin model of an instance (cost model, ``placement`` and ``slo`` objects).

    Parameters
    ----------
    instance
        A contract instance extended as in docs/aladdin.md.
    source
        Name used in error messages (default: the instance name).

    Raises
    ------
    InstanceError
        When the cost model is not of Aladdin's form, the KV capacity or an SLO is missing, or a
        knob is out of range; the message names the field.
    """
    src = source or instance.name
    k1, c1, k2, c2, c3 = _coefficients(instance.cost_model, src)
    placement = instance.extra.get("placement", {}) or {}
    if not isinstance(placement, Mapping):
        raise InstanceError(f"{src}: field 'placement': must be an object")
    where = f"{src}: field 'placement"
    h = _positive(placement, "kv_per_token", where, 1.0)
    jkv = _positive(placement, "kv_per_request", where, 0.0)
    cap = _positive(placement, "kv_capacity", where)
    if cap == 0:
        raise InstanceError(f"{where}.kv_capacity': must be a finite number > 0 (a worker's KV memory), got 0")
    if cap is None:
        if instance.limits.kv_capacity is None:
            raise InstanceError(f"{src}: field 'placement.kv_capacity': missing (and no limits.kv_capacity)")
        cap = float(h * instance.limits.kv_capacity)  # type: ignore[operator]
    gamma = _positive(placement, "gamma", where, 0.5)
    theta = _positive(placement, "theta", where, 1.0)
    if not 0 <= gamma <= 1:  # type: ignore[operator]
        raise InstanceError(f"{src}: field 'placement.gamma': must lie in [0, 1], got {gamma}")
    if not 0 < theta <= 1:  # type: ignore[operator]
        raise InstanceError(f"{src}: field 'placement.theta': must lie in (0, 1], got {theta}")
    slack = placement.get("slack", "paper")
    if slack not in SLACKS:
        raise InstanceError(f"{src}: field 'placement.slack': must be one of {', '.join(SLACKS)}, got {slack!r}")
    ttft, atgt = _slo(instance, src)
    if atgt <= c3 + c2:
        raise InstanceError(
            f"{src}: field 'slo.atgt': {atgt} s is not above one unbatched decode iteration "
            f"c3 + c2 = {c3 + c2:.6g} s (docs/aladdin.md, A4)"
        )
    return AladdinModel(k1, c1, k2, c2, c3, h, jkv, cap, ttft, atgt, gamma, theta, slack)  # type: ignore[arg-type]


def _slo(instance: Instance, src: str) -> tuple[float, float]:
    """``(T_pre, T_dec)``: the top-level ``slo`` object, else the tightest per-request SLOs."""
    top = instance.extra.get("slo") or {}
    if not isinstance(top, Mapping):
        raise InstanceError(f"{src}: field 'slo': must be an object")
    values = {}
    for key, alt in (("ttft", None), ("atgt", "tpot")):
        value = _positive(top, key, f"{src}: field 'slo")
        if value is None:
            per_req = [
                getattr(r.slo, key) or (getattr(r.slo, alt) if alt else None)
                for r in instance.requests
                if r.slo is not None
            ]
            per_req = [v for v in per_req if v is not None]
            value = min(per_req) if per_req else None
        if value is None:
            raise InstanceError(f"{src}: field 'slo.{key}': missing (needed by the placement constraints)")
        if value <= 0:
            raise InstanceError(f"{src}: field 'slo.{key}': must be a finite number > 0, got {value:g}")
        values[key] = _bounded(value, f"{src}: field 'slo.{key}'")
    return values["ttft"], values["atgt"]

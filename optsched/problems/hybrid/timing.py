"""Time parameters of the Hybrid offline-online problem (seed003) read from an instance.

The paper's laws (Sec. V-A) are the contract's cost model restricted to pure batches:

- a prefill stage of ``n`` prompt tokens costs ``alpha_p + beta_p * n`` (paper: 25 ms + 0.13 ms/token);
- a decode round with ``n`` active clients costs ``alpha_d + beta_d * n`` (paper: 29 ms + 0.21 ms/client).

With the contract's fields, ``alpha_p = layers * (base + prefill.bias)``, ``beta_p = layers *
(per_token + prefill.per_token)`` and likewise for decode. ``per_token_sq`` and ``per_kv`` are not part
of the paper's laws; when a profile has them, :attr:`HybridTiming.linear` is False and every time model
built on these coefficients is an approximation of the replayed time (and is reported as such).
``prefill.per_ctx`` prices a chunk's tokens times the request's KV before it: a prompt prefilled whole
from an empty KV (the MIP's model space) has none, so the term leaves these laws exact there; the
online policies, which split prompts longer than a stage, price it in their clocks.

The step-shape terms (``per_tile`` per started tile of ``token_tile`` tokens, ``decode.per_max_kv``
on the longest decode context) are not affine in the tokens and clients: the laws are read from the
profile's :meth:`~optsched.costmodel.CostModel.linear_twin` (the tile cost spread over the tokens,
``per_max_kv`` left out), at or below every batch time, so the strict bound of :mod:`.bounds` stays
proven ((F0) of :mod:`optsched.bounds`); the formulations whose objective is priced by these laws
(the MIP of :mod:`.model`, the assignment of :mod:`optsched.problems.hybrid_offline.solve`) refuse such a profile
(:func:`shape_term_refusal`); the policies' clocks price the terms exactly.

Fixes of docs/hybrid.md used here: M2 (``tau_d = alpha_d + beta_d * J``, the time of one full decode
round, replaces the per-token ``T^d`` of Eq. (8)); A7 (a request's prefill emits its first output token,
as in the contract's semantics, so request ``i`` needs ``D_i = N^d_i - 1`` decode rounds); the levels of
docs/hybrid.md, "Time model", ``N^cap_l`` in {0, 256, 512, 1024, 2048} capped by the prefill budget,
``T^p_l = alpha_p + beta_p N^cap_l`` and ``T^p_0 = 0`` (fix M3).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...instance import Instance

__all__ = ["HybridTiming", "DEFAULT_LEVEL_CAPS", "shape_term_refusal", "timing_of"]

#: Prefill level capacities (docs/hybrid.md, "Time model"), before capping by the prefill budget.
DEFAULT_LEVEL_CAPS = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class HybridTiming:
    """Clients, stage capacity and the affine prefill/decode laws of one instance.

    Attributes
    ----------
    clients
        J, the number of clients (``limits.max_running``).
    prefill_cap
        Most prompt tokens in one prefill stage: min(prefill_budget, token_budget).
    alpha_p, beta_p
        Prefill stage time = alpha_p + beta_p * tokens (seconds).
    alpha_d, beta_d
        Decode round time = alpha_d + beta_d * active clients (seconds).
    linear
        True when these laws are exactly the instance's cost model on pure batches.
    """

    clients: int
    prefill_cap: int
    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float
    linear: bool

    @property
    def tau_d(self) -> float:
        """Time of a full decode round (J active clients), docs/hybrid.md, fix M2."""
        return self.alpha_d + self.beta_d * self.clients

    def prefill_time(self, tokens: int) -> float:
        """Time of a prefill stage of ``tokens`` prompt tokens (0 for an empty stage)."""
        return self.alpha_p + self.beta_p * tokens if tokens > 0 else 0.0

    def decode_time(self, active: int) -> float:
        """Time of a decode round with ``active`` clients (0 for an empty round)."""
        return self.alpha_d + self.beta_d * active if active > 0 else 0.0

    def levels(self, caps: tuple[int, ...] = DEFAULT_LEVEL_CAPS) -> list[tuple[int, float]]:
        """Prefill levels ``(N^cap_l, T^p_l)``, level 0 first (fix M3), top level = the stage capacity."""
        kept = sorted({c for c in caps if c < self.prefill_cap} | {self.prefill_cap})
        return [(0, 0.0)] + [(c, self.alpha_p + self.beta_p * c) for c in kept]


def decode_rounds(output_tokens: int) -> int:
    """Decode rounds a request needs after its prefill (the prefill emits the first token)."""
    return output_tokens - 1


def timing_of(instance: Instance) -> HybridTiming:
    """The :class:`HybridTiming` of an instance.

    J is ``limits.max_running``; when that is unlimited (None), J = the number of requests (every request
    may run at once, which is what "no limit on running requests" means for clients).
    """
    lim = instance.limits
    clients = lim.max_running if lim.max_running is not None else max(1, len(instance.requests))
    cm = instance.cost_model
    linear = (
        cm.prefill.per_token_sq == 0
        and cm.prefill.per_kv == 0
        and cm.decode.per_token_sq == 0
        and cm.decode.per_kv == 0
        and not cm.has_shape_terms
    )
    cm = cm.linear_twin()  # module docstring: the laws of a profile with step-shape terms
    return HybridTiming(
        clients=clients,
        prefill_cap=min(lim.prefill_budget, lim.token_budget),
        alpha_p=cm.layers * (cm.base + cm.prefill.bias),
        beta_p=cm.layers * (cm.per_token + cm.prefill.per_token),
        alpha_d=cm.layers * (cm.base + cm.decode.bias),
        beta_d=cm.layers * (cm.per_token + cm.decode.per_token),
        linear=linear,
    )


def shape_term_refusal(instance: Instance, formulation: str) -> str | None:
    """Why ``formulation``, priced by the affine laws, refuses ``instance``: a one-line message naming
    the step-shape field its profile sets (module docstring), or None when it sets none."""
    field = instance.cost_model.shape_term_field()
    if field is None:
        return None
    return (
        f"field '{field}': {formulation} prices its stages with the paper's affine laws, which have no "
        "step-shape term (cost_model.per_tile, cost_model.decode.per_max_kv must be 0); the hybrid "
        "policies and the hybrid problem's bounds accept it"
    )

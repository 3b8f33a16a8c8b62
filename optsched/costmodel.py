"""The iteration cost model of the contract (docs/costmodel.md) and its profiles.

The time of a non-empty batch, in seconds, is

.. math::

    T = L \\cdot \\big( b + a N_{tok} + t_c \\lceil N_{tok} / t \\rceil
        + [N_{pre} > 0] (p_b + p_a N_{pre} + p_q S_{pre} + p_c X_{pre})
        + [N_{dec} > 0] (d_b + d_a N_{dec} + d_k KV_{dec} + d_x KV^{max}_{dec}) \\big)

with :math:`N_{tok}` the tokens processed, :math:`N_{pre}` the prefill tokens, :math:`S_{pre}` the sum
of squared prefill chunk sizes, :math:`X_{pre}` the sum over prefill items of the chunk times the KV
before it, :math:`N_{dec}` the decode items, :math:`KV_{dec}` the KV slots the decode items read (their
``m`` before processing) and :math:`KV^{max}_{dec}` the largest of those. The two *step-shape terms*,
:math:`t_c` (``per_tile``, per started tile of ``token_tile`` = t tokens) and :math:`d_x`
(``decode.per_max_kv``), default to 0. An empty batch costs 0.

:meth:`CostModel.linear_twin` is the contract's linear form below every batch time (the tile term
spread over the tokens, the longest-decode term left out): the model every bound and every
formulation that does not price the step-shape terms exactly reads (docs/costmodel.md).

Profiles live in ``models/*.toml`` (shipped as ``optsched.data_models``); each names its source.
Fitting a profile to measured times: :mod:`optsched.costfit`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any, NamedTuple

from .jsonio import read_toml

__all__ = [
    "MAX_MEASURED_SECONDS",
    "MAX_TOKEN_TILE",
    "CostModel",
    "Coefficients",
    "CostModelError",
    "PHASE_TERMS",
    "PhaseCost",
    "PRICED_TERMS",
    "available_profiles",
    "cost_model_from_mapping",
    "features_of",
    "FEATURES",
    "OPTIONAL_FEATURES",
    "load_cost_model",
]


#: The arguments of :meth:`CostModel.batch_time`, in order: the per-batch features of every
#: replay, plan step and measured step.
FEATURES: tuple[str, ...] = ("n_tok", "n_pre", "s_pre", "n_dec", "kv_dec", "x_pre", "kv_max")
#: Features a JSON ``features`` object may leave out (read as 0): those of the optional terms.
OPTIONAL_FEATURES: frozenset[str] = frozenset({"x_pre", "kv_max"})


def features_of(mapping: Mapping[str, Any]) -> tuple[int, ...]:
    """The :data:`FEATURES` of a JSON ``features`` object as integers; ``x_pre`` and ``kv_max`` may
    be absent (0: a file without the optional terms); a missing other one is a ``KeyError``."""
    return tuple(int(mapping.get(k, 0) if k in OPTIONAL_FEATURES else mapping[k]) for k in FEATURES)


class CostModelError(ValueError):
    """A cost model could not be found or is malformed."""


#: Longest measured batch or step time accepted, in seconds (about 11.6 days): a larger number is
#: not a measurement (10^308 overflowed the fits into a negative per_token).
MAX_MEASURED_SECONDS = 1e6


@dataclass(frozen=True)
class PhaseCost:
    """Coefficients of one phase term (prefill or decode), per layer, in seconds."""

    bias: float = 0.0
    per_token: float = 0.0
    per_token_sq: float = 0.0
    per_kv: float = 0.0
    per_ctx: float = 0.0
    per_max_kv: float = 0.0


class Coefficients(NamedTuple):
    """The cost model's coefficients in one flat record, each named as in the profile (``prefill.per_ctx``
    is ``prefill_per_ctx``): the one structure every formulation and every compiled kernel reads
    (numba takes it as a named tuple, so kernels read ``coef.prefill_per_ctx``, never a position).

    :meth:`of` gives the profile's values (seconds per layer, ``layers`` apart, as
    :meth:`CostModel.batch_time` reads them); :meth:`folded` the same terms with ``layers``
    multiplied in (seconds, ``layers`` = 1). The fields come in the order of the batch time's linear
    terms, then its optional ones; ``token_tile`` is the tile size in tokens (0 without a tile term),
    the other fields are the prices of :data:`PRICED_TERMS`.
    """

    layers: float
    base: float
    per_token: float
    prefill_bias: float
    prefill_per_token: float
    prefill_per_token_sq: float
    decode_bias: float
    decode_per_token: float
    decode_per_kv: float
    prefill_per_ctx: float
    per_tile: float
    decode_per_max_kv: float
    token_tile: int

    @classmethod
    def of(cls, model: CostModel) -> Coefficients:
        """The coefficients of ``model`` as the profile states them (every price a float)."""
        values = {"layers": model.layers, "base": model.base, "per_token": model.per_token, "per_tile": model.per_tile}
        for phase, terms in PHASE_TERMS.items():
            values |= {f"{phase}_{term}": getattr(getattr(model, phase), term) for term in terms}
        return cls(token_tile=model.token_tile if model.per_tile else 0, **{k: float(v) for k, v in values.items()})

    def folded(self) -> Coefficients:
        """The same terms with ``layers`` multiplied into every price (seconds; ``layers`` = 1)."""
        return self._replace(layers=1.0, **{name: self.layers * getattr(self, name) for name in PRICED_TERMS})

    def priced(self) -> dict[str, float]:
        """The prices (:data:`PRICED_TERMS`) by field name."""
        return {name: getattr(self, name) for name in PRICED_TERMS}

    def tiles(self, tokens: int) -> int:
        """Started tiles of a batch of ``tokens`` tokens (0 without a tile term)."""
        return -(-tokens // self.token_tile) if self.per_tile else 0


#: The :class:`PhaseCost` terms the batch time uses, by phase (the others are accepted only as 0);
#: :class:`Coefficients` names each ``phase_term``.
PHASE_TERMS: dict[str, tuple[str, ...]] = {
    "prefill": ("bias", "per_token", "per_token_sq", "per_ctx"),
    "decode": ("bias", "per_token", "per_kv", "per_max_kv"),
}
#: The fields of :class:`Coefficients` that are prices (seconds per unit), in its order: every field
#: but ``layers`` and ``token_tile``.
PRICED_TERMS: tuple[str, ...] = tuple(f for f in Coefficients._fields if f not in ("layers", "token_tile"))


@dataclass(frozen=True)
class CostModel:
    """The contract's iteration cost model.

    Attributes
    ----------
    name
        Profile name, or ``"inline"``.
    layers
        Multiplier applied to the per-layer sum.
    base, per_token
        Non-attention cost: per batch and per processed token.
    token_tile, per_tile
        The tile term: ``per_tile`` per started tile of ``token_tile`` tokens (``ceil(N_tok /
        token_tile)`` tiles; the row tiles of a GPU's matrix products). ``token_tile`` is 0 when
        the profile has no tile term.
    prefill, decode
        Phase terms, charged only when the batch has prefill (resp. decode) items.
    source
        Where the coefficients come from (free text).
    """

    name: str = "inline"
    layers: float = 1.0
    base: float = 0.0
    per_token: float = 0.0
    prefill: PhaseCost = field(default_factory=PhaseCost)
    decode: PhaseCost = field(default_factory=PhaseCost)
    source: str = ""
    token_tile: int = 0
    per_tile: float = 0.0

    def batch_time(
        self, n_tok: int, n_pre: int, s_pre: int, n_dec: int, kv_dec: int, x_pre: int = 0, kv_max: int = 0
    ) -> float:
        """Time of one batch in seconds.

        Parameters
        ----------
        n_tok
            Tokens processed (prefill tokens plus decode items).
        n_pre
            Prefill tokens.
        s_pre
            Sum over prefill items of the squared chunk size.
        n_dec
            Number of decode items.
        kv_dec
            Sum over decode items of the KV slots held before processing.
        x_pre
            Sum over prefill items of chunk size times the request's KV before the item.
        kv_max
            The largest KV held before processing by a decode item (0 without decode items).
        """
        if n_tok == 0:
            return 0.0
        t = self.base + self.per_token * n_tok
        if self.per_tile:
            t += self.per_tile * -(-n_tok // self.token_tile)
        if n_pre > 0:
            p = self.prefill
            t += p.bias + p.per_token * n_pre + p.per_token_sq * s_pre + p.per_ctx * x_pre
        if n_dec > 0:
            d = self.decode
            t += d.bias + d.per_token * n_dec + d.per_kv * kv_dec + d.per_max_kv * kv_max
        return self.layers * t

    def least_overhead(self, whole_tile: bool = False) -> float:
        """The least time of a non-empty batch beyond its items' terms, seconds: ``L (b + min(pb, db))``
        (the same under :meth:`linear_twin`), plus one whole tile ``L tc`` with ``whole_tile`` (a
        non-empty batch starts at least one)."""
        return self.layers * (
            self.base + min(self.prefill.bias, self.decode.bias) + (self.per_tile if whole_tile else 0.0)
        )

    def prefill_time(self, chunk: int, cached: int = 0) -> float:
        """Time of a batch holding one prefill chunk of ``chunk`` tokens, over ``cached`` tokens
        already in the request's KV, and nothing else."""
        return self.batch_time(chunk, chunk, chunk * chunk, 0, 0, chunk * cached)

    def decode_time(self, n_dec: int, kv_dec: int, kv_max: int = 0) -> float:
        """Time of a decode-only batch of ``n_dec`` items reading ``kv_dec`` KV slots, the longest
        ``kv_max`` (for one item, ``kv_max = kv_dec``)."""
        return self.batch_time(n_dec, 0, 0, n_dec, kv_dec, 0, kv_max)

    @property
    def has_shape_terms(self) -> bool:
        """Whether the profile has a step-shape term (``per_tile`` or ``decode.per_max_kv`` > 0)."""
        return self.per_tile > 0 or self.decode.per_max_kv > 0

    def shape_term_field(self) -> str | None:
        """The contract field of the first step-shape term this profile sets (for a refusal that
        names it), or None."""
        if self.per_tile > 0:
            return "cost_model.per_tile"
        if self.decode.per_max_kv > 0:
            return "cost_model.decode.per_max_kv"
        return None

    def linear_twin(self) -> CostModel:
        """The contract's linear form at or below every batch time of this profile.

        ``per_tile * ceil(N_tok / token_tile) >= (per_tile / token_tile) * N_tok`` moves into
        ``per_token``, and ``decode.per_max_kv * KV_max >= 0`` is left out; every other term is
        unchanged. So every batch costs no more under the twin, and a bound proven under the twin
        holds under this profile ((F0) of :mod:`optsched.bounds`). A profile without step-shape terms
        is its own twin.
        """
        if not self.has_shape_terms:
            return self
        return replace(
            self,
            per_token=self.per_token + (self.per_tile / self.token_tile if self.per_tile else 0.0),
            token_tile=0,
            per_tile=0.0,
            decode=replace(self.decode, per_max_kv=0.0),
        )

    def whole_model(self) -> CostModel:
        """The same batch times with ``layers`` multiplied into every price (``layers`` = 1): the
        form of a profile fitted to whole-model step times."""
        L = self.layers

        def scaled(p: PhaseCost) -> PhaseCost:
            return PhaseCost(*(L * getattr(p, f.name) for f in fields(PhaseCost)))

        return replace(
            self,
            layers=1.0,
            base=L * self.base,
            per_token=L * self.per_token,
            per_tile=L * self.per_tile,
            prefill=scaled(self.prefill),
            decode=scaled(self.decode),
        )

    def to_dict(self) -> dict[str, Any]:
        """The inline JSON form of the contract (docs/costmodel.md); the optional terms
        (``prefill.per_ctx``, ``token_tile``/``per_tile``, ``decode.per_max_kv``) only when set."""

        def phase(p: PhaseCost) -> dict[str, float]:
            return {"bias": p.bias, "per_token": p.per_token, "per_token_sq": p.per_token_sq, "per_kv": p.per_kv}

        prefill = phase(self.prefill) | ({"per_ctx": self.prefill.per_ctx} if self.prefill.per_ctx else {})
        decode = phase(self.decode) | ({"per_max_kv": self.decode.per_max_kv} if self.decode.per_max_kv else {})
        tile = {"token_tile": self.token_tile, "per_tile": self.per_tile} if self.token_tile else {}
        return {
            "layers": self.layers,
            "base": self.base,
            "per_token": self.per_token,
            **tile,
            "prefill": prefill,
            "decode": decode,
        }


_PHASE_KEYS = {"bias", "per_token", "per_token_sq", "per_kv", "per_ctx", "per_max_kv"}
_TOP_KEYS = {"layers", "base", "per_token", "token_tile", "per_tile", "prefill", "decode", "name", "source"}
#: Largest ``token_tile`` (tokens): matrix-product row tiles are at most a few hundred.
MAX_TOKEN_TILE = 1 << 20


#: Largest coefficient (seconds per layer and unit) and layer count a profile may have: real ones
#: are below 10^-2 and 200; these caps keep every batch time of every instance finite (10^300
#: made times infinite and the policies' schedules unreplayable).
MAX_COEFFICIENT = 1e3
MAX_LAYERS = 1e4


def _number(value: Any, where: str, positive: bool = False, most: float = MAX_COEFFICIENT) -> float:
    """``value`` as a finite number in [0, ``most``] (> 0 when ``positive``), else a CostModelError
    naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CostModelError(f"{where}: must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0) or value > most:
        raise CostModelError(f"{where}: must be {'> 0' if positive else '>= 0'} and at most {most:g}, got {value!r}")
    return float(value)


def _phase(data: Any, where: str) -> PhaseCost:
    if data is None:
        return PhaseCost()
    if not isinstance(data, Mapping):
        raise CostModelError(f"{where}: must be an object")
    unknown = set(data) - _PHASE_KEYS
    if unknown:
        raise CostModelError(f"{where}: unknown field(s) {sorted(unknown)}")
    phase = PhaseCost(**{k: _number(v, f"{where}.{k}") for k, v in data.items()})
    unused = [f.name for f in fields(PhaseCost) if f.name not in PHASE_TERMS[where.rsplit(".", 1)[-1]]]
    for key in unused:  # no term of the batch time uses it: accepted only as 0
        if getattr(phase, key) != 0:
            raise CostModelError(
                f"{where}.{key}: no term of the batch time uses it; must be 0, got {getattr(phase, key)!r}"
            )
    return phase


def cost_model_from_mapping(data: Mapping[str, Any], name: str = "inline") -> CostModel:
    """Build a :class:`CostModel` from the contract's inline form (or a parsed profile).

    Raises
    ------
    CostModelError
        On unknown fields, non-numbers or negative coefficients; the message names the field.
    """
    if not isinstance(data, Mapping):
        raise CostModelError("cost_model: must be a profile name or an object")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise CostModelError(f"cost_model: unknown field(s) {sorted(unknown)}")
    layers = _number(data.get("layers", 1), "cost_model.layers", positive=True, most=MAX_LAYERS)
    token_tile, per_tile = _tile(data)
    return CostModel(
        name=str(data.get("name", name)),
        layers=layers,
        base=_number(data.get("base", 0.0), "cost_model.base"),
        per_token=_number(data.get("per_token", 0.0), "cost_model.per_token"),
        prefill=_phase(data.get("prefill"), "cost_model.prefill"),
        decode=_phase(data.get("decode"), "cost_model.decode"),
        source=str(data.get("source", "")),
        token_tile=token_tile,
        per_tile=per_tile,
    )


def _tile(data: Mapping[str, Any]) -> tuple[int, float]:
    """``(token_tile, per_tile)`` of a profile mapping: both or neither (one alone does nothing)."""
    if "token_tile" not in data and "per_tile" not in data:
        return 0, 0.0
    for key, other in (("token_tile", "per_tile"), ("per_tile", "token_tile")):
        if key not in data:
            raise CostModelError(f"cost_model.{key}: required with cost_model.{other} (the tile term needs both)")
    tile = data["token_tile"]
    if isinstance(tile, bool) or not isinstance(tile, int) or not 1 <= tile <= MAX_TOKEN_TILE:
        raise CostModelError(f"cost_model.token_tile: must be an integer in [1, {MAX_TOKEN_TILE}], got {tile!r}")
    return tile, _number(data["per_tile"], "cost_model.per_tile")


def available_profiles() -> list[str]:
    """Names of the profiles shipped in ``models/``."""
    root = resources.files("optsched.data_models")
    return sorted(p.name[: -len(".toml")] for p in root.iterdir() if p.name.endswith(".toml"))


def load_cost_model(spec: str | Mapping[str, Any] | CostModel) -> CostModel:
    """Load a cost model from a profile name, an inline mapping, or pass one through.

    Parameters
    ----------
    spec
        A profile name shipped in ``models/`` (e.g. ``"llama2-7b-a100"``), a path to a TOML file,
        an inline mapping as in docs/costmodel.md, or a :class:`CostModel`.
    """
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, Mapping):
        return cost_model_from_mapping(spec)
    if not isinstance(spec, str):
        raise CostModelError("cost_model: must be a profile name or an object")
    if spec.endswith(".toml"):
        data = read_toml(spec, CostModelError)
        try:
            return cost_model_from_mapping(data, name=spec)
        except CostModelError as exc:
            raise CostModelError(f"{spec}: {exc}") from None
    resource = resources.files("optsched.data_models").joinpath(f"{spec}.toml")
    if not resource.is_file():
        raise CostModelError(f"cost_model: unknown profile {spec!r} (known: {', '.join(available_profiles())})")
    with resource.open("rb") as fh:
        return cost_model_from_mapping(tomllib.load(fh), name=spec)

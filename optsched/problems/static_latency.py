"""Static-batch latency model shared by the SLO-aware G-maximisation (``gmax``) and SCLS.

Both papers use the same bilinear predictor for a *static* batch (every member runs to the end of
the batch, whose size ``b`` is fixed while it runs):

- prefill, SLO paper Eq. 14 / SCLS Eq. 3:
  :math:`t_p(b, l) = \\alpha_p b l + \\beta_p b + \\gamma_p l + \\delta_p`;
- one decode step at accumulated length :math:`l_a`, SLO Eq. 15 / SCLS Eq. 4:
  :math:`\\tau_d(b, l_a) = \\alpha_d b l_a + \\beta_d b + \\gamma_d l_a + \\delta_d`;
- decode of :math:`L` tokens, SLO Eq. 16 / SCLS Eq. 2:
  :math:`t_d(b, l, L) = \\sum_{k=1}^{L} \\tau_d(b, l + k)`, in closed form (docs/gmax.md, "Latency model")
  :math:`t_d = A(b) (L l + L(L+1)/2) + C(b) L` with :math:`A(b) = \\alpha_d b + \\gamma_d`,
  :math:`C(b) = \\beta_d b + \\delta_d`;
- execution time (SLO Eq. 17, SCLS Eq. 1 with :math:`L_o = S`): :math:`t_p + t_d`;
- TPOT component (SLO Eq. 19): :math:`t_d / L`.

Coefficients are stored in the model's ``unit`` (the paper's Table 2 is in milliseconds); every
accessor returns **seconds**. Both phases are linear in their coefficients, so :func:`fit_phase`
fits them by ordinary least squares (``numpy.linalg.lstsq``) from profiled samples: prefill on
features ``[b l, b, l, 1]``, decode either per step (same features with :math:`l_a`) or from whole
decode times on ``[b S, b L, S, L]`` with :math:`S = L l + L(L+1)/2` (:func:`decode_features`).

The papers' Fig. 4 is not affine in ``b``, so a problem may also carry *tabulated* times per
(request, batch size); :class:`StaticTimes` is the one tabulated form that every static solver
reads, whichever way it was produced.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from ..instance import Instance, InstanceError

__all__ = [
    "Phase",
    "StaticLatencyModel",
    "StaticTimes",
    "UNITS",
    "available_static_profiles",
    "decode_features",
    "fit_phase",
    "fit_static_latency",
    "load_static_latency",
    "static_latency_of",
]

#: Seconds per unit.
UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6}

_PROFILE_PACKAGE = "optsched.problems.static_profiles"


@dataclass(frozen=True)
class Phase:
    """Coefficients of one bilinear phase, ``alpha*b*l + beta*b + gamma*l + delta`` (model unit)."""

    alpha: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0
    delta: float = 0.0

    def __call__(self, b: float, length: float) -> float:
        return self.alpha * b * length + self.beta * b + self.gamma * length + self.delta

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StaticLatencyModel:
    """The static-batch predictor (SLO Eqs. 14-19, SCLS Eqs. 1-4); accessors return seconds.

    Attributes
    ----------
    prefill, decode
        Coefficients of :math:`t_p` and :math:`\\tau_d`, in ``unit``.
    unit
        ``"s"``, ``"ms"`` or ``"us"``.
    name, source
        Profile name and where the coefficients come from.
    """

    prefill: Phase
    decode: Phase
    unit: str = "s"
    name: str = "inline"
    source: str = ""

    @property
    def scale(self) -> float:
        """Seconds per model unit."""
        return UNITS[self.unit]

    def prefill_time(self, b: int, l_in: int) -> float:
        """:math:`t_p(b, l_{in})` in seconds (Eq. 14 / 18)."""
        return self.prefill(b, l_in) * self.scale

    def decode_step(self, b: int, l_acc: int) -> float:
        """:math:`\\tau_d(b, l_a)` in seconds (Eq. 15)."""
        return self.decode(b, l_acc) * self.scale

    def decode_time(self, b: int, l_in: int, l_out: int) -> float:
        """:math:`t_d(b, l_{in}, l_{out}) = \\sum_{k=1}^{l_{out}} \\tau_d(b, l_{in}+k)` in seconds (Eq. 16),
        by the closed form."""
        d = self.decode
        s_sum = l_out * l_in + l_out * (l_out + 1) / 2
        return ((d.alpha * b + d.gamma) * s_sum + (d.beta * b + d.delta) * l_out) * self.scale

    def exec_time(self, b: int, l_in: int, l_out: int) -> float:
        """:math:`t_{exec} = t_p + t_d` in seconds (Eq. 17; SCLS Eq. 1)."""
        return self.prefill_time(b, l_in) + self.decode_time(b, l_in, l_out)

    def tpot(self, b: int, l_in: int, l_out: int) -> float:
        """:math:`t_d / l_{out}` in seconds (Eq. 19)."""
        return self.decode_time(b, l_in, l_out) / l_out

    def serve_time(self, n: int, l_batch: int, slice_len: int) -> float:
        """SCLS batch serving time :math:`T_{serve}(N, L_i, S)` in seconds (SCLS Eqs. 1-4)."""
        return self.exec_time(n, l_batch, slice_len)

    def slice_coefficients(self, slice_len: int) -> tuple[float, float, float, float]:
        """SCLS closed form (docs/scls.md, "Closed form"): ``T_serve = A N L + B N + C L + E`` in seconds.

        Returns
        -------
        (A_S, B_S, C_S, E_S)
        """
        p, d, s = self.prefill, self.decode, slice_len
        tri = s * (s + 1) / 2
        return (
            (p.alpha + s * d.alpha) * self.scale,
            (p.beta + s * d.beta + d.alpha * tri) * self.scale,
            (p.gamma + s * d.gamma) * self.scale,
            (p.delta + s * d.delta + d.gamma * tri) * self.scale,
        )

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}


@dataclass(frozen=True)
class StaticTimes:
    """Tabulated times per (request, batch size), in seconds; row ``i``, column ``b - 1``.

    Attributes
    ----------
    exec, prefill, tpot
        :math:`E_i(b)`, :math:`F_i(b)` and :math:`TP_i(b)` for ``b = 1..max_batch_size``.
    """

    exec: np.ndarray
    prefill: np.ndarray
    tpot: np.ndarray

    @property
    def max_batch_size(self) -> int:
        return int(self.exec.shape[1])

    @classmethod
    def from_model(
        cls, model: StaticLatencyModel, l_in: Sequence[int], l_out: Sequence[int], max_batch_size: int
    ) -> StaticTimes:
        """Tabulate the predictor for each request and each batch size ``1..max_batch_size``."""
        sizes = range(1, max_batch_size + 1)
        rows = [
            [(model.exec_time(b, li, lo), model.prefill_time(b, li), model.tpot(b, li, lo)) for b in sizes]
            for li, lo in zip(l_in, l_out)
        ]
        arr = np.asarray(rows, dtype=float).reshape(len(rows), max_batch_size, 3)
        return cls(arr[:, :, 0].copy(), arr[:, :, 1].copy(), arr[:, :, 2].copy())


# ------------------------------------------------------------------------------------------ fitting


def decode_features(b: np.ndarray, l_in: np.ndarray, l_out: np.ndarray) -> np.ndarray:
    """Regressors of whole-request decode times for ``(alpha_d, beta_d, gamma_d, delta_d)``:
    ``[b S, b L, S, L]`` with ``S = L l_in + L (L+1)/2`` (docs/gmax.md, "Latency model")."""
    b, l_in, l_out = (np.asarray(x, dtype=float) for x in (b, l_in, l_out))
    s_sum = l_out * l_in + l_out * (l_out + 1) / 2
    return np.column_stack([b * s_sum, b * l_out, s_sum, l_out])


def fit_phase(b: Sequence[float], length: Sequence[float], times: Sequence[float]) -> Phase:
    """Least-squares fit of ``alpha*b*l + beta*b + gamma*l + delta`` (Eqs. 14/15, SCLS Eqs. 3/4).

    Parameters
    ----------
    b, length, times
        Batch sizes, lengths (input length for prefill, accumulated length for a decode step)
        and measured times, one sample each.
    """
    b_arr, l_arr = np.asarray(b, dtype=float), np.asarray(length, dtype=float)
    features = np.column_stack([b_arr * l_arr, b_arr, l_arr, np.ones_like(b_arr)])
    return Phase(*_lstsq(features, times))


def fit_static_latency(
    prefill_samples: tuple[Sequence[float], Sequence[float], Sequence[float]],
    decode_samples: tuple[Sequence[float], ...],
    unit: str = "s",
    source: str = "least-squares fit",
) -> StaticLatencyModel:
    """Fit the whole predictor by least squares.

    Parameters
    ----------
    prefill_samples
        ``(b, l_in, t_p)``.
    decode_samples
        Either ``(b, l_acc, tau_d)`` (per-step timings) or ``(b, l_in, l_out, t_d)`` (whole decode
        times, fitted on :func:`decode_features`).
    unit
        Unit of the measured times.
    """
    prefill = fit_phase(*prefill_samples)
    if len(decode_samples) == 3:
        decode = fit_phase(*decode_samples)
    elif len(decode_samples) == 4:
        b, l_in, l_out, t_d = decode_samples
        decode = Phase(*_lstsq(decode_features(b, l_in, l_out), t_d))
    else:
        raise ValueError("decode_samples must be (b, l_acc, tau) or (b, l_in, l_out, t_d)")
    return StaticLatencyModel(prefill, decode, unit=unit, source=source)


def _lstsq(features: np.ndarray, times: Sequence[float]) -> list[float]:
    y = np.asarray(times, dtype=float)
    if features.shape[0] < features.shape[1]:
        raise ValueError(f"need at least {features.shape[1]} samples, got {features.shape[0]}")
    coef, *_ = np.linalg.lstsq(features, y, rcond=None)
    return [float(c) for c in coef]


# ------------------------------------------------------------------------------- profiles and JSON


def available_static_profiles() -> list[str]:
    """Names of the shipped static-latency profiles."""
    root = resources.files(_PROFILE_PACKAGE)
    return sorted(p.name[: -len(".toml")] for p in root.iterdir() if p.name.endswith(".toml"))


def _phase_from(data: Any, where: str) -> Phase:
    if not isinstance(data, Mapping):
        raise InstanceError(f"{where}: must be an object with alpha, beta, gamma, delta")
    unknown = set(data) - {"alpha", "beta", "gamma", "delta"}
    if unknown:
        raise InstanceError(f"{where}: unknown field(s) {sorted(unknown)}")
    values = {}
    for key in ("alpha", "beta", "gamma", "delta"):
        v = data.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InstanceError(f"{where}.{key}: must be a finite number, got {v!r}")
        values[key] = float(v)
    return Phase(**values)


def load_static_latency(spec: str | Mapping[str, Any], where: str = "static_latency") -> StaticLatencyModel:
    """A predictor from a shipped profile name or the JSON object
    ``{"unit": "ms", "prefill": {alpha, beta, gamma, delta}, "decode": {...}}``.

    Raises
    ------
    InstanceError
        Naming the field that is wrong.
    """
    name, source = "inline", ""
    if isinstance(spec, str):
        resource = resources.files(_PROFILE_PACKAGE).joinpath(f"{spec}.toml")
        if not resource.is_file():
            raise InstanceError(f"{where}: unknown profile {spec!r} (known: {', '.join(available_static_profiles())})")
        with resource.open("rb") as fh:
            data: Mapping[str, Any] = tomllib.load(fh)
        name, source = spec, str(data.get("source", ""))
    elif isinstance(spec, Mapping):
        data = spec
        unknown = set(data) - {"unit", "prefill", "decode", "name", "source"}
        if unknown:
            raise InstanceError(f"{where}: unknown field(s) {sorted(unknown)}")
        source = str(data.get("source", ""))
    else:
        raise InstanceError(f"{where}: must be a profile name or an object")
    unit = data.get("unit", "s")
    if unit not in UNITS:
        raise InstanceError(f"{where}.unit: must be one of {sorted(UNITS)}, got {unit!r}")
    return StaticLatencyModel(
        _phase_from(data.get("prefill"), f"{where}.prefill"),
        _phase_from(data.get("decode"), f"{where}.decode"),
        unit=unit,
        name=name,
        source=source,
    )


def static_latency_of(instance: Instance) -> StaticLatencyModel | None:
    """The instance's ``static_latency`` predictor, or None when it has none."""
    spec = instance.extra.get("static_latency")
    if spec is None:
        return None
    return load_static_latency(spec, where=f"{instance.name}: static_latency")

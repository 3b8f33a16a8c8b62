"""The iteration cost model of the contract (docs/costmodel.md) and its profiles.

The time of a non-empty batch, in seconds, is

.. math::

    T = L \\cdot \\big( b + a N_{tok}
        + [N_{pre} > 0] (p_b + p_a N_{pre} + p_q S_{pre})
        + [N_{dec} > 0] (d_b + d_a N_{dec} + d_k KV_{dec}) \\big)

with :math:`N_{tok}` the tokens processed, :math:`N_{pre}` the prefill tokens, :math:`S_{pre}` the sum
of squared prefill chunk sizes, :math:`N_{dec}` the decode items and :math:`KV_{dec}` the KV slots the
decode items read (their ``m`` before processing). An empty batch costs 0.

Profiles live in ``models/*.toml`` (shipped as ``optsched.data_models``); each names its source.
:func:`fit_linear` fits ``base`` and ``per_token`` from measured batch times by least squares;
:func:`fit_terms` fits every term (module docstring of :func:`fit_terms` says how and why).
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TextIO

import numpy as np

from .jsonio import read_text, read_toml

__all__ = [
    "MAX_MEASURED_SECONDS",
    "CostModel",
    "CostModelError",
    "LinearFit",
    "PhaseCost",
    "available_profiles",
    "check_profile_toml",
    "cost_model_from_mapping",
    "features_of",
    "FEATURES",
    "FIT_LOSSES",
    "FIT_TERMS",
    "TermsFit",
    "fit_linear",
    "fit_terms",
    "is_vidur_profile",
    "linear_errors",
    "load_cost_model",
    "profile_toml",
    "read_measurements_csv",
    "read_vidur_mlp_profile",
]


#: The arguments of :meth:`CostModel.batch_time`, in order: the per-batch features of every
#: replay, plan step and measured step.
FEATURES: tuple[str, ...] = ("n_tok", "n_pre", "s_pre", "n_dec", "kv_dec", "x_pre")


def features_of(mapping: Mapping[str, Any]) -> tuple[int, ...]:
    """The :data:`FEATURES` of a JSON ``features`` object as integers; ``x_pre`` may be absent (0:
    files written before the prefill-context term); a missing other one is a ``KeyError``."""
    return tuple(int(mapping.get(k, 0) if k == "x_pre" else mapping[k]) for k in FEATURES)


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

    def batch_time(self, n_tok: int, n_pre: int, s_pre: int, n_dec: int, kv_dec: int, x_pre: int = 0) -> float:
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
        """
        if n_tok == 0:
            return 0.0
        t = self.base + self.per_token * n_tok
        if n_pre > 0:
            p = self.prefill
            t += p.bias + p.per_token * n_pre + p.per_token_sq * s_pre + p.per_ctx * x_pre
        if n_dec > 0:
            d = self.decode
            t += d.bias + d.per_token * n_dec + d.per_kv * kv_dec
        return self.layers * t

    def prefill_time(self, chunk: int, cached: int = 0) -> float:
        """Time of a batch holding one prefill chunk of ``chunk`` tokens, over ``cached`` tokens
        already in the request's KV, and nothing else."""
        return self.batch_time(chunk, chunk, chunk * chunk, 0, 0, chunk * cached)

    def decode_time(self, n_dec: int, kv_dec: int) -> float:
        """Time of a decode-only batch of ``n_dec`` items reading ``kv_dec`` KV slots."""
        return self.batch_time(n_dec, 0, 0, n_dec, kv_dec)

    def to_dict(self) -> dict[str, Any]:
        """The inline JSON form of the contract (docs/costmodel.md); ``prefill.per_ctx`` only when > 0."""
        phase = lambda p: {  # noqa: E731 - tiny local projection
            "bias": p.bias,
            "per_token": p.per_token,
            "per_token_sq": p.per_token_sq,
            "per_kv": p.per_kv,
        }
        prefill = phase(self.prefill) | ({"per_ctx": self.prefill.per_ctx} if self.prefill.per_ctx else {})
        return {
            "layers": self.layers,
            "base": self.base,
            "per_token": self.per_token,
            "prefill": prefill,
            "decode": phase(self.decode),
        }


_PHASE_KEYS = {"bias", "per_token", "per_token_sq", "per_kv", "per_ctx"}
#: Phase coefficients that no term of the batch time uses: accepted only as 0.
_UNUSED = {"prefill": ("per_kv",), "decode": ("per_token_sq", "per_ctx")}
_TOP_KEYS = {"layers", "base", "per_token", "prefill", "decode", "name", "source"}


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
    for key in _UNUSED[where.rsplit(".", 1)[-1]]:
        if getattr(phase, key) != 0:
            raise CostModelError(f"{where}.{key}: no term of the batch time uses it; must be 0, got {getattr(phase, key)!r}")
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
    return CostModel(
        name=str(data.get("name", name)),
        layers=layers,
        base=_number(data.get("base", 0.0), "cost_model.base"),
        per_token=_number(data.get("per_token", 0.0), "cost_model.per_token"),
        prefill=_phase(data.get("prefill"), "cost_model.prefill"),
        decode=_phase(data.get("decode"), "cost_model.decode"),
        source=str(data.get("source", "")),
    )


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
        raise CostModelError(
            f"cost_model: unknown profile {spec!r} (known: {', '.join(available_profiles())})"
        )
    with resource.open("rb") as fh:
        return cost_model_from_mapping(tomllib.load(fh), name=spec)


@dataclass(frozen=True)
class LinearFit:
    """Result of :func:`fit_linear`: ``time ~ base + per_token * tokens``."""

    base: float
    per_token: float
    mean_abs_pct_error: float
    max_abs_pct_error: float
    r_squared: float


def fit_linear(tokens: np.ndarray, times: np.ndarray) -> LinearFit:
    """Fit ``base`` and ``per_token`` from measured batch times by least squares.

    Parameters
    ----------
    tokens
        Token counts of the measured batches.
    times
        Measured times (any unit; the coefficients come out in the same unit).

    Returns
    -------
    LinearFit
        The coefficients and the fit's relative errors over the measurements.
    """
    x = np.asarray(tokens, dtype=float)
    y = np.asarray(times, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError("fit_linear needs two 1-D arrays of equal length >= 2")
    design = np.column_stack([np.ones_like(x), x])
    (base, per_token), *_ = np.linalg.lstsq(design, y, rcond=None)
    ss_res = float(np.sum((y - (base + per_token * x)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    mean_err, max_err = linear_errors(float(base), float(per_token), x, y)
    return LinearFit(
        base=float(base),
        per_token=float(per_token),
        mean_abs_pct_error=mean_err,
        max_abs_pct_error=max_err,
        r_squared=1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
    )


#: The contract's terms fitted by :func:`fit_terms`. ``decode.per_token`` is left out: ``N_tok =
#: N_pre + N_dec``, so only two of the three token slopes are identifiable.
FIT_TERMS: tuple[str, ...] = (
    "base", "per_token", "prefill.bias", "prefill.per_token", "prefill.per_token_sq", "prefill.per_ctx",
    "decode.bias", "decode.per_kv",
)
#: Losses of :func:`fit_terms`: least absolute relative error, or least squares of relative errors.
FIT_LOSSES = ("l1", "l2")


@dataclass(frozen=True)
class TermsFit:
    """Result of :func:`fit_terms`: a whole-model profile (``layers = 1``) and its fit quality."""

    model: CostModel
    mean_abs_pct_error: float
    max_abs_pct_error: float
    r_squared: float
    dropped: tuple[str, ...]


def _term_columns(features: np.ndarray) -> np.ndarray:
    """One column per term of :data:`FIT_TERMS` from ``(n, 5)`` or ``(n, 6)`` features (no
    ``x_pre`` column: 0)."""
    n_tok, n_pre, s_pre, n_dec, kv_dec = (features[:, k].astype(float) for k in range(5))
    x_pre = features[:, 5].astype(float) if features.shape[1] > 5 else np.zeros_like(n_tok)
    return np.column_stack([np.ones_like(n_tok), n_tok, (n_pre > 0).astype(float), n_pre, s_pre, x_pre,
                            (n_dec > 0).astype(float), kv_dec])


def _least_absolute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin_{x >= 0} sum_i |(a x - b)_i|``: the linear program min sum t, -t <= a x - b <= t, by HiGHS."""
    import highspy

    n, k = a.shape
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    h.addVars(k + n, np.zeros(k + n), np.full(k + n, inf))
    h.changeColsCost(n, np.arange(k, k + n, dtype=np.int32), np.ones(n))
    for i in range(n):
        idx = np.append(np.arange(k, dtype=np.int32), np.int32(k + i))
        h.addRow(-inf, b[i], k + 1, idx, np.append(a[i], -1.0))
        h.addRow(b[i], inf, k + 1, idx, np.append(a[i], 1.0))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise ValueError(f"fit_terms: the L1 fit was not solved ({h.modelStatusToString(h.getModelStatus())})")
    return np.maximum(np.array(h.getSolution().col_value[:k]), 0.0)


def _least_squares_nonnegative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin_{x >= 0} ||a x - b||``, exactly: the optimum is the unconstrained least-squares
    solution on its own support, so the best non-negative solution over every support (2^k - 1 of
    them, k <= 8) is it."""
    best, best_x = math.inf, np.zeros(a.shape[1])
    for mask in range(1, 1 << a.shape[1]):
        support = [j for j in range(a.shape[1]) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(a[:, support], b, rcond=None)
        if np.any(sol < 0):
            continue
        residual = float(np.sum((a[:, support] @ sol - b) ** 2))
        if residual < best:
            best, best_x = residual, np.zeros(a.shape[1])
            best_x[support] = sol
    return best_x


def fit_terms(features: np.ndarray, times: np.ndarray, name: str = "fitted", loss: str = "l1",
              weights: np.ndarray | None = None) -> TermsFit:
    """Fit the contract's cost-model terms to measured batch times: relative error, coefficients >= 0.

    Every row is divided by its measured time, so the fit minimises *relative* errors (step times
    span two orders of magnitude: an absolute fit would serve the longest steps and leave the many
    short ones, which dominate decode-heavy schedules, tens of percent off). Coefficients are
    constrained to be >= 0 (the contract's rule, on which every proven bound relies), as one
    optimisation problem rather than by dropping negative terms one at a time.

    - ``loss="l1"`` (default): least absolute relative error, i.e. the least mean absolute
      percentage error (the figure ``validate`` reports), a linear program solved by HiGHS. It is
      robust to step shapes the linear form cannot represent (a GPU's latency-bound attention of a
      few long requests; the flat cost of small batches): they stay outliers instead of pulling
      every coefficient.
    - ``loss="l2"``: non-negative least squares of relative errors, solved exactly over supports.

    Columns are scaled to unit norm before solving (conditioning; the solution is invariant).

    Parameters
    ----------
    features
        Array ``(n, 6)`` of ``n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre`` per measured (non-empty)
        batch; ``(n, 5)`` without ``x_pre`` (then ``prefill.per_ctx`` is not fitted).
    times
        Measured batch times in seconds (> 0).
    name
        Name of the fitted profile.
    loss
        ``"l1"`` or ``"l2"`` (:data:`FIT_LOSSES`).
    weights
        Optional weight >= 0 per row, multiplying its term of the loss (its absolute relative error
        for ``l1``, its square for ``l2``): an integer weight counts the row that many times. The
        reported errors stay unweighted. Default: all 1.
    """
    x = np.asarray(features, dtype=float)
    y = np.asarray(times, dtype=float)
    if x.ndim != 2 or x.shape[1] not in (5, 6) or len(x) != len(y) or len(y) < 2:
        raise ValueError("fit_terms needs an (n, 5) or (n, 6) feature array and n >= 2 times")
    if loss not in FIT_LOSSES:
        raise ValueError(f"fit_terms: unknown loss {loss!r} (known: {', '.join(FIT_LOSSES)})")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("fit_terms: every measured time must be a finite number > 0")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != y.shape or np.any(~np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("fit_terms: weights must be one finite number >= 0 per row, not all 0")
    cols = _term_columns(x)
    active = [k for k in range(cols.shape[1]) if np.any(cols[w > 0, k] != 0)]
    factor = w if loss == "l1" else np.sqrt(w)  # w |r| for l1, w r^2 for l2
    scaled = cols[:, active] / y[:, None] * factor[:, None]
    norms = np.linalg.norm(scaled, axis=0)
    solve = _least_absolute if loss == "l1" else _least_squares_nonnegative
    coef = np.zeros(cols.shape[1])
    coef[active] = solve(scaled / norms, factor) / norms
    values = dict(zip(FIT_TERMS, coef.tolist()))
    model = cost_model_from_mapping({
        "layers": 1, "base": values["base"], "per_token": values["per_token"],
        "prefill": {"bias": values["prefill.bias"], "per_token": values["prefill.per_token"],
                    "per_token_sq": values["prefill.per_token_sq"], "per_ctx": values["prefill.per_ctx"]},
        "decode": {"bias": values["decode.bias"], "per_kv": values["decode.per_kv"]},
    }, name=name)
    pred = cols @ coef
    rel = np.abs(pred - y) / y
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return TermsFit(model, float(100 * rel.mean()), float(100 * rel.max()),
                    1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
                    tuple(t for k, t in enumerate(FIT_TERMS) if k not in active))


def linear_errors(base: float, per_token: float, tokens: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Mean and max absolute percentage error of ``base + per_token * tokens`` against ``times``."""
    x = np.asarray(tokens, dtype=float)
    y = np.asarray(times, dtype=float)
    rel = np.abs(base + per_token * x - y) / np.abs(y)
    return float(100 * rel.mean()), float(100 * rel.max())


#: Time units accepted by :func:`read_measurements_csv`, in seconds.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def read_measurements_csv(
    path: str, tokens_column: str = "tokens", time_column: str = "time", unit: str = "s"
) -> tuple[np.ndarray, np.ndarray]:
    """Read measured batch times: one row per measurement, token count and time columns.

    Returns the token counts and the times converted to seconds.

    Raises
    ------
    CostModelError
        Naming the file, the row and the column of a bad value, or a missing column.
    """
    if unit not in TIME_UNITS:
        raise CostModelError(f"unknown time unit {unit!r} (known: {', '.join(TIME_UNITS)})")
    tokens, times = [], []
    with _open_csv(path) as fh:
        reader = csv.DictReader(fh)
        for col in (tokens_column, time_column):
            if col not in (reader.fieldnames or []):
                raise CostModelError(f"{path}: missing column {col!r} (columns: {', '.join(reader.fieldnames or [])})")
        for k, row in enumerate(reader, start=2):
            try:
                x, y = float(row[tokens_column]), float(row[time_column])
            except (TypeError, ValueError):
                raise CostModelError(f"{path}: line {k}: not a number in {tokens_column!r} or {time_column!r}") from None
            seconds = y * TIME_UNITS[unit]
            if not (math.isfinite(x) and math.isfinite(y)) or x < 0 or x != int(x) or not 0 < seconds <= MAX_MEASURED_SECONDS:
                raise CostModelError(f"{path}: line {k}: tokens must be an integer >= 0 and time in "
                                     f"(0, {MAX_MEASURED_SECONDS:g}] s, got {row[tokens_column]!r}, {row[time_column]!r}")
            tokens.append(x)
            times.append(seconds)
    if len(tokens) < 2:
        raise CostModelError(f"{path}: at least two measurements are needed, found {len(tokens)}")
    if len(set(tokens)) < 2:
        raise CostModelError(f"{path}: every measurement has {tokens[0]:g} tokens: per_token cannot be fitted; "
                             "measure at least two token counts")
    return np.array(tokens), np.array(times)


def _open_csv(path: str) -> TextIO:
    """A measurement CSV's UTF-8 text; an unreadable or non-UTF-8 file is a :class:`CostModelError`
    naming it."""
    return io.StringIO(read_text(path, CostModelError), newline="")


def is_vidur_profile(path: str) -> bool:
    """Whether a CSV is a Vidur operator profile (``time_stats.<op>.mean`` columns)."""
    with _open_csv(path) as fh:
        header = next(csv.reader(fh), [])
    return any(h.startswith("time_stats.") and h.endswith(".mean") for h in header)


def _vidur_row(path: str, line: int, row: Mapping[str, str], ops: list[str]) -> tuple[int, float, float]:
    """(tensor-parallel workers, tokens, sum of the operators' mean milliseconds) of one profile row."""
    try:
        tp = int(row.get("num_tensor_parallel_workers") or 1)
        tokens = float(row["num_tokens"])
        ms = math.fsum(float(row[op]) for op in ops)
    except (TypeError, ValueError):
        raise CostModelError(f"{path}: line {line}: not a number in num_tokens, num_tensor_parallel_workers "
                             "or a time_stats column") from None
    if not (math.isfinite(tokens) and tokens >= 0 and math.isfinite(ms) and 0 < ms * TIME_UNITS["ms"] <= MAX_MEASURED_SECONDS):
        raise CostModelError(f"{path}: line {line}: tokens must be >= 0 and the operators' time in "
                             f"(0, {MAX_MEASURED_SECONDS:g}] s")
    return tp, tokens, ms


def read_vidur_mlp_profile(path: str, tensor_parallel: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Non-attention time per layer from a Vidur ``mlp_<gpu>_<model>.csv`` profile.

    For each token count measured with ``num_tensor_parallel_workers == tensor_parallel``, the sum of
    the per-operator mean times (averaged over repeated rows of the same token count) (every ``time_stats.<op>.mean``
    column: embedding, layer norms, QKV/output projections, rotary, MLP up/act/down, residual add). Vidur records
    milliseconds.

    Returns
    -------
    tokens, seconds
        Sorted by token count; times in seconds per layer.
    """
    with _open_csv(path) as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        ops = [h for h in header if h.startswith("time_stats.") and h.endswith(".mean")]
        if not ops or "num_tokens" not in header:
            raise CostModelError(f"{path}: not a Vidur operator profile (no time_stats.*.mean / num_tokens columns)")
        parsed = [_vidur_row(path, k, r, ops) for k, r in enumerate(reader, start=2)]
    rows = [(tokens, ms) for tp, tokens, ms in parsed if tp == tensor_parallel]
    if len(rows) < 2:
        raise CostModelError(f"{path}: fewer than two rows with num_tensor_parallel_workers = {tensor_parallel}")
    raw_tokens = np.array([tokens for tokens, _ in rows])
    raw_times = np.array([ms for _, ms in rows]) * TIME_UNITS["ms"]
    tokens, where = np.unique(raw_tokens, return_inverse=True)  # sorted; repeated runs are averaged
    if len(tokens) < 2:
        raise CostModelError(f"{path}: every row has {tokens[0]:g} tokens: per_token cannot be fitted")
    times = np.bincount(where, weights=raw_times) / np.bincount(where)
    return tokens, times


def check_profile_toml(text: str) -> CostModel:
    """The cost model a profile TOML text (:func:`profile_toml`) describes; a CostModelError when it
    is not one (a fitted coefficient negative or beyond :data:`MAX_COEFFICIENT`)."""
    return cost_model_from_mapping(tomllib.loads(text))


def profile_toml(
    name: str, source: str, base: float, per_token: float, template: CostModel | None = None
) -> str:
    """A profile TOML with fitted ``base``/``per_token``; layers and phase terms from ``template``."""
    t = template or CostModel()

    def phase(title: str, p: PhaseCost, terms: tuple[str, ...]) -> str:
        return f"\n[{title}]\n" + "".join(f"{t} = {getattr(p, t)!r}\n" for t in terms)

    head = (f"# Written by optsched: {source}\n"
            f"name = {json.dumps(name)}\nsource = {json.dumps(source)}\nlayers = {t.layers!r}\n"
            f"base = {base!r}\nper_token = {per_token!r}\n")
    return (head + phase("prefill", t.prefill, ("bias", "per_token", "per_token_sq", "per_ctx"))
            + phase("decode", t.decode, ("bias", "per_token", "per_kv")))

"""Fitting the iteration cost model (docs/costmodel.md) to measured batch times, and profile files.

:func:`fit_linear` fits ``base`` and ``per_token`` from measured batch times by least squares (a
Vidur operator profile or a CSV of batch times); :func:`fit_terms` fits every term of the contract's
form, the tile term included, to measured steps (its docstring says how and why);
:func:`profile_toml` writes a profile.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from .costmodel import MAX_MEASURED_SECONDS, CostModel, CostModelError, PhaseCost, cost_model_from_mapping
from .jsonio import read_text

__all__ = [
    "FIT_LOSSES",
    "FIT_TERMS",
    "LinearFit",
    "TIME_UNITS",
    "TILE_CHOICES",
    "TermsFit",
    "best_tile_fit",
    "check_profile_toml",
    "fit_linear",
    "fit_terms",
    "is_vidur_profile",
    "linear_errors",
    "profile_toml",
    "read_measurements_csv",
    "read_vidur_mlp_profile",
]


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


#: The terms fitted by :func:`fit_terms`, as reported. ``N_tok = N_pre + N_dec``, so the three token
#: slopes are fitted as two, a prefill token's and a decode item's: ``per_token`` is the smaller,
#: ``prefill.per_token`` and ``decode.per_token`` what each adds to it (one of them 0).
FIT_TERMS: tuple[str, ...] = (
    "base",
    "per_token",
    "per_tile",
    "prefill.bias",
    "prefill.per_token",
    "prefill.per_token_sq",
    "prefill.per_ctx",
    "decode.bias",
    "decode.per_token",
    "decode.per_kv",
    "decode.per_max_kv",
)
#: The columns of the fit: :data:`FIT_TERMS` with the two token slopes in place of the three.
_COLUMNS: tuple[str, ...] = (
    "base",
    "prefill token",
    "decode token",
    "per_tile",
    "prefill.bias",
    "prefill.per_token_sq",
    "prefill.per_ctx",
    "decode.bias",
    "decode.per_kv",
    "decode.per_max_kv",
)
#: Losses of :func:`fit_terms`: least absolute relative error, or least squares of relative errors.
FIT_LOSSES = ("l1", "l2")
#: Tile sizes :func:`best_tile_fit` tries: GPU matrix-product row tiles are powers of two.
TILE_CHOICES: tuple[int, ...] = (16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class TermsFit:
    """Result of :func:`fit_terms`: a whole-model profile (``layers = 1``) and its fit quality.

    ``loss`` is the fitted loss (mean absolute relative error for ``l1``, mean squared relative
    error for ``l2``, weighted as the fit); the error percentages are unweighted; ``dropped`` the
    terms no row informs (all-zero columns)."""

    model: CostModel
    mean_abs_pct_error: float
    max_abs_pct_error: float
    r_squared: float
    dropped: tuple[str, ...]
    loss: float = 0.0


def _term_columns(features: np.ndarray, token_tile: int | None) -> np.ndarray:
    """One column per entry of :data:`_COLUMNS` from ``(n, 5..7)`` features (a missing ``x_pre`` or
    ``kv_max`` column, or ``token_tile`` None: that column is 0)."""
    n_tok, n_pre, s_pre, n_dec, kv_dec = (features[:, k].astype(float) for k in range(5))
    zero = np.zeros_like(n_tok)
    x_pre = features[:, 5].astype(float) if features.shape[1] > 5 else zero
    kv_max = features[:, 6].astype(float) if features.shape[1] > 6 else zero
    tiles = np.ceil(n_tok / token_tile) if token_tile else zero
    return np.column_stack([
        np.ones_like(n_tok),
        n_pre,
        n_dec,
        tiles,
        (n_pre > 0).astype(float),
        s_pre,
        x_pre,
        (n_dec > 0).astype(float),
        kv_dec,
        kv_max,
    ])


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
    them, k <= 10) is it."""
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


def fit_terms(
    features: np.ndarray,
    times: np.ndarray,
    name: str = "fitted",
    loss: str = "l1",
    weights: np.ndarray | None = None,
    token_tile: int | None = None,
) -> TermsFit:
    """Fit the contract's cost-model terms to measured batch times: relative error, coefficients >= 0.

    Every row is divided by its measured time, so the fit minimises *relative* errors (step times
    span two orders of magnitude: an absolute fit would serve the longest steps and leave the many
    short ones, which dominate decode-heavy schedules, tens of percent off). Coefficients are
    constrained to be >= 0 (the contract's rule, on which every proven bound relies), as one
    optimisation problem rather than by dropping negative terms one at a time.

    - ``loss="l1"`` (default): least absolute relative error, i.e. the least mean absolute
      percentage error (the figure ``validate`` reports), a linear program solved by HiGHS. It is
      robust to step shapes no term represents: they stay outliers instead of pulling every
      coefficient.
    - ``loss="l2"``: non-negative least squares of relative errors, solved exactly over supports.

    Columns are scaled to unit norm before solving (conditioning; the solution is invariant).

    Parameters
    ----------
    features
        Array ``(n, 7)`` of :data:`~optsched.costmodel.FEATURES` per measured (non-empty) batch;
        ``(n, 5)`` or ``(n, 6)`` without ``x_pre``/``kv_max`` (their terms are then not fitted).
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
    token_tile
        Fit the tile term ``per_tile * ceil(N_tok / token_tile)`` with this tile (tokens); None:
        no tile term. :func:`best_tile_fit` chooses it.
    """
    x = np.asarray(features, dtype=float)
    y = np.asarray(times, dtype=float)
    if x.ndim != 2 or x.shape[1] not in (5, 6, 7) or len(x) != len(y) or len(y) < 2:
        raise ValueError("fit_terms needs an (n, 5), (n, 6) or (n, 7) feature array and n >= 2 times")
    if loss not in FIT_LOSSES:
        raise ValueError(f"fit_terms: unknown loss {loss!r} (known: {', '.join(FIT_LOSSES)})")
    if token_tile is not None and (isinstance(token_tile, bool) or not isinstance(token_tile, int) or token_tile < 1):
        raise ValueError(f"fit_terms: token_tile must be an integer >= 1, got {token_tile!r}")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("fit_terms: every measured time must be a finite number > 0")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != y.shape or np.any(~np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("fit_terms: weights must be one finite number >= 0 per row, not all 0")
    cols = _term_columns(x, token_tile)
    active = [k for k in range(cols.shape[1]) if np.any(cols[w > 0, k] != 0)]
    factor = w if loss == "l1" else np.sqrt(w)  # w |r| for l1, w r^2 for l2
    scaled = cols[:, active] / y[:, None] * factor[:, None]
    norms = np.linalg.norm(scaled, axis=0)
    solve = _least_absolute if loss == "l1" else _least_squares_nonnegative
    coef = np.zeros(cols.shape[1])
    coef[active] = solve(scaled / norms, factor) / norms
    model = _fitted_model(dict(zip(_COLUMNS, coef.tolist())), name, token_tile, active)
    pred = cols @ coef
    rel = (pred - y) / y
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    informed = {_COLUMNS[k] for k in active}
    slopes = {"prefill token", "decode token"} & informed
    informed |= {"per_token"} if slopes else set()
    informed |= {"prefill.per_token", "decode.per_token"} if len(slopes) == 2 else set()
    dropped = [t for t in FIT_TERMS if t not in informed]
    return TermsFit(
        model,
        float(100 * np.abs(rel).mean()),
        float(100 * np.abs(rel).max()),
        1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
        tuple(dropped),
        float(np.average(np.abs(rel) if loss == "l1" else rel**2, weights=w)),
    )


def _fitted_model(values: dict[str, float], name: str, token_tile: int | None, active: list[int]) -> CostModel:
    """The profile of fitted column values: the two token slopes split into ``per_token`` (the
    smaller of the informed ones) and what each phase adds to it; no tile term when its fitted
    ``per_tile`` is 0 (a tile that costs nothing does nothing)."""
    slopes = [values[c] for c in ("prefill token", "decode token") if _COLUMNS.index(c) in active]
    shared = min(slopes, default=0.0)
    tile = {"token_tile": token_tile, "per_tile": values["per_tile"]} if token_tile and values["per_tile"] > 0 else {}
    return cost_model_from_mapping(
        {
            "layers": 1,
            "base": values["base"],
            "per_token": shared,
            **tile,
            "prefill": {
                "bias": values["prefill.bias"],
                "per_token": max(values["prefill token"] - shared, 0.0),
                "per_token_sq": values["prefill.per_token_sq"],
                "per_ctx": values["prefill.per_ctx"],
            },
            "decode": {
                "bias": values["decode.bias"],
                "per_token": max(values["decode token"] - shared, 0.0),
                "per_kv": values["decode.per_kv"],
                "per_max_kv": values["decode.per_max_kv"],
            },
        },
        name=name,
    )


def best_tile_fit(
    features: np.ndarray,
    times: np.ndarray,
    name: str = "fitted",
    loss: str = "l1",
    weights: np.ndarray | None = None,
) -> TermsFit:
    """:func:`fit_terms` without a tile term and with each tile of :data:`TILE_CHOICES`: the fit
    of least loss (ties: no tile, then the smaller tile)."""
    fits = [fit_terms(features, times, name, loss, weights, tile) for tile in (None, *TILE_CHOICES)]
    return min(fits, key=lambda f: f.loss)


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
                raise CostModelError(
                    f"{path}: line {k}: not a number in {tokens_column!r} or {time_column!r}"
                ) from None
            seconds = y * TIME_UNITS[unit]
            if (
                not (math.isfinite(x) and math.isfinite(y))
                or x < 0
                or x != int(x)
                or not 0 < seconds <= MAX_MEASURED_SECONDS
            ):
                raise CostModelError(
                    f"{path}: line {k}: tokens must be an integer >= 0 and time in "
                    f"(0, {MAX_MEASURED_SECONDS:g}] s, got {row[tokens_column]!r}, {row[time_column]!r}"
                )
            tokens.append(x)
            times.append(seconds)
    if len(tokens) < 2:
        raise CostModelError(f"{path}: at least two measurements are needed, found {len(tokens)}")
    if len(set(tokens)) < 2:
        raise CostModelError(
            f"{path}: every measurement has {tokens[0]:g} tokens: per_token cannot be fitted; "
            "measure at least two token counts"
        )
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
        raise CostModelError(
            f"{path}: line {line}: not a number in num_tokens, num_tensor_parallel_workers or a time_stats column"
        ) from None
    if not (
        math.isfinite(tokens)
        and tokens >= 0
        and math.isfinite(ms)
        and 0 < ms * TIME_UNITS["ms"] <= MAX_MEASURED_SECONDS
    ):
        raise CostModelError(
            f"{path}: line {line}: tokens must be >= 0 and the operators' time in (0, {MAX_MEASURED_SECONDS:g}] s"
        )
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


def profile_toml(name: str, source: str, base: float, per_token: float, template: CostModel | None = None) -> str:
    """A profile TOML with fitted ``base``/``per_token``; layers, the tile term and the phase terms
    from ``template`` (the optional terms only when set)."""
    t = template or CostModel()

    def phase(title: str, p: PhaseCost, terms: tuple[str, ...], optional: str) -> str:
        shown = terms + ((optional,) if getattr(p, optional) else ())
        return f"\n[{title}]\n" + "".join(f"{k} = {getattr(p, k)!r}\n" for k in shown)

    tile = f"token_tile = {t.token_tile}\nper_tile = {t.per_tile!r}\n" if t.token_tile else ""
    head = (
        f"# Written by optsched: {source}\n"
        f"name = {json.dumps(name)}\nsource = {json.dumps(source)}\nlayers = {t.layers!r}\n"
        f"base = {base!r}\nper_token = {per_token!r}\n{tile}"
    )
    return (
        head
        + phase("prefill", t.prefill, ("bias", "per_token", "per_token_sq"), "per_ctx")
        + phase("decode", t.decode, ("bias", "per_token", "per_kv"), "per_max_kv")
    )

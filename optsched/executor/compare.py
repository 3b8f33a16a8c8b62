"""Predicted against measured step times of an executed plan, and a refit of the cost model.

Works on the result JSON of ``optsched execute`` alone (no vLLM needed). Steps with no tokens
(preemption-only steps, which the cost model prices at 0) are left out of the errors and the fits.

- per step: predicted ``T`` (the plan's cost model), measured (median step wall time, or the model
  time with ``timing="model"``), absolute percentage error ``|pred - meas| / meas``;
- in total: the sums and their relative error; the mean absolute percentage error (MAPE) over steps;
  the worst steps;
- refits from the measured steps: :func:`optsched.costfit.fit_linear` (``base + per_token *
  N_tok``) and :func:`optsched.costfit.fit_terms` (all the contract's terms, non-negative), the
  latter written as a profile TOML that ``load_cost_model`` reads, so a user can re-solve with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..costfit import fit_linear, fit_terms, profile_toml
from ..costmodel import MAX_MEASURED_SECONDS, CostModel, features_of
from ..jsonio import atomic_output
from .run import RESULT_VERSION

__all__ = ["compare", "plot"]


def _seconds(value: Any, where: str, zero: bool) -> float:
    """``value`` as a time in seconds in (0, :data:`MAX_MEASURED_SECONDS`] (or [0, ...] when
    ``zero``), else a ValueError naming ``where``."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (value >= 0 if zero else value > 0)
        and value <= MAX_MEASURED_SECONDS
    )
    if not ok:
        raise ValueError(
            f"{where}: must be a time in {'[' if zero else '('}0, {MAX_MEASURED_SECONDS:g}] s, got {value!r}"
        )
    return float(value)


def _shaped(value: Any, kind: type, where: str, phrase: str) -> Any:
    """``value`` when it is of ``kind``, else ValueError naming the field ``where``."""
    if not isinstance(value, kind):
        got = "null" if value is None else {dict: "an object", list: "a list", str: "a string"}.get(type(value))
        raise ValueError(f"field {where!r}: must be {phrase}, got {got or repr(value)}")
    return value


def _rows(result: Mapping[str, Any], timing: str, model: CostModel | None) -> list[dict[str, Any]]:
    key = {"wall": "measured_time", "model": "model_time"}[timing]
    if result.get("version") != RESULT_VERSION:
        raise ValueError(
            f"field 'version': {result.get('version')!r} is not a result version this optsched reads ({RESULT_VERSION})"
        )
    _shaped(result.get("run", {}), Mapping, "run", "an object")
    plan = _shaped(result["plan"], Mapping, "plan", "an object")
    plan_steps = _shaped(plan["steps"], list, "plan.steps", "a list")
    rows = []
    seen: dict[int, int] = {}  # plan step -> its entry in steps
    for j, s in enumerate(_shaped(result["steps"], list, "steps", "a list")):
        k = _shaped(s, Mapping, f"steps[{j}]", "an object")["step"]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(plan_steps):
            raise ValueError(f"field 'steps': step {k!r}: not a step of the plan (0..{len(plan_steps) - 1})")
        if k in seen:
            raise ValueError(f"field 'steps': step {k} measured twice (steps[{seen[k]}] and steps[{j}])")
        seen[k] = j
        plan_step = _shaped(plan_steps[k], Mapping, f"plan.steps[{k}]", "an object")
        feats = _shaped(plan_step["features"], Mapping, f"plan.steps[{k}].features", "an object")
        meas = s.get(key)
        if feats["n_tok"] == 0 or meas is None:
            continue
        meas = _seconds(meas, f"step {k}: field {key!r}", zero=False)
        if model is None:
            pred = _seconds(s["predicted_time"], f"step {k}: field 'predicted_time'", zero=True)
        else:
            pred = model.batch_time(*features_of(feats))
        rows.append({
            "step": k,
            "batch": s["batch"],
            "predicted": pred,
            "measured": meas,
            "ape": 100 * abs(pred - meas) / meas,
            "features": list(features_of(feats)),
        })
    return rows


def compare(
    result: Mapping[str, Any],
    *,
    timing: str = "wall",
    worst: int = 5,
    profile_name: str = "fitted",
    model: CostModel | None = None,
) -> dict[str, Any]:
    """Compare predicted with measured step times and refit the cost model.

    Parameters
    ----------
    result
        The result object of ``optsched execute``.
    timing
        ``"wall"`` (engine step wall time) or ``"model"`` (schedule return -> update entry).
    worst
        How many worst steps (largest absolute percentage error) to list.
    profile_name
        Name given to the refitted profile.
    model
        Predict each step under this profile, from the plan's features (e.g. a profile measured on
        the GPU that ran the plan); None: the plan's own predictions.

    Returns
    -------
    dict
        ``steps``, ``mape``, ``predicted_total``, ``measured_total``, ``total_error_pct``,
        ``worst_steps``, ``fit_linear``, ``fit_terms`` (with ``profile`` and ``profile_toml``) and
        ``refit_mape``; fits are None with fewer than 2 measured steps.
    """
    rows = _rows(result, timing, model)
    if not rows:
        raise ValueError("the result has no measured step with tokens")
    pred = np.array([r["predicted"] for r in rows])
    meas = np.array([r["measured"] for r in rows])
    feats = np.array([r["features"] for r in rows])
    out: dict[str, Any] = {
        "timing": timing,
        "steps": rows,
        "compared_steps": len(rows),
        "mape": float(np.mean([r["ape"] for r in rows])),
        "predicted_total": float(pred.sum()),
        "measured_total": float(meas.sum()),
        "total_error_pct": float(100 * (pred.sum() - meas.sum()) / meas.sum()),
        "measured_over_predicted": float(meas.sum() / pred.sum()) if pred.sum() > 0 else math.inf,
        "worst_steps": sorted(rows, key=lambda r: -r["ape"])[:worst],
        "fit_linear": None,
        "fit_terms": None,
    }
    if len(rows) >= 2:
        lin = fit_linear(feats[:, 0], meas)
        out["fit_linear"] = {
            "base": lin.base,
            "per_token": lin.per_token,
            "mape": lin.mean_abs_pct_error,
            "max_ape": lin.max_abs_pct_error,
            "r_squared": lin.r_squared,
        }
        terms = fit_terms(feats, meas, name=profile_name)
        run = result.get("run", {})
        source = (
            f"refit by optsched validate from {len(rows)} measured steps ({timing} time) of plan "
            f"{result['plan'].get('instance')!r}: model {run.get('model')!r}, device {run.get('device')!r}, "
            f"vllm {run.get('vllm')}, {run.get('date')}"
        )
        out["fit_terms"] = {
            "profile": terms.model.to_dict(),
            "mape": terms.mean_abs_pct_error,
            "max_ape": terms.max_abs_pct_error,
            "r_squared": terms.r_squared,
            "dropped_terms": list(terms.dropped),
            "profile_toml": profile_toml(
                profile_name, source, terms.model.base, terms.model.per_token, template=terms.model
            ),
        }
        out["refit_mape"] = terms.mean_abs_pct_error
    return out


def plot(report: Mapping[str, Any], path: str, title: str = "") -> None:
    """Two panels: predicted and measured per step, and measured against predicted (log-log)."""
    from matplotlib.figure import Figure

    rows = report["steps"]
    steps = [r["step"] for r in rows]
    pred = np.array([r["predicted"] for r in rows]) * 1e3
    meas = np.array([r["measured"] for r in rows]) * 1e3
    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(steps, pred, "o-", label="predicted (cost model)")
    ax1.plot(steps, meas, "s-", label=f"measured ({report['timing']})")
    ax1.set_xlabel("engine step")
    ax1.set_ylabel("step time (ms)")
    ax1.set_title(f"per step; MAPE {report['mape']:.1f} %")
    ax1.legend()
    ax2.loglog(pred, meas, "o")
    lo, hi = min(pred.min(), meas.min()), max(pred.max(), meas.max())
    ax2.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = predicted")
    ax2.set_xlabel("predicted (ms)")
    ax2.set_ylabel("measured (ms)")
    ax2.set_title(f"total: predicted {pred.sum():.3g} ms, measured {meas.sum():.3g} ms")
    ax2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")

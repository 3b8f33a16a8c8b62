"""``optsched fit MEASUREMENTS [--compare PROFILE] [--out PROFILE.toml] [--json]``.

A step-measurement JSON file (:mod:`optsched.measured`: measured engine steps with their items) is
fitted on every term of the contract (:func:`optsched.costfit.fit_terms`, ``--loss l1|l2``,
``--timing gpu|wall``, ``--token-tile auto|none|N``: by default the tile of least loss,
:func:`optsched.costfit.best_tile_fit`): a whole-model profile, with the error per step kind. These
three options are refused for the CSV inputs below, and theirs (``--tp`` for a Vidur profile,
``--tokens-column``, ``--time-column`` and ``--unit`` for a plain CSV, ``--compare`` for both) for
the others: an option that would do nothing is bad input, as is an ``--out`` not ending in ``.toml``.

Otherwise the cost model's non-attention terms ``base`` + ``per_token`` * tokens (seconds, per layer) are
fitted by least squares (:func:`optsched.costfit.fit_linear`). Two CSV inputs are understood:

- a Vidur operator profile (``mlp_<gpu>_<model>.csv``): per token count, the sum of the per-operator
  mean times for ``--tp`` tensor-parallel workers (milliseconds, converted);
- any CSV of measured batch times, with ``--tokens-column`` and ``--time-column`` in ``--unit``.

``--compare`` reports a shipped profile's ``base``/``per_token`` and their error on the same data;
``--out`` writes a profile TOML with the fitted terms. A Vidur profile measures the non-attention
operators of one layer: the profile written takes ``layers``, the tile and the prefill/decode terms
from ``--compare`` when given (else ``layers = 1`` and zeros). Measured batch times are whole steps
of the whole model, attention included: ``--compare``'s profile is read in its whole-model form
(:meth:`~optsched.costmodel.CostModel.whole_model`, every price times its ``layers``) for the
comparison, and the profile written is the fit alone (``layers = 1``, no phase terms, which token
counts alone cannot separate; a step-measurement file fits every term).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..costfit import (
    FIT_LOSSES,
    TILE_CHOICES,
    TIME_UNITS,
    check_profile_toml,
    fit_linear,
    is_vidur_profile,
    linear_errors,
    profile_toml,
    read_measurements_csv,
    read_vidur_mlp_profile,
)
from ..costmodel import MAX_TOKEN_TILE, CostModelError, load_cost_model
from ..jsonio import write_text_atomic
from ._common import (
    EXIT_OK,
    BadInput,
    add_json_flag,
    check_profile_out,
    format_mapping,
    nonempty_text,
    positive_int,
    print_json,
)


def write_profile(out: str, text: str, source: str) -> None:
    """Write a fitted profile's TOML ``text`` to ``out`` only when it is a cost model
    (:func:`~optsched.costfit.check_profile_toml`); else bad input naming the measurements ``source``."""
    try:
        check_profile_toml(text)
    except CostModelError as exc:
        raise BadInput(f"{source}: the fitted profile is not a cost model ({exc}); {out} not written") from None
    write_text_atomic(out, text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit base/per_token of the cost model from measured times")
    p.add_argument("measurements", metavar="MEASUREMENTS.csv", help="Vidur operator profile or measured batch times")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel workers (Vidur profiles; default 1)")
    p.add_argument("--tokens-column", help="token-count column of a plain CSV (default tokens)")
    p.add_argument("--time-column", help="time column of a plain CSV (default time)")
    p.add_argument("--unit", choices=sorted(TIME_UNITS), help="time unit of a plain CSV (default s)")
    p.add_argument("--compare", metavar="PROFILE", help="CSV inputs: compare with this profile's base/per_token")
    p.add_argument("--out", metavar="PROFILE.toml", help="write the fitted profile here")
    p.add_argument(
        "--name", type=nonempty_text, help="name of the profile written by --out (default: the output file's stem)"
    )
    p.add_argument(
        "--loss",
        choices=FIT_LOSSES,
        help="step-measurement files: least absolute (l1, default) or squared (l2) relative error",
    )
    p.add_argument(
        "--timing",
        choices=("gpu", "wall"),
        help="step-measurement files: which measured time to fit (default gpu)",
    )
    p.add_argument(
        "--token-tile",
        type=_token_tile,
        metavar="auto|none|N",
        help="step-measurement files: the tile term's tile in tokens, none, or auto (default: the"
        f" fit of least loss without a tile or with one of {', '.join(map(str, TILE_CHOICES))})",
    )
    add_json_flag(p)
    p.set_defaults(func=handle)


def _token_tile(text: str) -> int | str:
    """``--token-tile``: ``auto``, ``none`` or a tile of 1 to MAX_TOKEN_TILE tokens."""
    if text in ("auto", "none"):
        return text
    tile = positive_int(text)
    if tile > MAX_TOKEN_TILE:
        raise argparse.ArgumentTypeError(f"at most {MAX_TOKEN_TILE}, got {tile}")
    return tile


#: The options of step-measurement files, with their defaults.
_STEP_OPTIONS = {"loss": "l1", "timing": "gpu", "token_tile": "auto"}
#: The options of a Vidur operator profile and of a plain CSV of batch times, with their defaults.
_VIDUR_OPTIONS, _PLAIN_OPTIONS = {"tp": 1}, {"tokens_column": "tokens", "time_column": "time", "unit": "s"}


def _refuse_given(args: argparse.Namespace, options: Any, applies: str) -> None:
    """Bad input when one of ``options`` is given (an option that would do nothing here)."""
    for key in options:
        if getattr(args, key) is not None:
            flag = "--" + key.replace("_", "-")
            raise BadInput(f"{args.measurements}: {flag} applies to {applies} only")


def _defaults(args: argparse.Namespace, options: dict[str, Any]) -> None:
    """``options``' defaults where not given."""
    for key, default in options.items():
        if getattr(args, key) is None:
            setattr(args, key, default)


def _profile_name(args: argparse.Namespace) -> str:
    """The fitted profile's name: ``--name``, else the stem of ``--out``, else ``fitted``."""
    if args.name is not None:
        return str(args.name)
    return args.out.rsplit("/", 1)[-1].removesuffix(".toml") if args.out else "fitted"


def _fit_steps(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """Every term of the contract, fitted to a step-measurement file's grid."""
    from ..measured import MeasuredError, fit_grid, grid_errors

    _defaults(args, _STEP_OPTIONS)
    name = _profile_name(args)
    try:
        with np.errstate(all="ignore"):  # a fit that overflows ends in the CostModelError below
            fit = fit_grid(data, name, args.timing, args.loss, None if args.token_tile == "none" else args.token_tile)
            errors = grid_errors(data, fit.model, args.timing)
    except (MeasuredError, CostModelError) as exc:
        raise BadInput(f"{args.measurements}: {exc}") from None
    where = ", ".join(str(data[k]) for k in ("device", "model", "torch", "date") if k in data)
    source = (
        f"fitted by optsched fit to the {errors['all']['steps']} grid steps of {Path(args.measurements).name} "
        f"({where}; {args.timing} time, {args.loss} loss on relative error, coefficients >= 0)"
    )
    model = fit.model
    out: dict[str, Any] = {
        "input": args.measurements,
        "kind": "step-measurements",
        "loss": args.loss,
        "timing": args.timing,
        "profile": model.to_dict(),
        "errors": errors,
        "dropped_terms": list(fit.dropped),
    }
    if args.out is not None:
        write_profile(
            args.out, profile_toml(name, source, model.base, model.per_token, template=model), args.measurements
        )
        out["written"] = args.out
    if args.json:
        print_json(out)
    else:
        print(source)
        print(format_mapping([(k, v) for k, v in model.to_dict().items()]))
        for kind, e in errors.items():
            print(f"  {kind:<12} {e['steps']:4d} steps: mean error {e['mean_pct']:5.1f} %, max {e['max_pct']:5.1f} %")
        if args.out is not None:
            print(f"profile written: {args.out}")
    return EXIT_OK


def handle(args: argparse.Namespace) -> int:
    check_profile_out(args.out)
    if args.name is not None and args.out is None:
        raise BadInput("--name: names the profile that --out writes; give --out too")
    if args.measurements.endswith(".json"):
        from ..measured import MeasuredError, load_step_measurements

        _refuse_given(args, [*_VIDUR_OPTIONS, *_PLAIN_OPTIONS, "compare"], "CSV inputs")
        try:
            return _fit_steps(args, load_step_measurements(args.measurements))
        except MeasuredError as exc:
            raise BadInput(str(exc)) from None
    _refuse_given(args, _STEP_OPTIONS, "step-measurement files (.json)")
    template = load_cost_model(args.compare) if args.compare is not None else None
    path = args.measurements
    vidur = Path(path).is_file() and is_vidur_profile(path)
    if vidur:
        _refuse_given(args, _PLAIN_OPTIONS, "a plain CSV of batch times")
    else:
        _refuse_given(args, _VIDUR_OPTIONS, "Vidur profiles")
        template = None if template is None else template.whole_model()  # measured times are the whole model's
    _defaults(args, {**_VIDUR_OPTIONS, **_PLAIN_OPTIONS})
    if vidur:
        tokens, times = read_vidur_mlp_profile(path, args.tp)
        what = f"Vidur profile {path}, tp={args.tp}: sum of per-operator means, per layer"
    else:
        tokens, times = read_measurements_csv(path, args.tokens_column, args.time_column, args.unit)
        what = f"measurements {path} ({args.tokens_column}, {args.time_column} in {args.unit})"
    fit = fit_linear(tokens, times)
    out: dict[str, Any] = {
        "input": path,
        "kind": "vidur" if vidur else "measurements",
        "points": int(len(tokens)),
        "tokens_range": [float(tokens.min()), float(tokens.max())],
        "base": fit.base,
        "per_token": fit.per_token,
        "unit": "seconds" + (" per layer" if vidur else ""),
        "mean_abs_pct_error": fit.mean_abs_pct_error,
        "max_abs_pct_error": fit.max_abs_pct_error,
        "r_squared": fit.r_squared,
    }
    if template is not None:
        mean_err, max_err = linear_errors(template.base, template.per_token, tokens, times)
        out["compare"] = {
            "profile": template.name,
            "base": template.base,
            "per_token": template.per_token,
            "mean_abs_pct_error": mean_err,
            "max_abs_pct_error": max_err,
        }
    name = _profile_name(args)
    text = profile_toml(name, f"fitted from {what}", fit.base, fit.per_token, template if vidur else None)
    if args.out is None:  # least squares without bounds: a negative slope is not a cost model
        try:
            check_profile_toml(text)
        except CostModelError as exc:
            print(f"optsched: warning: {path}: the fitted profile is not a cost model ({exc})", file=sys.stderr)
    if args.out is not None:
        write_profile(args.out, text, path)
        out["profile"] = args.out
    if args.json:
        print_json(out)
    else:
        print(what)
        rows = [
            (k, out[k]) for k in ("points", "base", "per_token", "mean_abs_pct_error", "max_abs_pct_error", "r_squared")
        ]
        if "compare" in out:
            c = out["compare"]
            rows += [
                (f"{c['profile']} {k}", c[k]) for k in ("base", "per_token", "mean_abs_pct_error", "max_abs_pct_error")
            ]
        if args.out is not None:
            rows.append(("profile written", args.out))
        print(format_mapping(rows))
    return EXIT_OK

"""``optsched validate RESULT [--plot PNG] [--profile-out TOML] [--timing wall|model] [--json]``
or ``optsched validate STEPS.json --profile PROFILE [--instances DIR] [--timing gpu|wall] [--json]``.

A step-measurement file (:mod:`optsched.measured`: executed schedules measured step by step, e.g.
``../shared/data/gpu/h200-llama2-7b-steps.json``) is checked against ``--profile``: every run is
rebuilt as a schedule of its instance (``--instances``, default the file's ``instances/`` folder),
replayed under the profile and compared with its measured steps and makespan; per instance, whether
the measured ranking of its schedules is kept; and the grid's error per step kind. Exit 0.

Compares the cost model's predicted step times in an ``optsched execute`` result with the measured
ones: per step, in total, the mean absolute percentage error (MAPE) and the worst steps; draws a plot;
and refits the cost model from the measured steps (``base + per_token * N_tok`` and all the
contract's terms). ``--profile-out`` writes the refitted profile as TOML, which ``cost_model`` in an
instance (or ``load_cost_model``) accepts as a path, so a profile can be calibrated on one's own
hardware and the instance re-solved. Exit 1 when the result records a plan mismatch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..jsonio import read_json
from ._common import EXIT_NO, BadInput, check_output_path, count_int, print_json
from .fit import write_profile

#: Worst steps listed for a result without ``--worst``.
DEFAULT_WORST = 5

#: Name of a result's refitted profile without ``--profile-name``.
DEFAULT_PROFILE_NAME = "fitted"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="predicted vs measured step times of an executed plan; refit the cost model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("result", help="result JSON of 'optsched execute', or a step-measurement file")
    p.add_argument(
        "--timing",
        choices=("wall", "model", "gpu"),
        default=None,
        help="measured time: engine step wall time (default) or model time; step-measurement "
        "files: gpu (default) or wall",
    )
    p.add_argument(
        "--profile",
        help="the profile to predict with (name or TOML); results: re-predicts every step from the plan's"
        " features (default: the plan's own predictions)",
    )
    p.add_argument(
        "--instances",
        help="step-measurement files: folder of the runs' instances (default: instances/ beside the file)",
    )
    p.add_argument("--worst", type=count_int, help=f"results: worst steps to list (default {DEFAULT_WORST})")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--profile-out", help="write the refitted cost-model profile (TOML) here")
    p.add_argument("--profile-name", help=f"results: name of the refitted profile (default {DEFAULT_PROFILE_NAME!r})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..costmodel import load_cost_model
    from ..executor.compare import compare, plot

    check_output_path(args.plot, args.profile_out)
    result = read_json(args.result, BadInput)
    from ..measured import is_step_measurements

    if is_step_measurements(result):
        return _validate_steps(args, result)
    if args.instances is not None:
        raise BadInput("--instances applies to step-measurement files only")
    if not isinstance(result, dict) or result.get("format") != "optsched-vllm-result":
        raise BadInput(f"{args.result}: field 'format': not an optsched-vllm-result file")
    timing = args.timing or "wall"
    if timing == "gpu":
        raise BadInput("--timing gpu applies to step-measurement files only (results: wall or model)")
    model = None if args.profile is None else load_cost_model(args.profile)
    try:
        report = compare(
            result,
            timing=timing,
            worst=DEFAULT_WORST if args.worst is None else args.worst,
            profile_name=DEFAULT_PROFILE_NAME if args.profile_name is None else args.profile_name,
            model=model,
        )
    except KeyError as exc:
        raise BadInput(f"{args.result}: field {exc.args[0]!r}: missing") from None
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BadInput(f"{args.result}: {exc}") from None
    if args.profile_out and not report["fit_terms"]:
        raise BadInput(
            f"--profile-out: {args.result} has {report['compared_steps']} measured step(s) with tokens; "
            "a refit needs at least two (no profile written)"
        )
    if args.plot:
        plot(report, args.plot, title=f"{result['plan'].get('instance')} on {result.get('run', {}).get('model')}")
    if args.profile_out and report["fit_terms"]:
        write_profile(args.profile_out, report["fit_terms"]["profile_toml"], args.result)
    report |= {
        "ok": result.get("ok"),
        "mismatches": result.get("mismatches", []),
        "plot": args.plot,
        "profile_out": args.profile_out if report["fit_terms"] else None,
    }
    if args.json:
        print_json(report)
    else:
        print(
            f"{report['compared_steps']} steps: predicted {report['predicted_total']:.6g} s, "
            f"measured {report['measured_total']:.6g} s ({report['total_error_pct']:+.1f} %), "
            f"MAPE {report['mape']:.1f} %"
        )
        for r in report["worst_steps"]:
            print(
                f"  step {r['step']} (batch {r['batch']}): predicted {r['predicted']:.4g} s, "
                f"measured {r['measured']:.4g} s, error {r['ape']:.1f} %"
            )
        if report["fit_terms"]:
            print(
                f"refit (all terms): MAPE {report['fit_terms']['mape']:.1f} %; "
                f"linear base + per_token: MAPE {report['fit_linear']['mape']:.1f} %"
            )
    return 0 if result.get("ok") else EXIT_NO


def _validate_steps(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """Replay a step-measurement file's runs under ``--profile`` and compare (module docstring)."""
    from ..costmodel import load_cost_model
    from ..measured import MeasuredError, checked_step_measurements, compare_runs, grid_errors

    try:
        checked_step_measurements(data, args.result)
    except MeasuredError as exc:
        raise BadInput(str(exc)) from None
    if not data.get("runs") and not data.get("grid"):
        raise BadInput(f"{args.result}: fields 'runs' and 'grid': both empty, nothing to check")
    if args.profile is None:
        raise BadInput(f"{args.result}: a step-measurement file needs --profile (the profile to check)")
    given = [
        flag
        for flag, value in (
            ("--plot", args.plot),
            ("--profile-out", args.profile_out),
            ("--worst", args.worst),
            ("--profile-name", args.profile_name),
        )
        if value is not None
    ]
    if given:
        raise BadInput(
            f"{', '.join(given)}: only for execute results (fit a step-measurement file with 'optsched fit')"
        )
    timing = args.timing or "gpu"
    if timing not in ("gpu", "wall"):
        raise BadInput(f"--timing {timing}: step-measurement files have gpu or wall times")
    model = load_cost_model(args.profile)
    folder = args.instances or str(Path(args.result).resolve().parent / "instances")
    try:
        report = compare_runs(data, model, folder, timing)
        report["grid"] = grid_errors(data, model, timing) if data.get("grid") else None
    except MeasuredError as exc:
        raise BadInput(f"{args.result}: {exc}") from None
    if args.json:
        print_json(report)
        return 0
    for name, r in report["runs"].items():
        print(
            f"{name:<24} predicted {1e3 * r['predicted']:9.3f} ms, measured {1e3 * r['measured']:9.3f} ms "
            f"({r['error_pct']:+6.2f} %), worst step {r['worst_step_pct']:.1f} %"
        )
    if report["runs"]:
        print(
            f"worst run: {report['worst_run']} ({report['worst_error_pct']:+.2f} %); "
            f"step MAPE {report['step_mape']:.1f} %"
        )
        for inst, r in report["instances"].items():
            kept = "kept" if r["ranking_kept"] else "NOT kept (" + "; ".join(r["swapped"]) + ")"
            print(f"{inst}: measured ranking {kept}")
    for kind, e in (report["grid"] or {}).items():
        print(f"grid {kind:<12} {e['steps']:4d} steps: mean error {e['mean_pct']:5.1f} %, max {e['max_pct']:5.1f} %")
    return 0

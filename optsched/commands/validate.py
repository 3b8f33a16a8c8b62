"""``optsched validate RESULT [--plot PNG] [--profile-out TOML] [--timing wall|model] [--json]``.

Compares the cost model's predicted step times in an ``optsched execute`` result with the measured
ones: per step, in total, the mean absolute percentage error (MAPE) and the worst steps; draws a plot;
and refits the cost model from the measured steps (``base + per_token * N_tok`` and all the
contract's terms). ``--profile-out`` writes the refitted profile as TOML, which ``cost_model`` in an
instance (or ``load_cost_model``) accepts as a path, so a profile can be calibrated on one's own
hardware and the instance re-solved. Exit 1 when the result records a plan mismatch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ._common import EXIT_NO, BadInput, print_json


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="predicted vs measured step times of an executed plan; refit the cost model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("result", help="result JSON of 'optsched execute'")
    p.add_argument("--timing", choices=("wall", "model"), default="wall",
                   help="measured time: engine step wall time (default) or model time")
    p.add_argument("--worst", type=int, default=5, help="worst steps to list (default 5)")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--profile-out", help="write the refitted cost-model profile (TOML) here")
    p.add_argument("--profile-name", default="fitted", help="name of the refitted profile")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ..executor.compare import compare, plot

    try:
        result = json.loads(Path(args.result).read_text())
    except OSError as exc:
        raise BadInput(f"{args.result}: cannot read file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{args.result}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(result, dict) or result.get("format") != "optsched-vllm-result":
        raise BadInput(f"{args.result}: field 'format': not an optsched-vllm-result file")
    try:
        report = compare(result, timing=args.timing, worst=args.worst, profile_name=args.profile_name)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"{args.result}: {exc}") from None
    if args.plot:
        plot(report, args.plot, title=f"{result['plan'].get('instance')} on {result.get('run', {}).get('model')}")
    if args.profile_out and report["fit_terms"]:
        Path(args.profile_out).write_text(report["fit_terms"]["profile_toml"])
    report |= {"ok": result.get("ok"), "mismatches": result.get("mismatches", []),
               "plot": args.plot, "profile_out": args.profile_out if report["fit_terms"] else None}
    if args.json:
        print_json(report)
    else:
        print(f"{report['compared_steps']} steps: predicted {report['predicted_total']:.6g} s, "
              f"measured {report['measured_total']:.6g} s ({report['total_error_pct']:+.1f} %), "
              f"MAPE {report['mape']:.1f} %")
        for r in report["worst_steps"]:
            print(f"  step {r['step']} (batch {r['batch']}): predicted {r['predicted']:.4g} s, "
                  f"measured {r['measured']:.4g} s, error {r['ape']:.1f} %")
        if report["fit_terms"]:
            print(f"refit (all terms): MAPE {report['fit_terms']['mape']:.1f} %; "
                  f"linear base + per_token: MAPE {report['fit_linear']['mape']:.1f} %")
    return 0 if result.get("ok") else EXIT_NO

"""``optsched plan INSTANCE --method bestfit|jsq|exact|... [--target 1.0] [--json]``: the capacity, minimum GPUs.

The command keeps the name users type, ``plan``; in the code and docs the least GPUs reaching an SLO
target is the *capacity* (:mod:`optsched.problems.aladdin.capacity`), and a *plan* is a vLLM replay
plan (docs/development.md, the words).

For an Aladdin instance with arrivals (a JSON instance with the cost model of one worker and the
``placement`` and ``slo`` objects of docs/aladdin.md), search the smallest number of workers W whose multi-worker
simulation reaches the target SLO attainment (P100 = 1.0 by default) with the placement method, from
one worker up, and report W x ``--gpus-per-worker`` GPUs, every evaluated W, and the exact
per-heartbeat lower bound of the placement model (planned lengths; the simulation may need fewer
workers, so the search does not start there). The largest W searched is ``--max-workers``, else the
instance's ``placement.max_workers``, else 256. Exit 0 when a W up to it reaches the target, 1 when
none does.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import (
    EXIT_NO,
    EXIT_OK,
    BadInput,
    add_instance_arguments,
    add_json_flag,
    load_instance_arg,
    positive_float,
    positive_int,
    print_json,
)

if TYPE_CHECKING:
    from ..instance import Instance
    from ..problems.aladdin.predictor import BinPredictor

#: Largest worker count searched when neither ``--max-workers`` nor ``placement.max_workers`` is given.
DEFAULT_MAX_WORKERS = 256

#: Seconds of each heartbeat's exact placement in the lower bound when ``--time-limit`` is not given.
DEFAULT_PLACEMENT_SECONDS = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="minimum GPUs reaching an SLO attainment target (Aladdin placement)")
    add_instance_arguments(p)
    p.add_argument(
        "--method",
        default="bestfit",
        help="placement: exact, bestfit, bestfit+rebalance, jsq, rr, po2 (default bestfit)",
    )
    p.add_argument("--target", type=positive_float, default=1.0, help="SLO attainment to reach (default 1.0 = P100)")
    p.add_argument("--heartbeat", type=positive_float, default=1.0, help="seconds between placements (default 1)")
    p.add_argument("--gpus-per-worker", type=positive_int, default=1, help="GPUs of one worker (default 1)")
    p.add_argument(
        "--max-workers",
        type=positive_int,
        help=f"largest W searched (default: the instance's placement.max_workers, else {DEFAULT_MAX_WORKERS})",
    )
    p.add_argument(
        "--solver",
        default="cpsat",
        help="backend of the exact placements and of the lower bound (cpsat, highs, cbc, gurobi; default cpsat)",
    )
    p.add_argument(
        "--time-limit",
        type=positive_float,
        help="seconds per exact placement, those of the lower bound included "
        f"(default: {DEFAULT_PLACEMENT_SECONDS:g} for the bound's, the method's own for the simulation's)",
    )
    p.add_argument(
        "--predict-bins",
        type=positive_int,
        help="predict output lengths by this many prompt-length bins fitted on the instance "
        "(default: the requests' predicted_output_tokens, else the true lengths)",
    )
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..mipsolvers import licence_refused
    from ..problems.aladdin.cluster import METHODS
    from ..problems.aladdin.exact import EXACT_SOLVERS
    from ..problems.aladdin.predictor import BinPredictor

    if args.method not in METHODS or args.method == "given":
        raise BadInput(
            f"--method: unknown placement {args.method!r} (known: {', '.join(m for m in METHODS if m != 'given')})"
        )
    if args.target > 1:
        raise BadInput(f"--target: must lie in (0, 1], got {args.target}")
    if args.solver not in EXACT_SOLVERS:  # the exact placements and the lower bound's
        raise BadInput(f"--solver: unknown backend {args.solver!r} (known: {', '.join(EXACT_SOLVERS)})")
    instance = load_instance_arg(args)
    predictor = None
    if args.predict_bins:
        predictor = BinPredictor.fit(
            [r.prompt_tokens for r in instance.requests],
            [r.output_tokens for r in instance.requests],
            bins=args.predict_bins,
        )
    try:
        return _plan(args, instance, predictor)
    except Exception as exc:  # gurobipy raises its own GurobiError
        if not licence_refused(exc):
            raise
        raise BadInput(
            f"--solver {args.solver}: its licence does not cover the placements of this search ({exc}); "
            "use cpsat or highs"
        ) from None


def _plan(args: argparse.Namespace, instance: Instance, predictor: BinPredictor | None) -> int:
    """The search and its output (:func:`handle`, after the checks)."""
    from ..problems.aladdin.capacity import heartbeat_lower_bound, min_workers
    from ..problems.aladdin.solve import instance_max_workers

    most = args.max_workers or instance_max_workers(instance) or DEFAULT_MAX_WORKERS
    bound = heartbeat_lower_bound(
        instance,
        heartbeat=args.heartbeat,
        predictor=predictor,
        solver=args.solver,
        time_limit=args.time_limit or DEFAULT_PLACEMENT_SECONDS,
    )
    res = min_workers(  # from one worker: the bound is the placement model's, not the simulation's
        instance,
        args.method,
        args.target,
        gpus_per_worker=args.gpus_per_worker,
        hi=most,
        heartbeat=args.heartbeat,
        predictor=predictor,
        solver=args.solver,
        time_limit=args.time_limit,
    )
    out = {"instance": instance.name, **res.to_dict(), "lower_bound_workers": bound, "heartbeat": args.heartbeat}
    if args.json:
        print_json(out)
    else:
        found = (
            f"no worker count up to {most}"
            if res.workers is None
            else f"{_count(res.workers, 'worker')} = {_count(res.gpus or 0, 'GPU')}"
        )
        print(f"{instance.name}: {args.method} reaches attainment {args.target:g} with {found}")
        evaluated = ", ".join(f"{k}: {a:.3f}" for k, a in res.evaluated.items())
        print(f"  placement-model lower bound: {bound} workers (planned lengths); evaluated: {evaluated}")
    return EXIT_OK if res.workers is not None else EXIT_NO


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

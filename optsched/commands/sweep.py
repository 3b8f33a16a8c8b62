"""``optsched sweep SPEC --out DIR [--workers N] [--ray [--address ADDR]] [--resume]``.

Runs a grid of workloads x cost models x limits x rate scales (the spec, docs/sweep.md), every
cell on a local process pool (default: all cores) or as Ray tasks, and writes one Parquet row per
schedule or bound under DIR as cells finish. ``--capacity`` searches, per configuration and
policy, the largest ``rate_scale`` meeting a P99 TTFT/TPOT target; ``--replicas`` the fewest
engines carrying the workload under each router. ``--time-limit`` bounds the whole command: what
is finished by then is stored and summarised, the rest is left for ``--resume``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..budget import TimeBudget
from ..progress import Progress
from ..sweep.spec import SpecError, load_spec
from ..sweep.store import MissingDependency, StoreError, SweepStore, require_pyarrow
from ._common import (
    EXIT_OK,
    BadInput,
    add_json_flag,
    command_budget,
    format_mapping,
    positive_float,
    positive_int,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a grid of workloads, limits and policies (local cores or Ray)")
    p.add_argument("spec", metavar="SPEC", help="sweep specification (.yaml, .yml or .json)")
    p.add_argument("--out", required=True, metavar="DIR", help="results folder (a Parquet dataset, created if missing)")
    p.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="local worker processes, or the CPUs of the local Ray cluster (default: all cores)",
    )
    p.add_argument("--ray", action="store_true", help="run the cells as Ray tasks (needs optsched[ray])")
    p.add_argument("--address", metavar="ADDR", help="Ray cluster to join (with --ray; default: start a local one)")
    p.add_argument("--resume", action="store_true", help="complete the sweep in DIR: skip the cells already stored")
    p.add_argument(
        "--time-limit",
        type=positive_float,
        metavar="S",
        help="seconds for the whole command: cells not finished by then are left for --resume",
    )
    g = p.add_argument_group("capacity search")
    g.add_argument("--capacity", action="store_true", help="largest rate_scale meeting the SLO target, per policy")
    g.add_argument("--replicas", action="store_true", help="fewest engines carrying each cell, per router")
    g.add_argument(
        "--slo-ttft-p99", type=positive_float, metavar="S", help="TTFT limit (seconds) of the target quantile"
    )
    g.add_argument(
        "--slo-tpot-p99", type=positive_float, metavar="S", help="TPOT limit (seconds) of the target quantile"
    )
    g.add_argument(
        "--attainment",
        type=positive_float,
        metavar="A",
        help="quantile the limits apply to, in (0, 1] (default 0.99: the P99)",
    )
    p.add_argument(
        "--no-progress",
        "--quiet",
        dest="no_progress",
        action="store_true",
        help="no progress on stderr (a bar on a terminal, else a line every few seconds)",
    )
    add_json_flag(p)
    p.set_defaults(func=handle)


#: Most local worker processes (or local Ray CPUs) a core: more run no cell sooner and each holds memory.
WORKERS_PER_CORE = 4


def _check_args(args: argparse.Namespace) -> None:
    if args.address is not None and not args.ray:
        raise BadInput("--address: only applies with --ray")
    if args.address is not None and args.workers is not None:
        raise BadInput("--workers: a cluster given by --address has its own CPUs; drop --workers")
    cores = len(os.sched_getaffinity(0))
    if args.workers is not None and args.workers > WORKERS_PER_CORE * cores:
        raise BadInput(
            f"--workers: {args.workers} processes on this machine's {cores} cores; at most "
            f"{WORKERS_PER_CORE * cores} ({WORKERS_PER_CORE} a core: the cells are CPU-bound, and each worker "
            "holds its own copy of the workloads)"
        )
    if args.capacity and args.replicas:
        raise BadInput("--capacity and --replicas: run one search at a time")
    searching = args.capacity or args.replicas
    slo_given = args.slo_ttft_p99 is not None or args.slo_tpot_p99 is not None or args.attainment is not None
    if slo_given and not searching:
        raise BadInput("--slo-ttft-p99/--slo-tpot-p99/--attainment: only apply with --capacity or --replicas")
    if searching and args.slo_ttft_p99 is None and args.slo_tpot_p99 is None:
        raise BadInput(f"--{'capacity' if args.capacity else 'replicas'}: needs --slo-ttft-p99 and/or --slo-tpot-p99")
    if args.attainment is not None and args.attainment > 1:
        raise BadInput(f"--attainment: must lie in (0, 1], got {args.attainment}")
    parent = Path(args.out).resolve().parent
    if not parent.is_dir():
        raise BadInput(f"{args.out}: output folder {str(parent)!r} does not exist")
    if os.path.lexists(args.out) and not Path(args.out).is_dir():
        raise BadInput(
            f"{args.out}: exists and is not a folder"
            + (" (a dangling symbolic link)" if Path(args.out).is_symlink() else "")
        )


def make_executor(args: argparse.Namespace, retries: int) -> Any:
    """The local pool, or Ray when ``--ray`` (MissingDependency without Ray)."""
    from ..sweep.executors import LocalPool, RayExecutor

    workers = args.workers or len(os.sched_getaffinity(0))
    if args.ray:
        return RayExecutor(args.address, workers, retries)
    return LocalPool(workers, retries)


def handle(args: argparse.Namespace) -> int:
    _check_args(args)
    try:
        require_pyarrow()
        spec = load_spec(args.spec)
        mode = "capacity" if args.capacity else "replicas" if args.replicas else "grid"
        _check_mode(mode, spec, args.spec)
        from ..sweep.runner import load_workloads

        with Progress(f"sweep {spec.name}", enabled=not args.no_progress) as loading:
            loading.doing(
                f"loading {len(spec.workloads)} workload(s)"
            )  # shown after a second: bad input stays one line
            workloads = load_workloads(spec)
    except (SpecError, MissingDependency) as exc:
        raise BadInput(str(exc)) from None
    store = SweepStore(args.out)
    meta = {
        "spec": spec.model_dump(mode="json"),
        "spec_file": str(args.spec),
        "mode": mode,
        "slo_ttft_p99": args.slo_ttft_p99,
        "slo_tpot_p99": args.slo_tpot_p99,
        "attainment": args.attainment,
    }
    try:
        executor = make_executor(args, spec.retries)
    except MissingDependency as exc:
        raise BadInput(str(exc)) from None
    progress = False if args.no_progress else None
    try:
        with store.claim(meta, resume=args.resume):
            out = _run(mode, spec, args, executor, store, workloads, progress, command_budget(args, args.time_limit))
    except StoreError as exc:
        raise BadInput(str(exc)) from None
    except KeyboardInterrupt:
        print(
            f"sweep: interrupted; {len(store.done_keys())} cells stored in {args.out}: "
            "run it again with --resume to complete it",
            file=sys.stderr,
        )
        raise
    finally:
        executor.close()
    out = {"sweep": spec.name, "out": str(args.out), "executor": "ray" if args.ray else "local", **out}
    if args.json:
        print_json(out)
    else:
        print(format_mapping([(k, v) for k, v in out.items() if not isinstance(v, (list, dict))]))
        for line in capacity_lines(out.get("capacity", []), out.get("non_monotone", {})):
            print(line)
        for warning in out.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
    return EXIT_OK


def capacity_lines(rows: list[dict[str, Any]], non_monotone: dict[str, list[float]]) -> list[str]:
    """The capacity summary as text: per configuration and schedule source, rate scale, req/s and
    tokens/s (``ceiling``: the proven ceiling), then the non-monotone points found."""

    def num(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value:.4g}{unit}"

    out = []
    for r in rows:
        config = f"{r['workload']} {r.get('configuration') or r['cost_model']}"
        out.append(
            f"capacity {config} {r['policy']}: rate scale {num(r['rate_scale'], 'x')}, "
            f"{num(r['req_per_s'], ' req/s')}, {num(r['tokens_per_s'], ' tokens/s')} ({r['status']})"
        )
    out += [
        f"non-monotone: {name} fails at rate scale {rates} below a rate that meets"
        for name, rates in non_monotone.items()
    ]
    return out


def _run(
    mode: str,
    spec: Any,
    args: argparse.Namespace,
    executor: Any,
    store: SweepStore,
    workloads: Any,
    progress: bool | None,
    budget: TimeBudget,
) -> dict[str, Any]:
    from dataclasses import asdict

    from ..sweep.cells import SloTarget
    from ..sweep.runner import run_sweep

    if mode == "grid":
        return asdict(run_sweep(spec, args.out, executor, workloads=workloads, show_progress=progress, budget=budget))
    target = SloTarget(args.slo_ttft_p99, args.slo_tpot_p99, args.attainment or 0.99)
    if mode == "capacity":
        from ..sweep.capacity import capacity_search

        return capacity_search(
            spec, workloads, executor, store, target, slots=executor.slots, show_progress=progress, budget=budget
        )
    from ..sweep.replicas import replicas_search

    return replicas_search(spec, workloads, executor, store, target, show_progress=progress, budget=budget)


#: The spec sections each mode does not read (giving one is an error, never silence), and what
#: each section is for.
UNREAD_SECTIONS = {"grid": ("capacity", "replicas"), "capacity": ("replicas",), "replicas": ("run", "capacity")}
SECTION_USES = {
    "capacity": "the rate range of --capacity",
    "replicas": "the routers and range of --replicas",
    "run": "what a plain sweep or --capacity runs (--replicas simulates the routers of replicas.routers)",
}
MODE_NAMES = {"grid": "a plain sweep (no --capacity or --replicas)", "capacity": "--capacity", "replicas": "--replicas"}


def _check_mode(mode: str, spec: Any, source: str) -> None:
    """Raise :class:`SpecError` when the spec gives the sweep's mode nothing to do, or a section
    the mode does not read, before any work."""
    if mode == "grid" and not spec.run.simulate and not spec.run.solve and not spec.run.bounds:
        raise SpecError(f"{source}: run: nothing to run (give simulate, solve or bound)")
    if mode == "capacity":
        from ..sweep.capacity import check_capacity_spec

        check_capacity_spec(spec)
    if mode == "replicas":
        from ..sweep.replicas import check_replicas_spec

        check_replicas_spec(spec)
    for section in UNREAD_SECTIONS[mode]:
        if section in spec.model_fields_set:
            raise SpecError(
                f"{source}: {section}: {SECTION_USES[section]}, which {MODE_NAMES[mode]} does not read; remove it"
            )

"""``optsched info INSTANCE [--json] [--time-limit S]``.

What an instance contains (requests, lengths, arrivals, limits, cost model), the requests that can
never finish (prompt + output - 1 > kv_capacity; listed all, not only the first), the requests that
can never meet one of their SLOs, and the trivial bounds of :mod:`optsched.bounds`.
Exit 1 when some request can never finish, 0 otherwise.

Every figure is computed over the request columns at once (numpy), in time about that of loading
the instance. With ``--time-limit`` the SLO check and the bounds (the figures beyond the columns'
own statistics) run in a worker thread while the command waits for them until its budget
(:func:`~._common.command_budget`) is spent; those not done by then are reported as not computed
(``null`` in the JSON and named in ``not_computed``), never left out silently.
"""

from __future__ import annotations

import argparse
import sys
import threading
from operator import attrgetter
from typing import Any

import numpy as np

from ..bounds import instance_bounds, request_bound_arrays
from ..budget import TimeBudget
from ..instance import Instance, RequestColumns
from ..schedule import TIME_RTOL
from ._common import (
    EXIT_NO,
    EXIT_OK,
    add_instance_arguments,
    add_json_flag,
    check_output_path,
    command_budget,
    format_mapping,
    format_table,
    load_instance_arg,
    positive_float,
    print_json,
)

#: The figures computed after the columns' statistics, in order, each of which a time limit may leave out.
SLOW_FIGURES = ("slo_unattainable", "bounds")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe an instance: contents, infeasible requests, trivial bounds")
    add_instance_arguments(p)
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the instance (options and transforms applied) as JSON, e.g. a trace's slice "
        "for export --instance; not written when a request can never finish",
    )
    p.add_argument(
        "--time-limit",
        type=positive_float,
        metavar="S",
        help="wall-clock limit of the whole command in seconds; the SLO check and the bounds not done "
        "by then are reported as not computed",
    )
    add_json_flag(p)
    p.set_defaults(func=handle)


def _stats(values: np.ndarray) -> dict[str, float]:
    return {
        "min": float(values.min()),
        "mean": float(values.mean()),
        "max": float(values.max()),
        "sum": float(values.sum()),
    }


def slo_unattainable(instance: Instance, fits: np.ndarray) -> list[dict[str, Any]]:
    """The SLOs no schedule can meet (target below the request's lower bound), of the requests
    whose ``fits`` is true, in request order."""
    reqs = instance.requests
    if isinstance(reqs, RequestColumns):  # a trace's requests carry no SLO
        return []
    slos = list(map(attrgetter("slo"), reqs))
    if slos.count(None) == len(slos):
        return []
    which = np.flatnonzero(fits & np.fromiter((slo is not None for slo in slos), bool, len(reqs)))
    if len(which) == 0:
        return []
    I, O = instance.columns[1][which], instance.columns[2][which]
    ttft, e2e, tpot = request_bound_arrays(instance, I, O)
    found: list[tuple[int, int, dict[str, Any]]] = []
    for order, (what, bound) in enumerate((("ttft", ttft), ("e2e", e2e), ("tpot", tpot), ("atgt", tpot))):
        targets = [getattr(slos[i], what) for i in which.tolist()]
        target = np.array([np.nan if t is None else t for t in targets], dtype=np.float64)
        for k in np.flatnonzero(bound > target * (1 + TIME_RTOL)).tolist():  # NaN (no target or bound): False
            i = int(which[k])
            found.append((
                i,
                order,
                {"id": reqs[i].id, "slo": what, "target": float(target[k]), "lower_bound": float(bound[k])},
            ))
    return [entry for _, _, entry in sorted(found, key=lambda x: x[:2])]


def describe(instance: Instance, budget: TimeBudget | None = None) -> dict[str, Any]:
    """The JSON object ``optsched info --json`` prints; the figures of :data:`SLOW_FIGURES` not
    computed within ``budget`` (default: no limit) are None and named in ``not_computed``."""
    info, fits = column_figures(instance)
    return {**info, **slow_figures(instance, fits, budget or TimeBudget())}


def column_figures(instance: Instance) -> tuple[dict[str, Any], np.ndarray]:
    """The figures of :func:`describe` read off the request columns, and per request whether it
    fits in the KV capacity."""
    reqs = instance.requests
    columns_only = isinstance(reqs, RequestColumns)
    lim = instance.limits
    arrival, prompt, output = instance.columns
    fits = np.ones(len(reqs), dtype=bool) if lim.kv_capacity is None else prompt + output - 1 <= lim.kv_capacity
    cannot_fit = [
        {"id": reqs[i].id, "max_kv": reqs[i].max_kv, "kv_capacity": lim.kv_capacity}
        for i in np.flatnonzero(~fits).tolist()
    ]
    info = {
        "instance": instance.name,
        "requests": len(reqs),
        "cost_model": {
            "name": instance.cost_model.name,
            "source": instance.cost_model.source,
            **instance.cost_model.to_dict(),
        },
        "limits": lim.to_dict(),
        "prompt_tokens": _stats(prompt),
        "output_tokens": _stats(output),
        "arrival": {"first": float(arrival.min()), "last": float(arrival.max()), "offline": bool((arrival == 0).all())},
        # a trace's RequestColumns carry neither (and are counted without building their requests)
        "with_slo": 0 if columns_only else len(reqs) - list(map(attrgetter("slo"), reqs)).count(None),
        "with_predicted_output": 0
        if columns_only
        else len(reqs) - list(map(attrgetter("predicted_output_tokens"), reqs)).count(None),
        "extra_keys": sorted(instance.extra),
        "infeasible_requests": cannot_fit,
    }
    return info, fits


def slow_figures(instance: Instance, fits: np.ndarray, budget: TimeBudget) -> dict[str, Any]:
    """:data:`SLOW_FIGURES` computed in order, those not done within ``budget`` None (module
    docstring), and ``not_computed``, their names."""
    found: dict[str, Any] = dict.fromkeys(SLOW_FIGURES)
    failed: list[BaseException] = []

    def compute() -> None:
        try:
            found["slo_unattainable"] = slo_unattainable(instance, fits)
            feasible = (
                instance if fits.all() else instance.with_requests([r for r, ok in zip(instance.requests, fits) if ok])
            )
            found["bounds"] = [b.to_dict() for b in instance_bounds(feasible)] if feasible.requests else []
        except BaseException as exc:  # noqa: BLE001 - raised again by the command's thread
            failed.append(exc)

    if budget.limited:
        worker = threading.Thread(target=compute, name="optsched-info", daemon=True)  # left behind at the limit
        worker.start()
        worker.join(budget.left())
        found = dict(found)  # a copy: what the worker adds later is not reported
    else:
        compute()
    if failed:
        raise failed[0]
    return {**found, "not_computed": [name for name in SLOW_FIGURES if found[name] is None]}


def handle(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    budget = command_budget(args, args.time_limit)
    instance = load_instance_arg(args, check_capacity=False)
    info, fits = column_figures(instance)
    if args.out is not None:
        if info["infeasible_requests"]:
            print(f"optsched: note: {args.out} not written: some request can never finish", file=sys.stderr)
        else:
            instance.save(args.out)
    info.update(slow_figures(instance, fits, budget))
    info["path"] = args.out if args.out is not None and not info["infeasible_requests"] else None
    if info["not_computed"]:
        print(f"optsched: note: not computed within the time limit: {', '.join(info['not_computed'])}", file=sys.stderr)
    if args.json:
        print_json(info)
    else:
        _print_text(info)
    return EXIT_NO if info["infeasible_requests"] else EXIT_OK


def _print_text(info: dict[str, Any]) -> None:
    """The listing of ``optsched info`` without ``--json``."""
    lim = info["limits"]
    p, o, a = info["prompt_tokens"], info["output_tokens"], info["arrival"]
    print(
        format_mapping([
            ("instance", info["instance"]),
            ("requests", info["requests"]),
            ("cost model", f"{info['cost_model']['name']} ({info['cost_model']['source'] or 'inline'})"),
            ("limits", ", ".join(f"{k}={v}" for k, v in lim.items())),
            ("prompt tokens", f"min {p['min']:.0f}, mean {p['mean']:.2f}, max {p['max']:.0f}, total {p['sum']:.0f}"),
            ("output tokens", f"min {o['min']:.0f}, mean {o['mean']:.2f}, max {o['max']:.0f}, total {o['sum']:.0f}"),
            ("arrivals", "all at 0 (offline)" if a["offline"] else f"{a['first']:.6g} .. {a['last']:.6g} s"),
            ("with SLO", info["with_slo"]),
            ("extra keys", ", ".join(info["extra_keys"]) or "-"),
        ])
    )
    if info["infeasible_requests"]:
        print(f"\n{len(info['infeasible_requests'])} request(s) can never finish (I + O - 1 > kv_capacity):")
        for r in info["infeasible_requests"]:
            print(f"  {r['id']}: needs {r['max_kv']} KV slots > {r['kv_capacity']}")
    if info["slo_unattainable"]:
        print(f"\n{len(info['slo_unattainable'])} SLO(s) no schedule can meet:")
        for s in info["slo_unattainable"]:
            print(f"  {s['id']}: {s['slo']} target {s['target']:.6g} s < lower bound {s['lower_bound']:.6g} s")
    if info["bounds"]:
        note = " (of the requests that can finish)" if info["infeasible_requests"] else ""
        print(f"\ntrivial bounds{note}:")
        print(
            format_table(
                ("bound", "value", "proven", "note"),
                [(b["name"], b["value"], "yes" if b["valid"] else "no", b["note"]) for b in info["bounds"]],
            )
        )
    for name in info["not_computed"]:
        print(f"\n{name.replace('_', ' ')}: not computed within the time limit")

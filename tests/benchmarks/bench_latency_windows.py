"""Which side holds the mean-latency gap, measured on windows of 8 requests cut from the loaded slices.

Run on demand (``python tests/benchmarks/bench_latency_windows.py``); results in docs/performance.md.

On a window of ``--size`` consecutive requests of a slice (arrivals shifted so that the first is at
0), the exact InferMax solve proves the least mean latency; the window's best policy and the solve's
proven bounds of ``optsched bound --problem infermax --objective latency`` (the load-aware bounds of
the gap table) lie on either side of it. So each window splits its gap into the part the schedules
leave (best policy above the optimum) and the part the bounds leave (the optimum above the best
bound), in the objective's unit (seconds), which on the whole slices only the sum of can be seen.
The windows are the slice's requests ``k * stride`` to ``k * stride + size - 1``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import optsched
from optsched.instance import Instance, load_instance
from optsched.policies import policy_names
from optsched.workload.transforms import WorkloadTransforms, apply_transforms

#: Slices: the shipped instance at the gap table's rate scales.
RATES = (1.0, 4.0, 8.0, 16.0)


def window(instance: Instance, start: int, size: int) -> Instance:
    """Requests ``start .. start + size - 1`` of ``instance``, their arrivals shifted to start at 0."""
    requests = instance.requests[start : start + size]
    first = min(r.arrival for r in requests)
    shifted = tuple(replace(r, arrival=r.arrival - first) for r in requests)
    return replace(instance, name=f"{instance.name}-w{start}", requests=shifted)


def best_policies(instance: Instance) -> dict[str, float]:
    """Every registered policy's replayed mean latency on ``instance`` (those that replay cleanly)."""
    out = {}
    for name in policy_names():
        _, rep = optsched.simulate(instance, name)
        if rep.feasible:
            out[name] = rep.metrics.mean_latency
    return out


def measure(instance: Instance, time_limit: float) -> dict[str, float | str | bool]:
    """The window's exact solve, best policy and best bound (mean latency, seconds)."""
    began = time.perf_counter()
    res = optsched.solve(instance, "infermax", time_limit=time_limit, objective="latency")
    wall = time.perf_counter() - began
    best_policy = min(best_policies(instance).values())
    bounds = [b for b in optsched.bound(instance, "infermax", objective="latency", time_limit=60.0) if b.valid]
    top = max(bounds, key=lambda b: b.value)
    return {
        "optimal": res.status.value == "optimal",
        "optimum": res.objective,
        "proven": res.bound,
        "best_policy": best_policy,
        "bound": top.value,
        "bound_name": top.name,
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--windows", type=int, default=4, help="windows a slice")
    parser.add_argument("--stride", type=int, default=25)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES))
    args = parser.parse_args()
    base = load_instance("splitwise-conv-100")
    print(
        "| slice | window | optimum (s) | proven | best policy (s) | schedule side | best bound (s) | bound "
        "| bound side | solve wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rate in (float(x) for x in args.rates.split(",")):
        inst = apply_transforms(base, WorkloadTransforms(rate_scale=rate))
        sides: list[tuple[float, float]] = []
        for k in range(args.windows):
            part = window(inst, k * args.stride, args.size)
            m = measure(part, args.time_limit)
            opt = float(m["optimum"])
            sched = (float(m["best_policy"]) - opt) / float(m["best_policy"])
            bound = (opt - float(m["bound"])) / opt
            sides.append((sched, bound))
            print(
                f"| splitwise-conv-100 x{rate:g} | {k * args.stride}-{k * args.stride + args.size - 1} | {opt:.4f} | "
                f"{'yes' if m['optimal'] else 'no'} | {float(m['best_policy']):.4f} | {100 * sched:.1f} % | "
                f"{float(m['bound']):.4f} | {m['bound_name']} | {100 * bound:.1f} % | {float(m['wall']):.1f} |",
                flush=True,
            )
        print(
            f"| x{rate:g} mean | | | | | {100 * statistics.mean(s for s, _ in sides):.1f} % | | | "
            f"{100 * statistics.mean(b for _, b in sides):.1f} % | |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Benchmark: ``fluid-work`` with integral completion, HiGHS' proven MIP dual bound by time (run on demand).

    PYTHONPATH=$PWD python tests/benchmarks/bench_fluid_count.py [--seconds 120] [--coarsen 1]
        [--only NAME ...] [--blocks B] [--option KEY=VALUE ...]

The programme of ``fluid-work`` (:mod:`optsched.fluid_work` on :func:`optsched.fluid_bounds.fluid_lp`)
prices a request part-way through by its remaining weight fraction (the presence row
z_ik >= Delta'_ik R_ik / sigma_i), where a schedule keeps it wholly in the system until it
finishes. Here a binary u_ik ("i not finished by tau_{k+1}", one a cell with k < G) is added
through ``fluid_lp``'s ``extra`` hook, next to ``fluid-work``'s rows:

- R_ik <= sigma_i u_ik (finished by tau_{k+1}: none of i's weight after interval k),
- z_ik >= Delta'_ik u_ik (not finished: in the system through the part of k after r_i),
- u_ik >= u_{i,k+1}, and z_ik <= Delta'_ik u_{i,k-1} for k < G (finished by tau_k: not in the
  system in k).

Every schedule gives an integral point (u from its finish times), so HiGHS' proven MIP dual bound
after any time limit is a lower bound on the sum of z (a listed bound would take a tolerance
margin off it). Slices: the first 300 requests of splitwise_conv at 4 times the arrival rate
(``bench_conv_load.slice_instance``), ``splitwise-conv-100`` at 16 and 8 times. Printed per slice:
``fluid-work``'s LP on the same grid (interior point, its time), the time the MIP's dual bound
reaches it (the root LP, HiGHS' ``mip_lp_solver`` by ``--option``), the dual bound (mean seconds)
after 30, 60 and ``--seconds`` seconds, and HiGHS' status, dual and primal values (sums) with a
sample of the dual bound's trace. ``--coarsen c`` keeps every c-th point of ``fluid_grid``'s grid
(and its last). ``--blocks B`` also splits the slice into B blocks of consecutive arrivals:
deleting requests from a schedule leaves a schedule of the rest, so the blocks' bounds on their
sums of latencies add up to one on the slice's; printed are the blocks' LP values and dual bounds
summed (each block gets ``--seconds``). MIP options: no primal heuristics (only the dual bound
matters), relative gap 0; ``--option`` overrides them and sets others.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
from bench_conv_load import slice_instance

from optsched.fluid_bounds import FluidTerms, fluid_grid, fluid_lp
from optsched.fluid_work import least_work, work_rows
from optsched.instance import Instance, load_instance
from optsched.load_bounds import most_items, prompt_attention_extra
from optsched.lprows import LpRows
from optsched.schedule import Batch, Item, Schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms

#: Times (seconds) at which the dual bound is reported (plus the last).
CHECKPOINTS = (30.0, 60.0)

#: HiGHS options of the solves (``--option KEY=VALUE``).
OPTIONS: dict[str, Any] = {}


def slices() -> list[tuple[str, Instance]]:
    """The slices measured: splitwise_conv first 300 x4, splitwise-conv-100 x16 and x8."""
    base = load_instance("splitwise-conv-100")
    return [
        ("conv300 x4", slice_instance()),
        ("conv100 x16", apply_transforms(base, WorkloadTransforms(rate_scale=16.0))),
        ("conv100 x8", apply_transforms(base, WorkloadTransforms(rate_scale=8.0))),
    ]


class CountRows:
    """The ``extra`` hook: fluid-work's rows, the binaries u_ik and their rows, MIP options; keeps the
    model and the dual bound over time."""

    def __init__(self, work: np.ndarray, seconds: float) -> None:
        self.work, self.seconds = work, seconds
        self.h: Any = None
        self.cells: Any = None
        self.trace: list[tuple[float, float]] = []

    def __call__(self, h: Any, rows: LpRows, cells: Any, terms: FluidTerms, tau: np.ndarray) -> None:
        import highspy

        work_rows(h, rows, cells, terms, tau, self.work)
        self.h, self.cells = h, cells
        inner = np.flatnonzero(cells.inner)
        n = len(inner)
        u = np.full(len(cells.owner), -1)
        u[inner] = h.getNumCol() + np.arange(n)
        h.addVars(n, np.zeros(n), np.ones(n))
        h.changeColsIntegrality(n, u[inner].astype(np.int32), np.full(n, highspy.HighsVarType.kInteger))
        first = rows.add(np.full(n, -np.inf), np.zeros(n))  # R_ik - sigma_i u_ik <= 0
        rows.put(first + np.arange(n), cells.R[inner], 1.0)
        rows.put(first + np.arange(n), u[inner], -cells.sigma[inner])
        first = rows.add(np.zeros(n), np.full(n, np.inf))  # z_ik - Delta'_ik u_ik >= 0
        rows.put(first + np.arange(n), cells.z[inner], 1.0)
        rows.put(first + np.arange(n), u[inner], -cells.span[inner])
        later = inner[cells.inner[inner + 1]]  # cells k < G - 1: u_ik - u_i,k+1 >= 0
        first = rows.add(np.zeros(len(later)), np.full(len(later), np.inf))
        rows.put(first + np.arange(len(later)), u[later], 1.0)
        rows.put(first + np.arange(len(later)), u[later + 1], -1.0)
        after = np.flatnonzero(~cells.is_first & cells.inner)  # z_ik - Delta'_ik u_i,k-1 <= 0
        first = rows.add(np.full(len(after), -np.inf), np.zeros(len(after)))
        rows.put(first + np.arange(len(after)), cells.z[after], 1.0)
        rows.put(first + np.arange(len(after)), u[after - 1], -cells.span[after])
        h.setOptionValue("solver", "choose")
        h.setOptionValue("time_limit", float(self.seconds))
        h.setOptionValue("mip_heuristic_effort", 0.0)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
        for key, value in OPTIONS.items():
            h.setOptionValue(key, value)
        h.cbMipInterrupt.subscribe(self._record)

    def _record(self, event: Any) -> None:
        out = event.data_out
        self.trace.append((float(out.running_time), float(out.mip_dual_bound)))


def run(
    instance: Instance, seconds: float, coarsen: int, integral: bool
) -> tuple[float, list[tuple[float, float]], np.ndarray, CountRows | None]:
    """One solve (the MIP if ``integral``, else ``fluid-work``'s LP): wall seconds, the (time, dual
    bound of the sum of z) trace, the grid, the MIP's hook (its model and cells)."""
    terms = FluidTerms(instance)
    most = most_items(instance)
    work = least_work(instance, prompt_attention_extra(instance, instance.columns[1]))
    tau = fluid_grid(terms, most)
    assert tau is not None
    tau = tau[::coarsen] if (len(tau) - 1) % coarsen == 0 else np.append(tau[::coarsen], tau[-1])
    t0 = time.perf_counter()
    if not integral:  # fluid-work's LP (interior point, no crossover) on the same grid
        value = fluid_lp(terms, tau, most, seconds, partial(work_rows, work=work))
        wall = time.perf_counter() - t0
        return wall, [(wall, float(value or np.nan) * len(terms.release))], tau, None
    hook = CountRows(work, seconds)
    fluid_lp(terms, tau, most, seconds, hook)
    wall = time.perf_counter() - t0
    hook.trace.append((wall, float(hook.h.getInfo().mip_dual_bound)))
    info, sample = hook.h.getInfo(), hook.trace[:: max(1, len(hook.trace) // 8)]
    print(
        f"  N={len(terms.release)} G={len(tau) - 1} {hook.h.getModelStatus()} dual {info.mip_dual_bound:.4f} "
        f"primal {info.objective_function_value:.4f} trace {[(round(t, 1), round(b, 3)) for t, b in sample]}",
        flush=True,
    )
    return wall, hook.trace, tau, hook


def at(trace: list[tuple[float, float]], t: float) -> float:
    """The dual bound reached by time ``t`` (nan before the first report)."""
    got = [b for s, b in trace if (s <= t or t == trace[-1][0]) and np.isfinite(b)]
    return max(got) if got else float("nan")


def option_value(text: str) -> Any:
    """A HiGHS option's value from the command line: a number, a boolean or a string."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--coarsen", type=int, default=1)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--blocks", type=int, default=0)
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--follow", action="store_true")
    args = parser.parse_args()
    for item in args.option:
        key, value = item.split("=", 1)
        OPTIONS[key] = option_value(value)
    for name, instance in slices():
        if args.only and name not in args.only:
            continue
        N = len(instance.requests)
        wall, trace, tau, _ = run(instance, args.seconds, args.coarsen, False)
        print(f"{name}: N={N} G={len(tau) - 1} fluid-work LP {trace[-1][1] / N:.4f} s mean in {wall:.1f} s", flush=True)
        lp_value = trace[-1][1]
        wall, trace, tau, hook = run(instance, args.seconds, args.coarsen, True)
        root = next((s for s, b in trace if b >= (1.0 - 1e-3) * lp_value), float("nan"))
        marks = sorted({*(t for t in CHECKPOINTS if t < args.seconds), args.seconds})
        got = "  ".join(f"{t:.0f}s {at(trace, t) / N:.4f}" for t in marks)
        print(
            f"{name}: MIP dual bound at the LP's by {root:.1f} s; dual bound (mean s) {got}; wall {wall:.1f} s",
            flush=True,
        )
        if args.follow and hook is not None and np.isfinite(hook.h.getInfo().objective_function_value):
            followed(name, instance, hook, tau)
        if args.blocks:
            blocks(name, instance, args, marks)


def planned_fractions(
    instance: Instance, cells: Any, x: np.ndarray, tau: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per request (request order) the plan's (times, fraction of its weight done by then): 0 at its
    arrival, then at the end of each of its cells 1 - R_ik / sigma_i (1 after the last)."""
    left = np.where(cells.inner, x[np.maximum(cells.R, 0)], 0.0) / cells.sigma
    end = np.append(tau[1:], np.inf)[cells.k]
    out = []
    for i, r in enumerate(instance.requests):
        mine = cells.owner == i
        times = np.concatenate([[r.arrival], np.minimum(end[mine], tau[-1] + 1e6)])
        out.append((times, np.concatenate([[0.0], 1.0 - left[mine]])))
    return out


def follow_plan(instance: Instance, plan: list[tuple[np.ndarray, np.ndarray]]) -> Schedule:
    """Batches that track ``plan``: before each batch, every request in the system whose items done
    are below its planned fraction of its items by the batch's expected end (the last batch's length
    ahead) joins, the furthest behind first, within the token budget (a prompt chunk at most P and
    the room left, a decode one token); when none is behind, the furthest behind runs."""
    cm, lim = instance.cost_model, instance.limits
    reqs = instance.requests
    arrival = np.array([r.arrival for r in reqs])
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    items = np.ceil(prompt / lim.prefill_budget) + output - 1
    done, left, made, kv = np.zeros(len(reqs)), prompt.copy(), np.zeros(len(reqs), int), np.zeros(len(reqs), int)
    alive, finished = np.zeros(len(reqs), bool), np.zeros(len(reqs), bool)
    t, last, start, batches = 0.0, 0.0, None, []
    while not finished.all():
        alive |= (arrival <= t + 1e-12) & ~finished
        if not alive.any():
            t = start = float(arrival[~finished].min())
            continue
        idx = np.flatnonzero(alive)
        behind = np.array([np.interp(t + last, *plan[i]) for i in idx]) * items[idx] - done[idx]
        order = idx[np.argsort(-behind, kind="stable")]
        chosen = order[: max(1, int((behind > 0).sum()))]
        room, batch, pre, sq, ctx, kvs = lim.token_budget, [], 0, 0, 0, []
        for i in chosen:
            if room <= 0:
                break
            c = int(min(left[i], room, lim.prefill_budget)) if left[i] > 0 else 1
            batch.append(Item(reqs[i].id, c))
            if left[i] > 0:
                pre, sq, ctx = pre + c, sq + c * c, ctx + c * (prompt[i] - left[i])
            else:
                kvs.append(int(kv[i]))
            room -= c
        last = cm.batch_time(pre + len(kvs), pre, sq, len(kvs), sum(kvs), ctx, max(kvs, default=0))
        t += last
        batches.append(Batch(tuple(batch), start=start))
        start = None
        for item, i in zip(batch, chosen):
            done[i] += 1
            if left[i] > 0:
                left[i] -= item.tokens
                kv[i], made[i] = (prompt[i], 1) if left[i] == 0 else (0, 0)
            else:
                kv[i], made[i] = kv[i] + 1, made[i] + 1
            finished[i] = left[i] == 0 and made[i] >= output[i]
        alive &= ~finished
    return Schedule(instance.name, batches)


def followed(name: str, instance: Instance, hook: CountRows, tau: np.ndarray) -> None:
    """The replayed mean latency of :func:`follow_plan` on the MIP's incumbent, without the KV limit
    (which moves neither the bound nor the best schedule on these slices, docs/performance.md)."""
    x = np.array(hook.h.getSolution().col_value)
    free = replace(instance, limits=replace(instance.limits, kv_capacity=None))
    schedule = follow_plan(free, planned_fractions(instance, hook.cells, x, tau))
    rep = replay(free, schedule)
    value = rep.metrics.mean_latency if rep.feasible else float("nan")
    print(f"{name}: the incumbent's plan followed: mean latency {value:.4f} s ({len(schedule.batches)} batches)")


def blocks(name: str, instance: Instance, args: argparse.Namespace, marks: list[float]) -> None:
    """The LP values and MIP dual bounds of ``args.blocks`` blocks of consecutive arrivals, summed."""
    requests = list(instance.requests)
    order = np.argsort([r.arrival for r in requests], kind="stable")
    total, lp_sum = dict.fromkeys(marks, 0.0), 0.0
    for part in np.array_split(order, args.blocks):
        block = instance.with_requests([requests[int(j)] for j in sorted(part)])
        lp_sum += run(block, args.seconds, args.coarsen, False)[1][-1][1]
        trace = run(block, args.seconds, args.coarsen, True)[1]
        for t in marks:
            total[t] += at(trace, t)
    N = len(requests)
    got = "  ".join(f"{t:.0f}s {total[t] / N:.4f}" for t in marks)
    print(f"{name}: {args.blocks} blocks: fluid-work LPs {lp_sum / N:.4f}, MIP dual bounds {got}", flush=True)


if __name__ == "__main__":
    main()

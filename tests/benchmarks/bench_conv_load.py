"""Benchmark: which side holds the mean-latency gap on splitwise_conv first 300 x4 (run on demand).

    python tests/benchmarks/bench_conv_load.py [--time-limit 60] [--only NAME ...]

The slice is that of ``bench_latency_gaps.py`` (``../shared/data/traces/splitwise_conv.csv``, the
first 300 requests at 4 times the arrival rate, ``llama2-7b-h200``, C = P = 4096, M = 200,000,
R_max = 256). Printed:

1. *Load*: the requests arrived and their least item work (:func:`optsched.load_bounds.share_terms`'
   first column, under the profile's linear twin, each prompt's least attention included) by a few
   times, against the time elapsed.
2. *Relaxed instances*: for the slice, the slice without the KV limit (M unlimited), without the KV
   and running limits, every request at time 0 (``--offline``), and the slice at 1 and 2 times the
   arrival rate: the best proven bound of ``optsched bound --problem infermax --objective latency``
   and the mean latency of ``optsched solve --problem infermax --objective latency --time-limit S``
   (replayed), and their gap. If the gap collapsed without the KV limit, memory would be the weak
   side.
3. *The best schedule's structure* (the slice's solve, replayed): mean latency, time queued before a
   request's first batch, makespan, busy time, batches, items a batch, the time the batches take
   beyond their items' least terms (:func:`batch_excess`), the requests in the system over time and
   the latency by quartile of output length.
4. *Work the fluid bound prices*: ``fluid-latency``'s time rows charge each request omega_i sigma_i
   (:class:`optsched.fluid_bounds.FluidTerms`), against the least item work under the same terms
   (the profile's own per-token term, one whole tile a batch in the overhead;
   :func:`optsched.fluid_work.least_work`), which ``fluid-work`` prices.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from optsched.costmodel import Coefficients
from optsched.fluid_bounds import FluidTerms
from optsched.fluid_work import least_work
from optsched.instance import Instance, Limits
from optsched.load_bounds import prompt_attention_extra, share_terms
from optsched.schedule import Schedule, load_schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = next(
    (b / "shared" / "data" / "traces" / "splitwise_conv.csv" for b in REPO.parents if (b / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv",
)
PROFILE = ["--cost-model", "llama2-7b-h200", "--token-budget", "4096"]
LIMITS = ["--kv-capacity", "200000", "--max-running", "256"]
#: (name, instance arguments) of the slice and its relaxations.
VARIANTS = (
    ("x4", ["--rate-scale", "4", *PROFILE, *LIMITS]),
    ("x4, M unlimited", ["--rate-scale", "4", *PROFILE, "--max-running", "256"]),
    ("x4, M and R_max unlimited", ["--rate-scale", "4", *PROFILE]),
    ("offline (all at 0)", ["--offline", *PROFILE, *LIMITS]),
    ("x1", ["--rate-scale", "1", *PROFILE, *LIMITS]),
    ("x2", ["--rate-scale", "2", *PROFILE, *LIMITS]),
)


def slice_instance() -> Instance:
    """The slice (first 300 requests at 4 times the arrival rate) with its limits."""
    limits = Limits(token_budget=4096, prefill_budget=4096, kv_capacity=200_000, max_running=256)
    base = load_trace(str(TRACE), "llama2-7b-h200", limits, max_rows=300)
    return apply_transforms(base, WorkloadTransforms(first=300, rate_scale=4.0))


def optsched(args: list[str]) -> dict:
    """One ``python -m optsched ... --json`` run's JSON (wall time added as ``_wall``)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "optsched", *args, "--json"], capture_output=True, text=True, cwd=REPO, check=False
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"optsched {' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")
    out: dict = json.loads(done.stdout)
    out["_wall"] = time.perf_counter() - t0
    return out


def load_table(instance: Instance) -> None:
    """Section 1: arrivals and their least item work by time."""
    arrival = np.array([r.arrival for r in instance.requests])
    work = share_terms(instance)[:, 0]
    print(f"least item work {work.sum():.2f} s over arrivals spanning {arrival.max() - arrival.min():.2f} s")
    print("| by time (s) | arrived | least work arrived (s) | work / elapsed |")
    print("|---|---|---|---|")
    for t in (5.0, 10.0, 15.0, float(np.ceil(arrival.max()))):
        w = float(work[arrival <= t].sum())
        print(f"| {t:g} | {int((arrival <= t).sum())} | {w:.2f} | {w / t:.2f} |")


def relaxations(names: list[str] | None, seconds: float, folder: Path) -> Path:
    """Section 2 (the instances named in ``names``, every one when None); returns the schedule file
    of the slice's solve (for section 3; absent when the slice is not among them)."""
    print("| instance | best bound (s) | bound | solve (s) | gap | solve wall (s) |")
    print("|---|---|---|---|---|---|")
    out = folder / "x4.json"
    for name, args in VARIANTS:
        if names is not None and name not in names:
            continue
        inst = [str(TRACE), "--first", "300", *args]
        bounds = optsched(["bound", *inst, "--problem", "infermax", "--objective", "latency"])["bounds"]
        best = max((b for b in bounds if b["valid"]), key=lambda b: b["value"])
        extra = ["--out", str(out)] if name == "x4" else []  # the slice's schedule, for section 3
        solve = optsched(
            ["solve", *inst, "--problem", "infermax", "--objective", "latency", "--time-limit", str(seconds)] + extra
        )
        value = solve["objective"]
        gap = 100 * (value - best["value"]) / value
        print(
            f"| {name} | {best['value']:.4f} | {best['name']} | {value:.4f} | {gap:.1f} % | {solve['_wall']:.0f} |",
            flush=True,
        )
    return out


def batch_excess(instance: Instance, schedule: Schedule) -> tuple[float, float]:
    """(total batch time, total of the items' least terms under the linear twin) of ``schedule``:
    their difference is what its batches take beyond their items (overheads, whole tiles, the
    longest context)."""
    rep = replay(instance, schedule)
    coef = Coefficients.of(instance.cost_model.linear_twin())
    L, a, pa, pq, da, dk = (
        coef.layers,
        coef.per_token,
        coef.prefill_per_token,
        coef.prefill_per_token_sq,
        coef.decode_per_token,
        coef.decode_per_kv,
    )
    index = {r.id: k for k, r in enumerate(instance.requests)}
    prompt = np.array([r.prompt_tokens for r in instance.requests])
    held = np.zeros(len(index), dtype=np.int64)
    items = 0.0
    for batch in schedule.batches:
        for gone in batch.evict:
            held[index[gone]] = 0
        for item in batch.items:
            k = index[item.id]
            decode = held[k] >= prompt[k]
            prefill = (a + pa) * item.tokens + pq * item.tokens**2 + coef.prefill_per_ctx * item.tokens * held[k]
            items += L * (a + da + dk * held[k]) if decode else L * prefill
            held[k] += item.tokens
    return float(np.sum(np.array(rep.ends) - np.array(rep.starts))), items


def structure(instance: Instance, path: Path) -> None:
    """Section 3: the best schedule's structure."""
    schedule = load_schedule(str(path))
    rep = replay(instance, schedule)
    index = {r.id: k for k, r in enumerate(instance.requests)}
    arrival = np.array([r.arrival for r in instance.requests])
    out_len = np.array([r.output_tokens for r in instance.requests])
    finish = np.array([rep.outcomes[r.id].finish for r in instance.requests])
    first = np.full(len(index), np.inf)
    for start, batch in zip(rep.starts, schedule.batches, strict=True):
        for item in batch.items:
            first[index[item.id]] = min(first[index[item.id]], start)
    sizes = np.array([len(b.items) for b in schedule.batches])
    busy, items = batch_excess(instance, schedule)
    latency = finish - arrival
    print(f"mean latency {latency.mean():.4f} s, queued before the first batch {np.mean(first - arrival):.3f} s")
    print(
        f"makespan {max(rep.ends):.2f} s, busy {busy:.2f} s: items' least terms {items:.2f} s, "
        f"the rest {busy - items:.2f} s; {len(sizes)} batches, {sizes.mean():.1f} items a batch "
        f"({(sizes**2).sum() / sizes.sum():.1f} weighted by items), at most {sizes.max()}"
    )
    for t in (5.0, 10.0, 15.0, 21.0, 25.0, 30.0):
        arrived, done = int((arrival <= t).sum()), int((finish <= t).sum())
        print(f"  t = {t:g} s: arrived {arrived}, finished {done}, in the system {arrived - done}")
    edges = np.quantile(out_len, [0.0, 0.25, 0.5, 0.75, 1.0])
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        m = (out_len >= lo) & (out_len <= hi) if lo == edges[0] else (out_len > lo) & (out_len <= hi)
        print(
            f"  outputs {lo:.0f}-{hi:.0f}: {int(m.sum())} requests, latency {latency[m].mean():.3f} s, "
            f"queued {np.mean((first - arrival)[m]):.3f} s"
        )


def fluid_work(instance: Instance) -> None:
    """Section 4: the work ``fluid-latency``'s time rows charge against the least item work."""
    terms = FluidTerms(instance)
    attention = prompt_attention_extra(instance, instance.columns[1])
    print(
        f"fluid-latency's time rows charge sum omega_i sigma_i = {float(np.sum(terms.rate * terms.weight)):.2f} s; "
        f"least item work under its terms {least_work(instance, attention).sum():.2f} s, under the linear twin "
        f"{share_terms(instance)[:, 0].sum():.2f} s; "
        f"least overhead a batch {terms.overhead * 1e3:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="solve --time-limit (default 60)")
    parser.add_argument(
        "--only", nargs="*", help="run only these instances of section 2 (names as printed; none: skip it)"
    )
    parser.add_argument("--schedule", help="section 3 on this schedule file of the slice instead of the slice's solve")
    opts = parser.parse_args()
    instance = slice_instance()
    load_table(instance)
    fluid_work(instance)
    with tempfile.TemporaryDirectory() as tmp:
        path = relaxations(opts.only, opts.time_limit, Path(tmp))
        path = Path(opts.schedule) if opts.schedule else path
        if path.is_file():
            structure(instance, path)


if __name__ == "__main__":
    main()

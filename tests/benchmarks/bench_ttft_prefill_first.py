"""Benchmark: which side of the mean-TTFT gap is weak, measured with one hand-built schedule.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_ttft_prefill_first.py [--rate-scale 1 4 16]

Mean TTFT counts first tokens only, so a schedule may run every prefill before any decode. This
builds such a schedule for ``splitwise-conv-100`` at each rate scale (at each arrival or batch end,
the waiting prompts shortest first, whole, into one batch of at most C tokens started then; then
every later token in decode batches of all unfinished requests), replays it, and prints its mean
TTFT beside the ``srpf`` and ``vllm`` policies', the best schedule of the InferMax scale phase's
prefill-first search (:func:`optsched.problems.infermax.prefill_first.best_prefill_first`, 120 s at
most), the same search on the relaxed instance whose outputs are one token each (no decode at all;
its TTFT bounds are the instance's) and the best proven bound (seconds).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from optsched.budget import TimeBudget
from optsched.instance import Instance, load_instance
from optsched.load_bounds import proven_bounds
from optsched.policies import simulator_for
from optsched.problems.infermax.prefill_first import best_prefill_first
from optsched.schedule import Batch, Item, Schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms


def prefill_first(inst: Instance) -> Schedule:
    """Every prompt prefilled whole, shortest waiting first, in batches of at most C tokens started at
    the arrivals; then the later tokens, all unfinished requests in each decode batch."""
    cm, C = inst.cost_model, inst.limits.token_budget
    pending = sorted(inst.requests, key=lambda r: r.arrival)
    t, k, waiting, batches = 0.0, 0, [], []
    while k < len(pending) or waiting:
        if not waiting:
            t = max(t, pending[k].arrival)
        while k < len(pending) and pending[k].arrival <= t:
            waiting.append(pending[k])
            k += 1
        waiting.sort(key=lambda r: r.prompt_tokens)
        take, tokens = [], 0
        for r in waiting:
            if tokens + r.prompt_tokens <= C:
                take.append(r)
                tokens += r.prompt_tokens
        waiting = [r for r in waiting if r not in take]
        batches.append(Batch(tuple(Item(r.id, r.prompt_tokens) for r in take), start=t))
        t += cm.batch_time(tokens, tokens, sum(r.prompt_tokens**2 for r in take), 0, 0)
    left = {r.id: r.output_tokens - 1 for r in inst.requests}
    while any(left.values()):
        ids = [i for i, n in left.items() if n > 0]
        batches.append(Batch(tuple(Item(i, 1) for i in ids)))
        for i in ids:
            left[i] -= 1
    return Schedule(inst.name, tuple(batches), {"source": "prefill-first (bench_ttft_prefill_first.py)"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-scale", type=float, nargs="*", default=[1.0, 4.0, 16.0])
    opts = parser.parse_args()
    print(
        "| rate scale | prefill-first (s) | srpf (s) | vllm (s) | searched (s) | searched, O = 1 (s) | best bound (s) |"
        " bound | prefill-first gap | searched gap |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for scale in opts.rate_scale:
        inst = apply_transforms(load_instance("splitwise-conv-100"), WorkloadTransforms(rate_scale=scale))
        rep = replay(inst, prefill_first(inst))
        assert rep.feasible, rep.violations[:3]
        ttft = rep.metrics.mean_ttft
        policy = {p: replay(inst, simulator_for(p)(inst)).metrics.mean_ttft for p in ("srpf", "vllm")}
        best = max(proven_bounds(inst, "ttft"), key=lambda b: b.value)
        searched = best_prefill_first(inst, "ttft", TimeBudget.of(120))[1]
        one = replace(inst, requests=tuple(replace(r, output_tokens=1) for r in inst.requests))
        relaxed = best_prefill_first(one, "ttft", TimeBudget.of(120))[1]
        print(
            f"| {scale:g} | {ttft:.5f} | {policy['srpf']:.5f} | {policy['vllm']:.5f} | {searched:.5f} | "
            f"{relaxed:.5f} | {best.value:.5f} | {best.name} | {100 * (ttft - best.value) / ttft:.1f} % | "
            f"{100 * (searched - best.value) / searched:.1f} % |",
            flush=True,
        )


if __name__ == "__main__":
    main()

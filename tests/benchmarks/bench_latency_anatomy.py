"""Benchmark: where a schedule's mean latency goes, request by request (run on demand, not collected).

    python tests/benchmarks/bench_latency_anatomy.py SCHEDULE INSTANCE [--first N] [--rate-scale X]

Replays ``SCHEDULE`` (a schedule file of ``optsched solve --out``) on INSTANCE (a JSON file, a
shipped instance's name, or a trace file read under the profile and limits of
``bench_latency_gaps.py``: ``llama2-7b-h200``, C = P = 4096, M = 200,000, R_max = 256), its first N
requests with arrivals divided by X, and splits each request's latency F_i - r_i into parts, all in
seconds and averaged over the requests:

- ``alone``: its least time alone (the ``critical-path`` bound's A_i);
- ``own items``: the time its own items would take in batches of their own, less A_i (the chunking
  and context its schedule gave it beyond the least);
- in each batch B holding its item x, T(B) - T({x}) split into the others' share of the tiles
  (per_tile (ceil(n_B / t) - ceil(n_x / t))), the longest-context term beyond its own
  (L per_max_kv (KV_max(B) - m_x) for a decode item reading m_x slots) and the rest (the others'
  item terms), each by whether B holds another request's prefill chunk or only decode items;
- ``waiting``: the time in its window outside its own batches (queued, or waiting through batches
  without it).

The parts add up to the mean latency. It shows which terms of the cost model a request pays for the
others under load, to compare with what the latency bounds of ``optsched bound --objective latency``
price (docs/infermax.md): the pair bounds price the others' item terms and the overheads waited
through, not the others' tiles nor the longest-context term.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from optsched.bounds import critical_path_times
from optsched.instance import Instance, Limits, load_instance
from optsched.schedule import Schedule, load_schedule, replay
from optsched.workload import WorkloadTransforms, apply_transforms, is_trace_path, load_trace

#: The limits of the trace slices of ``bench_latency_gaps.py``.
TRACE_LIMITS = Limits(token_budget=4096, prefill_budget=4096, kv_capacity=200_000, max_running=256)


def anatomy(instance: Instance, schedule: Schedule) -> dict[str, float]:
    """The mean parts of the requests' latencies (seconds; module docstring)."""
    rep = replay(instance, schedule)
    if not rep.feasible:
        raise SystemExit(f"the schedule does not replay cleanly: {rep.violations[:3]}")
    cm = instance.cost_model
    L, dx = cm.layers, cm.decode.per_max_kv
    index = {r.id: k for k, r in enumerate(instance.requests)}
    prompt = np.array([r.prompt_tokens for r in instance.requests])
    held = np.zeros(len(index), dtype=np.int64)  # KV slots of each request before the batch
    parts: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(index)))
    own_total = np.zeros(len(index))
    for b, batch in enumerate(schedule.batches):
        for gone in batch.evict:
            held[index[gone]] = 0
        T = rep.ends[b] - rep.starts[b]
        n_tok = sum(item.tokens for item in batch.items)
        members = [(index[item.id], item.tokens) for item in batch.items]
        decoding = [k for k, _ in members if held[k] >= prompt[k]]
        kv_max = max((held[k] for k in decoding), default=0)
        for k, tokens in members:
            decode = held[k] >= prompt[k]
            alone = cm.decode_time(1, held[k], held[k]) if decode else cm.prefill_time(tokens, held[k])
            others_prefill = any(held[m] < prompt[m] for m, _ in members if m != k)
            kind = "with a prefill" if others_prefill else "decode-only"
            tiles = 0.0
            if cm.per_tile:
                tiles = L * cm.per_tile * (_tiles(n_tok, cm.token_tile) - _tiles(tokens, cm.token_tile))
            context = L * dx * (kv_max - held[k]) if decode else 0.0
            parts["own items"][k] += alone
            parts[f"others' tiles, {kind}"][k] += tiles
            parts[f"longest context, {kind}"][k] += context
            parts[f"others' items, {kind}"][k] += T - alone - tiles - context
            own_total[k] += T
        for k, tokens in members:
            held[k] += tokens
    arrival = np.array([r.arrival for r in instance.requests])
    finish = np.array([rep.outcomes[r.id].finish for r in instance.requests])
    alone = critical_path_times(instance)
    out = {"mean latency": float(np.mean(finish - arrival)), "alone": float(alone.mean())}
    out["own items beyond alone"] = float(np.mean(parts.pop("own items") - alone))
    out.update({name: float(v.mean()) for name, v in sorted(parts.items())})
    out["waiting"] = float(np.mean(finish - arrival - own_total))
    return out


def _tiles(tokens: int, tile: int) -> int:
    """Started tiles of ``tokens`` tokens."""
    return -(-tokens // tile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schedule", help="schedule file (optsched solve --out)")
    parser.add_argument("instance", help="instance JSON file, shipped instance's name or trace file")
    parser.add_argument("--first", type=int, help="keep the first N requests")
    parser.add_argument("--rate-scale", type=float, help="divide the arrival times by X")
    opts = parser.parse_args()
    if is_trace_path(opts.instance):
        base = load_trace(opts.instance, "llama2-7b-h200", TRACE_LIMITS, max_rows=opts.first)
    else:
        base = load_instance(opts.instance)
    instance = apply_transforms(base, WorkloadTransforms(first=opts.first, rate_scale=opts.rate_scale))
    found = anatomy(instance, load_schedule(opts.schedule))
    total = found["mean latency"]
    for name, value in found.items():
        share = "" if name == "mean latency" else f"  ({100 * value / total:.1f} %)"
        print(f"{name:>42}: {value:.4f} s{share}")


if __name__ == "__main__":
    main()

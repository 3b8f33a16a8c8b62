"""Execute a vllm-replay plan on the PyTorch engine (``optsched execute --engine torch PLAN``).

The engine keeps each request's sequence (prompt ids drawn from a seeded generator, then the ids it
samples) and how many of its tokens are in the KV cache, as an engine does. Per plan step, in order:

1. **Preempt**: each planned request must hold KV; its pages are freed and its cached count drops
   to 0 (recomputation: its next prefill starts over its prompt and the tokens generated so far,
   the contract's ``I := m + 1``).
2. **Items**: request r with n planned tokens processes the next n uncached tokens of its
   sequence, whose keys end at ``k = cached + n``; it samples a token when ``k`` reaches the end of
   its sequence (a prefill that completes the prompt, or a decode). A plan that asks for more
   tokens than a request has left, names a finished request or schedules one before its
   ``arrival_step`` is a mismatch: the run stops there and the result records it.
3. The step runs ``warmup`` untimed and ``repeats`` timed times (:meth:`.engine.TorchEngine.run_step`);
   ``measured_time`` is the median wall time, ``model_time`` the median device time (CUDA events
   on a GPU; the host time on a CPU).

After the last step every request must have produced exactly its output length. The result has the
vLLM executor's format (docs/executor.md), so ``optsched validate`` reads it unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..executor.run import RESULT_FORMAT, RESULT_VERSION
from ..export.vllm_replay import ReplayPlan
from .engine import StepItem, TorchEngine

__all__ = ["execute_plan", "plan_kv_tokens"]


@dataclass
class _Request:
    seq: list[int]
    output: int
    arrival_step: int
    cached: int = 0
    generated: int = 0

    @property
    def done(self) -> bool:
        return self.generated >= self.output


def plan_kv_tokens(plan: ReplayPlan, page_size: int) -> int:
    """KV tokens the engine needs for ``plan``: its peak in vLLM blocks plus a page per running request."""
    eng = plan.engine
    peak = max((s.kv_blocks for s in plan.steps), default=0) * int(eng["block_size"])
    return max(peak, int(eng["kv_blocks"]) * int(eng["block_size"])) + int(eng["max_num_seqs"]) * page_size


def _items(
    plan: ReplayPlan, j: int, reqs: dict[str, _Request], index: dict[str, int]
) -> tuple[list[StepItem], list[str], str | None]:
    """Step ``j``'s engine items and the ids that sample, or the mismatch that stops the run."""
    step = plan.steps[j]
    for rid in step.preempt:
        r = reqs[rid]
        if r.cached == 0 or r.done:
            return [], [], f"step {j}: preempt {rid!r}: it holds no KV"
        r.cached = 0
    items, sampling = [], []
    for rid, n in step.tokens.items():
        r = reqs[rid]
        if r.done:
            return [], [], f"step {j}: request {rid!r} is scheduled after it finished"
        if j < r.arrival_step:
            return [], [], f"step {j}: request {rid!r} is scheduled before its arrival step {r.arrival_step}"
        left = len(r.seq) - r.cached
        if not 1 <= n <= left:
            return [], [], f"step {j}: request {rid!r}: {n} tokens planned, {left} left to process"
        k = r.cached + n
        items.append(StepItem(index[rid], tuple(r.seq[r.cached : k]), k, k == len(r.seq)))
        if k == len(r.seq):
            sampling.append(rid)
    return items, sampling, None


def execute_plan(
    plan: ReplayPlan,
    engine: TorchEngine,
    model: str,
    *,
    repeats: int = 3,
    warmup: int = 1,
    seed: int = 0,
    cuda_graphs: bool = True,
) -> dict[str, Any]:
    """Execute ``plan`` on ``engine`` and return the result object (module docstring)."""
    rng = np.random.default_rng(seed)
    vocab = engine.shape.vocab
    reqs = {
        r.id: _Request(
            rng.integers(min(3, vocab - 1), vocab, size=r.prompt_tokens).tolist(), r.output_tokens, r.arrival_step
        )
        for r in plan.requests
    }
    index = {rid: i for i, rid in enumerate(reqs)}
    steps_out: list[dict[str, Any]] = []
    mismatches: list[str] = []
    for j, step in enumerate(plan.steps):
        t0 = time.perf_counter()
        for rid in step.preempt:
            if rid in reqs and reqs[rid].cached:
                engine.release(index[rid])
        items, sampling, mismatch = _items(plan, j, reqs, index)
        if mismatch:
            mismatches.append(mismatch)
            break
        prepared = time.perf_counter() - t0
        if warmup and items:
            engine.run_step(items, warmup, cuda_graphs)
        ids, times = engine.run_step(items, repeats, cuda_graphs)
        for it in items:
            reqs[plan.requests[it.owner].id].cached = it.k
        for rid, token in zip(sampling, ids):
            r = reqs[rid]
            r.seq.append(int(token))
            r.generated += 1
            if r.done:
                engine.release(index[rid])
        steps_out.append({
            "step": j,
            "batch": step.batch,
            "planned": dict(step.tokens),
            "scheduled": dict(step.tokens),
            "preempted": list(step.preempt),
            "predicted_time": step.predicted_time,
            "measured_time": times.wall if items else 0.0,
            "model_time": times.device if items else 0.0,
            "schedule_time": prepared,
            "wall_times": list(times.walls),
        })
    outputs = {rid: r.generated for rid, r in reqs.items() if r.done}
    length_errors = (
        []
        if mismatches
        else [
            f"request {rid!r}: produced {r.generated} tokens, expected {r.output}"
            for rid, r in reqs.items()
            if not r.done
        ]
    )
    done = [s["measured_time"] for s in steps_out]
    return {
        "format": RESULT_FORMAT,
        "version": RESULT_VERSION,
        "ok": not mismatches and not length_errors,
        "mismatches": mismatches,
        "length_errors": length_errors,
        "outputs": outputs,
        "predicted_total": plan.predicted_total,
        "measured_total": sum(done) if len(done) == len(plan.steps) else None,
        "steps": steps_out,
        "run": {
            **engine.describe(),
            "vllm": None,
            "model": model,
            "cuda_graphs": cuda_graphs and engine.on_cuda,
            "warmup": warmup,
            "repeats": repeats,
            "seed": seed,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "plan": plan.to_dict(),
    }

"""Drive an in-process vLLM V1 engine through a replay plan and measure every step.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): requests reach the scheduler
synchronously, and one ``LLMEngine.step()`` is exactly one schedule -> execute -> update cycle, so
plan step ``k`` is the ``k``-th ``step()`` call. Before each step the driver adds the requests whose
``arrival_step`` it is (token ids drawn from a seeded generator, ``max_tokens`` = output length,
``ignore_eos``, greedy). Each step's wall time is measured around ``step()``; the scheduler also
records its own scheduling time and the model time (from ``schedule`` returning to
``update_from_output``). A run stops at the first plan mismatch.

``warmup`` full passes of the plan run first and are discarded (one-off allocations and kernel
selection); ``repeats`` measured passes follow, and each step's measured time is their median.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..export.vllm_replay import ReplayPlan
from .models import ModelSpec
from .replay_scheduler import ReplayTracker, make_replay_scheduler

__all__ = ["RESULT_FORMAT", "RESULT_VERSION", "ExecutionError", "engine_kwargs", "execute_plan", "summary"]

RESULT_FORMAT = "optsched-vllm-result"
RESULT_VERSION = 1


class ExecutionError(RuntimeError):
    """vLLM is missing or the engine could not start."""


def engine_kwargs(
    plan: ReplayPlan, model: ModelSpec, *, dtype: str, eager: bool, kv_cache_bytes: int | None, seed: int
) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments the plan's engine limits ask for (no vLLM import)."""
    eng = plan.engine
    kwargs: dict[str, Any] = {
        "model": model.path,
        "load_format": model.load_format,
        "dtype": dtype,
        "enforce_eager": eager,
        "skip_tokenizer_init": True,
        "seed": seed,
        "max_model_len": int(eng["max_model_len"]),
        "max_num_seqs": int(eng["max_num_seqs"]),
        "max_num_batched_tokens": max(int(eng["max_num_batched_tokens"]), int(eng["max_num_seqs"])),
        "block_size": int(eng["block_size"]),
        "num_gpu_blocks_override": int(eng["num_gpu_blocks"]),
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
    }
    if kv_cache_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_bytes)
    return kwargs


def _prompts(plan: ReplayPlan, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    low = min(3, vocab - 1)  # keep clear of the usual special ids 0..2
    return [rng.integers(low, vocab, size=r.prompt_tokens).tolist() for r in plan.requests]


def _one_pass(
    engine: Any, plan: ReplayPlan, tracker: ReplayTracker, prompts: list[list[int]], tag: str
) -> dict[str, Any]:
    """Run the plan once; returns per-step wall times, records, mismatches and output lengths."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    arrivals: dict[int, list[int]] = {}
    for i, r in enumerate(plan.requests):
        arrivals.setdefault(r.arrival_step, []).append(i)
    ids: dict[str, str] = {}  # vLLM's internal request id -> plan id
    external: dict[str, str] = {}  # the id we passed (RequestOutput.request_id) -> plan id
    tracker.begin([(s.tokens, s.preempt) for s in plan.steps], ids)
    produced: dict[str, int] = {}
    wall: list[float] = []
    try:
        for k in range(len(plan.steps)):
            for i in arrivals.get(k, []):
                r = plan.requests[i]
                params = SamplingParams(max_tokens=r.output_tokens, ignore_eos=True, temperature=0.0, detokenize=False)
                internal = engine.add_request(f"{tag}{i}", TokensPrompt(prompt_token_ids=prompts[i]), params)
                ids[internal] = external[f"{tag}{i}"] = r.id
            t0 = time.perf_counter()
            outputs = engine.step()
            wall.append(time.perf_counter() - t0)
            for out in outputs:
                if out.finished:
                    produced[external.get(out.request_id, out.request_id)] = len(out.outputs[0].token_ids)
            if tracker.mismatches:
                break
    finally:
        tracker.end()
    unfinished = sorted(r.id for r in plan.requests if r.id not in produced)
    if unfinished and not tracker.mismatches:
        tracker.mismatches.append(
            f"after the plan's last step (step {len(plan.steps) - 1}) requests {unfinished[:10]} are unfinished"
        )
    if unfinished:  # drop what is left so that the engine is clean for anything after
        engine.abort_request([i for i, rid in ids.items() if rid in unfinished], internal=True)
    return {
        "wall": wall,
        "records": list(tracker.records),
        "mismatches": list(tracker.mismatches),
        "produced": produced,
    }


def execute_plan(
    plan: ReplayPlan,
    model: ModelSpec,
    *,
    dtype: str = "auto",
    eager: bool = True,
    kv_cache_bytes: int | None = None,
    repeats: int = 1,
    warmup: int = 1,
    seed: int = 0,
    log: bool = False,
) -> dict[str, Any]:
    """Execute ``plan`` on vLLM and return the result object (see docs/executor.md).

    Raises
    ------
    ExecutionError
        vLLM is not importable or the engine does not start.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    # vLLM logs every engine detail at INFO, and a harmless chat-template traceback without a
    # tokenizer at WARNING; set VLLM_LOGGING_LEVEL=INFO to see them.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    torch, vllm, llm_class, platform = _import_vllm()
    on_cpu = platform.is_cpu()
    if on_cpu and kv_cache_bytes is None and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        kv_cache_bytes = 256 * 2**20  # bypasses the CPU NUMA-node memory check; blocks come from the plan
    kwargs = engine_kwargs(plan, model, dtype=dtype, eager=eager, kv_cache_bytes=kv_cache_bytes, seed=seed)
    tracker = ReplayTracker()
    t_init = time.perf_counter()
    try:
        llm = llm_class(scheduler_cls=make_replay_scheduler(tracker), **kwargs)
    except Exception as exc:  # report the engine's own reason
        raise ExecutionError(f"vLLM engine did not start: {type(exc).__name__}: {exc}") from exc
    init_time = time.perf_counter() - t_init
    prompts = _prompts(plan, model.vocab_size, seed)
    passes = _run_passes(llm.llm_engine, plan, tracker, prompts, warmup, repeats, log)
    measured = passes[warmup:] if len(passes) > warmup else passes[-1:]
    bad = next((r for r in passes if r["mismatches"]), None)
    steps_out = _result_steps(plan, measured)
    produced = (bad or measured[-1])["produced"]
    length_errors = [
        f"request {r.id!r}: produced {produced.get(r.id)} tokens, expected {r.output_tokens}"
        for r in plan.requests
        if r.id in produced and produced[r.id] != r.output_tokens
    ]
    mismatches = (bad or measured[-1])["mismatches"]
    done = [s["measured_time"] for s in steps_out if s["measured_time"] is not None]
    return {
        "format": RESULT_FORMAT,
        "version": RESULT_VERSION,
        "ok": not mismatches and not length_errors and len(produced) == len(plan.requests),
        "mismatches": mismatches,
        "length_errors": length_errors,
        "outputs": produced,
        "predicted_total": plan.predicted_total,
        "measured_total": sum(done) if len(done) == len(plan.steps) else None,
        "steps": steps_out,
        "run": {
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "device": "cpu" if on_cpu else platform.get_device_name(),
            "model": model.name,
            "model_path": model.path,
            "load_format": model.load_format,
            "dtype": dtype,
            "eager": eager,
            "warmup": warmup,
            "repeats": repeats,
            "passes_run": len(passes),
            "engine_init_time": init_time,
            "engine_kwargs": dict(kwargs),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "plan": plan.to_dict(),
    }


def _import_vllm() -> tuple[Any, Any, Any, Any]:
    """``(torch, vllm, vllm.LLM, vllm's current platform)``; an ExecutionError when vLLM is unusable."""
    try:
        import torch
        import vllm
        from vllm import LLM
        from vllm.platforms import current_platform
    except Exception as exc:  # noqa: BLE001 - any import failure means "no usable vLLM"
        raise ExecutionError(
            f"vLLM is not importable ({type(exc).__name__}: {exc}); "
            f"install the extra: pip install 'optsched[vllm]' (docs/executor.md)"
        ) from None
    return torch, vllm, LLM, current_platform


def _run_passes(
    engine: Any,
    plan: ReplayPlan,
    tracker: ReplayTracker,
    prompts: list[list[int]],
    warmup: int,
    repeats: int,
    log: bool,
) -> list[dict[str, Any]]:
    """Up to ``warmup + repeats`` passes over the plan (the first ``warmup`` untimed), stopping at the
    first pass with a mismatch."""
    done = []
    for p in range(warmup + repeats):
        res = _one_pass(engine, plan, tracker, prompts, tag=f"p{p}-")
        if log:
            print(
                f"execute: pass {p} ({'warm-up' if p < warmup else 'measured'}): "
                f"{len(res['wall'])} steps, {sum(res['wall']):.4f} s, {len(res['mismatches'])} mismatches",
                file=sys.stderr,
            )
        done.append(res)
        if res["mismatches"]:
            break
    return done


def _result_steps(plan: ReplayPlan, measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per plan step, what the engine did and the medians of its times over the measured passes."""
    steps_out = []
    for k, step in enumerate(plan.steps):
        walls = [r["wall"][k] for r in measured if k < len(r["wall"])]
        models = [
            r["records"][k].model_time
            for r in measured
            if k < len(r["records"]) and r["records"][k].model_time is not None
        ]
        scheds = [r["records"][k].schedule_time for r in measured if k < len(r["records"])]
        rec = measured[-1]["records"][k] if k < len(measured[-1]["records"]) else None
        steps_out.append({
            "step": k,
            "batch": step.batch,
            "planned": dict(step.tokens),
            "scheduled": rec.scheduled if rec else None,
            "preempted": rec.preempted if rec else None,
            "predicted_time": step.predicted_time,
            "measured_time": statistics.median(walls) if walls else None,
            "model_time": statistics.median(models) if models else None,
            "schedule_time": statistics.median(scheds) if scheds else None,
            "wall_times": walls,
        })
    return steps_out


def summary(result: Mapping[str, Any]) -> str:
    """One human-readable line about a result."""
    n = len(result["steps"])
    status = "ok" if result["ok"] else "FAILED"
    meas = result.get("measured_total")
    return (
        f"{status}: {n} steps, {len(result['mismatches'])} mismatches, "
        f"{len(result['outputs'])} requests finished; predicted {result['predicted_total']:.6g} s, "
        f"measured {'n/a' if meas is None else f'{meas:.6g} s'}"
    )

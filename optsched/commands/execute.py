"""``optsched execute PLAN --model DIR|CONFIG [--engine vllm|torch] [--dtype D] [--out RESULT] [--json]``.

``--engine torch`` runs the plan on optsched's PyTorch engine instead (:mod:`optsched.torchengine`:
a CUDA graph per step on a GPU, eager with SDPA attention on a CPU), writing the same result format.

Runs a vLLM replay plan (``optsched export --format vllm-replay``) on a real vLLM V1 engine in this
process and writes a result JSON: per step the planned and scheduled token counts, the predicted
and measured times, plus any plan mismatch (each naming the step) and every request's output
length. Needs the optional extra ``pip install 'optsched[vllm]'`` (docs/executor.md).
Exit 0 when vLLM did exactly what the plan says, 1 on a mismatch or a wrong output length,
2 on bad input (plan, model), 3 when vLLM is missing or the engine does not start.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..export.vllm_replay import PlanError, load_plan
from ..jsonio import write_json_atomic
from ._common import (
    EXIT_INTERNAL,
    EXIT_NO,
    BadInput,
    check_output_path,
    positive_int,
    print_json,
    seed_int,
    strict_int,
    torch_device,
)

#: Largest ``--kv-cache-bytes`` (1 PiB, far beyond the memory of any accelerator).
MAX_KV_CACHE_BYTES = 2**50


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "execute",
        help="execute a vllm-replay plan on a real vLLM engine and measure each step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", help="plan JSON from 'optsched export --format vllm-replay'")
    p.add_argument(
        "--model",
        required=True,
        help="model directory, a Hugging Face config.json, or a shipped config name "
        "(tiny-llama, llama2-7b, llama2-70b, llama-65b): configs run with dummy weights",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="dtype (auto, float32, bfloat16, float16; default auto)",
    )
    p.add_argument("--out", help="result JSON (default: PLAN with suffix .result.json)")
    p.add_argument("--repeats", type=strict_int, default=3, help="measured passes; per-step median (default 3)")
    p.add_argument("--warmup", type=strict_int, default=1, help="discarded passes before measuring (default 1)")
    p.add_argument(
        "--kv-cache-bytes",
        type=strict_int,
        default=None,
        help="KV cache memory for vLLM in bytes, at most 2^50 (default on CPU 256 MiB; the block count comes "
        "from the plan)",
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="allow CUDA graphs (default: enforce_eager, one measured kernel launch per step)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="seed for the prompt token ids and the engine")
    p.add_argument(
        "--engine",
        choices=("vllm", "torch"),
        default="vllm",
        help="vllm (default) or torch: optsched's PyTorch engine (docs/torchengine.md), for GPUs "
        "without vLLM; --model is then a built-in name or a config.json",
    )
    g = p.add_argument_group("--engine torch only")
    g.add_argument("--device", type=torch_device, help="cpu, cuda or cuda:N (default: cuda when PyTorch sees one)")
    g.add_argument("--threads", type=positive_int, help="CPU threads PyTorch may use")
    g.add_argument(
        "--no-cuda-graphs", action="store_true", help="run GPU steps eagerly (default: a CUDA graph per step)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (the summary)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        raise BadInput(str(exc)) from None
    if args.repeats < 1 or args.warmup < 0:
        raise BadInput("--repeats must be >= 1 and --warmup >= 0")
    out = args.out or str(Path(args.plan).with_suffix("")) + ".result.json"
    check_output_path(out)
    if args.engine == "torch":
        return _finish(args, out, _run_torch(args, plan))
    for flag, value in (
        ("--device", args.device),
        ("--threads", args.threads),
        ("--no-cuda-graphs", args.no_cuda_graphs),
    ):
        if value:
            raise BadInput(f"{flag} applies to --engine torch only")
    if args.kv_cache_bytes is not None and not 1 <= args.kv_cache_bytes <= MAX_KV_CACHE_BYTES:
        raise BadInput(
            f"--kv-cache-bytes: must be from 1 to {MAX_KV_CACHE_BYTES:,} (1 PiB), got {args.kv_cache_bytes:,}"
        )
    from ..executor.models import ModelError, resolve_model
    from ..executor.run import ExecutionError, execute_plan

    with tempfile.TemporaryDirectory(prefix="optsched-model-") as work:
        try:
            model = resolve_model(args.model, work)
            model.check_fits(int(plan.engine["max_model_len"]))
        except ModelError as exc:
            raise BadInput(str(exc)) from None
        try:
            result = execute_plan(
                plan,
                model,
                dtype=args.dtype,
                eager=not args.cuda_graphs,
                kv_cache_bytes=args.kv_cache_bytes,
                repeats=args.repeats,
                warmup=args.warmup,
                seed=args.seed,
                log=not args.json,
            )
        except ExecutionError as exc:
            print(f"optsched: error: {exc}", file=sys.stderr)
            return EXIT_INTERNAL
    return _finish(args, out, result)


def _run_torch(args: argparse.Namespace, plan: Any) -> dict[str, Any] | None:
    """The plan on optsched's PyTorch engine (None when PyTorch or the device is unusable: reported)."""
    from ..torchengine.engine import PAGE_SIZE, EngineError, TorchEngine, import_torch
    from ..torchengine.execute import execute_plan, plan_kv_tokens
    from ..torchengine.shapes import ShapeError, load_shape

    if args.kv_cache_bytes is not None or args.cuda_graphs:
        raise BadInput("--kv-cache-bytes and --cuda-graphs apply to --engine vllm only")
    try:
        shape = load_shape(args.model)
    except ShapeError as exc:
        raise BadInput(str(exc)) from None
    if int(plan.engine["max_model_len"]) > shape.max_positions:
        raise BadInput(
            f"--model {args.model!r}: the plan needs {plan.engine['max_model_len']} positions, the "
            f"model's max_position_embeddings is {shape.max_positions}"
        )
    try:
        torch = import_torch()
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = None if args.dtype == "auto" else args.dtype
        page = PAGE_SIZE["cuda" if device.startswith("cuda") else "cpu"]
        engine = TorchEngine(shape, device, dtype, plan_kv_tokens(plan, page), args.seed, args.threads)
        return execute_plan(
            plan,
            engine,
            args.model,
            repeats=args.repeats,
            warmup=args.warmup,
            seed=args.seed,
            cuda_graphs=not args.no_cuda_graphs,
        )
    except EngineError as exc:
        print(f"optsched: error: {exc}", file=sys.stderr)
        return None


def _finish(args: argparse.Namespace, out: str, result: dict[str, Any] | None) -> int:
    """Write the result and report it (exit 0 exact replay, 1 mismatch, 3 engine unusable)."""
    from ..executor.run import summary

    if result is None:
        return EXIT_INTERNAL
    write_json_atomic(out, result)
    for line in [*result["mismatches"], *result["length_errors"]]:
        print(f"optsched: plan mismatch: {line}", file=sys.stderr)
    if args.json:
        print_json(
            {
                k: result[k]
                for k in ("ok", "mismatches", "length_errors", "outputs", "predicted_total", "measured_total")
            }
            | {"result": out, "steps": len(result["steps"]), "run": result["run"]}
        )
    else:
        print(f"{summary(result)}; wrote {out}")
    return 0 if result["ok"] else EXIT_NO

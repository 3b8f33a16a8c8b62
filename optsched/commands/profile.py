"""``optsched profile --model NAME|CONFIG.json [--device cuda] [--dtype bfloat16] [--out FILE.toml] [--json]``.

Measures a cost-model profile on this machine with PyTorch alone (:mod:`optsched.torchengine`): a
Llama-family shape with random weights, a grid of step kinds like ``../shared/data/gpu`` (prefill,
chunked prefill over cached keys, decode, mixed, heterogeneous), each step a CUDA graph timed with
CUDA events on a GPU (eager with SDPA attention on a CPU); then the fit of every term of the cost
model (:func:`optsched.measured.fit_grid`), its error per step kind and the profile TOML.
``--steps-out`` keeps the measured steps (the step-measurement format: ``optsched fit`` and
``optsched validate`` read it). Exit 3 when PyTorch or the device is unusable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..costfit import FIT_LOSSES, profile_toml
from ..jsonio import write_json_atomic, write_text_atomic
from ._common import (
    EXIT_INTERNAL,
    EXIT_OK,
    BadInput,
    add_json_flag,
    check_profile_out,
    positive_int,
    print_json,
    seed_int,
    strict_int,
    torch_device,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="measure a cost-model profile on this machine's GPU with PyTorch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="a built-in shape (llama2-7b, llama2-13b, llama3-8b, ...) or a Hugging Face config.json (or its folder)",
    )
    p.add_argument("--device", type=torch_device, help="cpu, cuda or cuda:N (default: cuda when PyTorch sees one)")
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        help="bfloat16 (GPU default), float16 or float32 (CPU default)",
    )
    p.add_argument("--out", metavar="FILE.toml", help="write the fitted profile here")
    p.add_argument("--name", help="profile name (default: the --out file's stem, else MODEL-DEVICE)")
    p.add_argument("--steps-out", metavar="FILE.json", help="write the measured steps here")
    p.add_argument("--tokens", type=positive_int, help="largest step in tokens (default 4096 on a GPU, 64 on a CPU)")
    p.add_argument(
        "--max-context",
        type=positive_int,
        help="longest context in the grid (default: min(8192, the model's positions) on a GPU, 256 on a CPU)",
    )
    p.add_argument("--repeats", type=positive_int, default=7, help="timed runs per step; median (default 7)")
    p.add_argument("--warmup", type=strict_int, default=1, help="untimed runs per step before timing (default 1)")
    p.add_argument("--loss", choices=FIT_LOSSES, default="l1", help="fit loss on relative error (default l1)")
    p.add_argument("--threads", type=positive_int, help="CPU threads PyTorch may use")
    p.add_argument("--no-cuda-graphs", action="store_true", help="time GPU steps eagerly")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the weights and the heterogeneous rows")
    add_json_flag(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from ..measured import fit_grid, grid_errors
    from ..torchengine.engine import EngineError, TorchEngine, import_torch, kv_tokens_within
    from ..torchengine.profile import grid_rows, measure_grid
    from ..torchengine.shapes import ShapeError, load_shape

    check_profile_out(args.out, args.steps_out)
    if args.warmup < 0:
        raise BadInput("--warmup must be >= 0")
    try:
        shape = load_shape(args.model)
    except ShapeError as exc:
        raise BadInput(str(exc)) from None
    try:
        torch = import_torch()
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        gpu = device.startswith("cuda")
        if args.no_cuda_graphs and not gpu:
            raise BadInput(f"--no-cuda-graphs: only for a GPU; on {device} every step runs eagerly")
        tokens = args.tokens or (4096 if gpu else 64)
        context = min(args.max_context or (8192 if gpu else 256), shape.max_positions)
        if context < 16 or tokens > context:
            raise BadInput(
                f"--tokens {tokens} and --max-context {context}: need 16 <= tokens <= context <= the "
                f"model's {shape.max_positions} positions"
            )
        rows = grid_rows(tokens, context, args.seed)
        kv = kv_tokens_within(shape, device, args.dtype, 64 * context + tokens)
        engine = TorchEngine(shape, device, args.dtype, kv, args.seed, args.threads)
        log = None if args.json else (lambda line: print(line, file=sys.stderr))
        data = measure_grid(
            engine, rows, repeats=args.repeats, warmup=args.warmup, cuda_graphs=not args.no_cuda_graphs, log=log
        )
    except EngineError as exc:
        print(f"optsched: error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    name = args.name or (args.out.rsplit("/", 1)[-1].removesuffix(".toml") if args.out else f"{shape.name}-{device}")
    fit = fit_grid(data, name, "gpu", args.loss)
    errors = grid_errors(data, fit.model, "gpu")
    source = (
        f"measured by optsched profile: {shape.name} (random weights, {data['model_shape']['layers']} layers), "
        f"{data['device']}, torch {data['torch']}, {'CUDA graphs' if data['cuda_graphs'] else 'eager'}, "
        f"{len(rows)} steps, {data['date']}; {args.loss} fit on relative error, coefficients >= 0"
    )
    if args.steps_out:
        write_json_atomic(args.steps_out, data)
    if args.out:
        m = fit.model
        write_text_atomic(args.out, profile_toml(name, source, m.base, m.per_token, template=m))
    out: dict[str, Any] = {
        "model": shape.name,
        "device": data["device"],
        "steps": len(rows),
        "profile": fit.model.to_dict(),
        "errors": errors,
        "written": args.out,
        "steps_out": args.steps_out,
        "source": source,
    }
    if args.json:
        print_json(out)
    else:
        print(source)
        for kind, e in errors.items():
            print(f"  {kind:<12} {e['steps']:4d} steps: mean error {e['mean_pct']:5.1f} %, max {e['max_pct']:5.1f} %")
        print(f"profile {fit.model.to_dict()}" + (f"; written to {args.out}" if args.out else ""))
    return EXIT_OK

"""Table 3 of the Aladdin paper (optimal GPUs per worker, Eq. 6): datasheet roofline vs measured.

For every (model, GPU) of Table 3 prints ``N_g^opt`` and the Eq. 6 terms per N under both variants of
:mod:`tests.support.aladdin_workers` (the measured one reads
``<repo>/../shared/data/vidur_profiling``), then, for the entries that differ from the paper, the range
of the all-reduce ring-step latency ``alpha`` (the one assumed number that decides between TP degrees)
in which Eq. 6 would pick the paper's size, scanned from 0 to ``--max-alpha`` microseconds. Also
checks the measured variant's layer-size interpolation on a held-out profile (Llama-3-8B on A100).
Run:

    python -m tests.benchmarks.study_aladdin_table3 [--max-alpha 400]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DATA = next(
    (p for p in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data") if p.is_dir()),
    REPO.parent / "shared" / "data",
)

from optsched.costfit import read_vidur_mlp_profile  # noqa: E402
from tests.support.aladdin_workers import (  # noqa: E402
    hardware_data,
    layer_params,
    measured_layers,
    optimal_worker_size,
    throughput_table,
)

TABLE3 = [
    ("llama2-70b", "a100", 2),
    ("llama2-13b", "a100", 1),
    ("llama2-13b", "v100", 2),
    ("llama2-7b", "a100", 1),
    ("llama2-7b", "v100", 1),
]
#: Held-out check of the layer-size interpolation: Meta-Llama-3-8B (hidden 4096, 8 KV heads, MLP 14336).
HELD_OUT = (
    "mlp_a100_meta-llama_Meta-Llama-3-8B.csv",
    {"hidden": 4096, "kv_heads": 8, "head_dim": 128, "intermediate": 14336},
)


def terms(model: str, gpu: str, measured) -> str:
    return "; ".join(
        f"N={r['gpus']}: c3 {1e3 * r['c3']:.1f} ms, B {r['B']:.1f}, b_kv {r['b_kv']:.0f}, T_max {r['T_max']:.0f}"
        for r in throughput_table(model, gpu, measured)
    )


def alpha_range(model: str, gpu: str, paper: int, measured, max_alpha: float) -> str:
    """The alphas (1-us grid) at which Eq. 6 picks the paper's N, as intervals."""
    hw = copy.deepcopy(hardware_data())
    hits = []
    for alpha in np.arange(0.0, max_alpha + 1e-9, 1.0):
        hw["gpu"][gpu]["allreduce_step_latency_us"] = float(alpha)
        try:
            ok = optimal_worker_size(model, gpu, measured, hw) == paper
        except ValueError:  # c4 < 0: the unbatched latency at the smallest worker exceeds T_dec / 1.3
            ok = False
        hits.append(ok)
    spans, start = [], None
    for k, ok in enumerate(hits + [False]):
        if ok and start is None:
            start = k
        if not ok and start is not None:
            spans.append(f"{start}-{k - 1} us")
            start = None
    return ", ".join(spans) or f"none up to {max_alpha:g} us"


def held_out(measured) -> str:
    name, shape = HELD_OUT
    size = layer_params(shape)
    out = []
    for n in measured.fixed:
        x, y = read_vidur_mlp_profile(str(DATA / "vidur_profiling" / name), n)
        keep = np.isin(x, measured.tokens)
        pred = measured.layer_time(n, size)[np.isin(measured.tokens, x[keep])]
        err = np.abs(pred / y[keep] - 1)
        out.append(f"TP{n}: mean {100 * err.mean():.1f} %, max {100 * err.max():.1f} %")
    return "; ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-alpha", type=float, default=400.0)
    args = ap.parse_args()
    if not (DATA / "vidur_profiling").is_dir():
        print(f"skip: {DATA / 'vidur_profiling'} not available", file=sys.stderr)
        return 0
    measured = measured_layers(str(DATA))
    hw = hardware_data()
    print(
        "| model | GPU | paper | datasheet | measured | alpha assumed | paper's N for alpha in (datasheet) "
        "| (measured) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model, gpu, paper in TABLE3:
        ds, ms = optimal_worker_size(model, gpu), optimal_worker_size(model, gpu, measured)
        print(
            f"| {model} | {gpu} | {paper} | {ds} | {ms} | {hw['gpu'][gpu]['allreduce_step_latency_us']:g} us "
            f"| {alpha_range(model, gpu, paper, None, args.max_alpha)} "
            f"| {alpha_range(model, gpu, paper, measured, args.max_alpha)} |"
        )
    print()
    for model, gpu, _ in TABLE3:
        print(f"- {model}/{gpu} datasheet: {terms(model, gpu, None)}")
        print(f"- {model}/{gpu} measured: {terms(model, gpu, measured)}")
    print()
    print(f"Held-out Llama-3-8B/A100 layer time from the 7b/70b interpolation: {held_out(measured)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

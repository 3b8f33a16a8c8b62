"""Worker configuration: Aladdin's per-GPU throughput model (Eqs. 5, 6) and ``N_g^opt``.

For a worker of ``N`` GPUs (tensor-parallel degree) the coefficients of Eqs. 2 and 3 are the sum of
a compute part, an attention (KV read) part, an all-reduce part and a TP-invariant overhead ``c4``
(Eq. 5). Two variants of the compute and KV parts exist; the rest is shared.

**Datasheet roofline** (``measured=None``; a reference fit scaled with Eq. 5 plus communication,
docs/aladdin.md, A13): weights ``W`` bytes read once per iteration at the datasheet bandwidth ``BW``,
per-token compute ``2 P / (N F mfu)`` at fp16 throughput ``F`` and utilisation ``mfu``:
``c3 = c1 = W / (N BW)``, ``c2 = k1 = 2 P / (N F mfu)``, ``k2 = kv_b / (N BW)``.

**Measured** (``measured=`` :func:`measured_layers`): Vidur's per-layer non-attention operator
times on A100 for TP 1, 2, 4, 8 (Llama-2-7b and -70b, every token count ``x``). For each ``N`` and
``x`` the two models' times determine a line in the layer's parameter count ``P_l``,
``t(N, x; P_l) = fixed(N, x) + per_param(N, x) * P_l`` (fixed: kernel launches and other work
independent of the layer's size). A model's layer time on the profiled GPU is read off that line
(this is how Llama-2-13b is obtained); on another GPU the size-proportional part is scaled by the
datasheet bandwidth ratio for decode (memory bound) and by the fp16 throughput ratio for prefill
(compute bound), the fixed part is kept. Then, with ``L`` layers,
``(c3, c2) = L * fit_linear`` over decode batches ``x <= decode_max_tokens`` and
``(c1, k1) = L * fit_linear`` over every ``x`` (:func:`optsched.costfit.fit_linear`). Attention is
not in the profile: decode reads the KV cache at the bandwidth share that the measured weight reads
reach (``eff = 2 bytes / (per_param(1, 1) * BW_ref)``), ``k2 = kv_b / (N BW eff)``.

**Shared.** ``A = 2 * layers`` all-reduces of ``hidden * 2`` bytes per token per iteration, with the
textbook ring cost ``2 (N-1) alpha + 2 (N-1)/N * bytes / bw_link`` (Thakur, Rabenseifner, Gropp
2005): ``A * 2 (N-1) alpha`` is added to ``c3`` and ``c1``, ``A * hidden * 2 B * 2 (N-1)/N / bw_link``
to ``c2`` and ``k1``. ``c4`` is calibrated once per (model, GPU, variant) by the paper's SLO rule:
the unbatched per-token latency ``c3 + c2 + k2 * lbar`` at the smallest worker that holds the model
equals ``T_dec / 1.3``; it is added to ``c3`` and ``c1`` for every ``N``.
KV capacity ``M(N) = N * m_gpu * util - W`` (bytes). Eq. 6 with the computable recipe of docs/aladdin.md, A13:
``lbar = E[l_in] + E[l_out] / 2``, ``m_r = kv(lbar)``, ``b_kv = M / m_r``,
``t_kv = t_d(b_kv, b_kv lbar)``, ``B = (T_dec - c3) / (k2 lbar + c2)`` and
``T_max(N) = min(b_kv / (N t_kv), B / (N T_dec))``; ``N_g^opt = argmax T_max`` over the powers of two
up to the GPUs of one node whose memory holds the weights.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from optsched.costfit import fit_linear, read_vidur_mlp_profile
from optsched.costmodel import CostModelError

__all__ = [
    "MeasuredLayers",
    "WorkerCoefficients",
    "feasible_worker_sizes",
    "hardware_data",
    "layer_params",
    "measured_layers",
    "optimal_worker_size",
    "throughput_table",
    "worker_coefficients",
]


@lru_cache(maxsize=1)
def hardware_data() -> dict[str, Any]:
    """The parsed ``aladdin_hardware.toml`` (beside this module)."""
    with (Path(__file__).parent / "aladdin_hardware.toml").open("rb") as fh:
        return tomllib.load(fh)


def layer_params(model: Mapping[str, Any]) -> int:
    """Parameters of one decoder layer: Q/O ``2 h^2``, K/V ``2 h kv_heads head_dim``, gated MLP ``3 h i``."""
    h = model["hidden"]
    return 2 * h * h + 2 * h * model["kv_heads"] * model["head_dim"] + 3 * h * model["intermediate"]


@dataclass(frozen=True)
class MeasuredLayers:
    """Measured per-layer non-attention time on the profiled GPU, split by layer size.

    ``time(N, x) = fixed[N][k] + per_param[N][k] * layer_params`` at token count ``x = tokens[k]``,
    in seconds (see the module docstring).
    """

    tokens: np.ndarray
    fixed: Mapping[int, np.ndarray]
    per_param: Mapping[int, np.ndarray]
    source: str

    def layer_time(self, n: int, params: int, scale: float = 1.0) -> np.ndarray:
        """Per-layer time for ``N = n`` and a layer of ``params`` parameters, size part divided by ``scale``."""
        return self.fixed[n] + self.per_param[n] * params / scale


@lru_cache(maxsize=4)
def measured_layers(data_dir: str | Path) -> MeasuredLayers:
    """Read the Vidur profiles named in ``aladdin_hardware.toml`` ``[measured]`` from ``<data_dir>/vidur_profiling``.

    For each TP degree and token count, :func:`~optsched.costfit.fit_linear` through the profiled
    models' (layer parameters, time) points gives ``fixed`` (intercept) and ``per_param`` (slope).

    Raises
    ------
    optsched.costmodel.CostModelError
        A profile is missing or malformed (the message names the file).
    """
    data = hardware_data()
    spec = data["measured"]
    sizes = np.array([layer_params(data["model"][m]) for m in spec["models"]], dtype=float)
    paths = [str(Path(data_dir) / "vidur_profiling" / f) for f in spec["files"]]
    fixed: dict[int, np.ndarray] = {}
    per_param: dict[int, np.ndarray] = {}
    tokens = None
    for n in spec["tensor_parallel"]:
        profiles = [read_vidur_mlp_profile(p, n) for p in paths]
        tokens = profiles[0][0] if tokens is None else tokens
        if any(not np.array_equal(x, tokens) for x, _ in profiles):
            raise CostModelError(f"{', '.join(paths)}: the profiles measure different token counts")
        lines = [fit_linear(sizes, np.array([y[k] for _, y in profiles])) for k in range(len(tokens))]
        fixed[n] = np.array([f.base for f in lines])
        per_param[n] = np.array([f.per_token for f in lines])
    return MeasuredLayers(tokens, fixed, per_param, ", ".join(spec["files"]))


@dataclass(frozen=True)
class WorkerCoefficients:
    """Eq. 2/3 coefficients and KV capacity of one worker of ``gpus`` GPUs (seconds, tokens)."""

    model: str
    gpu: str
    gpus: int
    k1: float
    c1: float
    k2: float
    c2: float
    c3: float
    kv_tokens: int
    ttft: float
    atgt: float
    variant: str = "datasheet"

    def cost_model(self) -> dict[str, Any]:
        """The contract's inline cost model (layers 1, Aladdin's mapping)."""
        return {
            "layers": 1,
            "prefill": {"bias": self.c1, "per_token": self.k1},
            "decode": {"bias": self.c3, "per_token": self.c2, "per_kv": self.k2},
        }


@dataclass(frozen=True)
class _Raw:
    """Coefficients before ``c4``: prefill ``k1, c1``, decode ``k2, c2, c3``, KV memory in bytes."""

    k1: float
    c1: float
    k2: float
    c2: float
    c3: float
    mem: float


def _hardware(model: str, gpu: str, hardware: Mapping[str, Any]) -> tuple[dict, dict, dict]:
    try:
        return hardware["gpu"][gpu], hardware["model"][model], hardware["assumptions"]
    except KeyError as exc:
        raise ValueError(f"unknown model or GPU {exc.args[0]!r} (see tests/support/aladdin_hardware.toml)") from None


def _compute(
    g: dict, m: dict, a: dict, n: int, measured: MeasuredLayers | None, hardware: Mapping[str, Any]
) -> tuple[float, float, float, float, float]:
    """Compute and KV-read parts ``(k1, c1, k2, c2, c3)`` of one worker of ``n`` GPUs."""
    bpv = a["bytes_per_value"]
    bw = g["bandwidth_gbs"] * 1e9
    kv_b = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * bpv
    if measured is None:
        per_tok = 2 * m["params"] / (n * g["tflops_fp16"] * 1e12 * a["mfu"])
        c3 = m["params"] * bpv / (n * bw)
        return per_tok, c3, kv_b / (n * bw), per_tok, c3
    ref = hardware["measured"]
    size = layer_params(m)
    x = measured.tokens
    dec = x <= ref["decode_max_tokens"]
    decode = fit_linear(x[dec], measured.layer_time(n, size, g["bandwidth_gbs"] / ref["bandwidth_gbs"])[dec])
    prefill = fit_linear(x, measured.layer_time(n, size, g["tflops_fp16"] / ref["tflops_fp16"]))
    eff = bpv / (measured.per_param[1][0] * ref["bandwidth_gbs"] * 1e9)
    layers = m["layers"]
    return (
        layers * prefill.per_token,
        layers * prefill.base,
        float(kv_b / (n * bw * eff)),
        layers * decode.per_token,
        layers * decode.base,
    )


def _raw(model: str, gpu: str, n: int, measured: MeasuredLayers | None, hardware: Mapping[str, Any]) -> _Raw:
    """Coefficients of ``n`` GPUs before ``c4``: compute and KV parts plus the ring all-reduce."""
    g, m, a = _hardware(model, gpu, hardware)
    k1, c1, k2, c2, c3 = _compute(g, m, a, n, measured, hardware)
    n_ar = 2 * m["layers"]
    comm_tok = n_ar * m["hidden"] * a["bytes_per_value"] * 2 * (n - 1) / n / (g["link_gbs"] * 1e9)
    latency = n_ar * g["allreduce_step_latency_us"] * 1e-6 * 2 * (n - 1)
    mem = n * g["memory_gb"] * 1e9 * a["memory_utilization"] - m["params"] * a["bytes_per_value"]
    return _Raw(k1 + comm_tok, c1 + latency, k2, c2 + comm_tok, c3 + latency, mem)


def feasible_worker_sizes(model: str, gpu: str, hardware: Mapping[str, Any] | None = None) -> list[int]:
    """Powers of two up to one node's GPUs whose usable memory holds the weights."""
    hw = hardware or hardware_data()
    g, _, _ = _hardware(model, gpu, hw)
    n, out = 1, []
    while n <= g["gpus_per_node"]:
        if _raw(model, gpu, n, None, hw).mem > 0:
            out.append(n)
        n *= 2
    return out


def _slo(model: str, gpu: str, hardware: Mapping[str, Any]) -> tuple[float, float]:
    slo = hardware["slo"].get(f"{model}.{gpu}")
    if slo is None:
        raise ValueError(f"no Table 2 SLO for {model} on {gpu}")
    return float(slo[0]), float(slo[1])


def worker_coefficients(
    model: str, gpu: str, gpus: int, measured: MeasuredLayers | None = None, hardware: Mapping[str, Any] | None = None
) -> WorkerCoefficients:
    """Coefficients of a worker of ``gpus`` GPUs for ``model`` on ``gpu`` (see the module docstring).

    Parameters
    ----------
    measured
        Measured layer times (:func:`measured_layers`); ``None`` for the datasheet roofline.
    hardware
        Hardware and model data; ``None`` for the shipped ``aladdin_hardware.toml``.
    """
    hw = hardware or hardware_data()
    _, m, a = _hardware(model, gpu, hw)
    ttft, atgt = _slo(model, gpu, hw)
    sizes = feasible_worker_sizes(model, gpu, hw)
    if gpus not in sizes:
        raise ValueError(f"{model} on {gpus} x {gpu}: not a feasible worker size (feasible: {sizes})")
    lbar = a["mean_prompt"] + a["mean_output"] / 2
    r0 = _raw(model, gpu, sizes[0], measured, hw)
    c4 = atgt / a["slo_over_single"] - (r0.c3 + r0.c2 + r0.k2 * lbar)
    if c4 < 0:
        raise ValueError(f"{model} on {gpu}: the modelled unbatched latency already exceeds T_dec / 1.3")
    r = _raw(model, gpu, gpus, measured, hw)
    kv_b = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * a["bytes_per_value"]
    return WorkerCoefficients(
        model,
        gpu,
        gpus,
        r.k1,
        r.c1 + c4,
        r.k2,
        r.c2,
        r.c3 + c4,
        int(r.mem // kv_b),
        ttft,
        atgt,
        "datasheet" if measured is None else "measured",
    )


def throughput_table(
    model: str, gpu: str, measured: MeasuredLayers | None = None, hardware: Mapping[str, Any] | None = None
) -> list[dict[str, float]]:
    """Eq. 6 terms for every feasible worker size: ``b_kv``, ``B``, the two throughputs, ``T_max``."""
    hw = hardware or hardware_data()
    _, _, a = _hardware(model, gpu, hw)
    lbar = a["mean_prompt"] + a["mean_output"] / 2
    rows = []
    for n in feasible_worker_sizes(model, gpu, hw):
        w = worker_coefficients(model, gpu, n, measured, hw)
        b_kv = w.kv_tokens / lbar
        t_kv = w.k2 * b_kv * lbar + w.c2 * b_kv + w.c3
        big_b = (w.atgt - w.c3) / (w.k2 * lbar + w.c2)
        kv_term = b_kv / (n * t_kv)
        slo_term = max(big_b, 0.0) / (n * w.atgt)
        rows.append({
            "gpus": n,
            "b_kv": b_kv,
            "B": big_b,
            "kv_term": kv_term,
            "slo_term": slo_term,
            "T_max": min(kv_term, slo_term),
            "kv_tokens": w.kv_tokens,
            "c3": w.c3,
            "c2": w.c2,
            "k2": w.k2,
        })
    return rows


def optimal_worker_size(
    model: str, gpu: str, measured: MeasuredLayers | None = None, hardware: Mapping[str, Any] | None = None
) -> int:
    """``N_g^opt = argmax_N T_max(N)`` (Eq. 6); ties go to the smaller worker."""
    rows = throughput_table(model, gpu, measured, hardware)
    best = max(rows, key=lambda r: (r["T_max"], -r["gpus"]))
    return int(best["gpus"])

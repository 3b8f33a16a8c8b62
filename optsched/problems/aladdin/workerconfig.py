"""Worker configuration: Aladdin's per-GPU throughput model (Eqs. 5, 6) and ``N_g^opt``.

For a worker of ``N`` GPUs (tensor parallel degree) the decode coefficients of Eq. 3 are built from
the hardware and model data in ``hardware.toml`` (digest Sec. 1.4, "scale a reference fit with
Eq. 5 + comm"): with weights ``W`` bytes, KV bytes per token ``kv_b``, memory bandwidth ``BW``,
fp16 throughput ``F`` at utilisation ``mfu``, ``A = 2 * layers`` all-reduces per iteration of
``hidden * 2`` bytes per request, and the textbook alpha-beta cost of a ring all-reduce on ``N`` GPUs,
``2 (N-1) alpha + 2 (N-1)/N * bytes / bw_link`` (Thakur, Rabenseifner, Gropp 2005), with step latency
``alpha`` and link bandwidth ``bw_link``,

- ``k2(N) = kv_b / (N BW)`` (reading the KV cache),
- ``c2(N) = 2 P / (N F mfu) + A * hidden * 2 B * 2 (N-1)/N / bw_link`` (per-request compute and
  ring all-reduce traffic),
- ``c3(N) = W / (N BW) + c4 + A * 2 (N - 1) alpha`` (weights, the TP-invariant overhead ``c4`` of
  Eq. 5, and the all-reduce latency; the digest's ``(N-1)/N`` law is the bandwidth term above);
- prefill (Eq. 2): ``k1(N) = 2 P / (N F mfu) + A * hidden * 2 B * 2 (N-1)/N / bw_link``, ``c1(N) = c3(N)``.

``c4`` is calibrated once per (model, GPU) by the paper's SLO rule: the unbatched per-token latency
``c3 + c2 + k2 * lbar`` at the smallest worker that holds the model equals ``T_dec / 1.3``.
KV capacity ``M(N) = N * m_gpu * util - W`` (bytes). Eq. 6 with the digest's computable recipe:
``lbar = E[l_in] + E[l_out] / 2``, ``m_r = kv(lbar)``, ``b_kv = M / m_r``,
``t_kv = t_d(b_kv, b_kv lbar)``, ``B = (T_dec - c3) / (k2 lbar + c2)`` and
``T_max(N) = min(b_kv / (N t_kv), B / (N T_dec))``; ``N_g^opt = argmax T_max`` over the powers of two
up to the GPUs of one node whose memory holds the weights.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["WorkerCoefficients", "feasible_worker_sizes", "hardware_data", "worker_coefficients", "throughput_table", "optimal_worker_size"]


@lru_cache(maxsize=1)
def hardware_data() -> dict[str, Any]:
    """The parsed ``hardware.toml``."""
    with resources.files(__package__).joinpath("hardware.toml").open("rb") as fh:
        return tomllib.load(fh)


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

    def cost_model(self) -> dict[str, Any]:
        """The contract's inline cost model (layers 1, Aladdin's mapping)."""
        return {
            "layers": 1,
            "prefill": {"bias": self.c1, "per_token": self.k1},
            "decode": {"bias": self.c3, "per_token": self.c2, "per_kv": self.k2},
        }


def _hardware(model: str, gpu: str) -> tuple[dict, dict, dict]:
    data = hardware_data()
    try:
        return data["gpu"][gpu], data["model"][model], data["assumptions"]
    except KeyError as exc:
        raise ValueError(f"unknown model or GPU {exc.args[0]!r} (see hardware.toml)") from None


def feasible_worker_sizes(model: str, gpu: str) -> list[int]:
    """Powers of two up to one node's GPUs whose usable memory holds the weights."""
    return _sizes(*_hardware(model, gpu))


def _specs(model: str, gpu: str) -> tuple[dict, dict, dict, tuple[float, float]]:
    g, m, a = _hardware(model, gpu)
    slo = hardware_data()["slo"].get(f"{model}.{gpu}")
    if slo is None:
        raise ValueError(f"no Table 2 SLO for {model} on {gpu}")
    return g, m, a, (float(slo[0]), float(slo[1]))


def _raw(g: dict, m: dict, a: dict, n: int) -> tuple[float, float, float, float, float]:
    """(k1, k2, c2, c3 without c4, M bytes) for N = n."""
    bpv = a["bytes_per_value"]
    bw = g["bandwidth_gbs"] * 1e9
    flops = g["tflops_fp16"] * 1e12 * a["mfu"]
    weights = m["params"] * bpv
    kv_b = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * bpv
    n_ar = 2 * m["layers"]
    comm_tok = n_ar * m["hidden"] * bpv * 2 * (n - 1) / n / (g["link_gbs"] * 1e9)
    per_tok = 2 * m["params"] / (n * flops) + comm_tok
    k2 = kv_b / (n * bw)
    c3 = weights / (n * bw) + n_ar * g["allreduce_step_latency_us"] * 1e-6 * 2 * (n - 1)
    mem = n * g["memory_gb"] * 1e9 * a["memory_utilization"] - weights
    return per_tok, k2, per_tok, c3, mem


def _sizes(g: dict, m: dict, a: dict) -> list[int]:
    n, out = 1, []
    while n <= g["gpus_per_node"]:
        if _raw(g, m, a, n)[4] > 0:
            out.append(n)
        n *= 2
    return out


def worker_coefficients(model: str, gpu: str, gpus: int) -> WorkerCoefficients:
    """Coefficients of a worker of ``gpus`` GPUs for ``model`` on ``gpu`` (see the module docstring)."""
    g, m, a, (ttft, atgt) = _specs(model, gpu)
    sizes = _sizes(g, m, a)
    if gpus not in sizes:
        raise ValueError(f"{model} on {gpus} x {gpu}: not a feasible worker size (feasible: {sizes})")
    lbar = a["mean_prompt"] + a["mean_output"] / 2
    k1_0, k2_0, c2_0, c3_0, _ = _raw(g, m, a, sizes[0])
    c4 = atgt / a["slo_over_single"] - (c3_0 + c2_0 + k2_0 * lbar)
    if c4 < 0:
        raise ValueError(f"{model} on {gpu}: the roofline latency already exceeds T_dec / 1.3")
    k1, k2, c2, c3, mem = _raw(g, m, a, gpus)
    kv_b = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * a["bytes_per_value"]
    return WorkerCoefficients(model, gpu, gpus, k1, c3 + c4, k2, c2, c3 + c4, int(mem // kv_b), ttft, atgt)


def throughput_table(model: str, gpu: str) -> list[dict[str, float]]:
    """Eq. 6 terms for every feasible worker size: ``b_kv``, ``B``, the two throughputs, ``T_max``."""
    g, m, a, _ = _specs(model, gpu)
    lbar = a["mean_prompt"] + a["mean_output"] / 2
    rows = []
    for n in _sizes(g, m, a):
        w = worker_coefficients(model, gpu, n)
        b_kv = w.kv_tokens / lbar
        t_kv = w.k2 * b_kv * lbar + w.c2 * b_kv + w.c3
        big_b = (w.atgt - w.c3) / (w.k2 * lbar + w.c2)
        kv_term = b_kv / (n * t_kv)
        slo_term = max(big_b, 0.0) / (n * w.atgt)
        rows.append({"gpus": n, "b_kv": b_kv, "B": big_b, "kv_term": kv_term, "slo_term": slo_term,
                     "T_max": min(kv_term, slo_term), "kv_tokens": w.kv_tokens})
    return rows


def optimal_worker_size(model: str, gpu: str) -> int:
    """``N_g^opt = argmax_N T_max(N)`` (Eq. 6); ties go to the smaller worker."""
    rows = throughput_table(model, gpu)
    best = max(rows, key=lambda r: (r["T_max"], -r["gpus"]))
    return int(best["gpus"])


if __name__ == "__main__":  # pragma: no cover - quick look
    for mdl, gp in (("llama2-70b", "a100"), ("llama2-13b", "a100"), ("llama2-13b", "v100"),
                    ("llama2-7b", "a100"), ("llama2-7b", "v100")):
        print(mdl, gp, optimal_worker_size(mdl, gp),
              [(r["gpus"], round(r["b_kv"]), round(r["B"], 1), round(r["T_max"])) for r in throughput_table(mdl, gp)])

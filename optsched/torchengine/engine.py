"""Weights, a paged KV cache and one engine step of a Llama-family model in PyTorch.

A step is a list of :class:`StepItem` (one per request): ``q`` new tokens whose keys end at ``k``
(``k - q`` cached before the step), sampling a token when ``sample``. :meth:`TorchEngine.run_step`
writes the new tokens' keys and values into the request's pages, runs the forward pass of the
package docstring and returns the sampled ids with the step's times.

Attention has two backends with one interface (the rest of the step is the same code everywhere):

- CUDA: ``torch.nn.attention.varlen.varlen_attn``, causal aligned to the end of each request's keys
  (``window_size=(-1, 0)``). With PyTorch >= 2.12 it reads the paged pool (``block_table`` with
  pages of 256 tokens, which FlashAttention-2's paged kernel requires; ``seqused_k`` and the
  logical ``cu_seq_k`` both given); an older ``varlen_attn`` has no paged form, so the step first
  gathers each item's keys and values from its pages into packed tensors (one ``index_select``
  per layer, part of the step's graph and of its time);
- CPU: per request ``scaled_dot_product_attention`` over its keys gathered from its pages, with the
  same end-aligned causal mask.

Timing: on CUDA each step is captured as a CUDA graph after two warm-up runs on a side stream (the
PyTorch recipe), replayed ``repeats`` times, each timed with CUDA events (``device`` time) and on
the host around replay and synchronisation (``wall`` time); the graph is freed after the step. A
step is idempotent (it rewrites the same keys and values and samples the same ids), so its
repeats leave the state as one run does. On a CPU the step runs eagerly and both times are host
times. Eager PyTorch on a GPU spends milliseconds per step launching kernels, which would swamp
every small step: CUDA graphs are what serving engines use.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .shapes import ModelShape

__all__ = ["EngineError", "PagePool", "StepItem", "StepTimes", "TorchEngine", "import_torch", "kv_tokens_within"]

#: Tokens per KV page on CUDA (FlashAttention's paged kernels want large pages) and on a CPU.
PAGE_SIZE = {"cuda": 256, "cpu": 16}


class EngineError(RuntimeError):
    """PyTorch is missing, the device is unusable, or the KV pool is exhausted."""


def import_torch() -> Any:
    """``torch``, or an :class:`EngineError` saying how to install the optional extra."""
    try:
        import torch
    except ImportError:
        raise EngineError(
            "PyTorch is not installed: pip install 'optsched[torch]' (on a CPU-only machine "
            "first pip install torch==2.13.0, the CPU build; docs/torchengine.md)"
        ) from None
    return torch


@dataclass(frozen=True)
class StepItem:
    """One request's work in a step: its KV pages' owner, its new token ids, where its keys end."""

    owner: int
    tokens: tuple[int, ...]
    k: int
    sample: bool

    @property
    def q(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class StepTimes:
    """Median device and wall time of a step's repeats (seconds), and every wall time."""

    device: float
    wall: float
    walls: tuple[float, ...]


class PagePool:
    """Free list of KV pages and each owner's page table (owners are small integers)."""

    def __init__(self, pages: int, page_size: int):
        self.page_size = page_size
        self.free = list(range(pages - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}

    def ensure(self, owner: int, tokens: int) -> list[int]:
        """The owner's pages, grown to hold ``tokens`` tokens."""
        table = self.tables.setdefault(owner, [])
        need = -(-tokens // self.page_size) - len(table)
        if need > len(self.free):
            raise EngineError(
                f"KV pool exhausted: {need} more pages of {self.page_size} tokens needed, "
                f"{len(self.free)} free (give the engine more KV memory)"
            )
        table.extend(self.free.pop() for _ in range(max(0, need)))
        return table

    def release(self, owner: int) -> None:
        """Free every page of ``owner``."""
        self.free.extend(reversed(self.tables.pop(owner, [])))


def kv_tokens_within(shape: ModelShape, device: str, dtype: str | None, wanted: int, share: float = 0.5) -> int:
    """``wanted`` KV tokens, or fewer on a GPU: at most ``share`` of the device memory left after the
    weights (profiling steps beyond it share pages)."""
    if not device.startswith("cuda"):
        return wanted
    torch = import_torch()
    size = 4 if dtype == "float32" else 2
    s = shape
    weights = size * (
        2 * s.vocab * s.hidden
        + s.layers
        * (
            s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim
            + s.heads * s.head_dim * s.hidden
            + 3 * s.hidden * s.intermediate
        )
    )
    per_token = size * 2 * s.layers * s.kv_heads * s.head_dim
    free = torch.cuda.mem_get_info(torch.device(device))[0]
    return max(PAGE_SIZE["cuda"], min(wanted, int(share * (free - weights) / per_token)))


def _rmsnorm(torch: Any, x: Any, weight: Any, eps: float) -> Any:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def _varlen_form() -> tuple[bool, dict[str, Any]]:
    """What this PyTorch's ``varlen_attn`` takes: whether it reads paged KV (``block_table``,
    PyTorch >= 2.12), and the keyword that makes it causal aligned to the end of the keys."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    causal: dict[str, Any] = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    return "block_table" in params, causal


@dataclass
class _Batch:
    """A step's device inputs (the static inputs of its CUDA graph)."""

    ids: Any
    slot_page: Any
    slot_offset: Any
    cu_seq_q: Any
    cu_seq_k: Any
    seqused_k: Any
    block_table: Any
    key_slots: Any
    sample_rows: Any
    max_q: int
    max_k: int
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (first row, q, k) per item


class TorchEngine:
    """A Llama-family model with random weights and a paged KV cache on one device.

    Parameters
    ----------
    shape
        The model's sizes.
    device
        ``cuda`` (or ``cuda:N``) or ``cpu``.
    dtype
        ``bfloat16``, ``float16`` or ``float32`` (CPU default: ``float32``).
    kv_tokens
        KV cache size in tokens (rounded up to whole pages).
    seed
        Seed of the random weights.
    threads
        CPU threads PyTorch may use (``torch.set_num_threads``; None: its default).
    """

    def __init__(
        self,
        shape: ModelShape,
        device: str = "cpu",
        dtype: str | None = None,
        kv_tokens: int = 4096,
        seed: int = 0,
        threads: int | None = None,
    ):
        torch = self.torch = import_torch()
        if threads is not None:
            torch.set_num_threads(threads)
        self.shape = shape
        self.device = torch.device(device)
        self.on_cuda = self.device.type == "cuda"
        if self.on_cuda and not torch.cuda.is_available():
            raise EngineError("--device cuda: no CUDA device is available to PyTorch")
        if self.on_cuda and (self.device.index or 0) >= torch.cuda.device_count():
            raise EngineError(f"--device {device}: PyTorch sees {torch.cuda.device_count()} CUDA devices")
        name = dtype or ("bfloat16" if self.on_cuda else "float32")
        if name not in ("bfloat16", "float16", "float32"):
            raise EngineError(f"--dtype {name!r}: bfloat16, float16 or float32")
        self.dtype = getattr(torch, name)
        self.page_size = PAGE_SIZE[self.device.type]
        self.pool = PagePool(-(-kv_tokens // self.page_size), self.page_size)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        s, L = shape, shape.layers
        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim

        def weight(*size: int) -> Any:
            return torch.empty(*size, device=self.device, dtype=self.dtype).normal_(0.0, 0.02, generator=gen)

        self.embed = weight(s.vocab, s.hidden)
        self.layers = [
            {
                "ln1": torch.ones(s.hidden, device=self.device, dtype=self.dtype),
                "wqkv": weight(s.hidden, qkv),
                "wo": weight(s.heads * s.head_dim, s.hidden),
                "ln2": torch.ones(s.hidden, device=self.device, dtype=self.dtype),
                "wgu": weight(s.hidden, 2 * s.intermediate),
                "wdown": weight(s.intermediate, s.hidden),
            }
            for _ in range(L)
        ]
        self.norm = torch.ones(s.hidden, device=self.device, dtype=self.dtype)
        self.lm_head = weight(s.hidden, s.vocab)
        pages = len(self.pool.free)
        self.kv = torch.zeros(L, 2, pages, self.page_size, s.kv_heads, s.head_dim, device=self.device, dtype=self.dtype)
        self.paged_attention, self.causal_keyword = _varlen_form() if self.on_cuda else (False, {})

    # ------------------------------------------------------------------ inputs
    def _batch(self, items: Sequence[StepItem]) -> _Batch:
        """The device inputs of a step; each owner's pages are grown to hold its ``k`` keys."""
        torch, dev = self.torch, self.device
        ids, pages, offsets, cu, cu_k, used, rows, spans, tables = [], [], [], [0], [0], [], [], [], []
        slots: list[int] = []
        size = self.page_size
        for it in items:
            table = self.pool.ensure(it.owner, it.k)
            slots.extend(table[pos // size] * size + pos % size for pos in range(it.k))
            start = len(ids)
            ids.extend(it.tokens)
            for pos in range(it.k - it.q, it.k):
                pages.append(table[pos // self.page_size])
                offsets.append(pos % self.page_size)
            cu.append(len(ids))
            cu_k.append(cu_k[-1] + it.k)
            used.append(it.k)
            if it.sample:
                rows.append(len(ids) - 1)
            spans.append((start, it.q, it.k))
            tables.append(table[: -(-it.k // self.page_size)])
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        i64, i32 = torch.int64, torch.int32
        return _Batch(
            torch.tensor(ids, dtype=i64, device=dev),
            torch.tensor(pages, dtype=i64, device=dev),
            torch.tensor(offsets, dtype=i64, device=dev),
            torch.tensor(cu, dtype=i32, device=dev),
            torch.tensor(cu_k, dtype=i32, device=dev),
            torch.tensor(used, dtype=i32, device=dev),
            torch.tensor(padded, dtype=i32, device=dev),
            torch.tensor(slots, dtype=i64, device=dev),
            torch.tensor(rows, dtype=i64, device=dev),
            max(it.q for it in items),
            max(it.k for it in items),
            spans,
        )

    # ------------------------------------------------------------------ forward
    def _attention(self, layer: int, q: Any, b: _Batch) -> Any:
        """Each item's ``q`` rows over its ``k`` keys (causal, aligned to the end): ``[T, H, D]``."""
        torch, s = self.torch, self.shape
        k_pool, v_pool = self.kv[layer, 0], self.kv[layer, 1]
        gqa = s.heads != s.kv_heads
        if self.on_cuda and self.paged_attention:  # FlashAttention's variable-length kernel, paged
            from torch.nn.attention.varlen import varlen_attn

            return varlen_attn(
                q,
                k_pool,
                v_pool,
                b.cu_seq_q,
                b.cu_seq_k,
                b.max_q,
                b.max_k,
                seqused_k=b.seqused_k,
                block_table=b.block_table,
                window_size=(-1, 0),
                enable_gqa=gqa,
            )
        keys = k_pool.reshape(-1, s.kv_heads, s.head_dim).index_select(0, b.key_slots)
        values = v_pool.reshape(-1, s.kv_heads, s.head_dim).index_select(0, b.key_slots)
        if self.on_cuda:  # the same kernel over the packed keys (a varlen_attn without paged KV)
            from torch.nn.attention.varlen import varlen_attn

            if gqa:
                keys = keys.repeat_interleave(s.heads // s.kv_heads, dim=1)
                values = values.repeat_interleave(s.heads // s.kv_heads, dim=1)
            return varlen_attn(q, keys, values, b.cu_seq_q, b.cu_seq_k, b.max_q, b.max_k, **self.causal_keyword)
        out, first = [], 0
        for start, n, k in b.spans:
            mask = torch.arange(k, device=self.device)[None, :] <= torch.arange(k - n, k, device=self.device)[:, None]
            query = q[start : start + n].transpose(0, 1).unsqueeze(0)
            att = torch.nn.functional.scaled_dot_product_attention(
                query,
                keys[first : first + k].transpose(0, 1).unsqueeze(0),
                values[first : first + k].transpose(0, 1).unsqueeze(0),
                attn_mask=mask,
                enable_gqa=gqa,
            )
            out.append(att.squeeze(0).transpose(0, 1))
            first += k
        return torch.cat(out)

    def _forward(self, b: _Batch) -> Any:
        """The step of the module docstring; returns the sampled ids (argmax), on the device."""
        torch, s = self.torch, self.shape
        H, Hkv, D = s.heads, s.kv_heads, s.head_dim
        x = self.embed[b.ids]
        for layer, w in enumerate(self.layers):
            qkv = _rmsnorm(torch, x, w["ln1"], s.norm_eps) @ w["wqkv"]
            q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
            self.kv[layer, 0, b.slot_page, b.slot_offset] = k.reshape(-1, Hkv, D)
            self.kv[layer, 1, b.slot_page, b.slot_offset] = v.reshape(-1, Hkv, D)
            att = self._attention(layer, q.reshape(-1, H, D), b)
            x = x + att.reshape(-1, H * D) @ w["wo"]
            gate, up = (_rmsnorm(torch, x, w["ln2"], s.norm_eps) @ w["wgu"]).chunk(2, dim=-1)
            x = x + (torch.nn.functional.silu(gate) * up) @ w["wdown"]
        last = _rmsnorm(torch, x[b.sample_rows], self.norm, s.norm_eps)
        return (last @ self.lm_head).argmax(dim=-1)

    # ------------------------------------------------------------------ timed step
    def run_step(
        self, items: Sequence[StepItem], repeats: int = 1, cuda_graphs: bool = True
    ) -> tuple[list[int], StepTimes]:
        """Run one step ``repeats`` times (idempotent) and return the sampled ids (one per sampling
        item, in order) and the median times."""
        if not items:
            return [], StepTimes(0.0, 0.0, ())
        b = self._batch(items)
        with self.torch.inference_mode():
            if not self.on_cuda:
                return self._timed_cpu(b, repeats)
            return self._timed_cuda(b, repeats, cuda_graphs)

    def _timed_cpu(self, b: _Batch, repeats: int) -> tuple[list[int], StepTimes]:
        walls, ids = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ids = self._forward(b).tolist()
            walls.append(time.perf_counter() - t0)
        median = statistics.median(walls)
        return ids, StepTimes(median, median, tuple(walls))

    def _timed_cuda(self, b: _Batch, repeats: int, cuda_graphs: bool) -> tuple[list[int], StepTimes]:
        """GPU only: warm up on a side stream, capture the step as a CUDA graph, replay it timed."""
        torch = self.torch
        host = torch.empty(b.sample_rows.numel(), dtype=torch.int64, pin_memory=True)

        def step() -> None:
            host.copy_(self._forward(b), non_blocking=True)

        run = step
        if cuda_graphs:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        devices, walls = [], []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            run()
            end.record()
            end.synchronize()
            walls.append(time.perf_counter() - t0)
            devices.append(start.elapsed_time(end) * 1e-3)
        return host.tolist(), StepTimes(statistics.median(devices), statistics.median(walls), tuple(walls))

    def release(self, owner: int) -> None:
        """Drop an owner's KV (preemption or completion)."""
        self.pool.release(owner)

    def describe(self) -> dict[str, Any]:
        """What a result records about the engine."""
        torch = self.torch
        device = torch.cuda.get_device_name(self.device) if self.on_cuda else "cpu"
        attention = "torch scaled_dot_product_attention per request (CPU)"
        if self.on_cuda:
            kv = "paged KV" if self.paged_attention else "keys gathered per step"
            attention = f"torch.nn.attention.varlen.varlen_attn ({kv})"
        return {
            "engine": "torch",
            "torch": torch.__version__,
            "cuda": torch.version.cuda if self.on_cuda else None,
            "device": device,
            "dtype": str(self.dtype).removeprefix("torch."),
            "attention": attention,
            "page_size": self.page_size,
            "model_shape": self.shape.to_dict(),
        }

"""Measure a profile on this machine: a grid of step kinds, timed, fitted (``optsched profile``).

The grid has the step kinds of ``../shared/data/gpu`` (module :mod:`optsched.measured`), each row a
list of ``[q, k, s]`` items run-length encoded as ``[[q, k, s], count]``:

- ``prefill1``: one prompt of q tokens; ``prefillN``: several prompts with the same total;
- ``chunkctx``: one prefill chunk of q tokens over k - q cached tokens (the ``prefill.per_ctx`` term);
- ``decode``: b decodes of context k; ``mixed``: a prompt plus b decodes;
- ``decode-het`` and ``mixed-het``: random contexts.

Sizes scale with ``tokens`` (the largest step, default 4096 on a GPU, 64 on a CPU) and stay within
the model's context. Requests of a step that would not fit the KV pool share pages (attention cost
does not depend on the values read). The measured steps are written in the step-measurement format,
so ``optsched fit`` and ``optsched validate`` read them; the fit is
:func:`optsched.measured.fit_grid`.
"""

from __future__ import annotations

import random
import time
from typing import Any

from ..costmodel import FEATURES
from ..measured import grid_features
from .engine import EngineError, StepItem, TorchEngine

__all__ = ["grid_rows", "measure_grid"]


def _doublings(lo: int, hi: int) -> list[int]:
    out, x = [], lo
    while x <= hi:
        out.append(x)
        x *= 2
    return out


def grid_rows(tokens: int, max_context: int, seed: int = 0) -> list[tuple[str, list[list[Any]]]]:
    """The grid's rows ``(kind, reqs)`` for steps of at most ``tokens`` tokens and contexts of at most
    ``max_context`` keys (both >= 16)."""
    T, K = tokens, max_context
    rows: list[tuple[str, list[list[Any]]]] = []
    for q in sorted({1, *_doublings(max(2, T // 512), T), *(3 * x // 2 for x in _doublings(max(2, T // 8), T // 2))}):
        rows.append(("prefill1", [[[q, q, 1], 1]]))
    for n in _doublings(2, 64):
        for total in (T // 8, T // 2):
            if total // n >= 1:
                rows.append(("prefillN", [[[total // n, total // n, 1], n]]))
    for q in _doublings(max(1, T // 64), T // 4):
        for ctx in _doublings(max(q, K // 16), K // 2):
            if q + ctx <= K:
                rows.append(("chunkctx", [[[q, q + ctx, 0], 1]]))
    for b in _doublings(1, min(256, T)):
        for k in _doublings(16, K):
            if b * k <= 64 * K:
                rows.append(("decode", [[[1, k, 1], b]]))
    for q in _doublings(max(1, T // 64), T // 2):
        for b in _doublings(8, min(128, T // 2)):
            for k in (K // 8, K // 2):
                if q + b <= T and k >= 2:
                    rows.append(("mixed", [[[q, q, 1], 1], [[1, k, 1], b]]))
    rng = random.Random(seed)
    for b in (4, 8, 16, 32):
        contexts = [rng.randint(2, K) for _ in range(min(b, T))]
        rows.append(("decode-het", [[[1, k, 1], 1] for k in contexts]))
        q = rng.randint(1, max(1, T // 4))
        rows.append(("mixed-het", [[[q, q, 1], 1]] + [[[1, k, 1], 1] for k in contexts]))
    return rows


def _step(reqs: list[list[Any]], pool_tokens: int, page_size: int) -> list[StepItem]:
    """The engine items of a grid row; owners repeat (sharing pages) once the pool is full."""
    items, used, owner = [], 0, 0
    for (q, k, s), count in reqs:
        for _ in range(count):
            need = -(-k // page_size) * page_size
            if used + need <= pool_tokens:
                used += need
                who = owner
                owner += 1
            else:
                who = owner - 1 if owner else 0
            items.append(StepItem(who, tuple(range(3, 3 + q)), k, bool(s)))
    return items


def measure_grid(
    engine: TorchEngine,
    rows: list[tuple[str, list[list[Any]]]],
    *,
    repeats: int = 7,
    warmup: int = 1,
    cuda_graphs: bool = True,
    log: Any = None,
) -> dict[str, Any]:
    """Time every row on ``engine``; a step-measurement object (``grid`` only) with the run's facts."""
    grid = []
    pool_tokens = len(engine.pool.free) * engine.page_size
    for n, (kind, reqs) in enumerate(rows):
        items = _step(reqs, pool_tokens, engine.page_size)
        try:
            if warmup:
                engine.run_step(items, warmup, cuda_graphs)
            _, times = engine.run_step(items, repeats, cuda_graphs)
        except EngineError as exc:
            raise EngineError(f"grid step {n} ({kind}, {reqs}): {exc}") from None
        finally:
            for owner in {it.owner for it in items}:
                engine.release(owner)
        row = {"kind": kind, "reqs": reqs, "gpu_ms": 1e3 * times.device, "wall_ms": 1e3 * times.wall}
        row["features"] = dict(zip(FEATURES, grid_features(row)))
        grid.append(row)
        if log is not None:
            shown = ", ".join(f"{k}={v}" for k, v in row["features"].items())
            log(f"profile: step {n + 1}/{len(rows)} {kind} ({shown}): {row['gpu_ms']:.3f} ms")
    facts = engine.describe()
    return {
        "device": facts["device"],
        "torch": facts["torch"],
        "cuda": facts["cuda"],
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": engine.shape.name,
        "model_shape": facts["model_shape"],
        "attention": facts["attention"],
        "cuda_graphs": cuda_graphs and engine.on_cuda,
        "time_unit": "ms",
        "grid": grid,
    }

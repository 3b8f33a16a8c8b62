"""The batches of the prefill-first builder (:mod:`.prefill_first`): their times, the cut at an arrival,
the ratio rule, the tile fill and the decode batch, on the requests' state in arrival order.

Every function is pure: it reads the state and returns the batch's items (or its time), so the builder
decides what runs and records it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...costmodel import CostModel

__all__ = [
    "MIN_CAP",
    "PrefillState",
    "best_ratio",
    "cut_at_arrival",
    "decode_items",
    "prefill_seconds",
    "tile_filled",
]

#: Smallest prefill cap tried (tokens).
MIN_CAP = 64


@dataclass
class PrefillState:
    """The requests' state, by index in arrival order: current prompt (I; m + 1 after an eviction in
    decode), output length, arrival, KV slots m and tokens generated g."""

    prompt: np.ndarray
    output: np.ndarray
    arrival: np.ndarray
    m: np.ndarray
    g: np.ndarray


def prefill_seconds(st: PrefillState, chunks: list[tuple[int, int]], cm: CostModel) -> float:
    """The batch time of the prefill items ``chunks`` (request, tokens)."""
    tokens = sum(c for _, c in chunks)
    squares = sum(c * c for _, c in chunks)
    return cm.batch_time(tokens, tokens, squares, 0, 0, sum(c * int(st.m[i]) for i, c in chunks))


def cut_at_arrival(
    st: PrefillState,
    chunks: list[tuple[int, int]],
    cm: CostModel,
    gap: float,
    arriving: int,
) -> list[tuple[int, int]]:
    """``chunks`` with its last chunk shortened so that the batch ends within ``gap`` seconds, by the
    next arrival, when that arrival's prompt (``arriving`` tokens, plus its bias less the last
    request's; -1: always) is shorter than what the last request would have left (so the arrival
    goes first): the chunk is the longest that fits,
    rounded down to whole tiles of the cost model when the batch has more than one tile, and dropped
    below :data:`MIN_CAP` tokens (no chunks at all: wait for the arrival). ``chunks`` unchanged when
    the batch already ends in time or the arrival's prompt is not shorter."""
    if prefill_seconds(st, chunks, cm) <= gap:
        return chunks
    *head, (i, c) = chunks
    if arriving >= int(st.prompt[i] - st.m[i]) - min(c, MIN_CAP):
        return chunks
    tokens, squares, context, m = 0, 0, 0, int(st.m[i])
    for j, x in head:
        tokens, squares, context = tokens + x, squares + x * x, context + x * int(st.m[j])
    lo, hi = 0, c  # chunk lo fits (or is 0), chunk hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seconds = cm.batch_time(tokens + mid, tokens + mid, squares + mid * mid, 0, 0, context + mid * m)
        lo, hi = (mid, hi) if seconds <= gap else (lo, mid)  # = prefill_seconds of [*head, (i, mid)]
    tile = getattr(cm, "token_tile", 0) or 0
    tokens += lo
    if tile and cm.per_tile and tokens > tile:
        lo -= min(lo, tokens % tile)
    return [*head, (i, lo)] if lo >= MIN_CAP else head


def best_ratio(st: PrefillState, chunks: list[tuple[int, int]], cm: CostModel) -> list[tuple[int, int]]:
    """The prefix of ``chunks`` of most completed prompts per second of its batch time (the longest
    among equals; all of them when no prefix completes a prompt)."""
    best, best_rate = len(chunks), 0.0
    tokens = squares = context = done = 0
    for k, (i, c) in enumerate(chunks, start=1):
        tokens, squares, context = tokens + c, squares + c * c, context + c * int(st.m[i])
        done += int(st.m[i] + c == st.prompt[i])
        rate = done / cm.batch_time(tokens, tokens, squares, 0, 0, context)  # = prefill_seconds of the prefix
        if rate >= best_rate and done:
            best, best_rate = k, rate
    return chunks[:best]


def tile_filled(chunks: list[tuple[int, int]], cut: list[tuple[int, int]], cm: CostModel) -> list[tuple[int, int]]:
    """``cut`` (a prefix of ``chunks``) and, when its tokens end inside a token tile of the cost model,
    a chunk of the first item of ``chunks`` it left out, up to the end of that tile (the tile is paid
    for either way)."""
    room = -sum(c for _, c in cut) % cm.token_tile if cm.token_tile and cm.per_tile else 0
    if not room or len(cut) == len(chunks):
        return cut
    i, c = chunks[len(cut)]
    return [*cut, (i, min(c, room))]


def decode_items(
    st: PrefillState, decoding: list[int], cm: CostModel, token_budget: int, gap: float
) -> tuple[list[int], float]:
    """The decode batch: the requests of ``decoding`` with fewest output tokens left first, up to C, the
    longest such prefix whose batch time is at most ``gap`` seconds; and that time."""
    ranked = sorted(decoding, key=lambda i: (st.output[i] - st.g[i], i))[:token_budget]
    kv = np.cumsum([int(st.m[i]) for i in ranked])
    kv_max = np.maximum.accumulate([int(st.m[i]) for i in ranked])

    def seconds(size: int) -> float:
        return cm.batch_time(size, 0, 0, size, int(kv[size - 1]), 0, int(kv_max[size - 1]))

    if seconds(len(ranked)) <= gap:
        return ranked, seconds(len(ranked))
    lo, hi = 0, len(ranked)  # seconds(lo) fits (or lo == 0), seconds(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if seconds(mid) <= gap else (lo, mid)
    return ranked[:lo], (seconds(lo) if lo else 0.0)

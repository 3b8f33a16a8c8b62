"""Benchmark: schedules that follow ``phase-latency``'s optimal structure (waves run in lockstep),
replayed, against the best policy and the bound; which side of the mean-latency gap is weak.

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_latency_waves.py [--slices]

*Equal requests released together* (100 requests, I = 900, O = 256, all at time 0, ``llama2-7b-h200``,
C = P = 4096, M = 200,000, R_max = 256). On such a run the programme of :mod:`optsched.phase_latency`
is that of equal jobs on a batch machine (a batch of n counted items takes beta + c n, each job
needs O of them in distinct batches), whose optimum runs the jobs in lockstep groups one after
another, the largest first: the least sum over group sizes g_1, g_2, ... of the time of each group's
O batches times the requests not finished before it, a dynamic programme over the requests left.
Printed: the bound, the programme's optimum and its group sizes under each pricing of the bound,
the same programme with the batch overhead every decode batch of at most one token tile really pays
(beta plus the tile, then also the longest-context term at the mean context; items at their real
terms, the prompts' tiles per token): a *reference*, not a bound (it also charges a tile to batches
whose prompt chunks already pay theirs); then the replayed mean latency of wave schedules at the
programmes' sizes and at the best sizes a climb over moves of 1, 2 and 4 requests between waves
finds from the last reference's, and of the best policy found by the policy search (``hybrid-baseline`` with at most 50
running requests).

A *wave schedule* admits requests in arrival order once at most ``rest`` admitted requests are
unfinished, the k-th admission those arrived while the admitted unfinished requests number fewer
than the k-th size (the last size repeats); each batch holds a decode of every admitted request past
its prompt and then chunks of the admitted prompts, fewest tokens left first, up to a token cap (C
unless given) and P prefill tokens; with nothing admitted it waits for the next arrival.

``--slices`` also runs the wave schedules on ``splitwise-conv-100`` x4 and x16 and on the first 300
requests of splitwise_conv at 4 times the arrival rate (``../shared/data/traces``): without a gate
(``rest`` at least N, batches of at most 128 tokens: the structure of those slices' best policies),
and the best over sizes :data:`WAVE_SIZES`, ``rest`` :data:`WAVE_RESTS` and token caps
:data:`WAVE_TOKENS`; then ``phase-latency`` within ``--seconds`` (60 by default), and the same
programmes with the reference's batch overhead (the linear twin's item terms;
:func:`overhead_pricing`), a reference. Both stop at their budget (a run not solved counts its
requests alone), so under load they can come out lower.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import numpy as np

import optsched.phase_latency as phase_latency_module
from optsched.api import simulate
from optsched.costmodel import CostModel
from optsched.instance import Instance, parse_instance
from optsched.load_bounds import prompt_attention_extra
from optsched.phase_latency import phase_latency, pricing, token_terms
from optsched.schedule import Batch, Item, Schedule, replay

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prefill_search import instances

#: Wave sizes, unfinished requests at which the next wave is admitted, and batch token caps tried on
#: the slices (``--slices``).
WAVE_SIZES = (16, 32, 48, 64, 96, 256)
WAVE_RESTS = (0, 4, 16)
WAVE_TOKENS = (128, 256, 512, 4096)

#: Batch token cap of the schedule without a gate on the slices (that of their best policies).
UNGATED_TOKENS = 128

#: The policy search's best schedule of the equal requests: (policy, cap on running requests).
BEST_POLICY = ("hybrid-baseline", 50)


def equal_instance(n: int = 100, prompt: int = 900, output: int = 256) -> Instance:
    """``n`` equal requests at time 0 under ``llama2-7b-h200`` and the gap table's limits."""
    limits = {"token_budget": 4096, "prefill_budget": 4096, "kv_capacity": 200000, "max_running": 256}
    requests = [{"id": f"r{k}", "prompt_tokens": prompt, "output_tokens": output, "arrival": 0.0} for k in range(n)]
    data = {"name": f"equal-{n}", "cost_model": "llama2-7b-h200", "limits": limits, "requests": requests}
    return parse_instance(data, f"equal-{n}")


def lockstep_groups(N: int, steps: int, beta: float, c: float) -> tuple[float, list[int]]:
    """The least mean completion of N equal jobs of ``steps`` items on the batch machine (a batch of
    n items takes beta + c n), run in lockstep groups one after another, and the group sizes."""

    @functools.cache
    def best(left: int) -> tuple[float, tuple[int, ...]]:
        if left == 0:
            return 0.0, ()
        options = []
        for g in range(1, left + 1):
            rest, sizes = best(left - g)
            options.append((steps * (beta + c * g) * left + rest, (g, *sizes)))
        return min(options)

    total, sizes = best(N)
    return total / N, list(sizes)


@dataclass
class Waves:
    """The state of a wave schedule being built (module docstring): the requests' columns and
    progress, those not yet admitted (arrival order) and those admitted and unfinished."""

    instance: Instance
    arrival: np.ndarray
    prompt_left: np.ndarray
    output: np.ndarray
    generated: np.ndarray
    held: np.ndarray
    pending: list[int]
    admitted: list[int] = field(default_factory=list)
    now: float = 0.0
    waves: int = 0

    @classmethod
    def of(cls, instance: Instance) -> Waves:
        """Nothing admitted, nothing run."""
        R, I, O = (np.asarray(col) for col in instance.columns)
        zeros = np.zeros(len(O), np.int64)
        pending = sorted(range(len(O)), key=lambda j: (R[j], j))
        return cls(instance, R.astype(np.float64), I.astype(np.int64).copy(), O, zeros, zeros.copy(), pending)

    def admit(self, sizes: Sequence[int], rest: int) -> float | None:
        """Wait for the next arrival when nothing is admitted (its time, else None); admit the next wave
        once at most ``rest`` admitted requests are unfinished."""
        start = None
        if not self.admitted and self.arrival[self.pending[0]] > self.now:
            self.now = start = float(self.arrival[self.pending[0]])
        if len(self.admitted) <= rest and self.arrival[self.pending[0]] <= self.now:
            size = sizes[min(self.waves, len(sizes) - 1)]
            while self.pending and self.arrival[self.pending[0]] <= self.now and len(self.admitted) < size:
                self.admitted.append(self.pending.pop(0))
            self.waves += 1
        return start

    def run(self, tokens: int) -> Batch:
        """The next batch: a decode of every admitted request past its prompt, then chunks of the
        admitted prompts by fewest tokens left, up to ``tokens`` tokens and P prefill tokens."""
        decodes = [j for j in self.admitted if self.prompt_left[j] == 0]
        room, chunks = min(tokens - len(decodes), self.instance.limits.prefill_budget), []
        for j in sorted((j for j in self.admitted if self.prompt_left[j] > 0), key=lambda j: self.prompt_left[j]):
            if room > 0:
                chunks.append((j, int(min(room, self.prompt_left[j]))))
                room -= chunks[-1][1]
        self.now += batch_time(self.instance, decodes, chunks, self.held)
        for j in decodes:
            self.held[j] += 1
            self.generated[j] += 1
        for j, t in chunks:
            self.prompt_left[j] -= t
            self.held[j] += t
            self.generated[j] += self.prompt_left[j] == 0
        ids = [r.id for r in self.instance.requests]
        return Batch(tuple([Item(ids[j], 1) for j in decodes] + [Item(ids[j], t) for j, t in chunks]))


def wave_batches(instance: Instance, sizes: Sequence[int], rest: int, tokens: int) -> list[Batch]:
    """The wave schedule of the module docstring (batches in order), batches of at most ``tokens`` tokens."""
    state, batches = Waves.of(instance), []
    while state.pending or state.admitted:
        state.admitted = [j for j in state.admitted if state.generated[j] < state.output[j]]
        start = state.admit(sizes, rest) if state.pending else None
        if state.admitted:
            batches.append(replace(state.run(tokens), start=start))
    return batches


def batch_time(instance: Instance, decodes: list[int], chunks: list[tuple[int, int]], held: np.ndarray) -> float:
    """The cost model's time of a batch of ``decodes`` and prefill ``chunks`` with KV ``held`` before it."""
    n_pre = sum(t for _, t in chunks)
    return instance.cost_model.batch_time(
        len(decodes) + n_pre,
        n_pre,
        sum(t * t for _, t in chunks),
        len(decodes),
        int(sum(held[j] for j in decodes)),
        int(sum(t * held[j] for j, t in chunks)),
        int(max((held[j] for j in decodes), default=0)),
    )


def wave_latency(instance: Instance, sizes: Sequence[int], rest: int = 0, tokens: int | None = None) -> float:
    """The replayed mean latency of the wave schedule (seconds; batches of at most ``tokens`` tokens, C
    by default); raises if it does not replay cleanly."""
    cap = instance.limits.token_budget if tokens is None else tokens
    result = replay(instance, Schedule(instance.name, wave_batches(instance, sizes, rest, cap)))
    if not result.feasible or result.metrics is None:
        raise AssertionError(f"wave schedule {list(sizes)} rest {rest}: {result.violations[:3]}")
    return result.metrics.mean_latency


def climb(instance: Instance, sizes: list[int]) -> tuple[float, list[int]]:
    """The best wave sizes a climb from ``sizes`` finds, moving 1, 2 or 4 requests between two waves."""
    best, value = list(sizes), wave_latency(instance, sizes)
    improved = True
    while improved:
        improved = False
        for i in range(len(best)):
            for j in (j for j in range(len(best)) if j != i):
                for d in (1, 2, 4):
                    moved = [s + d * (k == i) - d * (k == j) for k, s in enumerate(best)]
                    if min(moved) >= 1 and (found := wave_latency(instance, moved)) < value - 1e-12:
                        best, value, improved = moved, found, True
    return value, best


def reference_pricing(instance: Instance, longest: bool) -> tuple[float, float]:
    """(beta, c) of the reference: a decode batch's overhead with its one tile and (``longest``) the
    longest-context term at the mean decode context; c the mean real term per token (prompt tokens
    with their tiles)."""
    cm = instance.cost_model
    I, O = int(instance.columns[1][0]), int(instance.columns[2][0])
    contexts = I + np.arange(O - 1, dtype=np.float64)  # slots read by the decodes of tokens 2..O
    beta = cm.base + cm.per_tile + cm.decode.per_max_kv * float(contexts.mean()) * longest
    prompt = I * (cm.per_token + cm.per_tile / cm.token_tile) + float(
        prompt_attention_extra(instance, np.array([I]))[0]
    )
    decodes = float(np.sum(cm.per_token + cm.decode.per_token + cm.decode.per_kv * contexts))
    return beta, (prompt + decodes) / O


def equal_requests() -> None:
    """The first part of the module docstring."""
    inst = equal_instance()
    N, O = len(inst.requests), int(inst.columns[2][0])
    attention = prompt_attention_extra(inst, np.asarray(inst.columns[1]))
    bound = phase_latency(inst, attention, 60.0)
    print(f"phase-latency bound: {bound.value:.4f} s" if bound else "phase-latency: none")
    starts: list[list[int]] = []
    for whole_tile in (False, True):
        per_token = float(token_terms(inst, attention, whole_tile, np.arange(N)).sum(axis=1).mean()) / O
        value, sizes = lockstep_groups(N, O, pricing(inst.cost_model, whole_tile)[0], per_token)
        print(f"programme, {'whole tile' if whole_tile else 'linear twin'}: {value:.4f} s, groups {sizes}")
        starts.append(sizes)
    for longest in (False, True):
        value, sizes = lockstep_groups(N, O, *reference_pricing(inst, longest))
        what = "tile and longest context" if longest else "tile"
        print(f"reference with the {what} in the overhead (not a bound): {value:.4f} s, groups {sizes}")
    for found in (*starts, sizes):
        print(f"waves {found}: {wave_latency(inst, found):.4f} s")
    t0 = time.perf_counter()
    value, best = climb(inst, sizes)
    print(f"climb from {sizes}: {value:.4f} s, waves {best} ({time.perf_counter() - t0:.1f} s)")
    policy, cap = BEST_POLICY
    capped = replace(inst, limits=replace(inst.limits, max_running=cap))
    metrics = simulate(capped, policy)[1].metrics
    print(f"{policy} --max-running {cap}: {metrics.mean_latency:.4f} s" if metrics else f"{policy}: infeasible")


def slices(seconds: float) -> None:
    """The ``--slices`` part of the module docstring, the programmes of each bound within ``seconds``."""
    wanted = ("splitwise-conv-100 x4", "splitwise-conv-100 x16", "splitwise_conv first 300 x4")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(name, inst) for name, inst in instances(Path(tmp)) if name in wanted]
    for name, inst in cases:
        t0 = time.perf_counter()
        free = wave_latency(inst, [inst.limits.max_running], len(inst.requests), UNGATED_TOKENS)
        grid = [(g, rest, tokens) for g in WAVE_SIZES for rest in WAVE_RESTS for tokens in WAVE_TOKENS]
        value, *knobs = min((wave_latency(inst, [g], rest, tokens), g, rest, tokens) for g, rest, tokens in grid)
        print(f"{name}: no gate {free:.4f} s; best wave schedule {value:.4f} s (size, rest, tokens {knobs})", end="")
        print(f" ({time.perf_counter() - t0:.1f} s)")
        attention = prompt_attention_extra(inst, np.asarray(inst.columns[1]))
        bound = phase_latency(inst, attention, seconds)
        with mock.patch.object(phase_latency_module, "pricing", functools.partial(overhead_pricing, inst)):
            reference = phase_latency(inst, attention, seconds)
        if bound is not None and reference is not None:
            print(f"  phase-latency {bound.value:.4f} s; with the reference overhead {reference.value:.4f} s")


def overhead_pricing(instance: Instance, cm: CostModel, whole_tile: bool) -> tuple[float, float, float, float]:
    """:func:`optsched.phase_latency.pricing` of the linear twin under either flag, with the batch
    overhead of the reference: one whole tile and the longest-context term at the mean decode context
    (weighted by outputs) added (not a bound)."""
    I, O = (np.asarray(col, dtype=np.float64) for col in instance.columns[1:])
    context = float(np.sum(O * (I + O / 2)) / np.sum(O))
    beta, chunk, decode, per_kv = pricing(cm, False)
    return beta + cm.per_tile + cm.decode.per_max_kv * context, chunk, decode, per_kv


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", action="store_true", help="also the wave schedules on three loaded slices")
    ap.add_argument("--seconds", type=float, default=60.0, help="budget of phase-latency on a slice (default 60)")
    args = ap.parse_args(argv)
    equal_requests()
    if args.slices:
        slices(args.seconds)


if __name__ == "__main__":
    main(sys.argv[1:])

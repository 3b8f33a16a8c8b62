"""Benchmark: which side of the splitwise_code mean-latency gap is weak (run on demand, not collected).

    PYTHONPATH=. python tests/benchmarks/bench_latency_sides.py [--schedule FILE] [--time-limit 120] [--lp STEP]

The slice is the row ``splitwise_code first 300`` of ``bench_latency_gaps.py`` (the first 300
requests of ``../shared/data/traces/splitwise_code.csv`` under ``llama2-7b-h200``, C = P = 4096,
M = 200,000, R_max = 256). Its best proven bound is ``block-ttft-plus-rest``: a mean-TTFT bound plus
each request's tokens after the first priced alone (docs/infermax.md). Printed, in three parts:

1. *The schedule.* ``FILE`` (a schedule of ``optsched solve --out``), or the schedule of ``optsched
   solve --problem infermax --objective latency --time-limit S`` run here: its mean TTFT and mean
   time after the first token against the two parts of the bound, and the heaviest *busy block*
   (consecutive arrivals whose lifetimes overlap in the schedule): its share of the sum of
   latencies, and how its batches' time splits into batches with first-pass prefill tokens only,
   with decode items too (mixed), and decode items only.
2. *The schedule side.* Hybrid schedules built here (:func:`adaptive_schedule`): every batch holds a
   decode of every request past its prompt, then prompt chunks in the order of prompt tokens left
   plus ``kappa`` times the output length, up to whole token tiles (the decodes counted): with
   decodes waiting, ``round(gamma * prompts waiting / decodes)`` tiles (at least one, at most the
   cap), else the cap. The best replayed mean latency over a small grid of ``gamma``, ``kappa``
   and the cap.
3. *The bound side.* A relaxation that keeps the trade-off no listed bound prices
   (:func:`relaxation_value`): one machine either *works* on one released prompt (its first-pass
   item terms under the linear twin, the token tile's share ``theta`` of ``per_tile / token_tile``
   in each token) or spends *free* time; a prompt's first token is at the end of a free stretch of
   at least the prefill overhead ``L (base + prefill bias) + (1 - theta) per_tile`` after its work;
   after it, the request needs free time equal to its later tokens' least times alone, less
   ``theta per_tile`` each, and every request past its first token gains free time at once. Each
   batch maps to its first-pass chunks' terms as work followed by the rest of its time as free time
   (a batch with item x lasts at least x alone plus the other items' terms), so every schedule is a
   point of it; the relaxation is a sketch, not a listed bound. Printed: the value of its policies
   (work on the prompt of least work left, and free time whenever a request past its first token has
   had none for a time fixed or proportional to the prompts waiting per such request:
   :data:`THRESHOLDS`; or decodes first), which no bound built on it can exceed, on the heaviest
   block and on the whole slice. Then, for the schedule of part 1 and the best of part 2 (eviction-free), each
   as a point of the relaxation: the least slack of its three conditions over the requests (first-pass
   work at least the relaxation's, the first token's batch free for at least the prefill overhead,
   the free time after the first token at least the time needed; :func:`mapping_slack`), a check of
   the mapping, not a proof. With ``--lp STEP``, also :func:`relaxation_lp` on the heaviest block (a
   linear programme of mean busy times over the relaxation at tile share 1 on a grid of ``STEP``
   seconds, a prototype, not a listed bound) beside that block's own ``block-flush-ttft`` plus its
   tokens after the first alone (the present bound's parts on those requests).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from optsched.bounds import critical_path_times, prefill_alone_time
from optsched.instance import Instance
from optsched.load_bounds import share_terms
from optsched.phase_bounds import rest_after_first_token
from optsched.schedule import Batch, Item, Schedule, load_schedule, replay
from optsched.ttft_block_bounds import block_bound
from optsched.ttft_bounds import flush_overhead
from optsched.workload import WorkloadTransforms, apply_transforms, load_trace
from tests.benchmarks.bench_latency_anatomy import TRACE_LIMITS
from tests.benchmarks.bench_latency_gaps import LIMITS, TRACES

TRACE = TRACES / "splitwise_code.csv"
FIRST = 300
#: The builder's grid: gamma (tiles per waiting prompt per decode), kappa (output weight), cap (tokens).
GAMMAS, KAPPAS, CAPS = (3.0, 4.0, 5.0, 6.0), (0.0, 10.0, 30.0), (1024, 2048, 4096)
#: Thresholds (a, b) of the relaxation's policies: free time once a request past its first token has had
#: none for a + b (prompts waiting) / (requests past their first token) seconds.
THRESHOLDS = tuple((a, 0.0) for a in (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)) + tuple(
    (0.0, b) for b in (0.02, 0.04, 0.06, 0.08, 0.1, 0.15)
)


def slice_instance() -> Instance:
    """The first 300 requests of splitwise_code under the limits of ``bench_latency_gaps.py``."""
    base = load_trace(str(TRACE), "llama2-7b-h200", TRACE_LIMITS, max_rows=FIRST)
    return apply_transforms(base, WorkloadTransforms(first=FIRST))


def times(instance: Instance, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival, first-token and finish time of every request (request order) in the replayed schedule."""
    rep = replay(instance, schedule)
    if not rep.feasible:
        raise SystemExit(f"the schedule does not replay cleanly: {rep.violations[:3]}")
    out = [rep.outcomes[r.id] for r in instance.requests]
    return (
        np.array([r.arrival for r in instance.requests]),
        np.array([o.first_token for o in out], dtype=np.float64),
        np.array([o.finish for o in out], dtype=np.float64),
    )


def busy_blocks(release: np.ndarray, finish: np.ndarray) -> list[np.ndarray]:
    """Consecutive arrivals whose lifetimes overlap (a request arriving before all earlier ones finish
    joins their block), as arrays of request indices."""
    order = np.argsort(release, kind="stable")
    blocks, current, end = [], [order[0]], finish[order[0]]
    for k in order[1:]:
        if release[k] >= end:
            blocks.append(np.array(current))
            current = []
        current.append(k)
        end = max(end, finish[k]) if len(current) > 1 else finish[k]
    blocks.append(np.array(current))
    return blocks


def composition(instance: Instance, schedule: Schedule, first_token: dict[str, float], lo: float, hi: float) -> str:
    """Time and count of the batches within [lo, hi] by kind (first-pass prefill only, mixed, decode only)."""
    rep = replay(instance, schedule)
    kinds = {"prefill only": [0.0, 0], "mixed": [0.0, 0], "decode only": [0.0, 0]}
    tokens = []
    for b, batch in enumerate(schedule.batches):
        start, end = rep.starts[b], rep.ends[b]
        if start < lo or end > hi or not batch.items:
            continue
        fresh = sum(it.tokens for it in batch.items if first_token[it.id] >= end - 1e-12)
        decodes = sum(1 for it in batch.items if first_token[it.id] < end - 1e-12)
        kind = "mixed" if fresh and decodes else "prefill only" if fresh else "decode only"
        kinds[kind][0] += end - start
        kinds[kind][1] += 1
        tokens += [fresh] if fresh else []
    parts = ", ".join(f"{name} {t:.2f} s ({n} batches)" for name, (t, n) in kinds.items())
    return f"{parts}; {np.mean(tokens) if tokens else 0:.0f} first-pass prefill tokens a batch that has some"


def describe(instance: Instance, schedule: Schedule) -> None:
    """Part 1 of the module docstring."""
    release, first, finish = times(instance, schedule)
    alone = critical_path_times(instance)
    rest = rest_after_first_token(instance)
    print(
        f"mean latency {np.mean(finish - release):.5f} s: TTFT {np.mean(first - release):.5f} s, after the first "
        f"token {np.mean(finish - first):.5f} s (tokens after the first alone {np.mean(rest):.5f} s)"
    )
    heavy = max(busy_blocks(release, finish), key=lambda b: float(np.sum(finish[b] - release[b])))
    lo, hi = float(release[heavy].min()), float(finish[heavy].max())
    total, block = float(np.sum(finish - release)), float(np.sum(finish[heavy] - release[heavy]))
    print(
        f"heaviest block: {len(heavy)} requests, {lo:.2f}-{hi:.2f} s, latency sum {block:.2f}"
        f" of {total:.2f} s (TTFT {np.sum(first[heavy] - release[heavy]):.2f}, after the first token "
        f"{np.sum(finish[heavy] - first[heavy]):.2f}, alone {np.sum(alone[heavy]):.2f}, its tokens after the first "
        f"alone {np.sum(rest[heavy]):.2f})"
    )
    firsts = {r.id: float(t) for r, t in zip(instance.requests, first)}
    print(f"  its batches: {composition(instance, schedule, firsts, lo, hi)}")


def adaptive_schedule(instance: Instance, gamma: float, kappa: float, cap: int) -> Schedule:
    """The hybrid schedule of part 2 of the module docstring."""
    cm, tile = instance.cost_model, instance.cost_model.token_tile or 128
    reqs = sorted(instance.requests, key=lambda r: r.arrival)
    queue: list[list] = []  # [prompt tokens left, done, id, prompt, output]
    decoding: dict[str, list[int]] = {}  # id -> [KV slots, tokens left]
    batches: list[Batch] = []
    t, nxt, wait = 0.0, 0, None
    while nxt < len(reqs) or queue or decoding:
        while nxt < len(reqs) and reqs[nxt].arrival <= t + 1e-12:
            q = reqs[nxt]
            queue.append([q.prompt_tokens, 0, q.id, q.prompt_tokens, q.output_tokens])
            nxt += 1
        if not queue and not decoding:
            t = wait = reqs[nxt].arrival
            continue
        queue.sort(key=lambda w: w[0] + kappa * w[4])
        n_dec = len(decoding)
        tiles = cap // tile if not n_dec else int(min(cap // tile, max(1, round(gamma * len(queue) / n_dec))))
        room = tiles * tile - n_dec
        items = [Item(i, 1) for i in decoding]
        n_pre = s_pre = x_pre = 0
        for w in queue:
            if room <= 0:
                break
            c = min(w[0], room)
            items.append(Item(w[2], c))
            n_pre, s_pre, x_pre, room = n_pre + c, s_pre + c * c, x_pre + c * w[1], room - c
            w[0], w[1] = w[0] - c, w[1] + c
        kv = [v[0] for v in decoding.values()]
        t += cm.batch_time(n_pre + n_dec, n_pre, s_pre, n_dec, sum(kv), x_pre, max(kv, default=0))
        batches.append(Batch(tuple(items), start=wait))
        wait = None
        for i in list(decoding):
            decoding[i][0] += 1
            decoding[i][1] -= 1
            if decoding[i][1] <= 0:
                del decoding[i]
        for w in [w for w in queue if w[0] == 0]:
            decoding.update({w[2]: [w[3], w[4] - 1]} if w[4] > 1 else {})
        queue = [w for w in queue if w[0] > 0]
    return Schedule(instance.name, batches)


def relaxation_value(
    release: np.ndarray, work: np.ndarray, rest: np.ndarray, flush: float, threshold: tuple[float, float] | None
) -> float:
    """Sum of latencies of one policy in the relaxation of part 3 of the module docstring: work on the
    prompt of least work left (preemptive), a flush after each prompt; free time whenever a request
    past its first token has had none for ``a + b`` (prompts waiting) / (requests past their first token)
    seconds, ``threshold = (a, b)`` (None: only the flushes; (0, 0): free time
    whenever one is past its first token)."""
    order = np.argsort(release, kind="stable")
    n, t, nxt, total = len(order), float(release[order[0]]), 0, 0.0
    heap: list[list] = []
    need: dict[int, float] = {}  # request past its first token -> free time it still needs
    fed: dict[int, float] = {}  # when it last had free time

    def free(span: float) -> None:
        nonlocal total
        for i in list(need):
            need[i] -= span
            fed[i] = t + span
            if need[i] <= 1e-15:
                total += t + span + need[i] - release[i]
                del need[i], fed[i]

    while nxt < n or heap or need:
        while nxt < n and release[order[nxt]] <= t + 1e-15:
            heapq.heappush(heap, [work[order[nxt]], int(order[nxt])])
            nxt += 1
        if not heap and not need:
            t = float(release[order[nxt]])
            continue
        arrival = float(release[order[nxt]]) - t if nxt < n else np.inf
        patience = np.inf if threshold is None else threshold[0] + threshold[1] * len(heap) / max(len(need), 1)
        starved = need and min(fed.values(), default=t) <= t - patience + 1e-15
        if need and (not heap or starved):
            span = max(min(min(need.values()), arrival), 1e-12)
            free(span)
            t += span
            continue
        span = min(heap[0][0], arrival)
        if need and threshold is not None:
            span = min(span, max(min(fed.values()) + patience - t, 1e-12))
        heap[0][0] -= span
        t += span
        if heap[0][0] <= 1e-15:
            i = heapq.heappop(heap)[1]
            free(flush)
            t += flush
            need[i], fed[i] = rest[i], t
            if rest[i] <= 0:
                total += t - release[i]
                del need[i], fed[i]
    return total


def relaxation_data(instance: Instance, theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per request (request order) its release, first-pass work and free time needed after its first
    token in the relaxation with tile share ``theta``, and the prefill overhead (module docstring)."""
    cm = instance.cost_model
    tile = cm.layers * cm.per_tile
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.float64)
    O = np.array([r.output_tokens for r in instance.requests], dtype=np.float64)
    release = np.array([r.arrival for r in instance.requests])
    work = share_terms(instance, True)[:, 0] - (1 - theta) * tile / (cm.token_tile or 1) * I
    rest = rest_after_first_token(instance) - theta * tile * (O - 1)
    return release, work, rest, flush_overhead(instance) + (1 - theta) * tile


def relaxation(instance: Instance, members: np.ndarray, theta: float) -> tuple[float, str]:
    """The least sum of latencies of the relaxation's policies on the requests ``members`` with tile
    share ``theta``, and the policy giving it."""
    release, work, rest, flush = relaxation_data(instance, theta)
    args = (release[members], work[members], rest[members], flush)
    found = [(relaxation_value(*args, th), th) for th in (None, (0.0, 0.0), *THRESHOLDS)]
    value, th = min(found, key=lambda f: f[0])
    if th is None or th == (0.0, 0.0):
        return value, "work first" if th is None else "decodes first"
    return value, f"free after {th[0]:g} s" if th[0] else f"free after {th[1]:g} s x waiting / decoding"


def mapping_slack(instance: Instance, schedule: Schedule, theta: float) -> tuple[float, float, float]:
    """The schedule as a point of the relaxation (module docstring), eviction-free: the least, over the
    requests, of its first-pass work less the relaxation's, of the free part of its first token's batch
    less the prefill overhead, and of the free time after its first token less the time it needs
    (seconds; each at least 0 where the mapping holds)."""
    rep = replay(instance, schedule)
    cm, index = instance.cost_model, {r.id: k for k, r in enumerate(instance.requests)}
    L, a, share = cm.layers, cm.per_token + cm.prefill.per_token, theta * cm.per_tile / (cm.token_tile or 1)
    _, need_work, need_rest, flush = relaxation_data(instance, theta)
    done, first = np.zeros(len(index)), np.zeros(len(index))
    work, free, first_free = np.zeros(len(index)), np.zeros(len(schedule.batches)), np.zeros(len(index))
    ends = np.asarray(rep.ends)
    for b, batch in enumerate(schedule.batches):
        spent = 0.0
        for it in batch.items:
            k = index[it.id]
            if done[k] < instance.requests[k].prompt_tokens:
                c = it.tokens
                term = L * ((a + share) * c + cm.prefill.per_token_sq * c * c + cm.prefill.per_ctx * c * done[k])
                work[k], spent, done[k] = work[k] + term, spent + term, done[k] + c
                first[k] = ends[b] if done[k] >= instance.requests[k].prompt_tokens else first[k]
        free[b] = ends[b] - rep.starts[b] - spent
        for it in batch.items:
            k = index[it.id]
            first_free[k] = free[b] if first[k] == ends[b] else first_free[k]
    cum_free = np.concatenate([[0.0], np.cumsum(free)])
    finish = np.array([rep.outcomes[r.id].finish for r in instance.requests])
    after = cum_free[np.searchsorted(ends, finish, side="right")] - cum_free[np.searchsorted(ends, first, side="right")]
    return float(np.min(work - need_work)), float(np.min(first_free - flush)), float(np.min(after - need_rest))


def relaxation_lp(instance: Instance, members: np.ndarray, step: float, seconds: float) -> float | None:
    """A linear programme over the relaxation at tile share 1 on the requests ``members`` (a prototype,
    not a listed bound): intervals of ``step`` seconds from their first release, the last one without
    end; per request its cumulative work Z and cumulative credited free time Y by each interval's end
    (after its release), per interval the free time f. Rows: work plus free time at most the interval
    (no bound on the last), Y's growth in an interval at most f there, Y / (free time needed) at most
    Z / (work) (no free time is credited before the prompt's work is done), the first token at least
    the mean of the work's interval starts plus half the work plus the prefill overhead, the finish
    at least the mean of the credited free time's interval starts plus half of it, the finish at
    least the first token plus the later tokens alone, both at least their times alone. The least
    sum of latencies less the releases, or None where HiGHS does not solve it within ``seconds``."""
    import highspy

    release, work, rest, flush = relaxation_data(instance, 1.0)
    first_alone = np.array([prefill_alone_time(instance, r.prompt_tokens) for r in instance.requests])
    alone, later = critical_path_times(instance), rest_after_first_token(instance)
    s0 = float(release[members].min())
    K = int(np.ceil((work[members].sum() + len(members) * flush + later[members].max()) / step)) + 2
    lower = s0 + step * np.arange(K)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", seconds)
    columns: list[tuple[float, float, float]] = []

    def col(lo: float, hi: float, cost: float = 0.0) -> int:
        columns.append((lo, hi, cost))
        return len(columns) - 1

    rows: list[tuple[float, float, list[int], list[float]]] = []
    free = [col(0.0, step if k < K - 1 else np.inf) for k in range(K)]
    used: list[list[tuple[int, float]]] = [[(free[k], 1.0)] for k in range(K)]
    for i in members:
        ft, fin = col(release[i] + first_alone[i], np.inf), col(release[i] + alone[i], np.inf, 1.0)
        ks = range(int((release[i] - s0) // step), K)
        Z = [col(0.0, work[i]) for _ in ks]
        rows.append((work[i], work[i], [Z[-1]], [1.0]))
        for m, k in enumerate(ks):
            cap = (lower[k] + step if k < K - 1 else np.inf) - max(release[i], lower[k])
            rows.append((0.0, cap, Z[max(m - 1, 0) : m + 1], [1.0] if m == 0 else [-1.0, 1.0]))
            used[k] += [(Z[m], 1.0)] + ([(Z[m - 1], -1.0)] if m else [])
        # sum_k z_k lower_k = work lower_last - step sum_{m < last} Z_m (the work's mean interval start)
        rows.append((
            work[i] / 2 + flush + lower[K - 1],
            np.inf,
            [ft, *Z[:-1]],
            [1.0] + [step / work[i]] * (len(Z) - 1),
        ))
        rows.append((later[i], np.inf, [fin, ft], [1.0, -1.0]))
        if rest[i] <= 0:
            continue
        Y = [col(0.0, rest[i]) for _ in ks]
        rows.append((rest[i], rest[i], [Y[-1]], [1.0]))
        for m, k in enumerate(ks):
            grow = [Y[m]] if m == 0 else [Y[m], Y[m - 1]]
            rows.append((0.0 if m else -np.inf, np.inf, grow, [1.0] if m == 0 else [1.0, -1.0]))
            rows.append((-np.inf, 0.0, [*grow, free[k]], ([1.0] if m == 0 else [1.0, -1.0]) + [-1.0]))
            rows.append((-np.inf, 0.0, [Y[m], Z[m]], [1.0 / rest[i], -1.0 / work[i]]))
        rows.append((rest[i] / 2 + lower[K - 1], np.inf, [fin, *Y[:-1]], [1.0] + [step / rest[i]] * (len(Y) - 1)))
    rows += [(-np.inf, step if k < K - 1 else np.inf, [c for c, _ in u], [v for _, v in u]) for k, u in enumerate(used)]
    lo, hi, cost = (np.array(x, dtype=np.float64) for x in zip(*columns))
    h.addVars(len(columns), lo, hi)
    h.changeColsCost(len(columns), np.arange(len(columns), dtype=np.int32), cost)
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    index = np.array([c for r in rows for c in r[2]], dtype=np.int32)
    value = np.array([v for r in rows for v in r[3]], dtype=np.float64)
    bounds = np.array([(r[0], r[1]) for r in rows], dtype=np.float64)
    h.addRows(len(rows), bounds[:, 0], bounds[:, 1], len(index), starts, index, value)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return h.getInfo().objective_function_value - float(release[members].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", help="a schedule file of optsched solve --out (else solved here)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="the solve's --time-limit (default 120)")
    parser.add_argument("--lp", type=float, metavar="STEP", help="also the prototype LP on the heaviest block, STEP s")
    opts = parser.parse_args()
    instance = slice_instance()
    with tempfile.TemporaryDirectory() as tmp:
        path = opts.schedule or str(Path(tmp) / "best.json")
        if not opts.schedule:
            cmd = [sys.executable, "-m", "optsched", "solve", str(TRACE), "--first", str(FIRST), *LIMITS]
            cmd += ["--problem", "infermax", "--objective", "latency", "--time-limit", str(opts.time_limit)]
            subprocess.run([*cmd, "--out", path, "--quiet"], check=True, capture_output=True)
        best = load_schedule(path)
    print("1. the schedule")
    describe(instance, best)
    print("2. the schedule side: adaptive hybrid schedules")
    found = []
    for gamma, kappa, cap in itertools.product(GAMMAS, KAPPAS, CAPS):
        release, first, finish = times(instance, adaptive_schedule(instance, gamma, kappa, cap))
        found.append((float(np.mean(finish - release)), float(np.mean(first - release)), gamma, kappa, cap))
    value, ttft, gamma, kappa, cap = min(found)
    print(f"  best {value:.5f} s (TTFT {ttft:.5f} s) at gamma {gamma:g}, kappa {kappa:g}, cap {cap}")
    describe(instance, adaptive_schedule(instance, gamma, kappa, cap))
    print("3. the bound side: the relaxation's policies (no bound built on it exceeds these)")
    release, _, finish = times(instance, best)
    heavy = max(busy_blocks(release, finish), key=lambda b: float(np.sum(finish[b] - release[b])))
    everyone = np.arange(len(instance.requests))
    for theta in (1.0, 0.5, 0.0):
        block, how = relaxation(instance, heavy, theta)
        whole, how_whole = relaxation(instance, everyone, theta)
        print(
            f"  theta {theta:g}: heaviest block {block:.2f} s ({how}); whole slice mean {whole / len(everyone):.5f} s "
            f"({how_whole})"
        )
    if opts.lp:
        part = replace(instance, requests=tuple(instance.requests[k] for k in sorted(heavy)))
        present = block_bound(part).value * len(heavy) + float(np.sum(rest_after_first_token(part)))
        lp = relaxation_lp(instance, np.sort(heavy), opts.lp, 300.0)
        shown = "not solved within 300 s" if lp is None else f"{lp:.2f} s"
        print(f"  the prototype LP on the heaviest block, {opts.lp:g}-s intervals: {shown}; the block's own")
        print(f"    block-flush-ttft plus its tokens after the first alone: {present:.2f} s")
    adaptive = adaptive_schedule(instance, gamma, kappa, cap)
    for name, schedule in (("best", best), ("adaptive", adaptive)):
        if any(batch.evict for batch in schedule.batches):
            continue
        slack = [mapping_slack(instance, schedule, theta) for theta in (1.0, 0.5, 0.0)]
        print(
            f"  the {name} schedule as a point of it, least slack (work, flush, free after) at theta 1 / 0.5 / 0 (s):"
        )
        print("    " + " / ".join(", ".join(f"{x:.3g}" for x in row) for row in slack))


if __name__ == "__main__":
    main()

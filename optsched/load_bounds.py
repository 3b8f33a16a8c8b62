r"""Lower bounds on mean latency and mean TTFT that see the load: one machine processing work.

The bounds of :mod:`optsched.bounds` for the per-request objectives are each request run alone
(its critical path): they do not move when requests queue behind each other. The bounds here
relax the engine to *one machine that processes work* and price the queueing exactly on that
machine. They hold for every schedule that replays cleanly under the contract (any policy, any
formulation, evictions or not), and use only the facts (F0)-(F5) of :mod:`optsched.bounds`.

**Work and its shares.** Take the linear twin's coefficients (F0, F2): a batch B costs at least its
overhead :math:`\beta = L(b + \min(p_b, d_b))` plus the item terms of its items (a prefill chunk of
c tokens at least :math:`L(a+p_a+p_q)c`, a decode item reading m slots :math:`L(a+d_a+d_k m)`).
Let K be the most items one batch can hold: at most one per request (the replay rejects a second),
each of a request holding KV (at most :math:`R_{max}`), of at least one token (at most C) and
holding at least one slot (at most M); :math:`K = \min(N, R_{max}, C, M)`. Give each item x of B
the *share* :math:`\beta(\lambda_1 / K + \lambda_2\, tok_x / C + \lambda_3\, h_x / M)` of B's
overhead, with :math:`\lambda \ge 0`, :math:`\sum \lambda = 1` (the M term only with a capacity),
tok_x its tokens and h_x the KV its request holds after B. By (F4) the items of B number at most
K, hold at most C tokens and at most M slots, so their shares add up to at most :math:`\beta`, and
**the item terms plus the shares of B's items are at most B's time**.

Request i's items are at least :math:`n_i = \lceil I_i/P \rceil + O_i - 1` (F3), hold at least
:math:`\tau_i = I_i + O_i - 1` tokens and, over the items generating its O_i tokens,
:math:`\eta_i = \sum_{g=1}^{O_i} (I_i + g - 1)` slots (F4: the item generating token g holds
:math:`I_i + g - 1`, after an eviction too). So its item terms and shares add up to at least

.. math:: p_i = w_i + \beta(\lambda_1 n_i / K + \lambda_2 \tau_i / C + \lambda_3 \eta_i / M),

with :math:`w_i` the least item work of :func:`optsched.bounds.request_work` (the cheaper of a
decode and a re-prefill for every later token) plus the prompt's least attention beyond it
(:func:`prompt_attention_extra`): the last pass that builds i's KV from empty prefills positions
0 to :math:`I_i - 1` in chunks :math:`c_1, \dots, c_k \le P` (a chunk crossing position
:math:`I_i` counted for its part below), whose attention terms are
:math:`L(p_q \sum_j c_j^2 + p_x \sum_j c_j S_{j-1})` with :math:`S_{j-1}` the tokens before chunk j,
that is :math:`L(\tfrac{p_x}{2} I_i^2 + (p_q - \tfrac{p_x}{2}) \sum_j c_j^2)`, and
:math:`I_i \le \sum_j c_j^2 \le \min(I_i, P) I_i`; ``request_work`` counts :math:`L p_q I_i` of it.

**The relaxation.** Given a schedule with finish times :math:`F_i`, build a preemptive schedule of
one machine: inside each batch's interval :math:`[s_B, e_B]` run each of its items, one after the
other, for its item term plus share (they fit: the sum is at most :math:`e_B - s_B`). Job i is
released at :math:`r_i` (arrival; a batch holding i's item starts after it, (F1)), needs
:math:`p_i` (stop it once it has had :math:`p_i`; it gets at least that) and completes at
:math:`C_i \le F_i` (its last batch ends at :math:`F_i`). Batches are sequential (F1), so this is a
feasible schedule of :math:`1|r_j, pmtn|\sum C_j`.

**Sorted combination.** Preemptive SRPT (shortest remaining processing time) on that machine
completes, at every time t, the most jobs that any schedule completes by t (Schrage, "A proof of the
optimality of the shortest remaining processing time discipline", Oper. Res. 16, 1968: SRPT
minimises the number of jobs in the system at every time; the jobs released by t do not depend on
the schedule). Hence the k-th smallest :math:`C_i`, so the k-th smallest :math:`F_i`, is at least
SRPT's k-th completion :math:`S_{(k)}`. Every :math:`F_i \ge e_i = r_i + A_i` (the critical path of
:func:`optsched.bounds.critical_path_times`), so the k-th smallest :math:`F_i` is also at least the
k-th smallest :math:`e_{(k)}` (componentwise domination survives sorting). Summing,

.. math:: \text{mean latency} = \frac{1}{N}\Big(\sum_i F_i - \sum_i r_i\Big)
          \ge \frac{1}{N}\Big(\sum_k \max(S_{(k)}, e_{(k)}) - \sum_i r_i\Big).

Each weight vector :math:`\lambda` gives a valid bound; ``srpt-work`` is the largest over
:data:`SHARE_WEIGHTS`. It grows with load (the SRPT queue) and with memory pressure (the
:math:`\lambda_3` share prices each slot-iteration at :math:`\beta / M`).

**TTFT** (``srpt-prefill``). The first token of i ends the batch generating it, :math:`FT_i`. Keep
in the relaxation only the items up to each request's first token: at least
:math:`\lceil I_i/P \rceil` items, :math:`I_i` tokens, :math:`I_i` slots in the item generating it,
item work at least :math:`L(a+p_a+p_q) I_i` (:func:`~optsched.bounds.request_work` with
``first_tokens``); dropping the other items keeps every batch's kept terms and shares within its
time. The same argument with :math:`e_i = r_i + F(I_i)` (the least prefill alone,
:func:`optsched.bounds.prefill_alone_time`) bounds :math:`\frac1N(\sum_i FT_i - \sum_i r_i)`.

**One item a batch** (``srpt-work-alone``, ``srpt-prefill-alone``). When K = 1 (R_max = 1, C = 1
or M = 1) every batch holds one item and costs exactly that item's lone batch, so request i's
batches take at least :math:`A_i` (:math:`F(I_i)` up to its first token) of the one machine's time:
the SRPT argument above with :math:`p_i = A_i` (no share divides any overhead).

**Busy-time LP** (``busy-time-work`` for latency, ``busy-time-prefill`` for TTFT). SRPT lets a
request finish as soon as its own small work is done; it ignores that each batch's overhead is time
that every member waits through, and that a request's work only advances inside its own batches.
Split each batch's interval into *exclusive* segments, one per item, of the item's least term as
counted in :math:`w_i` (for the token it generates, or its prefill chunk's linear part; a
re-prefill's share spread over its chunks), and the rest, at least :math:`\beta` (*shared*: credit
each of its at most K members with its first :math:`\beta`). Request i then gets exactly :math:`w_i`
exclusive time, at most :math:`c_i` in one batch (:func:`_biggest_item`), and :math:`\beta` credit
in each of its at least :math:`n_i` batches, all within :math:`[r_i, F_i]`, its exclusive time and
credit disjoint. On a grid :math:`0 = \tau_0 < \dots < \tau_G` with a last interval :math:`[\tau_G,
\infty)` and each :math:`r_i` rounded down to the grid (both only relax), let :math:`x_{it}` be i's
exclusive time in interval t, :math:`y_{it}` its credit, :math:`u_{it} \le y_{it}` its earliest
:math:`\beta n_i` of credit and :math:`z_t` the shared time in t. Every schedule gives a point with
:math:`\sum_i x_{it} + z_t \le \Delta_t` (disjoint segments), :math:`y_{it} \le z_t`, :math:`\sum_i
y_{it} \le K z_t`, :math:`x_{it} \le (c_i / \beta) y_{it} + 2 c_i` (the batches of i inside t bring
:math:`\beta` credit each with at most :math:`c_i` exclusive time; at most two straddle t's ends),
:math:`\sum_t x_{it} = w_i`, :math:`\sum_t u_{it} = \beta n_i`, and, since a set of measure p inside
:math:`(-\infty, F_i]` has mean at most :math:`F_i - p/2` and every point of interval t is at least
:math:`\tau_t`: :math:`F_i \ge \sum_t \tau_t x_{it} / w_i + w_i / 2` and :math:`F_i \ge \sum_t
\tau_t (x_{it} + u_{it}) / p_i + p_i / 2` with :math:`p_i = w_i + \beta n_i`, and :math:`F_i \ge
e_i`. So the least :math:`\sum_i F_i` of this linear programme, less :math:`\sum_i r_i`, over N,
bounds the mean latency (TTFT: the first-token work and counts, as above). HiGHS solves it on at
most :data:`LP_CELLS` request-interval cells within the time of :func:`lp_seconds` (:data:`LP_TIME`
seconds without a time limit; ``optsched bound`` and the report's InferMax bounder list it; a solve
and a sweep read only the SRPT bounds, which need no solver); only an optimal solve counts,
lowered by :data:`LP_MARGIN` (relative) for the solver's tolerances. A request that
progresses alone pays a whole overhead per item of work, and requests that progress together
interleave their work: the programme prices that trade-off, which SRPT does not.

All are proven under the profile's linear twin, hence under the profile (F0); a caller may also
evaluate them under another cost at or below the profile (InferMax's linear form).
"""

from __future__ import annotations

import heapq
import math
from functools import partial

import numpy as np

from .bounds import (
    critical_path_times,
    generic_bounds,
    instance_bounds,
    prefill_alone_times,
    request_work,
)
from .budget import NO_LIMIT, SlowestRun, TimeBudget
from .costmodel import Coefficients
from .fluid_bounds import FLUID_TIME, fluid_latency
from .fluid_work import WORK_TIME, fluid_work
from .instance import Instance
from .lprows import LpRows
from .pair_bounds import pair_bounds
from .pair_wait_lp import LP_TIME as PAIR_LP_TIME
from .pair_wait_lp import pair_wait_lp
from .phase_bounds import ttft_plus_rest
from .phase_latency import PHASE_TIME, phase_latency
from .result import Bound, objective_named
from .ttft_bounds import flush_bound, flush_mean_bound, flush_overhead

__all__ = [
    "LP_STRETCH",
    "SHARE_WEIGHTS",
    "busy_time_lp",
    "default_bounds",
    "load_bounds",
    "lp_bounds",
    "lp_seconds",
    "mix_shares",
    "most_items",
    "prompt_attention_extra",
    "proven_bounds",
    "share_terms",
    "share_work",
    "srpt_completions",
    "srpt_mean_bound",
]

#: The overhead-share weights (lambda_count, lambda_tokens, lambda_memory) tried; each gives a valid bound.
SHARE_WEIGHTS = (
    (1.0, 0.0, 0.0),
    (0.0, 1.0, 0.0),
    (0.0, 0.0, 1.0),
    (0.5, 0.5, 0.0),
    (0.5, 0.0, 0.5),
    (0.0, 0.5, 0.5),
    (1 / 3, 1 / 3, 1 / 3),
)

#: Relative safety margin taken off every value (floating-point sums).
SAFETY = 1e-12


def most_items(instance: Instance) -> int:
    """K of the module docstring: the most items one batch can hold, min(N, R_max, C, M)."""
    lim = instance.limits
    caps = [len(instance.requests), lim.token_budget]
    caps += [c for c in (lim.max_running, lim.kv_capacity) if c is not None]
    return max(1, min(caps))


def share_terms(instance: Instance, first_tokens: bool = False, items_cap: int | None = None) -> np.ndarray:
    """The columns of p_i (module docstring) that the weight vectors mix, one row per request:
    least item work (the prompt's least attention included), then the overhead's count, token and
    memory shares at weight 1 (items over K, tokens over C, KV slots over M; 0 without a KV limit),
    the last three times beta.

    ``first_tokens``: only the work up to each request's first token. ``items_cap``: K (default
    :func:`most_items`; a test plants a smaller, invalid one).
    """
    lim = instance.limits
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.float64)
    O = np.ones_like(I) if first_tokens else np.array([r.output_tokens for r in instance.requests], dtype=np.float64)
    K = most_items(instance) if items_cap is None else items_cap
    n_items = np.ceil(I / lim.prefill_budget) + O - 1.0
    tokens = I + O - 1.0
    slots = O * I + O * (O - 1.0) / 2.0
    memory = slots / lim.kv_capacity if lim.kv_capacity is not None else np.zeros_like(I)
    work = request_work(instance, first_tokens=first_tokens) + prompt_attention_extra(instance, I)
    beta = instance.cost_model.least_overhead()
    return np.column_stack([work, beta * n_items / K, beta * tokens / lim.token_budget, beta * memory])


def mix_shares(terms: np.ndarray, weights: tuple[float, float, float], has_memory: bool) -> np.ndarray:
    """p_i for one weight vector from :func:`share_terms`' columns."""
    if weights[2] and not has_memory:
        raise ValueError("a memory share needs a KV capacity")
    return terms[:, 0] + terms[:, 1:] @ np.asarray(weights, dtype=np.float64)


def share_work(
    instance: Instance, weights: tuple[float, float, float], first_tokens: bool = False, items_cap: int | None = None
) -> np.ndarray:
    """p_i of the module docstring for one weight vector: least item work plus overhead shares
    (arguments as :func:`share_terms`)."""
    terms = share_terms(instance, first_tokens, items_cap)
    return mix_shares(terms, weights, instance.limits.kv_capacity is not None)


def prompt_attention_extra(instance: Instance, prompts: np.ndarray) -> np.ndarray:
    """Least attention terms of prefilling each prompt of ``prompts`` tokens from an empty KV, in any
    chunks of at most P tokens, beyond the ``L * pq * I`` of :func:`optsched.bounds.request_work`
    (module docstring): ``L * (px/2 I^2 + (pq - px/2) S - pq I)`` with S the least (pq >= px/2) or
    the largest (pq < px/2) sum of squared chunk sizes, I or min(I, P) I; never negative."""
    coef = Coefficients.of(instance.cost_model.linear_twin())
    L, pq, px = coef.layers, coef.prefill_per_token_sq, coef.prefill_per_ctx
    I = np.asarray(prompts, dtype=np.float64)
    squares = I if pq >= px / 2 else np.minimum(I, instance.limits.prefill_budget) * I
    return np.maximum(L * (px / 2 * I * I + (pq - px / 2) * squares - pq * I), 0.0)


def srpt_completions(release: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Completion times, ascending, of preemptive SRPT on one unit-speed machine (jobs released at
    ``release`` needing ``work``): the least k-th completion of any preemptive schedule, every k."""
    order = np.argsort(release, kind="stable")
    rel, rem = release[order].tolist(), work[order].tolist()
    n, t, nxt = len(rel), 0.0, 0
    heap: list[tuple[float, int]] = []
    out: list[float] = []
    while len(out) < n:
        if not heap:
            t = max(t, rel[nxt])
        while nxt < n and rel[nxt] <= t:
            heapq.heappush(heap, (rem[nxt], nxt))
            nxt += 1
        left, j = heapq.heappop(heap)
        next_release = rel[nxt] if nxt < n else math.inf
        if t + left <= next_release:
            t += left
            out.append(t)
        else:
            heapq.heappush(heap, (left - (next_release - t), j))
            t = next_release
    return np.array(out, dtype=np.float64)


def srpt_mean_bound(release: np.ndarray, work: np.ndarray, alone: np.ndarray) -> float:
    """(1/N) (sum_k max(S_(k), e_(k)) - sum_i r_i) with S the SRPT completions of (release, work) and
    e = release + alone (module docstring), less the safety margin."""
    s = srpt_completions(release, work)
    e = np.sort(release + alone)
    total = math.fsum(np.maximum(s, e)) - math.fsum(release)
    scale = math.fsum(np.abs(e)) + math.fsum(np.abs(release))
    return max(0.0, (total - SAFETY * scale) / len(release))


#: Relative margin taken off the busy-time LP's optimum (HiGHS' feasibility and optimality tolerances).
LP_MARGIN = 1e-6

#: Most request-interval cells of the busy-time LP; the grid has at most this many cells / N points.
LP_CELLS = 6_000

#: Fewest and most grid points of the busy-time LP.
LP_GRID = (8, 60)

#: Time limit (seconds) of the busy-time LP's solve; a solve stopped by it gives no bound.
LP_TIME = 5.0


def busy_time_lp(
    release: np.ndarray,
    work: np.ndarray,
    shared: np.ndarray,
    biggest: np.ndarray,
    earliest: np.ndarray,
    K: int,
    beta: float,
    seconds: float = LP_TIME,
) -> float | None:
    """The busy-time LP of the module docstring: the least sum of F_i, less the sum of releases,
    over N, less :data:`LP_MARGIN`; None when the grid would be too coarse (fewer than
    ``LP_GRID[0]`` points within :data:`LP_CELLS`) or HiGHS does not solve it to optimality.

    ``work``: w_i, ``shared``: beta n_i, ``biggest``: c_i (the most exclusive time of i in one
    batch), ``earliest``: e_i (a proven least F_i), ``beta``: the least overhead of a batch,
    ``seconds``: HiGHS' time limit.
    """
    import highspy

    N = len(release)
    G = min(LP_GRID[1], LP_CELLS // max(N, 1))
    if G < LP_GRID[0] or beta <= 0.0:
        return None
    horizon = float(release.max() + work.sum() + shared.max())
    tau = np.linspace(0.0, horizon, G + 1)  # intervals [tau_t, tau_t+1), t < G, and the last [tau_G, inf)
    first = np.searchsorted(tau, release, side="right") - 1  # each release rounded down to the grid
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(seconds))
    inf = highspy.kHighsInf
    # columns: z_t (t < G), then per request its x_it, y_it and u_it (t = first_i .. G), then F_i
    n_cells = G + 1 - first
    x0 = G + np.concatenate([[0], np.cumsum(3 * n_cells)[:-1]]).astype(np.int64)
    f0 = G + int(3 * n_cells.sum())
    h.addVars(f0 + N, np.zeros(f0 + N), np.full(f0 + N, inf))
    fcols = np.arange(f0, f0 + N, dtype=np.int32)
    h.changeColsBounds(N, fcols, earliest, np.full(N, inf))
    h.changeColsCost(N, fcols, np.ones(N))
    rows = LpRows()
    by_interval: list[tuple[list[int], list[int]]] = [([], []) for _ in range(G)]
    for i in range(N):
        ts = np.arange(first[i], G + 1)
        xs = x0[i] + np.arange(len(ts))
        ys, us = xs + len(ts), xs + 2 * len(ts)
        ones = np.ones(len(ts))
        rows.row(work[i], work[i], xs, ones)  # sum_t x_it = w_i
        rows.row(shared[i], shared[i], us, ones)  # sum_t u_it = beta n_i (the earliest credit)
        if work[i] > 0:  # F_i >= sum_t tau_t x_it / w_i + w_i / 2
            rows.row(-inf, -work[i] / 2, np.append(xs, f0 + i), np.append(tau[ts] / work[i], -1.0))
        both = work[i] + shared[i]
        if both > 0:  # the same for the disjoint union of i's exclusive time and earliest credit
            cols = np.concatenate([xs, us, [f0 + i]])
            rows.row(-inf, -both / 2, cols, np.concatenate([tau[ts] / both, tau[ts] / both, [-1.0]]))
        for k, t in enumerate(ts.tolist()):
            rows.row(-inf, 0.0, np.array([us[k], ys[k]]), np.array([1.0, -1.0]))  # u_it <= y_it
            if t < G:
                by_interval[t][0].append(int(xs[k]))
                by_interval[t][1].append(int(ys[k]))
                rows.row(-inf, 0.0, np.array([ys[k], t]), np.array([1.0, -1.0]))  # y_it <= z_t
                coupling = np.array([1.0, -biggest[i] / beta])  # x_it <= (c_i / beta) y_it + 2 c_i
                rows.row(-inf, 2.0 * biggest[i], np.array([xs[k], ys[k]]), coupling)
    delta = np.diff(tau)
    for t, (xs_t, ys_t) in enumerate(by_interval):
        rows.row(-inf, float(delta[t]), np.array([*xs_t, t]), np.ones(len(xs_t) + 1))  # x's + z_t <= Delta_t
        rows.row(-inf, 0.0, np.array([*ys_t, t]), np.append(np.ones(len(ys_t)), -float(K)))  # <= K members
    rows.pass_to(h)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    total = h.getInfo().objective_function_value
    total -= LP_MARGIN * abs(total)
    return max(0.0, (total - math.fsum(release)) / N)


def _best_over_weights(
    instance: Instance, terms: np.ndarray, alone: np.ndarray, budget: TimeBudget
) -> tuple[float, tuple[float, ...]]:
    """(the largest SRPT bound, its weights) over :data:`SHARE_WEIGHTS`, in their order while ``budget``
    holds one more run (the first always runs; each is a bound); ``terms``: :func:`share_terms`."""
    release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    has_memory = instance.limits.kv_capacity is not None
    found: list[tuple[float, tuple[float, ...]]] = []
    slowest = SlowestRun()
    for w in (w for w in SHARE_WEIGHTS if has_memory or not w[2]):
        if found and not slowest.fits(budget):
            break
        with slowest.timing():
            found.append((srpt_mean_bound(release, mix_shares(terms, w, has_memory), alone), w))
    return max(found, key=lambda f: f[0])


def load_bounds(
    instance: Instance, objective: str, ttft: list[Bound] | None = None, budget: TimeBudget = NO_LIMIT
) -> list[Bound]:
    """The load-aware bounds of ``objective`` (module docstring): ``srpt-work`` and ``ttft-plus-rest``
    (:mod:`optsched.phase_bounds`, on the best TTFT bound here) for ``latency``,
    ``srpt-prefill`` and ``srpt-prefill-flush`` (:mod:`optsched.ttft_bounds`) for ``ttft`` (seconds, mean
    over requests), and the pairwise-interference bound of :mod:`optsched.pair_bounds`; none for other objectives.
    These need no solver; :func:`lp_bounds` gives those that solve a linear programme. ``ttft``: the
    bounds of ``load_bounds(instance, "ttft")`` where the caller has them (``ttft-plus-rest`` reads them;
    computed here otherwise). Within ``budget``: the first SRPT bound always, every other only while
    the time lasts (a bound left out for the time is not listed)."""
    name = objective_named(objective).name
    if name not in ("latency", "ttft") or not instance.requests:
        return []
    K = most_items(instance)
    terms = share_terms(instance, first_tokens=name == "ttft")
    if name == "latency":
        alone = critical_path_times(instance)
        value, w = _best_over_weights(instance, terms, alone, budget)
        what = "each request's work + overhead shares"
        bound = "srpt-work"
    else:
        alone = prefill_alone_times(instance, [r.prompt_tokens for r in instance.requests])
        value, w = _best_over_weights(instance, terms, alone, budget)
        what = "each request's prefill work + overhead shares"
        bound = "srpt-prefill"
    note = (
        f"one machine, SRPT over {what} (K = {K} items a batch, share weights count/tokens/memory "
        f"{w[0]:.2g}/{w[1]:.2g}/{w[2]:.2g}), sorted against arrival + least time alone (optsched/load_bounds.py)"
    )
    out = [Bound(bound, value, True, note)]
    if budget.expired():
        return out
    out += pair_bounds(instance, name)
    if name == "latency" and not budget.expired():  # the first-token queue plus the rest alone (phase_bounds.py)
        firsts = load_bounds(instance, "ttft", budget=budget) if ttft is None else ttft
        out.append(ttft_plus_rest(instance, max(firsts, key=lambda b: b.value)))
    if name == "ttft" and not budget.expired():  # the batch overhead at each first token's end (ttft_bounds.py)
        release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
        done = srpt_completions(release, terms[:, 0])
        out.append(flush_bound(instance, flush_mean_bound(done, release, alone, flush_overhead(instance))))
    if K == 1 and len(alone) > 1:  # one item a batch: every batch is a lone batch
        release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
        lone = (
            "one item a batch (K = 1): one machine, SRPT over each request's least time alone (optsched/load_bounds.py)"
        )
        out.append(Bound(f"{bound}-alone", srpt_mean_bound(release, alone, alone), True, lone))
    return out


def lp_bounds(instance: Instance, objective: str, budget: TimeBudget = NO_LIMIT) -> list[Bound]:
    """The load-aware bounds of ``objective`` that solve a linear programme, each where HiGHS solves it
    to optimality within its time (seconds, mean over requests): the busy-time LP's (module
    docstring) for ``latency`` and ``ttft``, then for ``latency`` ``pair-wait-lp`` of
    :mod:`optsched.pair_wait_lp`, ``finish-index`` of :mod:`optsched.finish_index` (a convex
    programme, not an LP; it leads where requests are released together and is skipped at once
    where it cannot), ``fluid-latency`` of :mod:`optsched.fluid_bounds`, ``phase-latency`` of
    :mod:`optsched.phase_latency` and ``fluid-work`` of :mod:`optsched.fluid_work`; none for other
    objectives. Each runs within :func:`lp_seconds` of ``budget`` (its own limit, :data:`LP_TIME`,
    :data:`~optsched.pair_wait_lp.LP_TIME`, :data:`~optsched.finish_index.FINISH_INDEX_TIME`,
    :data:`~optsched.fluid_bounds.FLUID_TIME`, :data:`~optsched.phase_latency.PHASE_TIME` or
    :data:`~optsched.fluid_work.WORK_TIME`, up to
    :data:`LP_STRETCH` times over), none once
    ``budget`` has expired."""
    name = objective_named(objective).name
    if name not in ("latency", "ttft") or not instance.requests:
        return []
    K = most_items(instance)
    lps = [(partial(_busy_time, instance, name == "ttft", K), LP_TIME)]
    if name == "latency":
        from .finish_index import FINISH_INDEX_TIME, finish_index_bound  # numba's import: not at the program's start

        attention = prompt_attention_extra(instance, instance.columns[1])  # (optsched/phase_latency.py)
        lps.append((partial(pair_wait_lp, instance), PAIR_LP_TIME))
        lps.append((partial(finish_index_bound, instance, attention), FINISH_INDEX_TIME))  # (optsched/finish_index.py)
        lps.append((partial(fluid_latency, instance, K), FLUID_TIME))
        lps.append((partial(phase_latency, instance, attention), PHASE_TIME))
        lps.append((partial(fluid_work, instance, K, attention), WORK_TIME))  # (optsched/fluid_work.py)
    out = []
    for k, (lp, own) in enumerate(lps):
        seconds = lp_seconds(budget, own, sum(most for _, most in lps[k:]))
        found = lp(seconds=seconds) if seconds is not None else None
        out += [found] if found is not None else []
    return out


#: Most multiple of its own limit that an LP of :func:`lp_bounds` gets (from a long budget, or without one).
LP_STRETCH = 4.0


def lp_seconds(budget: TimeBudget, own: float, rest: float) -> float | None:
    """HiGHS' time limit (seconds) for one LP of :func:`lp_bounds` whose own limit is ``own``, the own
    limits of it and the LPs after it adding up to ``rest``: :data:`LP_STRETCH` times ``own`` without
    a limit (what a long budget gives it); else its part ``own / rest`` of the time left, at least
    ``own``, at most :data:`LP_STRETCH` times ``own`` and at most the time left (a loaded machine
    solves an LP in a few times its wall time alone;
    time one LP leaves passes to the next, and an LP that is not solved leaves the rest of the budget
    to the bounds after it); None once ``budget`` has expired."""
    left = budget.left()
    if left is None:
        return LP_STRETCH * own
    if left <= 0.0:
        return None
    return min(left, LP_STRETCH * own, max(own, left * own / rest))


def _biggest_item(instance: Instance, I: np.ndarray, O: np.ndarray) -> np.ndarray:
    """c_i: the most exclusive time request i gets in one batch in the busy-time LP's construction:
    a prefill chunk's linear term L(a+pa+pq) c with c <= min(I_i + O_i - 1, P) (a re-prefill's exclusive
    time is spread over its chunks in proportion to these terms), or the least term of the token
    the batch generates, at most the decode term L(a+da+dk(I_i+O_i-2)) of its last token."""
    coef = Coefficients.of(instance.cost_model.linear_twin())
    L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
    da, dk = coef.decode_per_token, coef.decode_per_kv
    chunk = np.minimum(I + O - 1.0, instance.limits.prefill_budget)
    return L * np.maximum((a + pa + pq) * chunk, a + da + dk * np.maximum(I + O - 2.0, 0.0))


def _busy_time(instance: Instance, first_tokens: bool, K: int, seconds: float) -> Bound | None:
    """The busy-time LP bound of the module docstring, or None (too many requests, not solved)."""
    lim = instance.limits
    release = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    I = np.array([r.prompt_tokens for r in instance.requests], dtype=np.float64)
    O = np.ones_like(I) if first_tokens else np.array([r.output_tokens for r in instance.requests], dtype=np.float64)
    if first_tokens:
        earliest = release + prefill_alone_times(instance, I)
    else:
        earliest = release + critical_path_times(instance)
    work = request_work(instance, first_tokens=first_tokens)
    beta = instance.cost_model.least_overhead()
    shared = beta * (np.ceil(I / lim.prefill_budget) + O - 1.0)
    value = busy_time_lp(release, work, shared, _biggest_item(instance, I, O), earliest, K, beta, seconds)
    if value is None:
        return None
    note = (
        "LP over a time grid: each request's exclusive item work and its share of the batch overheads, "
        f"mean-busy-time completions, K = {K} members a batch (optsched/load_bounds.py)"
    )
    return Bound("busy-time-prefill" if first_tokens else "busy-time-work", value, True, note)


def proven_bounds(instance: Instance, objective: str, budget: TimeBudget = NO_LIMIT) -> list[Bound]:
    """Every generic proven bound on ``objective`` that takes no solver: those of
    :func:`optsched.bounds.generic_bounds` and the SRPT bounds of :func:`load_bounds`, each in the
    objective's unit (a solve, a report and a sweep cell read these at every size; the busy-time LP
    is listed by ``optsched bound``); within ``budget`` as :func:`load_bounds` says."""
    return generic_bounds(instance, objective) + load_bounds(instance, objective, budget=budget)


def default_bounds(instance: Instance) -> list[Bound]:
    """The bounds of an instance without a formulation (``optsched bound`` without ``--problem``):
    :func:`optsched.bounds.instance_bounds` and the load-aware bounds of both mean latency and mean
    TTFT, each LP within its own limit (the TTFT bounds computed once: ``ttft-plus-rest`` reads them)."""
    ttft = load_bounds(instance, "ttft")
    latency = load_bounds(instance, "latency", ttft=ttft) + lp_bounds(instance, "latency")
    return instance_bounds(instance) + latency + ttft + lp_bounds(instance, "ttft")

r"""Mean latency with co-running requests coupled: ``phase-latency``.

The per-request and pairwise bounds (:mod:`optsched.load_bounds`, :mod:`optsched.pair_bounds`,
:mod:`optsched.pair_wait_lp`) bound each completion on its own: the k-th completion is priced as if
its request shared every batch with the k - 1 before it, the first as if it ran alone. Requests that
run side by side and finish together pay each other's item terms in every batch, and requests that
finish one after another wait through each other's batch overheads; the bound here prices that
trade-off exactly on a relaxed instance. It holds for every schedule that replays cleanly under the
contract (any policy, evictions or not) and uses only the facts (F0)-(F4) of :mod:`optsched.bounds`.

**Items and their terms** (as in :mod:`optsched.load_bounds`). Under the profile's linear twin (F0)
a batch B costs at least :math:`\beta + \sum_{x \in B} t_x`, with :math:`\beta` the least overhead
of a non-empty batch and :math:`t_x` the item term of item x (a prefill chunk of c tokens at least
:math:`L(a + p_a + p_q) c`, a decode item reading m slots :math:`L(a + d_a + d_k m)`). Request j has
at least :math:`n_j = \lceil I_j / P \rceil + O_j - 1` items, at most one in a batch (F3), and its
item terms add up to at least :math:`w_j` (its least item work, prompt attention included:
:func:`optsched.load_bounds.share_terms`, column 0). In a set G of requests every item term is at
least :math:`c = \min(L(a + p_a + p_q), L(a + d_a + d_k \min_{j \in G} I_j))` (a decode item of j
reads at least :math:`I_j` slots).

**One group released together.** Take G with :math:`s = \min_{j \in G} r_j` and any schedule; every
batch holding an item of G starts at or after s (F1). Order G by finish time, :math:`F_{(1)} \le
\dots \le F_{(g)}`, and call phase k the time :math:`(F_{(k-1)}, F_{(k)}]` (:math:`F_{(0)} = s`), in
which :math:`g - k + 1` requests of G are unfinished. Choose for each j any :math:`n_j` of its items
(*counted*); give each counted item the term c and its *extra* :math:`t_x - c \ge 0`, each other item
of j its whole term as extra. A batch ending in phase k starts after :math:`F_{(k-1)}` (batches are
sequential and the one ending at :math:`F_{(k-1)}` precedes it), so phase k lasts at least
:math:`\beta b_k + c\,q_k + e_k` with :math:`b_k` its batches holding a counted item of G,
:math:`q_k` their counted items and :math:`e_k` their extras, and

.. math:: \sum_{j \in G} (F_j - s) = \sum_k (g - k + 1)(F_{(k)} - F_{(k-1)})
          \ge \sum_k (g - k + 1)(\beta b_k + c\,q_k) + \sum_k (g - k + 1) e_k .

*The extras.* Request j's extras lie in phases up to its own position :math:`\pi_j` and add up to at
least :math:`E_j = (w_j - c\,n_j)^+`; so the second sum is at least :math:`\sum_j (g - \pi_j + 1) E_j`,
and at least its least value over all orders: the largest :math:`E_j` times 1, the next times 2, and
so on (rearrangement).

*The coupled part.* The first sum is the sum of completion times (less gs) of the batches holding
counted items, each run in time :math:`\beta + c\,|B|` with no gap: a schedule of the *relaxed
instance* in which request j needs :math:`n_j` unit items in distinct batches and a batch of n items
takes :math:`\beta + c\,n` (a request's completion there is at most the end of its phase). Some
optimal schedule of the relaxed instance completes its requests in order of :math:`n_j`, shortest
first: if j finishes before i with :math:`n_i < n_j`, let i take a set X of :math:`n_i` of j's batches
containing j's last batch and every batch holding both, and j the rest of its own and all of i's
(disjoint, :math:`n_j` of them); every batch keeps its item count, so its time, i now finishes at
j's old time and j at i's. In such a schedule, with requests indexed by :math:`n_1 \le \dots \le
n_g` and :math:`B_j` the index of j's last batch (:math:`B_1 \le \dots \le B_g`, :math:`B_j \ge
n_j`), the sum of completions is :math:`\beta \sum_j B_j + c \sum_t n(t) M(t)` with :math:`M(t)` the
requests unfinished at batch t; M does not increase, so j's items, in :math:`n_j` distinct batches up
to :math:`B_j`, meet the least M in its last :math:`n_j` batches, and summing
:math:`\sum_{t = B_j - n_j + 1}^{B_j} M(t) = \sum_k \min(n_j, (B_k - B_j + n_j)^+)`:

.. math:: \sum_j C_j \ge \Phi(B) = \beta \sum_j B_j + c \sum_j (g - j + 1)\, n_j
          + c \sum_{k < j} (n_j - B_j + B_k)^+ .

:math:`\Phi` is convex and piecewise linear; its least value over real :math:`B` with
:math:`B_j \ge n_j` and :math:`B_{j-1} \le B_j` is a linear programme (one slack per pair) that
HiGHS solves (only an optimal solve counts, lowered by :data:`LP_MARGIN`). On two equal requests it
is :math:`\min(2\beta n + 4cn, 3\beta n + 3cn)`: lockstep or one after the other, exactly.

Hence :math:`\sum_{j \in G} (F_j - r_j) \ge V_G = \Phi^* + \sum_k k E_{[k]} - \sum_{j \in G} (r_j - s)`,
and also :math:`\ge \sum_{j \in G} A_j` (each request alone, ``critical-path``).

**Groups.** For any partition of the requests into groups, the mean latency is at least
:math:`\frac1N \sum_G \max(V_G, \sum_{j \in G} A_j)`. The groups are runs of consecutive arrivals of
:data:`GROUP_SIZES` requests, chosen by dynamic programming over the arrival order for the largest
sum; a run whose :math:`V_G` cannot exceed its requests alone even at a feasible point of the
programme (all in lockstep, or one after another) is not solved. The coupling is within a group;
what a group pays for the requests before it is not counted (the pair bounds price that).
"""

from __future__ import annotations

import math

import numpy as np

from .bounds import critical_path_times
from .budget import TimeBudget
from .costmodel import Coefficients
from .instance import Instance
from .lprows import LpRows
from .result import Bound

__all__ = [
    "GROUP_SIZES",
    "LP_MARGIN",
    "PHASE_TIME",
    "best_partition",
    "coupled_sum",
    "coupled_upper",
    "extras_sum",
    "least_item_term",
    "phase_latency",
]

#: Relative margin taken off each programme's optimum (HiGHS' feasibility and optimality tolerances).
LP_MARGIN = 1e-6

#: Sizes of the groups of consecutive arrivals tried.
GROUP_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)

#: Time (seconds) of all the programmes of one bound without a time limit.
PHASE_TIME = 10.0

#: Relative safety margin taken off the final value (floating-point sums).
SAFETY = 1e-12


def coupled_upper(n: np.ndarray, beta: float, c: float) -> float:
    r""":math:`\Phi` of the module docstring at its better of two feasible points, all in lockstep
    (:math:`B_j = n_j`) and one after another (:math:`B_j = n_1 + \dots + n_j`): at least
    :func:`coupled_sum`. ``n`` ascending."""
    g = len(n)
    fixed = c * float(np.dot(np.arange(g, 0, -1), n))
    lockstep = beta * float(n.sum()) + fixed + c * float(np.dot(np.arange(g - 1, -1, -1), n))
    return min(lockstep, beta * float(np.cumsum(n).sum()) + fixed)


def coupled_sum(n: np.ndarray, beta: float, c: float, seconds: float) -> float | None:
    r"""The least :math:`\Phi(B)` of the module docstring (the least sum of completions of the relaxed
    instance, from a common release at 0), less :data:`LP_MARGIN`; None when HiGHS does not solve the
    programme to optimality within ``seconds``. ``n``: item counts, ascending; ``beta``, ``c``: the
    batch overhead and the common item term (seconds)."""
    import highspy

    g = len(n)
    if g == 1:
        return (beta + c) * float(n[0])
    k, j = np.triu_indices(g, 1)  # the pairs k < j: slack z_kj >= n_j - B_j + B_k
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(seconds))
    inf = highspy.kHighsInf
    cols = g + len(k)
    lower = np.concatenate([n.astype(np.float64), np.zeros(len(k))])
    h.addVars(cols, lower, np.full(cols, inf))
    cost = np.concatenate([np.full(g, beta), np.full(len(k), c)])
    h.changeColsCost(cols, np.arange(cols, dtype=np.int32), cost)
    rows = LpRows()
    order = rows.add(np.zeros(g - 1), np.full(g - 1, inf))  # B_j - B_(j-1) >= 0
    rows.put(order + np.arange(g - 1), np.arange(1, g), 1.0)
    rows.put(order + np.arange(g - 1), np.arange(g - 1), -1.0)
    first = rows.add(n[j].astype(np.float64), np.full(len(k), inf))  # z_kj + B_j - B_k >= n_j
    pair = first + np.arange(len(k))
    rows.put(pair, g + np.arange(len(k)), 1.0)
    rows.put(pair, j, 1.0)
    rows.put(pair, k, -1.0)
    rows.pass_to(h)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    total = h.getInfo().objective_function_value + c * float(np.dot(np.arange(g, 0, -1), n))
    return total - LP_MARGIN * abs(total)


def extras_sum(extras: np.ndarray) -> float:
    """The least of sum_j (g - pi_j + 1) E_j over all orders pi (module docstring): the largest extra
    times 1, the next times 2, and so on."""
    ordered = np.sort(extras)[::-1]
    return float(np.dot(np.arange(1, len(ordered) + 1), ordered))


def least_item_term(instance: Instance, prompts: np.ndarray) -> float:
    """c of the module docstring for requests of prompt lengths ``prompts``: the least term of any of
    their items (a one-token chunk, or a decode item reading the shortest prompt's slots), seconds."""
    coef = Coefficients.of(instance.cost_model.linear_twin())
    L = coef.layers
    chunk = L * (coef.per_token + coef.prefill_per_token + coef.prefill_per_token_sq)
    decode = L * (coef.per_token + coef.decode_per_token + coef.decode_per_kv * float(np.min(prompts)))
    return min(chunk, decode)


def best_partition(values: dict[tuple[int, int], float], alone: np.ndarray) -> float:
    """The largest sum over partitions of 0..N-1 into runs: a run (i, e) (requests i to e - 1) is worth
    ``values[(i, e)]`` where given, else (and at least) the sum of ``alone`` over it."""
    N = len(alone)
    prefix = np.concatenate([[0.0], np.cumsum(alone)])
    best = np.zeros(N + 1)
    for e in range(1, N + 1):
        best[e] = best[e - 1] + alone[e - 1]
        for g in GROUP_SIZES:
            if g <= e and (e - g, e) in values:
                best[e] = max(best[e], best[e - g] + max(values[(e - g, e)], prefix[e] - prefix[e - g]))
    return float(best[N])


def phase_latency(instance: Instance, work: np.ndarray, beta: float, seconds: float = PHASE_TIME) -> Bound | None:
    """The ``phase-latency`` bound of the module docstring (seconds, mean over requests), or None (no
    request). ``work``: w_j, each request's least item work; ``beta``: the least overhead of a batch;
    ``seconds``: the time for all the programmes (runs not solved within it count their requests
    alone)."""
    if not instance.requests:
        return None
    budget = TimeBudget.of(seconds)
    lim = instance.limits
    release, I, O = (np.asarray(col, dtype=np.float64) for col in instance.columns)
    order = np.argsort(release, kind="stable")
    rel, prompts, work_o = release[order], I[order], np.asarray(work, dtype=np.float64)[order]
    items = np.ceil(prompts / lim.prefill_budget) + O[order] - 1.0
    alone = critical_path_times(instance)[order] + rel  # each request's least finish time alone
    values: dict[tuple[int, int], float] = {}
    solved = 0
    for g in GROUP_SIZES:
        for i in range(len(rel) - g + 1):
            if budget.expired():
                break
            found = _group_value(instance, slice(i, i + g), (rel, prompts, work_o, items, alone), beta, budget)
            if found is not None:
                values[(i, i + g)] = found
                solved += 1
    total = best_partition(values, alone)
    value = max(0.0, (total - math.fsum(release)) / len(release) * (1.0 - SAFETY))
    note = (
        f"runs of consecutive arrivals each released at its first, priced on a relaxed instance (batch = "
        f"overhead + common item term x items, sorted by items: LP over last batches; {solved} runs solved), "
        "partition by dynamic programming (optsched/phase_latency.py)"
    )
    return Bound("phase-latency", value, True, note)


def _group_value(
    instance: Instance,
    run: slice,
    cols: tuple[np.ndarray, ...],
    beta: float,
    budget: TimeBudget,
) -> float | None:
    """V_G + the run's releases (a least sum of its finish times), or None where it cannot exceed its
    requests' least finish times alone (``cols``' last; checked at a feasible point first) or is not
    solved."""
    rel, prompts, work, items, alone = (col[run] for col in cols)
    c = least_item_term(instance, prompts)
    start = float(rel.min())
    n = np.sort(items)
    rest = extras_sum(np.maximum(work - c * items, 0.0)) - math.fsum(rel - start) + start * len(rel)
    floor = math.fsum(alone)
    if coupled_upper(n, beta, c) + rest <= floor:
        return None
    coupled = coupled_sum(n, beta, c, max(budget.left(0.0), 0.01))
    return None if coupled is None else coupled + rest

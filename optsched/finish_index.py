r"""Mean-latency lower bound from the batch index of each finish (``finish-index``).

The pair bounds (:mod:`optsched.pair_bounds`, :mod:`optsched.pair_wait_lp`) price each pair of
requests on its own: the batch overheads a request waits through are shared among its partners by
weights that add up to one. When many requests run side by side and finish together, each pays the
work of all the others, and spreading them out costs every later one the overheads of the batches
before it. This bound counts both with one index, the batch at which each request finishes. It
holds for every schedule that replays cleanly and uses only (F1)-(F4) of :mod:`optsched.bounds`.

**Item terms.** For theta in {0, 1}: every non-empty batch B lasts
:math:`T(B) \ge \beta_\theta + \sum_{y \in B} c_\theta(y)` with
:math:`\beta_\theta = L(b + \min(p_b, d_b) + \theta t_c)` and :math:`c_\theta(y)` the item term of
:mod:`optsched.pair_bounds` (a chunk of c tokens at least :math:`L(a + p_a + p_q) c`, a decode item
reading m slots :math:`L(a + d_a + d_k m)`) plus :math:`(1 - \theta) L t_c / t` per token (theta = 1:
one started tile; theta = 0: :math:`\lceil n/t \rceil \ge n/t` tiles spread over the tokens). Token 1
of request l costs at least :math:`\kappa_{l,1} = c_\theta(I_l \text{ tokens})` plus the least
attention of a pass that builds its KV from empty (its prompt, in any chunks;
:func:`optsched.load_bounds.prompt_attention_extra`), token g >= 2 at least :math:`\kappa_{l,g}`,
the cheaper of a decode item reading :math:`I_l + g - 2` slots and a re-prefill of
:math:`I_l + g - 1` tokens (F3); :math:`w_l =
\sum_g \kappa_{l,g}` and :math:`W_l(g) = \sum_{g' \le g} \kappa_{l,g'}` (the least work of
having generated g tokens).

**Finish indices.** Number the batches 1, 2, ... in time order (F1: they do not overlap) and let
:math:`t_l` be the batch at whose end l finishes, :math:`F_l = E_{t_l}`. A request needs
:math:`n_l = \lceil I_l / P \rceil + O_l - 1` batches, so :math:`t_l \ge n_l`; a batch generates at
most one token of l, so by batch t <= t_l request l has generated at least :math:`O_l - (t_l - t)`
tokens and its items in batches 1..t cost at least :math:`P_l(t) = W_l(\max(0, O_l - (t_l - t)))`
(:math:`w_l` once :math:`t \ge t_l`). The batches up to :math:`t_i` all end by :math:`F_i`, so

.. math:: F_i \ge \beta_\theta t_i + w_i + \sum_{l \ne i} P_l(t_i),

and with theta = 1 also :math:`F_i \ge A_i + \sum_{l \ne i} P_l(t_i)` (i's own batches cost at least
:math:`T(\{x_i\})` each plus the others' :math:`c_1`, as in :mod:`optsched.pair_bounds`; A_i its least
time alone). Summing, :math:`\sum_i F_i \ge \sum_i \ell_i(t_i) + \sum_{\{i,l\}} G_{il}` with
:math:`\ell_i(t) = \max(\beta_\theta t + w_i, [\theta = 1] A_i)` and
:math:`G_{il} = P_l(t_i) + P_i(t_l)`.

**A pair.** Let :math:`c_l(s) = P_l(s) - P_l(s - 1)` (the cost of the token l generates at batch s
when it generates its last tokens in its last batches: :math:`\kappa_{l, O_l - (t_l - s)}` for
:math:`t_l - O_l < s \le t_l`, else 0). If :math:`t_i \le t_l`, :math:`G_{il} = w_i + \sum_{s \le t_i}
c_l(s) \ge \min(w_i, w_l) + \sum_s \min(c_i(s), c_l(s))`, since :math:`c_i(s) = 0` after
:math:`t_i`; symmetrically otherwise. For levels :math:`0 < \theta_1 < \dots < \theta_K` with steps
:math:`\delta_k = \theta_k - \theta_{k-1}`, :math:`\min(c, c') \ge \sum_k \delta_k [c \ge \theta_k]
[c' \ge \theta_k]`, so with :math:`n_k(s)` the number of requests whose :math:`c(s) \ge \theta_k`,

.. math:: \sum_i F_i \ge \sum_{\{i,l\}} \min(w_i, w_l) + \sum_i \ell_i(t_i)
          + \sum_s \sum_k \delta_k \binom{n_k(s)}{2}.

Requests that finish together (lockstep) pay each other's whole work; spreading them apart costs
:math:`\beta_\theta` per batch in every :math:`\ell_i`.

**The least of it.** Let :math:`x_{it} \in [0, 1]` with :math:`\sum_t x_{it} = 1` over
:math:`t \ge n_i`, a last index standing for every t >= T (priced at :math:`\ell_i(T)`, no pair
terms: both only lower the value). :math:`n_k(s)` is linear in x and :math:`\binom{n}{2} = (n^2 -
n)/2` convex, so the right-hand side is a convex function f of x that equals it at every integral
x. Frank-Wolfe with exact line search over the product of simplices moves x; at every iterate, with g
the gradient, :math:`f(x) + \sum_i \min_t g_{it} - \langle g, x \rangle \le \min f` (convexity),
so the largest of these over the iterates bounds :math:`\sum_i F_i` whenever the solver stops. The
bound is that, less the arrivals, over N, the better of the two thetas, lowered by
:data:`SAFETY` relative for floating-point sums.

Arrivals enter only as :math:`- \sum_i r_i`: the bound leads where requests arrive together (an
offline batch) and is skipped where its starting point cannot beat the critical path.
``phase-latency`` (:mod:`optsched.phase_latency`) prices runs of requests at one level of item cost
each; here every token keeps its own cost, so requests with cheap and dear tokens are priced apart.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .bounds import critical_path_times
from .budget import NO_LIMIT, TimeBudget
from .instance import Instance
from .pair_bounds import item_coefficients
from .result import Bound

__all__ = [
    "COMPILED_FROM",
    "FINISH_INDEX_TIME",
    "FinishProfile",
    "FinishRelaxation",
    "LEVEL_RATIO",
    "MAX_CELLS",
    "SAFETY",
    "add_level_windows",
    "cost_levels",
    "finish_index_bound",
    "finish_index_sum",
    "frank_wolfe",
]

#: Gradient size (requests x indices x levels) from which the compiled kernel adds the level windows
#: (below it numpy takes at most about 20 ms a step, and small instances do not load numba).
COMPILED_FROM = 2_000_000
#: Own time limit (seconds) of the bound in :func:`optsched.load_bounds.lp_bounds`.
FINISH_INDEX_TIME = 10.0
#: Most request-index cells (requests times finish indices) the bound is computed on (a process that
#: computes it on 4 M cells, 2,000 requests of splitwise_conv released together, peaks at 0.5 GB).
MAX_CELLS = 4_000_000
#: Ratio of consecutive levels theta_k (a pair's smaller token cost is rounded down to a level).
LEVEL_RATIO = 1.1
#: Relative margin taken off the value (floating-point sums).
SAFETY = 1e-9
#: Finish indices up to this multiple of the largest n_i (the last one stands for all beyond).
INDEX_SPAN = 3.0
#: Frank-Wolfe stops once the relaxed value and the certified bound are this close (relative).
TOLERANCE = 1e-3
#: Most Frank-Wolfe steps (a run without a time limit ends there at the latest).
MAX_STEPS = 20_000


class FinishProfile:
    """One theta's terms (module docstring); ``attention``: each prompt's least attention beyond
    ``L pq I`` (:func:`optsched.load_bounds.prompt_attention_extra`), added to token 1, or none.

    Attributes
    ----------
    overhead
        beta_theta (seconds).
    first
        Per request, the least cost of token 1 (its prompt).
    later
        Per request, the least costs of tokens 2..O (non-decreasing).
    batches
        n_i, each request's least number of batches.
    work
        w_i, each request's least work (the sum of its token costs).
    """

    def __init__(self, instance: Instance, theta: float, attention: np.ndarray | None = None) -> None:
        cm = instance.cost_model
        L = cm.layers
        share = (1.0 - theta) * L * cm.per_tile / cm.token_tile if cm.per_tile else 0.0
        prompt, decode, per_kv = item_coefficients(instance)
        prompt += share
        self.overhead = cm.least_overhead() + theta * L * cm.per_tile
        self.first: list[float] = []
        self.later: list[np.ndarray] = []  # tokens 2..O, non-decreasing
        batches = []
        extra = np.zeros(len(instance.requests)) if attention is None else attention
        for r, more in zip(instance.requests, extra):
            g = np.arange(2, r.output_tokens + 1, dtype=np.float64)
            held = r.prompt_tokens + g - 2.0
            self.first.append(prompt * r.prompt_tokens + float(more))
            self.later.append(np.minimum(decode + per_kv * held + share, prompt * (held + 1.0)))
            batches.append(math.ceil(r.prompt_tokens / instance.limits.prefill_budget) + r.output_tokens - 1)
        self.batches = np.array(batches, dtype=np.int64)
        self.work = np.array([f + t.sum() for f, t in zip(self.first, self.later)])


def cost_levels(profile: FinishProfile) -> np.ndarray:
    """theta_1 < ... < theta_K: a geometric grid of ratio LEVEL_RATIO from the least positive token
    cost to the largest."""
    costs = np.concatenate([np.array(profile.first), *profile.later])
    costs = costs[costs > 0]
    if costs.size == 0:
        return np.zeros(0)
    lo, hi = float(costs.min()), float(costs.max())
    count = int(math.floor(math.log(hi / lo) / math.log(LEVEL_RATIO))) + 1 if hi > lo else 1
    return lo * LEVEL_RATIO ** np.arange(count)


class FinishRelaxation:
    """The convex function f of the module docstring on the finish-index distributions x (N x (T+1):
    indices 0..T-1, and T for every index from T on), with ``floors`` (A_i) in ``ell_i`` or none.

    Attributes
    ----------
    delta
        The level steps delta_k.
    count
        c_ik: how many of request i's tokens 2..O cost at least theta_k (its last ones).
    prompt
        Whether request i's token 1 costs at least theta_k.
    linear
        ell_i(t) per request and index.
    allowed
        Where t >= n_i.
    const
        The sum over pairs of min(w_i, w_l).
    """

    def __init__(self, profile: FinishProfile, floors: np.ndarray | None, span: int) -> None:
        self.N = len(profile.batches)
        self.T = span
        levels = cost_levels(profile)
        self.delta = np.diff(np.concatenate([[0.0], levels]))
        # decode tokens with cost >= theta_k come last: the c_ik of them occupy offsets 0..c_ik-1 before t_i
        self.count = np.array([np.searchsorted(-t[::-1], -levels, side="right") for t in profile.later])
        self.count = self.count.reshape(self.N, len(levels)).astype(np.int64)
        self.prompt = np.array(profile.first)[:, None] >= levels[None, :]  # token 1 at offset O_i - 1
        self.outputs = np.array([len(t) + 1 for t in profile.later], dtype=np.int64)
        index = np.arange(span + 1, dtype=np.float64)
        index[span] = span
        line = profile.overhead * index[None, :] + profile.work[:, None]
        self.linear = line if floors is None else np.maximum(line, floors[:, None])
        self.allowed = np.arange(span + 1)[None, :] >= profile.batches[:, None]
        self.const = float(np.sum(np.sort(profile.work) * np.arange(self.N - 1, -1, -1)))
        self.pad = int(self.outputs.max()) + 1

    def counts(self, index: np.ndarray) -> np.ndarray:
        """n_k(s) for s = 0..T-1 (K x T) at the integral point where request i finishes at batch
        ``index[i]`` (index T: beyond the grid, no pair terms). f's pair part is quadratic in n and n is
        linear in x, so Frank-Wolfe moves n along with x (:func:`frank_wolfe`)."""
        T, K = self.T, len(self.delta)
        out = np.zeros((K, T + 1))
        inside = index < T
        rows = np.nonzero(inside)[0]
        t = index[rows]
        c = self.count[rows]  # decode tokens of cost >= theta_k: offsets 0..c-1 before t
        k = np.broadcast_to(np.arange(K), c.shape)
        live = c > 0
        np.add.at(out, (k[live], (t[:, None] - c + 1)[live]), 1.0)
        np.add.at(out, (k[live], np.broadcast_to(t[:, None] + 1, c.shape)[live]), -1.0)
        out = np.cumsum(out, axis=1)[:, :T]
        first = self.prompt[rows]  # token 1 at offset O_i - 1
        np.add.at(out, (k[first], np.broadcast_to((t - self.outputs[rows] + 1)[:, None], c.shape)[first]), 1.0)
        return out

    def value(self, x: np.ndarray, n: np.ndarray) -> float:
        """f(x) given n = counts(x)."""
        pairs = 0.5 * float(np.sum(self.delta[:, None] * (n * n - n)))
        return float(np.sum(self.linear * x)) + self.const + pairs

    def gradient(self, n: np.ndarray) -> np.ndarray:
        """df/dx (N x (T+1)), +inf where t < n_i: the linear part, plus per level k the sum of
        delta_k (n_k(s) - 1/2) over the batches s in t - c_ik + 1 .. t and, where i's prompt reaches
        theta_k, at s = t - O_i + 1. From :data:`COMPILED_FROM` cell-levels (N T K) the windows are
        added by the compiled :func:`add_level_windows`, else by numpy; both add the same terms in the
        same order."""
        run, padded = self.level_terms(n)
        g = self.linear.copy()
        if self.N * self.T * len(self.delta) >= COMPILED_FROM:
            add_level_windows(g, run, padded, self.count, self.prompt, self.outputs, self.pad)
        else:
            self.add_windows(g, run, padded)
        return np.where(self.allowed, g, np.inf)

    def level_terms(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(run, padded) at n: per level k the terms h_k(s) = delta_k (n_k(s) - 1/2) and their running
        sums, both led by :attr:`pad` zeros (``run[k, pad + s + 1]`` = sum over s' <= s,
        ``padded[k, pad + s]`` = h_k(s)), the windows of :meth:`gradient` read from them."""
        h = self.delta[:, None] * (n - 0.5)
        run = np.zeros((len(self.delta), self.pad + self.T + 1))
        run[:, self.pad + 1 :] = np.cumsum(h, axis=1)
        return run, np.pad(h, ((0, 0), (self.pad, 0)))

    def add_windows(self, g: np.ndarray, run: np.ndarray, padded: np.ndarray) -> None:
        """Add the level windows of :meth:`gradient` to ``g`` with numpy (``run``, ``padded``:
        :meth:`level_terms`)."""
        T, pad = self.T, self.pad
        windows = np.lib.stride_tricks.sliding_window_view(run, T, axis=1)  # [k, m, :] = run[k, m : m + T]
        head = windows[:, pad + 1]  # run[k, pad + t + 1]
        first = np.lib.stride_tricks.sliding_window_view(padded, T, axis=1)
        for k in range(len(self.delta)):
            c = self.count[:, k]
            live = c > 0
            if live.any():
                g[live, :T] += head[k] - windows[k, pad + 1 - c[live]]
            reach = self.prompt[:, k]
            if reach.any():
                g[reach, :T] += first[k, pad + 1 - self.outputs[reach]]


@njit(cache=True)
def add_level_windows(g, run, padded, count, prompt, outputs, pad):  # noqa: ANN001, ANN201 - numba kernel
    """:meth:`FinishRelaxation.add_windows`, compiled: per request and level, in its order."""
    n, levels = count.shape
    T = run.shape[1] - pad - 1
    for i in range(n):
        for k in range(levels):
            c = count[i, k]
            if c > 0:
                low = pad + 1 - c
                for t in range(T):
                    g[i, t] += run[k, pad + 1 + t] - run[k, low + t]
            if prompt[i, k]:
                low = pad + 1 - outputs[i]
                for t in range(T):
                    g[i, t] += padded[k, low + t]


def frank_wolfe(relax: FinishRelaxation, budget: TimeBudget) -> float:
    """A certified lower bound on the least of f: the best Frank-Wolfe certificate over the iterates
    until they meet the relaxed value (within :data:`TOLERANCE`), the step vanishes, ``budget``
    expires or :data:`MAX_STEPS` steps are taken. Each iterate moves x and n = counts(x) towards a
    vertex (every request at one index)."""
    N, T = relax.N, relax.T
    at = np.argmax(relax.allowed, axis=1)
    x = np.zeros((N, T + 1))
    x[np.arange(N), at] = 1.0
    n = relax.counts(at)
    best = -math.inf
    for _ in range(MAX_STEPS):
        value = relax.value(x, n)
        g = relax.gradient(n)
        target = np.argmin(g, axis=1)
        finite = np.where(relax.allowed, g, 0.0)
        best = max(best, value + float(g[np.arange(N), target].sum()) - float(np.sum(finite * x)))
        if value - best <= TOLERANCE * abs(value) or budget.expired():
            return best
        step = -x
        step[np.arange(N), target] += 1.0
        dn = relax.counts(target) - n
        curvature = float(np.sum(relax.delta[:, None] * dn * dn))
        slope = float(np.sum(finite * step))
        gamma = 1.0 if curvature <= 0.0 else min(1.0, max(0.0, -slope / curvature))
        if gamma <= 0.0:
            return best
        x += gamma * step
        n += gamma * dn
    return best


def finish_index_sum(
    instance: Instance,
    theta: float,
    floors: np.ndarray | None,
    above: float,
    budget: TimeBudget = NO_LIMIT,
    attention: np.ndarray | None = None,
) -> float | None:
    """A certified lower bound on the sum of finish times under one theta (module docstring), with
    ``floors`` (A_i) in ``ell_i`` or none; None where the cells are too many or the relaxed value at
    the start (every request at its least index, at least the least of f) is not above ``above``;
    ``attention`` as for :class:`FinishProfile`."""
    profile = FinishProfile(instance, theta, attention)
    span = min(int(INDEX_SPAN * profile.batches.max()) + 1, MAX_CELLS // len(profile.batches))
    if span <= profile.batches.max():
        return None
    relax = FinishRelaxation(profile, floors, span)
    start = np.zeros((relax.N, span + 1))
    start[np.arange(relax.N), profile.batches] = 1.0
    if relax.value(start, relax.counts(profile.batches)) <= above:
        return None
    return frank_wolfe(relax, budget)


def finish_index_bound(
    instance: Instance, attention: np.ndarray | None = None, seconds: float | None = FINISH_INDEX_TIME
) -> Bound | None:
    """The ``finish-index`` bound (seconds, mean latency; module docstring), or None: no requests,
    too many cells, a relaxation that cannot beat the critical path (its value at the start, less
    the arrivals, at most the sum of the least times alone) or a certificate not above the
    arrivals. ``attention``: each prompt's least attention beyond ``L pq I``
    (:func:`optsched.load_bounds.prompt_attention_extra`), or none."""
    if not instance.requests:
        return None
    N, P = len(instance.requests), instance.limits.prefill_budget
    if N * max(math.ceil(r.prompt_tokens / P) + r.output_tokens for r in instance.requests) > MAX_CELLS:
        return None  # no index beyond the largest n_i fits in the cells (finish_index_sum)
    budget = TimeBudget.of(seconds)
    arrivals = float(sum(r.arrival for r in instance.requests))
    alone = critical_path_times(instance)
    above = arrivals + float(alone.sum())
    found = [finish_index_sum(instance, 1.0, alone, above, budget.share(0.5), attention)]
    found.append(finish_index_sum(instance, 0.0, None, above, budget, attention))
    sums = [f for f in found if f is not None]
    value = (max(sums) - arrivals) / N if sums else 0.0
    if value <= 0.0:
        return None
    value *= 1.0 - SAFETY
    note = (
        "batch index of each finish: requests that finish together pay each other's work, spreading them "
        "costs each the batches before it; convex relaxation certified by Frank-Wolfe (optsched/finish_index.py)"
    )
    return Bound("finish-index", value, True, note)

r"""A fluid lower bound on mean latency: every running request waits through every iteration.

The one-machine bounds of :mod:`optsched.load_bounds` let a request finish as soon as its own work
and a small share of the overheads are done; the pair bounds of :mod:`optsched.pair_bounds` price
what each pair of overlapping requests pays for each other. Neither prices the trade-off of an
engine under load: running many requests together makes every iteration longer, and each running
request waits through the whole iteration; running few makes the iterations cheap per batch but
leaves the overhead of a batch to few items, so the engine falls behind and requests queue. The
bound here is a linear programme over a time grid that prices both, proven for every schedule that
replays cleanly (any policy, evictions or not, every limit), using only the facts (F1)-(F4) of
:mod:`optsched.bounds`, under the profile itself.

**Item terms.** As in :mod:`optsched.pair_bounds`, with a the profile's own ``per_token``: a prefill
chunk of c tokens has item term at least :math:`\kappa c`, :math:`\kappa = L(a + p_a + p_q)`, a
decode item reading m slots :math:`L(a + d_a + d_k m)`, and every batch B satisfies
:math:`T(B) \ge \beta' + \sum_{y \in B} \hat c_y` with :math:`\beta' = L(b + \min(p_b, d_b) + t_c)`
(base, a phase bias and one started tile; the tiles, ``per_ctx``, :math:`p_q c^2 - p_q c` and
:math:`d_x KV_{max}` are non-negative). By (F3) request i's items hold its prompt's chunks (item
terms adding up to at least :math:`\kappa I_i`) and, for each later token g + 1 (g = 1 .. O_i - 1),
a decode item of term :math:`d_{ig} = L(a + d_a + d_k (I_i + g - 1))` or a re-prefill's chunks with
terms adding up to at least :math:`r_{ig} = \kappa (I_i + g)`; these item sets are disjoint.

**Progress weights.** Fix per request a cap :math:`\bar s_i > 0` and a rate :math:`\omega_i > 0`
and weigh an item y of i with term :math:`\hat c_y` by :math:`\pi_y = f_i(\hat c_y)`,
:math:`f_i(x) = \min(\sqrt{x}, \bar s_i, x / \omega_i)`. Then (i) :math:`\pi_y \le \sqrt{\hat c_y}`,
(ii) :math:`\pi_y \le \bar s_i`, (iii) :math:`\hat c_y \ge \omega_i \pi_y`, and (iv) :math:`f_i` is
concave with :math:`f_i(0) = 0`, hence subadditive, so the weights of a set of items whose terms
add up to at least X add up to at least :math:`f_i(X)` (:math:`f_i` is non-decreasing). So the
weights of i's items add up to at least

.. math:: \sigma_i = f_i(\kappa I_i) + \sum_{g=1}^{O_i - 1} \min\big(f_i(d_{ig}), f_i(r_{ig})\big).

Here :math:`\bar s_i = \sqrt{d_{i,O_i-1}}` and :math:`\omega_i = \sqrt{d_{i1}}` (a decode item's
weight is then its :math:`\sqrt{\hat c}`), or both :math:`\sqrt{\kappa I_i}` when :math:`O_i = 1`.

**One batch.** A batch B of :math:`n_B` items lasts :math:`T_B`; its :math:`n_B` members are in
the system (arrived, not finished) throughout it. By Cauchy-Schwarz and (i),
:math:`n_B \sum_{y} \hat c_y \ge (\sum_y \sqrt{\hat c_y})^2 \ge \Pi_B^2` with :math:`\Pi_B =
\sum_{y \in B} \pi_y`, and :math:`\Pi^2 \ge 2 q \Pi - q^2` for every q; by (ii) :math:`n_B \ge
\sum_{y \in B} \pi_y / \bar s_{i(y)}`. So for every :math:`q \ge 0`

.. math:: n_B T_B \ge \beta' \sum_{y \in B} \pi_y / \bar s_{i(y)} + 2 q \Pi_B - q^2, \qquad
          T_B \ge \beta' + \sum_{y \in B} \omega_{i(y)} \pi_y \quad \text{(by (iii))}.

**The grid.** Take :math:`\tau_0 \le \min_i r_i` and points :math:`\tau_0 < \dots < \tau_G`, the
intervals :math:`[\tau_k, \tau_{k+1})` (k < G) and :math:`[\tau_G, \infty)`. Split each batch by
time: :math:`\theta_{Bk}` is the fraction of its interval :math:`[s_B, e_B]` inside interval k. Let
:math:`m_k = \sum_B \theta_{Bk}`, :math:`s_{ik} = \sum_{B} \theta_{Bk} \pi_{y(i, B)}` (i's weight in
k), scaled to :math:`p_{ik} = s_{ik} \sigma_i / \sum_{k'} s_{ik'}` (so :math:`\sum_k p_{ik} =
\sigma_i` and :math:`p_{ik} \le s_{ik}`), :math:`R_{ik} = \sum_{k' > k} p_{ik'}` and :math:`z_{ik}`
the time i is in the system inside interval k, so :math:`F_i - r_i = \sum_k z_{ik}`. With
:math:`\Delta_k = \tau_{k+1} - \tau_k` and :math:`\Delta'_{ik}` the part of interval k after
:math:`r_i`, every schedule gives a point of these rows:

- *time* (F1: batches are disjoint): :math:`\beta' m_k + \sum_i \omega_i p_{ik} \le \Delta_k`;
- *holding*: the requests in the system during a batch include its members, so
  :math:`\sum_i z_{ik} = \int_k Q \ge \sum_B \theta_{Bk} n_B T_B`, and by the batch inequality
  :math:`\sum_i z_{ik} \ge \sum_i (\beta' / \bar s_i + 2q) p_{ik} - q^2 m_k` for every q of a
  fixed set (the tangents of the convex :math:`P^2 / m`);
- *one item a batch* (the replay rejects a second): i's items in k number
  :math:`\sum_{B \ni i} \theta_{Bk} \le m_k`, and at least :math:`p_{ik} / \bar s_i` by (ii);
- *own batches*: i is in the system through its own batches, each at least :math:`\beta'` plus
  its item term: :math:`z_{ik} \ge (\beta' / \bar s_i + \omega_i) p_{ik}`;
- *presence*: if :math:`R_{ik} > 0`, a batch holding an item of i ends after :math:`\tau_{k+1}`, so
  :math:`F_i > \tau_{k+1}` and i is in the system through the part of interval k after its
  arrival: :math:`z_{ik} \ge \Delta'_{ik} R_{ik} / \sigma_i` (as :math:`R_{ik} \le \sigma_i`), and
  :math:`z_{ik} \le \Delta'_{ik}`;
- *alone*: :math:`\sum_k z_{ik} \ge A_i` (``critical-path`` of :mod:`optsched.bounds`); releases:
  nothing of i before the interval holding :math:`r_i` (F1);
- *span*: :math:`\sum_k z_{ik} \ge \sum_k l_{ik} p_{ik} + H_i` with :math:`l_{ik} = (\max(\tau_k,
  r_i) - r_i) / \sigma_i` and :math:`H_i = \lambda_i \sigma_i / 2`, :math:`\lambda_i = \beta' /
  \bar s_i + \omega_i` (below).

**The span row.** The presence rows add up to :math:`\sum_k l_{ik} p_{ik}` (as :math:`\sum_{k' <
k} \Delta'_{ik'} = \max(\tau_k, r_i) - r_i`): i's weight priced at the lower ends of the
intervals that hold it, as if each item were done at once. Its items take time, one batch each. Let
:math:`B_1, \dots, B_n` be the batches holding i's items, in time order (one item of i a batch, and
batches are disjoint by (F1)), with weights :math:`\pi_j`, :math:`S = \sum_j \pi_j \ge \sigma_i`,
and :math:`T_j \ge \beta' + \hat c_{y_j} \ge \lambda_i \pi_j` by (ii) and (iii). Spread each
:math:`\pi_j` evenly over :math:`B_j`: a density :math:`\rho \le 1 / \lambda_i` of mass S, zero
before :math:`r_i` (F1) and after :math:`F_i` (the end of :math:`B_n`), with mass :math:`s_{ik}`
in interval k. Mass X at density at most :math:`1/\lambda_i` ending by F lies on at least
:math:`\lambda_i X` of time, so :math:`\int (F_i - t) \rho(t)\,dt \ge \lambda_i S^2 / 2`; and
each t where :math:`\rho > 0` in interval k is at least :math:`\max(\tau_k, r_i)`. So

.. math:: S F_i = \int t \rho + \int (F_i - t) \rho \ge \sum_k s_{ik} \max(\tau_k, r_i) +
          \lambda_i S^2 / 2,

and dividing by S (:math:`s_{ik} / S = p_{ik} / \sigma_i`), :math:`F_i - r_i \ge \sum_k l_{ik}
p_{ik} + \lambda_i S / 2 \ge \sum_k l_{ik} p_{ik} + H_i`. Where the presence rows price a request
part-way through by its remaining weight, so that requests running side by side are priced as if
they finished one after another, this row adds back half of the least time of i's own batches. Its
gaps are the least batch time of each item (its own term and :math:`\beta'`), not the longer
batches of a loaded engine: the holding rows price those only summed over the requests.

So the least :math:`\sum_{ik} z_{ik}` of this linear programme, over N, is a lower bound on the mean
latency (``fluid-latency``). It sees that the work released by a time must be done at a rate the
batch overhead limits, and that a high rate needs many requests in each batch, each waiting through
it: under load its optimum keeps many requests in the system.

**Scale.** At most :data:`FLUID_CELLS` request-interval cells: :data:`FLUID_GRID` equal intervals
at most, fewer for large N, none below the least (so none beyond 1,000 requests). HiGHS' interior
point method solves it within :data:`FLUID_TIME` seconds or it is not listed; only an optimal solve
counts, lowered by :data:`FLUID_MARGIN` (relative) for the solver's tolerances.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .bounds import critical_path_times
from .costmodel import Coefficients
from .instance import Instance
from .lprows import LpRows
from .result import Bound

__all__ = [
    "FLUID_CELLS",
    "FLUID_GRID",
    "FLUID_MARGIN",
    "FLUID_TIME",
    "FluidExtra",
    "FluidTerms",
    "fluid_bound",
    "fluid_grid",
    "fluid_latency",
    "fluid_lp",
]

#: Most request-interval cells of the programme.
FLUID_CELLS = 8_000

#: Fewest and most intervals of the grid.
FLUID_GRID = (8, 60)

#: Time limit (seconds) of HiGHS' solve; a solve stopped by it gives no bound.
FLUID_TIME = 10.0

#: Relative margin taken off the optimum (HiGHS' feasibility and optimality tolerances).
FLUID_MARGIN = 1e-6


#: A hook of :func:`fluid_lp` that extends the programme: (HiGHS model, rows, cells, terms, grid).
FluidExtra = Callable[[Any, LpRows, Any, "FluidTerms", np.ndarray], None]


class FluidTerms:
    """The per-request constants of the programme (module docstring), in request order.

    Attributes: ``release`` r_i, ``alone`` A_i, ``weight`` sigma_i, ``cap`` s_i (the most weight of one
    item), ``rate`` omega_i (least item term per unit of weight), ``overhead`` beta', ``span`` H_i
    (seconds).
    """

    def __init__(self, instance: Instance) -> None:
        coef = Coefficients.of(instance.cost_model)
        L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
        da, dk = coef.decode_per_token, coef.decode_per_kv
        self.overhead = instance.cost_model.least_overhead(whole_tile=True)
        reqs = instance.requests
        self.release = np.array([r.arrival for r in reqs], dtype=np.float64)
        self.alone = critical_path_times(instance)
        I = np.array([r.prompt_tokens for r in reqs], dtype=np.float64)
        O = np.array([r.output_tokens for r in reqs], dtype=np.int64)
        kappa = L * (a + pa + pq)
        decode_first = L * (a + da + dk * I)
        decode_last = L * (a + da + dk * (I + O - 2))
        prompt = kappa * I
        self.cap = np.sqrt(np.where(O >= 2, decode_last, prompt))
        self.rate = np.sqrt(np.where(O >= 2, decode_first, prompt))
        later = np.maximum(O - 1, 0)
        owner = np.repeat(np.arange(len(reqs)), later)
        g = np.arange(len(owner)) - np.repeat(np.cumsum(later) - later, later) + 1.0  # 1 .. O_i - 1
        held = I[owner] + g - 1.0
        token = np.minimum(self._weigh(L * (a + da + dk * held), owner), self._weigh(kappa * (held + 1.0), owner))
        self.weight = self._weigh(prompt, np.arange(len(reqs))) + np.bincount(owner, token, minlength=len(reqs))
        self.span = 0.5 * (self.overhead / self.cap + self.rate) * self.weight

    def _weigh(self, term: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """f_i(term) of the module docstring for items of requests ``owner``."""
        rate = self.rate[owner]
        by_rate = np.divide(term, rate, out=np.zeros_like(term), where=rate > 0)
        weight: np.ndarray = np.minimum(np.minimum(np.sqrt(term), self.cap[owner]), by_rate)
        return weight


class _Cells:
    """The request-interval cells (i, k), k from the interval holding r_i to G, and their columns:
    z (one a cell), R (one a cell with k < G), then m_k, P_k, D_k, Z_k (k < G)."""

    def __init__(self, terms: FluidTerms, tau: np.ndarray) -> None:
        G = len(tau) - 1
        self.G = G
        first = np.clip(np.searchsorted(tau, terms.release, side="right") - 1, 0, G)
        count = G - first + 1
        self.owner = np.repeat(np.arange(len(first)), count)
        start = np.cumsum(count) - count
        self.k = first[self.owner] + np.arange(len(self.owner)) - start[self.owner]
        self.is_first = self.k == first[self.owner]
        self.inner = self.k < G
        n = len(self.owner)
        self.z = np.arange(n)
        self.R = np.full(n, -1)
        self.R[self.inner] = n + np.arange(int(self.inner.sum()))
        base = n + int(self.inner.sum())
        self.m, self.P, self.D, self.Z = (base + j * G + np.arange(G) for j in range(4))
        self.columns = base + 4 * G
        end = np.append(tau[1:], np.inf)[self.k]
        self.span = end - np.maximum(tau[self.k], terms.release[self.owner])  # Delta'_ik
        self.sigma = terms.weight[self.owner]

    def p_terms(self, cells: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``scale`` times p_ik of ``cells`` as entries (position in ``cells``, column, value) and a
        constant per cell: p_ik = R_{i,k-1} - R_ik, with R before the first cell sigma_i, R_iG = 0."""
        prev = ~self.is_first[cells]
        cur = self.inner[cells]
        pos = np.concatenate([np.flatnonzero(prev), np.flatnonzero(cur)])
        cols = np.concatenate([self.R[cells[prev] - 1], self.R[cells[cur]]])
        vals = np.concatenate([scale[prev], -scale[cur]])
        return pos, cols, vals, np.where(prev, 0.0, scale * self.sigma[cells])


def _q_points(terms: FluidTerms, most: int) -> np.ndarray:
    """The tangent points q: the weight of a batch, from one item's least to ``most`` items' most."""
    lo, hi = float(terms.rate.min()), float(most * terms.cap.max())
    return lo * 1.3 ** np.arange(int(math.log(max(hi / lo, 1.0)) / math.log(1.3)) + 2)


def fluid_lp(
    terms: FluidTerms, tau: np.ndarray, most: int, seconds: float = FLUID_TIME, extra: FluidExtra | None = None
) -> float | None:
    """The least sum of z_ik of the programme of the module docstring on the grid ``tau`` (its
    points, ``tau[0]`` at most the first release), over N, less :data:`FLUID_MARGIN`; None when
    HiGHS does not solve it to optimality within ``seconds``. ``most``: the most items of a batch.
    ``extra(h, rows, cells, terms, tau)``: adds columns to ``h`` and rows to ``rows`` (a bound that
    extends the programme, :mod:`optsched.fluid_work`)."""
    import highspy

    c = _Cells(terms, tau)
    beta, every = terms.overhead, np.arange(len(c.owner))
    inner = np.flatnonzero(c.inner)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(seconds))
    h.setOptionValue("solver", "ipm")  # several times faster than the simplex methods here
    h.setOptionValue("run_crossover", "off")  # the objective is within the IPM's tolerance of the optimum
    upper = np.full(c.columns, highspy.kHighsInf)
    upper[c.z[inner]] = c.span[inner]
    upper[c.R[inner]] = c.sigma[inner]
    cost = np.zeros(c.columns)
    cost[c.z] = 1.0
    h.addVars(c.columns, np.zeros(c.columns), upper)
    h.changeColsCost(c.columns, np.arange(c.columns, dtype=np.int32), cost)
    rows = LpRows()
    owner_cap, owner_rate = terms.cap[c.owner], terms.rate[c.owner]

    def p_rows(
        cells: np.ndarray,
        scale: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        extra: list[tuple[np.ndarray, np.ndarray | float]] | None = None,
    ) -> int:
        """Rows ``scale * p_ik + extra >= lower`` (``<= upper``) of ``cells``, one each."""
        pos, cols, vals, const = c.p_terms(cells, scale)
        first = rows.add(lower - const, upper - const)
        rows.put(first + pos, cols, vals)
        for col, val in extra or ():
            rows.put(first + np.arange(len(cells)), col, val)
        return first

    inf = np.full(len(every), np.inf)
    p_rows(every, np.ones(len(every)), np.zeros(len(every)), inf)  # p_ik >= 0
    first = rows.add(np.zeros(len(inner)), inf[inner])  # presence: z_ik >= Delta'_ik R_ik / sigma_i
    rows.put(first + np.arange(len(inner)), c.z[inner], 1.0)
    rows.put(first + np.arange(len(inner)), c.R[inner], -c.span[inner] / c.sigma[inner])
    own = beta / owner_cap + owner_rate  # own batches: z_ik >= (beta'/s_i + omega_i) p_ik
    p_rows(every, -own, np.zeros(len(every)), inf, [(c.z, 1.0)])
    p_rows(inner, -np.ones(len(inner)), np.zeros(len(inner)), inf[inner], [(c.m[c.k[inner]], owner_cap[inner])])
    first = rows.add(terms.alone, np.full(len(terms.alone), np.inf))  # alone: sum_k z_ik >= A_i
    rows.put(first + c.owner, c.z, 1.0)
    _interval_rows(rows, c, terms, tau, most)
    _span_rows(rows, c, terms, tau)
    if extra is not None:
        extra(h, rows, c, terms, tau)
    if rows.pass_to(h) != highspy.HighsStatus.kOk:
        return None
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    total = float(h.getInfo().objective_function_value)
    return max(0.0, total * (1.0 - FLUID_MARGIN) / len(terms.release))


def _span_rows(rows: LpRows, c: _Cells, terms: FluidTerms, tau: np.ndarray) -> None:
    """The span rows, one a request: sum_k z_ik - sum_k l_ik p_ik >= H_i with l_ik = (max(tau_k, r_i) - r_i) /
    sigma_i; as p_ik = R_{i,k-1} - R_ik, R_ik's entry is l_ik - l_{i,k+1} and the first cell adds l_ik sigma_i."""
    lead = np.maximum(tau[c.k] - terms.release[c.owner], 0.0) / c.sigma
    inner = np.flatnonzero(c.inner)  # a cell with k < G is followed by the same request's next cell
    start = lead * c.sigma * c.is_first
    first = rows.add(
        terms.span + np.bincount(c.owner, start, minlength=len(terms.span)), np.full(len(terms.span), np.inf)
    )
    rows.put(first + c.owner, c.z, 1.0)
    rows.put(first + c.owner[inner], c.R[inner], lead[inner] - lead[inner + 1])


def _interval_rows(rows: LpRows, c: _Cells, terms: FluidTerms, tau: np.ndarray, most: int) -> None:
    """The rows of each bounded interval k < G: time, the sums P_k, D_k, Z_k, holding and K."""
    G, beta = c.G, terms.overhead
    inner = np.flatnonzero(c.inner)
    k = c.k[inner]
    sums = []
    for scale in (terms.rate[c.owner[inner]], np.ones(len(inner)), 1.0 / terms.cap[c.owner[inner]]):
        pos, cols, vals, const = c.p_terms(inner, scale)
        sums.append((k[pos], cols, vals, np.bincount(k, const, minlength=G)))
    # time: beta' m_k + sum_i omega_i p_ik <= Delta_k
    kk, cols, vals, const = sums[0]
    first = rows.add(np.full(G, -np.inf), np.diff(tau) - const)
    rows.put(first + kk, cols, vals)
    rows.put(first + np.arange(G), c.m, beta)
    for col, (kk, cols, vals, const) in ((c.P, sums[1]), (c.D, sums[2])):  # P_k, D_k: sums of (p, p / s_i)
        first = rows.add(const, const)
        rows.put(first + np.arange(G), col, 1.0)
        rows.put(first + kk, cols, -vals)
    first = rows.add(np.zeros(G), np.zeros(G))  # Z_k = sum_i z_ik
    rows.put(first + np.arange(G), c.Z, 1.0)
    rows.put(first + k, c.z[inner], -1.0)
    for q in _q_points(terms, most):  # holding: Z_k >= beta' D_k + 2 q P_k - q^2 m_k
        first = rows.add(np.zeros(G), np.full(G, np.inf))
        at = first + np.arange(G)
        for col, val in ((c.Z, 1.0), (c.D, -beta), (c.P, -2.0 * q), (c.m, q * q)):
            rows.put(at, col, val)
    first = rows.add(np.full(G, -np.inf), np.zeros(G))  # at most K items a batch: D_k <= K m_k
    rows.put(first + np.arange(G), c.D, 1.0)
    rows.put(first + np.arange(G), c.m, -float(most))


def fluid_grid(terms: FluidTerms, most: int) -> np.ndarray | None:
    """The grid of the programme (any grid gives a valid bound): G + 1 equal steps from the first
    release to the last release plus the least item work and the overhead of the fewest items in
    batches of ``most``, G the most within :data:`FLUID_CELLS` request-interval cells and
    :data:`FLUID_GRID`; None below the fewest points."""
    N = len(terms.release)
    G = min(FLUID_GRID[1], FLUID_CELLS // max(N, 1))
    work = float(np.sum(terms.weight * terms.rate)) + terms.overhead * float(np.sum(terms.weight / terms.cap)) / min(
        most, N
    )
    if G < FLUID_GRID[0] or not work > 0.0:
        return None
    return np.linspace(float(terms.release.min()), float(terms.release.max()) + work, G + 1)


def fluid_bound(
    instance: Instance,
    most: int,
    seconds: float,
    name: str,
    describe: Callable[[int], str],
    extra: FluidExtra | None = None,
) -> Bound | None:
    """The programme of :func:`fluid_lp` on the instance's own terms and grid (:func:`fluid_grid`),
    extended by ``extra``, as the bound ``name`` with the note ``describe(intervals)``; None (no
    requests, too many for the grid, a degenerate profile, or not solved within ``seconds``).
    ``most``: the most items one batch holds (:func:`optsched.load_bounds.most_items`)."""
    if not instance.requests:
        return None
    terms = FluidTerms(instance)
    positive = (terms.weight > 0).all() and (terms.rate > 0).all() and terms.overhead > 0
    tau = fluid_grid(terms, most) if positive else None
    if tau is None:
        return None
    value = fluid_lp(terms, tau, most, seconds, extra)
    return None if value is None else Bound(name, value, True, describe(len(tau) - 1))


def fluid_latency(instance: Instance, most: int, seconds: float = FLUID_TIME) -> Bound | None:
    """The ``fluid-latency`` bound of the module docstring (seconds, mean over requests), or None
    (:func:`fluid_bound`). ``most``: the most items one batch holds (:func:`optsched.load_bounds.most_items`)."""

    def describe(intervals: int) -> str:
        return (
            f"LP over {intervals} intervals: the batch overhead limits the rate, and a high rate needs many "
            f"requests in each batch, each in the system through it (K = {most}; optsched/fluid_bounds.py)"
        )

    return fluid_bound(instance, most, seconds, "fluid-latency", describe)

r"""Proven upper bounds on goodput and lower bounds on TTFT / TPOT quantiles, for every schedule.

Goodput here is a count: the requests that finish and meet every SLO they carry
(:attr:`optsched.metrics.RequestOutcome.meets_slo`: first token by :math:`a_i + \tau_i`, TPOT at
most :math:`\pi_i`, latency at most :math:`\epsilon_i`; a missing target is :math:`+\infty`, and
``atgt`` is read as a TPOT target). Every bound below holds for every schedule that replays cleanly
(any policy, any solver, evictions or not); the facts used are those of :mod:`optsched.bounds`
(F0)-(F5): batches are sequential and start after the arrivals of the requests they serve (F1),
batch time is monotone and splits into per-batch overheads plus per-item terms (F2), each request's
least item work (F3) and the per-batch capacities (F4).

Per request (lost alone)
------------------------
:math:`p_i` = least time of the first token of request i alone and :math:`\ell_i` = least time of its
:math:`O_i - 1` later tokens alone (:func:`optsched.bounds.prefill_alone_time` and
:func:`optsched.bounds.critical_path_times`): every schedule has TTFT :math:`\ge p_i`, TPOT
:math:`\ge \ell_i / (O_i - 1)` and latency :math:`\ge p_i + \ell_i` (the batches serving i are
sequential and each costs at least the same batch with i alone, (F2)). A request with
:math:`p_i > \tau_i`, :math:`\ell_i / (O_i - 1) > \pi_i` or :math:`p_i + \ell_i > \epsilon_i` is lost
in every schedule.

Windows (queueing)
------------------
A request that meets its SLOs has every prefill item of its first token in batches that start at or
after :math:`a_i` (F1) and end by :math:`f_i = a_i + \tau_i`, and every item in batches that end by
:math:`D_i = a_i + \min(\epsilon_i, \tau_i + \pi_i (O_i - 1))` (its finish is at most its first
token plus :math:`\pi_i (O_i - 1)`). Take an interval :math:`[s, e]` and the set Q of met requests
with :math:`a_i \ge s` and :math:`f_i \le e`. The batches holding their items up to e lie inside
:math:`[s, e]` and are disjoint in time, so their times add up to at most :math:`e - s`. By (F2)
their times are at least the sum of per-item terms plus :math:`L b` per batch plus :math:`L\,pb` per
batch with prefill. The items of i inside are at least its whole work :math:`w_i` (when
:math:`D_i \le e`) or its first-token work :math:`w^1_i` (:func:`optsched.bounds.request_work`,
(F3)). Batch counts are at least each of :math:`\sum_Q I_i / P` (prefill tokens, also a bound on the
prefill batches), :math:`\sum_Q n_i / C` (:math:`n_i` the tokens i processes at least),
:math:`\sum_Q A_i / M` (:math:`A_i = \sum_{g} (I_i + g - 1)` over the tokens generated inside:
the KV of (F5)) and :math:`\sum_Q g_i / R_{max}` (each generating batch holds i). So for each choice
:math:`\beta` among these, with :math:`c_i = w_i + L\,pb\,I_i / P + L\,b\,\beta_i` (the full or
first-token figures), :math:`\sum_{i \in Q} c_i \le e - s`. The largest count of requests of Q
whose costs fit is that of the cheapest ones (greedy); the smallest over the choices
:math:`\beta` is an upper bound :math:`k(s, e)` on the met requests of Q, so at least
:math:`|Q| - k(s, e)` of them are lost. More choices price TPOT (:mod:`.tpot_pricing`): a request
meeting TPOT :math:`\le \pi_i` has its later tokens in batches inside a span of
:math:`\pi_i (O_i - 1)`, and batches serving many decodes together are long; those rows charge
the batch overheads that this forces (they may be negative for some requests; the greedy count
stays exact), with one multiplier shared by all requests or one per request (:mod:`.tpot_own`).

Intervals that do not overlap (they may share an end point) hold disjoint sets of batches and of
requests, so their losses add. :func:`max_met` takes the end points on a grid (every arrival and
deadline on small instances, :data:`GRID_POINTS` quantiles of them at scale), finds the family of
non-overlapping grid intervals of largest total loss by dynamic programming over the grid, and
returns N minus the requests lost alone minus that loss. Any family of intervals gives a valid
bound, so the grid only affects how tight it is.

Quantiles
---------
numpy's linear quantile q of N values is at least the order statistic :math:`v_{(f)}`,
:math:`f = \lfloor q (N - 1) \rfloor` (0-based), so a quantile at most x needs f + 1 values at most x.
TTFT: if at most :math:`K(x) < f + 1` requests can meet a TTFT target x (:func:`max_met` with
:math:`\tau = x` only), every schedule's TTFT quantile exceeds x; :func:`ttft_quantile_bound` finds
such an x by bisection (every reported x was checked; monotonicity is not assumed). TPOT: the
f-th smallest least TPOT :math:`\ell_i / (O_i - 1)` over the requests with :math:`O_i \ge 2`
(:func:`tpot_quantile_bound`).

SLO target
----------
A schedule meets a target (quantile q of TTFT at most :math:`\tau` and of TPOT at most :math:`\pi`,
:class:`optsched.sweep.cells.SloTarget`) only if at least :math:`f + 1` requests have TTFT
:math:`\le \tau`, at least :math:`f' + 1` of the :math:`N'` requests with :math:`O_i \ge 2` have TPOT
:math:`\le \pi`, and so at least :math:`(f + 1) + (f' + 1) + (N - N') - N` requests meet both.
:func:`target_unreachable` checks the three with the bounds above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ...bounds import critical_path_times, prefill_alone_times, request_work
from ...budget import TimeBudget
from ...instance import SLO, Instance, InstanceError
from ...metrics import TIME_RTOL
from ...options import OptionError
from ...result import Bound
from .tpot_own import own_rows
from .tpot_pricing import TpotPricing, tpot_pricing, tpot_rows

__all__ = [
    "BOUND_SHARE",
    "alive_requests",
    "GRID_POINTS",
    "GRID_SPAN",
    "RequestFacts",
    "SloArrays",
    "goodput_bound",
    "goodput_upper_bound",
    "max_met",
    "request_facts",
    "require_slos",
    "scaled_arrivals",
    "slo_arrays",
    "tail_bounds",
    "target_unreachable",
    "tpot_quantile_bound",
    "ttft_quantile_bound",
    "with_slos",
]

#: The part of a time budget that the upper bound's intervals may take (cut short, it is weaker,
#: still proven).
BOUND_SHARE = 0.3

#: Grid end points used at scale (all of them when there are at most this many).
GRID_POINTS = 128
#: Longest interval, in grid steps (intervals as long as a request's window are needed).
GRID_SPAN = GRID_POINTS
#: Targets are loosened by this relative margin so that the replay's tolerance (TIME_RTOL) and
#: rounding never make the bound fall below a schedule's count.
SLACK = 4 * TIME_RTOL


@dataclass(frozen=True)
class RequestFacts:
    """What the bounds read of an instance besides arrivals and SLOs (arrays in request order).

    Attributes
    ----------
    prompt, output
        :math:`I_i`, :math:`O_i`.
    first, later
        :math:`p_i` and :math:`\\ell_i` (seconds, module docstring).
    cost_full, cost_first
        Per choice of batch count (rows) the costs :math:`c_i` of the whole request and of its first
        token (seconds).
    tpot
        What the rows that price TPOT read (:mod:`.tpot_pricing`); none: those rows are left out.
    """

    prompt: np.ndarray
    output: np.ndarray
    first: np.ndarray
    later: np.ndarray
    cost_full: np.ndarray
    cost_first: np.ndarray
    tpot: tuple[TpotPricing, ...]

    @property
    def least_tpot(self) -> np.ndarray:
        """:math:`\\ell_i / (O_i - 1)` (inf for one output token: no TPOT)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.output > 1, self.later / np.maximum(self.output - 1, 1), np.inf)


@dataclass(frozen=True)
class SloArrays:
    """Per request targets in seconds, inf where absent: TTFT, TPOT (with ``atgt``), latency."""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray


def _inf(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.inf if v is None else float(v) for v in values], dtype=np.float64)


def require_slos(instance: Instance) -> None:
    """An :class:`~optsched.instance.InstanceError` when no request of ``instance`` carries an SLO:
    every schedule would then meet every request's, and the goodput would say nothing."""
    if all(r.slo is None for r in instance.requests):
        raise InstanceError(
            f"{instance.name}: objective 'goodput': no request carries an SLO (give the requests SLOs: "
            "their 'slo' field, or --slo-ttft / --slo-tpot on the command line)"
        )


def slo_arrays(instance: Instance) -> SloArrays:
    """The SLO targets the instance's requests carry (:attr:`~optsched.metrics.RequestOutcome.meets_slo`)."""
    slos = [r.slo for r in instance.requests]
    tpot = [None if s is None else min(_finite(s.tpot), _finite(s.atgt)) for s in slos]
    return SloArrays(
        ttft=_inf([None if s is None else s.ttft for s in slos]),
        tpot=_inf(tpot),
        e2e=_inf([None if s is None else s.e2e for s in slos]),
    )


def _finite(value: float | None) -> float:
    return math.inf if value is None else value


def request_facts(instance: Instance) -> RequestFacts:
    """:class:`RequestFacts` of ``instance`` (arrivals are not read)."""
    reqs = instance.requests
    I = np.array([r.prompt_tokens for r in reqs], dtype=np.float64)
    O = np.array([r.output_tokens for r in reqs], dtype=np.float64)
    first = prefill_alone_times(instance, I)
    later = np.maximum(critical_path_times(instance) - first, 0.0)
    lin = instance.cost_model.linear_twin()
    L, lim = lin.layers, instance.limits
    P = min(lim.prefill_budget, lim.token_budget)

    def costs(work: np.ndarray, out: np.ndarray) -> np.ndarray:
        counts = [I / P, (I + out - 1) / lim.token_budget]
        if lim.kv_capacity is not None:
            counts.append((out * I + out * (out - 1) / 2) / lim.kv_capacity)
        if lim.max_running is not None:
            counts.append(out / lim.max_running)
        fixed = work + L * lin.prefill.bias * I / P
        return np.array([fixed + L * lin.base * beta for beta in counts])

    full = costs(request_work(instance), O)
    one = costs(request_work(instance, first_tokens=True), np.ones_like(O))
    return RequestFacts(I, O, first, later, full, one, tpot_pricing(instance))


def alive_requests(facts: RequestFacts, slo: SloArrays) -> np.ndarray:
    """Requests not lost alone (module docstring)."""
    loose = 1 + SLACK
    alive: np.ndarray = (
        (facts.first <= slo.ttft * loose)
        & ((facts.output < 2) | (facts.least_tpot <= slo.tpot * loose))  # one output token: no TPOT
        & (facts.first + facts.later <= slo.e2e * loose)
    )
    return alive


def _grid(points: np.ndarray, size: int) -> np.ndarray:
    points = np.unique(points[np.isfinite(points)])
    if len(points) <= size:
        return points
    return np.unique(points[np.linspace(0, len(points) - 1, size).round().astype(int)])


def _interval_losses(
    a: np.ndarray,
    f: np.ndarray,
    D: np.ndarray,
    facts_costs: tuple[np.ndarray, np.ndarray],
    grid: np.ndarray,
    span: int,
    budget: TimeBudget,
) -> np.ndarray:
    """loss[x, y]: least count of requests lost among those inside [grid[x], grid[y]] (x < y); the
    rows of the x not reached when ``budget`` expires stay 0, which every interval loses at least."""
    full, first = facts_costs
    G = len(grid)
    loss = np.zeros((G, G), dtype=np.int64)
    for x in range(G - 1):
        if budget.expired():
            break
        inside = a >= grid[x]
        ys = np.arange(x + 1, min(G, x + span + 1))
        ends = grid[ys]
        fa, Da = f[inside], D[inside]
        member = fa[None, :] <= ends[:, None]  # (ys, requests); f and D are already loosened
        whole = Da[None, :] <= ends[:, None]
        room = (ends - grid[x]) + SLACK * (np.abs(ends) + 1.0)
        count = member.sum(axis=1)
        worst = np.zeros(len(ys), dtype=np.int64)
        for k in range(full.shape[0]):
            cost = np.where(whole, full[k][inside][None, :], first[k][inside][None, :])
            cost = np.sort(np.where(member, cost, np.inf), axis=1)
            fits = (np.cumsum(cost, axis=1) <= room[:, None]).sum(axis=1)
            worst = np.maximum(worst, count - fits)
        loss[x, ys] = worst
    return loss


def max_met(
    facts: RequestFacts,
    arrival: np.ndarray,
    slo: SloArrays,
    grid_points: int = GRID_POINTS,
    span: int = GRID_SPAN,
    budget: TimeBudget | None = None,
    met: int = 0,
) -> int:
    """An upper bound on how many requests any schedule gets within ``slo`` (module docstring).

    When ``budget`` expires the rows and intervals not yet priced count no loss: the bound is
    weaker, still proven. ``met``: a count some schedule reaches; when it equals the requests not
    lost alone, that count is the bound (the windows never bound below a schedule's count) and no
    window is priced."""
    alive = alive_requests(facts, slo)
    n = int(alive.sum())
    if n == 0 or met >= n:
        return n
    budget = budget or TimeBudget()
    a, loose = arrival[alive], 1 + SLACK
    tpot = np.where(facts.output[alive] > 1, slo.tpot[alive] * loose * np.maximum(facts.output[alive] - 1, 1), 0.0)
    D = a + np.minimum(slo.e2e[alive] * loose, slo.ttft[alive] * loose + tpot)
    f = np.minimum(a + slo.ttft[alive] * loose, D)
    boxed = np.isfinite(f)
    if not boxed.any():
        return n
    grid = _grid(np.concatenate([a[boxed], f[boxed], D[np.isfinite(D)]]), grid_points)
    shared = tpot_rows(facts.tpot, facts.output[alive], slo.tpot[alive] * loose, alive, budget)
    own = own_rows(facts.tpot, facts.output[alive], slo.tpot[alive] * loose, alive, budget)
    costs = (
        np.concatenate([facts.cost_full[:, alive], shared[0], own[0]]),
        np.concatenate([facts.cost_first[:, alive], shared[1], own[1]]),
    )
    loss = _interval_losses(a, f, D, costs, grid, span, budget)
    best = np.zeros(len(grid), dtype=np.int64)
    for y in range(1, len(grid)):
        lo = max(0, y - span)
        best[y] = max(best[y - 1], int(np.max(best[lo:y] + loss[lo:y, y])))
    return n - int(best[-1])


def goodput_upper_bound(
    instance: Instance, facts: RequestFacts | None = None, budget: TimeBudget | None = None, met: int = 0
) -> int:
    """An upper bound on the goodput count (requests meeting their own SLOs) of every schedule
    (:func:`max_met`, cut short when ``budget`` expires: weaker, still proven; ``met`` as there: a
    schedule that meets every request's SLOs needs no other bound)."""
    if met >= len(instance.requests):
        return len(instance.requests)
    facts = facts or request_facts(instance)
    arrival = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    return max_met(facts, arrival, slo_arrays(instance), budget=budget, met=met)


def _order_index(count: int, q: float) -> int:
    """f = floor(q (count - 1)): numpy's linear quantile q is at least the f-th smallest value."""
    return int(math.floor(q * (count - 1) + 1e-12))


def ttft_quantile_bound(
    facts: RequestFacts, arrival: np.ndarray, q: float, iterations: int = 24, budget: TimeBudget | None = None
) -> float:
    """A proven lower bound (seconds) on every schedule's quantile ``q`` of TTFT (module docstring).

    The bisection keeps ``lo`` a proven bound at every step, so when ``budget`` runs out it stops
    with the bound it has (weaker, still proven)."""
    budget = budget or TimeBudget()
    N = len(arrival)
    need = _order_index(N, q) + 1
    inf = np.full(N, np.inf)
    start = float(np.sort(facts.first)[need - 1])  # the order statistic of the least TTFTs

    def too_few(x: float) -> bool:
        return max_met(facts, arrival, SloArrays(np.full(N, x), inf, inf)) < need

    lo, hi = start, max(start, 1e-6) * 2
    while not budget.expired() and too_few(hi):
        lo, hi = hi, hi * 2
    for _ in range(iterations):
        if budget.expired():
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if too_few(mid) else (lo, mid)
    return lo


def tpot_quantile_bound(facts: RequestFacts, q: float) -> float | None:
    """A proven lower bound (seconds) on every schedule's quantile ``q`` of TPOT (None without TPOT)."""
    least = np.sort(facts.least_tpot[facts.output > 1])
    return float(least[_order_index(len(least), q)]) if len(least) else None


def tail_bounds(
    instance: Instance, q: float = 0.99, iterations: int = 16, budget: TimeBudget | None = None
) -> dict[str, float | None]:
    """Proven lower bounds (seconds) on every schedule's quantile ``q`` of TTFT and of TPOT, keyed
    ``ttft_p<100q>`` and ``tpot_p<100q>`` as the metrics' keys; the TTFT bisection stops when
    ``budget`` runs out (:func:`ttft_quantile_bound`)."""
    facts = request_facts(instance)
    arrival = np.array([r.arrival for r in instance.requests], dtype=np.float64)
    name = f"p{100 * q:g}"
    return {
        f"ttft_{name}": ttft_quantile_bound(facts, arrival, q, iterations, budget),
        f"tpot_{name}": tpot_quantile_bound(facts, q),
    }


def target_unreachable(
    facts: RequestFacts, arrival: np.ndarray, ttft: float | None, tpot: float | None, q: float
) -> str | None:
    """Why no schedule meets quantile ``q`` of TTFT <= ``ttft`` and of TPOT <= ``tpot`` (None: not proven)."""
    N = len(arrival)
    inf = np.full(N, np.inf)
    need = _order_index(N, q) + 1 if ttft is not None else 0
    if ttft is not None:
        k = max_met(facts, arrival, SloArrays(np.full(N, ttft), inf, inf))
        if k < need:
            return f"at most {k} of {N} requests can have TTFT <= {ttft:g} s; quantile {q:g} needs {need}"
    with_tpot = int((facts.output > 1).sum())
    if tpot is None or with_tpot == 0:
        return None
    need_tpot = _order_index(with_tpot, q) + 1
    bound = tpot_quantile_bound(facts, q)
    if bound is not None and bound > tpot * (1 + SLACK):
        return f"quantile {q:g} of TPOT is at least {bound:g} s > {tpot:g} s alone"
    both = need + need_tpot + (N - with_tpot) - N
    if ttft is not None and both > 0:
        k = max_met(facts, arrival, SloArrays(np.full(N, ttft), np.full(N, tpot), inf))
        if k < both:
            return (
                f"at most {k} of {N} requests can meet TTFT <= {ttft:g} s and TPOT <= {tpot:g} s; "
                f"the target needs {both}"
            )
    return None


def scaled_arrivals(instance: Instance, rate_scale: float) -> np.ndarray:
    """Arrivals of ``instance`` at ``rate_scale`` (the workload transform: every arrival divided by it)."""
    return np.array([r.arrival / rate_scale for r in instance.requests], dtype=np.float64)


def with_slos(instance: Instance, ttft: float | None, tpot: float | None) -> Instance:
    """``instance`` with every request's SLO replaced by these targets (tests and the CLI's overrides)."""
    slo = SLO(ttft=ttft, tpot=tpot)
    return replace(instance, requests=tuple(replace(r, slo=slo) for r in instance.requests))


def goodput_bound(
    instance: Instance, method: str | None = None, budget: TimeBudget | None = None, met: int = 0
) -> Bound:
    """The upper bound of this module on the requests meeting their SLOs, as the InferMax bounder
    lists it (``method`` must be None: no other method bounds the goodput), within :data:`BOUND_SHARE`
    of ``budget`` (``met``: a count some schedule reaches, :func:`max_met`)."""
    if method is not None:
        raise OptionError(f"option 'method': {method!r} does not bound the goodput (leave it out)")
    require_slos(instance)
    part = None if budget is None else budget.part(BOUND_SHARE)
    return Bound(
        name="goodput-windows",
        value=float(goodput_upper_bound(instance, budget=part, met=met)),
        valid=True,
        note="upper bound: requests lost alone and queueing windows (infermax/goodput_bounds.py)",
    )

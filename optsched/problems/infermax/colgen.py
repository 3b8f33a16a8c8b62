r"""The trajectory bound: a linear relaxation over request trajectories, by column generation.

When memory binds, requests must take turns: a request that holds KV grows by a slot a token, and
one that steps aside (is evicted) pays a refill when it comes back. The work bound and the counts
of :mod:`optsched.bounds` and :mod:`.kvtime` see the KV only as an area; this bound sees each
request's KV over time and the refills that taking turns costs.

Trajectories
------------
Number the non-empty batches of a schedule 1..B (eviction-only batches generate nothing and are
left out). Request i's *trajectory* is its action in each batch t, with :math:`g` its tokens before:

- **fill** (its prompt, or a refill of :math:`I_i + g` tokens, completes in t and generates token
  g + 1): KV :math:`I_i + g` after processing; when :math:`g \ge 1` it pays at least
  :math:`\rho_i(g+1) = L\,((a + p_a + p_q)(I_i + g) - \min(d_i(g+1), r_i(g+1)))^+` more than the
  work W of :mod:`optsched.bounds` counts for that token, :math:`d_i(g+1) = a + d_a + d_k (I_i + g - 1)`
  the decode item and :math:`r_i(g+1) = (a + p_a + p_q)(I_i + g)` the refill's item terms
  (F2, F3 there);
- **decode** (it held its KV in decode phase after the previous non-empty batch): KV :math:`I_i + g`,
  and :math:`\delta_i(g+1) = L\,(d_i(g+1) - \min(d_i(g+1), r_i(g+1)))^+` more than W counts;
- **idle** (holds its KV in decode phase, no item): KV :math:`I_i + g - 1`;
- **none**: anything else (no KV, or a prefill chunk that does not complete its prompt), counted as
  no KV and no running request.

A request starts in *none* with g = 0, a decode needs the request in decode phase after the
previous non-empty batch (after a fill, decode or idle, and not evicted since), idle too, and it
has generated its :math:`O_i` tokens by batch B. These are the shortest paths of :func:`least_trajectory_cost`.
By the contract's semantics (pages docs/schedule.md, docs/costmodel.md; F3, F4 of
:mod:`optsched.bounds`) every schedule gives each request such a trajectory, with the KV counted at
most the KV it holds after processing (exactly, except a partial prefill counted as 0), a running
count at most its own, at most one generated token per batch, and extras at most what its refills
and decodes cost beyond W (a refill's chunks cost at least :math:`(a + p_a + p_q)` per token as
:math:`c^2 \ge c`; a request evicted during its prefill pays more, not counted). So in batch t the
trajectories hold at most M KV, at most :math:`R_{max}` running requests and at most C generating
requests.

The relaxation LP(B)
--------------------
Requests with equal :math:`(I_i, O_i)` form a class c of :math:`n_c` requests. Variables
:math:`\lambda_p \ge 0` for trajectories p of class c over B batches, :math:`\sum_{p \in c}
\lambda_p = n_c`; for every *bucket* k of :math:`\Delta_k` consecutive batches,
:math:`\sum_p \lambda_p\, KV_{p,k} \le M \Delta_k`, :math:`\sum_p \lambda_p\, run_{p,k} \le R_{max}
\Delta_k`, :math:`\sum_p \lambda_p\, gen_{p,k} \le C \Delta_k` (sums over the batches of the bucket:
implied by the per-batch limits). Objective :math:`E(B) = \min \sum_p \lambda_p\, cost_p` (the
extras of the trajectory). A schedule with at most B non-empty batches is a point of LP(B) (its
trajectories, finished by B, with :math:`\lambda` counting requests), so its extras are at least
E(B); E is non-increasing in B (a point of LP(B) is one of LP(B + 1)).

**Lagrangian bound.** For any multipliers :math:`u \ge 0` of the bucket rows,
:math:`L(u) = \sum_c n_c \min_{p \in c} (cost_p + u \cdot usage_p) - \sum_k u_k\, cap_k \le E(B)`
(weak duality): :func:`least_trajectory_cost` computes each class's minimum exactly over all its trajectories, so
every value reported is a proven bound, at any iteration. Column generation (:class:`TrajectoryLP`)
solves the restricted master LP with HiGHS (artificial slack keeps it feasible), takes its duals,
prices them (smoothed towards the best multipliers found, Wentges' stabilisation), adds the
trajectories of negative reduced cost and stops when there are none (then :math:`L(u)` is E(B)).

The makespan bound
------------------
A schedule with B non-empty batches, x of them with prefill tokens and D with decode items, has
makespan at least :math:`W + L(b B + p_b x + d_b D) + \text{extras} + \text{chunking}` (the count
program :func:`optsched.bounds.least_bias`, whose refill term is a bound on the same extras). With
the extras also at least :math:`E(B') \ge E(B)` for :math:`B' \ge B`: for B in a range
:math:`[B_k, B_{k+1})` the makespan is at least
:math:`W + \max(\beta(B_k),\ \beta^0(B_k) + E(B_{k+1}))`, where :math:`\beta(B_k)` is the count
program with at least :math:`B_k` batches and :math:`\beta^0` the same without its refill term
(the extras are counted once). :func:`trajectory_bound` evaluates E at a grid of B from the
least batch count (with :mod:`.kvtime`) up to the most batches a schedule better than the best
known can have, takes the least of these values over the ranges (past the last grid point,
:math:`\beta(B_K)`), and refines the range where that least is attained while time is left.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np
from numba import njit

from ...bounds import batch_counts, least_bias, request_work
from ...budget import TimeBudget
from ...instance import Instance
from ...schedule import Schedule
from .kvtime import kv_time_count
from .model import linear_instance

__all__ = ["GridPoint", "TrajectoryBound", "TrajectoryLP", "extras", "schedule_trajectories", "trajectory_bound"]

_INF = 1e300
#: Target number of buckets of LP(B) (batches per bucket: ceil(B / BUCKETS)).
BUCKETS = 64
#: Trajectories added per class and pricing (the least reduced costs over their last batch).
COLUMNS_PER_CLASS = 4
#: Weight of the best multipliers in the pricing point (Wentges' smoothing).
SMOOTHING = 0.5
#: Share of the time left that one LP(B) may take (later grid points need time too).
LP_SHARE = 0.3
#: Share of the time that LP(B) at the least batch count may take (it decides whether to go on)...
FLOOR_SHARE = 0.1
#: ... when the KV-time count is at most this multiple of the other counts (memory barely binds).
FLOOR_CHECK = 1.01
#: Relative safety margin taken off every Lagrangian value (floating-point error of the sums).
SAFETY = 1e-9

NONE, FILL, DECODE, IDLE = 0, 1, 2, 3


def extras(instance: Instance, prompt: int, output: int) -> tuple[np.ndarray, np.ndarray]:
    r"""(rho, delta) of a request: ``rho[g]``, ``delta[g]`` the extras over W of generating token g
    by a refill, by a decode (g = 2..O; entries 0 and 1 are 0; module docstring)."""
    cm = instance.cost_model
    L, a, pa, pq = cm.layers, cm.per_token, cm.prefill.per_token, cm.prefill.per_token_sq
    da, dk = cm.decode.per_token, cm.decode.per_kv
    g = np.arange(output + 1, dtype=np.float64)
    refill = L * (a + pa + pq) * (prompt + g - 1)
    decode = L * (a + da + dk * (prompt + g - 2))
    least = np.minimum(refill, decode)
    rho, delta = np.maximum(0.0, refill - least), np.maximum(0.0, decode - least)
    rho[:2] = 0.0
    delta[:2] = 0.0
    return rho, delta


@njit(cache=True)
def least_trajectory_cost(I, O, T, mu, rv, iv, rho, dex):  # noqa: ANN001, ANN202 - numba kernel
    """Least reduced cost of a trajectory of a request (I, O) over T batches finishing in each batch.

    ``mu``, ``rv``, ``iv``: per batch, the multipliers of KV, running and generating requests;
    ``rho``, ``dex``: the extras. States between batches: ``U[g]`` (none, g tokens) and ``R[g]``
    (in decode phase holding its KV, g >= 1). Returns ``fin[t]`` (least cost finishing in batch t)
    and the choices to rebuild each path (:func:`trajectory_of`).
    """
    U = np.full(O, _INF)
    R = np.full(O, _INF)
    U[0] = 0.0
    ch_u = np.zeros((T, O), np.int8)  # into U[g]: 0 from U[g], 1 from R[g]
    ch_r = np.zeros((T, O), np.int8)  # into R[g]: 0 fill from U[g-1], 1 fill from R[g-1], 2 decode, 3 idle
    fin = np.full(T, _INF)
    ch_f = np.zeros(T, np.int8)  # last token: 0 fill from U, 1 fill from R, 2 decode
    for t in range(T):
        nu = np.full(O, _INF)
        nr = np.full(O, _INF)
        for g in range(O):
            a = U[g]
            b = R[g]
            src = 0 if a <= b else 1
            best = a if a <= b else b
            if best < nu[g]:
                nu[g] = best
                ch_u[t, g] = src
            if best >= _INF:
                continue
            held = I + g  # KV after processing a token generated here
            c = best + (rho[g + 1] if g >= 1 else 0.0) + mu[t] * held + rv[t] + iv[t]
            if g + 1 == O:
                if c < fin[t]:
                    fin[t] = c
                    ch_f[t] = src
            elif c < nr[g + 1]:
                nr[g + 1] = c
                ch_r[t, g + 1] = src
            if b < _INF and g >= 1:
                c = b + dex[g + 1] + mu[t] * held + rv[t] + iv[t]
                if g + 1 == O:
                    if c < fin[t]:
                        fin[t] = c
                        ch_f[t] = 2
                elif c < nr[g + 1]:
                    nr[g + 1] = c
                    ch_r[t, g + 1] = 2
                c = b + mu[t] * (held - 1) + rv[t]
                if c < nr[g]:
                    nr[g] = c
                    ch_r[t, g] = 3
        U = nu
        R = nr
    return fin, ch_u, ch_r, ch_f


@njit(cache=True)
def trajectory_of(O, T, ch_u, ch_r, ch_f, end):  # noqa: ANN001, ANN202
    """The trajectory finishing in batch ``end``: action and tokens generated after each batch."""
    act = np.zeros(T, np.int8)
    gen = np.full(T, O, np.int64)
    c = ch_f[end]
    act[end] = FILL if c < 2 else DECODE
    g = O - 1
    resident = c != 0
    for t in range(end - 1, -1, -1):
        gen[t] = g
        if resident:
            k = ch_r[t, g]
            if k == 3:
                act[t] = IDLE
            else:
                act[t] = FILL if k < 2 else DECODE
                resident = k != 0
                g -= 1
        else:
            act[t] = NONE
            resident = ch_u[t, g] == 1
    return act, gen


@dataclass
class _Class:
    """Requests of equal prompt and output lengths: their count and extras."""

    prompt: int
    output: int
    count: int
    rho: np.ndarray
    dex: np.ndarray
    pool: list[np.ndarray] = field(default_factory=list)  # actions of trajectories found (any length)


def trajectory_usage(prompt: int, act: np.ndarray, gen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per batch: KV, running and generating requests of a trajectory."""
    held = (act != NONE) * (prompt + gen - 1)
    return (
        held.astype(np.float64),
        (act != NONE).astype(np.float64),
        ((act == FILL) | (act == DECODE)).astype(np.float64),
    )


def trajectory_extras(cls: _Class, act: np.ndarray, gen: np.ndarray) -> float:
    """The extras of a trajectory."""
    refill = (act == FILL) & (gen >= 2)
    return float(cls.rho[gen[refill]].sum() + cls.dex[gen[act == DECODE]].sum())


def generated_after(act: np.ndarray, output: int) -> np.ndarray:
    """Tokens generated after each batch of a trajectory given by its actions."""
    return np.minimum(np.cumsum((act == FILL) | (act == DECODE)), output).astype(np.int64)


@dataclass(frozen=True)
class GridPoint:
    """E(B) at one B: the proven bound (Lagrangian) and the restricted master's value."""

    batches: int
    bound: float
    master: float
    solved: bool


class TrajectoryLP:
    """LP(B) for the requests of an instance (module docstring), solved by column generation.

    The trajectories found are kept per class and seed every later LP(B') they fit in.
    """

    def __init__(self, instance: Instance) -> None:
        instance = linear_instance(instance)  # the costs every bound reads (.model docstring)
        lim = instance.limits
        self.M = float(lim.kv_capacity) if lim.kv_capacity is not None else math.inf
        self.R = float(lim.max_running) if lim.max_running is not None else math.inf
        self.C = float(lim.token_budget)
        groups: dict[tuple[int, int], int] = {}
        for r in instance.requests:
            groups[(r.prompt_tokens, r.output_tokens)] = groups.get((r.prompt_tokens, r.output_tokens), 0) + 1
        self.classes = [_Class(I, O, n, *extras(instance, I, O)) for (I, O), n in sorted(groups.items())]
        cm = instance.cost_model
        #: Least overhead of a batch, L (b + min(pb, db)).
        self.cost_per_batch = cm.least_overhead()
        self.points: dict[int, GridPoint] = {}
        #: Per B solved, the master's last solution: (class, actions, weight) of its columns in use.
        self.solutions: dict[int, list[tuple[int, np.ndarray, float]]] = {}

    def _rows(self) -> list[tuple[str, float]]:
        """The bucket row kinds that can bind: (name, capacity per batch)."""
        n = sum(c.count for c in self.classes)
        rows = [("kv", self.M)]
        if self.R < n:
            rows.append(("run", self.R))
        if self.C < n:
            rows.append(("gen", self.C))
        return rows

    def solve(self, batches: int, budget: TimeBudget) -> GridPoint:
        """E(B) for B = ``batches``: column generation until optimal or ``budget`` expires."""
        T = batches
        delta = max(1, math.ceil(T / BUCKETS))
        bucket = np.arange(T) // delta
        nb = int(bucket[-1]) + 1
        size = np.bincount(bucket).astype(np.float64)
        rows = self._rows()
        caps = np.concatenate([cap * size for _, cap in rows])
        nrow = len(caps)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")
        h.setOptionValue("simplex_strategy", 1)
        inf = highspy.kHighsInf
        art = max(1.0, sum(c.count for c in self.classes)) / caps.clip(min=1.0)  # slack cost per unit
        h.addVars(nrow, np.zeros(nrow), np.full(nrow, inf))
        h.changeColsCost(nrow, np.arange(nrow, dtype=np.int32), art)
        for k in range(nrow):  # slack_k - usage_k >= -cap_k
            h.addRow(-caps[k], inf, 1, np.array([k], dtype=np.int32), np.array([1.0]))
        for c in self.classes:
            h.addRow(c.count, c.count, 0, np.array([], dtype=np.int32), np.array([]))
        seen: set[bytes] = set()
        columns: list[tuple[int, np.ndarray]] = []  # (class, actions) of each master column, in order

        def usage(c: _Class, act: np.ndarray, gen: np.ndarray) -> np.ndarray:
            kv, run, gen_items = trajectory_usage(c.prompt, act, gen)
            parts = {"kv": kv, "run": run, "gen": gen_items}
            return np.concatenate([np.bincount(bucket, weights=parts[name], minlength=nb) for name, _ in rows])

        def add(ci: int, act: np.ndarray, gen: np.ndarray, use: np.ndarray) -> bool:
            key = ci.to_bytes(4, "little") + act.tobytes()
            if key in seen:
                return False
            seen.add(key)
            nz = np.nonzero(use)[0]
            idx = np.concatenate([nz, [nrow + ci]]).astype(np.int32)
            val = np.concatenate([-use[nz], [1.0]])
            h.addCol(trajectory_extras(self.classes[ci], act, gen), 0.0, inf, len(idx), idx, val)
            columns.append((ci, act))
            return True

        for ci, c in enumerate(self.classes):  # seed: trajectories found before that fit in T
            for act in c.pool:
                if len(act) <= T:
                    full_act = np.zeros(T, np.int8)
                    full_act[: len(act)] = act
                    gen = generated_after(full_act, c.output)
                    add(ci, full_act, gen, usage(c, full_act, gen))
        best, center, master = -math.inf, None, math.inf
        zero = np.zeros(nrow)
        best, found = self._price_all(T, bucket, nb, rows, zero, caps)
        for ci, act, gen in found:
            add(ci, act, gen, usage(self.classes[ci], act, gen))
        solved = False
        while True:
            h.run()
            master = h.getInfo().objective_function_value
            duals = np.array(h.getSolution().row_dual)
            u = np.maximum(0.0, duals[:nrow])
            sigma = duals[nrow:]
            point = u if center is None else SMOOTHING * center + (1 - SMOOTHING) * u
            added = 0
            for _attempt in range(2):
                lb, found = self._price_all(T, bucket, nb, rows, point, caps)
                if lb > best:
                    best, center = lb, point
                for ci, act, gen in found:
                    use = usage(self.classes[ci], act, gen)
                    red = trajectory_extras(self.classes[ci], act, gen) + float(u @ use) - sigma[ci]
                    if red < -1e-12 * max(1.0, abs(master)) and add(ci, act, gen, use):
                        added += 1
                        self.classes[ci].pool.append(act[: int(np.max(np.nonzero(act)[0])) + 1].copy())
                if added or point is u:
                    break
                point = u
            if not added and point is u:
                solved = True
                break
            if budget.expired():
                break
        bound = max(0.0, best - SAFETY * max(1.0, abs(best)))
        if batches in self.points:  # solved again with more time: keep the better bound
            bound = max(bound, self.points[batches].bound)
        gp = GridPoint(batches, bound, master, solved)
        self.points[batches] = gp
        weights = np.array(h.getSolution().col_value)[nrow:]
        self.solutions[batches] = [(ci, act, float(w)) for (ci, act), w in zip(columns, weights) if w > 1e-9]
        return gp

    def _price_all(self, T, bucket, nb, rows, u, caps):  # noqa: ANN001, ANN202
        """L(u) and, per class, the trajectories of least reduced cost (up to COLUMNS_PER_CLASS)."""
        dual = {name: u[k * nb : (k + 1) * nb][bucket] for k, (name, _) in enumerate(rows)}
        zero = np.zeros(T)
        mu, rv, iv = dual.get("kv", zero), dual.get("run", zero), dual.get("gen", zero)
        total = -float(u @ caps)
        found = []
        for ci, c in enumerate(self.classes):
            fin, ch_u, ch_r, ch_f = least_trajectory_cost(c.prompt, c.output, T, mu, rv, iv, c.rho, c.dex)
            if not np.isfinite(fin).any() or fin.min() >= _INF:
                return -math.inf, []  # the class cannot finish within T batches: LP(B) infeasible
            total += c.count * float(fin.min())
            for end in np.argsort(fin, kind="stable")[: max(COLUMNS_PER_CLASS, 40 // len(self.classes))]:
                if fin[end] >= _INF:
                    break
                act, gen = trajectory_of(c.output, T, ch_u, ch_r, ch_f, int(end))
                found.append((ci, act, gen))
        return total, found


@dataclass(frozen=True)
class TrajectoryBound:
    """The trajectory bound on the makespan and how it was reached."""

    value: float
    points: tuple[GridPoint, ...]
    batch_floor: int
    batch_ceiling: int
    kv_time: int
    #: (seconds since the start, the bound then) after each LP(B) solved.
    history: tuple[tuple[float, float], ...] = ()


def _combined(instance: Instance, W: float, points: dict[int, GridPoint], floor: int, ceiling: int) -> float:
    """The least makespan bound over B >= ``floor`` from E at the grid ``points`` (module docstring)."""
    grid = sorted(b for b in points if floor <= b)
    starts = [floor] + grid
    values = []
    for k, lo in enumerate(starts):
        value = least_bias(instance, batch_floor=lo)
        if k < len(grid) and points[grid[k]].bound > 0:
            value = max(value, least_bias(instance, batch_floor=lo, refills=False) + points[grid[k]].bound)
        values.append(value)
        if lo > ceiling:
            break
    return W + min(values)


def _next_batches(instance: Instance, lp: TrajectoryLP, floor: int, ceiling: int) -> int | None:
    """The next B to solve LP(B) at: the middle of the range [B_k, B_k+1) of least value (module
    docstring); when that range is a single B, its end again if LP(B_k+1) is not solved yet (its
    columns carry over), else None (no range can be refined)."""
    grid = sorted(b for b in lp.points if floor < b <= ceiling)
    starts = [floor] + grid
    best_k, best_v = None, math.inf
    for k, hi in enumerate(grid):
        lo = starts[k]
        v = max(
            least_bias(instance, batch_floor=lo),
            least_bias(instance, batch_floor=lo, refills=False) + lp.points[hi].bound,
        )
        if v < best_v:
            best_k, best_v = k, v
    if best_k is None:
        return None
    lo, hi = starts[best_k], grid[best_k]
    if hi - lo >= 2:
        return (lo + hi) // 2
    return hi if not lp.points[hi].solved else None


def trajectory_bound(
    instance: Instance,
    upper: float,
    budget: TimeBudget,
    lp: TrajectoryLP | None = None,
    seed: list[Schedule] | None = None,
) -> TrajectoryBound:
    """The makespan bound of the module docstring, refined until ``budget`` expires.

    ``upper``: the best known makespan (schedules with more batches than it allows are not
    searched: their bound is above it). ``seed``: schedules whose trajectories start the column pools.
    """
    t0 = time.perf_counter()
    instance = linear_instance(instance)
    lp = lp or TrajectoryLP(instance)
    W = float(request_work(instance).sum())
    cm = instance.cost_model
    kappa = cm.least_overhead()
    kv = kv_time_count(instance)
    floor = max(batch_counts(instance)[0], kv)
    ceiling = max(floor, int((upper - W) / kappa) if kappa > 0 else floor)
    for schedule in seed or []:
        for ci, act in schedule_trajectories(instance, schedule, lp):
            lp.classes[ci].pool.append(act)
    if instance.limits.kv_capacity is None:
        return TrajectoryBound(W + least_bias(instance, batch_floor=floor), (), floor, ceiling, kv)
    if kv <= FLOOR_CHECK * batch_counts(instance)[0]:  # memory barely binds: is E already 0 at the floor?
        point = lp.solve(floor, budget.share(FLOOR_SHARE))
        if point.solved and point.bound <= 0.0:  # then E = 0 for every B
            return TrajectoryBound(W + least_bias(instance, batch_floor=floor), (point,), floor, ceiling, kv)
    B: int | None = ceiling
    history: list[tuple[float, float]] = []
    while B is not None:
        left = budget.left()
        if left is not None and (left <= 0 or budget.expired()):
            break
        lp.solve(B, budget if left is None else budget.within(max(LP_SHARE * left, 1.0)))

        history.append((round(time.perf_counter() - t0, 3), _combined(instance, W, lp.points, floor, ceiling)))
        B = _next_batches(instance, lp, floor, ceiling)
    value = _combined(instance, W, lp.points, floor, ceiling)
    return TrajectoryBound(value, tuple(lp.points[b] for b in sorted(lp.points)), floor, ceiling, kv, tuple(history))


def schedule_trajectories(instance: Instance, schedule: Schedule, lp: TrajectoryLP) -> list[tuple[int, np.ndarray]]:
    """(class index, actions) of every request of a schedule that replays cleanly, over its
    non-empty batches (module docstring): the map from schedules to points of LP(B)."""
    index = {r.id: i for i, r in enumerate(instance.requests)}
    cls_of = {(c.prompt, c.output): k for k, c in enumerate(lp.classes)}
    n = len(instance.requests)
    m = np.zeros(n, np.int64)
    prompt = np.array([r.prompt_tokens for r in instance.requests], np.int64)
    out = np.array([r.output_tokens for r in instance.requests], np.int64)
    gen = np.zeros(n, np.int64)
    acts: list[np.ndarray] = []
    for batch in schedule.batches:
        for rid in batch.evict:
            i = index[rid]
            if m[i] >= prompt[i]:
                prompt[i] = m[i] + 1
            m[i] = 0
        if not batch.items:
            continue
        act = np.where((m > 0) & (m >= prompt) & (gen < out), IDLE, NONE).astype(np.int8)
        for item in batch.items:
            i = index[item.id]
            if m[i] < prompt[i]:
                m[i] += item.tokens
                act[i] = FILL if m[i] == prompt[i] else NONE
            else:
                m[i] += 1
                act[i] = DECODE
            if act[i] != NONE:
                gen[i] += 1
        m[gen == out] = 0
        acts.append(act)
    table = np.array(acts, dtype=np.int8).T if acts else np.zeros((n, 0), np.int8)
    return [(cls_of[(r.prompt_tokens, r.output_tokens)], table[i]) for i, r in enumerate(instance.requests)]

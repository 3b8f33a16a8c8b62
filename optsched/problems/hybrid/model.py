r"""The full MIP (1)-(25) of the Hybrid paper with the fixes of docs/hybrid.md, solved and replayed.

Sets: requests ``i`` (I), clients ``j`` (J = ``limits.max_running``), bins ``k = 1..K`` (one prefill stage then
one decode stage each; default K = I, which never cuts off an optimum, fix M3), prefill levels ``l``.
Parameters: ``N^p_i`` prompt tokens; ``D_i = N^d_i - 1`` decode rounds (fix A7: the contract's prefill
emits the first token); levels ``(N^cap_l, T^p_l)`` with level 0 = (0, 0) (fix M3, :mod:`.timing`);
``tau_d = alpha_d + beta_d J`` (fix M2).
Variables (Table II): ``x_ij, p_ijk, d_ijk, y_kl`` binary, ``w_ijk`` in [0, 1], ``t^{s,p}_k, t^{s,d}_k, n^p_k,
n^d_k, t^max >= 0``.

Constraints kept in both modes (A3 is ours: the paper's model is offline)::

    (1)  min t^max
    (2)  t^max >= t^{s,d}_k + n^d_k                                  all k
    (3)  t^{s,p}_k >= t^{s,d}_{k-1} + n^d_{k-1}                       k >= 2
    (4)  t^{s,d}_k >= t^{s,p}_k + n^p_k                               all k
    (9)  d_ijk >= p_ijk
    (12) sum_i d_ijk <= 1                                             all j, k
    (14) sum_k w_ijk = x_ij ;  (17) sum_k p_ijk = x_ij (fix M5: for all i, j) ;  (18) sum_j x_ij = 1
    (A1) w_ijk <= d_ijk                                               (fix M1)
    (A3) t^{s,p}_k >= a_i sum_j p_ijk                                 all i with a_i > 0, k
         (release times: a stage starts after its requests arrive; the schedule's prefill batch
         waits for them)

``mode='faithful'`` adds the paper's remaining constraints as printed (with M = K, fix M4): contiguity (10)
``M(2 - d_ijk1 - d_ijk2) + sum_{k'=k1..k2} d_ijk' >= k2 - k1 + 1`` for k1 < k2, precedence (11)
``M(p_ijk1 - 1) + d_ijk2 <= 0`` for k1 > k2, and the redundant (13), (15), (16) (fix M8). It has
O(I J K^2) rows, so it is built only when I J K^2 <= :data:`FAITHFUL_MAX_ROWS`.

``mode='strengthened'`` replaces (10)-(11) by the start indicator ``d_ijk - d_ij(k-1) <= p_ijk``
(``d_ij0 = 0``; with (17) occupancy switches on once, at the prefill bin: fix M4's alternative), adds
(A2) ``d_ijk <= x_ij``, drops (13), (15), (16), and breaks symmetry: ``x_ij = 0`` for j > i (clients are
identical; label them by their lowest request) and "bin k used" >= "bin k+1 used". With the contract time
model it also adds the strict bound's counts as cuts: ``sum_k u_k >= ceil(sum_i N^p_i / P)`` and
``sum_k R_k >= C*`` (the P||Cmax lower bound on ``D_i`` with J clients; :mod:`.bounds` proves both), and
``sum_{k' >= k} R_k' >= D_i sum_j p_ijk`` (a request prefilled in bin k decodes D_i rounds from bin k on).

Time models (``time_model``):

- ``paper`` (default of ``faithful``): (5) ``n^p_k >= sum_l T^p_l y_kl``, (6) ``sum_ij N^p_i p_ijk <= sum_l
  N^cap_l y_kl``, (7) ``sum_l y_kl = 1``, (8') ``n^d_k >= tau_d sum_i D_i w_ijk`` for every j. This
  over-estimates the replayed time (a stage costs its level's time, every round the full-batch tau_d) but
  rounds may be fractional; the replayed schedule uses ``ceil`` rounds per stage, so its makespan can
  exceed t^max: the MIP's value is then only an approximation and is reported as such.
- ``contract`` (default of ``strengthened``): the contract's cost on pure batches (:mod:`.timing`) is
  affine, so with ``u_k`` = "prefill stage k used" and integer rounds ``R_k``:
  ``n^p_k = alpha_p u_k + beta_p sum_ij N^p_i p_ijk`` with ``sum_ij N^p_i p_ijk <= P u_k`` (P the stage
  capacity; replaces (5)-(7)), and ``n^d_k = alpha_d R_k + beta_d sum_ij D_i w_ijk`` with
  ``R_k >= sum_i D_i w_ijk`` for every j (integer version of (8')). Its t^max is exactly the replayed
  makespan of the schedule built below (whenever the profile is linear, :attr:`HybridTiming.linear`).

Schedule (both modes): bin k becomes one prefill batch (the requests with ``p_ijk = 1``) followed by
``ceil(max_j sum_i D_i w_ijk - 1e-3)`` decode rounds (the tolerance absorbs solver round-off; rounds
still owed after the last bin are appended and counted in ``meta.tail_rounds``) in which every prefilled, unfinished
request decodes (eager; a request then finishes no later than the MIP says, so clients free up in time and at most J
requests run). Empty rounds are dropped. The schedule is replayed; the reported objective is the replayed
makespan. Model space (what "optimal" refers to): PD-Competition schedules without evictions in which
each prompt is prefilled whole in one stage and at most J requests run. The reported bound is the
largest of the proven ``strict`` bound (:mod:`.bounds`, valid for all eviction-free schedules), the
generic bounds of :mod:`optsched.bounds` (every schedule; they see arrivals) and, for
``time_model='contract'`` with K >= I, the MIP's dual bound (valid on the model space).
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...budget import NO_LIMIT, TimeBudget
from ...instance import Instance
from ...mipsolvers import pulp_solver, solve_model
from ...result import Status
from ...schedule import Batch, Item, Schedule
from .pcmax import solve_pcmax
from .timing import decode_rounds, timing_of

__all__ = ["HybridMIP", "build", "extract_stages", "run_backend", "stages_to_schedule", "warm_start_values"]

#: Largest I * J * K^2 for which the faithful big-M rows (10)-(11) are built.
FAITHFUL_MAX_ROWS = 3_000_000
#: Largest number of (request, client, stage) triples (each has three variables p, d, w) for which
#: the MIP is built: about 20 s of building (80 requests with J = K = 80: 260,000 triples, 55 s).
MAX_STAGE_TRIPLES = 100_000
MODES = ("faithful", "strengthened")
#: Decode work within this many rounds of an integer is solver round-off (MIP feasibility tolerances).
ROUND_TOL = 1e-3
TIME_MODELS = ("paper", "contract")


@dataclass
class HybridMIP:
    """A built PuLP model with handles on its variables."""

    prob: Any
    x: dict[tuple[int, int], Any]
    p: dict[tuple[int, int, int], Any]
    w: dict[tuple[int, int, int], Any]
    tmax: Any
    bins: int
    clients: int
    mode: str
    time_model: str


def build(
    instance: Instance,
    mode: str = "strengthened",
    time_model: str | None = None,
    bins: int | None = None,
    budget: TimeBudget = NO_LIMIT,
) -> HybridMIP:
    """Build the MIP (module docstring) for ``instance`` with PuLP; raises
    :class:`~optsched.deadline.DeadlinePassed` once ``budget`` has expired."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    time_model = time_model or ("paper" if mode == "faithful" else "contract")
    if time_model not in TIME_MODELS:
        raise ValueError(f"unknown time model {time_model!r} (known: {', '.join(TIME_MODELS)})")
    b = _Builder(instance, mode, bins, budget)
    b.stage_timeline()  # (1)-(4), (A3)
    used, rounds = b.stage_times_paper() if time_model == "paper" else b.stage_times_contract()  # (5)-(8')
    b.assignment_rows()  # (9), (12), (14), (17), (18), (A1)
    if mode == "strengthened":
        b.strengthening(used, rounds if time_model == "contract" else None)
    else:
        b.faithful_big_m_rows()  # (10), (11), (13), (15), (16)
    return HybridMIP(b.prob, b.x, b.p, b.w, b.tmax, b.K, b.J, mode, time_model)


class _Builder:
    """The MIP's index sets and variables (``x``, ``p``, ``d``, ``w``, stage times), and one method per
    group of rows; ``budget`` is checked while building."""

    def __init__(self, instance: Instance, mode: str, bins: int | None, budget: TimeBudget) -> None:
        import pulp

        self.budget = budget
        self.tm = tm = timing_of(instance)
        reqs = instance.requests
        self.n, self.J = n, J = len(reqs), tm.clients
        self.K = K = bins or n
        self.Np = [r.prompt_tokens for r in reqs]
        self.D = [decode_rounds(r.output_tokens) for r in reqs]
        self.arrival = [r.arrival for r in reqs]
        if any(v > tm.prefill_cap for v in self.Np):
            raise ValueError("a prompt exceeds the prefill stage capacity; the MIP prefills each prompt in one stage")
        if mode == "faithful" and n * J * K * K > FAITHFUL_MAX_ROWS:
            raise ValueError(
                f"faithful mode has O(I J K^2) = {n * J * K * K} big-M rows (> {FAITHFUL_MAX_ROWS}); "
                "use mode='strengthened'"
            )
        strong = mode == "strengthened"
        self.cl = {i: [j for j in range(J) if not strong or j <= i] for i in range(n)}  # x_ij = 0 for j > i
        triples = sum(len(c) for c in self.cl.values()) * K
        if triples > MAX_STAGE_TRIPLES:
            raise ValueError(
                f"the MIP has {triples} (request, client, stage) triples (> {MAX_STAGE_TRIPLES}: I = {n}, J = {J}, "
                f"K = {K}); use problem 'hybrid-offline', fewer requests (--first N), clients (limits.max_running) "
                "or stages (option bins)"
            )
        self.keys = [(i, j, k) for i in range(n) for j in self.cl[i] for k in range(K)]
        self.prob = prob = pulp.LpProblem("hybrid_full_mip", pulp.LpMinimize)
        self.x = {(i, j): prob.add_variable(f"x_{i}_{j}", cat="Binary") for i in range(n) for j in self.cl[i]}
        self.p = self._per_triple("p", cat="Binary")
        self.d = self._per_triple("d", cat="Binary")
        self.w = self._per_triple("w", lowBound=0, upBound=1)
        self.tsp = [prob.add_variable(f"tsp_{k}", lowBound=0) for k in range(K)]
        self.tsd = [prob.add_variable(f"tsd_{k}", lowBound=0) for k in range(K)]
        self.npk = [prob.add_variable(f"np_{k}", lowBound=0) for k in range(K)]
        self.ndk = [prob.add_variable(f"nd_{k}", lowBound=0) for k in range(K)]
        self.tmax = prob.add_variable("tmax", lowBound=0)
        self.tokens = []
        for k in range(K):
            budget.check()
            self.tokens.append(pulp.lpSum(self.Np[i] * self.p[i, j, k] for i in range(n) for j in self.cl[i]))

    def _per_triple(self, name: str, **kind: Any) -> dict[tuple[int, int, int], Any]:
        out = {}
        for n_made, key in enumerate(self.keys):
            if n_made % 4096 == 0:
                self.budget.check()
            out[key] = self.prob.add_variable(f"{name}_{key[0]}_{key[1]}_{key[2]}", **kind)
        return out

    def stage_timeline(self) -> None:
        """(1) the objective, (2)-(4) the stages in sequence, (A3) release times."""
        import pulp

        prob, tsp, tsd, npk, ndk, tmax = self.prob, self.tsp, self.tsd, self.npk, self.ndk, self.tmax
        prob += tmax  # (1)
        for k in range(self.K):
            self.budget.check()
            prob += tmax >= tsd[k] + ndk[k]  # (2)
            if k >= 1:
                prob += tsp[k] >= tsd[k - 1] + ndk[k - 1]  # (3)
            prob += tsd[k] >= tsp[k] + npk[k]  # (4)
            for i in range(self.n):
                if self.arrival[i] > 0:  # (A3) release times (extension; the paper is offline)
                    prob += tsp[k] >= self.arrival[i] * pulp.lpSum(self.p[i, j, k] for j in self.cl[i])

    def _client_work(self, j: int, k: int) -> Any:
        """Decode rounds of client ``j``'s requests in bin ``k``: ``sum_i D_i w_ijk``."""
        import pulp

        return pulp.lpSum(self.D[i] * self.w[i, j, k] for i in range(self.n) if (i, j, k) in self.w)

    def stage_times_paper(self) -> tuple[list[Any], None]:
        """(5)-(7) the prefill time by levels, (8') the decode time with ``tau_d`` (fix M2); the bins used."""
        import pulp

        prob, tm = self.prob, self.tm
        levels = tm.levels()
        L = range(len(levels))
        y = {(k, l): prob.add_variable(f"y_{k}_{l}", cat="Binary") for k in range(self.K) for l in L}
        for k in range(self.K):
            self.budget.check()
            prob += self.npk[k] >= pulp.lpSum(levels[l][1] * y[k, l] for l in L)  # (5)
            prob += self.tokens[k] <= pulp.lpSum(levels[l][0] * y[k, l] for l in L)  # (6)
            prob += pulp.lpSum(y[k, l] for l in L) == 1  # (7)
            for j in range(self.J):  # (8') with tau_d (fix M2)
                prob += self.ndk[k] >= tm.tau_d * self._client_work(j, k)
        return [1 - y[k, 0] for k in range(self.K)], None

    def stage_times_contract(self) -> tuple[list[Any], list[Any]]:
        """The contract's affine stage times: bins used ``u_k`` and integer rounds ``R_k``."""
        import pulp

        prob, tm = self.prob, self.tm
        used = [prob.add_variable(f"u_{k}", cat="Binary") for k in range(self.K)]
        rounds = [prob.add_variable(f"R_{k}", lowBound=0, cat="Integer") for k in range(self.K)]
        for k in range(self.K):
            self.budget.check()
            prob += self.tokens[k] <= tm.prefill_cap * used[k]
            prob += self.npk[k] == tm.alpha_p * used[k] + tm.beta_p * self.tokens[k]
            work = pulp.lpSum(self.D[i] * self.w[i, j, k] for i in range(self.n) for j in self.cl[i])
            prob += self.ndk[k] == tm.alpha_d * rounds[k] + tm.beta_d * work
            for j in range(self.J):  # integer (8'): R_k rounds cover every client's decode work in bin k
                prob += rounds[k] >= self._client_work(j, k)
        return used, rounds

    def assignment_rows(self) -> None:
        """(9), (A1) fix M1, (12), (18), (14) and (17) (fix M5)."""
        import pulp

        prob, x, p, d, w = self.prob, self.x, self.p, self.d, self.w
        for i, j, k in self.keys:
            self.budget.check()
            prob += d[i, j, k] >= p[i, j, k]  # (9)
            prob += w[i, j, k] <= d[i, j, k]  # (A1) fix M1
        for j in range(self.J):
            self.budget.check()
            for k in range(self.K):
                prob += pulp.lpSum(d[i, j, k] for i in range(self.n) if (i, j, k) in d) <= 1  # (12)
        for i in range(self.n):
            self.budget.check()
            prob += pulp.lpSum(x[i, j] for j in self.cl[i]) == 1  # (18)
            for j in self.cl[i]:
                prob += pulp.lpSum(w[i, j, k] for k in range(self.K)) == x[i, j]  # (14)
                prob += pulp.lpSum(p[i, j, k] for k in range(self.K)) == x[i, j]  # (17), fix M5

    def strengthening(self, used: list[Any], rounds: list[Any] | None) -> None:
        """The strengthened mode's rows: start indicators (M4), (A2), used bins first, and with the
        contract's time model (``rounds`` given) the strict bound's stage and round counts as cuts."""
        import pulp

        prob, p, d, x = self.prob, self.p, self.d, self.x
        for i, j, k in self.keys:
            self.budget.check()
            prob += d[i, j, k] - (d[i, j, k - 1] if k else 0) <= p[i, j, k]  # start indicator (M4)
            prob += d[i, j, k] <= x[i, j]  # (A2)
        for k in range(self.K - 1):
            prob += used[k] >= used[k + 1]  # used bins first
        if rounds is None:
            return
        # valid cuts: the strict bound's stage and round counts (bounds.py)
        prob += pulp.lpSum(used) >= math.ceil(sum(self.Np) / self.tm.prefill_cap)
        prob += pulp.lpSum(rounds) >= solve_pcmax(self.D, self.J, budget=self.budget.within(5.0)).bound
        for i in range(self.n):  # a request prefilled in bin k still needs D_i rounds from bin k on
            self.budget.check()
            for k in range(self.K):
                prob += pulp.lpSum(rounds[k:]) >= self.D[i] * pulp.lpSum(p[i, j, k] for j in self.cl[i])

    def faithful_big_m_rows(self) -> None:
        """The paper's big-M rows (10), (11) with M = K (fix M4), (13), (15) and (16)."""
        import pulp

        prob, p, d, w, K = self.prob, self.p, self.d, self.w, self.K
        M = K  # fix M4
        for i in range(self.n):
            self.budget.check()
            for j in range(self.J):
                for k1 in range(K):
                    for k2 in range(k1 + 1, K):  # (10)
                        prob += (
                            M * (2 - d[i, j, k1] - d[i, j, k2]) + pulp.lpSum(d[i, j, kk] for kk in range(k1, k2 + 1))
                            >= k2 - k1 + 1
                        )
                        prob += M * (p[i, j, k2] - 1) + d[i, j, k1] <= 0  # (11) with k1' = k2 > k2' = k1
                prob += pulp.lpSum(d[i, j, k] for k in range(K)) <= K  # (13)
            prob += pulp.lpSum(w[i, j, k] for j in range(self.J) for k in range(K)) == 1  # (15)
        for j in range(self.J):
            for k in range(K):
                prob += pulp.lpSum(p[i, j, k] for i in range(self.n)) <= 1  # (16)


def stages_to_schedule(instance: Instance, stages: list[tuple[list[int], int]], meta: dict[str, Any]) -> Schedule:
    """Bins ``(requests prefilled, decode rounds)`` -> batches: one prefill batch, then eager decode rounds.

    A prefill batch whose requests arrive after the previous batch ends carries ``start`` = the
    latest arrival among them (row A3); the clock follows the contract's batch times.
    """
    reqs = instance.requests
    cost = instance.cost_model
    left = [decode_rounds(r.output_tokens) for r in reqs]
    held = [0] * len(reqs)  # KV slots after the last batch (prompt + tokens generated - 1 once prefilled)
    running: list[int] = []
    batches: list[Batch] = []
    clock = 0.0

    def decode_round() -> None:
        nonlocal clock, running
        batches.append(Batch(tuple(Item(reqs[i].id, 1) for i in running)))
        kv = [held[i] for i in running]
        clock += cost.batch_time(len(running), 0, 0, len(running), sum(kv), 0, max(kv, default=0))
        for i in running:
            left[i] -= 1
            held[i] += 1
        running = [i for i in running if left[i] > 0]

    for prefilled, rounds in stages:
        if prefilled:
            release = max(reqs[i].arrival for i in prefilled)
            wait = release if release > clock else None
            batches.append(Batch(tuple(Item(reqs[i].id, reqs[i].prompt_tokens) for i in prefilled), start=wait))
            tokens = [reqs[i].prompt_tokens for i in prefilled]
            clock = max(clock, release) + cost.batch_time(sum(tokens), sum(tokens), sum(t * t for t in tokens), 0, 0)
            for i in prefilled:
                held[i] = reqs[i].prompt_tokens
            running += [i for i in prefilled if left[i] > 0]
        for _ in range(rounds):
            if not running:
                break
            decode_round()
    tail = 0
    while running:  # only from solver round-off in fractional rounds (paper time model); counted in meta
        decode_round()
        tail += 1
    return Schedule(instance.name, tuple(batches), {**meta, "tail_rounds": tail})


def extract_stages(model: HybridMIP, instance: Instance) -> list[tuple[list[int], int]]:
    """Read ``p`` and ``w`` back: per bin the prefilled requests and ``ceil(max_j decode work)`` rounds."""
    D = [decode_rounds(r.output_tokens) for r in instance.requests]
    stages = []
    for k in range(model.bins):
        prefilled = sorted(i for (i, j, kk), v in model.p.items() if kk == k and (v.value() or 0) > 0.5)
        work = [0.0] * model.clients
        for (i, j, kk), v in model.w.items():
            if kk == k:
                work[j] += D[i] * (v.value() or 0.0)
        stages.append((prefilled, math.ceil(max(work) - ROUND_TOL)))
    return stages


def warm_start_values(model: HybridMIP, instance: Instance, schedule: Schedule) -> dict[str, float] | None:
    """MIP variable values (by name) of a policy schedule, or None when it is outside the model space.

    The schedule must consist of pure batches, prefill every prompt whole, and need at most K bins: each
    prefill batch opens a bin, the decode batches up to the next one are its rounds. Clients come from a
    greedy colouring of the requests' bin intervals (at most J overlap since at most J run), relabelled by
    lowest request so that the symmetry breaking ``x_ij = 0, j > i`` holds.
    """
    tm = timing_of(instance)
    reqs = instance.requests
    D = [decode_rounds(r.output_tokens) for r in reqs]
    started: set[int] = set()
    first_bin: dict[int, int] = {}
    counts: list[dict[int, int]] = []  # per bin: request -> decode rounds in it
    rounds_in: list[int] = []  # per bin: decode batches
    tokens: list[int] = []
    for batch in schedule.batches:
        idx = [instance.index(it.id) for it in batch.items]
        pre = [i for i in idx if i not in started]
        if pre:
            if len(pre) != len(idx) or any(it.tokens != reqs[i].prompt_tokens for it, i in zip(batch.items, idx)):
                return None  # hybrid batch or split prompt
            counts.append({})
            rounds_in.append(0)
            tokens.append(sum(reqs[i].prompt_tokens for i in pre))
            for i in pre:
                started.add(i)
                first_bin[i] = len(counts) - 1
        elif idx:
            rounds_in[-1] += 1
            for i in idx:
                counts[-1][i] = counts[-1].get(i, 0) + 1
    nbins = len(counts)
    if nbins > model.bins or len(started) != len(reqs):
        return None
    last_bin = {i: max([k for k in range(nbins) if i in counts[k]], default=first_bin[i]) for i in first_bin}
    free_after = [-1] * model.clients  # last occupied bin of each client
    raw: dict[int, int] = {}
    for i in sorted(first_bin, key=lambda i: (first_bin[i], i)):
        c = next((c for c in range(model.clients) if free_after[c] < first_bin[i]), None)
        if c is None:
            return None
        raw[i], free_after[c] = c, last_bin[i]
    label: dict[int, int] = {}
    for i in sorted(raw):
        label.setdefault(raw[i], len(label))
    vals: dict[str, float] = {}
    work = [[0.0] * model.clients for _ in range(nbins)]
    for i, c0 in raw.items():
        c, b = label[c0], first_bin[i]
        vals[f"x_{i}_{c}"] = 1
        vals[f"p_{i}_{c}_{b}"] = 1
        for k in range(b, last_bin[i] + 1):
            vals[f"d_{i}_{c}_{k}"] = 1
        if D[i] == 0:
            vals[f"w_{i}_{c}_{b}"] = 1
        for k, cnt in ((k, counts[k].get(i, 0)) for k in range(b, last_bin[i] + 1)):
            if cnt:
                vals[f"w_{i}_{c}_{k}"] = cnt / D[i]
                work[k][c] += cnt
    levels = tm.levels()
    t = 0.0
    for k in range(model.bins):
        rounds = rounds_in[k] if k < nbins else 0
        tok = tokens[k] if k < nbins else 0
        if model.time_model == "contract":
            vals[f"u_{k}"] = 1 if k < nbins else 0
            vals[f"R_{k}"] = rounds
            n_p = tm.alpha_p * (k < nbins) + tm.beta_p * tok
            n_d = tm.alpha_d * rounds + tm.beta_d * (sum(work[k]) if k < nbins else 0)
        else:
            lvl = min(l for l in range(len(levels)) if levels[l][0] >= tok)
            vals[f"y_{k}_{lvl}"] = 1
            n_p = levels[lvl][1]
            n_d = tm.tau_d * (max(work[k]) if k < nbins else 0)
        t = max([t] + [reqs[i].arrival for i in first_bin if first_bin[i] == k])  # (A3)
        vals[f"tsp_{k}"], vals[f"np_{k}"] = t, n_p
        vals[f"tsd_{k}"], vals[f"nd_{k}"] = t + n_p, n_d
        t += n_p + n_d
    vals["tmax"] = t
    return vals


def run_backend(
    model: HybridMIP, solver: str, budget: TimeBudget, threads: int | None, warm: dict[str, float] | None = None
) -> tuple[Status, float | None, float | None]:
    """Solve with ``highs, ``cbc`` or ``gurobi`` within ``budget`` (from ``warm`` values if given);
    (status, objective, bound)."""
    import pulp

    if warm is not None:
        for var in model.prob.variables():
            var.setInitialValue(warm.get(var.name, 0.0))
    solver_options = {"budget": budget, "threads": threads or 2, "warm_start": warm is not None}
    if solver == "highs":  # the warm start is a point of the model: "infeasible" is a presolve fault
        solve_model(model.prob, pulp_solver("highs", **solver_options), known_feasible=warm is not None, budget=budget)
        info = model.prob.solverModel.getInfo()
        bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    elif solver == "cbc":
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "cbc.log"
            model.prob.solve(pulp_solver("cbc", logPath=str(log), **solver_options))
            bound = cbc_bound(log.read_text() if log.exists() else "")
    elif solver == "gurobi":
        model.prob.solve(pulp_solver("gurobi", **solver_options))
        grb = model.prob.solverModel
        bound = grb.ObjBound if grb is not None and grb.SolCount > 0 else None
    else:
        raise ValueError(f"unknown backend {solver!r} (known: highs, cbc, gurobi)")
    sol = model.prob.sol_status
    if sol == pulp.LpSolutionOptimal:
        value = model.tmax.value()
        return Status.OPTIMAL, value, value
    if sol == pulp.LpSolutionIntegerFeasible:
        return Status.TIME_LIMIT, model.tmax.value(), bound
    if model.prob.status == pulp.LpStatusInfeasible:
        return Status.INFEASIBLE, None, None
    return Status.TIME_LIMIT, None, bound


def cbc_bound(log: str) -> float | None:
    """CBC's best possible objective from its log (``best possible`` or the optimal objective)."""
    found = re.findall(r"best possible ([-+0-9.eE]+)", log)
    if found:
        return float(found[-1])
    found = re.findall(r"Objective value:\s+([-+0-9.eE]+)", log)
    return float(found[-1]) if found and "Optimal solution found" in log else None

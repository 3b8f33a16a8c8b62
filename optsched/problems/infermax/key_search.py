"""Local search over per-request priority keys on top of the unified scheduler's policies, for
requests that arrive over time (mean latency in the scale phase).

The policy search of :mod:`.online` moves within the unified scheduler's family: every request's
priority is a function of its lengths or arrival (:data:`optsched.policies.config.ORDERS`). Here a
*key plan* is a triple (configuration, admission cap, keys): a
:class:`~optsched.policies.config.PolicyConfig`, an admission cap (at most that many requests hold
KV, :func:`.online.capped`) and one real key k_i per request, the priority order being the requests
sorted by (k_i, arrival, position) (the dynamic key of ``remaining-prefill`` still comes first). The
compiled engine (:func:`optsched.policies.fastsim.simulate_columns` with ``rank``) decodes a plan into
a schedule of the instance, arrivals included, and the plan's value is that schedule's replayed
objective (:func:`optsched.schedule.replay`; any objective, mean latency in the solve). A plan without
keys runs its configuration's own order: the policy's own schedule (the compiled engine's is the
reference engine's, batch for batch), so the search starts at its seeds' schedules and never ends worse.

Start: each seed point (configuration, cap) with its own order and with the keys
I_i + w O_i (prompt plus ``w`` times output tokens: shortest total work first for large ``w``) for
w in :data:`WORK_WEIGHTS`.

:func:`key_search` is an iterated local search with a seeded random generator. Each step makes one
move on the current plan:

- *shift*: one request's key moves by +-2^k positions of the order (k = 0..7);
- *jump*: one request's key is set just before or just after that of a request arriving near it
  (within :data:`NEAR` in arrival order), so that the two swap in the priority order;
- *knob*: one knob of the configuration or the cap changes (:func:`.online.neighbours`,
  :func:`.online.cap_neighbours`), or the batch time budget (``time_budget``: set to
  :data:`TIME_BUDGET`, halved, doubled up to :data:`MAX_TIME_BUDGET`, off), or preemption
  (``evict_for_waiting``, where evictions are allowed).

The requests a *shift* or *jump* moves are drawn with weight their latency beyond their latency alone
in the current schedule plus :data:`FLOOR` of the mean such excess. A move is kept when the plan's
value is not worse; the best plan is remembered. After :data:`STALL` moves in a row without a new
best the current plan returns to the best with :data:`KICK` random shifts; the search ends when the
budget no longer holds two evaluations as slow as the slowest so far (one more and the best plan's
rebuild) or after :data:`ROUNDS` such returns in a row without a new best. This runs from
the best start plan of each distinct (configuration, cap) in turn, best first, at most :data:`STARTS`
of them (the searches from different starts end in different local optima). The best plan's schedule
is returned only when its replayed value is below every seed's.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace

import numpy as np

from ...aotkernels import ahead_of_time
from ...budget import SlowestRun, TimeBudget
from ...instance import Instance
from ...policies.config import POLICY_CONFIGS, PolicyConfig
from ...policies.fastsim import ORDER_KEYS, compiles, simulate_columns
from ...result import objective_of
from ...schedule import Schedule, replay
from .online import cap_neighbours, capped, neighbours
from .search_outcome import SearchOutcome

__all__ = ["KEY_OBJECTIVES", "KEY_SEARCH_SHARE", "key_search", "key_search_phase", "kept_for_key_search"]

#: The objectives for which the scale phase runs the key search after the policy search of :mod:`.online`.
KEY_OBJECTIVES = ("latency",)
#: Share of the time left at the policy search's start that it keeps for the key search (more when the
#: policy search ends sooner).
KEY_SEARCH_SHARE = 0.3

#: Weights w of the start keys I_i + w O_i (module docstring).
WORK_WEIGHTS = (0.0, 1.0, 4.0, 16.0, 64.0, 1e6)
#: Moves in a row without a new best before the current plan returns to the best.
STALL = 400
#: Random shifts that perturb the best plan at such a return.
KICK = 3
#: Returns to the best in a row without a new best that end the search from one start.
ROUNDS = 20
#: Starts of the search, in turn: the best plans of as many distinct (configuration, cap) points.
STARTS = 4
#: A request's weight in the draw of the moves: its latency beyond its latency alone plus this share
#: of the mean such excess (so that every request may be drawn).
FLOOR = 0.1
#: Requests on either side (in arrival order) among which a *jump* picks the other request.
NEAR = 8
#: The time budget (seconds of a batch holding decodes) a *knob* move sets first, and the largest.
TIME_BUDGET, MAX_TIME_BUDGET = 0.02, 0.16
#: Largest k of a *shift* by 2^k positions.
MAX_SHIFT = 7


@dataclass
class _Plan:
    """A key plan: configuration, admission cap (None: R_max) and per-request keys (instance order)."""

    config: PolicyConfig
    cap: int | None
    keys: np.ndarray | None  # None: the configuration's own order

    def with_keys(self, keys: np.ndarray) -> _Plan:
        return _Plan(self.config, self.cap, keys)


class _Evaluator:
    """Decode and replay plans on one instance (module docstring)."""

    def __init__(self, instance: Instance, objective: str, no_evict: bool) -> None:
        self.instance, self.objective, self.no_evict = instance, objective, no_evict
        self.arrival, self.prompt, self.output = (np.asarray(c) for c in instance.columns)
        cm = instance.cost_model
        # about each request's latency alone (its prompt in one batch, its decodes at their mean KV): it aims moves
        self.alone = np.array([
            cm.batch_time(p, p, p * p, 0, 0) + (o - 1) * cm.batch_time(1, 0, 0, 1, p + o // 2, 0, p + o // 2)
            for p, o in zip(self.prompt.tolist(), self.output.tolist())
        ])
        self.position = {r.id: k for k, r in enumerate(instance.requests)}
        self.evaluations = 0
        self.slowest = SlowestRun()  # of the evaluations so far

    def fits(self, budget: TimeBudget) -> bool:
        """Whether one more evaluation and the best plan's rebuild at the end, each taking at most the
        slowest evaluation so far, end within ``budget``."""
        return self.slowest.fits(budget, 2.0)

    def ranks(self, keys: np.ndarray) -> np.ndarray:
        """Each request's position in the order (key, arrival, position)."""
        by_priority = np.lexsort((np.arange(len(keys)), self.arrival, keys))
        rank = np.empty(len(keys), np.int64)
        rank[by_priority] = np.arange(len(keys))
        return rank

    def keys(self, plan: _Plan) -> np.ndarray:
        """The plan's keys as ranks (those of its configuration's order when it has none)."""
        if plan.keys is not None:
            return self.ranks(plan.keys).astype(float)
        columns = ORDER_KEYS[plan.config.order](self.prompt, self.output)
        return self.ranks(columns[0] if columns else np.zeros(len(self.prompt))).astype(float)

    def schedule(self, plan: _Plan) -> Schedule | None:
        """The compiled engine's schedule of the plan (its configuration's own order without keys)."""
        rank = None if plan.keys is None else self.ranks(plan.keys)
        columns = simulate_columns(capped(self.instance, plan.cap), plan.config, rank=rank)
        if columns is None:
            return None
        meta = {"policy": plan.config.name, "policy_config": plan.config.to_dict(), "max_running": plan.cap}
        return Schedule(self.instance.name, meta=meta, columns=columns)

    def evaluate(self, plan: _Plan) -> tuple[float, _Plan, np.ndarray | None]:
        """(replayed objective, plan, each request's latency beyond its latency alone); inf when the plan
        does not decode, does not replay cleanly or evicts where not allowed."""
        self.evaluations += 1
        with self.slowest.timing():
            return self._judged(plan)

    def _judged(self, plan: _Plan) -> tuple[float, _Plan, np.ndarray | None]:
        """:meth:`evaluate` without its count and timing."""
        schedule = self.schedule(plan)
        if schedule is None:
            return math.inf, plan, None
        rep = replay(self.instance, schedule)
        if not rep.feasible or (self.no_evict and rep.metrics.evictions):
            return math.inf, plan, None
        excess = np.zeros(len(self.prompt))
        for rid, outcome in rep.outcomes.items():
            k = self.position[rid]
            excess[k] = max(0.0, outcome.finish - self.arrival[k] - self.alone[k])
        return objective_of(rep, self.objective), plan, excess


class _Moves:
    """The random moves of the search (module docstring)."""

    def __init__(self, ev: _Evaluator, no_evict: bool, no_hybrid: bool, rng: random.Random) -> None:
        self.ev, self.no_evict, self.no_hybrid, self.rng = ev, no_evict, no_hybrid, rng
        self.by_arrival = np.argsort(ev.arrival, kind="stable")
        self.place = np.empty(len(self.by_arrival), np.int64)
        self.place[self.by_arrival] = np.arange(len(self.by_arrival))
        self.cumulative = np.arange(1, len(self.by_arrival) + 1, dtype=float)

    def aim(self, excess: np.ndarray | None) -> None:
        """Draw requests with weight their excess plus :data:`FLOOR` of the mean excess."""
        if excess is not None:
            self.cumulative = np.cumsum(excess + FLOOR * float(excess.mean()) + 1e-12)

    def request(self) -> int:
        return self.rng.choices(range(len(self.cumulative)), cum_weights=self.cumulative)[0]

    def shift(self, plan: _Plan) -> _Plan:
        """One request's key moved by +-2^k positions (keys are re-laid as ranks first)."""
        keys = self.ev.keys(plan)
        keys[self.request()] += self.rng.choice((-1, 1)) * (2 ** self.rng.randint(0, MAX_SHIFT) + 0.5)
        return plan.with_keys(keys)

    def jump(self, plan: _Plan) -> _Plan:
        """One request's key set just before or after that of a request arriving near it."""
        i = self.request()
        n = len(self.place)
        j = self.by_arrival[min(n - 1, max(0, self.place[i] + self.rng.choice((-1, 1)) * self.rng.randint(1, NEAR)))]
        keys = self.ev.keys(plan)
        keys[i] = keys[j] + self.rng.choice((-0.5, 0.5))
        return plan.with_keys(keys)

    def knob(self, plan: _Plan) -> _Plan:
        """One knob of the configuration or the cap changed."""
        limits = self.ev.instance.limits
        points = [(c, plan.cap) for c in neighbours(plan.config, limits.prefill_budget, self.no_evict, self.no_hybrid)]
        points += [(plan.config, c) for c in cap_neighbours(plan.cap, self.ev.instance)]
        points += [(c, plan.cap) for c in self._budget_and_preemption(plan.config)]
        points = [p for p in points if compiles(p[0])]
        config, cap = self.rng.choice(points) if points else (plan.config, plan.cap)
        return _Plan(replace(config, name="key-search"), cap, plan.keys)

    def _budget_and_preemption(self, config: PolicyConfig) -> list[PolicyConfig]:
        """The time budget halved or doubled (from :data:`TIME_BUDGET`; off, once above
        :data:`MAX_TIME_BUDGET`) or set; evictions of lower-priority running requests for waiting ones
        toggled (where evictions are allowed)."""
        budget = config.time_budget
        values = (
            [TIME_BUDGET] if budget is None else [0.5 * budget, None if 2 * budget > MAX_TIME_BUDGET else 2 * budget]
        )
        out = [replace(config, time_budget=b) for b in values]
        if not self.no_evict and not config.eviction_free:
            out.append(replace(config, evict_for_waiting=not config.evict_for_waiting))
        return out

    def random(self, plan: _Plan) -> tuple[str, _Plan]:
        kind = self.rng.choices(("shift", "jump", "knob"), weights=(4, 4, 1))[0]
        return kind, getattr(self, kind)(plan)


def _starts(
    ev: _Evaluator, seeds: list[tuple[PolicyConfig, int | None]], budget: TimeBudget
) -> list[tuple[float, _Plan, np.ndarray | None]]:
    """Each seed point the compiled engine runs, with its own order (no keys), in turn while another
    evaluation fits in ``budget`` (the first always)."""
    out: list[tuple[float, _Plan, np.ndarray | None]] = []
    for config, cap in seeds:
        if not compiles(config):
            continue
        if out and not ev.fits(budget):
            break
        config = replace(config, name="key-search")
        out.append(ev.evaluate(_Plan(config, cap, None)))
    return out


def key_search(
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    seeds: list[tuple[PolicyConfig, int | None]],
    no_evict: bool = False,
    no_hybrid: bool = False,
    seed: int = 0,
) -> SearchOutcome:
    """The iterated local search over key plans (module docstring) from the seed points ``seeds``
    (configuration, admission cap), within ``budget``. Returns the best plan's schedule (labelled
    ``key-search``, its configuration, cap and keys' order in its meta) when its replayed ``objective``
    is below every seed's; every value is a replay's."""
    out = SearchOutcome()
    began = time.perf_counter()
    ev = _Evaluator(instance, objective, no_evict)
    tried = _starts(ev, seeds, budget)
    if not tried or budget.expired():
        out.evaluations = ev.evaluations
        return out
    out.start = out.value = min(t[0] for t in tried)
    for config, cap in {(t[1].config, t[1].cap) for t in tried if math.isfinite(t[0])}:
        for w in WORK_WEIGHTS:
            if not ev.fits(budget):
                break
            tried.append(ev.evaluate(_Plan(config, cap, (ev.prompt + w * ev.output).astype(float))))
    ranked = sorted((t for t in tried if math.isfinite(t[0])), key=lambda t: t[0])
    starts: dict[tuple[PolicyConfig, int | None], tuple[float, _Plan, np.ndarray | None]] = {}
    for t in ranked:
        starts.setdefault((t[1].config, t[1].cap), t)
    moves = _Moves(ev, no_evict, no_hybrid, random.Random(seed))
    best = ranked[0] if ranked else (math.inf, None, None)
    if ranked:
        out.history.append((round(time.perf_counter() - began, 3), best[0]))
    for start in list(starts.values())[:STARTS]:  # the best plan of each distinct (configuration, cap), best first
        if not ev.fits(budget):
            break
        found = _iterate(ev, moves, start, budget, out, began, best[0])
        best = found if found[0] < best[0] else best
    out.evaluations = ev.evaluations
    if best[0] < out.start:
        schedule = ev.schedule(best[1])
        rep = replay(instance, schedule)
        value = objective_of(rep, objective) if rep.feasible else math.inf
        if value < out.start:
            meta = {**schedule.meta, "problem": "infermax", "method": "key-search"}
            ids = [r.id for r in instance.requests]
            meta["priority"] = [ids[k] for k in np.argsort(ev.keys(best[1]))]
            out.schedule = Schedule(instance.name, meta=meta, columns=schedule.columns())
            out.value = value
    return out


def _iterate(
    ev: _Evaluator,
    moves: _Moves,
    start: tuple[float, _Plan, np.ndarray | None],
    budget: TimeBudget,
    out: SearchOutcome,
    began: float,
    record: float,
) -> tuple[float, _Plan, np.ndarray | None]:
    """One iterated local search from ``start`` (module docstring): its best (value, plan, excess).
    Moves kept go to ``out.kept``, values below ``record`` (the best so far) to ``out.history``."""
    best = current = start
    moves.aim(current[2])
    if start[0] < record:
        out.history.append((round(time.perf_counter() - began, 3), start[0]))
    stale = rounds = 0
    while rounds < ROUNDS and ev.fits(budget):
        kind, plan = moves.random(current[1])
        found = ev.evaluate(plan)
        if found[0] <= current[0]:
            out.kept[kind] = out.kept.get(kind, 0) + 1
            current = found
            moves.aim(found[2])
            if found[0] < best[0] * (1 - 1e-12):
                best, stale, rounds = found, 0, 0
                if found[0] < record:
                    record = found[0]
                    out.history.append((round(time.perf_counter() - began, 3), found[0]))
                continue
        stale += 1
        if stale >= STALL:  # back to the best, kicked
            if not ev.fits(budget):
                break
            plan = best[1]
            for _ in range(KICK):
                plan = moves.shift(plan)
            current = ev.evaluate(plan)
            if not math.isfinite(current[0]):
                current = best
            moves.aim(current[2])
            stale, rounds = 0, rounds + 1
    return best


def kept_for_key_search(objective: str, budget: TimeBudget) -> float:
    """Seconds the policy search keeps for the key search: :data:`KEY_SEARCH_SHARE` of the time left
    for the objectives of :data:`KEY_OBJECTIVES` where it runs (:func:`key_search_phase`), else none."""
    left = budget.left()
    runs = objective in KEY_OBJECTIVES and left is not None and ahead_of_time()
    return KEY_SEARCH_SHARE * left if runs else 0.0


def key_search_phase(
    schedules: dict[str, Schedule],
    info: dict[str, object],
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    online: tuple[PolicyConfig | None, int | None],
    seeds: list[tuple[str, float]],
    no_evict: bool = False,
    no_hybrid: bool = False,
) -> None:
    """The key search as a step of the scale phase (objectives of :data:`KEY_OBJECTIVES`), within
    ``budget``: from the policy search's best point ``online`` (configuration and cap; none when it found
    nothing better) and the named policies among the candidates ``seeds`` ((name, value), best first).
    Its schedule, when better than all of them, joins ``schedules`` as ``key-search``; its summary
    goes to ``info['key_search']``. Not run where the kernels are not compiled ahead of time
    (:func:`optsched.aotkernels.ahead_of_time`: the first run would wait for numba's compilation)."""
    if objective not in KEY_OBJECTIVES:
        return
    if budget.expired() or not ahead_of_time():  # without warmup the engine's JIT would eat the time limit
        why = "the time limit passed" if budget.expired() else "the compiled engine is not built (optsched warmup)"
        info["key_search"] = f"not run: {why}"
        return
    named = [POLICY_CONFIGS[name] for _, name in sorted((v, n) for n, v in seeds if n in POLICY_CONFIGS)]
    points = ([online] if online[0] is not None else []) + [(config, None) for config in named]
    found = key_search(instance, objective, budget, points, no_evict, no_hybrid)
    info["key_search"] = found.info()
    if found.schedule is not None:
        schedules["key-search"] = found.schedule

"""Local search over online scheduling policies, for instances whose requests arrive over time.

The segment lists of :mod:`.segments` carry no clock, so on a trace with arrivals the scale phase searches
the space of the unified scheduler's policies instead (:mod:`optsched.policies.config`): every
point is a :class:`~optsched.policies.config.PolicyConfig` (candidate groups, priority order,
hybrid batching, chunked prefill and chunk size, eviction-free reservations, the KV look-ahead,
B4) with an admission cap (at most that many requests hold KV: the engine runs on the instance
with R_max lowered to it, :func:`capped`, so its schedule is one of the instance), run by the
engine of :mod:`optsched.policies.engine` on the instance, arrivals included, and judged by its
replayed objective (:func:`optsched.result.replayed_objective`; any objective).

Search: first-improvement hill climbing from each seed policy in turn (the solve's policy
candidates, best first, uncapped). The neighbours of a point change one knob (:func:`neighbours`,
:func:`cap_neighbours`): each other grouping and order, hybrid and chunked prefill toggled, the
chunk halved or doubled (64 tokens to P), the adaptive prompt share (``prefill_share``, tiles per
waiting prompt per decode: set to :data:`PREFILL_SHARE`, halved, doubled or off), the look-ahead and
B4 toggled, the eviction-free twin (forced under ``no_evict``), and the cap halved (down to
:data:`MIN_RUNNING`) or doubled (up to R_max). A neighbour that lowers the objective becomes the
current point and its neighbours are tried next; a climb ends when no neighbour improves (a local
optimum). When every seed's climb has ended, an iterated local search goes on: the best point so
far with :data:`PERTURB_KNOBS`
random one-knob changes (a seeded generator: the search is deterministic) starts another climb;
the search ends when :data:`PERTURB_ROUNDS` such climbs in a row found nothing better, or when its
budget expires. The result is the best point of all climbs when it beats every seed.

Time: the engine runs in slices of simulated time and the wall clock is read between slices
(:func:`run_until`), so a configuration still running when the budget expires is abandoned within one
slice; the slowest configuration's run time so far decides whether another one is started.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace

from ...budget import SlowestRun, TimeBudget
from ...instance import Instance
from ...policies.config import ORDERS, POLICY_CONFIGS, PolicyConfig
from ...policies.engine import Engine
from ...result import objective_of
from ...schedule import Schedule, replay

__all__ = ["GROUPINGS", "OnlineSearch", "cap_neighbours", "capped", "neighbours", "online_search", "run_until"]

#: The candidate groupings a configuration may take (each covers R_w and R_r once).
GROUPINGS = (
    ("waiting", "running"),
    ("running_decode", "running_prefill", "waiting"),
    ("running_prefill", "waiting", "running_decode"),
    ("all",),
    ("running_decode", "all"),
)
#: Smallest chunk the search tries (tokens).
MIN_CHUNK = 64
#: The adaptive prompt share a neighbour sets first (tiles per waiting prompt per decode).
PREFILL_SHARE = 4.0
#: Slices of simulated time per engine run between two reads of the wall clock.
SLICES = 64
#: Smallest admission cap (requests holding KV) the search tries.
MIN_RUNNING = 4
#: Knobs changed at once by a perturbation of the iterated local search.
PERTURB_KNOBS = 2
#: The iterated local search ends after this many climbs in a row that found nothing better.
PERTURB_ROUNDS = 8


@dataclass
class OnlineSearch:
    """What :func:`online_search` found: the best configuration's schedule (None when no
    configuration beat the seed), its replayed objective, and the search's counts."""

    schedule: Schedule | None = None
    value: float = math.inf
    config: PolicyConfig | None = None
    cap: int | None = None
    seed: str | None = None
    evaluated: int = 0
    improved: int = 0
    local_optimum: bool = False
    history: list[tuple[float, float]] = field(default_factory=list)

    def info(self) -> dict[str, object]:
        """The search's summary for the solve's ``extra['scale']``."""
        return {
            "seed": self.seed,
            "configurations": self.evaluated,
            "improvements": self.improved,
            "local_optimum": self.local_optimum,
            "value": None if self.schedule is None else self.value,
            "config": None if self.config is None else self.config.to_dict(),
            "max_running": self.cap,
            "history": self.history,
        }


def neighbours(config: PolicyConfig, prefill_budget: int, no_evict: bool, no_hybrid: bool) -> list[PolicyConfig]:
    """The configurations one knob away from ``config`` (module docstring), valid ones only."""
    chunk = min(config.chunk or prefill_budget, prefill_budget)
    changes: list[dict[str, object]] = [{"groups": g} for g in GROUPINGS if g != config.groups]
    changes += [{"order": o} for o in ORDERS if o != config.order]
    changes += [{"chunk": c} for c in sorted({max(MIN_CHUNK, chunk // 2), min(prefill_budget, 2 * chunk)} - {chunk})]
    share = config.prefill_share
    changes += [{"prefill_share": s} for s in ([PREFILL_SHARE] if share is None else [share / 2, 2 * share, None])]
    changes += [{"chunked": not config.chunked}, {"kv_lookahead": not config.kv_lookahead}]
    changes += [{"prefill_counts_decodes": not config.prefill_counts_decodes}]
    if not no_hybrid:
        changes.append({"hybrid": not config.hybrid})
    if not no_evict:
        changes.append({"eviction_free": not config.eviction_free})
    out = []
    for change in changes:
        try:
            ef = bool(change.get("eviction_free", config.eviction_free)) or no_evict
            out.append(replace(config, **{**change, "name": "online-search", "eviction_free": ef}))
        except ValueError:  # an invalid combination of knobs
            continue
    return out


def cap_neighbours(cap: int | None, instance: Instance) -> list[int | None]:
    """The admission caps next to ``cap`` (None: the instance's R_max): half of it (at least
    :data:`MIN_RUNNING`) and twice it (None once that reaches R_max or the number of requests)."""
    ceiling = min(instance.limits.max_running or math.inf, len(instance.requests))
    current = ceiling if cap is None else cap
    out: list[int | None] = []
    if current // 2 >= MIN_RUNNING:
        out.append(int(current // 2))
    if cap is not None:
        out.append(None if 2 * cap >= ceiling else 2 * cap)
    return out


def capped(instance: Instance, cap: int | None) -> Instance:
    """``instance`` with at most ``cap`` requests holding KV (itself for None): a schedule of it is
    one of ``instance``."""
    if cap is None:
        return instance
    return replace(instance, limits=replace(instance.limits, max_running=cap))


def run_until(
    instance: Instance, config: PolicyConfig, budget: TimeBudget, horizon: float, cap: int | None = None
) -> Schedule | None:
    """The engine's schedule of ``config`` on ``instance`` (its R_max lowered to ``cap``, see
    :func:`capped`), or None when ``budget`` expired first.

    The engine advances in steps of ``horizon / SLICES`` simulated seconds until it is done (past
    ``horizon`` too: a run whose requests all arrive at once lasts far beyond it), and the wall clock
    is read between steps.
    """
    engine = Engine.from_instance(capped(instance, cap), config)
    step = max(horizon, 1e-9) / SLICES
    simulated_to = step
    while not engine.done():
        if budget.expired():
            return None
        engine.advance(simulated_to)
        simulated_to += step
    return engine.schedule()


def online_search(
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    seeds: list[tuple[str, float]],
    no_evict: bool = False,
    no_hybrid: bool = False,
) -> OnlineSearch:
    """Hill-climb over policy configurations and admission caps from each seed in turn, best first,
    then perturb the best and climb again (module docstring).

    ``seeds``: (policy name, replayed objective) of the solve's candidates; those named in
    :data:`~optsched.policies.config.POLICY_CONFIGS` start the climbs. Returns the best
    configuration found that is strictly better than every seed (none otherwise).
    """
    out = OnlineSearch()
    known = sorted((value, name) for name, value in seeds if name in POLICY_CONFIGS)
    if not known:
        return out
    out.seed = known[0][1]
    out.value = min(value for _, value in seeds)
    climb = _Climb(instance, objective, budget, no_evict, no_hybrid, time.perf_counter())
    for value, name in known:
        if not climb.run((POLICY_CONFIGS[name], None), value, name, out):
            return out
    rng, idle = random.Random(0), 0
    while idle < PERTURB_ROUNDS:
        best = (out.config, out.cap) if out.config is not None else (POLICY_CONFIGS[known[0][1]], None)
        point = climb.perturb(best, rng)
        before = out.value
        value = climb.evaluate(point, out.seed or known[0][1], out)
        if value is None or not climb.run(point, value, out.seed or known[0][1], out):
            return out
        idle = 0 if out.value < before else idle + 1
    out.local_optimum = True
    return out


#: A point of the search: a configuration and an admission cap (None: the instance's R_max).
Point = tuple[PolicyConfig, int | None]


@dataclass
class _Climb:
    """One hill climb's context (shared by the climbs of one search)."""

    instance: Instance
    objective: str
    budget: TimeBudget
    no_evict: bool
    no_hybrid: bool
    t0: float
    tried: set[Point] = field(default_factory=set)
    cost: SlowestRun = field(default_factory=SlowestRun)  # of the configurations so far (run and replay)

    def neighbours(self, point: Point) -> list[Point]:
        """The points one knob away: a configuration's (:func:`neighbours`) or the cap's
        (:func:`cap_neighbours`)."""
        config, cap = point
        limits = self.instance.limits
        out = [(c, cap) for c in neighbours(config, limits.prefill_budget, self.no_evict, self.no_hybrid)]
        return out + [(config, c) for c in cap_neighbours(cap, self.instance)]

    def perturb(self, point: Point, rng: random.Random) -> Point:
        """``point`` with :data:`PERTURB_KNOBS` random one-knob changes in a row."""
        for _ in range(PERTURB_KNOBS):
            point = rng.choice(self.neighbours(point))
        return point

    def evaluate(self, point: Point, name: str, out: OnlineSearch) -> float | None:
        """Run and replay ``point``, record it in ``out`` when better than ``out.value``; its objective
        (inf when infeasible, already tried or against the options), None when the time ran out."""
        if point in self.tried:
            return math.inf
        if not self.cost.fits(self.budget):
            return None
        self.tried.add(point)
        horizon = max((r.arrival for r in self.instance.requests), default=0.0) + 1.0
        with self.cost.timing():
            schedule = run_until(self.instance, point[0], self.budget, horizon, point[1])
            rep = None if schedule is None else replay(self.instance, schedule)
        if schedule is None or rep is None:
            return None
        out.evaluated += 1
        if not rep.feasible or (self.no_evict and rep.metrics.evictions):
            return math.inf
        found = objective_of(rep, self.objective)
        if found < out.value:
            out.schedule, out.value, out.seed = schedule, found, name
            out.config, out.cap = point
            out.improved += 1
            out.history.append((round(time.perf_counter() - self.t0, 3), found))
        return found

    def run(self, current: Point, value: float, name: str, out: OnlineSearch) -> bool:
        """Climb from ``current`` (objective ``value``) to a local optimum, recording in ``out``
        every point better than ``out.value``; False when the time ran out first."""
        self.tried.add(current)
        improved = True
        while improved:
            improved = False
            for point in self.neighbours(current):
                if point in self.tried:
                    continue
                found = self.evaluate(point, name, out)
                if found is None:
                    return False
                if found < value:
                    current, value, improved = point, found, True
                    break
        return True

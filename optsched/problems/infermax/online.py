"""Local search over online scheduling policies, for instances whose requests arrive over time.

The segment lists of :mod:`.segments` carry no clock, so on a trace with arrivals the scale phase searches
the space of the unified scheduler's policies instead (:mod:`optsched.policies.config`): every
point is a :class:`~optsched.policies.config.PolicyConfig` (candidate groups, priority order,
hybrid batching, chunked prefill and chunk size, eviction-free reservations, the KV look-ahead,
B4), run by the engine of :mod:`optsched.policies.engine` on the instance, arrivals included, and
judged by its replayed objective (:func:`optsched.result.replayed_objective`; any objective).

Search: first-improvement hill climbing from each seed policy in turn (the solve's policy
candidates, best first). The neighbours of a configuration change one knob (:func:`neighbours`): each other
grouping and order, hybrid and chunked prefill toggled, the chunk halved or doubled (64 tokens to
P), the look-ahead and B4 toggled, and the eviction-free twin (forced under ``no_evict``). A
neighbour that lowers the objective becomes the current configuration and its neighbours are
tried next; a climb ends when no neighbour improves (a local optimum), the search when every
seed's climb has ended or when its budget expires. The result is the best configuration of all climbs
when it beats every seed.

Time: the engine runs in slices of simulated time and the wall clock is read between slices
(:func:`run_until`), so a configuration still running when the budget expires is abandoned within one
slice; the slowest configuration's run time so far decides whether another one is started.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from ...budget import TimeBudget
from ...instance import Instance
from ...policies.config import ORDERS, POLICY_CONFIGS, PolicyConfig
from ...policies.engine import Engine
from ...result import objective_of
from ...schedule import Schedule, replay

__all__ = ["GROUPINGS", "OnlineSearch", "neighbours", "online_search", "run_until"]

#: The candidate groupings a configuration may take (each covers R_w and R_r once).
GROUPINGS = (
    ("waiting", "running"),
    ("running_decode", "running_prefill", "waiting"),
    ("running_prefill", "waiting", "running_decode"),
    ("all",),
)
#: Smallest chunk the search tries (tokens).
MIN_CHUNK = 64
#: Slices of simulated time per engine run between two reads of the wall clock.
SLICES = 64


@dataclass
class OnlineSearch:
    """What :func:`online_search` found: the best configuration's schedule (None when no
    configuration beat the seed), its replayed objective, and the search's counts."""

    schedule: Schedule | None = None
    value: float = math.inf
    config: PolicyConfig | None = None
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
            "history": self.history,
        }


def neighbours(config: PolicyConfig, prefill_budget: int, no_evict: bool, no_hybrid: bool) -> list[PolicyConfig]:
    """The configurations one knob away from ``config`` (module docstring), valid ones only."""
    chunk = min(config.chunk or prefill_budget, prefill_budget)
    changes: list[dict[str, object]] = [{"groups": g} for g in GROUPINGS if g != config.groups]
    changes += [{"order": o} for o in ORDERS if o != config.order]
    changes += [{"chunk": c} for c in sorted({max(MIN_CHUNK, chunk // 2), min(prefill_budget, 2 * chunk)} - {chunk})]
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


def run_until(instance: Instance, config: PolicyConfig, budget: TimeBudget, horizon: float) -> Schedule | None:
    """The engine's schedule of ``config`` on ``instance``, or None when ``budget`` expired first.

    The engine advances in :data:`SLICES` steps of ``horizon / SLICES`` simulated seconds (then
    to the end) and the wall clock is read between steps.
    """
    engine = Engine.from_instance(instance, config)
    step = max(horizon, 1e-9) / SLICES
    simulated_to = step
    while not engine.done():
        if budget.expired():
            return None
        engine.advance(simulated_to)
        simulated_to = simulated_to + step if simulated_to < horizon else math.inf
    return engine.schedule()


def online_search(
    instance: Instance,
    objective: str,
    budget: TimeBudget,
    seeds: list[tuple[str, float]],
    no_evict: bool = False,
    no_hybrid: bool = False,
) -> OnlineSearch:
    """Hill-climb over policy configurations from each seed in turn, best first (module docstring).

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
        if not climb.run(POLICY_CONFIGS[name], value, name, out):
            return out
    out.local_optimum = True
    return out


@dataclass
class _Climb:
    """One hill climb's context (shared by the climbs of one search)."""

    instance: Instance
    objective: str
    budget: TimeBudget
    no_evict: bool
    no_hybrid: bool
    t0: float
    tried: set[PolicyConfig] = field(default_factory=set)
    cost: float = 0.0  # wall seconds of the slowest configuration so far (run and replay)

    def run(self, current: PolicyConfig, value: float, name: str, out: OnlineSearch) -> bool:
        """Climb from ``current`` (objective ``value``) to a local optimum, recording in ``out``
        every configuration better than ``out.value``; False when the time ran out first."""
        horizon = max((r.arrival for r in self.instance.requests), default=0.0) + 1.0
        self.tried.add(current)
        improved = True
        while improved:
            improved = False
            for config in neighbours(current, self.instance.limits.prefill_budget, self.no_evict, self.no_hybrid):
                if config in self.tried:
                    continue
                left = self.budget.left()
                if left is not None and self.cost > left:
                    return False
                self.tried.add(config)
                started = time.perf_counter()
                schedule = run_until(self.instance, config, self.budget, horizon)

                if schedule is None:
                    return False
                rep = replay(self.instance, schedule)
                self.cost = max(self.cost, time.perf_counter() - started)
                out.evaluated += 1
                if not rep.feasible or (self.no_evict and rep.metrics.evictions):
                    continue
                found = objective_of(rep, self.objective)
                if found < out.value:
                    out.schedule, out.value, out.config, out.seed = schedule, found, config, name
                    out.improved += 1
                    out.history.append((round(time.perf_counter() - self.t0, 3), found))
                if found < value:
                    current, value, improved = config, found, True
                    break
        return True

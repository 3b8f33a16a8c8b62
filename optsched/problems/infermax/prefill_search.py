"""Local search over prefill plans for mean TTFT: per-request keys on top of the prefill-first rules.

With hindsight (every arrival known), mean TTFT is a single-machine batching problem over the
prompts: request i's first token is the end f_i of the batch that completes its prompt, and the
objective is (1/N) sum_i (f_i - a_i). A *prefill plan* is a pair (knobs, keys): the knobs of
:class:`.prefill_first.PrefillFirst` (cap, order, ratio rule, preemption at arrivals, evictions,
deferral) and per-request keys (:class:`.prefill_first.PrefillKeys`): a bias b_i in tokens added to
request i's remaining prompt wherever the shortest-remaining rule ranks it or preemption compares it
with an arriving prompt, a flag h_i by which i's arrival never cuts the running batch, and a flag r_i
by which i's chunk may pass the cap, up to min(C, P) tokens in its batch (so that a long prompt's
last chunk completes it instead of leaving a rest that waits behind later arrivals). The
deterministic plan builder of :mod:`.prefill_first` decodes a plan into batches (chunks cut so that
batches end at the arrivals that go first, the decodes deferred to the gaps), and the plan's value
is its mean TTFT from its own batch times (:func:`.prefill_first.prefill_first_ttft`: the cost
model's, as replay computes them, built only up to the last first token). Keys all zero give the
prefill-first schedule of the knobs alone, so the search starts at the best prefill-first schedule
and never ends worse.

:func:`prefill_search` is an iterated local search with a seeded random generator. It starts from
the knobs given, or, where evictions are allowed and the given knobs reserve I + O - 1 slots, from
their twin that evicts (``evict``) when the twin's value is not worse: the twin's first prompts never
wait for decodes, so its plans are evaluated without the deferred decodes before the last first
token (20 times faster on the arxiv slice of docs/performance.md). Each step makes one move on the
current plan:

- *shift*: one request's bias moves by +-2^k tokens (k = 4..11);
- *jump*: one request's key is set just below or just above the key of a request arriving near it
  (their whole prompts plus biases), so that the two swap in the shortest-remaining order;
- *hold*: one request's hold flag is switched;
- *reach*: one request's reach flag is switched (only while the cap is below min(C, P));
- *knob*: one knob other than ``evict`` changes (:func:`knob_moves`: :func:`.prefill_first.knob_steps` or,
  under a cost model with token tiles, the cap moved to a whole number of tiles next to it, so that a
  batch cut at the cap pays for no partly used tile).

A move is kept when the plan's value is not worse (moves across plateaus are kept too); the best plan
is remembered. After :data:`STALL` moves in a row without a new best the current plan returns to the
best with random shifts, :data:`KICK` of them times 2^r; r counts the *restarts* since the last new
best, one after each :data:`ROUNDS` returns in a row without one. A *climb* ends when its time is up
or after :data:`RESTARTS` + 1 restarts in a row without a new best.

The search climbs from several *starts* (keys all zero), since climbs from different plans end in
different local optima: the plan above, then the best :data:`STARTS` - 1 of the other plans of the
given knobs and of their twin, each with and without the tile fill (``fill``, with the ratio rule),
whose evaluation takes at most :data:`SLOWER` times the first plan's (:func:`_starts`). The climb
from each start, its ``evict`` fixed, ends as above or once the time since its last new best
exceeds the time it took to find it (so a climb that still improves keeps the time, one that has
stalled hands it on); with time left, a climb continues from the best plan of all. With time still
left, the search climbs in the same way, ending at the first restart without a new best, from each
plan of the knobs one change away from the first plan's (``evict`` kept) with keys all zero, lowest
value first.

The best plan's whole schedule (decodes included) is built and replayed (:class:`_Whole`) before the
search (the start's), at the end, and on the way: at the end of each climb and, within a climb,
whenever :data:`CHECKPOINT` times the longest such build has passed since the last one and the
best plan's is not built yet. The longest build so far, :data:`FINAL_SHARE` times over, is kept from
the search for the one at the end. The result is the schedule with the least replayed mean TTFT among
those built (so a best plan whose schedule is not built in time leaves the best one built before),
returned only when below the start's value.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ...budget import TimeBudget
from ...instance import Instance
from ...result import objective_of
from ...schedule import Schedule, replay
from .prefill_batches import MIN_CAP
from .prefill_first import (
    PrefillFirst,
    PrefillKeys,
    knob_steps,
    prefill_first_schedule,
    prefill_first_tokens,
)
from .search_outcome import SearchOutcome

__all__ = ["knob_moves", "prefill_search"]

#: Moves in a row without a new best before the current plan returns to the best.
STALL = 300
#: Random shifts that perturb the best plan at such a return.
KICK = 3
#: Returns to the best in a row without a new best that make a *restart*: the kicks double from then on.
ROUNDS = 40
#: Restarts in a row without a new best that end the search.
RESTARTS = 3
#: The time kept for the best plan's whole schedule and replay at the end: this many times the
#: longest such build so far, plus :data:`FINAL_SECONDS` (a build's time varies with the plan and with
#: the machine's load and memory: the best plan's took up to 1.45 times the start's on a loaded
#: 2-core machine, and more on a loaded CI runner).
FINAL_SHARE = 3.0
#: Within a climb, the best plan's whole schedule is built again once this many times the longest
#: such build has passed since the last one (so the builds take at most about 1/CHECKPOINT of the time).
CHECKPOINT = 10.0
#: Seconds kept for the end besides (start-up of the replay).
FINAL_SECONDS = 0.05
#: A request's weight in the draw of the moves: its TTFT beyond its prompt alone plus this share of
#: the mean such excess (so that every request may be drawn).
FLOOR = 0.1
#: Requests on either side (in arrival order) among which a *jump* picks the other request.
NEAR = 6
#: Plans the search climbs from, at most: the start's and the best of its other starts.
STARTS = 3
#: An other start is climbed from only when its evaluation takes at most this many times the start's.
SLOWER = 2.0
#: Weights of the moves *shift*, *jump*, *hold*, *reach* and *knob* in the draw of a random move.
MIX = (4, 4, 1, 1, 1)


@dataclass
class _Plan:
    """A prefill plan: knobs and per-request keys (bias, hold and reach; module docstring)."""

    knobs: PrefillFirst
    bias: np.ndarray
    hold: np.ndarray
    reach: np.ndarray

    def keys(self) -> PrefillKeys:
        return PrefillKeys(self.bias, self.hold, self.reach)

    def copy(self) -> _Plan:
        return _Plan(self.knobs, self.bias.copy(), self.hold.copy(), self.reach.copy())


class _Moves:
    """The random moves of the search on one instance (module docstring)."""

    def __init__(self, instance: Instance, rng: random.Random) -> None:
        self.instance, self.rng = instance, rng
        reqs = sorted(instance.requests, key=lambda r: r.arrival)
        self.prompt = np.array([r.prompt_tokens for r in reqs])
        self.arrival = np.array([r.arrival for r in reqs], dtype=float)
        cm = instance.cost_model
        self.alone = np.array([cm.batch_time(p, p, p * p, 0, 0) for p in self.prompt.tolist()])
        self.n = len(self.prompt)
        self.top = min(instance.limits.token_budget, instance.limits.prefill_budget)
        self.cumulative = np.arange(1, self.n + 1, dtype=float)

    def aim(self, first: np.ndarray) -> None:
        """Aim the moves at the requests of the plan with first-token times ``first``: each is drawn
        with weight its TTFT beyond its prompt alone plus :data:`FLOOR` of the mean such excess."""
        excess = np.maximum(first - self.arrival - self.alone, 0.0)
        self.cumulative = np.cumsum(excess + FLOOR * float(excess.mean()) + 1e-12)

    def request(self) -> int:
        """A request drawn by the weights of :meth:`aim`."""
        return self.rng.choices(range(self.n), cum_weights=self.cumulative)[0]

    def shift(self, plan: _Plan) -> _Plan:
        """One request's bias moved by +-2^k tokens."""
        out = plan.copy()
        out.bias[self.request()] += self.rng.choice((-1, 1)) * 2 ** self.rng.randint(4, 11)
        return out

    def jump(self, plan: _Plan) -> _Plan:
        """One request's key set just below or above that of a request arriving near it."""
        out = plan.copy()
        i = self.request()
        j = min(self.n - 1, max(0, i + self.rng.choice((-1, 1)) * self.rng.randint(1, NEAR)))
        side = self.rng.choice((-1, 1))
        out.bias[i] = self.prompt[j] + plan.bias[j] - self.prompt[i] + side
        return out

    def hold(self, plan: _Plan) -> _Plan:
        """One request's hold flag switched."""
        out = plan.copy()
        i = self.rng.randrange(self.n)
        out.hold[i] = not out.hold[i]
        return out

    def reach(self, plan: _Plan) -> _Plan:
        """One request's reach flag switched (drawn by the weights of :meth:`aim`)."""
        out = plan.copy()
        i = self.request()
        out.reach[i] = not out.reach[i]
        return out

    def knob(self, plan: _Plan) -> _Plan:
        """One knob changed, ``evict`` kept (the start fixes it: :func:`prefill_search`; :func:`knob_moves`)."""
        steps = knob_moves(plan.knobs, self.instance)
        out = plan.copy()
        if steps:
            out.knobs = self.rng.choice(steps)
        return out

    def random(self, plan: _Plan) -> tuple[str, _Plan]:
        """A random move (kind, plan), drawn by the weights :data:`MIX` (no *reach* where the cap is
        min(C, P): the flag then changes nothing): shifts and jumps most often."""
        weights = MIX if plan.knobs.cap < self.top else (*MIX[:3], 0, *MIX[4:])  # reach: past the cap
        kind = self.rng.choices(("shift", "jump", "hold", "reach", "knob"), weights=weights)[0]
        return kind, getattr(self, kind)(plan)


def knob_moves(knobs: PrefillFirst, instance: Instance) -> list[PrefillFirst]:
    """The knobs one change from ``knobs`` with ``evict`` kept: :func:`.prefill_first.knob_steps` and,
    under a cost model with token tiles, the caps of whole tiles next to ``knobs.cap`` within
    [:data:`.prefill_batches.MIN_CAP`, min(C, P)] (a batch cut at the cap then ends at a tile's end)."""
    out = [k for k in knob_steps(knobs, instance) if k.evict == knobs.evict]
    cm = instance.cost_model
    tile = cm.token_tile if cm.per_tile else 0
    if tile and knobs.chunked:
        top = min(instance.limits.token_budget, instance.limits.prefill_budget)
        whole = knobs.cap // tile * tile
        caps = {c for c in (whole - tile, whole, whole + tile) if MIN_CAP <= c <= top}
        out += [replace(knobs, cap=c) for c in sorted(caps - {knobs.cap, *(k.cap for k in out)})]
    return out


def prefill_search(
    instance: Instance, start: PrefillFirst, budget: TimeBudget, evictions: bool = True, seed: int = 0
) -> SearchOutcome:
    """The iterated local search over prefill plans (module docstring) from the knobs ``start`` with
    keys all zero, within ``budget``; without ``evictions``, only plans whose schedules never evict.

    The start's value is the plan builder's; the result's schedule, when there is one, is replayed
    here (its value is the replay's) and replays cleanly, without evictions when they are not allowed.
    """
    n = len(instance.requests)
    none = PrefillKeys.none(n)
    moves = _Moves(instance, random.Random(seed))
    began = time.perf_counter()
    given = _evaluate(instance, _Plan(start, none.bias, none.hold, none.reach), moves, budget)
    seconds = time.perf_counter() - began  # one plan's evaluation: the start's, else its twin's below
    if given is None or n < 2:  # not built in time, or nothing to order
        value = math.inf if given is None else given[0]
        return SearchOutcome(None, value, value, int(given is not None), {}, [])
    start_value = given[0]
    began_twin = time.perf_counter()
    current = _twin(instance, given, moves, budget, evictions)
    seconds = seconds if current is given else time.perf_counter() - began_twin
    evaluations = 2 if evictions and not start.evict else 1
    whole = _Whole(instance, evictions, budget)
    whole.build(current[1], budget)
    if whole.schedule is None:
        return SearchOutcome(None, start_value, start_value, evaluations, {}, [])
    climb = _Climb(instance, moves, whole, began, [(0.0, start_value)])
    if current[0] < start_value:
        climb.history.append((round(time.perf_counter() - began, 3), current[0]))
    others, tried = _starts(instance, (given, current), moves, climb.budget, evictions, SLOWER * seconds)
    starts = [current, *others[: STARTS - 1]]
    best = current
    for plan in starts:  # each climb until it stalls (patient when alone), then one from the best of all
        found = climb.run(plan, RESTARTS, patient=len(starts) == 1)
        best = found if found[0] < best[0] else best
    if len(starts) > 1 and not climb.budget.expired():
        best = min(best, climb.run(best), key=lambda f: f[0])
    neighbours = [] if climb.budget.expired() else _neighbours(instance, current[1], moves, climb.budget)
    for other in neighbours:  # the time left: climbs from the knobs next to the start's
        if climb.budget.expired():
            break
        found = climb.run(other, 0)
        best = found if found[0] < best[0] else best
    evaluations += climb.evaluations + tried + len(neighbours)
    whole.build(best[1], budget)
    if whole.value >= start_value:
        return SearchOutcome(None, start_value, start_value, evaluations, climb.kept, climb.history)
    return SearchOutcome(whole.schedule, whole.value, start_value, evaluations, climb.kept, climb.history)


class _Whole:
    """The whole schedules (decodes included) of the best plans, built and replayed on the way (module
    docstring): the one with the least replayed mean TTFT, the plans built and the longest build."""

    def __init__(self, instance: Instance, evictions: bool, budget: TimeBudget) -> None:
        self.instance, self.evictions, self.budget = instance, evictions, budget
        self.schedule: Schedule | None = None
        self.value = math.inf
        self.built: list[_Plan] = []
        self.longest = 0.0
        self.last = time.perf_counter()

    def search_budget(self) -> TimeBudget:
        """The search's budget: the whole one less the time kept for the build at the end."""
        return self.budget.reserve(FINAL_SHARE * self.longest + FINAL_SECONDS)

    def due(self) -> bool:
        """Whether :data:`CHECKPOINT` times the longest build has passed since the last one."""
        return time.perf_counter() - self.last >= CHECKPOINT * self.longest

    def build(self, plan: _Plan, budget: TimeBudget) -> None:
        """Build and replay ``plan``'s whole schedule within ``budget`` (unless tried before, other than
        cut by its time) and keep it when its replayed mean TTFT is the least so far."""
        if any(plan is other for other in self.built):
            return
        began = time.perf_counter()
        schedule, value = _replayed(self.instance, plan, self.evictions, budget)
        self.last = time.perf_counter()
        self.longest = max(self.longest, self.last - began)
        if schedule is not None or not budget.expired():  # built, or not to be built (no clean replay)
            self.built.append(plan)
        if value < self.value:
            self.schedule, self.value = schedule, value


class _Climb:
    """The iterated local search from one plan (module docstring), its counts kept across runs."""

    def __init__(
        self, instance: Instance, moves: _Moves, whole: _Whole, began: float, history: list[tuple[float, float]]
    ) -> None:
        self.instance, self.moves, self.whole, self.began, self.history = instance, moves, whole, began, history
        self.evaluations = 0
        self.kept: dict[str, int] = {}

    @property
    def budget(self) -> TimeBudget:
        """The search's budget (:meth:`_Whole.search_budget`)."""
        return self.whole.search_budget()

    def run(
        self, current: tuple[float, _Plan, np.ndarray], restarts: int = RESTARTS, patient: bool = True
    ) -> tuple[float, _Plan, np.ndarray]:
        """The best plan found from ``current``, ending after ``restarts`` + 1 restarts in a row without a
        new best or, unless ``patient``, once the time since its last new best (after at least one
        return to the best) exceeds the time it took to find it; every plan better than all before, in
        this run or an earlier one, joins the history, and the whole schedule of the best plan of all
        is built when due (:meth:`_Whole.due`) and at the end of the run."""
        began = last = time.perf_counter()
        best, moves = current, self.moves
        moves.aim(current[2])
        stale = rounds = fruitless = 0  # fruitless: restarts since the last new best
        while fruitless <= restarts and not self.budget.expired():
            if self.whole.due() and best[0] <= self.history[-1][1]:  # a checkpoint: the best of all built
                self.whole.build(best[1], self.budget)
            now = time.perf_counter()
            if not patient and (rounds or fruitless) and now - last > last - began:
                break
            if rounds >= ROUNDS:  # stalled: kick harder from now on
                fruitless, rounds = fruitless + 1, 0
                continue
            kind, plan = moves.random(current[1])
            found = _evaluate(self.instance, plan, moves, self.budget)
            self.evaluations += 1
            if found is not None and found[0] <= current[0]:
                self.kept[kind] = self.kept.get(kind, 0) + 1
                current = found
                moves.aim(found[2])
                if found[0] < best[0] * (1 - 1e-12):
                    best, stale, rounds, fruitless, last = current, 0, 0, 0, time.perf_counter()
                    if found[0] < self.history[-1][1]:
                        self.history.append((round(time.perf_counter() - self.began, 3), found[0]))
                    continue
            stale += 1
            if stale >= STALL:  # back to the best, kicked
                plan = best[1]
                for _ in range(KICK << fruitless):
                    plan = moves.shift(plan)
                current = _evaluate(self.instance, plan, moves, self.budget) or best
                moves.aim(current[2])
                self.evaluations, stale, rounds = self.evaluations + 1, 0, rounds + 1
        if best[0] <= self.history[-1][1] and not self.budget.expired():
            self.whole.build(best[1], self.budget)
        return best


def _neighbours(
    instance: Instance, plan: _Plan, moves: _Moves, budget: TimeBudget
) -> list[tuple[float, _Plan, np.ndarray]]:
    """The plans of the knobs one change from ``plan``'s (``evict`` kept; :func:`knob_moves`) with keys all
    zero, evaluated, lowest value first."""
    none = PrefillKeys.none(len(plan.bias))
    found = [
        _evaluate(instance, _Plan(k, none.bias, none.hold, none.reach), moves, budget)
        for k in knob_moves(plan.knobs, instance)
    ]
    return sorted((f for f in found if f is not None), key=lambda f: f[0])


def _starts(
    instance: Instance,
    given: tuple[tuple[float, _Plan, np.ndarray], tuple[float, _Plan, np.ndarray]],
    moves: _Moves,
    budget: TimeBudget,
    evictions: bool,
    seconds: float,
) -> tuple[list[tuple[float, _Plan, np.ndarray]], int]:
    """The other plans the search climbs from (keys all zero), lowest value first, and the number of
    plans evaluated to choose them: the knobs of the start and of the plan it climbs from first
    (``given``: the start and its evicting twin, :func:`_twin`), each with the tile fill switched
    (with the ratio rule), other than the first plan's; only those evaluated within ``seconds`` each
    (a slower plan's climb would try few plans); without ``evictions``, none that evicts."""
    first = given[1][1].knobs
    knobs = {plan.knobs for _, plan, _ in given}
    knobs |= {replace(k, fill=not k.fill) for k in knobs if k.ratio}
    none = PrefillKeys.none(len(given[0][1].bias))
    out, tried = [], 0
    for k in sorted(knobs - {first}, key=repr):
        if budget.expired() or (k.evict and not evictions):
            continue
        began, tried = time.perf_counter(), tried + 1
        found = _evaluate(instance, _Plan(k, none.bias, none.hold, none.reach), moves, budget)
        if found is not None and time.perf_counter() - began <= seconds:
            out.append(found)
    return sorted(out, key=lambda f: f[0]), tried


def _twin(
    instance: Instance, given: tuple[float, _Plan, np.ndarray], moves: _Moves, budget: TimeBudget, evictions: bool
) -> tuple[float, _Plan, np.ndarray]:
    """The plan the search starts from: ``given``, or the same plan with evictions (``evict``) when they
    are allowed and its value is not worse. The twin's first prompts never wait for decodes, so the
    builder skips the deferred decodes before the last first token: its plans are evaluated faster."""
    if not evictions or given[1].knobs.evict:
        return given
    plan = given[1].copy()
    plan.knobs = replace(plan.knobs, evict=True)
    twin = _evaluate(instance, plan, moves, budget)
    return twin if twin is not None and twin[0] <= given[0] else given


def _evaluate(
    instance: Instance, plan: _Plan, moves: _Moves, budget: TimeBudget
) -> tuple[float, _Plan, np.ndarray] | None:
    """(mean TTFT, plan, first-token times in arrival order) of the plan, from its own batch times;
    None when it is not built within ``budget``."""
    first = prefill_first_tokens(instance, plan.knobs, budget, plan.keys())
    if first is None:
        return None
    return float(np.mean(first - moves.arrival)), plan, first


def _replayed(instance: Instance, plan: _Plan, evictions: bool, budget: TimeBudget) -> tuple[Schedule | None, float]:
    """The plan's whole schedule, labelled ``prefill-search`` with its knobs and keys, and its replayed
    mean TTFT; (None, inf) when it is not built within ``budget`` or does not replay cleanly (or evicts
    where not allowed)."""
    schedule = prefill_first_schedule(instance, plan.knobs, budget, plan.keys())
    if schedule is None:
        return None, math.inf
    rep = replay(instance, schedule)
    if not rep.feasible or (rep.metrics.evictions and not evictions):
        return None, math.inf
    ids = [r.id for r in sorted(instance.requests, key=lambda r: r.arrival)]
    meta = {
        "problem": "infermax",
        "method": "prefill-search",
        "knobs": asdict(plan.knobs),
        "bias": {ids[i]: int(plan.bias[i]) for i in np.flatnonzero(plan.bias)},
        "hold": [ids[i] for i in np.flatnonzero(plan.hold)],
        "reach": [ids[i] for i in np.flatnonzero(plan.reach)],
    }
    return Schedule(instance.name, schedule.batches, meta), objective_of(rep, "ttft")

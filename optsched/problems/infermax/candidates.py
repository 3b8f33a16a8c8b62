"""The candidate schedules of an InferMax solve: every schedule any phase finds, judged by replay.

A *candidate* is a schedule that replays cleanly (:func:`optsched.schedule.replay`) and respects the
options the model imposes (``no_evict``, ``no_hybrid``), with its replayed objective. The
:class:`CandidatePool` of a solve keeps them by name (a policy, ``serial``, the relaxation's path,
the eviction-free optimum, ...) and knows the best: the least objective, the first offered among
equals. The best candidate is the solve's upper bound UB, from which the horizon J follows
(:func:`.data.horizon`), and the warm start of the model (or the candidate named by the option
``warm_start``); it is the result when no model runs or the solver returns nothing better.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...budget import NO_LIMIT, SlowestRun, TimeBudget
from ...instance import Instance
from ...options import OptionError
from ...result import MAXIMISED, objective_of
from ...schedule import ReplayResult, Schedule, replay
from .model import SCALE_MIN_REQUESTS, InferMaxOptions
from .schedules import serial_schedule

__all__ = ["Candidate", "CandidatePool", "candidate_schedules", "initial_candidates"]


@dataclass(frozen=True)
class Candidate:
    """A schedule that replays cleanly and respects the options.

    Attributes
    ----------
    schedule
        The schedule.
    value
        Its replayed objective (the option ``objective``).
    replay
        Its replay.
    """

    schedule: Schedule
    value: float
    replay: ReplayResult

    @property
    def makespan(self) -> float:
        """The replayed makespan (the horizon J is derived from it)."""
        return self.replay.metrics.makespan


def _respects(rep: ReplayResult, options: InferMaxOptions) -> bool:
    """Whether a replay-feasible schedule respects the options the model imposes."""
    if options.no_evict and rep.metrics is not None and rep.metrics.evictions:
        return False
    if options.no_hybrid and any(p > 0 and d > 0 for p, d in zip(rep.prefill_tokens, rep.decode_items)):
        return False
    return True


class CandidatePool:
    """The candidates of one solve by name, in the order offered, and the best of them.

    Parameters
    ----------
    instance
        The instance every schedule is replayed on.
    options
        The solve's options: the objective, and the options a candidate must respect.
    """

    def __init__(self, instance: Instance, options: InferMaxOptions) -> None:
        self.instance, self.options = instance, options
        self.found: dict[str, Candidate] = {}
        self.best_name: str | None = None
        #: The names of the seeds: the candidates the solve starts from (policies and ``serial``),
        #: as opposed to those its own phases find.
        self.seeds: set[str] = set()
        #: The replays of the schedules offered so far (what the solve keeps time for at its end).
        self.replays = SlowestRun()

    def offer(self, name: str, schedule: Schedule | None) -> Candidate | None:
        """Replay ``schedule`` and keep it as ``name`` when it replays cleanly and respects the
        options; the candidate, else None (also for no schedule)."""
        if schedule is None:
            return None
        with self.replays.timing():
            rep = replay(self.instance, schedule)
        if not (rep.feasible and _respects(rep, self.options)):
            return None
        candidate = Candidate(schedule, objective_of(rep, self.options.objective), rep)
        self.add(name, candidate)
        return candidate

    def add(self, name: str, candidate: Candidate) -> None:
        """Keep a candidate already replayed (by a solve under the same options) as ``name``."""
        self.found[name] = candidate
        sign = -1.0 if self.options.objective in MAXIMISED else 1.0
        if self.best_name is None or sign * candidate.value < sign * self.found[self.best_name].value:
            self.best_name = name

    @property
    def best(self) -> Candidate:
        """The candidate of best objective: least, most for a maximised one (the first offered among equals)."""
        if self.best_name is None:
            raise LookupError("no candidate schedule")
        return self.found[self.best_name]

    @property
    def warm_name(self) -> str | None:
        """The candidate that seeds the model: the option ``warm_start``, else the best."""
        return self.options.warm_start or self.best_name

    def check_warm_start(self) -> None:
        """Raise :class:`~optsched.options.OptionError` when the option ``warm_start`` names a
        policy that gave no schedule respecting the options (bad input: exit 2 on the command line)."""
        if self.warm_name not in self:
            raise OptionError(
                f"option 'warm_start': policy {self.warm_name!r} gives no schedule respecting the options "
                f"(available: {', '.join(sorted(self.found))})"
            )

    def values(self) -> dict[str, float]:
        """Each candidate's objective, by name."""
        return {name: cand.value for name, cand in self.found.items()}

    def schedules(self) -> dict[str, Schedule]:
        """Each candidate's schedule, by name."""
        return {name: cand.schedule for name, cand in self.found.items()}

    def __contains__(self, name: str) -> bool:
        return name in self.found

    def __len__(self) -> int:
        return len(self.found)


#: Policies offered first for the objective ``goodput`` (the best at meeting SLOs on the traces
#: measured in docs/performance.md: the SLO-aware ones, then the best of the others); every other
#: policy follows while the time limit allows (:func:`initial_candidates`).
GOODPUT_FIRST_POLICIES = ("slo-shed", "slo-budget", "slo-lazy", "vllm-hy", "sarathi-pc", "rank-o", "vllm", "sarathi")

#: Most batches of a ``serial`` candidate built under a deadline (about a second to build and replay).
SERIAL_MAX_BATCHES = 200_000


def serial_batch_count(instance: Instance) -> int:
    """About the batches of the serial schedule: each request's prompt in chunks of min(P, C)
    tokens, then its output tokens after the first, one a batch."""
    limits = instance.limits
    chunk = min(limits.prefill_budget, limits.token_budget)
    return sum(-(-r.prompt_tokens // chunk) + r.output_tokens - 1 for r in instance.requests)


def initial_candidates(
    instance: Instance,
    options: InferMaxOptions,
    budget: TimeBudget,
    hard: TimeBudget = NO_LIMIT,
    first: tuple[str, ...] = (),
) -> CandidatePool:
    """The pool with every registered policy's schedule and ``serial``'s (:func:`.schedules.serial_schedule`),
    within ``budget``.

    Policies are skipped when chunked prefill is off (their chunking cannot be checked without
    re-implementing the semantics) or when they do not apply to the instance, fail or violate an
    option. The ``warm_start`` policy runs first, then the policies named in ``first`` (in that
    order: an objective's best-suited policies), then the other policies of the unified scheduler
    (:data:`~optsched.policies.config.POLICY_CONFIGS`), then the others (with a time limit, only on
    instances of fewer than :data:`.model.SCALE_MIN_REQUESTS` requests: they have no clock inside,
    and on a 2,000-request trace slice the slowest took 150 times as long as ``vllm``); another is
    started only while the time left of ``budget`` exceeds the longest policy run so far (run
    and replay), once there is one candidate. A policy of the unified scheduler runs in slices and,
    once there is a candidate, is abandoned when ``hard`` (the solve's own budget) expires
    (:func:`.online.run_until`): the first runs to its end, so that every solve has a schedule.
    Where the kernels are compiled ahead of time (:func:`optsched.aotkernels.ahead_of_time`), these
    policies run on the compiled engine instead, whose schedules are the same batch for batch and
    which takes about a second on a 20,000-request trace;
    ``serial`` (one request at a time) comes last: always when no policy gave a candidate, unless
    ``hard`` has expired (the pool is then empty); otherwise within ``budget`` and, with a time
    limit, only when it has at most :data:`SERIAL_MAX_BATCHES` batches (it has no clock inside: a
    full trace's serial schedule has millions of batches and takes a minute to build).

    Raises
    ------
    InferMaxInputError
        When a request can never be served (from :func:`.schedules.serial_schedule`).
    """
    pool = CandidatePool(instance, options)
    if not options.no_chunk:
        from ...aotkernels import ahead_of_time
        from ...policies import policy_names, simulator_for
        from ...policies.config import POLICY_CONFIGS
        from ...policies.fastsim import compiled_schedule
        from .online import run_until

        compiled = ahead_of_time()  # the compiled engine: no JIT to wait for, tens of times faster

        horizon = max((r.arrival for r in instance.requests), default=0.0) + 1.0

        # the warm start first, then ``first``, then the unified scheduler's policies (fast, and the
        # seeds of the policy search at scale), then the others, each only while time is left
        rank = {name: k for k, name in enumerate(first)}
        names = sorted(
            policy_names(),
            key=lambda n: (n != options.warm_start, rank.get(n, len(rank)), n not in POLICY_CONFIGS, n),
        )
        slowest = SlowestRun()  # of the policies so far (run and replay)
        foreign = not budget.limited or len(instance.requests) < SCALE_MIN_REQUESTS
        for name in names:
            if name not in POLICY_CONFIGS and not foreign and name != options.warm_start:
                continue  # no clock inside: on a large trace one may run for minutes
            if len(pool) and name != options.warm_start and not slowest.fits(budget):
                continue
            try:
                with slowest.timing():
                    if name in POLICY_CONFIGS:
                        schedule = compiled_schedule(instance, POLICY_CONFIGS[name]) if compiled else None
                        if schedule is None:
                            stop_at = hard if len(pool) else NO_LIMIT  # the first candidate runs to its end
                            schedule = run_until(instance, POLICY_CONFIGS[name], stop_at, horizon)
                        pool.offer(name, schedule)
                    else:
                        pool.offer(name, simulator_for(name)(instance))
            except Exception:  # noqa: BLE001 - a failing policy is only a missing candidate
                continue
    if not len(pool) and hard.expired():  # every policy stopped at the solve's time limit: no time for serial
        return pool
    too_long = budget.limited and serial_batch_count(instance) > SERIAL_MAX_BATCHES
    if not len(pool) or not (budget.expired() or too_long):
        pool.offer("serial", serial_schedule(instance, no_chunk=options.no_chunk))
    pool.seeds = set(pool.found)
    return pool


def candidate_schedules(instance: Instance, options: InferMaxOptions) -> dict[str, Schedule]:
    """Feasible schedules that respect the options: every registered policy and ``serial``
    (:func:`initial_candidates` without a time limit)."""
    return initial_candidates(instance, options, NO_LIMIT).schedules()

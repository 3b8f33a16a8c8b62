"""Gather a bound report: proven bounds, the best schedule found in a time budget, every policy.

:func:`build_report` runs, in this order and under one overall deadline:

1. the generic cost-model bounds of :mod:`optsched.bounds` and :mod:`optsched.load_bounds` (the
   load-aware ones within :data:`GENERIC_SHARE` of the time);
2. every registered policy (:data:`optsched.policies.POLICIES`): simulate, then replay; no policy
   starts after :data:`POLICY_SHARE` of the time (the others are listed as skipped); meanwhile
   the solver of step 4 loads (its modules and compiled kernels, in a thread begun with the
   report), and the report waits for it here until the deadline;
3. every registered bounder (:data:`optsched.problems.BOUNDERS`) of :data:`SCHEDULE_PROBLEMS`,
   whose bounds are compared, with the objective and :data:`BOUNDER_SHARE` of the remaining time
   in ``options`` (the others are noted as not run: ``optsched bound --problem NAME`` gives theirs);
   then the proven P99 bounds within :data:`TAIL_SHARE` of the remaining time;
4. the solver of ``solve_problem`` (default ``infermax``) when it is registered, the instance has
   at most ``solve_max_requests`` requests (default: any number), no policy is already proven
   optimal by a bound and time is left, with
   the remaining time less :func:`solver_room` as its limit and the best policy as its warm
   start. It runs through :func:`optsched.api.solve`: its schedule is replayed and its objective
   checked against the replay (:func:`optsched.api.checked`) before it is used; its proven bound
   joins the bounds.

The best schedule is the one with the least replayed objective among the solver's and the
policies'. Every number that reaches the report comes from :func:`optsched.schedule.replay`.

The time limit is one :class:`~optsched.budget.TimeBudget` (less the caller's reserve) that each
phase takes its share of. The deadline is honoured with ``SIGALRM`` where available (main thread, POSIX): a phase still
running at the deadline is abandoned and the report is marked ``partial``, as on Ctrl-C
(``KeyboardInterrupt``), which also yields the partial report instead of nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import api
from ..budget import NO_LIMIT, TimeBudget
from ..instance import Instance, InstanceError
from ..option_error import OptionError
from ..policies import POLICIES, runs_compiled, simulator_for
from ..problems import BOUNDERS, SOLVERS
from ..result import MAXIMISED, default_objective, objective_named, objective_of
from ..schedule import replay
from .alarm import TimeUp, alarm
from .records import BoundEntry, PolicyRun, Report, SolverRun

__all__ = [
    "HIGHLIGHTED_POLICIES",
    "SCHEDULE_PROBLEMS",
    "build_report",
    "gather_bounds",
]

#: Problems whose schedules are iteration-level schedules judged by replay under the contract, so
#: that their bounds bound the same objective as the policies' schedules. Bounds of other problems
#: (other models, e.g. static batches or placement) are listed but not compared.
SCHEDULE_PROBLEMS: tuple[str, ...] = ("infermax",)

#: Room kept after the solver (its set-up, the replay of its schedule, the report itself): this
#: share of the time left, at most :data:`SOLVER_ROOM_CAP` seconds, plus 1 s.
SOLVER_ROOM_SHARE = 0.2
#: Most seconds of :data:`SOLVER_ROOM_SHARE`: a long limit goes to the solver, less 11 s.
SOLVER_ROOM_CAP = 10.0

#: Share of the time left that the generic bounds' load-aware part may take (the first SRPT bound
#: always runs; :func:`optsched.load_bounds.load_bounds`).
GENERIC_SHARE = 0.2
#: Share of the report's time (less the caller's reserve) after which no further policy starts, so
#: that the bounders and the solver keep the rest.
POLICY_SHARE = 0.5
#: Share of the time left that each compared bounder gets as its own time limit.
BOUNDER_SHARE = 0.25
#: Share of the time left that the P99 bounds may take (their bisection stops there).
TAIL_SHARE = 0.15
#: Seconds past the report's deadline after which a solver still running is abandoned (it has its
#: own time limit, :func:`solver_room` before the deadline).
SOLVER_GRACE = 1.0

#: The engines' default policies, which the report runs first and its tables and plots name first
#: and highlight.
HIGHLIGHTED_POLICIES = ("vllm", "sarathi")

#: Default largest instance (in requests) handed to the solver: None, every size (the InferMax
#: solve works at any size, :mod:`optsched.problems.infermax.scale`); a number is an opt-out.
SOLVE_MAX_REQUESTS: int | None = None


def gather_bounds(
    instance: Instance,
    problem: str | None = None,
    objective: str = "makespan",
    options: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> list[BoundEntry]:
    """Every applicable lower bound on ``objective`` for ``instance``.

    Parameters
    ----------
    instance
        The instance.
    problem
        Only this problem's bounder (plus the generic bounds when it is in
        :data:`SCHEDULE_PROBLEMS`); None = generic bounds and every registered bounder.
    objective
        A name of :data:`optsched.result.OBJECTIVE_TABLE` (``makespan``, ``latency``, ``ttft``) or
        an alias (``completion``: ``latency``).
    options
        Passed to each bounder (``objective`` is set from the argument).
    notes
        When given, receives one line per bounder that failed or does not apply.

    Returns
    -------
    list of BoundEntry
        Generic bounds first, then each bounder's, in problem-name order.
    """
    from ..load_bounds import proven_bounds  # numba: loaded by the report, not by the CLI's start

    objective = objective_named(objective).name
    if problem is not None and problem not in BOUNDERS and problem not in SCHEDULE_PROBLEMS:
        raise KeyError(f"unknown problem {problem!r} for bound (known: {', '.join(sorted(BOUNDERS))})")
    out: list[BoundEntry] = []
    if problem is None or problem in SCHEDULE_PROBLEMS:
        out += [
            BoundEntry("generic", b.name, b.value, b.valid, b.note, objective, True)
            for b in proven_bounds(instance, objective)
        ]
    names = sorted(BOUNDERS) if problem is None else [problem] if problem in BOUNDERS else []
    for name in names:
        out += _run_bounder(instance, name, objective, dict(options or {}), notes)
    return out


def _run_bounder(
    instance: Instance,
    name: str,
    objective: str,
    options: dict[str, Any],
    notes: list[str] | None,
    budget: TimeBudget = NO_LIMIT,
) -> list[BoundEntry]:
    """One bounder's bounds within ``budget``; a bounder that raises is noted, not fatal (it may not
    apply). It gets ``objective`` and ``options`` where it has such options."""
    try:
        accepted = api.accepted(name, "bound", {**options, "objective": objective})
        bounds = api.bound(instance, name, accepted, budget=budget)
    except (TimeUp, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a bounder that does not apply must not sink the report
        if notes is not None:
            notes.append(f"bounder {name}: not applied ({type(exc).__name__}: {exc})")
        return []
    comparable = name in SCHEDULE_PROBLEMS
    return [BoundEntry(name, b.name, float(b.value), bool(b.valid), b.note, objective, comparable) for b in bounds]


def _run_policy(instance: Instance, name: str, objective: str) -> PolicyRun:
    t0 = time.perf_counter()
    try:
        schedule = simulator_for(name)(instance)
    except (TimeUp, KeyboardInterrupt):
        raise
    except InstanceError as exc:
        return PolicyRun(name, "n/a", message=str(exc), wall_time=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - one failing policy is reported, not fatal
        return PolicyRun(name, "error", message=f"{type(exc).__name__}: {exc}", wall_time=time.perf_counter() - t0)
    result = replay(instance, schedule)
    wall = time.perf_counter() - t0
    if not result.feasible:
        return PolicyRun(
            name,
            "invalid",
            None,
            schedule,
            result,
            f"{len(result.violations)} violation(s): {result.violations[0]}",
            wall,
        )
    return PolicyRun(name, "ok", objective_of(result, objective), schedule, result, wall_time=wall)


def _check_objective(instance: Instance, objective: str) -> None:
    """An InstanceError for an objective the instance gives no meaning: ``goodput`` without any SLO
    (:func:`optsched.problems.infermax.goodput_bounds.require_slos`)."""
    if objective == "goodput":
        from ..problems.infermax.goodput_bounds import require_slos

        require_slos(instance)


def _warm_start(report: Report, problem: str) -> str | None:
    """The best policy (by the report's objective) that ``problem``'s solver takes as its warm
    start (the hybrid solver takes the hybrid policies only); None when it takes none of them."""
    sign = -1.0 if report.objective in MAXIMISED else 1.0
    ok = [p for p in report.policies if p.status == "ok" and p.objective is not None]
    for run in sorted(ok, key=lambda p: sign * float(p.objective or 0.0)):
        try:
            api.parse_options(problem, "solve", api.accepted(problem, "solve", {"warm_start": run.policy}))
        except OptionError:
            continue
        return run.policy
    return None


def _run_solver(
    instance: Instance, problem: str, objective: str, budget: TimeBudget, warm_start: str | None
) -> SolverRun:
    """Run the exact solver within ``budget``; its schedule is replayed and its objective checked
    before use. The solver gets the objective and the warm start where it has such options.
    """
    options = api.accepted(problem, "solve", {"objective": objective, "warm_start": warm_start})
    t0 = time.perf_counter()
    result = api.solve(instance, problem, options, budget=budget)  # replayed and checked (api.checked)
    wall = time.perf_counter() - t0
    run = SolverRun(problem, result, wall_time=wall)
    if result.schedule is None or result.objective is None or result.replay is None:
        run.message = f"status {result.status}: no schedule" + (f" ({result.message})" if result.message else "")
        return run
    run.replay = result.replay
    result.objective = objective_of(result.replay, objective)
    source = result.extra.get("schedule_source")
    if result.extra.get("schedule_is_seed"):
        run.seed = str(source)
        run.message = f"no schedule better than seed {run.seed} found in {wall:.1f} s" + _why_seed(result.extra)
    elif source == "online-search":
        search = result.extra["scale"]["online_search"]
        run.message = f"policy search from seed {search['seed']} ({search['configurations']} configurations tried)"
    elif source is not None and source != "model":
        run.message = f"schedule of the solve's phase {source!r}"
    return run


def _why_seed(extra: dict[str, Any]) -> str:
    """Why a solve returned its seed, from its ``extra`` (empty when it does not say)."""
    scale = extra.get("scale") or {}
    search = scale.get("online_search")
    if search is not None:
        done = "every climb ended at a local optimum" if search.get("local_optimum") else "time limit"
        return f" ({search.get('configurations', 0)} policy configurations tried; {done})"
    if scale.get("plan_search"):
        return f" (plan search {scale['plan_search']})"
    return f" ({extra['stopped']})" if extra.get("stopped") else ""


def build_report(
    instance: Instance,
    *,
    objective: str | None = None,
    time_limit: float | None = 60.0,
    policies: Sequence[str] | None = None,
    solve_problem: str = "infermax",
    solve_max_requests: int | None = SOLVE_MAX_REQUESTS,
    reserve: float = 0.0,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Gather a full bound report for ``instance`` within ``time_limit`` seconds.

    Parameters
    ----------
    instance
        The instance.
    objective
        What to compare: ``makespan``, ``latency`` (mean end-to-end latency; ``completion`` is its
        alias) or ``ttft`` (mean time to first token), all in seconds. Default
        (:func:`optsched.result.default_objective`): ``latency`` when requests arrive at different
        times, else ``makespan``.
    time_limit
        Overall limit in seconds (None = no limit); ``reserve`` seconds of it are kept for the
        caller (e.g. to draw the HTML).
    policies
        Policy names to run (default: every registered policy).
    solve_problem
        Problem whose solver looks for the best schedule.
    solve_max_requests
        Largest instance handed to the solver (None: every size; 0 disables it).
    progress
        Called with one line per step done (e.g. an :class:`optsched.progress.Progress`); its
        ``doing`` method, where it has one, is told the step under way.

    Returns
    -------
    Report
        Complete, or ``partial`` when the deadline or Ctrl-C cut it short.
    """
    from ..load_bounds import proven_bounds  # numba: loaded here, before any phase's alarm, not by the CLI's start

    say = progress or (lambda message: None)
    doing = getattr(progress, "doing", None) or (lambda message: None)  # the step under way, without a line
    t0 = time.perf_counter()
    budget = TimeBudget.of(time_limit).reserve(reserve)
    objective = objective_named(objective).name if objective is not None else default_objective(instance)
    _check_objective(instance, objective)
    report = Report(instance, objective, time_limit=time_limit)
    names = sorted(POLICIES) if policies is None else list(policies)
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise KeyError(f"unknown policy {unknown[0]!r} (known: {', '.join(sorted(POLICIES))})")
    # the engines' defaults first, then the compiled ones: a time limit on a large trace still has them
    names.sort(key=lambda name: (name not in HIGHLIGHTED_POLICIES, not runs_compiled(name)))
    too_large = solve_max_requests is not None and len(instance.requests) > solve_max_requests
    start_up = None if solve_problem not in SOLVERS or too_large else _SolverStartUp(solve_problem)
    phase = "bounds"
    try:
        with _timed(report, "bounds"):
            report.bounds = [
                BoundEntry("generic", b.name, b.value, b.valid, b.note, objective, True)
                for b in proven_bounds(instance, objective, budget.share(GENERIC_SHARE))
            ]
        say(f"generic bounds: {', '.join(f'{b.name} {b.value:.6g}' for b in report.bounds)}")
        phase = "policies"
        with _timed(report, "policies"):
            _policy_phase(report, names, budget.share(POLICY_SHARE), say, doing)
        if start_up is not None:
            phase = "solver start-up"
            doing(f"loading the {solve_problem} solver (its compiled kernels are built on first use)")
            with _timed(report, "solver start-up"):
                if not start_up.ended(budget):
                    raise TimeUp
        phase = "bounders"
        with _timed(report, "bounders"), alarm(budget):
            _bounder_phase(report, budget, say, doing)
        phase = "P99 bounds"
        with _timed(report, "tail bounds"):
            _tail_phase(report, budget.share(TAIL_SHARE), say, doing)
        phase = "solver"
        report.solver = _solver_phase(report, solve_problem, solve_max_requests, budget, say)
    except TimeUp:
        report.partial = True
        report.notes.append(f"time limit reached during {phase}; the report is partial")
        say(f"time limit reached during {phase}")
    except KeyboardInterrupt:
        report.partial = True
        report.notes.append(f"interrupted during {phase}; the report is partial")
        say(f"interrupted during {phase}")
    done = {p.policy for p in report.policies}
    if len(done) < len(names):
        report.policies += [
            PolicyRun(p, "skipped", message="not run (report cut short)" if report.partial else "not run (time share)")
            for p in names
            if p not in done
        ]
    report.wall_time = time.perf_counter() - t0
    return report


def _bounder_phase(
    report: Report, budget: TimeBudget, say: Callable[[str], None], doing: Callable[[str], None]
) -> None:
    """Run the bounders whose bounds are compared (:data:`SCHEDULE_PROBLEMS`), each with
    :data:`BOUNDER_SHARE` of the time left; the others are noted as not run."""
    for name in sorted(BOUNDERS):
        if name not in SCHEDULE_PROBLEMS:  # its bounds would be listed, never compared
            report.notes.append(f"bounder {name}: not run (its bounds are not compared with the schedules')")
            continue
        t_start = time.perf_counter()
        doing(f"bounder {name}")
        found = _run_bounder(report.instance, name, report.objective, {}, report.notes, budget.share(BOUNDER_SHARE))
        report.bounder_times[name] = time.perf_counter() - t_start
        report.bounds += found
        say(f"bounder {name}: {len(found)} bound(s) ({report.bounder_times[name]:.1f}s)")


def _tail_phase(report: Report, budget: TimeBudget, say: Callable[[str], None], doing: Callable[[str], None]) -> None:
    """The proven P99 bounds (:func:`optsched.problems.infermax.goodput_bounds.tail_bounds`, imported
    here: the CLI starts without InferMax's modules) within ``budget``: a bisection cut short gives
    a weaker, still proven, bound; one that could not start in its share is noted."""
    from ..problems.infermax import goodput_bounds

    doing("P99 bounds")
    try:
        with alarm(budget):
            report.tail_bounds = goodput_bounds.tail_bounds(report.instance, budget=budget)
    except TimeUp:
        report.notes.append(f"P99 bounds: not computed within their share of the time limit ({100 * TAIL_SHARE:.0f} %)")
        say("P99 bounds: not computed within their time share")
        return
    say("P99 bounds: " + ", ".join(f"{k} >= {v:.4g} s" for k, v in report.tail_bounds.items() if v is not None))


def _policy_phase(
    report: Report,
    names: Sequence[str],
    share: TimeBudget,
    say: Callable[[str], None],
    doing: Callable[[str], None],
) -> None:
    """Run the policies in turn within ``share`` (:data:`POLICY_SHARE` of the time): none starts once
    it is used, and the one running when it ends is stopped (listed as skipped)."""
    objective = report.objective
    used = f"the policies' share of the time limit ({100 * POLICY_SHARE:.0f} %) was used"
    for k, name in enumerate(names, 1):
        if share.expired():
            report.notes.append(f"policies {', '.join(names[k - 1 :])} not run: {used}")
            return
        doing(f"policy {k}/{len(names)} {name}")
        t_start = time.perf_counter()
        try:
            with alarm(share):
                run = _run_policy(report.instance, name, objective)
        except TimeUp:
            wall = time.perf_counter() - t_start
            report.policies.append(PolicyRun(name, "skipped", message=f"stopped after {wall:.1f} s", wall_time=wall))
            report.notes.append(f"policy {name} stopped after {wall:.1f} s, the later ones not run: {used}")
            say(f"policy {k}/{len(names)} {name}: stopped at the policies' time share ({wall:.1f}s)")
            return
        report.policies.append(run)
        value = f"{objective} {run.objective:.6g}" if run.objective is not None else run.status
        say(f"policy {k}/{len(names)} {name}: {value} ({run.wall_time:.1f}s)")


class _SolverStartUp:
    """The start-up of the solver that the solver phase runs (its modules and compiled kernels:
    :meth:`optsched.problems.Formulation.start_up`) in a daemon thread begun with the report, so
    that it loads while the bounds and the policies run, and a limit it would use up still gives
    the policies' schedules. No signal reaches that thread, so no import is cut short (a C
    extension's import interrupted can leave it half loaded). A start-up that fails is left to the
    solver phase, whose solve then reports the error."""

    def __init__(self, problem: str) -> None:
        self.thread = threading.Thread(
            target=self._start, args=(problem,), name="optsched-solver-start-up", daemon=True
        )
        self.thread.start()

    @staticmethod
    def _start(problem: str) -> None:
        try:
            api.formulation(problem).start_up("solve")
        except Exception:  # noqa: BLE001 - the solve in the main thread raises it again and reports it
            pass

    def ended(self, budget: TimeBudget) -> bool:
        """Whether the start-up has ended, waiting for it at most the time left of ``budget``."""
        self.thread.join(budget.left())
        return not self.thread.is_alive()


def _solver_phase(
    report: Report,
    problem: str,
    max_requests: int | None,
    budget: TimeBudget,
    say: Callable[[str], None],
) -> SolverRun | None:
    instance = report.instance
    if problem not in SOLVERS:
        report.notes.append(f"no solver registered for problem {problem!r}: best schedule from the policies")
        return None
    n = len(instance.requests)
    if max_requests is not None and n > max_requests:
        report.notes.append(f"solver {problem} not run: {n} requests > {max_requests} (--solve-max-requests)")
        return SolverRun(problem, message=f"not run: {n} requests > {max_requests}")
    warm = _warm_start(report, problem)
    if report.proven_optimal:
        report.notes.append(f"solver {problem} not run: the best policy meets a proven bound (optimal)")
        return SolverRun(problem, message="not run: the best policy is proven optimal by a bound")
    if budget.expired():
        report.notes.append(f"solver {problem} not run: the time limit was used before its phase")
        return SolverRun(problem, message="not run: no time left")
    room = budget.left()
    solver_budget = budget if room is None else budget.reserve(solver_room(room)).at_least(0.5)
    left = solver_budget.left()
    say(f"solver {problem}: time limit {'none' if left is None else f'{left:.1f}s'}, warm start {warm}")
    with _timed(report, "solver"), alarm(budget.reserve(-SOLVER_GRACE)):
        try:
            run = _run_solver(instance, problem, report.objective, solver_budget, warm)
        except (TimeUp, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - reported in the table, not fatal
            run = SolverRun(problem, message=f"{type(exc).__name__}: {exc}")
    res = run.result
    if res is not None:
        say(f"solver {problem}: {res.status}, objective {res.objective}, bound {res.bound} ({run.wall_time:.1f}s)")
        if res.bound is not None and math.isfinite(res.bound) and res.status in ("optimal", "feasible", "time_limit"):
            report.bounds.append(
                BoundEntry(
                    problem,
                    f"{problem}-solver",
                    float(res.bound),
                    True,
                    f"best proven bound of the {res.solver} solve ({res.status})",
                    report.objective,
                    problem in SCHEDULE_PROBLEMS,
                )
            )
    return run


def solver_room(left: float) -> float:
    """Seconds of ``left`` kept after the solver: :data:`SOLVER_ROOM_SHARE` of it, at most
    :data:`SOLVER_ROOM_CAP`, plus 1 s."""
    return min(SOLVER_ROOM_SHARE * left, SOLVER_ROOM_CAP) + 1.0


@contextmanager
def _timed(report: Report, phase: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        report.phase_times[phase] = report.phase_times.get(phase, 0.0) + (time.perf_counter() - t0)

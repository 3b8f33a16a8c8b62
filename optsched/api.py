"""The Python entry points: :func:`solve`, :func:`bound` and :func:`simulate` an instance.

They are what ``optsched solve``, ``optsched bound`` and ``optsched simulate`` do, without files:
the formulation, bounder or policy is looked up in its registry (:mod:`optsched.problems`,
:mod:`optsched.policies`) and imported only then, and the options are read by the formulation's
options dataclass (an unknown option, a wrong value or an option without effect raises
:class:`optsched.options.OptionError`). Every schedule returned has been replayed by
:func:`optsched.schedule.replay`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .budget import TimeBudget
from .instance import Instance, load_instance
from .result import OBJECTIVES, Bound, SolveResult, check_agreement, objective_of
from .schedule import ReplayResult, Schedule, replay

if TYPE_CHECKING:
    from .options import Options
    from .problems import Formulation

__all__ = ["ScheduleRejected", "accepted", "bound", "checked", "formulation", "parse_options", "simulate", "solve"]


class ScheduleRejected(RuntimeError):
    """A formulation returned a schedule that does not replay cleanly, or whose replayed objective
    disagrees with the objective it reported (a bug of the formulation, never a user's error)."""


def _instance(instance: Instance | str | os.PathLike[str]) -> Instance:
    """``instance``, or the instance its file or shipped name holds."""
    if isinstance(instance, Instance):
        return instance.checked()
    if not isinstance(instance, (str, os.PathLike)):
        raise TypeError(f"instance: an Instance, a file or a shipped instance name, got {type(instance).__name__}")
    return load_instance(os.fspath(instance))


def _name(value: object, what: str) -> str:
    """``value``, a registry name (a problem's, a policy's), checked to be a string."""
    if not isinstance(value, str):
        raise TypeError(f"{what}: a name (str), got {type(value).__name__}")
    return value


def formulation(problem: str) -> Formulation:
    """The registration record of ``problem`` (:class:`optsched.problems.Formulation`).

    Raises
    ------
    KeyError
        For an unknown problem (the message lists the known ones).
    """
    from .problems import formulation as lookup

    return lookup(problem)


def accepted(problem: str, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``options`` that ``problem``'s solver (``kind="solve"``) or bounder
    (``"bound"``) has (:func:`optsched.problems.accepted`: shared settings of ``report`` and
    ``sweep``, such as the objective, that a formulation without the option does not take)."""
    from .problems import accepted as take

    return take(problem, _kind(kind), options)


def parse_options(problem: str, kind: str, options: Mapping[str, Any]) -> Any:
    """``options`` read by the options dataclass of ``problem``'s solver (``kind="solve"``) or
    bounder (``"bound"``), as :func:`solve` and :func:`bound` read them; the mapping itself for a
    formulation that reads its own options.

    Raises
    ------
    KeyError
        For an unknown problem.
    optsched.options.OptionError
        For an unknown option or a bad value.
    """
    from .problems import options_for

    cls = options_for(problem, _kind(kind))
    return dict(options) if cls is None else cls.parse(options)


def _kind(kind: str) -> str:
    """``kind`` when it is ``"solve"`` or ``"bound"``; a ValueError naming it otherwise."""
    if kind not in ("solve", "bound"):
        raise ValueError(f"kind: 'solve' or 'bound', got {kind!r}")
    return kind


def _with_options(
    options: Options | Mapping[str, Any] | None, more: Mapping[str, Any], time_limit: float | None
) -> Options | dict[str, Any]:
    """One set of options: an options dataclass or the mapping ``options`` and ``more``, with
    ``time_limit`` when one is given; an option given twice (in ``options`` and as a keyword, or
    ``time_limit`` in both) is a TypeError, as for a function's argument."""
    if options is not None and not isinstance(options, Mapping):
        if more:
            raise TypeError(f"options given both as {type(options).__name__} and as keywords: {sorted(more)}")
        if time_limit is None or not dataclasses.is_dataclass(options):
            return options  # a value of another type: the options class's parse says what it needs
        if getattr(options, "time_limit", None) is not None:
            raise TypeError("time_limit given twice: in the options and as the keyword time_limit")
        return dataclasses.replace(options, time_limit=time_limit)
    merged = dict(options or {})
    keywords = {**more, **({} if time_limit is None else {"time_limit": time_limit})}
    twice = sorted(set(merged) & set(keywords))
    if twice:
        raise TypeError(f"option {twice[0]!r} given twice: in the options and as a keyword")
    return merged | keywords


def _budget(budget: TimeBudget | None) -> TimeBudget:
    """``budget``, or one without a limit when None."""
    if budget is None:
        return TimeBudget()
    if not isinstance(budget, TimeBudget):
        raise TypeError(f"budget: a TimeBudget or None, got {type(budget).__name__} (seconds go in time_limit)")
    return budget


def checked(instance: Instance, result: SolveResult, problem: str) -> SolveResult:
    """A formulation's answer as the result reported: its schedule replayed and checked.

    The one rule of every caller (``optsched solve``, ``report``, ``sweep``, :func:`solve`): a
    schedule that does not replay cleanly, or a reported objective that disagrees with the replayed
    one (for the objective the formulation optimised: its ``objective_name`` or its record's first
    objective, when that is one of :data:`optsched.result.OBJECTIVES`), raises
    :class:`ScheduleRejected`. ``result.replay`` is set; the result is returned.
    """
    if result.schedule is None:
        return result
    replayed = result.replay if result.replay is not None else replay(instance, result.schedule)
    if not replayed.feasible:
        raise ScheduleRejected(
            f"{problem}/{result.solver} returned a schedule that does not replay cleanly: "
            + "; ".join(replayed.violations[:3])
        )
    result.replay = replayed
    objective = result.extra.get("objective_name") or formulation(problem).objectives[0]
    if result.objective is not None and objective in OBJECTIVES:
        try:
            check_agreement(result.objective, objective_of(replayed, objective), f"{problem} solver")
        except RuntimeError as exc:
            raise ScheduleRejected(str(exc)) from None
    return result


def solve(
    instance: Instance | str | os.PathLike[str],
    problem: str = "infermax",
    options: Options | Mapping[str, Any] | None = None,
    *,
    time_limit: float | None = None,
    budget: TimeBudget | None = None,
    **more: Any,
) -> SolveResult:
    """Solve ``problem``'s formulation on ``instance``.

    The solve's time is one :class:`~optsched.budget.TimeBudget`, made here: ``budget`` (the
    command line's, counted from the program's start) within the option ``time_limit`` counted from
    now. It is passed down to the formulation's ``solve(instance, options, budget)``, its phases and
    its solver back-ends, which read its time left (docs/development.md, "The time budget").

    Parameters
    ----------
    instance
        An :class:`~optsched.instance.Instance`, or a JSON file or shipped instance name
        (:func:`~optsched.instance.load_instance`).
    problem
        A name of :data:`optsched.problems.SOLVERS` (``infermax``, ``hybrid``, ``hybrid-offline``,
        ``aladdin``, ``gmax``, ``scls-batch``).
    options
        The formulation's options, as its options dataclass or a mapping
        (:data:`optsched.problems.SOLVE_OPTIONS`); None: as keywords.
    time_limit
        Seconds for the whole solve (None: the formulation's default, or the dataclass's own).
    budget
        A time budget the solve keeps within as well (None: only ``time_limit``).
    **more
        The formulation's options as keywords, e.g. ``solver="highs"``, ``objective="ttft"``,
        ``no_evict=True``.

    Returns
    -------
    SolveResult
        Status, objective (replayed when there is a schedule), proven bound, schedule and its replay
        (checked by :func:`checked`).

    Raises
    ------
    KeyError
        For an unknown problem (the message lists the known ones).
    optsched.options.OptionError
        For an option the formulation does not have, a wrong value, or an option without effect.
    ScheduleRejected
        When the formulation's schedule does not replay cleanly or disagrees with its objective.

    Examples
    --------
    >>> import optsched
    >>> result = optsched.solve("toy-4", time_limit=10)
    >>> result.status, result.objective >= result.bound
    (<Status.OPTIMAL: 'optimal'>, True)
    """
    from .problems import options_for, solver_for

    inst = _instance(instance)
    solver = solver_for(_name(problem, "problem"))
    given = _with_options(options, more, time_limit)
    cls = options_for(problem)
    opts = given if cls is None else cls.parse(given)
    limit = opts.get("time_limit") if isinstance(opts, Mapping) else getattr(opts, "time_limit", None)
    result: SolveResult = solver(inst, opts, _budget(budget).within(limit))
    return checked(inst, result, problem)


def bound(
    instance: Instance | str | os.PathLike[str],
    problem: str | None = None,
    options: Options | Mapping[str, Any] | None = None,
    *,
    budget: TimeBudget | None = None,
    **more: Any,
) -> list[Bound]:
    """Proven bounds of ``instance``: the trivial ones (``problem=None``) or a formulation's.

    Parameters
    ----------
    instance
        As for :func:`solve`.
    problem
        None for the bounds of :mod:`optsched.bounds` and the load-aware ones of
        :mod:`optsched.load_bounds` (every schedule of the instance; they take no options), else a
        name of :data:`optsched.problems.BOUNDERS` (``infermax``, ``hybrid``, ``aladdin``).
    options, **more
        Its options (:data:`optsched.problems.BOUND_OPTIONS`), as for :func:`solve`; their
        ``time_limit`` becomes the bounder's :class:`~optsched.budget.TimeBudget` here, within
        ``budget`` (the command line's) when one is given.

    Returns
    -------
    list of Bound
        Each with its value and whether it is proven (``valid``).
    """
    inst = _instance(instance)
    if problem is None:
        _budget(budget)  # checked, though the trivial bounds take no time
        if options is not None and not isinstance(options, Mapping):
            given = [f"options {options!r}"]
        else:
            given = [f"option {name!r}" for name in [*more, *(options or {})]]
        if given:
            from .options import OptionError

            raise OptionError(f"{given[0]}: the trivial bounds take no options (give problem=...)")
        from .load_bounds import default_bounds

        return default_bounds(inst)
    from .problems import bounder_for, options_for

    bounder = bounder_for(_name(problem, "problem"))
    merged = _with_options(options, more, None)
    cls = options_for(problem, "bound")
    opts = merged if cls is None else cls.parse(merged)
    limit = opts.get("time_limit") if isinstance(opts, Mapping) else getattr(opts, "time_limit", None)
    return bounder(inst, opts, _budget(budget).within(limit))  # type: ignore[no-any-return]


def simulate(instance: Instance | str | os.PathLike[str], policy: str = "vllm") -> tuple[Schedule, ReplayResult]:
    """Run a scheduling policy on ``instance`` and replay its schedule.

    Parameters
    ----------
    instance
        As for :func:`solve`.
    policy
        A name of :data:`optsched.policies.POLICIES` (``vllm``, ``sarathi``, ``hybrid``, ...).

    Returns
    -------
    tuple of Schedule and ReplayResult
        The policy's schedule and its replay (``replay.metrics``: makespan, latencies, P99s, ...).

    Raises
    ------
    KeyError
        For an unknown policy (the message lists the known ones).
    RuntimeError
        When the policy's schedule does not replay cleanly (a bug of the policy).
    """
    from .policies import simulator_for

    inst = _instance(instance)
    schedule = simulator_for(_name(policy, "policy"))(inst)
    replayed = replay(inst, schedule)
    if not replayed.feasible:
        raise RuntimeError(
            f"policy {policy!r} produced a schedule that does not replay cleanly: " + "; ".join(replayed.violations[:3])
        )
    return schedule, replayed

"""The Python entry points: :func:`solve`, :func:`bound` and :func:`simulate` an instance.

They are what ``optsched solve``, ``optsched bound`` and ``optsched simulate`` do, without files:
the formulation, bounder or policy is looked up in its registry (:mod:`optsched.problems`,
:mod:`optsched.policies`) and imported only then, and the options are read by the formulation's
options dataclass (an unknown option, a wrong value or an option without effect raises
:class:`optsched.options.OptionError`). Every schedule returned has been replayed by
:func:`optsched.schedule.replay`.
"""

from __future__ import annotations

import os
from typing import Any

from .instance import Instance, load_instance
from .result import Bound, SolveResult
from .schedule import ReplayResult, Schedule, replay

__all__ = ["bound", "simulate", "solve"]


def _instance(instance: Instance | str | os.PathLike[str]) -> Instance:
    return instance if isinstance(instance, Instance) else load_instance(instance)


def solve(
    instance: Instance | str | os.PathLike[str],
    problem: str = "infermax",
    *,
    time_limit: float | None = None,
    **options: Any,
) -> SolveResult:
    """Solve ``problem``'s formulation on ``instance``.

    Parameters
    ----------
    instance
        An :class:`~optsched.instance.Instance`, or a JSON file or shipped instance name
        (:func:`~optsched.instance.load_instance`).
    problem
        A name of :data:`optsched.problems.SOLVERS` (``infermax``, ``hybrid``, ``hybrid-offline``,
        ``aladdin``, ``gmax``, ``scls-batch``).
    time_limit
        Seconds for the whole solve (None: the formulation's default).
    **options
        The formulation's options (:data:`optsched.problems.SOLVE_OPTIONS`), e.g. ``solver="highs"``,
        ``objective="ttft"``, ``no_evict=True``.

    Returns
    -------
    SolveResult
        Status, objective (replayed when there is a schedule), proven bound, schedule and its replay.

    Raises
    ------
    KeyError
        For an unknown problem (the message lists the known ones).
    optsched.options.OptionError
        For an option the formulation does not have, a wrong value, or an option without effect.

    Examples
    --------
    >>> import optsched
    >>> result = optsched.solve("toy-4", time_limit=10)
    >>> result.status, result.objective >= result.bound
    (<Status.OPTIMAL: 'optimal'>, True)
    """
    from .problems import solver_for

    inst = _instance(instance)
    solver = solver_for(problem)
    result: SolveResult = solver(inst, {**options, "time_limit": time_limit})
    if result.schedule is not None and result.replay is None:
        result.replay = replay(inst, result.schedule)
    return result


def bound(instance: Instance | str | os.PathLike[str], problem: str | None = None, **options: Any) -> list[Bound]:
    """Proven bounds of ``instance``: the trivial ones (``problem=None``) or a formulation's.

    Parameters
    ----------
    instance
        As for :func:`solve`.
    problem
        None for the bounds of :mod:`optsched.bounds` and the load-aware ones of
        :mod:`optsched.load_bounds` (every schedule of the instance; they take no options), else a
        name of :data:`optsched.problems.BOUNDERS` (``infermax``, ``hybrid``, ``aladdin``) with its
        options (:data:`optsched.problems.BOUND_OPTIONS`).

    Returns
    -------
    list of Bound
        Each with its value and whether it is proven (``valid``).
    """
    inst = _instance(instance)
    if problem is None:
        if options:
            from .options import OptionError

            raise OptionError(f"option {next(iter(options))!r}: the trivial bounds take no options (give problem=...)")
        from .load_bounds import default_bounds

        return default_bounds(inst)
    from .problems import bounder_for

    return bounder_for(problem)(inst, options)


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
    schedule = simulator_for(policy)(inst)
    replayed = replay(inst, schedule)
    if not replayed.feasible:
        raise RuntimeError(
            f"policy {policy!r} produced a schedule that does not replay cleanly: " + "; ".join(replayed.violations[:3])
        )
    return schedule, replayed

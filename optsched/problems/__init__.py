"""Registry of the formulations ``optsched solve`` and ``optsched bound`` dispatch to.

The registry is one list, :data:`FORMULATIONS`, of :class:`Formulation` records: one per problem,
naming its ``solve`` and ``bounds`` functions, their options dataclasses, its backends, whether it
returns a schedule, the objectives it optimises and its start-up work. A record names code as
``"module:attribute"``; the module is imported only when used, so that the CLI starts fast and one
formulation's dependencies never load for another. :func:`register` adds a record (one line for a
new formulation, docs/development.md).

- a *solver* has the signature ``solve(instance, options) -> SolveResult``;
- a *bounder* has the signature ``bounds(instance, options) -> list[Bound]``;

``options`` being a mapping or an instance of the formulation's options dataclass (an
:class:`optsched.options.Options` each), which rejects an unknown option, a value of the wrong type
and an option without effect (:class:`optsched.options.OptionError`).

The look-up functions (:func:`solver_for`, :func:`bounder_for`, :func:`formulation`) are called by
:mod:`optsched.api` alone; the command line, ``report`` and ``sweep`` go through it. The mappings
:data:`SOLVERS`, :data:`BOUNDERS`, :data:`SOLVE_OPTIONS`, :data:`BOUND_OPTIONS`, :data:`BACKENDS`
and the set :data:`NO_SCHEDULE` are views of :data:`FORMULATIONS`, read-only.

:func:`check_backend` is the one test of a ``solver`` name against a formulation's backends (the
CLI calls it before any work, so an unusable name is bad input, exit 2, not an internal error or a
silently ignored option).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from ..registry import resolve

__all__ = [
    "BACKENDS",
    "BOUNDERS",
    "BOUND_OPTIONS",
    "FORMULATIONS",
    "NO_SCHEDULE",
    "SOLVERS",
    "SOLVE_OPTIONS",
    "Formulation",
    "accepted",
    "bounder_for",
    "check_backend",
    "formulation",
    "options_for",
    "register",
    "solver_for",
]


@dataclass(frozen=True)
class Formulation:
    """One formulation's registration.

    Attributes
    ----------
    name
        The problem's name (``--problem NAME``).
    solve, bounds
        ``"module:function"`` of its ``solve(instance, options) -> SolveResult`` and
        ``bounds(instance, options) -> list[Bound]`` (None: it has no such function, and is not in
        :data:`SOLVERS` or :data:`BOUNDERS`).
    solve_options, bound_options
        ``"module:class"`` of their options dataclasses (:class:`optsched.options.Options`); None
        for a function that reads its options mapping itself.
    backends
        The ``solver`` names it accepts, its default first (empty: it takes no ``solver``).
    returns_schedule
        Whether its answer is an iteration-level schedule (else a placement or static batches,
        reported in the result's JSON).
    objectives
        The objectives it optimises (its option ``objective`` accepts them; the first is the default).
    modules
        ``"module:attribute"`` of the tuple of modules its solve and bounds may need (solver
        libraries), imported before a command reads its time left; None without any.
    prepare
        ``"module:function"`` of a solve's start-up work (compiled kernels), done before a command
        reads its time left; None without any.
    first_answer
        ``"module:function"`` of ``first_answer(instance, options, budget) -> SolveResult | None``:
        an answer from quick work (a policy's schedule, cheap bounds) that ``optsched solve``
        computes before the start-up (:attr:`modules`, :attr:`prepare`) and reports when the
        start-up has not ended by the command's deadline; None without one.
    first_bounds
        ``"module:function"`` of ``first_bounds(instance, options, budget) -> list[Bound] | None``:
        the quick bounds ``optsched bound`` reports in the same case.
    """

    name: str
    solve: str | None = None
    bounds: str | None = None
    solve_options: str | None = None
    bound_options: str | None = None
    backends: tuple[str, ...] = ()
    returns_schedule: bool = True
    objectives: tuple[str, ...] = ("makespan",)
    modules: str | None = None
    prepare: str | None = None
    first_answer: str | None = None
    first_bounds: str | None = None

    def load(self, field: str) -> Any:
        """The code a field names (``"solve"``, ``"bounds"``, ``"solve_options"``, ...), imported now."""
        module, _, attr = getattr(self, field).partition(":")
        return getattr(import_module(module), attr)

    def start_up(self, kind: str = "solve") -> None:
        """Import :attr:`modules` and, for a solve (``kind="solve"``), do :attr:`prepare`."""
        if self.modules is not None:
            for module in self.load("modules"):
                import_module(module)
        if kind == "solve" and self.prepare is not None:
            self.load("prepare")()


_PKG = "optsched.problems"
#: The MIP backends are those of :data:`optsched.mipsolvers.MIP_BACKENDS` (not imported here: it
#: loads PuLP). ``hybrid-offline`` and ``scls-batch`` use a MIP backend only for ``method=mip``;
#: ``hybrid-offline``'s exact stage is CP-SAT otherwise.
FORMULATIONS: list[Formulation] = [
    Formulation(
        name="aladdin",
        solve=f"{_PKG}.aladdin.solve:solve",
        bounds=f"{_PKG}.aladdin.solve:bounds",
        solve_options=f"{_PKG}.aladdin.solve:AladdinOptions",
        bound_options=f"{_PKG}.aladdin.solve:AladdinBoundOptions",
        backends=("cpsat", "highs", "cbc", "gurobi"),
        returns_schedule=False,
        objectives=("workers",),
    ),
    Formulation(
        name="gmax",
        solve=f"{_PKG}.gmax.solve:solve",
        bounds=f"{_PKG}.gmax.solve:bounds",
        solve_options=f"{_PKG}.gmax.solve:GmaxOptions",
        bound_options=f"{_PKG}.gmax.solve:GmaxBoundOptions",
        backends=("highs", "cbc", "gurobi", "cpsat"),
        returns_schedule=False,
        objectives=("goodput",),
        modules=f"{_PKG}.gmax.solve:SOLVE_MODULES",
    ),
    Formulation(
        name="hybrid",
        solve=f"{_PKG}.hybrid.solve:solve",
        bounds=f"{_PKG}.hybrid.bounds:bounds",
        solve_options=f"{_PKG}.hybrid.solve:HybridOptions",
        bound_options=f"{_PKG}.hybrid.bounds:HybridBoundOptions",
        backends=("highs", "cbc", "gurobi"),
    ),
    Formulation(
        name="hybrid-offline",
        solve=f"{_PKG}.hybrid_offline.solve:solve",
        bounds=f"{_PKG}.hybrid_offline.solve:bounds",
        solve_options=f"{_PKG}.hybrid_offline.solve:HybridOfflineOptions",
        bound_options=f"{_PKG}.hybrid_offline.solve:HybridOfflineBoundOptions",
        backends=("cpsat", "highs", "cbc", "gurobi"),
        objectives=("max_client_load",),
    ),
    Formulation(
        name="infermax",
        solve=f"{_PKG}.infermax.solve:solve",
        bounds=f"{_PKG}.infermax.solve:bounds",
        solve_options=f"{_PKG}.infermax.model:InferMaxOptions",
        bound_options=f"{_PKG}.infermax.model:InferMaxBoundOptions",
        backends=("cpsat", "highs", "cbc", "gurobi"),
        objectives=("makespan", "completion", "ttft"),
        modules=f"{_PKG}.infermax.solve:SOLVE_MODULES",
        prepare=f"{_PKG}.infermax.solve:prepare",
        first_answer=f"{_PKG}.infermax.first_answer:first_answer",
        first_bounds=f"{_PKG}.infermax.first_answer:first_bounds",
    ),
    Formulation(
        name="scls-batch",
        solve=f"{_PKG}.scls.solve:solve",
        bounds=f"{_PKG}.scls.solve:bounds",
        solve_options=f"{_PKG}.scls.solve:SclsOptions",
        bound_options=f"{_PKG}.scls.solve:SclsBoundOptions",
        backends=("highs", "cbc", "gurobi"),
        returns_schedule=False,
    ),
]


def register(record: Formulation) -> None:
    """Add a formulation to :data:`FORMULATIONS` (replacing one of the same name)."""
    FORMULATIONS[:] = [f for f in FORMULATIONS if f.name != record.name] + [record]


class _Column(Mapping[str, Any]):
    """A read-only view ``name -> record.<field>`` of :data:`FORMULATIONS` (records whose field is
    None left out)."""

    def __init__(self, field: str) -> None:
        self.field = field

    def _items(self) -> dict[str, Any]:
        values = {record.name: getattr(record, self.field) for record in FORMULATIONS}
        return {name: value for name, value in values.items() if value is not None}

    def __getitem__(self, name: str) -> Any:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())


class _NoSchedule(Set[str]):
    """The names of the formulations whose answer is not an iteration-level schedule (a view)."""

    def _names(self) -> list[str]:
        return [record.name for record in FORMULATIONS if not record.returns_schedule]

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


SOLVERS: Mapping[str, str] = _Column("solve")
BOUNDERS: Mapping[str, str] = _Column("bounds")
#: The options dataclass of each solver.
SOLVE_OPTIONS: Mapping[str, str] = _Column("solve_options")
#: The options dataclass of each bounder.
BOUND_OPTIONS: Mapping[str, str] = _Column("bound_options")
#: ``solver`` names each formulation accepts (its default first).
BACKENDS: Mapping[str, tuple[str, ...]] = _Column("backends")
#: Problems whose answer is not an iteration-level schedule: a placement (``aladdin``) or static
#: batches (``gmax``, ``scls-batch``), reported in the result's JSON.
NO_SCHEDULE: Set[str] = _NoSchedule()


def formulation(name: str) -> Formulation:
    """The record of problem ``name``.

    Raises
    ------
    KeyError
        For an unknown name (the message lists the known ones).
    """
    for record in FORMULATIONS:
        if record.name == name:
            return record
    known = ", ".join(sorted(SOLVERS)) or "none registered"
    raise KeyError(f"unknown problem {name!r} (known: {known})")


def check_backend(problem: str, solver: str | None) -> None:
    """Raise ``ValueError`` naming the accepted backends when ``solver`` is not one of ``problem``'s.

    ``None`` (the formulation's default) and problems without backends (or not registered) pass.
    """
    known = BACKENDS.get(problem)
    if solver is None or not known or solver in known:
        return
    raise ValueError(f"problem {problem!r} has no backend {solver!r} (known: {', '.join(known)})")


def solver_for(name: str) -> Callable[..., Any]:
    """The solve function registered for problem ``name``."""
    return resolve(SOLVERS, name, "problem")


def bounder_for(name: str) -> Callable[..., Any]:
    """The bounds function registered for problem ``name``."""
    return resolve(BOUNDERS, name, "problem")


def options_for(name: str, kind: str = "solve") -> Any:
    """The options dataclass of problem ``name``'s solver (``kind="solve"``) or bounder (``"bound"``);
    None for a problem registered without one (it reads its options itself)."""
    record = formulation(name)
    field = "solve_options" if kind == "solve" else "bound_options"
    return None if getattr(record, field) is None else record.load(field)


def accepted(name: str, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``options`` that problem ``name``'s solver or bounder has.

    For callers that run several formulations with shared settings (``report``, ``sweep``: the
    objective, the time limit), where a formulation without such an option simply does not take it.
    """
    cls = options_for(name, kind)
    if cls is None:
        return dict(options)
    names = cls.names()
    return {k: v for k, v in options.items() if k in names}

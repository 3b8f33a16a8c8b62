"""Rules of the solve path's spine (docs/development.md), checked by walking the package's syntax trees.

- Every CP-SAT solver is built in :mod:`optsched.cpsat_solver` (its parameters, time limit,
  logging and status mapping in one place).
- Only :mod:`optsched.api` calls the registry's look-up functions: the command line, ``report``
  and ``sweep`` go through it (one replay-and-check rule, :func:`optsched.api.checked`).
- One time budget: every registered solve takes the :class:`~optsched.budget.TimeBudget` that
  :func:`optsched.api.solve` makes, no function keeps a deadline as a float parameter, a
  ``time_limit`` in seconds is taken only where listed, and seconds and deadlines are converted
  into each other in :mod:`optsched.budget` alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import optsched
from optsched.budget import TimeBudget

PACKAGE = Path(optsched.__file__).resolve().parent


def modules() -> list[tuple[str, ast.Module]]:
    """(name relative to the repository, syntax tree) of every module of the package."""
    return [
        (str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def constructs(tree: ast.Module, name: str) -> list[int]:
    """Lines of each call of ``name(...)`` or ``anything.name(...)`` in ``tree``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) == name or getattr(node.func, "id", None) == name)
    ]


def test_the_walk_finds_a_cpsolver() -> None:
    planted = "from ortools.sat.python import cp_model\ns = cp_model.CpSolver()\nt = CpSolver()\nu = CpSolver\n"
    assert constructs(ast.parse(planted), "CpSolver") == [2, 3]


def test_only_the_adapter_builds_a_cpsat_solver() -> None:
    offenders = [
        f"{name}:{line}"
        for name, tree in modules()
        if name != "optsched/cpsat_solver.py"
        for line in constructs(tree, "CpSolver")
    ]
    assert offenders == []


#: The registry's look-up functions (:mod:`optsched.problems`), called by :mod:`optsched.api` alone.
LOOKUPS = frozenset({"solver_for", "bounder_for", "formulation", "options_for", "accepted"})


def registry_lookups(tree: ast.Module, package: str) -> list[int]:
    """Lines where ``tree`` (a module of the package ``package``, dotted) imports a look-up
    function of the registry or calls one as ``problems.NAME``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package if node.level else ""
            target = ".".join(filter(None, [base, node.module or ""]))
            names = {alias.name for alias in node.names}
            if target == "optsched.problems" and names & LOOKUPS:
                found.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in LOOKUPS and getattr(node.value, "id", "") == "problems":
            found.append(node.lineno)
    return sorted(found)


def test_the_walk_finds_a_registry_lookup() -> None:
    planted = (
        "from ..problems import SOLVERS, solver_for\n"
        "from .. import problems\n"
        "problems.bounder_for('x')\n"
        "from ..problems.infermax import solve\n"
        "from optsched.problems import formulation\n"
    )
    assert registry_lookups(ast.parse(planted), "optsched.commands") == [1, 3, 5]


def test_only_the_api_looks_up_the_registry() -> None:
    offenders = [
        f"{name}:{line}"
        for name, tree in modules()
        if name not in ("optsched/api.py", "optsched/problems/__init__.py")
        for line in registry_lookups(tree, name.rsplit("/", 1)[0].replace("/", "."))
    ]
    assert offenders == []


#: Names of deadlines and time limits: arithmetic on them converts between seconds and deadlines.
TIME_NAMES = frozenset({"deadline", "time_limit", "until", "solve_by"})

#: Modules whose search loops still keep deadlines as ``time.perf_counter()`` floats and compute
#: with them (to move onto :class:`optsched.budget.TimeBudget`; the list only shrinks).
NOT_YET_ON_THE_BUDGET = frozenset({})


def _clock(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        getattr(node.func, "attr", None) in ("perf_counter", "monotonic")
        or getattr(node.func, "id", None) in ("perf_counter", "monotonic")
    )


def _time_name(node: ast.AST) -> bool:
    return getattr(node, "id", None) in TIME_NAMES or getattr(node, "attr", None) in TIME_NAMES


def time_arithmetic(tree: ast.Module) -> list[int]:
    """Lines converting between seconds and deadlines by hand: ``clock() + x``, ``x - clock()``
    (``clock()`` being ``time.perf_counter()`` or ``time.monotonic()``; ``clock() - t0``, an
    elapsed time, is fine) and sums or differences with a deadline or time limit."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))):
            continue
        if isinstance(node.op, ast.Add) and (_clock(node.left) or _clock(node.right)):
            found.append(node.lineno)
        elif isinstance(node.op, ast.Sub) and _clock(node.right) and not _clock(node.left):
            found.append(node.lineno)
        elif _time_name(node.left) or _time_name(node.right):
            found.append(node.lineno)
    return sorted(found)


def test_the_walk_finds_time_arithmetic() -> None:
    planted = (
        "import time\n"
        "deadline = time.perf_counter() + 5\n"
        "left = deadline - time.perf_counter()\n"
        "elapsed = time.perf_counter() - t0\n"
        "end = t0 + time_limit\n"
        "x = opts.time_limit - 1\n"
        "budget = TimeBudget.of(5).left()\n"
    )
    assert time_arithmetic(ast.parse(planted)) == [2, 3, 5, 6]


def test_seconds_and_deadlines_are_converted_in_the_budget_only() -> None:
    offenders = {name for name, tree in modules() if name != "optsched/budget.py" and time_arithmetic(tree)}
    assert offenders - NOT_YET_ON_THE_BUDGET == set(), "convert with optsched.budget.TimeBudget"
    assert NOT_YET_ON_THE_BUDGET - offenders == set(), "on the budget now: take it off NOT_YET_ON_THE_BUDGET"


@pytest.mark.parametrize("field", ["solve", "bounds"])
def test_every_registered_solve_and_bounds_takes_the_budget(field: str) -> None:
    """``solve(instance, options, budget)`` and ``bounds(instance, options, budget)``: the third
    parameter is a required :class:`~optsched.budget.TimeBudget` (made once, by
    :func:`optsched.api.solve` or :func:`optsched.api.bound`)."""
    import inspect

    from optsched.problems import FORMULATIONS

    for record in FORMULATIONS:
        if getattr(record, field) is None:
            continue
        params = list(inspect.signature(record.load(field)).parameters.values())
        assert [p.name for p in params[:3]] == ["instance", "options", "budget"], record.name
        assert params[2].annotation in ("TimeBudget", TimeBudget), record.name
        assert params[2].default is inspect.Parameter.empty, f"{record.name}: the budget is not optional"


#: Parameter names of a time limit in seconds and of a deadline.
SECONDS_OR_DEADLINE = frozenset({"time_limit", "deadline", "solve_by"})

#: Functions below :mod:`optsched.api` that still take seconds (``module:function``), and why: none
#: is on the path of a solve from :func:`optsched.api.solve` to a back-end.
TAKES_SECONDS = {
    # the Python entry: the user's seconds, made into the one budget there
    "optsched/api.py:solve": "the public time_limit= of optsched.solve",
    "optsched/api.py:_with_options": "the public time_limit= of optsched.solve",
    # the cluster simulation's limit per heartbeat (optsched simulate / plan), not a solve's budget
    "optsched/problems/aladdin/cluster.py:place": "seconds per heartbeat of the cluster simulation",
    "optsched/problems/aladdin/cluster.py:simulate_cluster": "seconds per heartbeat of the cluster simulation",
    "optsched/problems/aladdin/capacity.py:min_workers": "seconds per heartbeat of the cluster simulation",
    "optsched/problems/aladdin/capacity.py:min_workers_scaling": "seconds per heartbeat of the cluster simulation",
    "optsched/problems/aladdin/capacity.py:heartbeat_lower_bound": "seconds per heartbeat of the cluster simulation",
    # a policy (optsched simulate): policies take no budget
    "optsched/problems/hybrid/online.py:offline_assignment": "the hybrid-offline policy's own P||Cmax limit",
    # the Python entry of the report: the user's seconds, made into the report's one budget there
    "optsched/report/gather.py:build_report": "the report's own time_limit= (its --time-limit)",
}


def seconds_parameters(tree: ast.Module) -> list[str]:
    """Names of the functions of ``tree`` with a parameter in :data:`SECONDS_OR_DEADLINE`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if any(arg.arg in SECONDS_OR_DEADLINE for arg in args):
                found.append(node.name)
    return found


def test_the_walk_finds_seconds_parameters() -> None:
    planted = (
        "def a(x, deadline=None): ...\n"
        "def b(x, *, time_limit: float = 1.0): ...\n"
        "def c(x, budget): ...\n"
        "class K:\n    def d(self, solve_by): ...\n"
    )
    assert seconds_parameters(ast.parse(planted)) == ["a", "b", "d"]


def test_no_seconds_or_deadline_parameters_below_the_api() -> None:
    """A phase or back-end takes a :class:`~optsched.budget.TimeBudget`, never a float deadline or
    seconds of its own (exceptions: :data:`TAKES_SECONDS`, each off the solve path)."""
    found = {
        f"{name}:{function}"
        for name, tree in modules()
        if name != "optsched/budget.py"
        for function in seconds_parameters(tree)
    }
    assert found - set(TAKES_SECONDS) == set(), "take a TimeBudget"
    assert set(TAKES_SECONDS) - found == set(), "takes a budget now: take it off TAKES_SECONDS"


#: Where a solver's own time limit is set: the back-end adapters, which read it from a budget.
ADAPTERS = frozenset({"optsched/cpsat_solver.py", "optsched/mipsolvers.py"})

#: Other modules that set a solver's time limit, and why: none is on a solve's path.
SETS_A_SOLVER_LIMIT = {
    "optsched/load_bounds.py": "the busy-time LP of the load-aware bounds (optsched bound, report)",
    "optsched/fluid_bounds.py": "the fluid LP of the load-aware bounds (optsched bound, report)",
    "optsched/pair_wait_lp.py": "the weights LP of pair-wait-lp, a load-aware bound (optsched bound, report)",
    "optsched/phase_latency.py": "the run LPs of phase-latency, a load-aware bound (optsched bound, report)",
}


def solver_limits(tree: ast.Module) -> list[int]:
    """Lines setting a solver's time limit: CP-SAT's ``max_time_in_seconds``, PuLP's ``timeLimit``
    (attribute, keyword or dictionary key) and HiGHS's ``setOptionValue("time_limit", ...)``."""
    names = {"max_time_in_seconds", "timeLimit"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg in names:
            found.append(node.value.lineno)
        elif isinstance(node, ast.Dict):
            found += [key.lineno for key in node.keys if isinstance(key, ast.Constant) and key.value in names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "setOptionValue"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "time_limit"
        ):
            found.append(node.lineno)
    return sorted(found)


def test_the_walk_finds_solver_limits() -> None:
    planted = (
        "s.parameters.max_time_in_seconds = 3\n"
        "pulp.HiGHS(timeLimit=3)\n"
        "opts = {'timeLimit': 3}\n"
        "h.setOptionValue('time_limit', 3.0)\n"
        "h.setOptionValue('presolve', 'off')\n"
    )
    assert solver_limits(ast.parse(planted)) == [1, 2, 3, 4]


def test_the_back_ends_read_the_budget_in_their_adapters() -> None:
    found = {name for name, tree in modules() if solver_limits(tree)}
    assert found - ADAPTERS - set(SETS_A_SOLVER_LIMIT) == set(), "read the budget in the adapter"
    assert set(SETS_A_SOLVER_LIMIT) - found == set(), "no solver limit there now: take it off SETS_A_SOLVER_LIMIT"

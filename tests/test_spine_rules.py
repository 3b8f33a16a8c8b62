"""Rules of the solve path's spine (docs/development.md), checked by walking the package's syntax trees.

- Every CP-SAT solver is built in :mod:`optsched.cpsat_solver` (its parameters, time limit,
  logging and status mapping in one place).
- Only :mod:`optsched.api` calls the registry's look-up functions: the command line, ``report``
  and ``sweep`` go through it (one replay-and-check rule, :func:`optsched.api.checked`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import optsched

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

"""Rules of the solve path's spine (docs/development.md), checked by walking the package's syntax trees.

- Every CP-SAT solver is built in :mod:`optsched.cpsat_solver` (its parameters, time limit,
  logging and status mapping in one place).
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

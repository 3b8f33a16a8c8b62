"""Rules of the code base that ruff does not check (docs/development.md).

- ruff's PLC2701 flags a private name imported from another package, not from a module of the same
  package; ``optsched`` keeps private names private between its own modules too.
- No module of ``optsched`` over 600 lines, no function over 100 lines (docs/development.md).
- The package's public names are the ones it loads lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

import optsched

PACKAGE = Path(optsched.__file__).resolve().parent


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(source: str) -> list[tuple[int, str]]:
    """(line, name) of each private name a module's ``from ... import`` statements take."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [(node.lineno, alias.name) for alias in node.names if _private(alias.name)]
    return found


def test_the_walk_finds_a_private_import() -> None:
    planted = "from .search import _Graph, Graph\nfrom __future__ import annotations\nfrom . import __version__\n"
    assert private_imports(planted) == [(1, "_Graph")]


def test_no_private_name_is_imported_across_modules() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name in private_imports(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of each function or method of a module longer than ``limit`` lines (decorators
    not counted, the docstring counted)."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_size_walk_finds_a_long_function() -> None:
    planted = "def f():\n" + "    x = 1\n" * 100 + "\n\nclass C:\n    def g(self):\n        return 1\n"
    assert long_functions(planted, MAX_FUNCTION_LINES) == [("f", 101)]


def test_no_long_module_or_function() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(PACKAGE.parent)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            offenders.append(f"{name}: {len(source.splitlines())} lines")
        offenders += [f"{name}: {fn}() {n} lines" for fn, n in long_functions(source, MAX_FUNCTION_LINES)]
    assert offenders == []


def lazy_exports(source: str) -> list[str]:
    """The keys of the ``_EXPORTS`` table of a package's ``__init__`` (the names it loads lazily)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "_EXPORTS":
            return [ast.literal_eval(key) for key in node.value.keys]
    return []


def test_the_public_names_are_the_lazy_exports() -> None:
    exports = lazy_exports((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    assert exports and sorted(exports) == sorted(optsched.__all__)
    for name in optsched.__all__:
        assert getattr(optsched, name) is not None

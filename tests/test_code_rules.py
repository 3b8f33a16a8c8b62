"""Rules of the code base that ruff does not check (docs/development.md).

ruff's PLC2701 flags a private name imported from another package, not from a module of the same
package; ``optsched`` keeps private names private between its own modules too.
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

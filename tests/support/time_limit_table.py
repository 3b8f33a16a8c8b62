"""Every (command, problem, method) of ``optsched solve`` and ``optsched bound`` with the smallest
instance its formulation accepts (tests/commands/test_time_limit_table.py)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

from optsched import problems
from tests.support.profiles import static_instances

#: The smallest shipped instance each problem accepts ("scls-batch": written by :func:`instance_for`).
INSTANCES = {
    "aladdin": "aladdin-fig3",
    "gmax": "static/fig3-slo-order",
    "hybrid": "toy-4",
    "hybrid-offline": "toy-4",
    "infermax": "toy-4",
}


def methods(problem: str, kind: str) -> tuple[str | None, ...]:
    """The choices of the ``method`` option of ``problem``'s ``kind`` options (None: its default)."""
    cls = problems.options_for(problem, kind)
    hint = typing.get_type_hints(cls).get("method") if cls is not None else None
    if hint is None:
        return (None,)
    for arg in (hint, *typing.get_args(hint)):
        if typing.get_origin(arg) is typing.Literal:
            return (None, *typing.get_args(arg))
    return (None,)


def table() -> list[tuple[str, str, str | None]]:
    """(command, problem, method) of every solver and bounder of the registry."""
    rows = []
    for kind, mapping in (("solve", problems.SOLVERS), ("bound", problems.BOUNDERS)):
        for problem in sorted(mapping):
            rows += [(kind, problem, method) for method in methods(problem, kind)]
    return rows


def instance_for(problem: str, folder: Path) -> str:
    """The instance argument for ``problem`` (a file written in ``folder`` where none is shipped)."""
    if problem in INSTANCES:
        return INSTANCES[problem]
    data = {**dict(static_instances())[problem], "cost_model": "llama2-7b-a100"}  # not read by scls-batch
    path = folder / f"{problem}.json"
    path.write_text(json.dumps(data))
    return str(path)

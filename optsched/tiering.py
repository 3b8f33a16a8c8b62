"""When the compiled simulation core pays for its start-up, and so runs.

The compiled engine (:mod:`optsched.policies.fastsim`) and replay (:mod:`optsched.fastreplay`) give
the reference paths' results exactly, but a process pays once for loading their kernels: a few ms
from the extension ``optsched warmup`` builds (:mod:`optsched.aotkernels`), about half a second
without it (importing numba and loading the kernels from its disk cache). :func:`use_compiled` runs
them for a call whose work (output tokens simulated, items replayed) reaches :data:`COMPILED_FROM`,
and for every call once the process's work of that kind adds up to it: a sweep or a capacity search
of many small instances switches to the kernels after its first few, a single small simulation never
loads them.
"""

from __future__ import annotations

__all__ = ["COMPILED_FROM", "use_compiled"]

#: Work (output tokens simulated, or items replayed) from which the compiled kernels run.
COMPILED_FROM = 20_000

_done: dict[str, int] = {}


def use_compiled(kind: str, work: int, compiled: bool | None) -> bool:
    """Whether a call of ``kind`` (``"simulate"``, ``"replay"``) with ``work`` runs compiled:
    ``compiled`` when given, else once this process's work of that kind reaches :data:`COMPILED_FROM`."""
    if compiled is not None:
        return compiled
    _done[kind] = _done.get(kind, 0) + work
    return _done[kind] >= COMPILED_FROM

"""Compiling the solvers' kernels ahead of their first timed use (``optsched warmup``).

InferMax's search, scale phase and relaxation bounds, G-MAX's branch and bound, and the compiled
policy engine and replay run numba kernels, compiled at their first call and cached on disk
(numba's cache: ``__pycache__`` beside the modules, or ``NUMBA_CACHE_DIR``). Compiling them takes
one to several minutes on a 2-core machine; loading them from the cache about a second. A
command's ``--time-limit`` bounds the whole process, and a compile inside it would overrun the
limit, so the kernels are compiled once ahead: after installing (the README's install command runs
``optsched warmup``), and again after an upgrade of numba or of optsched, which invalidates the
cache.

:func:`warm_up` runs :data:`CASES` (every solver path that calls kernels, on small shipped
instances, each schedule replayed) and :data:`POLICY_CASES` (the compiled policy engine and replay,
on numba's JIT path) until a pass compiles nothing, then builds the engine's and the replay's
kernels ahead of time into a C extension (:mod:`optsched.aotbuild`; loaded by
:mod:`optsched.aotkernels`, so that ``simulate`` and ``check`` do not import numba), unless the
extension of this code is there already. It reports how many kernels it compiled and how many it
loaded from the cache, and where the extension is (or why it was not built); :func:`kernels` lists
the kernels of the loaded modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import api
from .instance import Instance, load_instance, parse_instance

__all__ = ["CASES", "POLICY_CASES", "POLICY_INSTANCE", "Case", "WarmupReport", "kernels", "run_policy_case", "warm_up"]


@dataclass(frozen=True)
class Case:
    """One warm-up run: ``kind`` ``"solve"`` or ``"bound"`` of ``problem`` on ``instance`` (a
    shipped name, or ``"static"``: :func:`static_instance`) with ``options``."""

    kind: str
    problem: str
    instance: str
    options: dict[str, Any] = field(default_factory=dict)
    #: Requests of the ``"static"`` instance.
    requests: int = 40


#: The runs that reach every kernel with the argument types the commands pass: the exact search
#: (few requests), the scale phase offline, online and on a mixed long/short workload (its
#: segment-list search, chunk bounds and relaxation bounds), the latency bounds offline, G-MAX's
#: branch and bound.
CASES: tuple[Case, ...] = (
    Case("solve", "infermax", "toy-4", {"time_limit": 5}),
    Case("solve", "infermax", "infermax-i1024-o32-n64", {"time_limit": 3}),
    Case("solve", "infermax", "poisson-mixed-100", {"time_limit": 3}),
    Case("solve", "infermax", "infermax-lilo-silo-64", {"time_limit": 3}),
    Case("solve", "infermax", "splitwise-conv-100", {"time_limit": 3}),
    # the latency bounds of requests released together, large enough for finish-index's kernel
    Case("bound", "infermax", "infermax-i64-o1024-n32-m10k", {"objective": "latency", "time_limit": 5}),
    Case("solve", "gmax", "static", {"time_limit": 3}),
    # solved to optimality within its limit, so that the branch and bound's search (its node
    # kernels) runs even when compiling the bounds before it takes the larger case's time
    Case("solve", "gmax", "static", {"time_limit": 30}, requests=12),
)

#: The policies simulated and replayed on the compiled engine (:mod:`optsched.policies.fastsim`,
#: :mod:`optsched.fastreplay`), which ``simulate``, ``report`` and ``sweep`` run on large traces: first
#: come, first served; a waiting group sorted on keys recomputed every batch; the KV look-ahead; KV
#: in blocks. One shipped instance, :data:`POLICY_INSTANCE`.
POLICY_CASES: tuple[str, ...] = ("vllm", "srpf", "mc-sf", "vllm-v1")
POLICY_INSTANCE = "poisson-mixed-100"

#: Most passes over :data:`CASES`: a pass on a cold cache may spend a case's time limit compiling
#: and skip the phases after it, so passes repeat until one compiles nothing.
MAX_PASSES = 6


@dataclass
class WarmupReport:
    """What :func:`warm_up` did: kernels compiled now and loaded from the cache, the wall time."""

    #: Kernels compiled for at least one signature in this process (from the cache or now).
    kernels: int
    compiled: int
    loaded: int
    seconds: float
    cases: list[str]
    #: The kernels compiled ahead of time: the extension's path, or why it was not built.
    extension: str = ""


def static_instance(n: int = 40) -> Instance:
    """The first ``n`` requests of ``gsm8k-like`` with the static-batching fields G-MAX needs (a
    latency profile, a batch-size cap, an end-to-end SLO each)."""
    data = load_instance("gsm8k-like").to_dict()
    data.update(name=f"gsm8k-like-static-{n}", max_batch_size=4, static_latency="qwen2.5-7b-2xv100")
    data["requests"] = [
        {**r, "task": "e2e", "slo": {"e2e": 5.0 + 0.25 * k}} for k, r in enumerate(data["requests"][:n])
    ]
    return parse_instance(data, data["name"])


def kernels() -> dict[str, Any]:
    """Every numba kernel (dispatcher) defined in a loaded optsched module, by qualified name."""
    import sys

    from numba.core.registry import CPUDispatcher

    found = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("optsched.") and module is not None:
            for attr, value in vars(module).items():
                if isinstance(value, CPUDispatcher) and value.__module__ == name:
                    found[f"{name}.{attr}"] = value
    return found


def _run(case: Case) -> None:
    """Run one case through :mod:`optsched.api` (its schedule replayed and checked there)."""
    instance = static_instance(case.requests) if case.instance == "static" else load_instance(case.instance)
    if case.kind == "solve":
        api.solve(instance, case.problem, case.options)
    else:
        api.bound(instance, case.problem, case.options)


def run_policy_case(policy: str) -> None:
    """Simulate ``policy`` on :data:`POLICY_INSTANCE` and replay its schedule, both compiled, on
    numba's JIT path (the path a call takes when the ahead-of-time extension is absent)."""
    from .aotkernels import jit_only
    from .policies.engine import simulate
    from .schedule import replay

    instance = load_instance(POLICY_INSTANCE)
    with jit_only():
        replay(instance, simulate(instance, policy, compiled=True), compiled=True)


def _run_policy_cases() -> None:
    for policy in POLICY_CASES:
        run_policy_case(policy)


def _compiled(found: dict[str, Any]) -> int:
    return sum(sum(k.stats.cache_misses.values()) for k in found.values())


def warm_up(say: Callable[[str], None] | None = None) -> WarmupReport:
    """Run :data:`CASES` until a pass compiles nothing (at most :data:`MAX_PASSES`), compiling
    every kernel they reach or loading it from the cache; ``say`` is told each case as it starts."""
    t0 = time.perf_counter()
    names: list[str] = []
    for _ in range(MAX_PASSES):
        before = _compiled(kernels())
        for case in CASES:
            size = f" ({case.requests} requests)" if case.instance == "static" else ""
            label = f"{case.kind} {case.problem} {case.instance}{size}"
            if say is not None:
                say(label)
            _run(case)
            names.append(label)
        for policy in POLICY_CASES:
            label = f"simulate {policy} {POLICY_INSTANCE}"
            if say is not None:
                say(label)
            run_policy_case(policy)
            names.append(label)
        if _compiled(kernels()) == before:
            break
    from .aotbuild import ensure_extension

    if say is not None:
        say("building the engine and replay kernels ahead of time")
    extension = ensure_extension(_run_policy_cases)
    found = kernels()
    return WarmupReport(
        kernels=sum(1 for k in found.values() if k.signatures),
        compiled=_compiled(found),
        loaded=sum(sum(k.stats.cache_hits.values()) for k in found.values()),
        seconds=time.perf_counter() - t0,
        cases=names,
        extension=extension,
    )

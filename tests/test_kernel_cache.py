"""No work at import, and numba kernels compiled once per installation.

- Importing ``optsched`` and every module with numba kernels compiles nothing and loads no
  kernel (numba's dispatchers have no compiled signature afterwards).
- A second process that solves the same problems loads every kernel it calls from numba's disk
  cache (no cache miss), and compiles none of numba's typed-container helpers (their methods,
  called from Python, would compile anew in every process).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

#: Modules holding numba kernels.
KERNEL_MODULES = (
    "optsched.problems.infermax.graph",
    "optsched.problems.infermax.tables",
    "optsched.problems.infermax.astar",
    "optsched.problems.infermax.search",
    "optsched.problems.infermax.chunks",
    "optsched.problems.gmax.suffix",
    "optsched.problems.gmax.bnb",
    "optsched.replaykernel",
    "optsched.policies.fastengine",
    "optsched.finish_index",
)

#: Run in a fresh process: solve with every kernel module, then report per dispatcher the
#: signatures loaded from the cache and those compiled, and the typed-container helpers compiled.
WORKER = r"""
import json, sys
from numba.core.registry import CPUDispatcher
import numba.typed.typeddict, numba.typed.typedlist

from optsched.instance import parse_instance
from optsched.problems.gmax.exact import make_backend, solve_exact
from tests.support.gmax_generate import random_gmax_instance
from optsched.problems.gmax.problem import GmaxProblem
from optsched.budget import TimeBudget
from optsched.problems.infermax.chunks import chunk_bound
from optsched.problems.infermax.search import relaxation_search
from optsched.policies.engine import simulate
from optsched.schedule import replay
from optsched.aotkernels import jit_only

inst = parse_instance({
    "name": "cache", "cost_model": "llama2-7b-a100", "limits": {"kv_capacity": 12},
    "requests": [{"id": "a", "prompt_tokens": 3, "output_tokens": 3},
                 {"id": "b", "prompt_tokens": 4, "output_tokens": 2},
                 {"id": "c", "prompt_tokens": 2, "output_tokens": 4}]}, "cache")
with jit_only():  # numba's kernels, not the extension compiled ahead of time
    assert replay(inst, simulate(inst, "rank-i", compiled=True), compiled=True).feasible
chunk_bound(inst, relaxation_search(inst, TimeBudget.of(60)).value * 1.01, TimeBudget.of(60))
problem = GmaxProblem.from_instance(parse_instance(random_gmax_instance(5, 0)))
solve_exact(problem, make_backend(problem, "highs"), "bnb", budget=TimeBudget.of(60))
from optsched import finish_index
finish_index.COMPILED_FROM = 0  # the compiled level windows even on this tiny instance
finish_index.finish_index_sum(inst, 1.0, None, -1.0)

hits, misses, typed = {}, {}, []
for name in MODULES:
    module = sys.modules[name]
    for attr, value in vars(module).items():
        if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
            hits[f"{name}.{attr}"] = sum(value.stats.cache_hits.values())
            misses[f"{name}.{attr}"] = sum(value.stats.cache_misses.values())
for module in (numba.typed.typeddict, numba.typed.typedlist):
    typed += [attr for attr, value in vars(module).items() if isinstance(value, CPUDispatcher) and value.overloads]
print(json.dumps({"hits": hits, "misses": misses, "typed": typed}))
"""


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", f"MODULES = {KERNEL_MODULES!r}\n{code}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_compiles_nothing() -> None:
    code = r"""
import json, sys
import optsched
from numba.core.registry import CPUDispatcher
import importlib
for name in MODULES:
    importlib.import_module(name)
compiled = [f"{m}.{a}" for m in MODULES for a, v in vars(sys.modules[m]).items()
            if isinstance(v, CPUDispatcher) and v.signatures]
print(json.dumps({"compiled": compiled}))
"""
    assert _run(code) == {"compiled": []}


def test_a_second_process_loads_every_kernel_from_the_cache() -> None:
    _run(WORKER)  # compiles what the cache lacks (nothing when warm)
    second = _run(WORKER)
    assert second["typed"] == []
    assert {name: n for name, n in second["misses"].items() if n} == {}
    used = {name for name, n in second["hits"].items() if n}
    for kernel in (
        "astar.astar",
        "search._beam_layer",
        "tables.pattern_level",
        "graph.edge_arrays",
        "chunks.least_with_squares",
        "chunks._cost_to_go",
        "bnb.node_children",
        "suffix.grid_programme",
        "replaykernel._replay",
        "fastengine._simulate",
        "finish_index.add_level_windows",
    ):
        assert any(name.endswith(kernel) for name in used), kernel


def test_the_warm_up_runs_the_compiled_engine_of_every_policy_path() -> None:
    """``optsched warmup``'s policy cases run the compiled engine and replay (what ``simulate``,
    ``report`` and ``sweep`` run on large traces), so a time-limited command never compiles them."""
    code = (
        "import json\n"
        "from optsched import warmup\n"
        "for policy in warmup.POLICY_CASES:\n"
        "    warmup.run_policy_case(policy)\n"
        "print(json.dumps(sorted(n for n, k in warmup.kernels().items() if k.signatures)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900, check=True
    )
    reached = json.loads(out.stdout.strip().splitlines()[-1])
    for kernel in ("fastengine._simulate", "replaykernel._replay"):  # the kernels called from Python
        assert any(name.endswith(kernel) for name in reached), kernel

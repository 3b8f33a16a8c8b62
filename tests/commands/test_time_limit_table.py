"""``--time-limit`` bounds every method of every formulation (issue 38 item 4): each (command,
problem, method) of the registry, on the smallest instance its formulation accepts, takes
``--time-limit 5`` and its process ends within the limit + 1 s, with an answer (exit 0, or 1 for
"no") or, where it could not end by itself, ended by the program 0.75 s past its limit with one line
(exit 124, :func:`optsched.exiting.end_at`); the limit is never refused (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from optsched.exiting import EXIT_TIME_LIMIT
from tests.support.infermax import eight_staggered_requests, eight_wide_requests
from tests.support.time_limit_table import instance_for, table

LIMIT = 5.0


@pytest.mark.slow
@pytest.mark.parametrize(("command", "problem", "method"), table())
def test_every_method_takes_the_time_limit_and_ends_within_it(tmp_path, command, problem, method) -> None:
    argv = [sys.executable, "-m", "optsched", command, instance_for(problem, tmp_path), "--problem", problem]
    argv += [*(["--method", method] if method else []), "--time-limit", f"{LIMIT:g}", "--json"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    wall = time.perf_counter() - t0
    assert done.returncode in (0, 1, EXIT_TIME_LIMIT), done.stderr
    assert wall <= LIMIT + 1.0, (wall, done.stderr)
    if done.returncode == EXIT_TIME_LIMIT:
        assert done.stderr.strip().splitlines()[-1].startswith(f"optsched: error: {command}: stopped at its time limit")
        assert done.stdout == ""
    else:
        assert done.stdout.strip().startswith("{")


def test_the_table_covers_every_method_of_the_registry() -> None:
    rows = table()
    assert ("bound", "gmax", None) in rows and ("bound", "scls-batch", None) in rows
    assert ("bound", "hybrid-offline", None) in rows and ("solve", "gmax", "sa") in rows
    assert {("solve", "hybrid-offline", m) for m in ("auto", "lpt", "local", "cpsat", "mip")} <= set(rows)
    assert {("bound", "infermax", m) for m in ("lp", "relax", "trajectory")} <= set(rows)


@pytest.mark.parametrize("problem", ["gmax", "hybrid-offline", "scls-batch"])
def test_the_instant_bounders_take_a_time_limit(problem) -> None:
    """Their bound takes milliseconds: the limit is honoured, not refused (optsched.options)."""
    from optsched import api
    from optsched.instance import load_instance, parse_instance
    from tests.support.profiles import static_instances

    static = dict(static_instances())
    instance = (
        parse_instance({**static[problem], "cost_model": "llama2-7b-a100"})
        if problem in static
        else load_instance("toy-4")
    )
    bounds = api.bound(instance, problem, {"time_limit": 5.0})
    assert bounds and all(b.valid for b in bounds)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["latency", "ttft"])
@pytest.mark.parametrize("make", [eight_wide_requests, eight_staggered_requests])
def test_the_exact_mean_search_of_eight_requests_ends_within_the_limit(tmp_path, make, objective: str) -> None:
    """Eight requests without KV or running limits (prompts of 1 to 8 tokens, or eight of the same
    lengths arriving 4 ms apart): the exact search's states have thousands to hundreds of thousands
    of batches each, and the solve still answers within the limit, its optimal path written out
    included."""
    path = tmp_path / "eight.json"
    path.write_text(json.dumps(make()))
    argv = [sys.executable, "-m", "optsched", "solve", str(path), "--problem", "infermax"]
    argv += ["--objective", objective, "--time-limit", f"{LIMIT:g}", "--json"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    wall = time.perf_counter() - t0
    assert done.returncode == 0 and wall <= LIMIT + 1.0, (done.returncode, wall, done.stderr)
    out = json.loads(done.stdout)
    assert out["bound"] <= out["objective"] * (1 + 1e-9) and out["metrics"]

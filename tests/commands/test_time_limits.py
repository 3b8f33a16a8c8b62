"""``--time-limit`` bounds the whole command (docs/cli.md): it counts from the program's start, and a
formulation keeps the work after its search (building and replaying the schedule) inside it. The
wall-time goal itself is measured by tests/benchmarks/bench_time_limits.py, not here.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import pytest

from optsched import cli, problems
from optsched.instance import load_instance
from optsched.problems.hybrid_offline import solve as offline_solve
from optsched.result import Status
from optsched.schedule import replay
from tests.support import fake_formulations
from tests.support.solving import registered_solve


@pytest.fixture
def fake_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = problems.Formulation(
        "fake", "tests.support.fake_formulations:solve", "tests.support.fake_formulations:bounds"
    )
    monkeypatch.setattr(problems, "FORMULATIONS", [fake])


@pytest.mark.parametrize("command", ["solve", "bound"])
def test_the_limit_counts_from_the_program_start(monkeypatch, capsys, fake_problem, command: str) -> None:
    """The program started 1.5 s ago (interpreter, imports): a 4 s limit leaves the solver < 2.5 s."""
    started = time.perf_counter() - 1.5
    monkeypatch.setattr(cli, "process_started", lambda: started)
    monkeypatch.setattr(sys, "argv", ["optsched", command, "toy-4", "--problem", "fake", "--time-limit", "4", "--json"])
    assert cli.main() == 0
    json.loads(capsys.readouterr().out)
    assert 0 < fake_formulations.LAST_BUDGET[0].left() <= 2.5  # the solve's or bounds' budget


def test_a_limit_used_up_by_the_start_still_gives_an_answer(monkeypatch, capsys, fake_problem) -> None:
    started = time.perf_counter() - 10.0
    monkeypatch.setattr(cli, "process_started", lambda: started)
    monkeypatch.setattr(sys, "argv", ["optsched", "solve", "toy-4", "--problem", "fake", "--time-limit", "4"])
    assert cli.main() == 0  # an answer, its budget expired
    assert fake_formulations.LAST_BUDGET[0].expired()


def test_hybrid_offline_keeps_the_schedule_inside_its_limit(monkeypatch) -> None:
    """A search that returns a better assignment after the limit: its schedule is not built past the
    limit; the LPT assignment's schedule is reported with the search's bound (status time_limit)."""
    instance = load_instance("gsm8k-like").with_requests(load_instance("gsm8k-like").requests[:200], "gsm-200")
    real, real_schedule = offline_solve.solve_pcmax, offline_solve.client_schedule
    limit = 0.5
    builds = []

    def slow_search(p, m, method="auto", budget=None, **kwargs):
        first = replace(real(p, m, method="lpt"), status=Status.FEASIBLE)  # not proven: a search runs
        if method == "lpt":
            return replace(first, bound=first.makespan - 1)
        time.sleep(limit)  # past the limit, with another assignment
        return replace(first, client=tuple(reversed(first.client)), bound=first.makespan - 2, method="slow")

    monkeypatch.setattr(offline_solve, "solve_pcmax", slow_search)
    monkeypatch.setattr(offline_solve, "client_schedule", lambda *a: builds.append(a) or real_schedule(*a))
    res = registered_solve("hybrid-offline", instance, {"time_limit": limit, "method": "mip"})
    assert len(builds) == 1  # the LPT schedule only: none built after the limit
    lpt = real(
        offline_solve.processing_times(instance, "rounds"), offline_solve.timing_of(instance).clients, method="lpt"
    )
    assert "not built in time" in res.solver and res.status == Status.TIME_LIMIT
    assert res.extra["assignment"] == {r.id: c for r, c in zip(instance.requests, lpt.client)}
    assert replay(instance, res.schedule).feasible and res.bound <= res.objective

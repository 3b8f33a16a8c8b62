"""The answer of ``optsched solve`` when the solver has not loaded by the deadline (docs/cli.md,
"Time limits"): InferMax's first answer, a policy's schedule with the proven bounds, computed before
the start-up, replayed, and labelled as not the solver's."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from dataclasses import replace

import pytest

from optsched import cli, problems
from optsched.budget import TimeBudget
from optsched.commands.solve import first_answer, first_bounds, started_up_by
from optsched.instance import SLO, load_instance
from optsched.load_bounds import proven_bounds
from optsched.options import OptionError
from optsched.problems.infermax.candidates import initial_candidates
from optsched.problems.infermax.goodput_bounds import goodput_bound
from optsched.problems.infermax.model import InferMaxOptions
from optsched.result import Status
from optsched.schedule import load_schedule, replay


@pytest.fixture
def slow_start_up(monkeypatch: pytest.MonkeyPatch):
    """Every formulation's start-up waits until the test ends (at most a minute); yields the event
    that ends it."""
    done = threading.Event()
    monkeypatch.setattr(problems.Formulation, "start_up", lambda self, kind="solve": done.wait(60))
    yield done
    done.set()


@pytest.mark.parametrize("objective", ["latency", "ttft", "makespan"])
def test_a_start_up_past_the_deadline_gives_the_policy_answer(tmp_path, capsys, slow_start_up, objective) -> None:
    out = tmp_path / "s.json"
    argv = ["solve", "poisson-mixed-100", "--problem", "infermax", "--objective", objective]
    code = cli.main([*argv, "--time-limit", "1.5", "--json", "--out", str(out)])
    assert code == 0
    assert not slow_start_up.is_set()  # answered while the start-up still ran
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == Status.TIME_LIMIT.value
    assert result["incumbent"].startswith("the solver did not load within the time limit; schedule of ")
    assert result["schedule_source"] in result["incumbent"]
    instance = load_instance("poisson-mixed-100")
    replayed = replay(instance, load_schedule(out))
    assert replayed.feasible
    metric = {"latency": "mean_latency", "ttft": "mean_ttft", "makespan": "makespan"}[objective]
    assert result["objective"] == pytest.approx(getattr(replayed.metrics, metric), rel=1e-12)
    assert max(b.value for b in proven_bounds(instance, objective)) <= result["bound"] <= result["objective"]


def test_ctrl_c_during_the_start_up_gives_the_policy_answer(monkeypatch, capsys) -> None:
    done = threading.Event()

    def interrupted_start_up(self, kind="solve"):
        os.kill(os.getpid(), signal.SIGINT)
        done.wait(60)

    monkeypatch.setattr(problems.Formulation, "start_up", interrupted_start_up)
    try:
        code = cli.main([
            "solve",
            "toy-4",
            "--problem",
            "infermax",
            "--objective",
            "latency",
            "--time-limit",
            "60",
            "--json",
        ])
    finally:
        done.set()
    assert code == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["interrupted"] is True
    assert result["incumbent"].startswith("the solver did not load")
    assert "reporting the best schedule and bound found so far" in captured.err


def test_an_optimal_first_answer_is_the_answer_without_the_solver(monkeypatch, capsys) -> None:
    """toy-4's makespan: the first policy's schedule meets the proven bound, so the solver is not loaded."""

    def no_start_up(self, kind="solve"):
        raise AssertionError("the solver was loaded")

    monkeypatch.setattr(problems.Formulation, "start_up", no_start_up)
    assert cli.main(["solve", "toy-4", "--problem", "infermax", "--time-limit", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == Status.OPTIMAL.value and result["bound"] <= result["objective"]
    assert result["incumbent"] == f"schedule of {result['schedule_source']!r}"


def test_a_start_up_in_time_gives_the_solve(capsys) -> None:
    assert cli.main(["solve", "toy-4", "--problem", "infermax", "--time-limit", "30", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "did not load" not in (result.get("incumbent") or "")
    assert result["status"] == Status.OPTIMAL.value


def test_an_error_of_the_start_up_is_raised(monkeypatch) -> None:
    def broken(self, kind="solve"):
        raise ImportError("no solver library here")

    monkeypatch.setattr(problems.Formulation, "start_up", broken)
    with pytest.raises(ImportError, match="no solver library here"):
        started_up_by(problems.formulation("infermax"), None, TimeBudget.of(30.0))


def test_no_first_answer_without_a_limit_or_a_first_answer() -> None:
    record = problems.formulation("infermax")
    instance = load_instance("toy-4")
    assert first_answer(record, instance, {}, TimeBudget.of(None)) is None
    assert first_answer(problems.formulation("hybrid"), instance, {}, TimeBudget.of(10.0)) is None
    answer = first_answer(record, instance, {}, TimeBudget.of(10.0))
    assert answer is not None and answer.replay is not None and answer.replay.feasible


def test_the_goodput_first_answer_is_a_policy_s_count_below_a_proven_bound() -> None:
    """Every request of the instance carries an SLO: the count of met SLOs is the replay's, the
    bound the goodput solve's proven one (at least the answer), sense max."""
    instance = load_instance("poisson-mixed-100")
    slo = {"ttft": 0.05, "tpot": 0.02}
    instance = instance.with_requests([replace(r, slo=SLO(**slo)) for r in instance.requests], "slo-100")
    answer = first_answer(problems.formulation("infermax"), instance, {"objective": "goodput"}, TimeBudget.of(10.0))
    assert answer is not None and answer.sense == "max" and answer.replay is not None
    met = answer.replay.metrics.slo_attainment * len(instance.requests)
    assert answer.objective == pytest.approx(met, abs=1e-9)
    assert 0 < answer.objective < len(instance.requests)  # the SLOs bind: a count, not all or none
    assert answer.bound is not None and answer.bound >= answer.objective
    assert answer.incumbent == f"schedule of {answer.extra['schedule_source']!r}"


def test_a_first_answer_longer_than_the_horizon_is_none() -> None:
    record = problems.formulation("infermax")
    instance = load_instance("toy-4")
    answer = first_answer(record, instance, {}, TimeBudget.of(10.0))
    assert answer is not None and answer.schedule is not None
    batches = answer.schedule.columns().nonempty_batches
    assert first_answer(record, instance, {"horizon": batches - 1}, TimeBudget.of(10.0)) is None
    assert first_answer(record, instance, {"horizon": batches}, TimeBudget.of(10.0)) is not None


def test_a_failing_warm_start_lists_every_policy_that_gives_a_schedule() -> None:
    """The first answer runs one policy; refusing a warm start, it names the same policies as the
    solve's candidates under the same limit do (with a limit, the policies without a clock inside
    are left out at this size)."""
    record = problems.formulation("infermax")
    instance = load_instance("infermax-i64-o1024-n32-m10k")
    options = {"no_evict": True, "warm_start": "vllm"}
    with pytest.raises(OptionError) as first:
        first_answer(record, instance, options, TimeBudget.of(60.0))
    pool = initial_candidates(instance, InferMaxOptions.parse({"no_evict": True}), TimeBudget.of(60.0))
    assert len(pool) > 2
    assert f"(available: {', '.join(sorted(pool.found))})" in str(first.value)


def test_bound_past_the_deadline_gives_the_quick_bounds(capsys, slow_start_up) -> None:
    code = cli.main([
        "bound",
        "toy-4",
        "--problem",
        "infermax",
        "--objective",
        "latency",
        "--time-limit",
        "1",
        "--json",
    ])
    assert code == 0
    assert not slow_start_up.is_set()
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["stopped"].startswith("the solver did not load within the time limit")
    assert "the solver did not load" in captured.err
    expected = {
        b.name: b.value
        for b in first_bounds(
            problems.formulation("infermax"), load_instance("toy-4"), {"objective": "latency"}, TimeBudget.of(1.0)
        )
        or []
    }
    assert expected and {b["name"]: b["value"] for b in result["bounds"]} == expected
    assert all(b["valid"] for b in result["bounds"])


def test_bound_with_its_solver_loaded_in_time_has_no_stopped_key(capsys) -> None:
    assert cli.main(["bound", "toy-4", "--problem", "infermax", "--time-limit", "30", "--json"]) == 0
    assert "stopped" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("slow", [True, False])
def test_a_warm_start_without_a_schedule_is_bad_input_either_way(monkeypatch, capsys, slow) -> None:
    """vllm evicts on this instance: with ``--no-evict`` it gives no candidate, and naming it as the
    warm start is exit 2 whether the answer is the first one or the solve's."""
    done = threading.Event()
    if slow:
        monkeypatch.setattr(problems.Formulation, "start_up", lambda self, kind="solve": done.wait(60))
    argv = ["solve", "infermax-i64-o1024-n32-m10k", "--problem", "infermax", "--no-evict", "--warm-start", "vllm"]
    try:
        code = cli.main([*argv, "--time-limit", "20"])
    finally:
        done.set()
    assert code == 2
    assert "option 'warm_start': policy 'vllm' gives no schedule respecting the options" in capsys.readouterr().err


def test_a_start_up_that_leaves_less_than_the_first_answer_took_gives_it(monkeypatch, capsys) -> None:
    """The solve's first phase redoes the first answer's work: with less time left than that took,
    the first answer is the result, and says why."""
    from optsched.problems.infermax import first_answer as module

    real = module.first_answer

    def slow_first(*args, **kwargs):
        result = real(*args, **kwargs)
        return None if result is None else replace(result, wall_time=1e6)

    monkeypatch.setattr(module, "first_answer", slow_first)
    argv = ["solve", "toy-4", "--problem", "infermax", "--objective", "latency", "--time-limit", "30", "--json"]
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    why = r"the solver loaded with [0-9.e+]+ s left, less than the first answer took \(1e\+06 s\)"
    assert re.match(why + r"; schedule of '[a-z-]+'$", result["incumbent"])


def test_the_goodput_bound_within_a_spent_budget_stays_an_upper_bound() -> None:
    """The first answer's and ``bound``'s goodput bound takes its part of the command's budget: cut
    short it is weaker (larger), never below the full bound or a policy's count."""
    instance = load_instance("poisson-mixed-100")
    instance = instance.with_requests([replace(r, slo=SLO(ttft=0.05, tpot=0.02)) for r in instance.requests], "slo-100")
    full = goodput_bound(instance).value
    spent = first_bounds(problems.formulation("infermax"), instance, {"objective": "goodput"}, TimeBudget.of(1e-9))
    assert spent is not None and spent[0].name == "goodput-windows" and spent[0].value >= full
    answer = first_answer(problems.formulation("infermax"), instance, {"objective": "goodput"}, TimeBudget.of(10.0))
    assert answer is not None and answer.objective is not None and answer.objective <= full

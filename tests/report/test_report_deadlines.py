"""The report's deadline where Python's signal handler cannot act at once: a policy's own CP-SAT
solve in C code is stopped, and the solver's start-up (its modules and kernels, loaded while the
policies run) is waited for only until the deadline, so a short limit still has the policies'
schedules."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from optsched import problems
from optsched.budget import TimeBudget
from optsched.cli import main
from optsched.instance import load_instance
from optsched.policies import POLICIES
from optsched.problems.hybrid.pcmax import solve_pcmax
from optsched.report import build_report
from optsched.report.alarm import TimeUp, alarm
from optsched.result import Status

#: Decode rounds of 30 requests on 8 clients whose P||Cmax CP-SAT does not prove within seconds
#: (its lower bound, 589, is not reached).
HARD_PCMAX = [248, 0, 240, 163, 250, 211, 48, 135, 45, 47, 128, 100, 49, 102, 249]
HARD_PCMAX += [263, 257, 185, 155, 45, 268, 137, 194, 107, 267, 8, 156, 199, 250, 203]


@pytest.fixture
def fcfs(monkeypatch: pytest.MonkeyPatch) -> str:
    """The test-only serial FCFS policy."""
    monkeypatch.setitem(POLICIES, "serial-fcfs", "tests.support.report:serial_fcfs")
    return "serial-fcfs"


def test_a_solver_in_c_code_is_stopped_at_the_deadline() -> None:
    """SIGALRM reaches Python only when CP-SAT returns: the alarm's timer stops CP-SAT at the
    deadline (as the ``hybrid`` policies' offline assignment needs inside a report)."""
    alone = solve_pcmax(HARD_PCMAX, 8, method="cpsat", budget=TimeBudget.of(1.0))
    assert alone.status != Status.OPTIMAL  # the solve would run to its own limit
    t0 = time.perf_counter()
    with pytest.raises(TimeUp), alarm(TimeBudget.of(0.3)):
        solve_pcmax(HARD_PCMAX, 8, method="cpsat", budget=TimeBudget.of(60.0))
    assert time.perf_counter() - t0 < 5.0


def test_the_policies_run_while_the_solver_loads(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A solver whose start-up outlasts the limit: the policies' schedules are there, the report is
    partial at the start-up's wait, within the limit."""
    release = threading.Event()
    started: list[str] = []

    def slow_start_up(self: problems.Formulation, kind: str = "solve") -> None:
        started.append(self.name)
        release.wait(30.0)

    monkeypatch.setattr(problems.Formulation, "start_up", slow_start_up)
    t0 = time.perf_counter()
    try:
        report = build_report(load_instance("toy-4"), time_limit=1.0, policies=[fcfs], solve_problem="infermax")
    finally:
        release.set()
    assert time.perf_counter() - t0 < 2.0
    assert started == ["infermax"]
    assert report.partial and report.notes[-1] == "time limit reached during solver start-up; the report is partial"
    assert report.best is not None and report.best[0] == f"policy:{fcfs}"
    assert report.solver is None


def test_an_unknown_solver_problem_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "toy-4", "--problem", "nope", "--time-limit", "5"]) == 2
    err = capsys.readouterr().err
    assert "--problem" in err and "nope" in err and len(err.strip().splitlines()) == 1


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # "ignored due to race condition"
def test_an_alarm_leaves_no_timer_and_no_handler_behind(capfd: pytest.CaptureFixture[str]) -> None:
    """Deadlines met at every moment of the alarm's set-up, block and clean-up (its thread starting,
    the block's end), with other threads running (a process-wide SIGALRM may be taken by any of
    them: a clean-up that waited for it hung): after each, SIGALRM has its previous handler, no
    alarm thread runs and no signal arrives late ("ignored due to race condition")."""
    previous = signal.getsignal(signal.SIGALRM)
    done = threading.Event()

    def other_thread() -> None:
        while not done.is_set():
            time.sleep(1e-5)

    others = [threading.Thread(target=other_thread, daemon=True) for _ in range(3)]
    for thread in others:
        thread.start()
    try:
        for k in range(2000):
            try:
                with alarm(TimeBudget.of(1e-5 * (k % 30 + 1))):
                    time.sleep(1e-4 * (k % 7))
            except TimeUp:
                pass
            assert signal.getsignal(signal.SIGALRM) is previous
            assert not any(t.name == "optsched-alarm" for t in threading.enumerate())
    finally:
        done.set()
    time.sleep(0.1)
    assert "race condition" not in capfd.readouterr().err

"""optsched.budget: the time budget's arithmetic, its sub-phases and Ctrl-C."""

from __future__ import annotations

import threading
import time

import pytest

from optsched import interrupt
from optsched.budget import LONGEST_WAIT, SlowestRun, TimeBudget, process_started


def test_an_unlimited_budget_never_expires() -> None:
    budget = TimeBudget.of(None)
    assert not budget.limited and budget.left() is None and not budget.expired()
    assert budget.share(0.5) == budget and budget.reserve(3.0) == budget
    assert budget.within(2.0).left() == pytest.approx(2.0, abs=0.1)


def test_seconds_from_a_start() -> None:
    start = time.perf_counter() - 1.0
    budget = TimeBudget.of(3.0, start=start)
    assert budget.end == pytest.approx(start + 3.0)
    assert budget.left() == pytest.approx(2.0, abs=0.1) and not budget.expired()
    assert budget.reserve(0.5).end == pytest.approx(start + 2.5)
    assert budget.share(0.5).left() == pytest.approx(1.0, abs=0.1)
    assert budget.within(0.2).left() == pytest.approx(0.2, abs=0.05)
    assert budget.within(100.0).end == budget.end  # never past the budget


def test_an_expired_budget() -> None:
    budget = TimeBudget.of(1.0, start=time.perf_counter() - 2.0)
    assert budget.expired() and budget.left() == 0.0 and budget.left(0.01) == 0.01
    assert budget.share(0.5).expired() or budget.share(0.5).left() == pytest.approx(0.0, abs=1e-3)
    from optsched.deadline import DeadlinePassed

    with pytest.raises(DeadlinePassed, match="the MIP not built"):
        budget.check("the MIP")


def test_ctrl_c_expires_every_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("optsched.budget.requested", lambda: True)
    budget = TimeBudget.of(3600.0)
    assert budget.expired() and budget.left(0.05) == 0.05
    assert not TimeBudget.of(None).expired()
    assert interrupt.requested() is False  # the patch is the budget's view only


def test_the_process_started_before_now() -> None:
    assert process_started() <= time.perf_counter()


def test_holds_work_that_ends_within_the_budget() -> None:
    assert TimeBudget.of(None).holds(1e9)
    budget = TimeBudget.of(2.0)
    assert budget.holds(1.0) and not budget.holds(3.0)
    assert not TimeBudget.of(1.0, start=time.perf_counter() - 2.0).holds(0.0)  # expired: nothing more


def test_slowest_run_keeps_the_longest_run_and_fits_that_many_more() -> None:
    slowest = SlowestRun()
    assert slowest.fits(TimeBudget.of(0.01), runs=100.0)  # nothing timed yet: any number fits
    for pause in (0.05, 0.15, 0.02):
        with slowest.timing():
            time.sleep(pause)
    assert 0.15 <= slowest.seconds < 0.3  # the longest, not the last or the sum
    with pytest.raises(ValueError), slowest.timing():  # a run that raises is timed too
        time.sleep(0.35)
        raise ValueError
    assert slowest.seconds >= 0.35
    budget = TimeBudget.of(1.0)
    assert slowest.fits(budget) and slowest.fits(budget, runs=2.0) and not slowest.fits(budget, runs=3.0)


@pytest.mark.parametrize("seconds", [1e10, 1e300])
def test_a_limit_no_process_reaches_waits_in_threads_without_overflow(seconds: float) -> None:
    """left() answers at most LONGEST_WAIT, which a thread's wait takes (a wait of 1e10 s overflows
    the platform's clock in ``Thread.join`` and ``Event.wait``)."""
    budget = TimeBudget.of(seconds)
    assert budget.left() == LONGEST_WAIT and budget.holds(1e6) and not budget.expired()
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join(budget.left())  # a valid wait: the join returns when the thread ends
    assert not worker.is_alive()

"""The worked example of docs/development.md: a toy formulation registered by one line, solved and
bounded through :mod:`optsched.api` like every formulation."""

from __future__ import annotations

import pytest

from optsched import api, problems
from optsched.instance import load_instance
from optsched.options import OptionError
from optsched.result import Status
from optsched.schedule import replay

TOY = problems.Formulation(
    name="best-policy",
    solve="tests.support.toyproblem.solve:solve",
    bounds="tests.support.toyproblem.solve:bounds",
    solve_options="tests.support.toyproblem.solve:ToyOptions",
    bound_options="tests.support.toyproblem.solve:ToyBoundOptions",
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(problems, "FORMULATIONS", list(problems.FORMULATIONS))
    problems.register(TOY)  # the one registration line


def test_the_toy_solves_through_the_api(toy: None) -> None:
    result = api.solve("toy-4", "best-policy", policies="vllm,sarathi", time_limit=5)
    assert result.replay is not None and result.replay.feasible
    assert result.objective == pytest.approx(replay(load_instance("toy-4"), result.schedule).metrics.makespan)
    (bound,) = api.bound("toy-4", "best-policy")
    assert result.bound == bound.value and bound.valid
    assert result.objective >= bound.value * (1 - 1e-9)
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert (result.status == Status.OPTIMAL) == (result.objective <= bound.value)


def test_the_toy_is_no_worse_than_each_of_its_policies(toy: None) -> None:
    both = api.solve("toy-4", "best-policy", policies="vllm,sarathi").objective
    for name in ("vllm", "sarathi"):
        _, replayed = api.simulate("toy-4", name)
        assert both <= replayed.metrics.makespan
        assert api.solve("toy-4", "best-policy", policies=name).objective == replayed.metrics.makespan


def test_the_toy_options_are_checked(toy: None) -> None:
    with pytest.raises(OptionError, match="no_such"):
        api.solve("toy-4", "best-policy", no_such=1)
    assert "best-policy" in problems.SOLVERS and "best-policy" not in problems.NO_SCHEDULE


def test_the_toy_is_not_registered_outside_its_test() -> None:
    with pytest.raises(KeyError, match="best-policy"):
        api.formulation("best-policy")

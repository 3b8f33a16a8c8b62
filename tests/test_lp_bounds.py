"""The LP bounds of ``optsched/load_bounds.py`` (``lp_bounds``) and how they share their time.

- :func:`~optsched.load_bounds.lp_seconds` gives an LP its stretched limit without a time limit, its part of
  a long budget (at least its own limit, at most four times it and the time left) and nothing once the
  budget expired;
- :func:`~optsched.load_bounds.lp_bounds` is the LP part of :func:`~optsched.load_bounds.load_bounds`
  (same names, same values), and the InferMax bounder hands each LP its part of the bounder's budget,
  so a long time limit lets a loaded machine finish the solves that miss their own limit;
- the TTFT bounds that ``ttft-plus-rest`` reads are computed once on a path: passed along in
  :func:`~optsched.load_bounds.default_bounds`, not recomputed by the InferMax bounder's LPs;
- a report lists every bound ``optsched bound --problem infermax`` lists, with the same values.
"""

from __future__ import annotations

import json
import time

import pytest

import optsched.finish_index as finish_index
import optsched.load_bounds as lb
from optsched.budget import NO_LIMIT, TimeBudget
from optsched.finish_index import FINISH_INDEX_TIME
from optsched.fluid_bounds import FLUID_TIME
from optsched.fluid_work import WORK_TIME
from optsched.pair_wait_lp import LP_TIME as PAIR_LP_TIME
from optsched.phase_bounds import rest_after_first_token
from optsched.phase_latency import PHASE_TIME
from optsched.result import Bound
from tests.support.bound_checks import loaded_instance
from tests.support.solving import registered_bounds

LP_NAMES = {
    "latency": ("busy-time-work", "pair-wait-lp", "fluid-latency", "phase-latency", "fluid-work"),
    "ttft": ("busy-time-prefill",),
}


def test_lp_seconds_is_what_a_long_budget_gives_without_a_limit() -> None:
    assert lb.lp_seconds(NO_LIMIT, 5.0, 25.0) == lb.LP_STRETCH * 5.0 == lb.lp_seconds(TimeBudget.of(1e6), 5.0, 5.0)


def test_lp_seconds_is_nothing_once_the_budget_expired() -> None:
    assert lb.lp_seconds(TimeBudget(time.perf_counter() - 1.0), 5.0, 25.0) is None


def test_lp_seconds_is_its_part_of_a_long_budget() -> None:
    seconds = lb.lp_seconds(TimeBudget.of(60.0), 10.0, 20.0)
    assert seconds is not None and 29.0 < seconds <= 30.0  # half of the time left: 10 of 20


def test_lp_seconds_is_at_most_a_stretch_of_the_own_limit() -> None:
    assert lb.lp_seconds(TimeBudget.of(1000.0), 5.0, 5.0) == lb.LP_STRETCH * 5.0


def test_lp_seconds_is_at_least_the_own_limit_and_at_most_the_time_left() -> None:
    seconds = lb.lp_seconds(TimeBudget.of(30.0), 5.0, 25.0)  # its part, 6 s, is above its own 5 s
    assert seconds is not None and 5.0 < seconds <= 6.0
    seconds = lb.lp_seconds(TimeBudget.of(12.0), 5.0, 25.0)  # its part, 2.4 s, is below its own 5 s
    assert seconds == 5.0
    seconds = lb.lp_seconds(TimeBudget.of(3.0), 5.0, 25.0)  # less time left than its own limit
    assert seconds is not None and 2.0 < seconds <= 3.0


@pytest.mark.parametrize("objective", ("latency", "ttft"))
def test_the_lps_are_listed_by_lp_bounds_only(objective: str) -> None:
    inst = loaded_instance(40, 3)
    solver_free = {b.name for b in lb.load_bounds(inst, objective)}
    alone = {b.name for b in lb.lp_bounds(inst, objective)}
    assert not solver_free & set(LP_NAMES[objective])
    assert alone == set(LP_NAMES[objective])  # each is solved on 40 requests


def record_seconds(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Replace the six programmes of :func:`optsched.load_bounds.lp_bounds` by recorders of their ``seconds``."""
    seen: dict[str, float] = {}

    def recorder(name: str):
        def lp(*args, seconds: float) -> None:
            seen[name] = seconds

        return lp

    for attr in ("_busy_time", "pair_wait_lp", "fluid_latency", "phase_latency", "fluid_work"):
        monkeypatch.setattr(lb, attr, recorder(attr))
    # imported where the bounds run (numba's import is not paid at the program's start)
    monkeypatch.setattr(finish_index, "finish_index_bound", recorder("finish_index_bound"))
    return seen


def test_the_bounder_gives_each_lp_its_part_of_a_long_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_seconds(monkeypatch)
    registered_bounds("infermax", loaded_instance(30, 1), {"objective": "latency", "time_limit": 100.0})
    assert 7.0 < seen["_busy_time"] <= 8.34  # 5 of the 60 s of own limits: a twelfth of about 100 s
    assert 16.0 < seen["pair_wait_lp"] <= 18.19  # 10 of 55 of what is left
    assert 19.0 < seen["finish_index_bound"] <= 22.23  # 10 of 45
    assert 25.0 < seen["fluid_latency"] <= 28.58  # 10 of 35
    assert 17.0 < seen["phase_latency"] <= lb.LP_STRETCH * PHASE_TIME  # 5 of 25, at most 4 x 5 s
    assert seen["fluid_work"] == lb.LP_STRETCH * WORK_TIME  # the rest, at most 4 x 20 s
    seen.clear()
    registered_bounds("infermax", loaded_instance(30, 1), {"objective": "latency"})  # no time limit
    own = {"_busy_time": lb.LP_TIME, "pair_wait_lp": PAIR_LP_TIME, "fluid_latency": FLUID_TIME}
    own |= {"phase_latency": PHASE_TIME, "fluid_work": WORK_TIME, "finish_index_bound": FINISH_INDEX_TIME}
    assert seen == {name: lb.LP_STRETCH * seconds for name, seconds in own.items()}


def test_a_short_budget_bounds_every_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_seconds(monkeypatch)
    registered_bounds("infermax", loaded_instance(30, 1), {"objective": "latency", "time_limit": 2.0})
    assert seen and all(0.0 < s <= 2.0 for s in seen.values())


def test_ttft_plus_rest_reads_the_ttft_bounds_given() -> None:
    inst = loaded_instance(30, 2)
    computed = {b.name: b.value for b in lb.load_bounds(inst, "latency")}
    passed = {b.name: b.value for b in lb.load_bounds(inst, "latency", ttft=lb.load_bounds(inst, "ttft"))}
    assert passed == computed
    planted = [Bound("planted", 7.0, True, "a planted TTFT bound")]
    value = next(b.value for b in lb.load_bounds(inst, "latency", ttft=planted) if b.name == "ttft-plus-rest")
    rest = rest_after_first_token(inst)
    assert value == pytest.approx(7.0 + rest.sum() / len(rest), rel=1e-9)


def count_srpt(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the objective of each computation of the bounds that need no solver in
    :mod:`optsched.load_bounds` (each calls :func:`optsched.pair_bounds.pair_bounds` once)."""
    calls: list[str] = []
    original = lb.pair_bounds

    def counted(instance, objective):
        calls.append(objective)
        return original(instance, objective)

    monkeypatch.setattr(lb, "pair_bounds", counted)
    return calls


def test_default_bounds_compute_the_ttft_bounds_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_srpt(monkeypatch)
    names = [b.name for b in lb.default_bounds(loaded_instance(20, 4))]
    assert sorted(calls) == ["latency", "ttft"]
    assert "ttft-plus-rest" in names and "srpt-prefill" in names and "busy-time-prefill" in names


@pytest.mark.parametrize("objective", ("latency", "ttft"))
def test_the_bounders_lps_recompute_no_srpt_bound(monkeypatch: pytest.MonkeyPatch, objective: str) -> None:
    inst = loaded_instance(20, 4)
    calls = count_srpt(monkeypatch)
    lb.proven_bounds(inst, objective)
    assert sorted(calls) == (["latency", "ttft"] if objective == "latency" else ["ttft"])
    calls.clear()
    assert lb.lp_bounds(inst, objective) and calls == []


def test_the_report_lists_every_bound_of_the_bound_command(capsys) -> None:
    """A report's own bounds include every bound ``optsched bound --problem infermax`` lists, at the
    same values (the report's bounder runs the same LPs, within its share of the time)."""
    from optsched.cli import main
    from optsched.report.gather import build_report

    inst = loaded_instance(40, 5)
    report = build_report(inst, objective="latency", time_limit=60.0, solve_max_requests=0)
    mine = {b.name: b.value for b in report.bounds if b.comparable and b.source == "infermax"}
    listed = registered_bounds("infermax", inst, {"objective": "latency"})
    assert {b.name for b in listed} <= set(mine)
    for b in listed:
        assert mine[b.name] == pytest.approx(b.value, rel=1e-9), b.name
    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "latency", "--json"]) == 0
    assert {b["name"] for b in json.loads(capsys.readouterr().out)["bounds"]} >= set(LP_NAMES["latency"])

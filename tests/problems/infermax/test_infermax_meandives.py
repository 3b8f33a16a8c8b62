"""The exact mean search's dives (:mod:`optsched.problems.infermax.meansearch`, *Dives*): the beams.

- With a beam before every expansion after the first greedy dive (the dives' share of the time the
  whole, the beams' share of theirs the whole), every search on tiny instances with arrivals still
  ends at the exhaustive optimum, its schedule replays to its value, and beams ran.

A search stopped early keeps its best dive's schedule: ``test_infermax_meansearch.py``.
"""

from __future__ import annotations

from functools import cache

import pytest

from optsched.budget import NO_LIMIT
from optsched.problems.infermax import meansearch
from optsched.problems.infermax.meansearch import MEAN_SEARCH, MEAN_SEARCH_DIVE, mean_search
from optsched.result import Status, replayed_objective
from optsched.schedule import replay
from tests.support.infermax import tiny_instance
from tests.support.latency_bruteforce import exhaustive_mean

OBJECTIVES = ("latency", "ttft")
#: Seeds of tiny instances with 2 or 3 requests.
SEEDS = (0, 5, 6, 7, 9, 10, 11, 13, 16, 19, 20, 25, 26, 27, 29, 30, 34, 37)
REL = 1e-9


@cache
def exhaustive(seed: int, objective: str) -> float:
    """The exhaustive optimum of ``tiny_instance(seed, arrivals=True)``."""
    found = exhaustive_mean(tiny_instance(seed, arrivals=True), objective)
    assert found is not None
    return found[0]


@pytest.fixture
def beams_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dives are beams, before every expansion, after the first (greedy) dive: the dives may take
    the whole time, and the beams all of theirs."""
    monkeypatch.setattr(meansearch, "DIVE_SHARE", 1.0)
    monkeypatch.setattr(meansearch, "BEAM_SHARE", 1.0)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_searches_with_beams_end_at_the_exhaustive_optimum(objective: str, beams_only: None) -> None:
    """Beams before every expansion leave the proven optimum where the exhaustive search puts it."""
    beams = 0
    for seed in SEEDS:
        inst = tiny_instance(seed, arrivals=True)
        res = mean_search(inst, objective, None, NO_LIMIT)
        assert res.status == Status.OPTIMAL and res.schedule is not None, seed
        assert res.schedule.meta["solver"] in (MEAN_SEARCH, MEAN_SEARCH_DIVE)
        assert replay(inst, res.schedule).feasible, seed
        value = replayed_objective(inst, res.schedule, objective)[0]
        best = exhaustive(seed, objective)
        assert value == pytest.approx(res.value, rel=REL) and value == pytest.approx(best, rel=REL), seed
        beams += res.dives[0] >= 2  # the first dive is greedy, every later one a beam
    assert beams > 0

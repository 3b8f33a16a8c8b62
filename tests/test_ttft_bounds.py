"""The ``srpt-prefill-flush`` bound on mean TTFT (optsched/ttft_bounds.py) against exhaustive search and policies.

- never above the exhaustive TTFT optimum on random tiny instances, with and without arrivals, KV
  and R_max limits (``tests/support/latency_bruteforce.py``);
- never above any policy's replayed mean TTFT on random loaded instances of 20 to 200 requests;
- listed by ``optsched bound --problem infermax --objective ttft`` and read by the proven bounds;
- a planted invalid variant (every first token waiting two batch overheads after its work) is caught.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from optsched.bounds import prefill_alone_time
from optsched.load_bounds import load_bounds, proven_bounds, share_terms, srpt_completions
from optsched.ttft_bounds import flush_mean_bound, flush_overhead
from tests.support.bound_checks import (
    LOADED,
    check_never_above_any_policy,
    check_never_above_the_exhaustive_optimum,
    refutations,
)
from tests.support.infermax import tiny_instance


def flush_value(inst, overhead_scale: float = 1.0) -> float:
    """The flush bound with every first token ``overhead_scale`` batch overheads after its work
    (1: the proven bound; more: a planted, invalid one)."""
    release = np.array([r.arrival for r in inst.requests], dtype=np.float64)
    done = srpt_completions(release, share_terms(inst, True)[:, 0])
    alone = np.array([prefill_alone_time(inst, r.prompt_tokens) for r in inst.requests])
    return flush_mean_bound(done, release, alone, overhead_scale * flush_overhead(inst))


def listed(inst) -> float:
    """The value of ``srpt-prefill-flush`` among the proven TTFT bounds."""
    (value,) = [b.value for b in proven_bounds(inst, "ttft") if b.name == "srpt-prefill-flush"]
    return value


def srpt_prefill(inst) -> float:
    """The value of ``srpt-prefill`` among the load-aware TTFT bounds."""
    return next(b.value for b in load_bounds(inst, "ttft") if b.name == "srpt-prefill")


@pytest.mark.parametrize("arrivals", [False, True])
def test_never_above_the_exhaustive_optimum(arrivals: bool) -> None:
    checked = check_never_above_the_exhaustive_optimum(listed, flush_value, "ttft", arrivals)
    assert any(value > srpt_prefill(inst) * (1 + 1e-9) for inst, value in checked)  # above srpt-prefill somewhere


@pytest.mark.parametrize("n, seed", LOADED)
def test_never_above_any_policy(n: int, seed: int) -> None:
    check_never_above_any_policy(listed, "ttft", n, seed)


def test_a_planted_invalid_variant_is_caught() -> None:
    """Two overheads after each first token's work: above the exhaustive optimum of some tiny
    instance, or above some policy's mean TTFT on a loaded one."""
    assert refutations(lambda inst: flush_value(inst, 2.0), "ttft")


def test_the_bound_command_lists_it(capsys) -> None:
    from optsched.cli import main

    assert main(["bound", "toy-4", "--problem", "infermax", "--objective", "ttft", "--json"]) == 0
    found = {b["name"]: b for b in json.loads(capsys.readouterr().out)["bounds"]}
    flush = found["srpt-prefill-flush"]
    assert flush["valid"] and flush["value"] > 0 and "ttft_bounds" in flush["note"]
    assert "srpt-prefill-flush" not in {b.name for b in load_bounds(tiny_instance(5), "latency")}

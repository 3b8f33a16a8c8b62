"""A policy that schedules by SLO targets (``slo-budget``) in ``sweep``: a capacity probe gives it the
target's limits; a sweep without a target and without SLOs in the instance records why it cannot
run ("n/a"), never a schedule that silently ignored the SLO."""

from __future__ import annotations

import json

import numpy as np

from optsched.cli import main
from optsched.instance import load_instance, parse_instance
from optsched.policies.engine import simulate
from optsched.schedule import replay
from optsched.sweep.capacity import rate_grid
from tests.support.sweep import read_rows, write_spec

SLO = {"ttft": 0.4, "tpot": 0.03, "quantile": 0.9}


def _sweep(tmp_path, spec: dict, *extra: str) -> int:
    return main(["sweep", str(write_spec(tmp_path, spec)), "--out", str(tmp_path / "out"), "--no-progress", *extra])


def _meets(data: dict, policy: str) -> bool:
    """Brute force: the requests given the target's limits as their SLOs, simulated, replayed."""
    slo = {"ttft": SLO["ttft"], "tpot": SLO["tpot"]}
    instance = parse_instance({**data, "requests": [{**r, "slo": slo} for r in data["requests"]]})
    outs = replay(instance, simulate(instance, policy)).outcomes.values()
    t = [o.ttft for o in outs]
    p = [o.tpot for o in outs if o.tpot is not None]
    return bool(np.quantile(t, SLO["quantile"]) <= SLO["ttft"] and np.quantile(p, SLO["quantile"]) <= SLO["tpot"])


def test_capacity_gives_slo_policies_the_target(tmp_path, capsys) -> None:
    spec = {
        "name": "cap",
        "workloads": [{"instance": "poisson-mixed-100", "first": 30}],
        "run": {"simulate": ["slo-budget", "slo-budget-fcfs"]},
        "capacity": {"low": 0.5, "high": 24, "tolerance": 0.25},
    }
    target = ["--slo-ttft-p99", str(SLO["ttft"]), "--slo-tpot-p99", str(SLO["tpot"])]
    assert _sweep(tmp_path, spec, "--capacity", "--workers", "1", *target, "--attainment", "0.9", "--json") == 0
    found = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["capacity"] if r["policy"] != "ceiling"}
    base = load_instance("poisson-mixed-100").to_dict()
    for policy, row in found.items():
        meeting = []
        for scale in rate_grid(0.5, 24, 0.25):
            data = {**base, "requests": [{**r, "arrival": r["arrival"] / scale} for r in base["requests"][:30]]}
            if _meets(data, policy):
                meeting.append(scale)
        assert meeting, "the target should be met at some rate"
        assert row["rate_scale"] == max(meeting), (policy, row, meeting)
    probes = [r for r in read_rows(tmp_path / "out") if r["kind"] == "simulate"]
    assert probes and all(r["status"] == "ok" for r in probes)


def test_without_a_target_or_slos_the_policy_is_not_applicable(tmp_path) -> None:
    spec = {"name": "plain", "workloads": [{"instance": "poisson-mixed-100", "first": 10}]}
    assert _sweep(tmp_path, {**spec, "run": {"simulate": ["slo-budget", "vllm"]}}) == 0
    rows = {r["policy"]: r for r in read_rows(tmp_path / "out") if r["kind"] == "simulate"}
    assert rows["vllm"]["status"] == "ok"
    assert rows["slo-budget"]["status"] == "n/a"
    assert "no request has a TTFT target" in rows["slo-budget"]["error"]

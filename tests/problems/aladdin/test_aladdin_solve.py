"""Aladdin's registry entry and commands (aladdin/solve.py): Fig. 3's JSQ and exact peaks, plan and solve."""

from __future__ import annotations

from optsched.instance import load_instance
from optsched.problems.aladdin.cluster import simulate_cluster
from tests.support.aladdin import SOLVERS
from tests.support.solving import solver


def test_fig3_jsq_peaks_10_exact_peaks_7():
    inst = load_instance("aladdin-fig3")
    solve = solver("aladdin")
    j = solve(inst, {"method": "jsq"})
    assert j.extra["peak_kv_model"] == [10, 10]
    assert j.status == "infeasible" and any("(e)" in v for v in j.extra["violations"])
    for s in SOLVERS:
        r = solve(inst, {"method": "exact", "solver": s})
        assert r.status == "optimal" and r.objective == 2 and r.bound == 2
        assert max(r.extra["peak_kv_model"]) == 7, s
        assert r.extra["simulation"]["evictions"] == 0
    b = solve(inst, {"method": "bestfit"})
    assert b.status == "feasible" and max(b.extra["peak_kv_model"]) <= 9


def test_cli_plan_and_solve(capsys):
    import json

    from optsched.cli import main

    assert main(["plan", "aladdin-fig3", "--method", "exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the placement model (planned lengths) needs 2 workers; the simulation attains P100 with one,
    # and the search starts there (it started at the bound and answered 2)
    assert out["lower_bound_workers"] == 2 and out["workers"] == 1 and out["evaluated"] == {"W=1": 1.0}
    assert simulate_cluster(load_instance("aladdin-fig3"), "exact", 1).attainment == 1.0
    assert main(["solve", "aladdin-fig3", "--problem", "aladdin", "--method", "jsq", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "infeasible" and out["peak_kv_model"] == [10.0, 10.0]
    assert main(["plan", "aladdin-fig3", "--method", "nope"]) == 2
    assert main(["plan", "toy-4", "--method", "jsq"]) == 2  # quadratic prefill: not Aladdin's model


def test_exact_stopped_at_its_limit_is_time_limit_not_infeasible(monkeypatch):
    """The exact method stopped before a placement (planted: CP-SAT stops with none) at a worker
    count that best fit overflows: best fit's placement, its overflows and violations listed, with
    status time_limit (docs/aladdin.md, *Time limits*); infeasible would claim a proof."""
    import optsched.problems.aladdin.exact as exact

    monkeypatch.setattr(exact, "_solve_cpsat", lambda *args: ("time_limit", {}, None))
    r = solver("aladdin")(load_instance("aladdin-fig3"), {"method": "exact", "max_workers": 1, "time_limit": 10})
    assert r.status == "time_limit" and r.extra["unplaceable"] and r.extra["violations"]
    assert r.bound is not None and r.objective == 1


def test_plan_time_limit_bounds_the_lower_bounds_placements(monkeypatch, capsys):
    """`plan --time-limit S` is the limit of every exact placement, the lower bound's included
    (they took 10 s each whatever the limit); without it, the bound's take 10 s."""
    from optsched.cli import main
    from optsched.problems.aladdin import capacity

    limits = []
    real = capacity.heartbeat_lower_bound

    def recording(instance, **kw):
        limits.append(kw["time_limit"])
        return real(instance, **kw)

    monkeypatch.setattr(capacity, "heartbeat_lower_bound", recording)
    assert main(["plan", "aladdin-fig3", "--method", "jsq", "--time-limit", "0.5"]) == 0
    assert main(["plan", "aladdin-fig3", "--method", "jsq"]) == 0
    assert limits == [0.5, 10.0]
    assert "1 worker = 1 GPU\n" in capsys.readouterr().out


def test_plan_reads_the_instances_max_workers(tmp_path, capsys):
    """`placement.max_workers` is checked as `solve` checks it (0 was ignored) and is the largest W
    searched unless --max-workers says otherwise."""
    import json

    from optsched.cli import main
    from tests.support.paths import INSTANCES

    data = json.loads((INSTANCES / "aladdin-fig3.json").read_text())
    data["requests"] = [{"id": f"r{i}", "arrival": 0.0, "prompt_tokens": 4, "output_tokens": 4} for i in range(6)]
    data["slo"]["ttft"] = 0.02  # three workers needed (test_bad_input: one and two miss the TTFT)
    path = tmp_path / "six.json"
    for cap, argv, code, workers in [(0, [], 2, None), (2, [], 1, None), (2, ["--max-workers", "8"], 0, 3)]:
        data["placement"]["max_workers"] = cap
        path.write_text(json.dumps(data))
        assert main(["plan", str(path), "--method", "jsq", "--json", *argv]) == code
        out, err = capsys.readouterr()
        if code == 2:
            assert "field 'placement.max_workers': must be an integer >= 1, got 0" in err
            continue
        result = json.loads(out)
        assert result["workers"] == workers and max(int(k[2:]) for k in result["evaluated"]) <= (8 if argv else cap)


def test_plan_refuses_a_solver_whose_licence_stops_it(monkeypatch, capsys):
    """Gurobi's size-limited licence refusing a placement model deep in the search is one line and
    exit 2 (it was exit 3, "internal error: GurobiError"); another error is still an internal one."""
    from optsched.cli import main
    from optsched.problems.aladdin import capacity

    def refused(*args, **kwargs):
        raise RuntimeError("Model too large for size-limited license; visit https://gurobi.com/unrestricted")

    monkeypatch.setattr(capacity, "min_workers", refused)
    assert main(["plan", "aladdin-fig3", "--method", "exact", "--solver", "highs"]) == 2
    err = capsys.readouterr().err
    assert "--solver highs: its licence does not cover the placements of this search" in err
    assert len(err.strip().splitlines()) == 1

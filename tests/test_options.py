"""Typed options of every formulation, their rejection of options that do nothing, and the public
Python entry points (``optsched.solve``, ``bound``, ``simulate``)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

import optsched
from optsched import api
from optsched.cli import main
from optsched.options import OptionError
from optsched.problems import BOUND_OPTIONS, BOUNDERS, NO_SCHEDULE, SOLVE_OPTIONS, SOLVERS, accepted, options_for
from optsched.result import SolveResult, Status
from tests.support.paths import INSTANCES, REPO

GMAX_FIG3 = str(INSTANCES / "static" / "fig3-slo-order.json")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- the registry's shape


def test_every_solver_and_bounder_has_an_options_dataclass():
    assert set(SOLVE_OPTIONS) == set(SOLVERS) and set(BOUND_OPTIONS) == set(BOUNDERS)
    for name in SOLVERS:
        for kind in ("solve", "bound") if name in BOUNDERS else ("solve",):
            cls = options_for(name, kind)
            assert dataclasses.is_dataclass(cls) and cls.problem == name and cls.what == kind
            assert cls.parse({}) == cls.parse(None) == cls()  # the defaults are valid


@pytest.mark.parametrize(
    "name, kind", [(n, "solve") for n in sorted(SOLVE_OPTIONS)] + [(n, "bound") for n in sorted(BOUND_OPTIONS)]
)
def test_an_unknown_option_is_rejected_naming_it(name, kind):
    with pytest.raises(OptionError, match=rf"problem '{name}' has no {kind} option 'foo' \(known: "):
        options_for(name, kind).parse({"foo": 1})


def test_values_are_strictly_typed():
    cls = options_for("infermax")
    assert cls.parse({"time_limit": 3, "threads": 2, "no_evict": True}).time_limit == 3.0
    for bad, needle in [
        ({"time_limit": "3"}, "option 'time_limit': must be a finite number > 0, got '3'"),
        ({"time_limit": float("nan")}, "option 'time_limit'"),
        ({"threads": 2.0}, "option 'threads': must be an integer >= 1, got 2.0"),
        ({"threads": True}, "option 'threads'"),
        ({"no_evict": 1}, "option 'no_evict': must be true or false, got 1"),
        (
            {"objective": "speed"},
            "option 'objective': unknown 'speed' (known: makespan, latency, ttft, goodput, completion)",
        ),
        ({"relax": 1.5}, "option 'relax'"),
        ({"warm_start": 3}, "option 'warm_start': must be a string, got 3"),
    ]:
        with pytest.raises(OptionError) as exc:
            cls.parse(bad)
        assert needle in str(exc.value)
    assert cls.parse({"relax": True}).relax == cls().relax and cls.parse({"relax": False}).relax == 0.0
    assert cls.parse({"solver": None}).solver == "cpsat"  # None means the default


@pytest.mark.parametrize(
    "name, kind, options, needle",
    [
        ("gmax", "solve", {"iters": 5}, "option 'iters': has no effect unless method is 'sa'"),
        (
            "gmax",
            "solve",
            {"method": "sa", "solver": "highs"},
            "option 'solver': has no effect unless method is 'exact'",
        ),
        ("gmax", "solve", {"exact_method": "bnb", "solver": "highs"}, "option 'solver': has no effect"),
        (
            "aladdin",
            "solve",
            {"method": "jsq", "solver": "highs"},
            "option 'solver': has no effect unless method is 'exact'",
        ),
        ("hybrid-offline", "solve", {"method": "lpt", "threads": 2}, "option 'threads': has no effect"),
        (
            "hybrid-offline",
            "solve",
            {"method": "auto", "solver": "highs"},
            "uses CP-SAT; a MIP backend needs method 'mip'",
        ),
        ("hybrid-offline", "solve", {"method": "mip", "solver": "cpsat"}, "needs a MIP backend"),
        ("scls-batch", "solve", {"solver": "cbc"}, "option 'solver': has no effect unless method is 'mip'"),
        ("infermax", "bound", {"threads": 2}, "option 'threads': has no effect unless method is 'relax'"),
        ("infermax", "solve", {"objective": "latency", "relax": 0.5}, "option 'relax': has no effect unless objective"),
        ("infermax", "bound", {"method": "lp", "threads": 2}, "option 'threads': has no effect unless method is"),
        (
            "infermax",
            "bound",
            {"method": "relax", "max_cells": 10},
            "option 'max_cells': has no effect unless method is 'lp'",
        ),
        ("hybrid", "solve", {"warm_start": "vllm"}, "option 'warm_start': unknown hybrid policy 'vllm'"),
    ],
)
def test_an_option_without_effect_is_rejected(name, kind, options, needle):
    with pytest.raises(OptionError, match=re.escape(needle)):
        options_for(name, kind).parse(options)


def test_a_time_limit_always_applies():
    """A call that needs no time honours any limit: never "without effect"."""
    options_for("aladdin").parse({"method": "jsq", "time_limit": 1})
    options_for("hybrid-offline").parse({"method": "lpt", "time_limit": 1})
    options_for("infermax", "bound").parse({"time_limit": 1})


def test_accepted_keeps_the_options_a_formulation_has():
    shared = {"objective": "makespan", "time_limit": 5.0}
    assert accepted("infermax", "solve", shared) == shared
    assert accepted("hybrid", "solve", shared) == {"time_limit": 5.0}
    assert accepted("aladdin", "bound", shared) == {"time_limit": 5.0}


def test_the_cli_docs_list_every_option():
    """docs/cli.md's table of options names exactly each dataclass's fields."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    for name in SOLVERS:
        row = re.search(rf"^\| `{re.escape(name)}` \|(.*)\|(.*)\|$", text, re.M)
        assert row is not None, f"docs/cli.md has no options row for {name}"
        for cell, kind in zip(row.groups(), ("solve", "bound")):
            cls = options_for(name, kind)
            documented = set(re.findall(r"`(\w+)`", cell))
            assert documented == (set(cls.names()) if cls else set()), (name, kind)


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["solve", "toy-4", "--problem", "infermax", "--method", "magic"],
            "problem 'infermax' has no solve option 'method'",
        ),
        (
            ["solve", "toy-4", "--problem", "infermax", "--option", "foo=1"],
            "problem 'infermax' has no solve option 'foo'",
        ),
        (
            ["solve", "aladdin-fig3", "--problem", "aladdin", "--option", "max_workers=abc"],
            "option 'max_workers': must be an integer >= 1, got 'abc'",
        ),
        (
            ["bound", "toy-4", "--problem", "infermax", "--method", "magic"],
            "option 'method': unknown 'magic' (known: lp, relax",
        ),
        (["bound", "toy-4", "--method", "magic"], "option 'method': the trivial bounds take no options"),
        (
            ["bound", "toy-4", "--problem", "hybrid", "--solver", "highs"],
            "problem 'hybrid' has no bound option 'solver'",
        ),
        (["solve", GMAX_FIG3, "--problem", "gmax", "--no-evict"], "problem 'gmax' has no solve option 'no_evict'"),
        (
            ["solve", "toy-4", "--problem", "hybrid", "--objective", "ttft"],
            "problem 'hybrid' has no solve option 'objective'",
        ),
        (
            ["solve", "toy-4", "--problem", "infermax", "--option", "time_limit=8", "--time-limit", "2"],
            "--option time_limit: given twice (also --time-limit); give it once",
        ),
        (
            ["bound", "toy-4", "--problem", "infermax", "--option", "threads=2", "--option", "threads=3"],
            "--option threads: given twice (also --option threads); give it once",
        ),
    ],
)
def test_options_that_do_nothing_are_bad_input(capsys, argv, needle):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 2 and needle in err and out == ""
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("problem", sorted(NO_SCHEDULE))
@pytest.mark.parametrize("flag", ["--out", "--requests-out"])
def test_out_without_a_schedule_is_bad_input_and_writes_nothing(capsys, tmp_path, problem, flag):
    target = tmp_path / ("answer.json" if flag == "--out" else "requests.csv")
    code, out, err = run(capsys, "solve", "toy-4", "--problem", problem, flag, str(target))
    assert code == 2 and f"{flag}: problem {problem!r} returns no schedule" in err and out == ""
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_a_flag_not_given_is_not_passed(capsys):
    """``--method`` and friends reach the formulation only when given: gmax runs with its defaults."""
    code, out, err = run(capsys, "solve", GMAX_FIG3, "--problem", "gmax", "--time-limit", "20", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["status"] == "optimal" and res["batches"] == [["J2"], ["J1"], ["J3"]]


def test_aladdin_max_workers_caps_the_placement(capsys):
    code, out, _ = run(capsys, "solve", "aladdin-fig3", "--problem", "aladdin", "--json")
    assert code == 0 and json.loads(out)["workers"] == 2
    code, out, _ = run(capsys, "solve", "aladdin-fig3", "--problem", "aladdin", "--option", "max_workers=1", "--json")
    assert code == 1 and json.loads(out)["status"] == "infeasible" and json.loads(out)["max_workers"] == 1


def _scls_round():
    """A 16-request SCLS round (the synthetic HF profile of docs/scls.md, Fig. 11)."""
    from optsched.instance import parse_instance
    from optsched.problems.static_latency import Phase, StaticLatencyModel

    hf = StaticLatencyModel(Phase(1.1e-4, 1.0e-3, 1.0e-5, 0.03), Phase(3.63e-6, 3.0e-4, 1.0e-6, 0.02186))
    reqs = [{"id": f"q{i}", "prompt_tokens": 10 + 97 * i, "output_tokens": 5} for i in range(16)]
    return parse_instance({
        "name": "round16",
        "cost_model": "llama2-7b-a100",
        "requests": reqs,
        "static_latency": {"unit": "s", "prefill": hf.prefill.to_dict(), "decode": hf.decode.to_dict()},
        "scls": {"slice_length": 128, "workers": 2, "worker_loads": [0.0, 1.0]},
    })


@pytest.mark.parametrize(
    "problem, instance, options",
    [
        ("infermax", "toy-4", {"time_limit": 20}),
        ("hybrid", "toy-4", {"time_limit": 20}),
        ("hybrid-offline", "toy-4", {}),
        ("aladdin", "aladdin-fig3", {}),
        ("gmax", GMAX_FIG3, {"time_limit": 20}),
        ("scls-batch", "scls", {}),
    ],
)
def test_every_problem_bounds_its_solve(problem, instance, options):
    """Each formulation has both entry points, and its proven bounds hold for its solve's answer."""
    inst = _scls_round() if instance == "scls" else optsched.load_instance(instance)
    res = optsched.solve(inst, problem, **options)
    assert res.objective is not None and res.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT)
    proven = [b.value for b in optsched.bound(inst, problem) if b.valid]
    assert proven, problem
    tol = 1e-9 * max(1.0, abs(res.objective))
    if res.sense == "max":
        assert all(res.objective <= b + tol for b in proven)
    else:
        assert all(b <= res.objective + tol for b in proven)


# --------------------------------------------------------------------------- results


def test_results_are_built_with_keywords_and_spell_their_status_once():
    with pytest.raises(TypeError):
        SolveResult("p", "s", Status.OPTIMAL)  # type: ignore[misc]
    res = SolveResult(problem="p", solver="s", status="time_limit", message="no answer in time", batches=[["a"]])
    assert res.status is Status.TIME_LIMIT
    out = res.to_dict()
    assert type(out["status"]) is str and out["status"] == "time_limit"
    assert out["message"] == "no answer in time" and out["batches"] == [["a"]] and "incumbent" not in out
    with pytest.raises(ValueError):
        SolveResult(problem="p", solver="s", status="TIME_LIMIT")


# --------------------------------------------------------------------------- the Python entry points


def test_import_optsched_is_cheap_and_solve_is_public():
    code = (
        "import sys, optsched; loaded = sorted(m for m in sys.modules if m.startswith('optsched.'));"
        "assert loaded == ['optsched.registry'], loaded; optsched.solve; optsched.bound; optsched.simulate;"
        "optsched.Status"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {"solve", "bound", "simulate", "load_instance", "Status", "OptionError"} <= set(dir(optsched))
    with pytest.raises(AttributeError):
        optsched.no_such_name  # noqa: B018


def test_solve_bound_and_simulate_from_python():
    res = optsched.solve("toy-4", time_limit=20)
    assert isinstance(res, SolveResult) and res.problem == "infermax" and res.status is Status.OPTIMAL
    assert (
        res.replay is not None and res.replay.feasible and res.objective == pytest.approx(res.replay.metrics.makespan)
    )
    inst = optsched.load_instance("toy-4")
    schedule, replayed = optsched.simulate(inst, "vllm")
    assert replayed.feasible and replayed.metrics.makespan >= res.objective * (1 - 1e-9)
    trivial = optsched.bound(inst)
    assert max(b.value for b in trivial if b.name == "makespan") <= res.objective * (1 + 1e-9)
    assert [b.name for b in optsched.bound(inst, "hybrid", method="strict")] == ["strict", "strict-preemptive"]
    with pytest.raises(OptionError, match="has no solve option 'method'"):
        optsched.solve(inst, method="magic")
    with pytest.raises(OptionError, match="trivial bounds take no options"):
        optsched.bound(inst, method="lp")
    with pytest.raises(KeyError, match="known"):
        optsched.solve(inst, problem="no-such-problem")


def test_an_options_dataclass_is_checked_as_a_mapping_is() -> None:
    """The dataclass's constructor checks nothing: its values go through the same checks (a negative
    time limit, an unknown solver and a worker count of 0 were taken, the last blamed on the instance)."""
    infermax, aladdin = options_for("infermax"), options_for("aladdin")
    for call, message in [
        (lambda: optsched.solve("toy-4", "infermax", infermax(time_limit=-1)), "option 'time_limit': must be a finite"),
        (lambda: optsched.solve("toy-4", "infermax", infermax(solver="zzz")), "option 'solver': unknown 'zzz'"),
        (lambda: optsched.solve("aladdin-fig3", "aladdin", aladdin(max_workers=0)), "option 'max_workers': must be"),
        (lambda: optsched.bound("toy-4", "infermax", options_for("infermax", "bound")(time_limit=math.nan)), "got nan"),
    ]:
        with pytest.raises(OptionError, match=re.escape(message)):
            call()
    assert optsched.solve("toy-4", "infermax", infermax(time_limit=20)).status is Status.OPTIMAL


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: optsched.solve("toy-4", options=[1], time_limit=5),
            TypeError,
            "a mapping or InferMaxOptions, got list",
        ),
        (lambda: optsched.solve("toy-4", options=5), TypeError, "a mapping or InferMaxOptions, got int"),
        (lambda: optsched.solve("toy-4", budget=5), TypeError, "budget: a TimeBudget or None, got int"),
        (lambda: optsched.bound("toy-4", "infermax", budget=5.0), TypeError, "budget: a TimeBudget or None, got float"),
        (lambda: optsched.bound("toy-4", options=[1]), OptionError, "options [1]: the trivial bounds take no options"),
        (lambda: optsched.bound("toy-4", options=""), OptionError, "options '': the trivial bounds take no options"),
        (lambda: optsched.bound("toy-4", budget=2), TypeError, "budget: a TimeBudget or None, got int"),
        (lambda: optsched.simulate("toy-4", ["vllm"]), TypeError, "policy: a name (str), got list"),
        (lambda: optsched.solve("toy-4", ["infermax"]), TypeError, "problem: a name (str), got list"),
        (lambda: optsched.simulate(None), TypeError, "instance: an Instance, a file or a shipped instance name"),
        (
            lambda: optsched.solve("toy-4", options={"solver": "highs"}, solver="cpsat"),
            TypeError,
            "option 'solver' given twice: in the options and as a keyword",
        ),
        (
            lambda: optsched.solve("toy-4", options={"time_limit": 3}, time_limit=2),
            TypeError,
            "option 'time_limit' given twice",
        ),
        (
            lambda: optsched.solve("toy-4", "infermax", options_for("infermax")(time_limit=3), time_limit=2),
            TypeError,
            "time_limit given twice",
        ),
        (lambda: api.parse_options("infermax", "solv", {}), ValueError, "kind: 'solve' or 'bound', got 'solv'"),
        (lambda: api.accepted("infermax", "bounds", {}), ValueError, "kind: 'solve' or 'bound', got 'bounds'"),
    ],
)
def test_the_api_names_a_wrong_type(call: Callable[[], object], error: type[Exception], message: str) -> None:
    """Options of a wrong type, or seconds given as the budget: a TypeError (or OptionError) that says
    what is needed, not an AttributeError from inside."""
    with pytest.raises(error, match=re.escape(message)):
        call()

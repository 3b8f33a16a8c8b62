"""Tests of the command line (docs/cli.md): exit codes, JSON keys, messages for bad input.

The commands run in-process through ``optsched.cli.main``; one test runs the real executable via
``python -m optsched``. Policies and formulations are test-only ones registered by monkeypatching
the registries, so these tests do not depend on the simulator or any formulation.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from optsched import policies, problems
from optsched.cli import main
from optsched.instance import MAX_ARRIVAL, load_instance
from tests.support import fake_formulations
from tests.support.legal_schedules import random_legal_schedule

TOY = {
    "name": "tiny",
    "cost_model": "llama2-7b-a100",
    "limits": {"token_budget": 64, "kv_capacity": 200},
    "requests": [
        {"id": "a", "prompt_tokens": 40, "output_tokens": 3},
        {"id": "b", "arrival": 0.01, "prompt_tokens": 10, "output_tokens": 5},
    ],
}


@pytest.fixture(autouse=True)
def test_registries(monkeypatch):
    # the registry's own dict, emptied and refilled (restored after the test): a module the command
    # line imports during the test keeps the dict it imported, never this test's replacement
    for name in list(policies.POLICIES):
        monkeypatch.delitem(policies.POLICIES, name)
    monkeypatch.setitem(policies.POLICIES, "test-random", "tests.support.legal_schedules:policy_random")
    monkeypatch.setitem(policies.POLICIES, "test-broken", "tests.support.legal_schedules:policy_broken")
    fake = problems.Formulation(
        "fake", "tests.support.fake_formulations:solve", "tests.support.fake_formulations:bounds"
    )
    monkeypatch.setattr(problems, "FORMULATIONS", [fake])


def write(path: Path, obj) -> str:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv) -> tuple[int, dict]:
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out)


METRIC_KEYS = {"makespan", "mean_latency", "mean_ttft", "mean_tpot", "throughput", "evictions", "slo_attainment", "G"}


# --------------------------------------------------------------------------- simulate / check


def test_simulate_then_check_agree(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, sim = run_json(capsys, "simulate", "toy-4", "--policy", "test-random", "--out", out)
    assert code == 0
    assert {"policy", "metrics", "schedule"} <= set(sim) and METRIC_KEYS <= set(sim["metrics"])
    assert sim["schedule"] == str(out) and out.exists()
    code, chk = run_json(capsys, "check", "toy-4", out)
    assert code == 0 and chk["feasible"] is True and chk["violations"] == []
    for k in METRIC_KEYS:
        a, b = sim["metrics"][k], chk["metrics"][k]
        assert a == b or math.isclose(a, b, rel_tol=1e-9)


def test_simulate_all_prints_a_table(capsys, monkeypatch):
    monkeypatch.setattr(
        policies,
        "POLICIES",
        {
            "test-random": "tests.support.legal_schedules:policy_random",
            "test-random-2": "tests.support.legal_schedules:policy_random",
        },
    )
    code, out, err = run(capsys, "simulate", "toy-4", "--policy", "all")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split()[:4] == ["policy", "makespan", "(s)", "mean_latency"]  # units in the headers
    assert [line.split()[0] for line in lines[3:]] == ["test-random", "test-random-2"]
    code, res = run_json(capsys, "simulate", "toy-4", "--policy", "all")
    assert code == 0 and res["policy"] == "all"
    assert [r["policy"] for r in res["results"]] == ["test-random", "test-random-2"]
    assert res["results"][0]["metrics"] == res["results"][1]["metrics"]


def test_simulate_policy_bug_is_internal_error_and_writes_nothing(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, stdout, err = run(capsys, "simulate", "toy-4", "--policy", "test-broken", "--out", out)
    assert code == 3 and "infeasible schedule" in err and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_check_infeasible_exits_1_with_violations(capsys, tmp_path):
    s = write(tmp_path / "s.json", {"instance": "toy-4", "batches": [{"items": [{"id": "r0", "tokens": 65}]}]})
    code, res = run_json(capsys, "check", "toy-4", s)
    assert code == 1 and res["feasible"] is False and res["metrics"] is None
    assert "batch 0: request 'r0': prefill chunk 65 exceeds the remaining prompt 64" in res["violations"]
    code, out, _ = run(capsys, "check", "toy-4", s)
    assert code == 1 and out.startswith("infeasible")


def test_check_text_output(capsys, tmp_path):
    inst = load_instance("toy-4")
    s = tmp_path / "s.json"
    random_legal_schedule(inst, __import__("random").Random(3)).schedule.save(s)
    code, out, _ = run(capsys, "check", "toy-4", s)
    assert code == 0 and out.startswith("feasible") and "makespan" in out


# --------------------------------------------------------------------------- bad input: exit 2


@pytest.mark.parametrize(
    "instance, needle",
    [
        ('{"name": "x", "requests": [', "malformed JSON"),
        ({**TOY, "requests": [{"id": "a", "output_tokens": 3}]}, "request 'a': field 'prompt_tokens': missing"),
        (
            {**TOY, "requests": [{"id": "a", "prompt_tokens": 0, "output_tokens": 3}]},
            "request 'a': field 'prompt_tokens'",
        ),
        (
            {**TOY, "requests": [{"id": "a", "prompt_tokens": 5, "output_tokens": -2}]},
            "request 'a': field 'output_tokens'",
        ),
        (
            {**TOY, "requests": [{"id": "a", "arrival": -1, "prompt_tokens": 5, "output_tokens": 2}]},
            "request 'a': field 'arrival'",
        ),
        ({**TOY, "cost_model": "gpt-9-tpu"}, "unknown profile 'gpt-9-tpu'"),
        ({**TOY, "cost_model": {"base": -1}}, "cost_model.base"),
        ({**TOY, "requests": [{"id": "big", "prompt_tokens": 190, "output_tokens": 20}]}, "request 'big'"),
        ({**TOY, "requests": [TOY["requests"][0], TOY["requests"][0]]}, "duplicate id"),
        ({k: v for k, v in TOY.items() if k != "name"}, "field 'name': missing"),
        ({**TOY, "limits": {"token_budget": 8, "prefill_budget": 16}}, "prefill_budget"),
        (
            {**TOY, "requests": [{"id": "a", "arival": 1.0, "prompt_tokens": 5, "output_tokens": 2}]},
            "request 'a': field 'arival': unknown field; did you mean 'arrival'?",
        ),
        (
            {**TOY, "requests": [{"id": "a", "slos": {"ttft": 1}, "prompt_tokens": 5, "output_tokens": 2}]},
            "request 'a': field 'slos': unknown field; did you mean 'slo'?",
        ),
        ({**{k: v for k, v in TOY.items() if k != "limits"}, "limit": TOY["limits"]}, "field 'limit': unknown field"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "check", "info", "bound", "solve"])
def test_bad_instance_exit_2(capsys, tmp_path, instance, needle, command):
    path = write(tmp_path / "bad.json", instance)
    extra = {
        "simulate": ["--policy", "test-random"],
        "check": [write(tmp_path / "s.json", {"batches": []})],
        "solve": ["--problem", "fake"],
    }.get(command, [])
    code, out, err = run(capsys, command, path, *extra)
    if command == "info" and "request 'big'" in needle:
        assert code == 1 and "big" in out  # info lists requests that can never finish (exit 1)
        return
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and str(path) in err and needle in err


def test_never_fitting_request_message(capsys, tmp_path):
    path = write(tmp_path / "bad.json", {**TOY, "requests": [{"id": "big", "prompt_tokens": 190, "output_tokens": 20}]})
    code, _, err = run(capsys, "check", path, write(tmp_path / "s.json", {"batches": []}))
    assert code == 2 and "request 'big'" in err and "exceeds limits.kv_capacity = 200" in err and "never finish" in err


def test_unknown_policy_exit_2(capsys):
    code, out, err = run(capsys, "simulate", "toy-4", "--policy", "nope")
    assert code == 2 and "unknown policy 'nope'" in err and "test-random" in err and out == ""


def test_schedule_naming_unknown_request_exit_2(capsys, tmp_path):
    s = write(
        tmp_path / "s.json", {"batches": [{"items": [{"id": "r0", "tokens": 64}]}, {"evict": ["ghost"], "items": []}]}
    )
    code, out, err = run(capsys, "check", "toy-4", s, "--json")
    assert code == 2 and out == ""
    assert "batch 1: request 'ghost': unknown request" in err and str(s) in err


@pytest.mark.parametrize(
    "schedule, needle",
    [
        ("[1, 2", "malformed JSON"),
        ({"batches": {}}, "field 'batches'"),
        ({"batches": [{"items": [{"id": "r0", "tokens": "x"}]}]}, "batch 0: request 'r0': field 'tokens'"),
        ({"batches": [{"items": [], "when": 3}]}, "batch 0: unknown field"),
        ({"batches": [], "meta": 7}, "field 'meta': must be an object"),
    ],
)
def test_bad_schedule_exit_2(capsys, tmp_path, schedule, needle):
    s = write(tmp_path / "s.json", schedule)
    code, out, err = run(capsys, "check", "toy-4", s)
    assert code == 2 and needle in err and str(s) in err
    code, out, err = run(
        capsys, "export", s, "--format", "vllm-replay", "--instance", "toy-4", "--out", tmp_path / "p.json"
    )
    assert code == 2 and needle in err and not (tmp_path / "p.json").exists()  # a non-object meta was exit 3 here


def test_missing_files_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "info", tmp_path / "nope.json")
    assert code == 2 and "nope.json" in err
    code, _, err = run(capsys, "info", "no-such-instance")
    assert code == 2 and "no shipped instance" in err and "toy-4" in err
    code, _, err = run(capsys, "check", "toy-4", tmp_path / "nope.json")
    assert code == 2 and "nope.json" in err


def test_usage_errors_exit_2(capsys):
    assert run(capsys, "simulate", "toy-4")[0] == 2  # --policy missing
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "info", "toy-4", "--kv-capacity", "0")[0] == 2
    assert run(capsys, "--help")[0] == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--name", "g", "--n", "2", "--seed", "-1"], "optsched: error: generate: argument --seed: "),
        (["generate", "--name", "g", "--n", "1e11"], "optsched: error: generate: argument --n: "),
        (["simulate", "toy-4"], "optsched: error: simulate: the following arguments are required: --policy "),
        (["frobnicate"], "optsched: error: argument COMMAND: invalid choice: 'frobnicate'"),
        (["info", "toy-4", "--offline", "1"], "optsched: error: info: unrecognized arguments: 1 (see optsched info --"),
        (
            ["solve", "toy-4", "--problem", "infermax", "--time-limit", "abc"],
            "optsched: error: solve: argument --time-limit: ",
        ),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, message):
    """argparse printed its usage (up to 15 lines) before the error: one line, like any bad input."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1, err
    assert err.rstrip().endswith("--help)")


def test_out_folder_must_exist_and_nothing_is_written(capsys, tmp_path):
    out = tmp_path / "missing" / "s.json"
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "test-random", "--out", out)
    assert code == 2 and "does not exist" in err and not out.parent.exists()
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "all", "--out", tmp_path / "s.json")
    assert code == 2 and "single --policy" in err and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- trace CSV


def trace(tmp_path: Path, rows: str = "0.0,100,5\n0.5,20,3\n1.0,300,2\n") -> str:
    return write(tmp_path / "t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n" + rows)


def test_trace_csv_with_options(capsys, tmp_path):
    code, info = run_json(
        capsys,
        "info",
        trace(tmp_path),
        "--cost-model",
        "llama2-7b-a100",
        "--token-budget",
        "256",
        "--kv-capacity",
        "1000",
        "--first",
        "2",
    )
    assert code == 0 and info["requests"] == 2 and info["instance"] == "t-2"
    assert info["limits"] == {"token_budget": 256, "prefill_budget": 256, "kv_capacity": 1000, "max_running": None}
    code, sim = run_json(
        capsys,
        "simulate",
        trace(tmp_path),
        "--cost-model",
        "llama2-7b-a100",
        "--policy",
        "test-random",
        "--max-running",
        "1",
    )
    assert code == 0 and sim["metrics"]["makespan"] > 1.0


@pytest.mark.parametrize(
    "rows, args, needle",
    [
        ("0,100,5\n", [], "needs --cost-model"),
        (
            "0,abc,5\n",
            ["--cost-model", "llama2-7b-a100"],
            "t.csv: line 2, column 'num_prefill_tokens': not an integer ('abc')",
        ),
        (
            "0,10,0\n",
            ["--cost-model", "llama2-7b-a100"],
            "t.csv: line 2, column 'num_decode_tokens': must be an integer >= 1",
        ),
        ("0,10,5\nx,10,5\n", ["--cost-model", "llama2-7b-a100"], "t.csv: line 3, column 'arrived_at': not a number"),
        (
            "0,10,5\n\n2e9,10,5\n",
            ["--cost-model", "llama2-7b-a100"],
            "t.csv: line 4, column 'arrived_at': arrives 2e+09 s",
        ),
        ("0,10,5\n", ["--cost-model", "nope"], "unknown profile 'nope'"),
        ("0,900,200\n", ["--cost-model", "llama2-7b-a100", "--kv-capacity", "1000"], "request 'row0'"),
    ],
)
def test_bad_trace_exit_2(capsys, tmp_path, rows, args, needle):
    code, out, err = run(capsys, "simulate", trace(tmp_path, rows), "--policy", "test-random", *args)
    assert code == 2 and needle in err and out == ""


def test_arrival_beyond_max_arrival_exit_2(capsys, tmp_path):
    """At 1e300 s a millisecond batch ends where it starts: the hybrid MIP's schedule failed the
    replay (exit 3). Arrivals above MAX_ARRIVAL are bad input naming the request; MAX_ARRIVAL itself loads."""
    data = json.loads(json.dumps(TOY))
    data["requests"][1]["arrival"] = MAX_ARRIVAL
    assert run(capsys, "info", write(tmp_path / "ok.json", data))[0] == 0
    data["requests"][1]["arrival"] = 1e300
    code, out, err = run(capsys, "simulate", write(tmp_path / "far.json", data), "--policy", "test-random")
    assert code == 2 and "request 'b': field 'arrival'" in err and "far.json" in err and out == ""


def test_json_instance_overrides(capsys):
    code, info = run_json(capsys, "info", "toy-4", "--kv-capacity", "100", "--first", "3")
    assert code == 1  # r2 needs 129 slots > 100
    assert [r["id"] for r in info["infeasible_requests"]] == ["r2"] and info["instance"] == "toy-4-3"


# --------------------------------------------------------------------------- info / bound / solve / fit


def test_info_json_keys(capsys):
    code, info = run_json(capsys, "info", "toy-4")
    assert code == 0
    assert {
        "instance",
        "requests",
        "cost_model",
        "limits",
        "prompt_tokens",
        "output_tokens",
        "arrival",
        "infeasible_requests",
        "slo_unattainable",
        "bounds",
    } <= set(info)
    assert info["requests"] == 4 and info["prompt_tokens"]["sum"] == 240
    assert {b["name"] for b in info["bounds"]} >= {"makespan", "mean-latency"}


def test_info_lists_unattainable_slos(capsys, tmp_path):
    path = write(
        tmp_path / "i.json",
        {**TOY, "requests": [{"id": "a", "prompt_tokens": 40, "output_tokens": 3, "slo": {"ttft": 1e-6}}]},
    )
    code, info = run_json(capsys, "info", path)
    assert code == 0 and info["slo_unattainable"][0]["id"] == "a" and info["slo_unattainable"][0]["slo"] == "ttft"


def test_bound_trivial_and_problem(capsys):
    code, res = run_json(capsys, "bound", "toy-4")
    assert code == 0 and res["instance"] == "toy-4"
    assert all({"name", "value", "valid"} <= set(b) for b in res["bounds"])
    code, res = run_json(capsys, "bound", "toy-4", "--problem", "fake", "--time-limit", "3")
    assert code == 0 and [b["name"] for b in res["bounds"]] == ["fake-lower", "fake-estimate"]
    assert res["bounds"][1]["valid"] is False
    assert 2.0 < fake_formulations.LAST_BUDGET[0].length < 3.0  # what is left of 3 s from the command's start
    code, _, err = run(capsys, "bound", "toy-4", "--problem", "nope")
    assert code == 2 and "unknown problem 'nope'" in err and "fake" in err


def test_solve_statuses_and_options(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, res = run_json(
        capsys,
        "solve",
        "toy-4",
        "--problem",
        "fake",
        "--method",
        "optimal",
        "--solver",
        "highs",
        "--time-limit",
        "2.5",
        "--threads",
        "2",
        "--objective",
        "makespan",
        "--no-evict",
        "--option",
        "horizon=40",
        "--option",
        "mode=fast",
        "--out",
        out,
    )
    assert code == 0
    assert {"problem", "solver", "status", "objective", "bound", "gap", "wall_time", "schedule"} <= set(res)
    assert res["status"] == "optimal" and res["schedule"] == str(out) and res["gap"] == pytest.approx(0.5)
    opts = fake_formulations.LAST_OPTIONS
    assert opts["solver"] == "highs" and opts["time_limit"] == 2.5 and opts["threads"] == 2
    assert 1.5 < fake_formulations.LAST_BUDGET[0].length < 2.5  # 2.5 s less the start
    assert (
        opts["no_evict"] is True
        and opts["objective"] == "makespan"
        and opts["horizon"] == 40
        and opts["mode"] == "fast"
    )
    assert run(capsys, "check", "toy-4", out)[0] == 0
    code, res = run_json(capsys, "solve", "toy-4", "--problem", "fake", "--method", "infeasible")
    assert code == 1 and res["status"] == "infeasible" and res["schedule"] is None
    code, out_, err = run(capsys, "solve", "toy-4", "--problem", "fake", "--method", "unsupported")
    assert code == 2 and "fake cannot do this" in err
    code, _, err = run(
        capsys, "solve", "toy-4", "--problem", "fake", "--method", "bad-schedule", "--out", tmp_path / "b.json"
    )
    assert code == 3 and "does not replay cleanly" in err and not (tmp_path / "b.json").exists()
    code, _, err = run(capsys, "solve", "toy-4", "--problem", "zzz")
    assert code == 2 and "unknown problem 'zzz'" in err
    code, _, err = run(capsys, "solve", "toy-4", "--problem", "fake", "--option", "novalue")
    assert code == 2 and "KEY=VALUE" in err


def test_fit_recovers_known_coefficients(capsys, tmp_path):
    rows = "".join(f"{n},{0.25 + 0.002 * n}\n" for n in (1, 8, 64, 512, 4096))
    path = write(tmp_path / "m.csv", "tokens,ms\n" + rows)
    code, res = run_json(
        capsys,
        "fit",
        path,
        "--time-column",
        "ms",
        "--unit",
        "ms",
        "--compare",
        "llama2-7b-a100",
        "--out",
        tmp_path / "p.toml",
    )
    assert code == 0
    assert res["base"] == pytest.approx(0.25e-3, rel=1e-9) and res["per_token"] == pytest.approx(2e-6, rel=1e-9)
    assert res["max_abs_pct_error"] < 1e-6 and res["compare"]["profile"] == "llama2-7b-a100"
    from optsched.costmodel import PhaseCost, load_cost_model

    fitted = load_cost_model(str(tmp_path / "p.toml"))
    ref = load_cost_model("llama2-7b-a100")
    # measured batch times are the whole model's: the profile is the fit alone, --compare's is whole-model
    assert fitted.per_token == pytest.approx(2e-6) and fitted.layers == 1.0 and fitted.decode == PhaseCost()
    assert res["compare"]["base"] == pytest.approx(ref.layers * ref.base, rel=1e-12)
    code, _, err = run(capsys, "fit", path)
    assert code == 2 and "missing column 'time'" in err


# --------------------------------------------------------------------------- the real executable


def test_subprocess_exit_codes(tmp_path):
    cmd = [sys.executable, "-m", "optsched"]
    ok = subprocess.run([*cmd, "info", "toy-4", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["instance"] == "toy-4"
    bad = write(tmp_path / "bad.json", "{")
    res = subprocess.run([*cmd, "info", bad, "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and "malformed JSON" in res.stderr


def test_generate_writes_a_reproducible_instance(capsys, tmp_path):
    out = tmp_path / "g.json"
    args = [
        "generate",
        "--name",
        "g",
        "--n",
        "40",
        "--type",
        "8,16",
        "512,1024",
        "--type",
        "normal:100,10,1,200",
        "32",
        "--arrivals",
        "poisson:2",
        "--seed",
        "5",
        "--kv-capacity",
        "4000",
        "--out",
        out,
    ]
    code, res = run_json(capsys, *args)
    assert code == 0 and res["requests"] == 40 and res["path"] == str(out)
    inst = load_instance(str(out))
    assert inst.limits.kv_capacity == 4000 and "seed 5" in inst.extra["source"]
    assert sum(r.output_tokens == 32 for r in inst.requests) == 20
    code, stdout, _ = run(capsys, *args[:-2])  # no --out: the JSON on stdout
    assert code == 0 and json.loads(stdout) == json.loads(out.read_text())


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--prompt", "x", "--output", "3"], "--prompt/--output: bad length spec 'x'"),
        (["--type", "3", "0"], "--type: bad length spec '0'"),
        (["--prompt", "3"], "--prompt and --output go together"),
        (["--name", "", "--prompt", "3", "--output", "3"], "argument --name: must not be empty"),
        ([], "give --prompt SPEC --output SPEC"),
        (["--prompt", "3", "--output", "3", "--type", "1", "1"], "or --type PROMPT OUTPUT, not both"),
        (["--prompt", "3", "--output", "3", "--arrivals", "burst"], "--arrivals: bad arrival spec"),
        (["--prompt", "900", "--output", "200", "--kv-capacity", "1000"], "can never finish"),
    ],
)
def test_generate_bad_input(capsys, tmp_path, args, needle):
    code, out, err = run(capsys, "generate", "--name", "g", "--n", "3", *args, "--out", tmp_path / "g.json")
    assert code == 2 and needle in err and not (tmp_path / "g.json").exists()


def test_simulate_all_skips_policies_not_applicable(capsys, monkeypatch):
    monkeypatch.setattr(
        policies,
        "POLICIES",
        {
            "test-random": "tests.support.legal_schedules:policy_random",
            "test-needs-r": "tests.support.legal_schedules:policy_needs_max_running",
        },
    )
    code, res = run_json(capsys, "simulate", "toy-4", "--policy", "all")
    assert code == 0 and [r["policy"] for r in res["results"]] == ["test-random"]
    assert res["skipped"][0]["policy"] == "test-needs-r" and "max_running" in res["skipped"][0]["reason"]
    code, out, _ = run(capsys, "simulate", "toy-4", "--policy", "all")
    assert code == 0 and "skipped test-needs-r" in out
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "test-needs-r")  # alone: bad input
    assert code == 2 and "limits.max_running" in err
    code, res = run_json(capsys, "simulate", "toy-4", "--policy", "all", "--max-running", "2")
    assert code == 0 and len(res["results"]) == 2 and res["skipped"] == []


def test_json_stdout_holds_only_the_json_object_even_when_libraries_print(tmp_path, monkeypatch):
    """Solver banners written straight to file descriptor 1 (as Gurobi's licence line is) must not
    reach stdout under --json: the CLI routes fd 1 to stderr while the command runs."""
    script = tmp_path / "noisy.py"
    script.write_text(
        "import os, sys\n"
        "from optsched import cli, policies\n"
        "from optsched.commands import info\n"
        "real = info.handle\n"
        "def noisy(args):\n"
        "    os.write(1, b'BANNER from C code\\n')\n"
        "    print('python-level chatter')\n"
        "    return real(args)\n"
        "info.handle = noisy\n"
        "sys.exit(cli.main(['info', 'toy-4', '--json']))\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["instance"] == "toy-4"
    assert "BANNER from C code" in proc.stderr and "python-level chatter" in proc.stderr


@pytest.mark.parametrize("entry", [["-m", "optsched.cli"], ["-m", "optsched"]])
def test_module_entry_points_print_json_on_stdout(entry):
    """``python -m optsched.cli`` runs cli.py as ``__main__`` (a second module object); the JSON
    must still reach stdout."""
    proc = subprocess.run(
        [sys.executable, *entry, "info", "toy-4", "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["instance"] == "toy-4"

"""Bad input exits 2 with one line naming the file and the field, never 3 (docs/cli.md): the
audit's inputs, one test each, plus the contract breaks and the numbers that mean nothing.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from optsched.cli import main
from optsched.export.vllm_replay import build_plan
from optsched.instance import load_instance
from optsched.policies import simulator_for
from tests.support.export import execute_result
from tests.support.paths import INSTANCES, REPO

SHIPPED = INSTANCES


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code: int, err: str, *needles: str) -> None:
    """Exit 2 and one line ``optsched: error: ...`` holding every needle (a file, a field)."""
    assert code == 2, err
    assert err.startswith("optsched: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def toy(**changes: Any) -> dict[str, Any]:
    data = json.loads((SHIPPED / "toy-4.json").read_text())
    data.update(changes)
    return data


# --------------------------------------------------------------------------- encodings and syntax


@pytest.mark.parametrize(
    "command",
    [
        ["info", "{f}"],
        ["check", "toy-4", "{f}"],
        ["export", "{f}", "--format", "vllm-replay", "--out", "{d}/p.json"],
        ["validate", "{f}"],
        ["fit", "{f}"],
        ["execute", "{f}", "--model", "tiny-llama"],
    ],
)
def test_a_file_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    code, _, err = run(capsys, *(a.format(f=bad, d=tmp_path) for a in command))
    assert_bad_input(code, err, str(bad), "not UTF-8", "line 1, column 14")


@pytest.mark.parametrize(
    "command",
    [["info", "{f}"], ["check", "toy-4", "{f}"], ["export", "{f}", "--format", "vllm-replay", "--out", "{d}/p.json"]],
)
def test_a_gzip_compressed_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """An instance, schedule or plan file compressed with gzip is named as such, not as text that is
    not UTF-8."""
    bad = tmp_path / "toy.json"
    bad.write_bytes(gzip.compress((INSTANCES / "toy-4.json").read_bytes()))
    code, _, err = run(capsys, *(a.format(f=bad, d=tmp_path) for a in command))
    assert_bad_input(code, err, str(bad), "a gzip-compressed file", "decompress it first")


def test_a_measurement_csv_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.csv"
    bad.write_bytes(b"tokens,time\n8,1\n\xff16,2\n")
    code, _, err = run(capsys, "fit", bad)
    assert_bad_input(code, err, str(bad), "not UTF-8", "line 3, column 1")


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"base = [\n", "malformed TOML"),
        (b"base = 1\n\xff = 2\n", "not UTF-8"),
        (b"layers = 0\n", "'cost_model.layers': must be > 0"),
        (b"layers = -32\n", "must be > 0"),
        (b"base = 1e300\n", "at most 1000"),
        (b"base = 1\nbase = 2\n", "malformed TOML"),
    ],
)
def test_a_bad_toml_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str) -> None:
    profile = tmp_path / "t.toml"
    profile.write_bytes(content)
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "vllm", "--cost-model", profile)
    assert_bad_input(code, err, str(profile), needle.replace("'cost_model.layers'", "cost_model.layers"))


def test_the_layers_messages_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'> 0' for 0 and '>= 0' for -32 disagreed; both say what a layer count must be."""
    messages = []
    for value in ("0", "-32"):
        profile = tmp_path / "l.toml"
        profile.write_text(f"layers = {value}\n")
        messages.append(run(capsys, "info", "toy-4", "--cost-model", profile)[2])
    assert [m.split("must be")[1].split(", got")[0] for m in messages] == [" > 0 and at most 10000"] * 2


def test_duplicate_keys_name_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst = tmp_path / "dup.json"
    inst.write_text(
        '{"name": "d", "cost_model": "llama2-7b-a100", "requests": '
        '[{"id": "a", "prompt_tokens": 4, "output_tokens": 2, "prompt_tokens": 8}]}'
    )
    code, _, err = run(capsys, "info", inst)
    assert_bad_input(code, err, str(inst), "'prompt_tokens' given twice", "'a'")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"name": "x", "cost_model": "llama2-7b-a100", "requests": [{"id": "a", "prompt_tokens": 4, '
            '"output_tokens": 2, "arrival": NaN}]}',
            "NaN is not a JSON number",
        ),
        (
            '{"name": "x", "cost_model": "llama2-7b-a100", "requests": [{"id": "a", "prompt_tokens": 4, '
            '"output_tokens": 2, "arrival": 1e999}]}',
            "1e999 is out of range",
        ),
    ],
)
def test_json_beyond_the_standard(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    for argv in (["info", path], ["check", "toy-4", path]):
        code, _, err = run(capsys, *argv)
        assert_bad_input(code, err, str(path), needle)


# --------------------------------------------------------------------------- values


def test_a_huge_schedule_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schedule = simulator_for("vllm")(load_instance("toy-4")).to_dict()
    schedule["batches"][0]["start"] = 1e308
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schedule))
    code, _, err = run(capsys, "check", "toy-4", path)
    assert_bad_input(code, err, str(path), "batch 0", "'start'")


@pytest.mark.parametrize(
    "command", [["info"], ["bound"], ["bound", "--problem", "infermax"], ["simulate", "--policy", "vllm"]]
)
def test_huge_token_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """prompt_tokens = 10^18 with kv_capacity null allocated exabytes (MemoryError, exit 3)."""
    data = toy()
    data["limits"]["kv_capacity"] = None
    data["requests"][0]["prompt_tokens"] = 10**18
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    code, _, err = run(capsys, command[0], path, *command[1:])
    assert_bad_input(code, err, str(path), "request 'r0'", "'prompt_tokens'", "10,000,000")


@pytest.mark.parametrize("limit, value", [("token_budget", 10**30), ("kv_capacity", 2**63), ("max_running", 10**7)])
def test_limits_beyond_any_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str, value: int) -> None:
    """token_budget 10^30 failed the InferMax solve with an OverflowError (exit 3); max_running
    10^11 made the hybrid policies allocate per-client state until the memory ran out."""
    data = toy()
    data["limits"][limit] = value
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    for argv in (
        ["solve", path, "--problem", "infermax", "--time-limit", "1"],
        ["simulate", path, "--policy", "hybrid"],
    ):
        code, _, err = run(capsys, *argv)
        assert_bad_input(code, err, str(path), f"'limits.{limit}'", "less than or equal to")


@pytest.mark.parametrize(
    "flag, value, most",
    [
        ("--token-budget", "9" * 30, "1e+15"),
        ("--kv-capacity", "9" * 30, "1e+15"),
        ("--max-running", "10000000", "1e+06"),
    ],
)
def test_limit_options_beyond_any_engine(capsys: pytest.CaptureFixture[str], flag: str, value: str, most: str) -> None:
    code, _, err = run(capsys, "solve", "toy-4", "--problem", "infermax", "--time-limit", "1", flag, value)
    assert_bad_input(code, err, f"argument {flag}: must be at most {most}, got {value}")


@pytest.mark.parametrize("value", [0, "two", True, 1.5])
def test_aladdin_max_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any) -> None:
    data = json.loads((SHIPPED / "aladdin-fig3.json").read_text())
    data["placement"]["max_workers"] = value
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data))
    for argv in (["solve", path, "--problem", "aladdin", "--time-limit", "5"], ["bound", path, "--problem", "aladdin"]):
        code, _, err = run(capsys, *argv)
        assert_bad_input(code, err, str(path), "'placement.max_workers'")


def test_plan_with_an_unknown_solver(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "aladdin-fig3", "--method", "exact", "--solver", "cplex")
    assert_bad_input(code, err, "--solver", "'cplex'", "cpsat")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--seed", "-1"], "--seed"),
        (["--n", "100000000000"], "--n"),
        (["--n", "1e11"], "--n"),
        (["--prompt", "normal:nan,1"], "not a finite number ('nan')"),
    ],
)
def test_generate_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    base = {"--name": "g", "--n": "2", "--prompt": "8", "--output": "4"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    code, out, err = run(capsys, "generate", *[x for kv in base.items() for x in kv])
    assert code == 2 and needle in err and out == "" and "Traceback" not in err


# --------------------------------------------------------------------------- contract breaks


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--prompt", "99999999999999999999999"], "fixed length 99999999999999999999999 exceeds 10,000,000"),
        (["--prompt", "10,99999999999999999999999"], "choice length 99999999999999999999999 exceeds 10,000,000"),
        (["--type", "99999999999999999999", "5"], "fixed length 99999999999999999999 exceeds 10,000,000"),
        (["--prompt", "normal:1e19,5"], "MEAN 1e+19 exceeds 10,000,000"),
        (["--prompt", "normal:5,1,99999999999999999999999"], "LOW 99999999999999999999999 exceeds 10,000,000"),
        (["--prompt", "normal:5,1,1,10000001"], "HIGH 10000001 exceeds 10,000,000"),
        (["--prompt", "normal:5,1e30"], "prompt length: a draw of"),
        (["--prompt", "normal:5,1,1.5"], "not an integer"),
    ],
)
def test_generate_token_counts_beyond_max_tokens(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """Beyond 2**63 a count overflowed (exit 3) or wrapped in int64; the limit is MAX_TOKENS."""
    argv = argv if argv[0] == "--type" else [*argv, "--output", "5"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's cast of a huge draw warned
        code, out, err = run(capsys, "generate", "--name", "g", "--n", "5", *argv)
    assert_bad_input(code, err, needle)
    assert out == ""


def test_generate_json_prints_the_instance_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "generate", "--name", "g", "--n", "2", "--prompt", "8", "--output", "4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "g" and len(data["requests"]) == 2


def test_plan_exits_1_when_no_count_up_to_max_workers_reaches_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six requests at once with a 20-ms TTFT: one and two workers miss it (three attain it), so
    with --max-workers 2 the answer is none, exit 1, with both counts evaluated."""
    data = json.loads((INSTANCES / "aladdin-fig3.json").read_text())
    data["requests"] = [{"id": f"r{i}", "arrival": 0.0, "prompt_tokens": 4, "output_tokens": 4} for i in range(6)]
    data["slo"]["ttft"] = 0.02
    del data["placement"]["max_workers"]  # searched up to 256 without --max-workers
    path = tmp_path / "six.json"
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "plan", str(path), "--method", "jsq", "--max-workers", "2", "--json")
    result = json.loads(out)
    assert code == 1 and result["workers"] is None and set(result["evaluated"]) == {"W=1", "W=2"}
    assert max(result["evaluated"].values()) < 1.0
    code, out, _ = run(capsys, "plan", str(path), "--method", "jsq", "--json")
    assert code == 0 and json.loads(out)["workers"] == 3


def test_hybrid_offline_names_its_objective(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "solve", "toy-4", "--problem", "hybrid-offline", "--json")
    data = json.loads(out)
    assert code == 0 and data["objective_name"] == "max_client_load"
    assert data["objective"] < data["metrics"]["makespan"]  # the P||Cmax load, not the schedule's makespan
    code, out, _ = run(capsys, "solve", "toy-4", "--problem", "hybrid-offline")
    assert "objective (max_client_load)" in out


def test_hybrid_policy_without_max_running_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md said exit 2; the policy runs J = N clients (docs/hybrid.md), and the docs now say so."""
    assert load_instance("toy-4").limits.max_running is None
    code, out, _ = run(capsys, "simulate", "toy-4", "--policy", "hybrid", "--json")
    assert code == 0 and json.loads(out)["policy"] == "hybrid"
    cli_doc = (REPO / "docs" / "cli.md").read_text()
    assert "`simulate toy-4 --policy hybrid` runs" in cli_doc


# --------------------------------------------------------------------------- numbers that mean nothing


@pytest.fixture
def result_file(tmp_path: Path):
    """Writes an execute result of toy-4's vLLM plan with the given measured times (or a change)."""
    instance = load_instance("toy-4")
    plan = build_plan(instance, simulator_for("vllm")(instance), block_size=16)

    def write(times: Any = 1.1, **changes: Any) -> Path:
        measured = [times * s.predicted_time if isinstance(times, float) else times for s in plan.steps]
        result = {**execute_result(plan, measured), **changes}
        path = tmp_path / "r.json"
        path.write_text(json.dumps(result))
        return path

    return write


@pytest.mark.parametrize(
    "times, changes, needle",
    [
        (0, {}, "'measured_time'"),
        (-0.01, {}, "'measured_time'"),
        (1e308, {}, "'measured_time'"),
        ("fast", {}, "'measured_time'"),
        (1.1, {"version": 99}, "'version'"),
        (1.1, {"plan": None}, "field 'plan': must be an object, got null"),
        (1.1, {"run": None}, "field 'run': must be an object, got null"),
        (1.1, {"steps": {}}, "field 'steps': must be a list, got an object"),
        (1.1, {"steps": [5]}, "field 'steps[0]': must be an object, got 5"),
        (1.1, {"plan": {"steps": [1]}}, "field 'plan.steps[0]': must be an object, got 1"),
    ],
)
def test_validate_refuses_meaningless_numbers(
    result_file, tmp_path: Path, capsys: pytest.CaptureFixture[str], times: Any, changes: dict, needle: str
) -> None:
    path = result_file(times, **changes)
    out = tmp_path / "p.toml"
    code, _, err = run(capsys, "validate", path, "--profile-out", out)
    assert_bad_input(code, err, str(path), needle)
    assert not out.exists()


def test_validate_nan_is_malformed_json(result_file, capsys: pytest.CaptureFixture[str]) -> None:
    path = result_file(float("nan"))  # json.dumps writes NaN, which is not JSON
    code, _, err = run(capsys, "validate", path)
    assert_bad_input(code, err, str(path), "NaN")


def test_validate_profile_out_into_a_missing_folder(
    result_file, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "validate", result_file(), "--profile-out", tmp_path / "nodir" / "p.toml")
    assert_bad_input(code, err, "nodir", "does not exist")


@pytest.mark.parametrize(
    "rows, needle",
    [
        ("8,1\n8,2\n8,3\n", "every measurement has 8 tokens"),
        ("8,1e308\n16,1\n", "line 2"),
        ("8,nan\n16,1\n", "line 2"),
        ("8,3\n16,1\n", "not a cost model"),
    ],
)
def test_fit_refuses_a_profile_that_is_not_a_cost_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, needle: str
) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text("tokens,time\n" + rows)
    out = tmp_path / "p.toml"
    code, _, err = run(capsys, "fit", csv, "--out", out)
    assert_bad_input(code, err, str(csv), needle)
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--name", "foo"], "--name: names the profile that --out writes; give --out too"),
        (["--name", "", "--out", "{d}/y.toml"], "argument --name: must not be empty"),
    ],
)
def test_fit_name_that_would_be_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """``--name`` without ``--out`` named nothing; ``--name ""`` fell back to the file's stem."""
    csv = tmp_path / "m.csv"
    csv.write_text("tokens,time\n1,0.01\n10,0.02\n20,0.03\n")
    code, out, err = run(capsys, "fit", csv, *(a.format(d=tmp_path) for a in argv))
    assert_bad_input(code, err, needle)
    assert out == "" and not (tmp_path / "y.toml").exists()


@pytest.mark.parametrize("command", ["fit", "profile"])
def test_a_profile_out_that_is_not_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Both commands that write a profile refuse another suffix before any work (``profile`` before
    PyTorch loads: this runs without it)."""
    csv = tmp_path / "m.csv"
    csv.write_text("tokens,time\n1,0.01\n10,0.02\n20,0.03\n")
    inputs = [csv] if command == "fit" else ["--model", "llama2-7b"]
    code, out, err = run(capsys, command, *inputs, "--out", tmp_path / "p.txt")
    assert_bad_input(code, err, "--out: a profile is a .toml file")
    assert out == "" and not (tmp_path / "p.txt").exists()

"""Hostile input files (issue 39's input items): each reproduction exits 2 with one line naming the
file and the place, or loads correctly; never a silent wrong result, a traceback or unbounded memory.

The limits of docs/instances.md ("Limits") and docs/sweep.md are each run in a child process under
a 1.5 GiB address-space cap (``RLIMIT_AS``): the refusal must come before the allocation.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from optsched.bounds import _refill_extra_of_prefixes  # noqa: PLC2701 (checked by brute force)
from optsched.cli import main
from optsched.costmodel import Coefficients, load_cost_model
from optsched.export.vllm_replay import PlanError, ReplayPlan, build_plan
from optsched.instance import load_instance
from optsched.integers import NumberSyntaxError, parse_decimal, parse_int, parse_whole
from optsched.policies import simulator_for
from optsched.workload import load_trace, loaders
from optsched.workload.readers import MAX_TRACE_ROWS
from tests.support.paths import REPO

VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens"
CAP = int(1.5 * 2**30)


@pytest.fixture(params=["arrow", "stdlib"])
def reader(request, monkeypatch):
    """Each test with the pyarrow fast path and with the standard-library reader."""
    if request.param == "stdlib":
        monkeypatch.setattr(loaders, "arrow_available", lambda: False)
    return request.param


def info(capsys, *args: object) -> tuple[int, str, str]:
    code = main(["info", *(str(a) for a in args)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("optsched: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def capped(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a child whose address space is capped at :data:`CAP` bytes."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def capped_cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return capped(f"import sys\nfrom optsched.cli import main\nsys.exit(main({list(argv)!r}))", cwd)


# --------------------------------------------------------------------------- 1: quotes


def test_a_stray_quote_is_an_error_not_996_rows_dropped(tmp_path, capsys, reader):
    rows = [f"{i},100,10," + ('"x' if i == 5 else "ok") for i in range(1000)]
    path = tmp_path / "q.csv"
    path.write_text("\n".join([VIDUR + ",note", *rows]) + "\n")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200", "--json")
    assert_one_line(code, err, "q.csv: line 7, column 4 'note'", "quoted field runs over the line end")


def test_a_quote_closed_lines_later_is_an_error(tmp_path, capsys, reader):
    path = tmp_path / "q.csv"
    path.write_text(f'{VIDUR},note\n0,1,1,"a\n1,1,1,b"\n2,1,1,c\n')
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "q.csv: line 2, column 4 'note'")


def test_quoted_fields_on_one_line_load(tmp_path, reader):
    path = tmp_path / "q.csv"
    path.write_text(f'{VIDUR},note\n0,"5","2","a, ""b"""\n1.5,7,3,c\n')
    inst = load_trace(path, "llama2-7b-h200")
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in inst.requests] == [(0.0, 5, 2), (1.5, 7, 3)]


# --------------------------------------------------------------------------- 2: header variants


@pytest.mark.parametrize("column", ["arrival_time", "timestamp", "created_at", "Date", "ts"])
def test_an_unused_time_column_is_an_error(tmp_path, capsys, column):
    path = tmp_path / "r.csv"
    path.write_text(f"{column},num_prefill_tokens,num_decode_tokens\n5,10,2\n9,10,2\n")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200", "--first", 100, "--json")
    assert_one_line(code, err, f"r.csv: line 1: column {column!r} looks like an arrival time", "--format")


def test_an_explicit_lengths_format_reads_such_a_file(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("arrival_time,num_prefill_tokens,num_decode_tokens\n5,10,2\n9,10,2\n")
    inst = load_trace(path, "llama2-7b-h200", format="vidur-lengths")
    assert [r.arrival for r in inst.requests] == [0.0, 0.0]


def test_a_double_bom_is_an_error(tmp_path, capsys):
    path = tmp_path / "b.csv"
    path.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + f"{VIDUR}\n0,1,1\n".encode())
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "b.csv: line 1, column 1", "second byte-order mark")


def test_a_leading_blank_line_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "blank.csv"
    path.write_text(f"\n{VIDUR}\n0,1,1\n")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "blank.csv: line 1: blank")
    assert "empty file" not in err


# --------------------------------------------------------------------------- 4: one integer grammar


@pytest.mark.parametrize("text", ["0x64", "1_000", "\u0661\u0662", "\uff11\uff12", "1e2", "true", "12abc", ""])
def test_a_count_outside_the_grammar_is_refused_by_both_readers(tmp_path, capsys, reader, text):
    path = tmp_path / "n.csv"
    path.write_text(f"{VIDUR}\n0,{text},5\n1,7,5\n", encoding="utf-8")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "n.csv: line 2, column 'num_prefill_tokens'")


@pytest.mark.parametrize("text", ["0x64", "1_000", "\u0661\u0662", "\uff11\uff12", "true", "1.0", "-5", "+"])
def test_first_takes_ascii_digits_only(capsys, text):
    code, _, err = info(capsys, "toy-4", "--first", text)
    assert_one_line(code, err, "--first")


def test_the_grammar():
    assert parse_int(" 42\t") == 42 and parse_int("-3", signed=True) == -3 and parse_int("+3", signed=True) == 3
    assert parse_whole("44.0") == 44 and parse_whole("-4") == -4
    assert parse_decimal("1e-3") == 1e-3 and parse_decimal(".5") == 0.5 and parse_decimal("-2.") == -2.0
    for bad in ("0x64", "1_000", "\u0661", "\uff11", "True", "1.5", "-3", "", " "):
        with pytest.raises(NumberSyntaxError):
            parse_int(bad)
    for bad in ("1.5", "1e3", "0x10", "9" * 19):
        with pytest.raises(NumberSyntaxError):
            parse_whole(bad)
    for bad in ("inf", "nan", "0x10", "1_0", "\u0661", "1e99999"):
        with pytest.raises(NumberSyntaxError):
            parse_decimal(bad)


@pytest.mark.parametrize("offset, ok", [("+99:99", False), ("+24:00", False), ("-23:59", True), ("+05:30", True)])
def test_zone_offsets_in_range(tmp_path, capsys, reader, offset, ok):
    path = tmp_path / "z.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46{offset},10,5\n")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    if ok:
        assert code == 0, err
    else:
        assert_one_line(code, err, "z.csv: line 2, column 'TIMESTAMP': zone offset out of range")


# --------------------------------------------------------------------------- 3, 4: sweep specs


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"workloads": [{"instance": "toy-4", "offline": "false"}]}, "workloads[0]: transform 'offline'"),
        ({"limits": {"kv_capacity": [True]}}, "limits.kv_capacity[0]"),
        ({"limits": {"kv_capacity": ["100"]}}, "limits.kv_capacity[0]"),
        ({"run": {"solve": [{"problem": "infermax", "time_limit": True}]}}, "run.solve[0].time_limit"),
        ({"rate_scale": [True]}, "rate_scale[0]"),
        ({"retries": "2"}, "retries"),
        ({"run": {"simulate": ["vllm"], "bound": "true"}}, "run.bound"),
        ({"run": {"simulate": ["vllm"], "bound": {"foo": 1}}}, "run.bound.foo: Extra inputs"),
    ],
)
def test_sweep_spec_fields_are_strictly_typed(tmp_path, capsys, change, needle):
    spec = {"name": "t", "workloads": [{"instance": "toy-4"}], "run": {"simulate": ["vllm"]}, **change}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    code = main(["sweep", str(path), "--out", str(tmp_path / "out")])
    assert_one_line(code, capsys.readouterr().err, f"s.json: {needle}")
    assert not (tmp_path / "out").exists()


def test_a_nul_byte_in_a_yaml_spec_is_one_line(tmp_path, capsys):
    path = tmp_path / "n.yaml"
    path.write_bytes(b"name: t\nworkloads: [{instance: toy-4}]\x00\n")
    code = main(["sweep", str(path), "--out", str(tmp_path / "out")])
    assert_one_line(code, capsys.readouterr().err, "n.yaml: malformed YAML at line 2: character U+0000")


# --------------------------------------------------------------------------- 8: truncated gzip


def _truncated_gzip(path: Path, text: str) -> Path:
    data = gzip.compress(text.encode() * 200)
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("name", ["t.csv.gz", "t.jsonl.gz"])
def test_truncated_gzip_in_info_and_sweep(tmp_path, capsys, name):
    line = '{"timestamp": 1, "input_length": 5, "output_length": 3}\n' if "jsonl" in name else "0,1,1\n"
    path = _truncated_gzip(tmp_path / name, ("" if "jsonl" in name else VIDUR + "\n") + line * 50)
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, f"{name}: damaged or truncated gzip data")
    spec = tmp_path / "s.json"
    workloads = [{"trace": name, "cost_model": "llama2-7b-h200"}]
    spec.write_text(json.dumps({"name": "t", "workloads": workloads, "run": {"simulate": ["vllm"]}}))
    code = main(["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert_one_line(code, capsys.readouterr().err, "workloads[0]", "damaged or truncated gzip data")


# --------------------------------------------------------------------------- 9, 17: JSON Lines values


def test_a_400_digit_timestamp(tmp_path, capsys):
    path = tmp_path / "big.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 5, "output_length": 3}\n')
    path.write_text(path.read_text() + '{"timestamp": ' + "9" * 400 + ', "input_length": 5, "output_length": 3}\n')
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "big.jsonl: line 2, field 'timestamp': out of range (400-digit integer")


@pytest.mark.parametrize("field", ["input_length", "timestamp"])
def test_deep_nesting_in_a_read_field(tmp_path, capsys, reader, field):
    values = {"timestamp": "1", "input_length": "5", "output_length": "3", field: "[" * 100_000 + "]" * 100_000}
    path = tmp_path / "deep.jsonl"
    path.write_text("{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}\n")
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "deep.jsonl: line 1")


def test_deep_nesting_in_an_ignored_field_is_one_line_or_ignored(tmp_path, capsys, reader):
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "deep.jsonl"
    path.write_text(f'{{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": {deep}}}\n')
    code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200", "--json")
    if code != 0:
        assert_one_line(code, err, "deep.jsonl: line 1: JSON nested too deeply")


@pytest.mark.parametrize("t", ["1e308", "-1e308", "1e16"])
def test_huge_timestamps_are_one_line_without_a_warning(tmp_path, capsys, reader, t):
    path = tmp_path / "e.jsonl"
    path.write_text(
        f'{{"timestamp": 0, "input_length": 5, "output_length": 3}}\n{{"timestamp": {t}, '
        '"input_length": 5, "output_length": 3}\n'
    )
    with np.errstate(all="raise"):  # a numpy overflow warning would raise here
        code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "e.jsonl: line 2, field 'timestamp'")


def test_huge_csv_times_are_one_line_without_a_warning(tmp_path, capsys, reader):
    path = tmp_path / "e.csv"
    path.write_text(f"{VIDUR}\n-1e308,5,3\n1e308,5,3\n")
    with np.errstate(all="raise"):
        code, _, err = info(capsys, path, "--cost-model", "llama2-7b-h200")
    assert_one_line(code, err, "e.csv: line 3, column 'arrived_at': arrives more than 1e+09 s after")


# --------------------------------------------------------------------------- 14: limits under a memory cap


def test_a_small_gzip_of_too_many_rows(tmp_path):
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    chunk = b"0,1,1\n" * 1_000_000
    with open(tmp_path / "rows.csv.gz", "wb") as fh:
        fh.write(packer.compress(f"{VIDUR}\n".encode()))
        for _ in range(MAX_TRACE_ROWS // 1_000_000 + 1):
            fh.write(packer.compress(chunk))
        fh.write(packer.flush())
    assert (tmp_path / "rows.csv.gz").stat().st_size < 1_000_000
    done = capped_cli(tmp_path, "info", "rows.csv.gz", "--cost-model", "llama2-7b-h200")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"more than {MAX_TRACE_ROWS:,} lines" in done.stderr


@pytest.mark.parametrize("args", [[], ["--format", "vidur", "--cost-model", "llama2-7b-h200"]])
def test_dev_zero(tmp_path, args):
    done = capped_cli(tmp_path, "info", "/dev/zero", *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "/dev/zero: more than 268,435,456 bytes (not a regular file)" in done.stderr


def test_a_step_file_with_an_item_count_of_10_12(tmp_path):
    step = {"kind": "decode", "reqs": [[[1, 100, 1], 10**12]], "gpu_ms": 5.0, "wall_ms": 5.0}
    other = {"kind": "prefill1", "reqs": [[[64, 64, 1], 1]], "gpu_ms": 6.0, "wall_ms": 6.0}
    (tmp_path / "m.json").write_text(json.dumps({"time_unit": "ms", "grid": [step, other]}))
    done = capped_cli(tmp_path, "fit", "m.json")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "m.json: grid step 0: field 'reqs': item counts must be >= 0 and total at most 1,000,000" in done.stderr


def test_a_yaml_alias_bomb(tmp_path):
    lines = ["name: t", "workloads: [{instance: toy-4}]", "x0: &x0 {problem: infermax}"]
    lines += [f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}]" for i in range(1, 30)]
    (tmp_path / "bomb.yaml").write_text("\n".join([*lines, "run: {solve: *x29}"]) + "\n")
    done = capped_cli(tmp_path, "sweep", "bomb.yaml", "--out", "out")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "bomb.yaml: more than 1,000,000 values once its aliases are expanded" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_grid_of_a_million_cells(tmp_path, capsys):
    spec = {"name": "t", "workloads": [{"instance": "toy-4"}], "rate_scale": list(range(1, 1001))}
    spec["limits"] = {"kv_capacity": list(range(100, 1100))}
    (tmp_path / "g.json").write_text(json.dumps(spec))
    code = main(["sweep", str(tmp_path / "g.json"), "--out", str(tmp_path / "out")])
    assert_one_line(code, capsys.readouterr().err, "g.json: the grid has 1,000,000 cells, more than 100,000")


@pytest.fixture(scope="module")
def toy_plan() -> dict:
    instance = load_instance("toy-4")
    return build_plan(instance, simulator_for("vllm")(instance), block_size=16).to_dict()


@pytest.mark.parametrize(
    "where, value, needle",
    [
        (("engine", "kv_blocks"), 10**15, "field 'engine': 'kv_blocks': must be from 1 to 100,000,000"),
        (("requests", 0, "prompt_tokens"), 10**9, "request 0: field 'prompt_tokens': must be from 1 to 10,000,000"),
        (("steps", 0, "kv_blocks"), 10**15, "step 0: field 'kv_blocks'"),
        (("engine", "kv_blocks"), 1e15, "field 'engine': 'kv_blocks': must be an integer"),
        (("engine", "block_size"), True, "field 'engine': 'block_size': must be an integer"),
    ],
)
def test_plan_counts_are_bounded(tmp_path, toy_plan, where, value, needle):
    plan = json.loads(json.dumps(toy_plan))
    target = plan
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    (tmp_path / "p.json").write_text(json.dumps(plan))
    code = """from optsched.export.vllm_replay import load_plan, PlanError
try:
    load_plan("p.json")
except PlanError as e:
    print(e)
"""
    done = capped(code, tmp_path)
    assert done.returncode == 0 and f"p.json: {needle}" in done.stdout, (done.stdout, done.stderr)


def test_a_duplicate_request_in_a_plan(toy_plan):
    plan = json.loads(json.dumps(toy_plan))
    plan["requests"].append(plan["requests"][0])
    with pytest.raises(PlanError, match="duplicate request 'r0'"):
        ReplayPlan.from_dict(plan, "p.json")


def test_export_limits_kv_blocks(toy_plan):
    instance = load_instance("toy-4")
    with pytest.raises(PlanError, match="kv_blocks"):
        build_plan(instance, simulator_for("vllm")(instance), block_size=16, kv_blocks=10**15)


# --------------------------------------------------------------------------- 17: fit, 19: export


def test_fit_with_huge_times_is_one_line_naming_the_file(tmp_path, capsys):
    grid = [{"kind": "prefill1", "reqs": [[[q, q, 1], 1]], "gpu_ms": 1e300, "wall_ms": 1e300} for q in (16, 64, 256)]
    (tmp_path / "m.json").write_text(json.dumps({"time_unit": "ms", "grid": grid}))
    with np.errstate(all="raise"):
        code = main(["fit", str(tmp_path / "m.json")])
    assert_one_line(code, capsys.readouterr().err, "m.json: grid step 0: field 'gpu_ms'")


def test_export_of_a_schedule_naming_an_unknown_request_is_exit_2(tmp_path, capsys):
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    path = tmp_path / "s.json"
    path.write_text(path.read_text().replace('"r0"', '"zz"'))
    for fmt in ("vllm-replay", "chrome-trace"):
        code = main(["export", str(path), "--instance", "toy-4", "--format", fmt, "--out", str(tmp_path / "p.json")])
        assert_one_line(code, capsys.readouterr().err, "s.json: batch 0: request 'zz': unknown request")
    assert not (tmp_path / "p.json").exists()


# --------------------------------------------------------------------------- 18: info's bounds in one pass


def _refill_extra_brute_force(I: np.ndarray, O: np.ndarray, cm, d_max: int) -> np.ndarray:
    """The docstring's definition, request by request: sum_i of its r_i = (O_i - 1 - D)^+ smallest rho."""
    coef = Coefficients.of(cm.linear_twin())
    L, a, pa, pq = coef.layers, coef.per_token, coef.prefill_per_token, coef.prefill_per_token_sq
    da, dk = coef.decode_per_token, coef.decode_per_kv
    extra = np.zeros(d_max + 1)
    for prompt, output in zip(I.tolist(), O.tolist()):
        held = prompt + np.arange(1, output, dtype=np.float64)
        rho = np.sort(L * np.maximum(0.0, (a + pa + pq) * held - (a + da + dk * (held - 1.0))))
        for D in range(d_max + 1):
            extra[D] += rho[: max(0, output - 1 - D)].sum()
    return extra


@pytest.mark.parametrize("seed", range(4))
def test_refill_extras_of_prefixes_in_one_pass(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    monkeypatch.setattr("optsched.bounds.TOKEN_BLOCK", int(rng.integers(7, 300)))  # requests split over blocks
    n = int(rng.integers(1, 30))
    I, O = rng.integers(1, 3000, n), rng.integers(1, 60, n)
    cm = load_cost_model(str(rng.choice(["llama2-7b-h200", "llama2-7b-a100"])))
    lengths = sorted({int(x) for x in rng.integers(1, n + 1, 5)} | {n})
    d_max = int(O.max()) + 5
    for length, extra in zip(lengths, _refill_extra_of_prefixes(I, O, cm, d_max, lengths)):
        expected = _refill_extra_brute_force(I[:length], O[:length], cm, d_max)
        assert np.allclose(extra, expected, rtol=1e-9, atol=1e-15), (length, extra - expected)


@pytest.mark.parametrize("value", ["1_6", "\uff11\uff16", "0x10"])
def test_integer_options_take_the_grammar(tmp_path, capsys, value):
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    argv = ["export", str(tmp_path / "s.json"), "--format", "vllm-replay", "--block-size", value]
    code = main([*argv, "--out", str(tmp_path / "p.json")])
    assert_one_line(code, capsys.readouterr().err, "--block-size")


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("arrival", True, "field 'arrival'"),
        ("arrival", "5", "field 'arrival'"),
        ("prompt_tokens", True, "field 'prompt_tokens'"),
        ("slo", {"ttft": True}, "field 'slo.ttft'"),
    ],
)
def test_instance_numbers_are_never_booleans_or_strings(tmp_path, capsys, field, value, needle):
    data = json.loads((REPO / "instances" / "toy-4.json").read_text())
    data["requests"][0][field] = value
    (tmp_path / "i.json").write_text(json.dumps(data))
    code, _, err = info(capsys, tmp_path / "i.json")
    assert_one_line(code, err, "i.json: request 'r0'", needle)

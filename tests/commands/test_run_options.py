"""Options and spec fields the audit answered with exit 3: seeds, PyTorch devices and dtypes. Each
is bad input (exit 2, one line naming the option or the field), refused before any work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optsched.workload import WorkloadError, WorkloadTransforms
from tests.commands.test_bad_input import assert_bad_input, run


@pytest.mark.parametrize("seed", ["-1", "1.5", "x", str(2**63)])
@pytest.mark.parametrize(
    "argv",
    [
        ["info", "toy-4", "--sample", "0.5", "--seed"],
        ["generate", "--name", "g", "--n", "3", "--prompt", "4", "--output", "4", "--seed"],
        ["execute", "plan.json", "--model", "tiny-llama", "--engine", "torch", "--seed"],
        ["profile", "--model", "tiny-llama", "--seed"],
    ],
    ids=["info", "generate", "execute", "profile"],
)
def test_a_bad_seed_on_the_command_line(capsys: pytest.CaptureFixture[str], argv: list[str], seed: str) -> None:
    code, _, err = run(capsys, *argv, seed)
    assert_bad_input(code, err, "--seed")


def test_the_largest_seed_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "info", "toy-4", "--sample", "0.5", "--seed", str(2**63 - 1), "--json")
    assert code == 0, err
    assert json.loads(out)


@pytest.mark.parametrize("seed", [-1, 1.5, "x", True, 2**63, None])
def test_a_bad_seed_in_a_sweep_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: Any) -> None:
    pytest.importorskip("pyarrow")
    workload: dict[str, Any] = {"instance": "toy-4", "sample": 0.5, "seed": seed}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "s", "workloads": [workload], "run": {"simulate": ["vllm"]}}))
    out = tmp_path / "out"
    code, _, err = run(capsys, "sweep", spec, "--out", out, "--no-progress")
    if seed is None:  # null: the default seed
        assert code == 0, err
        return
    assert_bad_input(code, err, "spec.json", "workloads[0]", "'seed'")
    assert not out.exists()


@pytest.mark.parametrize("seed", [-1, 1.5, "x", True, 2**63])
def test_transforms_refuse_a_bad_seed(seed: Any) -> None:
    with pytest.raises(WorkloadError, match="transform 'seed'"):
        WorkloadTransforms(sample=0.5, seed=seed)


@pytest.mark.parametrize("device", ["banana", "cuda:x", "cuda:", "cpu:0", "cuda:\u0663", "CUDA"])
@pytest.mark.parametrize("command", ["execute", "profile"])
def test_a_bad_torch_device(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, device: str) -> None:
    """The issue's reproduction (``--device banana``): refused by the parser, PyTorch or not."""
    argv = ["execute", tmp_path / "plan.json", "--engine", "torch"] if command == "execute" else ["profile"]
    code, _, err = run(capsys, *argv, "--model", "tiny-llama", "--device", device)
    assert_bad_input(code, err, "--device", device)


@pytest.mark.parametrize("command", ["execute", "profile"])
def test_a_bad_torch_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    argv = ["execute", tmp_path / "plan.json", "--engine", "torch"] if command == "execute" else ["profile"]
    code, _, err = run(capsys, *argv, "--model", "tiny-llama", "--device", "cpu", "--dtype", "int8")
    assert_bad_input(code, err, "--dtype", "int8")


@pytest.mark.parametrize("threads", ["0", "-2", "x"])
def test_a_bad_thread_count(tmp_path: Path, capsys: pytest.CaptureFixture[str], threads: str) -> None:
    argv = ["execute", tmp_path / "plan.json", "--engine", "torch", "--model", "tiny-llama"]
    code, _, err = run(capsys, *argv, "--threads", threads)
    assert_bad_input(code, err, "--threads")


def test_a_good_cpu_device_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--device cpu`` passes the parser and runs the plan on PyTorch (skipped without it)."""
    pytest.importorskip("torch")
    schedule, plan = tmp_path / "s.json", tmp_path / "plan.json"
    assert run(capsys, "simulate", "toy-4", "--policy", "vllm", "--out", schedule)[0] == 0
    assert run(capsys, "export", schedule, "--format", "vllm-replay", "--out", plan)[0] == 0
    argv = ["execute", plan, "--engine", "torch", "--model", "tiny-llama", "--device", "cpu"]
    code, _, err = run(capsys, *argv, "--repeats", "1", "--warmup", "0", "--dtype", "float32")
    assert code == 0, err

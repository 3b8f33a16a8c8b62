"""An output that would replace an input is refused before any work (exit 2, one line, the input
unchanged): the same file, a symbolic or hard link to it, or a sweep folder's own files
(docs/cli.md "Output files")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from optsched.cli import main
from tests.support.paths import shared_data


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("optsched: error: ") and err.count("\n") == 1, err
    assert "would replace" in err, err


@pytest.fixture
def inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    """An instance file (``i``) and a schedule file (``s``) of toy-4."""
    files = {"i": tmp_path / "toy.json", "s": tmp_path / "s.json"}
    assert run(capsys, "info", "toy-4", "--out", files["i"])[0] == 0
    assert run(capsys, "simulate", "toy-4", "--policy", "vllm", "--out", files["s"])[0] == 0
    return files


def _alias(path: Path, how: str) -> Path:
    """``path`` itself, a symbolic link to it or a hard link to it."""
    if how == "same":
        return path
    alias = path.with_name(f"{how}-{path.name}")
    if how == "symlink":
        alias.symlink_to(path.name)
    else:
        os.link(path, alias)
    return alias


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize(
    "argv, replaced",
    [
        (["info", "{i}", "--out", "{o}"], "i"),
        (["info", "{i}", "--first", "2", "--out", "{o}"], "i"),
        (["simulate", "{i}", "--policy", "vllm", "--out", "{o}"], "i"),
        (["simulate", "{i}", "--policy", "vllm", "--requests-out", "{o}"], "i"),
        (["solve", "{i}", "--problem", "infermax", "--time-limit", "5", "--out", "{o}"], "i"),
        (["export", "{s}", "--format", "vllm-replay", "--out", "{o}"], "s"),
        (["export", "{s}", "--instance", "{i}", "--format", "vllm-replay", "--out", "{o}"], "i"),
        (["check", "{i}", "{s}", "--requests-out", "{o}"], "s"),
    ],
)
def test_an_output_naming_an_input_is_refused(
    capsys: pytest.CaptureFixture[str], inputs: dict[str, Path], argv: list[str], replaced: str, how: str
) -> None:
    """The input file (or a link to it) given as an output: refused before any work, unchanged."""
    before = {k: p.read_bytes() for k, p in inputs.items()}
    out = _alias(inputs[replaced], how)
    code, _, err = run(capsys, *(a.format(o=out, **inputs) for a in argv))
    assert_refused(code, err)
    assert {k: p.read_bytes() for k, p in inputs.items()} == before


def test_fit_out_naming_its_measurements_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's reproduction (a step file, from the shared data) and a plain CSV."""
    csv = tmp_path / "m.csv"
    csv.write_text("tokens,time\n" + "".join(f"{n},{0.01 + 1e-5 * n}\n" for n in range(1, 60, 3)))
    before = csv.read_bytes()
    code, _, err = run(capsys, "fit", csv, "--out", csv)
    assert_refused(code, err)
    assert csv.read_bytes() == before
    data = shared_data()
    if data is None:
        pytest.skip("../shared/data is absent: the step-file case needs its measurements")
    steps = tmp_path / "m.json"
    steps.write_bytes((data / "gpu" / "h200-llama2-7b-steps.json").read_bytes())
    before = steps.read_bytes()
    code, _, err = run(capsys, "fit", steps, "--out", steps)
    assert_refused(code, err)
    assert steps.read_bytes() == before


def test_a_different_output_is_still_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inputs: dict[str, Path]
) -> None:
    out = tmp_path / "plan.json"
    code, _, err = run(capsys, "export", inputs["s"], "--format", "vllm-replay", "--out", out)
    assert code == 0, err
    assert json.loads(out.read_text())


@pytest.mark.parametrize("name", ["_sweep.json", "part-0123.parquet"])
def test_sweep_report_never_writes_into_the_sweeps_own_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pytest.importorskip("pyarrow")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "s", "workloads": [{"instance": "toy-4"}], "run": {"simulate": ["vllm"]}}))
    out = tmp_path / "out"
    assert run(capsys, "sweep", spec, "--out", out, "--workers", "1", "--no-progress")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = run(capsys, "sweep-report", out, "--html", out / name)
    assert_refused(code, err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # a page of its own inside the folder is fine
    code, _, err = run(capsys, "sweep-report", out, "--html", out / "page.html")
    assert code == 0, err
    # and a spec stored as one of the sweep's files cannot be swept into that folder
    code, _, err = run(capsys, "sweep", out / "_sweep.json", "--out", out, "--resume", "--no-progress")
    assert_refused(code, err)

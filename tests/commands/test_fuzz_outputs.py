"""Fuzz generators of issue 39's classes of outputs and sweep folders, under the contract of
tests/commands/test_fuzz_cli.py (its ``run`` checks exit codes, one error line, no traceback, no file
changed on exit 2, no temporary file left): an output that names an input (the same file, a
symbolic or hard link to it, a sweep folder's own file) and a damaged sweep folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optsched.cli import main
from tests.commands.test_fuzz_cli import base, fuzz, run, workdir  # noqa: F401 - base: the fixture

pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

SPEC = {"name": "fz", "workloads": [{"instance": "toy-4"}], "limits": {"kv_capacity": [600, 3000]}}
SPEC["run"] = {"simulate": ["vllm"], "bound": True}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An instance, a schedule, a measurement CSV and a stored sweep (copied into each run's folder)."""
    folder = tmp_path_factory.mktemp("fuzz-outputs")
    files = {
        "inst": folder / "i.json",
        "sched": folder / "s.json",
        "csv": folder / "m.csv",
        "spec": folder / "spec.json",
        "sweep": folder / "sweep",
    }
    assert main(["info", "toy-4", "--out", str(files["inst"])]) == 0
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(files["sched"])]) == 0
    files["csv"].write_text("tokens,time\n1,0.25\n8,0.3\n64,0.5\n")
    files["spec"].write_text(json.dumps(SPEC))
    assert main(["sweep", str(files["spec"]), "--out", str(files["sweep"]), "--workers", "1", "--no-progress"]) == 0
    return files


def _copy(inputs: dict[str, Path], folder: Path) -> dict[str, Path]:
    out = {}
    for key, path in inputs.items():
        out[key] = folder / path.name
        if path.is_dir():
            shutil.copytree(path, out[key])
        else:
            shutil.copy2(path, out[key])
    return out


#: (command line with ``{i}``, ``{s}``, ``{c}`` for the inputs, ``{o}`` for the output; the input
#: the output names).
COMMANDS: list[tuple[list[str], str]] = [
    (["info", "{i}", "--out", "{o}"], "inst"),
    (["simulate", "{i}", "--policy", "vllm", "--out", "{o}"], "inst"),
    (["simulate", "{i}", "--policy", "vllm", "--requests-out", "{o}"], "inst"),
    (["check", "{i}", "{s}", "--requests-out", "{o}"], "sched"),
    (["export", "{s}", "--format", "vllm-replay", "--out", "{o}"], "sched"),
    (["export", "{s}", "--instance", "{i}", "--format", "chrome-trace", "--out", "{o}"], "inst"),
    (["solve", "{i}", "--problem", "infermax", "--time-limit", "1", "--out", "{o}"], "inst"),
    (["report", "{i}", "--time-limit", "2", "--quiet", "--html", "{o}"], "inst"),
    (["fit", "{c}", "--out", "{o}"], "csv"),
]


@fuzz(30)
@given(data=st.data())
def test_an_output_naming_an_input(base: Path, inputs: dict[str, Path], data: st.DataObject) -> None:  # noqa: F811
    folder = workdir(base)
    files = _copy(inputs, folder)
    template, target = data.draw(st.sampled_from(COMMANDS))
    how = data.draw(st.sampled_from(["same", "symlink", "hardlink", "relative"]))
    out: Any = files[target]
    if how == "symlink":
        out = folder / "link"
        out.symlink_to(files[target])
    elif how == "hardlink":
        out = folder / "hard"
        os.link(files[target], out)
    elif how == "relative":
        out = os.path.relpath(files[target])
    names = {"i": files["inst"], "s": files["sched"], "c": files["csv"], "o": out}
    argv = [a.format(**names) for a in template]
    if data.draw(st.booleans()):
        argv.append("--json")
    code, _, err = run(argv, folder)  # exit 2: nothing changed (checked by run)
    assert code == 2 and "would replace" in err, err


#: The kinds of damage :func:`_damage` does.
DAMAGE = ["cut", "bytes", "link", "folder", "meta-cut", "meta-json", "meta-link", "foreign"]


def _damage(folder: Path, how: str, data: st.DataObject) -> None:
    parts = sorted(folder.glob("part-*.parquet"))
    part = parts[data.draw(st.integers(0, len(parts) - 1))]
    if how == "cut":
        raw = part.read_bytes()
        part.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
    elif how == "bytes":
        part.write_bytes(data.draw(st.binary(max_size=64)))
    elif how == "link":
        part.unlink()
        part.symlink_to(data.draw(st.sampled_from(["/etc/hostname", "nowhere", str(folder)])))
    elif how == "folder":
        part.unlink()
        part.mkdir()
    elif how == "meta-cut":
        meta = folder / "_sweep.json"
        raw = meta.read_bytes()
        meta.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
    elif how == "meta-json":
        (folder / "_sweep.json").write_text(json.dumps(data.draw(st.sampled_from([[], {}, {"spec": 1}, "x", 1]))))
    elif how == "meta-link":
        (folder / "_sweep.json").unlink()
        (folder / "_sweep.json").symlink_to("/etc/hostname")
    elif how == "foreign":
        (folder / "_sweep.json").unlink()


@fuzz(30)
@given(data=st.data())
def test_a_damaged_sweep_folder(base: Path, inputs: dict[str, Path], data: st.DataObject) -> None:  # noqa: F811
    folder = workdir(base)
    files = _copy(inputs, folder)
    how = data.draw(
        st.sampled_from(["cut", "bytes", "link", "folder", "meta-cut", "meta-json", "meta-link", "foreign"])
    )
    _damage(files["sweep"], how, data)
    report = data.draw(st.booleans())
    if report:
        argv = ["sweep-report", str(files["sweep"]), "--html", str(folder / "page.html")]
    else:
        argv = ["sweep", str(files["spec"]), "--out", str(files["sweep"]), "--resume", "--workers", "1"]
        argv.append("--no-progress")
    code, _, err = run([*argv, "--json"], folder)
    if report and how == "foreign":  # part files without the spec record still make a report
        assert code == 0, err
    else:
        assert code == 2, err

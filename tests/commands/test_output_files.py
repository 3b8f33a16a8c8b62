"""Output files (optsched.jsonio, docs/cli.md "Output files"): every command that writes checks its
outputs before any work, writes only regular files through a uniquely named temporary file, and
leaves nothing behind (and the old file as it was) on failure.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from optsched.cli import main
from optsched.export.vllm_replay import build_plan
from optsched.instance import load_instance
from optsched.jsonio import OutputError, atomic_output, output_target, write_text_atomic
from optsched.policies import simulator_for
from tests.support.export import execute_result


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder: Path) -> dict[str, tuple[int, float]]:
    """Every entry under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime) for p in folder.rglob("*")}


# --------------------------------------------------------------------------- the helper


def test_output_target_rules(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert output_target(tmp_path / "new.json") == tmp_path / "new.json"
    assert output_target(real) == real
    assert output_target(link) == real  # a symbolic link is followed
    (tmp_path / "to-folder").symlink_to(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = {
        tmp_path: "is a folder",
        tmp_path / "to-folder": "is a folder",
        tmp_path / "nodir" / "x.json": "does not exist",
        fifo: "not a regular file",
        Path(os.devnull): "not a regular file",
    }
    for path, message in refused.items():
        with pytest.raises(OutputError, match=message) as info:
            output_target(path)
        assert str(info.value).startswith(str(path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_output_target_refuses_an_unwritable_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(OutputError, match="not writable"):
        output_target(locked / "x.json")


@pytest.mark.parametrize("failure", [ValueError("bad"), KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, failure: BaseException) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    expected = OutputError if isinstance(failure, OSError) else type(failure)
    with pytest.raises(expected):
        with atomic_output(target) as tmp:
            tmp.write_text("half")
            raise failure
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_writing_through_a_link_keeps_the_link_and_the_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


# --------------------------------------------------------------------------- every command that writes


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Valid inputs of the writing commands: a schedule of toy-4, its plan's execute result, a
    measurements CSV, and a sweep store is not needed (sweep-report checks --html first)."""
    folder = tmp_path / "in"
    folder.mkdir()
    instance = load_instance("toy-4")
    schedule = simulator_for("vllm")(instance)
    schedule.save(folder / "s.json")
    plan = build_plan(instance, schedule, block_size=16)
    predicted = [s.predicted_time for s in plan.steps]
    result = execute_result(plan, [1.2 * p for p in predicted], predicted)
    (folder / "r.json").write_text(json.dumps(result))
    (folder / "plan.json").write_text(json.dumps(plan.to_dict()))
    (folder / "m.csv").write_text("tokens,time\n" + "".join(f"{n},{0.25 + 0.002 * n}\n" for n in (1, 8, 64, 512)))
    return {
        "schedule": folder / "s.json",
        "result": folder / "r.json",
        "plan": folder / "plan.json",
        "csv": folder / "m.csv",
    }


def writing_commands(i: dict[str, Path], out: str) -> list[list[str]]:
    """One command line per output option of every command that writes, the output at ``out``."""
    return [
        ["simulate", "toy-4", "--policy", "vllm", "--out", out],
        ["simulate", "toy-4", "--policy", "vllm", "--requests-out", out + ".csv"],
        ["solve", "toy-4", "--problem", "infermax", "--time-limit", "5", "--out", out],
        ["check", "toy-4", str(i["schedule"]), "--requests-out", out + ".csv"],
        ["export", str(i["schedule"]), "--format", "vllm-replay", "--out", out],
        ["generate", "--name", "g", "--n", "2", "--prompt", "8", "--output", "4", "--out", out],
        ["fit", str(i["csv"]), "--out", out],
        ["report", "toy-4", "--time-limit", "5", "--html", out],
        ["report", "toy-4", "--time-limit", "5", "--requests-out", out + ".csv"],
        ["validate", str(i["result"]), "--plot", out],
        ["validate", str(i["result"]), "--profile-out", out],
        ["execute", str(i["plan"]), "--model", "tiny-llama", "--out", out],
        ["sweep-report", str(i["plan"]), "--html", out],
    ]


@pytest.mark.parametrize("kind", ["folder", "missing-folder", "device"])
def test_a_bad_output_is_refused_before_any_work(
    tmp_path: Path, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Exit 2 with one line naming the output, and nothing created or changed anywhere under
    tmp_path (no temporary file either)."""
    work = tmp_path / "work"
    work.mkdir()
    out = {"folder": str(work), "missing-folder": str(work / "nodir" / "x"), "device": os.devnull}[kind]
    for argv in writing_commands(inputs, out):
        if kind == "folder" and argv[-1].endswith(".csv"):
            (work / "x.csv").mkdir()
            argv = [*argv[:-1], str(work / "x.csv")]
        if kind == "device" and argv[-1].endswith(".csv"):
            continue  # /dev/null.csv: a missing file in /dev, not a device
        before = listing(tmp_path)
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and err.startswith("optsched: error: ") and argv[-1] in err, (argv, err)
        assert listing(tmp_path) == before, argv
        if (work / "x.csv").is_dir():
            (work / "x.csv").rmdir()


def test_report_html_on_a_folder_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It ran the whole report, then failed with exit 3 and left '.DIRECTORY.tmp' behind."""
    code, out, err = run(capsys, "report", "toy-4", "--time-limit", "60", "--html", tmp_path, "--quiet")
    assert code == 2 and "is a folder" in err and out == ""
    assert list(tmp_path.iterdir()) == []


def test_out_through_a_symbolic_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "vllm", "--out", link)
    assert code == 0, err
    assert link.is_symlink() and json.loads(real.read_text())["instance"] == "toy-4"


def test_two_outputs_naming_one_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "x.csv"
    code, _, err = run(capsys, "simulate", "toy-4", "--policy", "vllm", "--out", csv, "--requests-out", csv)
    assert code == 2 and "the same file" in err and not csv.exists()


def test_a_failed_command_leaves_the_old_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An existing --out survives a run that fails after the check (an unknown request in the schedule)."""
    out = tmp_path / "plan.json"
    out.write_text("old")
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"instance": "toy-4", "batches": [{"items": [{"id": "ghost", "tokens": 1}]}]}))
    code, _, err = run(capsys, "export", bad, "--format", "vllm-replay", "--out", out)
    assert code in (1, 2) and out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "s.json"]

"""The sweep's folder under hostile conditions (docs/sweep.md "The results folder"): temporary
files created exclusively, a lock against a second sweep, a folder of another spec or of foreign
files refused, a damaged folder an exit 2 naming the file, and no process or temporary file
left by ``kill -9`` or SIGTERM of the driver."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.cli import main
from optsched.sweep.store import StoreError, SweepStore
from tests.support.sweep import (
    descendants,
    part_files,
    pool_workers,
    run_cli,
    slow_spec,
    solving_spec,
    start_cli,
    wait_for_parts,
    write_spec,
)

TINY = {"name": "tiny", "workloads": [{"instance": "toy-4"}], "limits": {"kv_capacity": [3000, 20000]}}
TINY["run"] = {"simulate": ["vllm"], "bound": True}


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("optsched: ")]
    assert len(lines) == 1 and lines[0].startswith("optsched: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def sweep(capsys, spec: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "sweep", spec, "--out", out, "--workers", "1", "--no-progress", *extra)


@pytest.fixture
def stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A finished sweep of :data:`TINY`: (spec file, folder)."""
    spec, out = write_spec(tmp_path, TINY), tmp_path / "out"
    code, _, err = sweep(capsys, spec, out)
    assert code == 0, err
    return spec, out


# --------------------------------------------------------------------------- temporary files


def test_a_planted_link_at_a_temporary_name_is_never_followed(tmp_path: Path) -> None:
    """The issue's reproduction: a symbolic link at the temporary name the store used to choose
    (``.tmp-<key>-<pid>.parquet``) and at every name of that pattern an attacker can guess; the
    outside file stays unchanged and the part file is a regular file of its own."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "out"
    folder.mkdir()
    store = SweepStore(folder)
    key = "0123abcd"
    for pid in (os.getpid(), *range(os.getpid() - 5, os.getpid() + 5)):
        link = folder / f".tmp-{key}-{pid}.parquet"
        if not link.is_symlink():
            link.symlink_to(victim)
    assert store.write(key, [{"sweep": "x", "cell": key, "kind": "simulate", "status": "ok"}])
    assert victim.read_text() == "precious"
    part = store.path_of(key)
    assert part.is_file() and not part.is_symlink()
    assert store.rows_of(key)[0]["cell"] == key
    assert not [p for p in folder.glob(".tmp-*") if not p.is_symlink()], "a temporary file was left"


def test_a_part_file_name_holding_a_link_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "out"
    folder.mkdir()
    store = SweepStore(folder)
    store.path_of("k").symlink_to(victim)
    assert store.write("k", [{"sweep": "x", "cell": "k", "kind": "simulate", "status": "ok"}]) is False
    assert victim.read_text() == "precious"


# --------------------------------------------------------------------------- ownership and the lock


def test_a_users_own_sweep_json_is_not_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "_sweep.json").write_text('{"mine": 1}\n')
    code, _, err = sweep(capsys, write_spec(tmp_path, TINY), out)
    assert_bad_input(code, err, "_sweep.json")
    assert (out / "_sweep.json").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in out.iterdir()) == ["_sweep.json"]


def test_a_folder_of_foreign_files_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = sweep(capsys, write_spec(tmp_path, TINY), out)
    assert_bad_input(code, err, str(out), "notes.txt")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_another_specs_sweep_is_refused_without_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stored: tuple[Path, Path]
) -> None:
    """Also when the folder holds no cell yet (a sweep stopped before its first): without
    ``--resume`` a folder is never shared; with it the other spec's cells are added (docs/sweep.md)."""
    _, out = stored
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = write_spec(tmp_path, {**TINY, "name": "other"}, "other.json")
    code, _, err = sweep(capsys, other, out)
    assert_bad_input(code, err, str(out), "another spec", "--resume")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    for part in part_files(out):
        part.unlink()
    code, _, err = sweep(capsys, other, out)
    assert_bad_input(code, err, str(out), "another spec")
    code, _, err = sweep(capsys, other, out, "--resume")
    assert code == 0, err
    assert {r["sweep"] for r in SweepStore(out).read().to_pylist()} == {"other"}


def test_the_same_spec_resumes_from_a_moved_spec_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stored: tuple[Path, Path]
) -> None:
    _, out = stored
    moved = write_spec(tmp_path, TINY, "moved.json")
    code, out_text, err = sweep(capsys, moved, out, "--resume", "--json")
    assert code == 0, err
    assert json.loads(out_text)["skipped"] == 2


def test_two_sweeps_into_one_folder_at_once(tmp_path: Path) -> None:
    """The issue's reproduction: two different sweeps into one empty --out at once; the second is
    refused (exit 2) while the first holds the folder, which then holds the first sweep's cells only."""
    out = tmp_path / "out"
    # six 2-s solves on one worker: longer than the second command's start, however fast the policies
    first = start_cli("sweep", str(write_spec(tmp_path, solving_spec())), "--out", str(out), "--workers", "1")
    try:
        deadline = time.monotonic() + 120
        while not (out / "_sweep.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = run_cli("sweep", str(write_spec(tmp_path, TINY, "tiny.json")), "--out", str(out), "--workers", "1")
        assert first.poll() is None, "the first sweep ended before the second started: not concurrent"
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("\n") == 1 and "another optsched sweep is writing" in second.stderr
    finally:
        _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    rows = SweepStore(out).read().to_pylist()
    assert {r["sweep"] for r in rows} == {"solving"}
    assert json.loads((out / "_sweep.json").read_text())["spec"]["name"] == "solving"


def test_the_lock_ends_with_the_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep killed with ``kill -9`` leaves no lock: the folder resumes at once."""
    spec, out = write_spec(tmp_path, slow_spec()), tmp_path / "out"
    proc = start_cli("sweep", str(spec), "--out", str(out), "--workers", "1")
    wait_for_parts(out, 1, proc)
    proc.kill()
    proc.communicate(timeout=60)
    code, _, err = sweep(capsys, spec, out, "--resume")
    assert code == 0, err


# --------------------------------------------------------------------------- damage


def _damage(part: Path, how: str, tmp_path: Path) -> None:
    if how == "truncated":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif how == "empty":
        part.write_bytes(b"")
    elif how == "garbage":
        part.write_bytes(b"garbage\n" * 10)
    elif how == "symlink":
        outside = tmp_path / "outside.parquet"
        outside.write_bytes(part.read_bytes())
        part.unlink()
        part.symlink_to(outside)
    elif how == "schema":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": [1, 2]}), part)
    elif how == "folder":
        part.unlink()
        part.mkdir()


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "symlink", "schema", "folder"])
def test_a_damaged_part_file_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stored: tuple[Path, Path], how: str
) -> None:
    spec, out = stored
    part = part_files(out)[0]
    _damage(part, how, tmp_path)
    code, _, err = run(capsys, "sweep-report", out)
    assert_bad_input(code, err, part.name)
    code, _, err = sweep(capsys, spec, out, "--resume")
    assert_bad_input(code, err, part.name)


@pytest.mark.parametrize("text", ["{", "", "[]", '{"spec": 3}', '"x"', "\x00"])
def test_a_malformed_sweep_json_names_the_file(
    capsys: pytest.CaptureFixture[str], stored: tuple[Path, Path], text: str
) -> None:
    spec, out = stored
    (out / "_sweep.json").write_text(text)
    code, _, err = run(capsys, "sweep-report", out)
    assert_bad_input(code, err, "_sweep.json")
    code, _, err = sweep(capsys, spec, out, "--resume")
    assert_bad_input(code, err, "_sweep.json")
    assert (out / "_sweep.json").read_text() == text


def test_read_meta_refuses_a_link(tmp_path: Path, stored: tuple[Path, Path]) -> None:
    _, out = stored
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes((out / "_sweep.json").read_bytes())
    (out / "_sweep.json").unlink()
    (out / "_sweep.json").symlink_to(elsewhere)
    with pytest.raises(StoreError, match="_sweep.json: not a regular file"):
        SweepStore(out).read_meta()


def test_out_at_a_dangling_symbolic_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.symlink_to(tmp_path / "nowhere")
    code, _, err = sweep(capsys, write_spec(tmp_path, TINY), out)
    assert_bad_input(code, err, str(out), "dangling")
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()


# --------------------------------------------------------------------------- the driver's death


def _alive(pids: list[int]) -> list[int]:
    """The pids that still run (a zombie does not)."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


def test_workers_die_with_a_killed_driver(tmp_path: Path) -> None:
    """The issue's reproduction: ``kill -9`` of the driver; its workers and the resource tracker
    end within a few seconds."""
    out = tmp_path / "out"
    proc = start_cli("sweep", str(write_spec(tmp_path, slow_spec())), "--out", str(out), "--workers", "2")
    try:
        wait_for_parts(out, 1, proc)
        children = [pid for pid, _ in descendants(proc.pid)]
        assert pool_workers(proc.pid), descendants(proc.pid)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(children)
    for pid in left:  # do not leave them running when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, "processes outlived the killed sweep driver"


def test_sigterm_is_an_interrupt_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = write_spec(tmp_path, slow_spec())
    proc = start_cli("sweep", str(path), "--out", str(out), "--workers", "2")
    wait_for_parts(out, 1, proc)
    children = [pid for pid, _ in descendants(proc.pid)]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "a temporary file was left"
    deadline = time.monotonic() + 10
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(children)


def test_the_spec_record_replaces_a_link_and_never_writes_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "_sweep.json").symlink_to(victim)
    SweepStore(folder).write_meta({"spec": {"name": "x"}})
    assert victim.read_text() == "precious"
    assert not (folder / "_sweep.json").is_symlink()
    assert json.loads((folder / "_sweep.json").read_text()) == {"spec": {"name": "x"}}
    assert sorted(p.name for p in folder.iterdir()) == ["_sweep.json"]


def test_the_api_makes_its_folder_or_fails_before_any_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_sweep`` into a new folder creates it; into a folder whose parent is missing it raises a
    StoreError naming the folder before any cell runs (no cell's work lost at the end)."""
    from optsched.sweep import LocalPool, load_spec, run_sweep, runner

    spec = load_spec(write_spec(tmp_path, TINY))
    ran: list[object] = []
    monkeypatch.setattr(runner, "run_cells", lambda *args: ran.append(args) or {})
    with pytest.raises(StoreError, match="missing/out"):
        run_sweep(spec, tmp_path / "missing" / "out", LocalPool(workers=1), show_progress=False, log=lambda m: None)
    assert not ran
    pool = LocalPool(workers=1)
    try:
        run_sweep(spec, tmp_path / "new", pool, show_progress=False, log=lambda m: None)
    finally:
        pool.close()
    assert (tmp_path / "new").is_dir() and ran

"""The report's terminal tables: 120 columns with units on the README's main job, identical
schedules folded, only the objective's compared bounds and no "not applied" notes unless
--verbose (the JSON keeps them), --columns and --wide."""

from __future__ import annotations

import json
import time

import pytest

from optsched.cli import main
from optsched.instance import load_instance
from optsched.policies import POLICIES
from optsched.report import build_report, report_table, report_to_dict
from optsched.report.terminal import COLUMNS, DEFAULT_COLUMNS, fold_identical, parse_columns, same_batches
from optsched.schedule import Batch, Item, Schedule
from tests.support.report import serial_fcfs

UNITS = ("s", "ms", "tok/s", "req/s", "%")


def header_lines(text: str) -> list[str]:
    """The two header lines of the schedule table (the lines above its dashed rule)."""
    lines = text.splitlines()
    rule = max(k for k, line in enumerate(lines) if set(line.strip()) == {"-"})
    return lines[rule - 2 : rule]


@pytest.fixture(scope="module")
def main_job() -> object:
    """The README's main job without the solver (the table's shape does not depend on it)."""
    return build_report(load_instance("splitwise-conv-100"), time_limit=None, solve_max_requests=0)


def test_readme_main_job_fits_120_columns_with_units(capsys: pytest.CaptureFixture[str]) -> None:
    """The acceptance: `optsched report splitwise-conv-100 --time-limit 60`, piped."""
    assert main(["report", "splitwise-conv-100", "--time-limit", "60", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    units = header_lines(out)[1].split()
    assert set(UNITS) <= set(units), units
    assert "not applied" not in out and "note: bounder" not in out
    assert "policy:vllm = " in out  # vllm and its eviction-free twin run the same batches here
    assert out.count("vllm-ef") == 1


def test_every_column_has_a_unit_or_is_a_count() -> None:
    for key, column in COLUMNS.items():
        unit = column.header.split("\n")[-1].split()[-1]
        assert unit in UNITS or key in ("evictions", "batches"), (key, column.header)


def test_fold_identical_matches_replayed_schedules(main_job) -> None:
    """Every folded label runs the same batches (up to item order) and has the same objective and
    metrics; labels in different groups differ in their batches."""
    groups = fold_identical(main_job)
    found = {c[0]: c for c in main_job.candidates()}
    assert sum(len(m) for m in groups.values()) == len(found)
    for head, members in groups.items():
        for label in members[1:]:
            assert same_batches(found[head][2], found[label][2])
            assert found[head][3].metrics == found[label][3].metrics
    heads = list(groups)
    for k, a in enumerate(heads):
        for b in heads[k + 1 :]:
            assert not same_batches(found[a][2], found[b][2]), (a, b)
    assert any(m[0] == "policy:vllm" and "policy:vllm-ef" in m for m in groups.values())


def test_same_batches() -> None:
    a = Schedule("x", (Batch((Item("r0", 3), Item("r1", 1))), Batch((Item("r0", 1),), evict=("r1",))))
    permuted = Schedule("x", (Batch((Item("r1", 1), Item("r0", 3))), Batch((Item("r0", 1),), evict=("r1",))))
    other_tokens = Schedule("x", (Batch((Item("r0", 2), Item("r1", 1))), Batch((Item("r0", 1),), evict=("r1",))))
    other_start = Schedule("x", (Batch((Item("r0", 3), Item("r1", 1)), start=1.0), a.batches[1]))
    no_evict = Schedule("x", (a.batches[0], Batch((Item("r0", 1),))))
    assert same_batches(a, permuted)
    assert not same_batches(a, other_tokens)
    assert not same_batches(a, other_start)
    assert not same_batches(a, no_evict)
    assert not same_batches(a, Schedule("x", a.batches[:1]))
    renamed = Schedule("x", (Batch((Item("r0", 3), Item("r2", 1))), Batch((Item("r0", 1),), evict=("r2",))))
    assert not same_batches(a, renamed)
    moved = Schedule("x", (Batch((Item("r0", 3),)), Batch((Item("r1", 1), Item("r0", 1)), evict=("r1",))))
    assert not same_batches(a, moved)  # the same items and evictions, in other batches
    swapped = Schedule("x", (Batch((Item("r0", 1), Item("r1", 3))), Batch((Item("r0", 1),), evict=("r1",))))
    assert not same_batches(a, swapped)  # each batch's token count alike, its rows not
    evict_permuted = Schedule("x", (a.batches[0], Batch((Item("r0", 1),), evict=("r1", "r0"))))
    assert same_batches(Schedule("x", (a.batches[0], Batch((Item("r0", 1),), evict=("r0", "r1")))), evict_permuted)


def test_notes_only_when_verbose_and_uncompared_bounders_skipped(main_job) -> None:
    """The bounders whose bounds would not be compared are not run (a note in the JSON says so);
    the notes about bounders show only under --verbose."""
    data = report_to_dict(main_job)
    skipped = [n for n in data["notes"] if n.startswith("bounder ") and "not run" in n]
    assert skipped, data["notes"]  # the JSON keeps them
    assert all(b["comparable"] for b in data["bounds"])
    assert {b["source"] for b in data["bounds"]} <= {"generic", "infermax"}
    quiet = report_table(main_job)
    verbose = report_table(main_job, verbose=True)
    assert "are not compared" not in quiet and verbose.count("are not compared") == len(skipped)


def test_ttft_objective_lists_only_ttft_bounds() -> None:
    report = build_report(load_instance("splitwise-conv-100"), objective="ttft", time_limit=None, policies=["vllm"])
    bounds_part = report_table(report).split("Schedules")[0]
    listed = [b for b in report.bounds if b.comparable and b.objective == "ttft"]
    assert listed and all(b.name in bounds_part for b in listed)
    for b in report.bounds:
        if not b.comparable:
            assert f" {b.source} " not in bounds_part, b
    assert "ttft\n" not in bounds_part and "objective: ttft (s)" in bounds_part


def test_columns_and_wide(main_job, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_columns(None) == DEFAULT_COLUMNS
    assert parse_columns(None, wide=True) == tuple(COLUMNS) == parse_columns("all")
    assert parse_columns("ttft_p90, goodput") == ("ttft_p90", "goodput")
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        parse_columns("ttft_p90,nope")
    narrow = header_lines(report_table(main_job, columns=("ttft_p90",)))
    assert "TTFT" in narrow[0] and "P90 ms" in narrow[1] and "tok/s" not in narrow[1]
    wide = report_table(main_job, columns=tuple(COLUMNS), width=1000)
    assert all(COLUMNS[k].header.split("\n")[0] in wide for k in COLUMNS if k != "makespan")
    assert main(["report", "toy-4", "--columns", "nope", "--solve-max-requests", "0"]) == 2
    assert "--columns: unknown column 'nope'" in capsys.readouterr().err
    assert main(["report", "toy-4", "--wide", "--quiet", "--solve-max-requests", "0"]) == 0
    out = capsys.readouterr().out
    assert "evic-" in out and "SLO" in out
    assert main(["report", "toy-4", "--json", "--wide", "--quiet", "--solve-max-requests", "0"]) == 0
    json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--wide", "--columns", "ttft_p99"], "--columns: not with --wide"),
        (["--wide", "--columns", "all"], "--columns: not with --wide"),
        (["--policies", ""], "--policies: no policy given"),
        (["--policies", " , "], "--policies: no policy given"),
    ],
)
def test_report_options_that_would_be_dropped(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    """``--wide`` drew every column over ``--columns``; an empty ``--policies`` ran every policy."""
    assert main(["report", "toy-4", *argv, "--quiet", "--solve-max-requests", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"optsched: error: {needle}") and err.count("\n") == 1
    with pytest.raises(ValueError, match="not with --wide"):
        parse_columns("ttft_p99", wide=True)


def test_simulate_and_check_print_units(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """The key-value listings of simulate and check name each metric's unit and scale its value."""
    out_file = tmp_path / "s.json"
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(out_file)]) == 0
    listing = dict(line.rsplit(None, 1) for line in capsys.readouterr().out.splitlines()[1:-1])
    assert main(["simulate", "toy-4", "--policy", "vllm", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    assert float(listing["makespan (s)"]) == pytest.approx(metrics["makespan"], rel=1e-5)
    assert float(listing["ttft_p99 (ms)"]) == pytest.approx(1e3 * metrics["ttft_p99"], rel=1e-5)
    assert float(listing["throughput (tok/s)"]) == pytest.approx(metrics["throughput"], rel=1e-5)
    assert float(listing["goodput (req/s)"]) == pytest.approx(metrics["goodput"], rel=1e-5)
    assert listing["evictions"] == str(metrics["evictions"])
    assert main(["check", "toy-4", str(out_file)]) == 0
    assert "mean_tpot (ms)" in capsys.readouterr().out


def slow_fcfs(instance):
    """The test-only serial FCFS policy, 0.4 s slower (a policy phase that uses its time share)."""
    time.sleep(0.4)
    return serial_fcfs(instance)


def test_policies_stop_at_their_share_of_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """No policy starts after half the time and the one running then is stopped: the rest are skipped
    (noted), the report goes on."""
    names = [f"zz-slow-{k}" for k in range(12)]
    for name in names:
        monkeypatch.setitem(POLICIES, name, "tests.report.test_report_terminal:slow_fcfs")
    report = build_report(load_instance("toy-4"), time_limit=6.0, policies=names, solve_max_requests=0)
    status = [p.status for p in report.policies]
    assert not report.partial and status[0] == "ok" and status[-1] == "skipped", status
    assert report.phase_times["policies"] < 3.0 + 1.0  # half of 6 s, plus the policy running then
    assert any("share of the time limit" in n for n in report.notes)
    skipped = [p.message for p in report.policies if p.status == "skipped"]
    assert all(m == "not run (time share)" or m.startswith("stopped after") for m in skipped), skipped

"""``--requests-out``: one row per request (CSV or Parquet), and the JSON's percentiles and goodput
equal an independent numpy computation from that file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from optsched.cli import main
from optsched.policies import policy_names
from optsched.request_table import COLUMNS

SLO_TTFT, SLO_TPOT = 0.3, 0.02


def _read_csv(path: Path) -> dict[str, list[str]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and list(rows[0]) == [name for name, _ in COLUMNS]
    return {name: [row[name] for row in rows] for name, _ in COLUMNS}


def _floats(cells: list[str]) -> np.ndarray:
    return np.array([float(c) for c in cells if c != ""])


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out else {}


def _check_against_file(metrics: dict, table: dict[str, list[str]]) -> None:
    for q in ("ttft", "tpot", "latency", "queue"):
        values = _floats(table[q])
        for p in (50, 90, 95, 99):
            assert metrics[f"{q}_p{p}"] == np.percentile(values, p), (q, p)
        assert metrics[f"{q}_max"] == values.max()
    ttft, tpot = table["ttft"], table["tpot"]
    # SLOs from --slo-ttft / --slo-tpot, judged again here from the file's columns.
    met = [
        float(a) <= SLO_TTFT * (1 + 1e-9) and (b == "" or float(b) <= SLO_TPOT * (1 + 1e-9)) for a, b in zip(ttft, tpot)
    ]
    assert [c == "true" for c in table["slo_met"]] == met
    assert metrics["goodput"] == sum(met) / metrics["makespan"]
    assert max(_floats(table["finish"])) == metrics["makespan"]


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_on_splitwise_300_matches_numpy(capsys, tmp_path, data_dir, policy):
    out = tmp_path / "requests.csv"
    code, res = _run(
        capsys,
        "simulate",
        str(data_dir / "traces" / "splitwise_conv.csv"),
        "--first",
        "300",
        "--cost-model",
        "llama2-7b-a100",
        "--kv-capacity",
        "100000",
        "--max-running",
        "128",
        "--slo-ttft",
        str(SLO_TTFT),
        "--slo-tpot",
        str(SLO_TPOT),
        "--policy",
        policy,
        "--requests-out",
        str(out),
    )
    assert code == 0
    table = _read_csv(out)
    assert len(table["id"]) == 300 and table["id"][:2] == ["row0", "row1"]
    _check_against_file(res["metrics"], table)


def test_parquet_equals_csv(capsys, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="Parquet output needs pyarrow (optsched[parquet])")
    csv_path, pq_path = tmp_path / "r.csv", tmp_path / "r.parquet"
    for path in (csv_path, pq_path):
        assert (
            main([
                "simulate",
                "toy-4",
                "--policy",
                "sarathi",
                "--requests-out",
                str(path),
                "--clip-output",
                "1",
                "--slo-ttft",
                "0.01",
            ])
            == 0
        )
    capsys.readouterr()
    table = pq.read_table(pq_path)
    assert table.column_names == [name for name, _ in COLUMNS]
    data = table.to_pydict()
    text = _read_csv(csv_path)
    assert data["tpot"] == [None] * 4 and text["tpot"] == [""] * 4  # O = 1: undefined -> null / empty
    for name, kind in COLUMNS:
        if kind == "float64":
            assert [None if c == "" else float(c) for c in text[name]] == data[name]
        elif kind == "int64":
            assert [int(c) for c in text[name]] == data[name]
        elif kind == "bool":
            assert [c == "true" for c in text[name]] == data[name]
        else:
            assert text[name] == data[name]


def test_check_solve_report_write_the_table(capsys, tmp_path):
    sched = tmp_path / "s.json"
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(sched)]) == 0
    capsys.readouterr()
    code, res = _run(capsys, "check", "toy-4", str(sched), "--requests-out", str(tmp_path / "c.csv"))
    assert code == 0 and len(_read_csv(tmp_path / "c.csv")["id"]) == 4
    code, res = _run(
        capsys,
        "solve",
        "toy-4",
        "--problem",
        "infermax",
        "--time-limit",
        "20",
        "--requests-out",
        str(tmp_path / "s.csv"),
    )
    assert code == 0
    table = _read_csv(tmp_path / "s.csv")
    assert max(_floats(table["finish"])) == res["metrics"]["makespan"]
    code, res = _run(
        capsys,
        "report",
        "toy-4",
        "--time-limit",
        "30",
        "--quiet",
        "--solve-max-requests",
        "0",
        "--requests-out",
        str(tmp_path / "r.csv"),
    )
    assert code == 0
    table = _read_csv(tmp_path / "r.csv")
    assert max(_floats(table["finish"])) == res["best"]["metrics"]["makespan"]
    assert res["best"]["metrics"]["ttft_p99"] == np.percentile(_floats(table["ttft"]), 99)


def test_bad_requests_out_is_exit_2_before_any_work(capsys, tmp_path):
    assert main(["simulate", "toy-4", "--policy", "vllm", "--requests-out", str(tmp_path / "r.txt")]) == 2
    assert "use .csv or .parquet" in capsys.readouterr().err
    assert main(["simulate", "toy-4", "--policy", "all", "--requests-out", str(tmp_path / "r.csv")]) == 2
    assert "--requests-out: needs a single --policy" in capsys.readouterr().err
    assert main(["check", "toy-4", "x.json", "--requests-out", str(tmp_path / "no" / "r.csv")]) == 2
    assert not (tmp_path / "r.txt").exists()

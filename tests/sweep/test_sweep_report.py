"""``optsched sweep-report``: the Pareto front, the summary, and the HTML page in headless Chromium."""

from __future__ import annotations

import itertools
import json
import random

import pytest

pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.cli import main
from optsched.sweep.report import pareto_front
from tests.support.chromium import run_chromium
from tests.support.sweep import SMALL_SPEC, write_spec


def test_pareto_front_is_the_set_of_undominated_points() -> None:
    rng = random.Random(3)
    for _ in range(200):
        points = [(rng.randint(0, 6) / 2, rng.randint(0, 6) / 3) for _ in range(rng.randint(1, 9))]
        dominated = {p for p, q in itertools.product(points, points) if q != p and q[0] <= p[0] and q[1] >= p[1]}
        assert sorted(set(pareto_front(points))) == sorted(set(points) - dominated), points


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A small grid plus a capacity search in one folder."""
    root = tmp_path_factory.mktemp("sweep")
    spec = {
        **SMALL_SPEC,
        "run": {**SMALL_SPEC["run"], "solve": [{"problem": "infermax", "time_limit": 5}]},
        "workloads": [{"instance": "toy-4"}],
    }
    assert main(["sweep", str(write_spec(root, spec)), "--out", str(root / "out"), "--no-progress"]) == 0
    cap = {
        "name": "cap",
        "workloads": [{"instance": "poisson-mixed-100", "first": 20}],
        "run": {"simulate": ["vllm", "sarathi"]},
        "capacity": {"low": 0.5, "high": 8, "tolerance": 0.2},
    }
    assert (
        main([
            "sweep",
            str(write_spec(root, cap, "cap.json")),
            "--out",
            str(root / "out"),
            "--resume",
            "--capacity",
            "--slo-ttft-p99",
            "0.4",
            "--no-progress",
        ])
        == 0
    )
    return root / "out"


def test_summary_json(sweep_dir, capsys) -> None:
    assert main(["sweep-report", str(sweep_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["by_kind_status"]["simulate/ok"] >= 12 and len(info["capacity"]) == 3
    assert sorted(r["policy"] for r in info["capacity"]) == ["ceiling", "sarathi", "vllm"]  # and the proven ceiling
    front = info["pareto"]["toy-4"]
    key = "ttft_p99"
    assert front and all(p["policy"] for p in front)
    xs = [p[key] for p in sorted(front, key=lambda p: p[key])]
    ys = [p["throughput"] for p in sorted(front, key=lambda p: p[key])]
    assert ys == sorted(ys), "along the front, more latency must buy more throughput"
    assert all(y1 < y2 for (x1, y1), (x2, y2) in zip(zip(xs, ys), zip(xs[1:], ys[1:])) if x1 < x2)


def test_terminal_summary_gives_capacities_in_requests_and_tokens_per_second(sweep_dir, capsys) -> None:
    """Each capacity line of the terminal summary: rate scale, req/s and tokens/s of the scaled
    workload (its requests and tokens over the span of its arrivals), as ``sweep`` prints them."""
    from optsched.instance import load_instance
    from optsched.workload import WorkloadTransforms, apply_transforms

    base = apply_transforms(load_instance("poisson-mixed-100", check_capacity=False), WorkloadTransforms(first=20))
    arrivals = [r.arrival for r in base.requests]
    tokens = sum(r.prompt_tokens + r.output_tokens for r in base.requests)
    assert main(["sweep-report", str(sweep_dir)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("capacity ")]
    assert len(lines) == 3 and any(" ceiling: " in x for x in lines)
    found = [x for x in lines if "(below_range)" not in x]
    assert found and all("rate scale -, -, - (below_range)" in x for x in lines if x not in found)
    for line in found:
        scale = float(line.split("rate scale ")[1].split("x")[0])
        span = (max(arrivals) - min(arrivals)) / scale
        assert f"{len(arrivals) / span:.4g} req/s" in line, line
        assert f"{tokens / span:.4g} tokens/s" in line, line


def test_part_file_without_the_optional_columns_reads_them_as_null(sweep_dir, tmp_path) -> None:
    import pyarrow.parquet as pq

    from optsched.sweep.report import load_rows

    parts = sorted(sweep_dir.glob("part-*.parquet"))
    (tmp_path / "_sweep.json").write_text((sweep_dir / "_sweep.json").read_text())
    table = pq.read_table(parts[0])
    pq.write_table(table.drop_columns(["req_per_s", "tokens_per_s"]), tmp_path / parts[0].name)
    rows = load_rows(tmp_path)
    assert rows and all(r["req_per_s"] is None and r["tokens_per_s"] is None for r in rows)
    pq.write_table(table.drop_columns(["req_per_s", "wall_time"]), tmp_path / parts[0].name)
    with pytest.raises(Exception, match="another schema"):
        load_rows(tmp_path)


def test_bad_folders(tmp_path, capsys) -> None:
    assert main(["sweep-report", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["sweep-report", str(tmp_path)]) == 2
    assert "holds no sweep rows" in capsys.readouterr().err


def test_html_renders_in_headless_chromium(sweep_dir, tmp_path) -> None:
    page = tmp_path / "sweep.html"
    assert main(["sweep-report", str(sweep_dir), "--html", str(page)]) == 0
    rc, dom, console = run_chromium(page, tmp_path, "--dump-dom")
    assert rc == 0 and console == [], console
    # Pareto plots (toy-4, poisson-mixed-100-20), the capacity bars, the gap heat map
    assert dom.count("<svg") == 4, dom.count("<svg")
    for text in ("Pareto front", "Capacity per configuration", "Gap to the proven bound per cell", "solver:infermax"):
        assert text in dom, text
    shot = tmp_path / "shot.png"
    rc, _, console = run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,3000")
    assert rc == 0 and console == [] and shot.stat().st_size > 20_000

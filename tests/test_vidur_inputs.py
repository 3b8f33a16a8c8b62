"""The offline inputs of the Vidur comparison (``tests/benchmarks/vidur_inputs.py``)."""

from __future__ import annotations

import csv
import io
import lzma
import math
from pathlib import Path

import pytest

from optsched.costmodel import load_cost_model
from tests.benchmarks.bench_vidur import optsched_figures, vidur_figures
from tests.benchmarks.vidur_inputs import (
    DECODE_BIAS_MS,
    DECODE_PER_KV_MS,
    PREFILL_BIAS_MS,
    PREFILL_PER_TOKEN_SQ_MS,
    attention_csv_xz,
    write_dataset,
    write_trace,
)


def test_stand_in_coefficients_are_the_cost_models_in_milliseconds() -> None:
    model = load_cost_model("llama2-7b-a100")
    assert math.isclose(PREFILL_BIAS_MS, model.prefill.bias * 1000)
    assert math.isclose(PREFILL_PER_TOKEN_SQ_MS, model.prefill.per_token_sq * 1000)
    assert math.isclose(DECODE_BIAS_MS, model.decode.bias * 1000)
    assert math.isclose(DECODE_PER_KV_MS, model.decode.per_kv * 1000)


def test_attention_table_prices_prefill_chunks_and_decode_batches() -> None:
    rows = list(csv.DictReader(io.StringIO(lzma.decompress(attention_csv_xz()).decode())))
    prefill = [r for r in rows if r["prefill_chunk_size"] != "0"]
    decode = [r for r in rows if r["prefill_chunk_size"] == "0"]
    assert len(prefill) == 17 * 128 and len(decode) == 128 * 16
    assert {(r["n_embd"], r["n_q_head"], r["n_kv_head"], r["block_size"]) for r in rows} == {("4096", "32", "32", "16")}
    row = next(r for r in prefill if r["prefill_chunk_size"] == "4096" and r["kv_cache_size"] == "256")
    assert math.isclose(float(row["time_stats.attn_prefill.median"]), 0.0926 + 1.6773e-07 * 4096**2)
    row = next(r for r in decode if r["batch_size"] == "128" and r["kv_cache_size"] == "4096")
    assert math.isclose(float(row["time_stats.attn_decode.median"]), 0.01921 + 8.513e-06 * 128 * 4096)
    assert {r["time_stats.attn_kv_cache_save.median"] for r in rows} == {"0.0"}


def test_trace_keeps_arrivals_and_lengths_in_the_trace_replay_layout(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.25,396,109\n")
    assert write_trace(source, tmp_path / "out.csv") == 2
    assert (tmp_path / "out.csv").read_text().splitlines() == [
        "Date,Time,PromptTokenCount,CompletionTokenCount",
        "2023-08-21,0.0,374,44",
        "2023-08-21,4.25,396,109",
    ]


def test_dataset_is_one_snapshot_named_by_refs_main(tmp_path: Path) -> None:
    snapshot = write_dataset(tmp_path, "org/name", {"config.json": b"{}", "a.csv.xz": b"x"})
    storage = tmp_path / "datasets--org--name"
    assert snapshot == storage / "snapshots" / (storage / "refs" / "main").read_text()
    assert sorted(p.name for p in snapshot.iterdir()) == ["a.csv.xz", "config.json"]


def test_figures_are_read_from_each_tools_output(tmp_path: Path) -> None:
    table = "makespan (s)        3754.14\nmean_latency (s)    236.233\n"
    table += "mean_ttft (ms)      221445\nevictions           3472\nbatches             76095\n"
    assert optsched_figures(table) == {
        "makespan s": 3754.14,
        "mean latency s": 236.233,
        "preemptions": 3472.0,
        "batches": 76095.0,
    }
    run_dir = tmp_path / "2026-11-28_10-56-40"
    run_dir.mkdir()
    (run_dir / "request_metrics.csv").write_text("Request Id,request_e2e_time,request_num_restarts\n0,1.5,0\n1,2.5,2\n")
    (run_dir / "batch_metrics.csv").write_text("Batch Id,batch_size\n0,1\n1,2\n2,2\n")
    figures = vidur_figures(tmp_path, "INFO simulator.py:79] Simulation ended at: 3901.65s\n")
    assert figures == {"preemptions": 2.0, "mean latency s": pytest.approx(2.0), "makespan s": 3901.65, "batches": 3.0}

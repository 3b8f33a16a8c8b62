"""Offline inputs for Vidur 0.0.26 (used by ``tests/benchmarks/vidur_env.sh``; standard library only).

Vidur 0.0.26 downloads its operator profiles from a dataset hub at run time and reads traces in its
own column layout. This script writes, under ``OUT``:

- ``splitwise_conv.csv``: the splitwise_conv trace of ``../shared/data/traces`` with the columns
  renamed to the trace-replay generator's ``Date,Time,PromptTokenCount,CompletionTokenCount``
  (one date, ``DATE``; arrival seconds and token counts unchanged).
- ``cache/``: Vidur's cache directory holding the two profile "datasets" as a local hub cache
  (``profiling_data/compute`` and ``profiling_data/network``, each with ``refs/main`` and one
  snapshot), so that ``snapshot_download`` resolves them with ``HF_HUB_OFFLINE=1``:

  - compute: ``mlp.csv.xz``, Vidur's measured A100 Llama-2-7B non-attention operator table
    (``../shared/data/vidur_profiling/mlp_a100_meta-llama_Llama-2-7b-hf.csv``), and
    ``attention.csv.xz``, a stand-in attention table (no measured one is published) computed from
    the InferMax coefficients of optsched's ``llama2-7b-a100`` cost model, in milliseconds per layer:
    prefill of a chunk of ``c`` tokens ``b_p + a_p c^2``, decode of ``B`` requests with mean context
    ``K`` ``b_d + a_d B K``, KV-cache save 0.
  - network: only its ``config.json`` (one replica at TP 1 and PP 1 reads no network table).

Usage::

    python tests/benchmarks/vidur_inputs.py SHARED_DATA OUT
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import lzma
import shutil
import sys
from pathlib import Path

DATE = "2023-08-21"
MODEL = "meta-llama/Llama-2-7b-hf"
DEVICE = "a100"
NETWORK_DEVICE = "a100_pairwise_nvlink"
COMPUTE_DATASET = "optsched-local/vidur-a100-llama-2-7b"
NETWORK_DATASET = "optsched-local/vidur-a100-pairwise-nvlink"
MLP_CSV = "vidur_profiling/mlp_a100_meta-llama_Llama-2-7b-hf.csv"
TRACE_CSV = "traces/splitwise_conv.csv"

# models/llama2-7b-a100.toml in milliseconds per layer (InferMax public code, 7B set).
PREFILL_BIAS_MS = 0.0926
PREFILL_PER_TOKEN_SQ_MS = 1.6773e-07
DECODE_BIAS_MS = 0.01921
DECODE_PER_KV_MS = 8.513e-06

# Llama-2-7B shape at TP 1 and the KV block size of the benchmark.
N_EMBD, N_HEAD, BLOCK_SIZE = 4096, 32, 16
MAX_TOKENS, KV_STEP, CHUNK_STEP, MAX_BATCH = 4096, 256, 32, 128


def write_trace(source: Path, out: Path) -> int:
    """Copy the splitwise trace into the trace-replay layout; return the number of rows."""
    rows = 0
    with source.open(newline="") as fin, out.open("w", newline="") as fout:
        reader = csv.DictReader(fin)
        writer = csv.writer(fout)
        writer.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for row in reader:
            writer.writerow([DATE, row["arrived_at"], row["num_prefill_tokens"], row["num_decode_tokens"]])
            rows += 1
    return rows


def attention_row(batch: int, kv: int, chunk: int) -> dict[str, float | int]:
    """One row of the stand-in attention table (times in milliseconds per layer)."""
    prefill = PREFILL_BIAS_MS + PREFILL_PER_TOKEN_SQ_MS * chunk * chunk if chunk else 0.0
    decode = 0.0 if chunk else DECODE_BIAS_MS + DECODE_PER_KV_MS * batch * kv
    return {
        "n_embd": N_EMBD,
        "n_q_head": N_HEAD,
        "n_kv_head": N_HEAD,
        "block_size": BLOCK_SIZE,
        "num_tensor_parallel_workers": 1,
        "batch_size": batch,
        "kv_cache_size": kv,
        "prefill_chunk_size": chunk,
        "time_stats.attn_prefill.median": prefill,
        "time_stats.attn_decode.median": decode,
        "time_stats.attn_kv_cache_save.median": 0.0,
    }


def attention_csv_xz() -> bytes:
    """The stand-in attention table as xz-compressed CSV: the prefill grid (batch 1), the decode grid (chunk 0)."""
    rows = [
        attention_row(1, kv, chunk)
        for kv in range(0, MAX_TOKENS + 1, KV_STEP)
        for chunk in range(CHUNK_STEP, MAX_TOKENS + 1, CHUNK_STEP)
    ]
    rows += [attention_row(b, kv, 0) for b in range(1, MAX_BATCH + 1) for kv in range(KV_STEP, MAX_TOKENS + 1, KV_STEP)]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return lzma.compress(text.getvalue().encode())


def write_dataset(hub_cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """Lay ``files`` out as the one snapshot of dataset ``repo_id`` in a hub cache; return its folder."""
    digest = hashlib.sha1(b"".join(files[name] for name in sorted(files))).hexdigest()
    storage = hub_cache / ("datasets--" + repo_id.replace("/", "--"))
    shutil.rmtree(storage, ignore_errors=True)
    snapshot = storage / "snapshots" / digest
    snapshot.mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(digest)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    return snapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared_data", type=Path, help="the shared data folder (../shared/data)")
    parser.add_argument("out", type=Path, help="folder to write the trace and the cache into")
    args = parser.parse_args()
    trace, mlp = args.shared_data / TRACE_CSV, args.shared_data / MLP_CSV
    for path in (trace, mlp):
        if not path.is_file():
            sys.exit(f"vidur-inputs: {path} not found")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = write_trace(trace, args.out / "splitwise_conv.csv")
    compute = {
        "config.json": json.dumps({"model": MODEL, "device_sku": DEVICE}).encode(),
        "mlp.csv.xz": lzma.compress(mlp.read_bytes()),
        "attention.csv.xz": attention_csv_xz(),
    }
    network = {"config.json": json.dumps({"sku": NETWORK_DEVICE}).encode()}
    cache = args.out / "cache" / "profiling_data"
    write_dataset(cache / "compute", COMPUTE_DATASET, compute)
    write_dataset(cache / "network", NETWORK_DATASET, network)
    print(f"vidur-inputs: {rows} requests -> {args.out / 'splitwise_conv.csv'}; profiles -> {cache}")


if __name__ == "__main__":
    main()

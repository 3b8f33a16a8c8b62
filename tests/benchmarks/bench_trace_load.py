"""Benchmark: loading a large trace (run on demand; goals: 5 M BurstGPT rows in < 10 s, < 2 GB; a
1 M-row trace of every layout in at most ``pandas.read_csv``'s time of the same file).

    nice -n 10 python tests/benchmarks/bench_trace_load.py [--rows 5000000] [--file PATH] [--methods ...]
    python tests/benchmarks/bench_trace_load.py --rows 1000000 --layout all --methods optsched pandas --repeat 3

Writes a seeded trace of ``--layout`` (default ``burstgpt``: ``Timestamp,Model,Request tokens,
Response tokens,Total tokens,Log Type``, about 2 % failed rows with 0 response tokens; ``vidur``,
``vidur-lengths``, ``azure`` and ``azure-multimodal`` with date-times, ``splitwise-sim``,
``mooncake`` JSON Lines; ``all``: each in turn; gzipped with ``--gzip``) unless ``--file`` names
one, then runs every method in a fresh Python process, ``--repeat`` times alternating the methods
(``--against DIR``: also ``optsched`` as a checkout of another commit in DIR has it), and prints
each run's wall time, its CPU time (user + system, imports included) and peak resident memory
(``ru_maxrss`` of the child), with the machine's load average before and after. The optsched
packages timed are byte-compiled first (``python -m compileall``), as an installed package is and
as pandas is: a process started with ``PYTHONDONTWRITEBYTECODE`` otherwise compiles optsched's
sources at every start.

- ``optsched``: ``optsched.workload.load_trace`` as shipped (pyarrow fast path when installed),
  down to the :class:`~optsched.instance.Instance` of 5 M requests;
- ``optsched-stdlib``: the same with the pyarrow path turned off (the standard-library reader);
- ``pandas``: ``pandas.read_csv`` of the whole file (``read_json(lines=True)`` for JSON Lines),
  imports included, as ``optsched``'s are (pandas is not a dependency: install it to compare);
- ``parse-stdlib``, ``parse-pyarrow``, ``parse-pandas``: parsing the three BurstGPT columns only
  (no requests built), to compare the parsers themselves.

Results go into docs/performance.md, section "Loading traces".
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

METHODS = {
    "optsched": """
from optsched.workload import load_trace
inst = load_trace(PATH, "llama2-7b-a100")
n = len(inst.requests)
""",
    "optsched-stdlib": """
from optsched.workload import load_trace, loaders
loaders.arrow_available = lambda: False
inst = load_trace(PATH, "llama2-7b-a100")
n = len(inst.requests)
""",
    "pandas": """
import pandas as pd
frame = pd.read_json(PATH, lines=True) if ".jsonl" in PATH else pd.read_csv(PATH)
n = len(frame)
""",
    "parse-stdlib": """
import csv
t, p, o = [], [], []
with open(PATH, newline="", encoding="utf-8-sig") as fh:
    rows = csv.reader(fh)
    next(rows)
    for row in rows:
        t.append(float(row[0])); p.append(int(row[2])); o.append(int(row[3]))
n = len(t)
""",
    "parse-pyarrow": """
import pyarrow.csv as pacsv
table = pacsv.read_csv(PATH, convert_options=pacsv.ConvertOptions(
    include_columns=["Timestamp", "Request tokens", "Response tokens"]))
n = table.num_rows
""",
    "parse-pandas": """
import pandas as pd
frame = pd.read_csv(PATH, usecols=["Timestamp", "Request tokens", "Response tokens"])
n = len(frame)
""",
}

RUNNER = """
import resource, sys, time
PATH = sys.argv[1]
t0 = time.perf_counter()
{code}
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_SELF)
print(n, wall, use.ru_maxrss / 1024, use.ru_utime + use.ru_stime)
"""


def _rows(rng: np.random.Generator, n: int, t: float, layout: str) -> list[str]:
    """n rows of ``layout`` from time t: Poisson arrivals (mean gap 0.05 s)."""
    times = t + np.cumsum(rng.exponential(0.05, n))
    req = rng.integers(1, 4000, n).tolist()
    if layout == "burstgpt":  # two models, ~2 % failed rows
        resp = np.where(rng.random(n) < 0.02, 0, rng.integers(1, 1000, n)).tolist()
        model = np.where(rng.random(n) < 0.7, "ChatGPT", "GPT-4").tolist()
        return [
            f"{a:.3f},{m},{p},{o},{p + o},Conversation log\n" for a, m, p, o in zip(times.tolist(), model, req, resp)
        ]
    resp = rng.integers(1, 1000, n).tolist()
    if layout == "vidur":
        return [f"{a:.6f},{p},{o}\n" for a, p, o in zip(times.tolist(), req, resp)]
    if layout == "vidur-lengths":
        return [f"{p},{o}\n" for p, o in zip(req, resp)]
    if layout == "splitwise-sim":
        return [f"{k},2,0,{a:.6f},1,{p},{o}\n" for k, (a, p, o) in enumerate(zip(times.tolist(), req, resp))]
    if layout in ("azure", "azure-multimodal"):  # 7 fractional digits, as the Azure traces
        stamps = (np.datetime64("2023-11-16T18:00:00", "ns") + (times * 1e9).astype("timedelta64[ns]")).astype(str)
        images = rng.integers(0, 3, n).tolist() if layout == "azure-multimodal" else None
        return [
            f"{d.replace('T', ' ')[:27]},{'' if images is None else f'{images[k]},'}{p},{o}\n"
            for k, (d, p, o) in enumerate(zip(stamps.tolist(), req, resp))
        ]
    return [  # mooncake
        f'{{"timestamp": {int(a * 1000)}, "input_length": {p}, "output_length": {o}, "hash_ids": [{p}, {o}]}}\n'
        for a, p, o in zip(times.tolist(), req, resp)
    ]


HEADERS = {
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
    "vidur": "arrived_at,num_prefill_tokens,num_decode_tokens\n",
    "vidur-lengths": "num_prefill_tokens,num_decode_tokens\n",
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens\n",
    "azure-multimodal": "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n",
    "splitwise-sim": "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n",
    "mooncake": "",
}


def write_trace(path: Path, rows: int, seed: int = 0, layout: str = "burstgpt") -> None:
    """A seeded trace of ``layout`` (:data:`HEADERS`), gzipped when ``path`` ends in ``.gz``."""
    rng = np.random.default_rng(seed)
    chunk = 500_000
    t = 0.0
    with gzip.open(path, "wt", compresslevel=6) if path.suffix == ".gz" else open(path, "w") as fh:
        fh.write(HEADERS[layout])
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            lines = _rows(rng, n, t, layout)
            t += 0.05 * n
            fh.writelines(lines)


def byte_compile(packages: list[Path]) -> None:
    """Write the ``.pyc`` files of ``packages`` (an installation's), quietly."""
    for package in packages:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, stdout=subprocess.DEVNULL)


def run(method: str, path: Path, code: Path | None = None) -> tuple[int, float, float, float] | str:
    """One run of ``method`` in a fresh process: the ``optsched`` of ``code`` (a checkout) when given
    (started outside the repository, whose own ``optsched`` a child started in it would import)."""
    env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER.format(code=METHODS[method]), str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=None if code is None else tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[-1]
    n, wall, rss, cpu = proc.stdout.split()
    return int(n), float(wall), float(rss), float(cpu)


def bench(path: Path, methods: list[str], repeat: int, against: Path | None = None) -> None:
    """Every method ``repeat`` times, alternating (with ``against``: ``optsched`` of that checkout
    after each method); each run's line and each method's median wall."""
    labels = [*methods, *([f"optsched@{against.name}"] if against is not None else [])]
    walls: dict[str, list[float]] = {m: [] for m in labels}
    for _ in range(repeat):
        for method in labels:
            code = against if method.startswith("optsched@") else None
            out = run("optsched" if code is not None else method, path, code)
            if isinstance(out, str):
                print(f"{method:16s} not run: {out}")
                continue
            n, wall, rss, cpu = out
            walls[method].append(wall)
            print(
                f"{method:16s} {n:>10,} rows  {wall:7.2f} s wall  {cpu:7.2f} s CPU (with imports)  peak {rss:7.0f} MiB"
            )
    for method, values in walls.items():
        if values:
            print(f"{method:16s} median {float(np.median(values)):.2f} s wall over {len(values)} run(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--file", type=Path, help="an existing trace (default: write one of --layout)")
    ap.add_argument("--layout", default="burstgpt", choices=[*HEADERS, "all"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--repeat", type=int, default=1, help="runs of each method, alternating")
    ap.add_argument("--gzip", action="store_true", help="write the trace gzipped (``.csv.gz``, ``.jsonl.gz``)")
    ap.add_argument("--against", type=Path, help="also run the optsched of this checkout (another commit)")
    ap.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # write the trace to this path and stop
    args = ap.parse_args()
    if args.write is not None:
        write_trace(args.write, args.rows, layout=args.layout)
        return
    spec = importlib.util.find_spec("optsched")
    own = [Path(spec.origin).parent] if spec is not None and spec.origin is not None else []
    byte_compile([*own, *([args.against / "optsched"] if args.against is not None else [])])
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.file is not None:
            bench(args.file, args.methods, args.repeat, args.against)
        for layout in [] if args.file is not None else list(HEADERS) if args.layout == "all" else [args.layout]:
            path = Path(tmp) / f"{layout}.{'jsonl' if layout == 'mooncake' else 'csv'}{'.gz' if args.gzip else ''}"
            t0 = time.perf_counter()
            # Written by a child: a child's peak memory (ru_maxrss) counts its parent's at the fork.
            writer = [sys.executable, __file__, "--write", str(path), "--rows", str(args.rows), "--layout", layout]
            subprocess.run(writer, check=True)
            size = path.stat().st_size / 2**20
            print(f"{layout}: wrote {args.rows:,} rows ({size:.0f} MiB) in {time.perf_counter() - t0:.1f} s")
            bench(path, args.methods, args.repeat, args.against)
            path.unlink()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

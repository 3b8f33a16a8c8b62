"""Benchmark: `optsched report` on a 300-request slice of splitwise_conv with arrivals (goal < 5 min).

Run on demand (not collected by pytest):

    python tests/benchmarks/bench_report.py [--requests 300] [--time-limit 290] [--screenshot PNG]

Runs the real command line in a subprocess (every registered policy, generic bounds, bounders; the
exact solver is skipped by its size limit), writes the HTML next to the screenshot in a temporary
folder, prints the wall time and the report's summary, and, when Chromium is installed, renders the
page to a PNG.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: ``<repo>/../shared/data`` or the same under any ancestor of the repo (worktrees).
TRACE = next(
    (
        base / "shared" / "data" / "traces" / "splitwise_conv.csv"
        for base in REPO.parents
        if (base / "shared" / "data").is_dir()
    ),
    REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv",
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def screenshot(page: Path, png: Path, height: int) -> None:
    """Render ``page`` with headless Chromium (fresh profile) into ``png``."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("chromium not installed: no screenshot (apt-get install -y chromium)")
        return
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                exe,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size=1200,{height}",
                f"--screenshot={png.resolve()}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    trim_bottom(png)
    print(f"screenshot: {png}")


def trim_bottom(png: Path) -> None:
    """Cut the blank space below the page's last line (the window is taller than the page)."""
    import numpy as np
    from PIL import Image

    image = Image.open(png).convert("RGB")
    rows = np.flatnonzero((np.asarray(image) < 250).any(axis=(1, 2)))
    if rows.size:
        image.crop((0, 0, image.width, min(image.height, int(rows[-1]) + 24))).save(png)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--time-limit", type=float, default=290.0)
    ap.add_argument("--screenshot", type=Path, default=None)
    ap.add_argument("--height", type=int, default=6800)
    args = ap.parse_args()
    if not TRACE.exists():
        print(f"skipped: {TRACE} is absent")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        cmd = [
            sys.executable,
            "-m",
            "optsched.cli",
            "report",
            str(TRACE),
            "--first",
            str(args.requests),
            "--cost-model",
            "llama2-7b-a100",
            "--kv-capacity",
            "100000",
            "--token-budget",
            "4096",
            "--time-limit",
            str(args.time_limit),
            "--html",
            str(page),
            "--json",
            "--quiet",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        data = json.loads(proc.stdout)
        print(
            f"optsched report splitwise_conv first {args.requests}: {wall:.1f} s wall "
            f"(phases {', '.join(f'{k} {v:.1f} s' for k, v in data['run']['phase_times'].items())}), "
            f"partial={data['partial']}, html {page.stat().st_size / 1e6:.2f} MB"
        )
        print(
            f"best bound {data['best_bound']}, best {data['best']['source']} {data['best']['objective']:.4f} "
            f"(gap {100 * data['best']['gap']:.1f}%)"
        )
        for row in data["schedules"]:
            gap = "-" if row["gap"] is None else f"{100 * row['gap']:.1f}%"
            print(f"  {row['kind']}:{row['name']:14s} {row['status']:8s} {row['objective']!s:>22s} gap {gap}")
        if args.screenshot:
            screenshot(page, args.screenshot, args.height)
    return 0


if __name__ == "__main__":
    sys.exit(main())

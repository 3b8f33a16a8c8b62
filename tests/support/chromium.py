"""Headless Chromium for the HTML tests: run it on a page with a fresh profile, read its console."""

from __future__ import annotations

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]


def run_chromium(page, tmp_path, *extra: str):
    """Run headless Chromium on a page with a fresh profile; (returncode, stdout, console lines)."""
    import shutil
    import subprocess

    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    proc = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "net::ERR" in line]
    return proc.returncode, proc.stdout, console

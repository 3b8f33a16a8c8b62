"""The end of a sweep's process pool (issue 39 item 17): "Exception ignored ... OSError: [Errno 9]
Bad file descriptor" after a sweep that exits 0, about once in 190 runs.

``concurrent.futures``' exit hook writes to the wake-up pipe of every pool manager thread; a
manager thread still running then (a pool shut down without waiting for it) closes that pipe
between the hook's check and its write. The tests force that order (:mod:`tests.support.pool_exit`):
the pool's ``close`` must leave no manager thread running.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from concurrent.futures import process

import pytest

from optsched.sweep.executors import LocalPool
from tests.support import pool_exit


def test_a_closed_pool_leaves_nothing_for_the_exit_hook_to_race(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process._ThreadWakeup, "wakeup", process._ThreadWakeup.wakeup)  # noqa: SLF001 (restored)
    monkeypatch.setattr(process._ThreadWakeup, "close", process._ThreadWakeup.close)  # noqa: SLF001
    monkeypatch.setattr(pool_exit, "EXITING", type(pool_exit.EXITING)())
    monkeypatch.setattr(pool_exit, "_CHECKED", type(pool_exit.EXITING)())
    pool_exit.force_the_order()
    pool = LocalPool(1)
    pool.submit("a", abs, -1)
    assert pool.next_done() == ("a", 1, None)
    pool.close()
    pool_exit.exit_hook_wakeups()  # OSError (Bad file descriptor) if a manager thread closes its pipe meanwhile


def test_a_sweep_exits_without_an_ignored_exception(tmp_path) -> None:
    """A whole sweep in a fresh interpreter whose real exit hook runs in the forced order: exit 0
    and nothing on stderr after the summary."""
    spec = tmp_path / "spec.json"
    spec.write_text('{"name": "s", "workloads": [{"instance": "toy-4"}], "run": {"simulate": ["vllm"]}}')
    argv = ["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-progress", "--workers", "1"]
    code = (
        "import sys\n"
        "from tests.support import pool_exit\n"
        "pool_exit.force_the_order()\n"
        "from optsched.cli import main\n"
        f"code = main({argv!r})\n"
        "pool_exit.EXITING.set()\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Bad file descriptor" not in done.stderr, done.stderr


def test_every_worker_has_ended_when_the_pool_is_closed() -> None:
    """Two workers, one job: the second worker may still be starting when the pool closes; it is
    ended too (a survivor could wait forever for the call queue's lock held by an ended worker,
    and the program's exit with it)."""
    before = set(multiprocessing.active_children())
    pool = LocalPool(2)
    pool.submit("a", abs, -1)
    pool.submit("b", abs, -2)
    assert sorted(pool.next_done() for _ in range(2)) == [("a", 1, None), ("b", 2, None)]
    pool.close()
    assert set(multiprocessing.active_children()) <= before

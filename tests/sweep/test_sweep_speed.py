"""The sweep's fast paths: the store's rows as Arrow arrays built from buffers (optsched.arrowbuild),
without pandas, and the local pool's start method (workers forked while the driver runs no other thread)."""

from __future__ import annotations

import math
import subprocess
import sys
import threading

import pytest

pa = pytest.importorskip("pyarrow", reason="the sweep store is Parquet (pyarrow)")

from optsched.arrowbuild import arrow_array  # noqa: E402
from optsched.sweep.executors import LocalPool, start_method  # noqa: E402
from tests.support.sweep import pool_workers, slow_spec, start_cli, wait_for_parts, write_spec  # noqa: E402

TYPES = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string()}

CASES = [
    ("int64", [1, None, -(2**63), 2**63 - 1, 0]),
    ("int64", [None, None]),
    ("int64", []),
    ("float64", [1.5, None, math.inf, -math.inf, 3, -0.0, 1e-300]),
    ("bool", [True, None, False, True, False, False, True, True, False]),
    ("string", ["a", None, "", "héllo ✓", "x" * 1000]),
    ("string", [None]),
]


@pytest.mark.parametrize(("kind", "values"), CASES)
def test_arrow_array_equals_pyarrows_own_conversion(kind: str, values: list) -> None:
    built = arrow_array(values, kind)
    built.validate(full=True)
    assert built.equals(pa.array(values, TYPES[kind]))


def test_nan_stays_a_value_not_a_null() -> None:
    built = arrow_array([math.nan, None], "float64")
    assert built.null_count == 1 and math.isnan(built[0].as_py())


@pytest.mark.parametrize(
    ("kind", "values"),
    [("int64", [1, 2.5]), ("int64", [True]), ("float64", ["1"]), ("string", [1]), ("bool", [1]), ("float64", [False])],
)
def test_a_value_of_another_kind_is_refused(kind: str, values: list) -> None:
    with pytest.raises(TypeError, match="column holds"):
        arrow_array(values, kind)


def test_storing_rows_imports_no_pandas(tmp_path) -> None:
    code = (
        "import sys\n"
        "from optsched.sweep.cells import COLUMNS\n"
        "from optsched.sweep.store import SweepStore\n"
        f"store = SweepStore({str(tmp_path)!r})\n"
        "row = dict.fromkeys(COLUMNS)\n"
        "row.update(sweep='s', workload='w', kind='bound', bound=1.5, requests=3, slo_met=True)\n"
        "assert store.write('k', [row])\n"
        "print('pandas' in sys.modules)\n"
        "assert store.rows_of('k')[0]['bound'] == 1.5\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_workers_fork_while_no_other_thread_runs() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert start_method() == "spawn"  # forking with another thread running could deadlock the child
    finally:
        stop.set()
        other.join()
    if threading.active_count() == 1:  # (pytest plugins may run threads of their own)
        assert start_method() == "fork"


def test_a_started_pool_runs_jobs_with_its_shared_objects() -> None:
    pool = LocalPool(1)
    ref = pool.share([3, 4])
    pool.start()
    try:
        pool.submit("a", sum, ref)
        assert pool.next_done() == ("a", 7, None)
    finally:
        pool.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_a_sweep_with_its_progress_display_forks_its_workers(tmp_path) -> None:
    """The pool starts before the progress display's thread, so its workers are forked (they keep
    the driver's command line) rather than spawned (``spawn_main``)."""
    out = tmp_path / "out"
    proc = start_cli("sweep", str(write_spec(tmp_path, slow_spec())), "--out", str(out), "--workers", "2")
    try:
        wait_for_parts(out, 1, proc)
        workers = pool_workers(proc.pid)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert len(workers) == 2 and not [cmd for _, cmd in workers if "spawn_main" in cmd], workers

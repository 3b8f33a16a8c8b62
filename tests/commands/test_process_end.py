"""The start and the end of a timed command (docs/cli.md "Time limits"): a time-limited command
ends its process as soon as its output is out, without the interpreter's teardown; the solvers'
kernels are compiled ahead by ``optsched warmup``. The wall-time figures are in
tests/benchmarks/bench_time_limits.py and docs/performance.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from optsched.cli import main
from tests.support.paths import REPO

#: Runs the command line as the console script does (:func:`optsched.launch.main` reading
#: ``sys.argv``), with an ``atexit`` handler that marks the interpreter's teardown on stderr.
PROGRAM = """
import atexit, sys
atexit.register(lambda: print("TEARDOWN", file=sys.stderr))
from optsched.launch import main
sys.argv = ["optsched", *sys.argv[1:]]
sys.exit(main())
"""


def run_program(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, *argv], capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "toy-4", "--problem", "infermax", "--time-limit", "5", "--json"],
        ["bound", "toy-4", "--problem", "infermax", "--method", "relax", "--time-limit", "5", "--json"],
    ],
)
def test_a_time_limited_command_skips_the_teardown_with_its_output_complete(argv: list[str]) -> None:
    proc = run_program(*argv)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["instance"] == "toy-4"  # flushed whole before the process ended
    assert "TEARDOWN" not in proc.stderr


def test_the_exit_code_survives_the_quick_exit(tmp_path) -> None:
    """An error inside a timed command keeps its exit code and its one line."""
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    proc = run_program("solve", str(bad), "--problem", "infermax", "--time-limit", "5")
    assert proc.returncode == 2
    assert proc.stderr.startswith("optsched: error: ") and proc.stderr.count("\n") == 1


def test_a_command_without_a_limit_ends_normally() -> None:
    proc = run_program("info", "toy-4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)
    assert "TEARDOWN" in proc.stderr


@pytest.mark.parametrize("from_argv", [False, True])
def test_main_called_in_process_returns(monkeypatch, capsys, from_argv: bool) -> None:
    """The quick exit is the program's only: a caller of ``main()``, with arguments or reading
    ``sys.argv``, gets the exit code back (else this test process would end here, silently)."""
    argv = ["solve", "toy-4", "--problem", "infermax", "--time-limit", "5", "--json"]
    if from_argv:
        monkeypatch.setattr(sys, "argv", ["optsched", *argv])
    assert (main() if from_argv else main(argv)) == 0
    assert json.loads(capsys.readouterr().out)["instance"] == "toy-4"


def test_warmup_leaves_every_case_compiled(capsys) -> None:
    """``optsched warmup`` runs its cases until a pass compiles nothing: a second warm-up in the same
    process compiles nothing and loads nothing (every kernel it reaches is compiled)."""
    pytest.importorskip("numba")
    from optsched.warmup import kernels, warm_up

    assert main(["warmup", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["kernels"] > 0 and first["cases"]
    before = {name: dict(k.stats.cache_misses) for name, k in kernels().items()}
    again = warm_up()
    assert {name: dict(k.stats.cache_misses) for name, k in kernels().items()} == before
    assert again.compiled == sum(sum(m.values()) for m in before.values())

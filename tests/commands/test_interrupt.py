"""Ctrl-C (optsched.interrupt, optsched.launch; docs/cli.md): ``solve`` interrupted reports the best
schedule and bound so far (its one JSON object under --json); a second Ctrl-C aborts with exit 130;
an interrupt during start-up ends with one line and exit 130, never a traceback.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optsched import interrupt, launch
from optsched.budget import NO_LIMIT, TimeBudget
from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")


def gmax_instance(path: Path, n: int = 40) -> Path:
    """A static-batching instance whose CP-SAT G-maximisation runs to any time limit of a minute."""
    rng = random.Random(0)
    reqs = [
        {
            "id": f"r{i}",
            "prompt_tokens": rng.randint(16, 512),
            "output_tokens": rng.randint(8, 256),
            "task": "e2e",
            "slo": {"e2e": round(rng.uniform(2, 20), 3)},
        }
        for i in range(n)
    ]
    path.write_text(
        json.dumps({
            "name": "gmax40",
            "cost_model": "llama2-7b-a100",
            "max_batch_size": 4,
            "static_latency": "qwen2.5-7b-2xv100",
            "requests": reqs,
        })
    )
    return path


def start(*argv: str) -> subprocess.Popen:
    """``python -m optsched ARGV`` with SIGINT at its default (a test runner may ignore it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "optsched", *argv],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def start_gmax_solve(tmp_path: Path, *extra: str) -> subprocess.Popen:
    """``optsched solve`` of a gmax instance with CP-SAT, a 300 s limit and ``--json`` (and ``extra``)."""
    instance = str(gmax_instance(tmp_path / "g.json"))
    return start("solve", instance, "--problem", "gmax", "--solver", "cpsat", "--time-limit", "300", "--json", *extra)


def wait_for_solver(proc: subprocess.Popen) -> list[str]:
    """Read stderr until CP-SAT's log (``--log``) shows the search running; the lines read."""
    lines = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("#") or "Starting CP-SAT" in line:
            return lines
    raise AssertionError("the solver never started: " + "".join(lines[-5:]))


def test_ctrl_c_mid_solve_reports_the_best_schedule_and_bound(tmp_path: Path) -> None:
    proc = start_gmax_solve(tmp_path, "--log")
    wait_for_solver(proc)
    time.sleep(1.0)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    after = time.perf_counter() - sent
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out)  # the one JSON object
    assert result["interrupted"] is True and result["status"] in ("time_limit", "feasible")
    assert result["batches"] and result["objective"] is not None and result["bound"] >= result["objective"]
    assert "optsched: interrupted: reporting the best schedule" in err and "Traceback" not in err
    assert after < 60, after  # CP-SAT stopped at once, not at its 300 s limit


def test_a_second_ctrl_c_aborts(tmp_path: Path) -> None:
    proc = start_gmax_solve(tmp_path, "--log")
    wait_for_solver(proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    if proc.returncode == 130:  # the second signal came before the solve returned
        assert out == "" and err.rstrip().splitlines()[-1] == "optsched: interrupted"
    elif (
        proc.returncode == -signal.SIGINT
    ):  # the first one had ended the solve; the second killed the exiting interpreter
        assert json.loads(out)["interrupted"] is True
    else:  # the first one had already ended the solve: its result
        assert proc.returncode == 0 and json.loads(out)["interrupted"] is True


@pytest.fixture(scope="module")
def interpreter_start() -> float:
    """Seconds the interpreter takes to reach optsched's first line (twice the time of one that
    does nothing else): before that, Ctrl-C is Python's own (its site import prints a traceback)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import optsched.launch"], cwd=REPO, check=True)
    return 2 * (time.perf_counter() - t0)


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5, 1.0, 2.0])
def test_ctrl_c_during_start_up_prints_no_traceback(tmp_path: Path, interpreter_start: float, delay: float) -> None:
    """Wherever the signal lands after the interpreter's own start (imports, the instance, the
    solve): never a traceback; exit 130 with one line, or the interrupted solve's result."""
    proc = start_gmax_solve(tmp_path)
    time.sleep(interpreter_start + delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    # on a slow machine the solve's progress lines ("[   2.9s] ...", optsched.progress) may come first
    lines = [line for line in err.splitlines() if not line.startswith("[")]
    if proc.returncode == 130:
        assert lines == ["optsched: interrupted"] and out == "", err
    elif proc.returncode == -signal.SIGINT:  # the interpreter's own start, or its exit: killed by the signal
        assert out == "" and lines in ([], ["optsched: interrupted"]), err
    else:
        assert proc.returncode == 0 and json.loads(out)["interrupted"] is True


def test_an_import_error_from_an_interrupt_is_the_interrupt(monkeypatch, capsys) -> None:
    """numpy turns a KeyboardInterrupt inside its C extension's import into an ImportError."""
    import optsched.cli

    def broken_import(after_sigint: bool):
        def main(**options: object) -> int:
            monkeypatch.setattr(interrupt, "_seen", after_sigint)
            raise ImportError("PyCapsule_Import could not import module 'datetime'")

        return main

    monkeypatch.setattr(signal, "signal", lambda *args: None)  # keep the test runner's handler
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    monkeypatch.setattr(optsched.cli, "main", broken_import(True))
    assert launch.main() == interrupt.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "optsched: interrupted\n"
    monkeypatch.setattr(optsched.cli, "main", broken_import(False))
    with pytest.raises(ImportError):  # without an interrupt it is a bug, with its traceback
        launch.main()


def test_an_interrupt_printed_by_a_c_extension_prints_nothing(monkeypatch, capsys) -> None:
    """numpy's ``import_array()`` prints a KeyboardInterrupt that lands in an extension's import
    (``PyErr_Print``, as ``PyRun_SimpleString`` does here) before raising ImportError: silent
    under the launcher's hook, which keeps every other exception's traceback."""
    import ctypes

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    run_in_c = ctypes.pythonapi.PyRun_SimpleString
    run_in_c.argtypes = [ctypes.c_char_p]
    assert run_in_c(b"raise KeyboardInterrupt") == -1
    assert "Traceback" in capsys.readouterr().err  # what the hook is for
    interrupt.quiet_printed_interrupts()
    assert run_in_c(b"raise KeyboardInterrupt") == -1
    assert capsys.readouterr().err == ""
    assert run_in_c(b"raise ValueError('a bug')") == -1
    assert "ValueError: a bug" in capsys.readouterr().err


def test_a_signal_during_a_held_import_waits_for_its_end(monkeypatch) -> None:
    """pydantic_core panics (a BaseException, its Rust message already printed) when SIGINT lands
    inside its import: the command line's import holds the signal and raises it when done."""
    monkeypatch.setattr(interrupt, "_seen", False)  # restored after the test
    before = signal.getsignal(signal.SIGINT)
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with interrupt.held_signals():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler has run by now: it must not have raised here
            finished.append(True)
    assert finished == [True] and interrupt.sigint_seen()
    assert signal.getsignal(signal.SIGINT) is before
    with interrupt.held_signals():  # no signal, no interrupt
        finished.append(True)
    assert finished == [True, True]


def test_interruptible_passes_every_deadline_and_stops_the_solvers() -> None:
    stopped = []
    far = time.perf_counter() + 3600
    before = signal.getsignal(signal.SIGINT)
    with interrupt.interruptible() as ctrl_c:
        with interrupt.stoppable(lambda: stopped.append(True)):
            assert TimeBudget(far).left(0.01) > 3000 and not TimeBudget(far).expired()
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(200):  # the watcher thread or the handler
                if stopped:
                    break
                time.sleep(0.01)
            assert stopped == [True] and interrupt.requested()
            assert TimeBudget(far).left(0.01) == 0.01 and TimeBudget(far).expired()
            assert not NO_LIMIT.expired()
    assert signal.getsignal(signal.SIGINT) is before
    assert ctrl_c.happened and not interrupt.requested() and not TimeBudget(far).expired()


def test_ctrl_c_stops_the_infermax_scale_phase() -> None:
    """The scale phase (plan search, trajectory bound) stops at Ctrl-C as at its deadline: its loops
    compared the clock with the deadline and ran on to the time limit (an hour here)."""
    from optsched import load_instance, replay, solve

    instance = load_instance("infermax-i1024-o32-n64")  # 64 requests: solved at scale
    with interrupt.interruptible() as ctrl_c:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(200):
            if interrupt.requested():
                break
            time.sleep(0.01)
        began = time.perf_counter()
        result = solve(instance, "infermax", time_limit=3600)
        took = time.perf_counter() - began
    assert ctrl_c.happened and took < 300, took  # not the hour of its time limit
    assert "solved at scale" in result.extra["stopped"] and "scale" in result.extra
    assert result.status == "time_limit" and replay(instance, result.schedule).feasible
    assert result.bound <= result.objective <= min(result.extra["policy_values"].values())


def test_a_ctrl_c_while_interruptible_starts_is_not_lost(monkeypatch) -> None:
    """A SIGINT that lands after the handler is installed but before the watcher runs counts: it was
    dropped (the block was not yet marked active), and the solve ran on to its time limit."""
    import threading

    start = threading.Thread.start

    def start_after_a_signal(thread: threading.Thread) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs between these bytecodes
        start(thread)
        time.sleep(0.2)  # the watcher reads the signal's byte

    monkeypatch.setattr(threading.Thread, "start", start_after_a_signal)
    with interrupt.interruptible() as ctrl_c:
        monkeypatch.setattr(threading.Thread, "start", start)
        assert interrupt.requested()
    assert ctrl_c.happened and not interrupt.requested()


def test_an_interrupt_swallowed_before_the_block_still_stops_it(monkeypatch) -> None:
    """A KeyboardInterrupt that an optional import turned into a swallowed ImportError (pandas'
    under CP-SAT) is remembered: the command's interruptible block stops at once when it begins."""
    monkeypatch.setattr(interrupt, "_seen", True)
    far = time.perf_counter() + 3600
    with interrupt.interruptible() as ctrl_c:
        assert interrupt.requested() and TimeBudget(far).expired()
    assert ctrl_c.happened

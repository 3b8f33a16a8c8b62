""":func:`optsched.exiting.end_at`: the program's end at a command's time limit (docs/cli.md, exit
124), which waits for an output file being written and never fires once the command ended."""

from __future__ import annotations

import subprocess
import sys
import time

from optsched.exiting import EXIT_TIME_LIMIT


def _run(code: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    return done, time.perf_counter() - t0


def test_a_command_past_its_limit_ends_there_with_one_line() -> None:
    code = (
        "import time\n"
        "from optsched.budget import TimeBudget\n"
        "from optsched.exiting import end_at\n"
        "end_at(TimeBudget.of(0.5), 'optsched: error: x: stopped at its time limit')\n"
        "time.sleep(30)\n"
    )
    done, wall = _run(code)
    assert done.returncode == EXIT_TIME_LIMIT and wall < 10
    assert done.stderr == "optsched: error: x: stopped at its time limit\n" and done.stdout == ""


def test_the_end_waits_for_an_output_being_written(tmp_path) -> None:
    """The deadline passes while a file is written through its temporary file: the file is
    completed and renamed, no temporary file is left, then the process ends."""
    out = tmp_path / "out.txt"
    code = (
        "import time\n"
        "from optsched.budget import TimeBudget\n"
        "from optsched.exiting import end_at\n"
        "from optsched.jsonio import atomic_output\n"
        "end_at(TimeBudget.of(0.3), 'stopped')\n"
        f"with atomic_output({str(out)!r}) as tmp:\n"
        "    time.sleep(1.0)\n"
        "    tmp.write_text('complete')\n"
        "time.sleep(30)\n"
    )
    done, _ = _run(code)
    assert done.returncode == EXIT_TIME_LIMIT, done.stderr
    assert out.read_text() == "complete" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_command_that_ended_is_not_ended_again() -> None:
    code = (
        "import time\n"
        "from optsched.budget import TimeBudget\n"
        "from optsched.exiting import end_at, exit_now\n"
        "ended = end_at(TimeBudget.of(0.3), 'stopped')\n"
        "ended()\n"
        "time.sleep(0.6)\n"
        "print('answer')\n"
        "exit_now(0)\n"
    )
    done, _ = _run(code)
    assert done.returncode == 0 and done.stdout == "answer\n" and done.stderr == ""

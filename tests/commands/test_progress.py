"""Progress that is never silent and never goes backwards: plain lines at a steady pace off a
terminal, a fixed total (the capacity search's included), --quiet, a clean stdout under --json."""

from __future__ import annotations

import io
import json
import random
import re
import time

import pytest

from optsched.cli import main
from optsched.progress import Progress
from optsched.sweep.capacity import RateSearch

LINE = re.compile(r"^\[\s*\d+\.\d+s\] ")


def test_plain_lines_at_a_steady_pace() -> None:
    stream = io.StringIO()
    with Progress("cells", 10, "cells", stream=stream, bar=False, interval=0.2) as progress:
        progress.say("starting")
        progress.advance(3)
        time.sleep(0.9)
        progress.advance(2)
        time.sleep(0.5)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("] starting")
    assert all(LINE.match(line) for line in lines), lines
    status = [line for line in lines if "cells: " in line]
    assert len(status) >= 3, lines  # one per interval of silence
    counts = [int(re.search(r"cells: (\d+)/10 cells", line).group(1)) for line in status]
    assert counts == sorted(counts) and counts[0] == 3 and counts[-1] == 5
    assert "(30 %); starting" in status[0]


def test_a_silent_step_is_named_from_the_first_second() -> None:
    """A step announced without a line (loading, compiling kernels) shows up after about one
    second; a command that fails before that writes nothing (its error line stays alone)."""
    stream = io.StringIO()
    with Progress("solve", 30, "s", clock=True, stream=stream, bar=False) as progress:
        progress.doing("compiling kernels")
        time.sleep(1.6)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and re.search(r"solve: [12]/30 s", lines[0]) and lines[0].endswith("; compiling kernels"), (
        lines
    )
    quick = io.StringIO()
    with Progress("solve", 30, "s", clock=True, stream=quick, bar=False) as progress:
        progress.doing("loading")
    assert quick.getvalue() == ""


def test_never_backwards_and_capped() -> None:
    progress = Progress("x", 10, enabled=False)
    progress.set_done(5)
    progress.set_done(3)
    assert progress.completed() == 5
    progress.advance(100)
    assert progress.completed() == 10
    clock = Progress("report", 0.3, "s", clock=True, enabled=False)
    first = clock.completed()
    time.sleep(0.4)
    assert first <= clock.completed() == 0.3


def test_disabled_writes_nothing_and_bar_mode_draws() -> None:
    quiet = io.StringIO()
    with Progress("x", 3, stream=quiet, enabled=False, interval=0.05) as progress:
        progress.say("hidden")
        time.sleep(0.2)
    assert quiet.getvalue() == ""
    drawn = io.StringIO()
    with Progress("cells", 4, "cells", stream=drawn, bar=True) as progress:
        progress.say("first step")
        progress.advance(4)
    text = drawn.getvalue()
    assert "first step" in text and "4/4 cells" in text and "100%" in text


@pytest.mark.parametrize("seed", range(30))
def test_capacity_search_total_is_fixed(seed: int) -> None:
    """The rates resolved by a search never decrease, never exceed its grid and reach it when done,
    whatever the (monotone) outcome and the probes per round."""
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    threshold = rng.randint(-1, n - 1)  # points <= threshold meet the target
    search = RateSearch([None] * n, "s")  # the bookkeeping reads the number of grid points only
    seen = [search.resolved]
    while not search.done:
        for k in search.next_points(rng.randint(1, 4)):
            search.record(k, k <= threshold)
        seen.append(search.resolved)
        assert seen[-1] <= n
    assert seen == sorted(seen) and seen[-1] == n


def test_report_progress_lines_quiet_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "toy-4", "--json", "--solve-max-requests", "0"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout holds the JSON only
    lines = captured.err.splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    assert any("policy 1/" in line for line in lines) and "done in" in lines[-1]
    assert main(["report", "toy-4", "--quiet", "--solve-max-requests", "0"]) == 0
    assert capsys.readouterr().err == ""

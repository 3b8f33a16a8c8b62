"""A Ctrl-C or SIGTERM that lands while a file is being written never leaves a temporary file:
the sweep store's part and spec files and :func:`optsched.jsonio.atomic_output` (docs/sweep.md).

The signal is planted right after the temporary file is created, the moment a handler that raises
at once would have left it behind."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from optsched import interrupt, jsonio
from optsched.sweep.store import SweepStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


@pytest.fixture
def raising_sigterm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (as in a command), and every temporary file made
    by ``tempfile.mkstemp`` is followed at once by a SIGTERM to this process."""
    monkeypatch.setattr(interrupt, "_seen", False)
    before = {signum: signal.getsignal(signum) for signum in interrupt.SIGNALS}
    made = tempfile.mkstemp

    def mkstemp_then_sigterm(*args: Any, **kwargs: Any) -> tuple[int, str]:
        result = made(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return result

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_sigterm)
    interrupt.raise_on_sigint()
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_part_file_interrupted_is_whole_and_leaves_no_temporary(tmp_path: Path, raising_sigterm: None) -> None:
    store = SweepStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        store.write("k1", [{"cell": "k1", "status": "ok"}])
    assert hidden(tmp_path) == []
    assert store.done_keys() == {"k1"} and store.rows_of("k1")[0]["status"] == "ok"


def test_a_spec_record_interrupted_leaves_no_temporary(tmp_path: Path, raising_sigterm: None) -> None:
    store = SweepStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        store.write_meta({"spec": {"name": "x"}})
    assert hidden(tmp_path) == []
    assert store.read_meta() == {"spec": {"name": "x"}}


def test_an_atomic_output_interrupted_leaves_the_target_and_no_temporary(tmp_path: Path, raising_sigterm: None) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    written = []
    with pytest.raises(KeyboardInterrupt):
        with jsonio.atomic_output(target) as tmp:
            written.append(tmp)
    assert written == [] and hidden(tmp_path) == [] and target.read_text() == "old"

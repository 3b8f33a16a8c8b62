"""Fixtures shared by the test files: the shared data folder (skip when absent), the compiled InferMax
kernels; and Ctrl-C delivered to the tests of its handling."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.paths import shared_data


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT
    ignored, and so would every command the tests start: the tests of Ctrl-C (tests/commands/
    test_interrupt.py, the sweep's resume after SIGINT) need it delivered, as a terminal does."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def data_dir() -> Path:
    found = shared_data()
    if found is None:
        pytest.skip("../shared/data (real traces and GPU profiles) is not present")
    return found


@pytest.fixture(scope="session")
def infermax_kernels() -> None:
    """The InferMax search's and chunk bound's numba kernels compiled (or loaded from numba's disk
    cache) before a test that times a search: they compile lazily, at their first call, and a
    cold cache's compilation (tens of seconds) is not what such a test measures."""
    from optsched.instance import parse_instance
    from optsched.problems.infermax.chunks import chunk_bound
    from optsched.problems.infermax.search import relaxation_search

    inst = parse_instance(
        {
            "name": "kernels",
            "cost_model": "llama2-7b-a100",
            "limits": {"kv_capacity": 6},
            "requests": [
                {"id": "a", "prompt_tokens": 2, "output_tokens": 3},
                {"id": "b", "prompt_tokens": 3, "output_tokens": 2},
                {"id": "c", "prompt_tokens": 1, "output_tokens": 2},
            ],
        },
        "kernels",
    )
    found = relaxation_search(inst)
    chunk_bound(inst, found.value * 1.01)

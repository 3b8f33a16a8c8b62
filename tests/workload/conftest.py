"""Fixtures of the trace-loading tests."""

from __future__ import annotations

import pytest

from optsched.workload import loaders
from optsched.workload.arrow import arrow_available


@pytest.fixture(params=["arrow", "stdlib"])
def reader(request, monkeypatch):
    """Each test with the pyarrow fast path (when installed) and with the standard-library reader."""
    if request.param == "arrow" and not arrow_available():
        pytest.skip("pyarrow is not installed")
    if request.param == "stdlib":
        monkeypatch.setattr(loaders, "arrow_available", lambda: False)
    return request.param

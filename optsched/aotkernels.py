"""The simulation core's kernels, compiled ahead of time where ``optsched warmup`` built them.

A command that runs the compiled engine or replay would pay numba's start-up in every process
(importing numba and building its typing and target contexts at the first call of a kernel, about
half a second, however small the work). ``optsched warmup`` therefore also builds the kernels the
drivers call from Python (:data:`KERNELS`) into one C extension (:mod:`optsched.aotbuild`, with
``numba.pycc``), which runs without numba. :func:`kernel` gives a driver its kernel: the
extension's function where the extension for this exact code loads, else numba's dispatcher (the
JIT path, importing numba then).

The extension's file name carries :func:`extension_key`, a hash of the kernels' and drivers'
sources (:data:`SOURCES`), the constants and record layout they read, and the numba, numpy and
Python versions and the platform. A changed source or an upgrade changes the key, so a stale
extension is never found; a missing or unloadable one (a corrupt file, a module that does not match
its name) falls back to the JIT path. The extension's functions unbox their arguments without
checking them, so each call is checked here against the argument types the extension was built for
(dtype, dimensions, C order, writability, tuple shapes: the types numba would infer); a call that
differs runs the JIT path.

Where the extension lives (:func:`cache_dirs`, first found wins): ``$NUMBA_CACHE_DIR/optsched-aot``
when ``NUMBA_CACHE_DIR`` is set, else ``__pycache__/aot`` in the optsched package (beside numba's
own cache); then ``$XDG_CACHE_HOME/optsched/aot`` (default ``~/.cache/optsched/aot``), where the
build goes when the first is not writable. Importing this module loads and builds nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .costmodel import Coefficients
from .metrics import TIME_RTOL

__all__ = [
    "KERNELS",
    "SOURCES",
    "ahead_of_time",
    "cache_dirs",
    "conforms",
    "extension_key",
    "extension_name",
    "forget",
    "jit_kernel",
    "jit_only",
    "kernel",
    "load_extension",
]

#: The kernels the drivers call from Python: name -> (module, numba dispatcher in it).
KERNELS: dict[str, tuple[str, str]] = {
    "simulate": ("optsched.policies.fastengine", "_simulate"),
    "replay": ("optsched.replaykernel", "_replay"),
}
#: The sources (relative to the package) that fix the kernels' code and their argument types: the
#: kernels, their callees, the state layout and the drivers.
SOURCES = (
    "aotkernels.py",
    "fastreplay.py",
    "replaykernel.py",
    "policies/enginelayout.py",
    "policies/fastengine.py",
    "policies/fastsim.py",
    "policies/lookahead_kernel.py",
    "policies/share.py",
    "policies/slo_kernel.py",
)
_PREFIX = "optsched_kernels_"

_chosen: dict[str, Callable[..., Any]] = {}
_state = {"aot": True}


def _numba_version() -> str:
    """numba's installed version, read from its distribution's metadata without importing it."""
    try:
        spec = importlib.util.find_spec("numba")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return "absent"
    found = sorted(Path(spec.origin).parent.parent.glob("numba-*.dist-info"))
    if len(found) == 1:
        return found[0].name.removeprefix("numba-").removesuffix(".dist-info")
    from importlib.metadata import version

    return version("numba")


@cache
def extension_key() -> str:
    """The hash that names the extension of this code, numba, numpy, Python and platform."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    facts = [Coefficients._fields, TIME_RTOL, _numba_version(), np.__version__, sys.version, sysconfig.get_platform()]
    digest.update(repr(facts + importlib.machinery.EXTENSION_SUFFIXES[:1]).encode())
    return digest.hexdigest()[:32]


def extension_name(key: str | None = None) -> str:
    """The extension's module name (its file name without the suffix) for ``key`` (default: this code's)."""
    return _PREFIX + (key or extension_key())


def cache_dirs() -> list[Path]:
    """The folders searched for the extension, in order (module docstring)."""
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    first = Path(numba_dir) / "optsched-aot" if numba_dir else Path(__file__).parent / "__pycache__" / "aot"
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [first, Path(user) / "optsched" / "aot"]


def load_extension(directory: Path, key: str | None = None) -> dict[str, list[tuple[Callable[..., Any], Any]]] | None:
    """The extension for ``key`` in ``directory``: per kernel, its exported functions with their
    argument types; None when it is absent or does not load."""
    name = extension_name(key)
    path = directory / (name + importlib.machinery.EXTENSION_SUFFIXES[0])
    if not path.is_file():
        return None
    try:
        exports = json.loads(path.with_name(name + ".json").read_text(encoding="utf-8"))
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return {k: [(getattr(module, e["export"]), e["args"]) for e in exports[k]] for k in KERNELS}
    except Exception:  # noqa: BLE001 - a corrupt or foreign file: the JIT path runs
        return None


@cache
def _extension() -> dict[str, list[tuple[Callable[..., Any], Any]]] | None:
    for directory in cache_dirs():
        if (found := load_extension(directory)) is not None:
            return found
    return None


def conforms(value: Any, spec: dict[str, Any]) -> bool:
    """Whether ``value`` has the argument type ``spec`` (:func:`optsched.aotbuild.argument_spec`)."""
    if "array" in spec:
        return (
            isinstance(value, np.ndarray)
            and value.dtype.str == spec["array"]
            and value.ndim == spec["ndim"]
            and value.flags.c_contiguous
            and value.flags.aligned
            and (value.flags.writeable or not spec["mutable"])
        )
    if "items" in spec:
        items = spec["items"]
        named = spec.get("named")
        shaped = type(value) is tuple if named is None else isinstance(value, tuple) and type(value).__name__ == named
        return shaped and len(value) == len(items) and all(conforms(v, s) for v, s in zip(value, items, strict=True))
    kind = spec["scalar"]
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, float) if kind == "float" else isinstance(value, int) and not isinstance(value, bool)


def jit_kernel(name: str) -> Callable[..., Any]:
    """The numba dispatcher of kernel ``name`` (imports numba)."""
    module, attribute = KERNELS[name]
    return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


def _guarded(name: str, exports: list[tuple[Callable[..., Any], Any]]) -> Callable[..., Any]:
    """Kernel ``name``: the first export whose argument types the call has, else the JIT path."""

    def call(*args: Any) -> Any:
        for function, spec in exports:
            if len(args) == len(spec) and all(conforms(a, s) for a, s in zip(args, spec, strict=True)):
                return function(*args)
        return jit_kernel(name)(*args)

    return call


def kernel(name: str) -> Callable[..., Any]:
    """Kernel ``name`` of :data:`KERNELS`: compiled ahead of time where the extension of this code
    loads, else numba's (module docstring). The choice is made once per process."""
    if name not in _chosen:
        exports = _extension() if _state["aot"] else None
        _chosen[name] = _guarded(name, exports[name]) if exports else jit_kernel(name)
    return _chosen[name]


def ahead_of_time() -> bool:
    """Whether this process runs the kernels compiled ahead of time (the extension of this code
    loads): a kernel call then starts at once, with no JIT compilation."""
    return bool(_state["aot"] and _extension())


def forget() -> None:
    """Forget the kernels chosen and the extension loaded: the next :func:`kernel` looks again."""
    _chosen.clear()
    _extension.cache_clear()


@contextmanager
def jit_only() -> Iterator[None]:
    """Within the block, :func:`kernel` gives numba's dispatchers (the build reads their signatures)."""
    forget()
    _state["aot"] = False
    try:
        yield
    finally:
        _state["aot"] = True
        forget()

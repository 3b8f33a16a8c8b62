"""Building the simulation core's kernels ahead of time (``optsched warmup``; loader: :mod:`optsched.aotkernels`).

:func:`build_extension` runs a small simulation on numba's JIT path (so that each kernel of
:data:`~optsched.aotkernels.KERNELS` has the signatures the drivers call it with), then compiles
each kernel's Python function for each of those signatures with ``numba.pycc`` into one C extension
(the kernels' callees, njit functions, are compiled into it) and writes it, with the argument types
of each exported function (:func:`argument_spec`), into the first writable folder of
:func:`~optsched.aotkernels.cache_dirs`, under the name of :func:`~optsched.aotkernels.extension_key`.
Files appear complete or not at all (written aside, then renamed); extensions of other keys in that
folder are removed. Building needs a C compiler and setuptools; it takes a few seconds.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

from .aotkernels import KERNELS, cache_dirs, extension_name, forget, jit_kernel, jit_only, load_extension

__all__ = ["AotBuildError", "argument_spec", "build_extension", "ensure_extension"]


class AotBuildError(RuntimeError):
    """The extension could not be built (no compiler, no writable folder, a kernel not exportable)."""


def argument_spec(ty: Any) -> dict[str, Any]:
    """The argument type ``ty`` (a numba type) as :func:`optsched.aotkernels.conforms` checks it;
    ValueError for a type it does not check (the signature is then not exported)."""
    from numba.core import types

    if isinstance(ty, types.Array):
        if ty.layout != "C":
            raise ValueError(f"array layout {ty.layout}")
        return {"array": np.dtype(str(ty.dtype)).str, "ndim": ty.ndim, "mutable": bool(ty.mutable)}
    if isinstance(ty, types.NamedTuple | types.NamedUniTuple):
        return {"named": ty.instance_class.__name__, "items": [argument_spec(t) for t in cast(Any, ty).types]}
    if isinstance(ty, types.BaseTuple):
        return {"items": [argument_spec(t) for t in cast(Any, ty).types]}
    if isinstance(ty, types.Boolean):
        return {"scalar": "bool"}
    if isinstance(ty, types.Integer) and cast(Any, ty).signed and cast(Any, ty).bitwidth == 64:
        return {"scalar": "int"}
    if isinstance(ty, types.Float) and ty.bitwidth == 64:
        return {"scalar": "float"}
    raise ValueError(f"argument type {ty}")


def _writable_dir() -> Path:
    for directory in cache_dirs():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise AotBuildError("no writable folder among " + ", ".join(map(str, cache_dirs())))


def _compile(name: str, build_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Compile every exportable signature of every kernel into ``build_dir``/``name``; the exports."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pycc is pending deprecation in numba
            pycc: Any = importlib.import_module("numba.pycc")
    except ImportError as exc:  # numba without pycc, or no setuptools
        raise AotBuildError(f"numba.pycc is not available: {exc}") from exc
    cc = pycc.CC(name)
    cc.output_dir = str(build_dir)
    exports: dict[str, list[dict[str, Any]]] = {}
    for kernel_name in KERNELS:
        dispatcher: Any = jit_kernel(kernel_name)
        exports[kernel_name] = []
        for k, signature in enumerate(dispatcher.nopython_signatures):
            try:
                args = [argument_spec(t) for t in signature.args]
            except ValueError:
                continue
            export = f"{kernel_name}_{k}"
            cc.export(export, signature)(dispatcher.py_func)
            exports[kernel_name].append({"export": export, "args": args})
        if not exports[kernel_name]:
            raise AotBuildError(f"kernel {kernel_name!r} has no signature to export")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc.compile()
    except Exception as exc:  # a missing compiler, a failed link: the JIT path stays
        raise AotBuildError(f"compiling the extension failed: {type(exc).__name__}: {exc}") from exc
    return exports


def build_extension(exercise: Callable[[], None], directory: Path | None = None) -> Path:
    """Build the extension of this code (module docstring) into ``directory`` (default: the first
    writable of :func:`~optsched.aotkernels.cache_dirs`) and return its path; ``exercise`` runs the
    drivers once (the signatures to export come from its calls). AotBuildError when it cannot."""
    with jit_only():
        exercise()
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    directory = directory or _writable_dir()
    name = extension_name()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    build_dir = Path(tempfile.mkdtemp(prefix=".build-", dir=directory))
    try:
        exports = _compile(name, build_dir)
        built = next(build_dir.glob(name + "*"), None)
        if built is None:
            raise AotBuildError(f"numba.pycc wrote no {name}{suffix}")
        (build_dir / (name + ".json")).write_text(json.dumps(exports), encoding="utf-8")
        for old in directory.glob(extension_name("*")):
            if old.is_file() and not old.name.startswith(name):
                old.unlink(missing_ok=True)
        os.replace(build_dir / (name + ".json"), directory / (name + ".json"))
        os.replace(built, directory / (name + suffix))
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    forget()
    return directory / (name + suffix)


def ensure_extension(exercise: Callable[[], None]) -> str:
    """The extension of this code: where it already loads, else built now (:func:`build_extension`);
    a line that says where it is, or why it was not built."""
    for directory in cache_dirs():
        if load_extension(directory) is not None:
            return f"{directory / extension_name()}{importlib.machinery.EXTENSION_SUFFIXES[0]} (present)"
    try:
        return f"{build_extension(exercise)} (built)"
    except AotBuildError as exc:
        return f"not built: {exc}"

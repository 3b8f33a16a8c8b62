"""The engine and replay kernels compiled ahead of time (optsched/aotbuild.py, optsched/aotkernels.py).

- Built once per test session into a temporary folder (skipped, with the reason, where no C
  compiler or ``numba.pycc`` is there).
- Every registered policy on every shipped instance and on random instances: the extension's
  schedule and replay are the JIT kernels', array for array and field for field, and the extension
  ran (no call fell back to the JIT path).
- The loader falls back to the JIT path on a stale key (a planted changed source hash, and the
  stale file renamed to the new key), a corrupt file, a missing argument-type file; a call whose
  arguments differ from the exported types (a strided or int32 array) runs the JIT path.
- A process that simulates and replays with the extension imports no numba.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched import aotkernels
from optsched.aotbuild import AotBuildError, build_extension
from optsched.fastreplay import replay_columns
from optsched.instance import Instance, load_instance
from optsched.policies import reads_slo
from optsched.policies.config import POLICY_CONFIGS
from optsched.policies.fastsim import simulate_columns
from optsched.problems.infermax.goodput_bounds import with_slos
from optsched.schedcols import ScheduleColumns
from optsched.warmup import POLICY_CASES, run_policy_case
from tests.policies.test_policy_properties import fitting, instances
from tests.support.paths import INSTANCES, REPO

SHIPPED = sorted(p.stem for p in INSTANCES.glob("*.json"))
REAL_KEY = aotkernels.extension_key()
FIELDS = ("item_ptr", "item_ref", "item_tokens", "evict_ptr", "evict_ref", "start")


def _exercise() -> None:
    for policy in POLICY_CASES:
        run_policy_case(policy)


@pytest.fixture(scope="session")
def aot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the extension of this code, built once per session."""
    directory = tmp_path_factory.mktemp("aot") / "optsched-aot"
    try:
        build_extension(_exercise, directory)
    except AotBuildError as exc:
        pytest.skip(f"the extension cannot be built here: {exc}")
    return directory


@pytest.fixture
def only(aot_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The loader sees only the session's extension."""
    monkeypatch.setattr(aotkernels, "cache_dirs", lambda: [aot_dir])
    aotkernels.forget()
    yield aot_dir
    aotkernels.forget()


def _no_jit(name: str) -> Any:
    raise AssertionError(f"kernel {name!r} fell back to the JIT path")


def _both(instance: Instance, policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension's and the JIT's schedule and replay of ``policy`` on ``instance`` are equal
    (with TTFT and TPOT targets for a policy that schedules by them)."""
    config = POLICY_CONFIGS[policy]
    if reads_slo(policy) and not all(r.slo is not None for r in instance.requests):
        instance = with_slos(instance, 0.5, 0.05)
    with aotkernels.jit_only():
        jit = simulate_columns(instance, config)
        jit_replay = None if jit is None else replay_columns(instance, jit)
    with monkeypatch.context() as mp:
        mp.setattr(aotkernels, "jit_kernel", _no_jit)
        aotkernels.forget()
        aot = simulate_columns(instance, config)
        aot_replay = None if aot is None else replay_columns(instance, aot)
    aotkernels.forget()
    assert (aot is None) == (jit is None), policy
    if aot is None or jit is None:
        return
    for field in FIELDS:
        assert np.array_equal(getattr(aot, field), getattr(jit, field), equal_nan=True), (policy, field)
    assert aot.ids == jit.ids
    assert aot_replay == jit_replay, policy


@pytest.mark.parametrize("name", SHIPPED)
def test_every_policy_on_every_shipped_instance(name: str, only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inst = load_instance(INSTANCES / f"{name}.json")
    for policy in POLICY_CONFIGS:
        _both(inst, policy, monkeypatch)


@settings(max_examples=60, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICY_CONFIGS)), st.booleans())
def test_every_policy_on_random_instances(aot_dir: Path, instance: Instance, name: str, fit: bool) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aotkernels, "cache_dirs", lambda: [aot_dir])
        try:
            _both(fitting(instance, name) if fit else instance, name, mp)
        except ValueError:  # an instance the engine refuses: the reference engine raises (test_fastengine)
            pass
    aotkernels.forget()


def _columns() -> tuple[Instance, ScheduleColumns]:
    inst = load_instance(INSTANCES / "poisson-mixed-100.json")
    with aotkernels.jit_only():
        columns = simulate_columns(inst, POLICY_CONFIGS["vllm"])
    assert columns is not None
    return inst, columns


def _plant(source: Path, key: str, rename: bool) -> Path:
    """A copy of the extension of this code in ``source`` under ``key`` (renamed files, or a corrupt .so)."""
    target = source.parent / f"planted-{key}"
    target.mkdir()
    old = aotkernels.extension_name(REAL_KEY)
    for path in source.glob(old + "*"):
        suffix = path.name.removeprefix(old)
        copy = target / (aotkernels.extension_name(key) + suffix)
        if rename or suffix == ".json":
            shutil.copyfile(path, copy)
        else:
            copy.write_bytes(b"\x7fELF not a shared object")
    return target


@pytest.mark.parametrize("rename", [False, True], ids=["file-absent", "stale-file-renamed"])
def test_a_stale_key_runs_the_jit_path(only: Path, monkeypatch: pytest.MonkeyPatch, rename: bool) -> None:
    stale = "0" * 32  # a changed source hash
    planted = _plant(only, stale, rename=True) if rename else only
    monkeypatch.setattr(aotkernels, "cache_dirs", lambda: [planted])
    monkeypatch.setattr(aotkernels, "extension_key", lambda: stale)
    aotkernels.forget()
    assert aotkernels.load_extension(planted) is None
    assert aotkernels.kernel("simulate") is aotkernels.jit_kernel("simulate")
    inst, columns = _columns()
    assert replay_columns(inst, columns) is not None


def test_a_corrupt_file_or_a_missing_type_file_runs_the_jit_path(only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "1" * 32
    planted = _plant(only, key, rename=False)
    monkeypatch.setattr(aotkernels, "extension_key", lambda: key)
    assert aotkernels.load_extension(planted) is None
    renamed = _plant(only, "2" * 32, rename=True)
    monkeypatch.setattr(aotkernels, "extension_key", lambda: "2" * 32)
    (renamed / (aotkernels.extension_name() + ".json")).unlink()
    assert aotkernels.load_extension(renamed) is None
    monkeypatch.setattr(aotkernels, "cache_dirs", lambda: [planted, renamed])
    aotkernels.forget()
    assert aotkernels.kernel("replay") is aotkernels.jit_kernel("replay")


def test_arguments_of_other_types_run_the_jit_path(only: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exports = aotkernels.load_extension(only)
    assert exports is not None
    spec = exports["replay"][0][1]
    assert aotkernels.conforms(np.zeros(3, np.int64), spec[2])
    for planted in (np.zeros(6, np.int64)[::2], np.zeros(3, np.int32), np.zeros((3, 1), np.int64), [0, 0, 0]):
        assert not aotkernels.conforms(planted, spec[2])
    inst, columns = _columns()
    expected = replay_columns(inst, columns)
    calls = []
    jit = aotkernels.jit_kernel("replay")
    monkeypatch.setattr(aotkernels, "jit_kernel", lambda name: calls.append(name) or jit)
    aotkernels.forget()
    strided = np.repeat(columns.item_tokens, 2)[::2]  # the same values, not C-contiguous
    assert not strided.flags.c_contiguous
    assert replay_columns(inst, dataclasses.replace(columns, item_tokens=strided)) == expected
    assert calls == ["replay"]


WORKER = r"""
import json, sys
from optsched import aotkernels
from optsched.instance import load_instance
from optsched.policies.engine import simulate
from optsched.schedule import replay
inst = load_instance(sys.argv[1])
result = replay(inst, simulate(inst, "mc-sf", compiled=True), compiled=True)
print(json.dumps({
    "numba": sorted(m for m in sys.modules if m.split(".")[0] == "numba"),
    "aot": [aotkernels.kernel(k).__module__ == "optsched.aotkernels" for k in aotkernels.KERNELS],
    "metrics": result.metrics.to_dict(),
}))
"""


def test_a_process_with_the_extension_imports_no_numba(aot_dir: Path) -> None:
    inst = str(INSTANCES / "poisson-mixed-100.json")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(aot_dir.parent), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", WORKER, inst], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["numba"] == []
    assert found["aot"] == [True, True]
    with aotkernels.jit_only():
        from optsched.policies.engine import simulate
        from optsched.schedule import replay

        loaded = load_instance(inst)
        expected = replay(loaded, simulate(loaded, "mc-sf", compiled=True), compiled=True)
    assert found["metrics"] == json.loads(json.dumps(expected.metrics.to_dict()))


def test_every_kernel_module_is_in_the_key() -> None:
    """A numba module the kernels import is in :data:`~optsched.aotkernels.SOURCES` (an edit of a
    callee not in the key would leave a stale extension loaded)."""
    code = (
        "import sys, importlib\n"
        "for module, _ in __import__('optsched.aotkernels').aotkernels.KERNELS.values():\n"
        "    importlib.import_module(module)\n"
        "print('\\n'.join(m.__file__ for n, m in sys.modules.items() if n.startswith('optsched.') and m.__file__))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    package = REPO / "optsched"
    kernel_files = {
        Path(f).relative_to(package).as_posix() for f in out.split() if "from numba import" in Path(f).read_text()
    }
    assert kernel_files and kernel_files <= set(aotkernels.SOURCES), kernel_files - set(aotkernels.SOURCES)

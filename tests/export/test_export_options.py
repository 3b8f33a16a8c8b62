"""``optsched export`` options: a value the plan reader would refuse, and an option that changes
nothing in the output, are bad input (exit 2, one line naming the option), and nothing is written."""

from __future__ import annotations

import json

import pytest

from optsched.cli import main
from optsched.export.vllm_replay import MAX_BLOCK_SIZE, PlanError, build_plan, load_plan
from optsched.instance import parse_instance
from optsched.schedule import Schedule
from tests.support.export import BATCHES, INSTANCE


@pytest.fixture()
def files(tmp_path):
    """The instance and schedule files of the export tests (M = 10^8 tokens: any block size fits)."""
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps({**INSTANCE, "limits": {**INSTANCE["limits"], "kv_capacity": 10**8}}))
    sched = tmp_path / "s.json"
    Schedule("e2e-tiny", BATCHES).save(sched)
    return inst, sched


def _export(capsys, files, out, *more: str) -> tuple[int, str]:
    inst, sched = files
    code = main(["export", str(sched), "--instance", str(inst), "--out", str(out), *more])
    return code, capsys.readouterr().err


def _assert_bad_input(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("optsched: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.mark.parametrize("size", [str(MAX_BLOCK_SIZE + 1), "1000000", "0", "-16"])
def test_a_block_size_the_executor_refuses_is_not_exported(tmp_path, capsys, files, size):
    """A block size above 65,536 gave a plan that ``optsched execute`` then refused."""
    out = tmp_path / "p.json"
    code, err = _export(capsys, files, out, "--format", "vllm-replay", "--block-size", size)
    _assert_bad_input(code, err, f"--block-size: must be from 1 to {MAX_BLOCK_SIZE:,}, got {size}")
    assert not out.exists()


def test_the_largest_block_size_exports_a_plan_the_reader_takes(tmp_path, capsys, files):
    out = tmp_path / "p.json"
    code, err = _export(capsys, files, out, "--format", "vllm-replay", "--block-size", str(MAX_BLOCK_SIZE))
    assert code == 0, err
    assert load_plan(out).engine["block_size"] == MAX_BLOCK_SIZE


def test_build_plan_refuses_a_block_size_beyond_the_largest():
    with pytest.raises(PlanError, match="block size must be from 1 to 65,536, got 65,537"):
        build_plan(parse_instance(INSTANCE), Schedule("e2e-tiny", BATCHES), block_size=MAX_BLOCK_SIZE + 1)


@pytest.mark.parametrize("fmt", ["vllm-replay", "chrome-trace"])
@pytest.mark.parametrize("flag", ["--slo-ttft", "--slo-tpot"])
def test_an_slo_option_is_refused_by_export(tmp_path, capsys, files, fmt, flag):
    """Neither format carries SLOs: the option would change nothing, so it is bad input (the file kept)."""
    out = tmp_path / "p.json"
    out.write_text("kept")
    code, err = _export(capsys, files, out, "--format", fmt, flag, "0.5")
    _assert_bad_input(code, err, f"{flag}: export writes no SLOs")
    assert out.read_text() == "kept"


def test_block_options_still_apply_only_to_vllm_replay(tmp_path, capsys, files):
    out = tmp_path / "t.json"
    code, err = _export(capsys, files, out, "--format", "chrome-trace", "--block-size", "32")
    _assert_bad_input(code, err, "--block-size: applies only to --format vllm-replay")
    assert not out.exists()

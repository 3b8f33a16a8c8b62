"""optsched's PyTorch engine on a CPU (a tiny Llama shape, eager, SDPA attention): the step is right
(a chunked prefill samples what the whole prefill does, grouped-query attention works), ``optsched
profile`` writes a profile with non-negative coefficients and the steps that ``fit`` and
``validate`` read, and ``optsched execute --engine torch`` runs a plan with a chunked prefill and a
preemption, writes the vLLM executor's result format, and ``validate`` reads it. Skipped without
PyTorch (the optional extra ``optsched[torch]``); the CUDA-graph path needs a GPU (docs/torchengine.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (optional extra optsched[torch]) is not installed")

from optsched.cli import main  # noqa: E402
from optsched.costmodel import load_cost_model  # noqa: E402
from optsched.export.vllm_replay import build_plan  # noqa: E402
from optsched.instance import load_instance  # noqa: E402
from optsched.schedule import load_schedule  # noqa: E402
from optsched.torchengine.engine import EngineError, PagePool, StepItem, TorchEngine  # noqa: E402
from optsched.torchengine.shapes import ShapeError, load_shape, shape_from_config  # noqa: E402

E2E = Path(__file__).resolve().parents[1] / "e2e"
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the 2-core CI machine: more threads only contend
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("config", [None, TINY], ids=["tiny-llama", "gqa"])
def test_a_chunked_prefill_samples_what_the_whole_prefill_does(config):
    shape = load_shape("tiny-llama") if config is None else shape_from_config(config, "gqa", "test")
    prompt = (7, 8, 9, 10, 11, 12, 13)
    whole = TorchEngine(shape, "cpu", kv_tokens=256)
    ids, times = whole.run_step([StepItem(0, prompt, 7, True)], repeats=2)
    assert len(ids) == 1 and times.wall > 0 and len(times.walls) == 2
    chunked = TorchEngine(shape, "cpu", kv_tokens=256)
    other = StepItem(1, (40, 41, 42), 3, False)  # another request in the same steps changes nothing for it
    assert chunked.run_step([StepItem(0, prompt[:3], 3, False), other])[0] == []
    assert chunked.run_step([StepItem(0, prompt[3:], 7, True)])[0] == ids
    # a decode after it equals the decode after the whole prefill
    assert (
        chunked.run_step([StepItem(0, (ids[0],), 8, True)])[0] == whole.run_step([StepItem(0, (ids[0],), 8, True)])[0]
    )


def test_page_pool_grows_frees_and_refuses_when_full():
    pool = PagePool(4, 16)
    assert len(pool.ensure(0, 17)) == 2 and len(pool.ensure(0, 32)) == 2
    with pytest.raises(EngineError, match="KV pool exhausted"):
        pool.ensure(1, 48)
    pool.release(0)
    assert len(pool.ensure(1, 48)) == 3


def test_shapes_name_what_is_wrong(tmp_path):
    assert load_shape("llama3-8b").kv_heads == 8 and load_shape("llama2-13b").layers == 40
    with pytest.raises(ShapeError, match="num_attention_heads"):
        shape_from_config({**TINY, "num_attention_heads": 3}, "bad", "bad.json")
    with pytest.raises(ShapeError, match="built-in"):
        load_shape("no-such-model")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    assert load_shape(str(tmp_path)).heads == 4


def test_profile_on_cpu_writes_a_profile_and_steps(tmp_path, capsys):
    toml, steps = tmp_path / "tiny-cpu.toml", tmp_path / "steps.json"
    code = main([
        "profile",
        "--model",
        "tiny-llama",
        "--device",
        "cpu",
        "--tokens",
        "16",
        "--max-context",
        "64",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--out",
        str(toml),
        "--steps-out",
        str(steps),
        "--json",
    ])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    model = load_cost_model(str(toml))
    d = model.to_dict()
    assert min([d["base"], d["per_token"], *d["prefill"].values(), *d["decode"].values()]) >= 0
    assert model.name == "tiny-cpu" and "tiny-llama" in model.source
    assert out["errors"]["all"]["steps"] == out["steps"] > 40
    assert {r["kind"] for r in json.loads(steps.read_text())["grid"]} >= {"prefill1", "chunkctx", "decode", "mixed"}
    assert main(["fit", str(steps), "--json"]) == 0  # the step-measurement format
    refit = json.loads(capsys.readouterr().out)
    assert refit["errors"]["all"]["mean_pct"] == pytest.approx(out["errors"]["all"]["mean_pct"], rel=1e-6)
    assert main(["validate", str(steps), "--profile", str(toml), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["grid"]["all"]["steps"] == out["steps"]


def _plan(tmp_path: Path) -> Path:
    instance = load_instance(E2E / "e2e-tiny.json")
    plan = build_plan(instance, load_schedule(E2E / "e2e-tiny.handmade.json"))
    path = tmp_path / "plan.json"
    plan.save(path)
    return path


def test_execute_with_the_torch_engine_and_validate(tmp_path, capsys):
    plan = _plan(tmp_path)
    out = tmp_path / "result.json"
    assert (
        main([
            "execute",
            str(plan),
            "--engine",
            "torch",
            "--model",
            "tiny-llama",
            "--device",
            "cpu",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--out",
            str(out),
            "--json",
        ])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    result = json.loads(out.read_text())
    assert summary["ok"] and result["format"] == "optsched-vllm-result" and result["version"] == 1
    assert result["outputs"] == {"a": 4, "b": 6, "c": 3} and not result["mismatches"] and not result["length_errors"]
    assert result["run"]["engine"] == "torch" and result["run"]["device"] == "cpu"
    assert [s["preempted"] for s in result["steps"]][3] == ["b"]
    assert all(s["measured_time"] > 0 and len(s["wall_times"]) == 2 for s in result["steps"])
    assert result["measured_total"] == pytest.approx(sum(s["measured_time"] for s in result["steps"]))
    assert main(["validate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compared_steps"] == len(result["steps"]) and report["fit_terms"] is not None


def test_a_plan_the_engine_cannot_follow_is_a_mismatch(tmp_path, capsys):
    plan = _plan(tmp_path)
    data = json.loads(plan.read_text())
    data["steps"][1]["tokens"]["a"] = 9  # 'a' has 8 prompt tokens left after its first chunk of 32
    plan.write_text(json.dumps(data))
    out = tmp_path / "bad.json"
    assert (
        main([
            "execute",
            str(plan),
            "--engine",
            "torch",
            "--model",
            "tiny-llama",
            "--device",
            "cpu",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
        ])
        == 1
    )
    assert "step 1: request 'a': 9 tokens planned, 8 left" in capsys.readouterr().err
    assert json.loads(out.read_text())["ok"] is False


def test_flags_of_the_other_engine_are_refused(tmp_path, capsys):
    plan = _plan(tmp_path)
    assert main(["execute", str(plan), "--engine", "torch", "--model", "tiny-llama", "--cuda-graphs"]) == 2
    assert main(["execute", str(plan), "--model", "tiny-llama", "--device", "cpu"]) == 2
    assert "--engine torch only" in capsys.readouterr().err


def test_profile_refuses_cuda_graphs_off_on_a_cpu(capsys):
    code = main(["profile", "--model", "tiny-llama", "--device", "cpu", "--no-cuda-graphs"])
    assert code == 2
    assert "--no-cuda-graphs: only for a GPU" in capsys.readouterr().err

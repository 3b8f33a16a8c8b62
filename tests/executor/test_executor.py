"""Executor pieces that need no vLLM (tracker, models, engine arguments, comparison, refit), and one
real run on vLLM's CPU build that is skipped when vLLM is not importable."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import numpy as np
import pytest

from optsched.cli import main
from optsched.costfit import fit_terms, profile_toml
from optsched.costmodel import load_cost_model
from optsched.executor.compare import compare
from optsched.executor.models import ModelError, available_configs, resolve_model
from optsched.executor.replay_scheduler import ReplayTracker
from optsched.executor.run import engine_kwargs
from optsched.export.vllm_replay import build_plan
from optsched.instance import parse_instance
from optsched.schedule import Schedule
from tests.support.export import BATCHES, INSTANCE, execute_result


@pytest.fixture()
def plan():
    return build_plan(parse_instance(INSTANCE), Schedule("e2e-tiny", BATCHES), block_size=16)


def test_tracker_steps_and_mismatch_messages():
    t = ReplayTracker()
    assert t.next_step() is None  # inactive: vLLM's default scheduling
    t.begin([({"a": 32, "b": 30}, ()), ({"a": 1}, ("b",))], {"a-1": "a", "b-2": "b"})
    k, tokens, preempt = t.next_step()
    t.check(k, {"a": 32, "b": 30}, [], tokens, preempt)
    assert t.mismatches == []
    k, tokens, preempt = t.next_step()
    t.check(k, {"a": 1, "c": 5}, [], tokens, preempt)
    assert t.next_step() is None  # past the plan's end
    assert len(t.mismatches) == 1
    msg = t.mismatches[0]
    assert msg.startswith("step 1: ") and "'c': 0, 5" in msg and "preemptions differ: plan ['b'], vLLM []" in msg
    assert t.plan_id("a-1") == "a" and t.plan_id("zz") is None


def test_shipped_configs_materialise_without_weights(tmp_path):
    assert {"tiny-llama", "llama2-7b", "llama2-70b", "llama-65b"} <= set(available_configs())
    spec = resolve_model("tiny-llama", tmp_path)
    cfg = json.loads((tmp_path / "tiny-llama" / "config.json").read_text())
    assert spec.load_format == "dummy" and spec.vocab_size == 1024
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 32  # CPU attention's smallest head size
    assert "optsched_note" not in cfg
    assert cfg["num_hidden_layers"] == 2
    # a config file path and a directory
    cfg_path = tmp_path / "my.json"
    cfg_path.write_text(json.dumps(cfg))
    assert resolve_model(str(cfg_path), tmp_path / "w").load_format == "dummy"
    d = tmp_path / "tiny-llama"
    (d / "model.safetensors").write_bytes(b"")
    assert resolve_model(str(d), tmp_path).load_format == "auto"
    spec.check_fits(16384)
    with pytest.raises(ModelError, match="max_model_len 20000.*max_position_embeddings is 16384"):
        spec.check_fits(20000)
    with pytest.raises(ModelError, match="shipped: "):
        resolve_model("no-such-model", tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ModelError, match="not a Hugging Face model config"):
        resolve_model(str(bad), tmp_path)


def test_llama2_7b_config_matches_its_profile(tmp_path):
    spec = resolve_model("llama2-7b", tmp_path)
    cfg = json.loads((tmp_path / "llama2-7b" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == load_cost_model("llama2-7b-a100").layers == 32
    assert cfg["hidden_size"] == 4096 and spec.vocab_size == 32000


def test_engine_kwargs_follow_the_plan(plan, tmp_path):
    kw = engine_kwargs(
        plan, resolve_model("tiny-llama", tmp_path), dtype="float32", eager=True, kv_cache_bytes=None, seed=0
    )
    assert kw["num_gpu_blocks_override"] == plan.engine["kv_blocks"] + 1
    assert kw["block_size"] == 16 and kw["max_num_seqs"] == 3 and kw["max_num_batched_tokens"] == 64
    assert kw["enable_prefix_caching"] is False and kw["skip_tokenizer_init"] is True
    assert kw["load_format"] == "dummy" and "kv_cache_memory_bytes" not in kw


def _fake_result(plan, times):
    """A result object as ``optsched execute`` writes it, with given measured step times."""
    run = {"model": "tiny-llama", "device": "cpu", "vllm": "0.32.0", "date": "2026-11-22"}
    return execute_result(plan, times, [t * 0.9 for t in times], run)


def test_compare_exact_when_measured_equals_predicted(plan):
    rep = compare(_fake_result(plan, [s.predicted_time for s in plan.steps]))
    assert rep["mape"] == pytest.approx(0, abs=1e-9)
    assert rep["total_error_pct"] == pytest.approx(0, abs=1e-9)
    assert rep["compared_steps"] == len(plan.steps)


def test_compare_refuses_a_step_measured_twice(plan):
    result = _fake_result(plan, [s.predicted_time for s in plan.steps])
    result["steps"].append(dict(result["steps"][0]))
    last = len(result["steps"]) - 1
    with pytest.raises(ValueError, match=rf"^field 'steps': step 0 measured twice \(steps\[0\] and steps\[{last}\]\)$"):
        compare(result)


def test_compare_errors_and_refit_recover_a_scaled_model(plan):
    times = [2.0 * s.predicted_time for s in plan.steps]
    rep = compare(_fake_result(plan, times), worst=2)
    assert rep["mape"] == pytest.approx(50.0)
    assert rep["total_error_pct"] == pytest.approx(-50.0)
    assert rep["measured_over_predicted"] == pytest.approx(2.0)
    assert len(rep["worst_steps"]) == 2
    assert rep["fit_terms"]["mape"] < 1e-6  # the doubled profile lies in the fitted family
    refit = load_cost_model(rep["fit_terms"]["profile"])
    for s, t in zip(plan.steps, times):
        assert refit.batch_time(*s.features) == pytest.approx(t, rel=1e-6)


def test_fit_terms_recovers_a_profile_and_toml_round_trips(tmp_path):
    model = load_cost_model("llama2-7b-a100")
    rng = np.random.default_rng(3)
    feats = []
    for _ in range(60):
        chunks = rng.integers(1, 300, size=rng.integers(0, 3))
        n_dec = int(rng.integers(0 if len(chunks) else 1, 16))
        kv = int(n_dec * rng.integers(16, 800))
        feats.append((int(chunks.sum()) + n_dec, int(chunks.sum()), int((chunks**2).sum()), n_dec, kv))
    feats = np.array(feats)
    times = np.array([model.batch_time(*f) for f in feats])
    fit = fit_terms(feats, times)
    assert fit.mean_abs_pct_error < 1e-6
    assert min(fit.model.to_dict()["prefill"].values()) >= 0 and fit.model.base >= 0
    path = tmp_path / "fitted.toml"
    m = fit.model
    path.write_text(profile_toml("fitted", "test", m.base, m.per_token, template=m))
    again = load_cost_model(str(path))
    for f in feats[:10]:
        assert again.batch_time(*f) == pytest.approx(model.batch_time(*f), rel=1e-6)


def test_validate_cli(plan, tmp_path, capsys):
    res = _fake_result(plan, [1.5 * s.predicted_time for s in plan.steps])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    png, toml = tmp_path / "p.png", tmp_path / "f.toml"
    assert main(["validate", str(path), "--plot", str(png), "--profile-out", str(toml), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mape"] == pytest.approx(100 / 3)
    assert png.stat().st_size > 1000 and load_cost_model(str(toml)).layers == 1
    res["ok"], res["mismatches"] = False, ["step 2: ..."]
    path.write_text(json.dumps(res))
    assert main(["validate", str(path)]) == 1
    path.write_text("{}")
    assert main(["validate", str(path)]) == 2


def test_validate_result_under_another_profile(plan, tmp_path, capsys):
    """``--profile`` re-predicts every step of a result from the plan's features: under the plan's own
    profile the plan's predictions; under a profile twice as slow twice them; its errors name the
    profile."""
    res = _fake_result(plan, [s.predicted_time for s in plan.steps])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    assert main(["validate", str(path), "--profile", "llama2-7b-a100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mape"] == pytest.approx(0, abs=1e-9)
    a100 = load_cost_model("llama2-7b-a100")
    slow = tmp_path / "slow.toml"
    slow.write_text(profile_toml("slow", "test", a100.base, a100.per_token, template=replace(a100, layers=64)))
    assert main(["validate", str(path), "--profile", str(slow), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["predicted_total"] == pytest.approx(2 * out["measured_total"])
    assert main(["validate", str(path), "--profile", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err


HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (optional extra; tests/e2e/vllm_e2e.sh installs it)")
def test_execute_on_vllm_cpu(tmp_path):  # pragma: no cover - runs only where vLLM is installed
    # CPU attention needs blocks of a multiple of 32 tokens: M = 128 is 4 of them, the plan peaks at 5
    p = build_plan(parse_instance(INSTANCE), Schedule("e2e-tiny", BATCHES), block_size=32, kv_blocks=5)
    path = tmp_path / "plan.json"
    p.save(path)
    out = tmp_path / "r.json"
    code = main([
        "execute",
        str(path),
        "--model",
        "tiny-llama",
        "--dtype",
        "float32",
        "--repeats",
        "1",
        "--out",
        str(out),
    ])
    res = json.loads(out.read_text())
    assert code == 0, res["mismatches"]
    assert res["mismatches"] == [] and res["outputs"] == {r["id"]: r["output_tokens"] for r in INSTANCE["requests"]}


@pytest.mark.skipif(HAS_VLLM, reason="checks the message given when vLLM is absent")
def test_execute_without_vllm_says_how_to_install(plan, tmp_path, capsys):
    path = tmp_path / "plan.json"
    plan.save(path)
    assert main(["execute", str(path), "--model", "tiny-llama"]) == 3
    err = capsys.readouterr().err
    assert "vLLM is not importable" in err and "optsched[vllm]" in err
    assert main(["execute", str(path), "--model", "no-such-model"]) == 2
    assert main(["execute", str(tmp_path / "missing.json"), "--model", "tiny-llama"]) == 2

"""Tests of the seeded workload generators and of the shipped instances."""

from __future__ import annotations

import json

import numpy as np
import pytest

from optsched.generators import (
    AllAtZero,
    Choice,
    ClippedNormal,
    Fixed,
    Poisson,
    generate,
    gsm8k_like,
    infermax_grid,
    parse_arrivals,
    parse_length,
    shipped_instances,
)
from optsched.instance import MAX_TOKENS, InstanceError, available_instances, load_instance


def test_infermax_grid_is_homogeneous_and_offline():
    inst = infermax_grid(32, 1024, 1024)
    assert len(inst.requests) == 32 and inst.name == "infermax-i1024-o1024-n32"
    assert {(r.prompt_tokens, r.output_tokens, r.arrival) for r in inst.requests} == {(1024, 1024, 0.0)}
    assert (inst.limits.token_budget, inst.limits.kv_capacity) == (4096, 100_000)
    assert inst.cost_model.name == "llama2-7b-a100"


def test_grid_request_that_cannot_fit_is_an_error():
    with pytest.raises(InstanceError, match="can never finish"):
        infermax_grid(4, 1024, 1024, kv_capacity=2000)


def test_gsm8k_like_statistics_and_clipping():
    inst = gsm8k_like(seed=0)
    p = np.array([r.prompt_tokens for r in inst.requests])
    o = np.array([r.output_tokens for r in inst.requests])
    assert len(p) == 1319
    assert p.min() >= 1 and o.min() >= 1 and p.max() <= 512 and o.max() == 512
    # sample mean of 1319 draws: within 4 standard errors of the target (input is barely clipped)
    assert abs(p.mean() - 68.43) < 4 * 25.04 / np.sqrt(1319)
    assert abs(p.std() - 25.04) < 2.0
    # the output is clipped at 512 (about 19% of N(344.83, 187.99) lies above): the mean drops
    assert 300 < o.mean() < 344.83 and (o == 512).mean() > 0.1


def test_same_seed_same_instance_other_seed_differs():
    a, b, c = gsm8k_like(seed=7), gsm8k_like(seed=7), gsm8k_like(seed=8)
    assert a.requests == b.requests and a.requests != c.requests


def test_types_split_in_equal_shares_and_poisson_arrivals():
    inst = generate(101, [(Fixed(8), Fixed(512)), (Fixed(1024), Fixed(16))], name="mix", arrivals=Poisson(10.0), seed=3)
    kinds = [r.prompt_tokens for r in inst.requests]
    assert kinds.count(8) == 51 and kinds.count(1024) == 50
    arr = np.array([r.arrival for r in inst.requests])
    assert (np.diff(arr) >= 0).all() and arr[0] > 0
    assert abs(arr[-1] / 101 - 0.1) < 0.05  # mean gap 1 / rate
    assert "Poisson, 10.0 req/s" in inst.extra["source"] and "seed 3" in inst.extra["source"]


def test_distributions():
    rng = np.random.default_rng(0)
    assert set(Choice((8, 16)).sample(rng, 200)) == {8, 16}
    x = ClippedNormal(5, 100, 2, 9).sample(rng, 500)
    assert x.min() == 2 and x.max() == 9 and x.dtype == np.int64
    assert (AllAtZero().sample(rng, 3) == 0).all()
    with pytest.raises(ValueError):
        Fixed(0)
    with pytest.raises(ValueError):
        Poisson(0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Fixed(MAX_TOKENS + 1),
        lambda: Choice((8, 2**63)),
        lambda: ClippedNormal(1e30, 5),
        lambda: ClippedNormal(5, 1, MAX_TOKENS + 1),
        lambda: ClippedNormal(5, 1, 1, 2**64),
    ],
)
def test_lengths_beyond_max_tokens_are_refused(make):
    with pytest.raises(ValueError, match="exceeds 10,000,000 tokens"):
        make()


def test_a_normal_draw_beyond_max_tokens_is_refused_not_wrapped():
    with pytest.raises(ValueError, match="a draw of .* exceeds"):
        ClippedNormal(5, 1e30).sample(np.random.default_rng(0), 3)
    with pytest.raises(InstanceError, match="request type 0: output length: a draw of"):
        generate(3, [(Fixed(8), ClippedNormal(5, 1e30))], name="g")
    assert ClippedNormal(5, 1e30, 1, MAX_TOKENS).sample(np.random.default_rng(0), 50).max() == MAX_TOKENS


def test_specs():
    assert parse_length("128") == Fixed(128)
    assert parse_length("8,16") == Choice((8, 16))
    assert parse_length("normal:68.43,25.04,1,512") == ClippedNormal(68.43, 25.04, 1, 512)
    assert parse_arrivals("poisson:2.5") == Poisson(2.5) and parse_arrivals("zero") == AllAtZero()
    for bad in ("x", "normal:1", "0", "normal:1,2,0"):
        with pytest.raises(ValueError, match="bad length spec"):
            parse_length(bad)
    with pytest.raises(ValueError, match="bad arrival spec"):
        parse_arrivals("uniform")


@pytest.mark.parametrize("name", sorted(shipped_instances()))
def test_shipped_files_equal_their_recipes(name):
    """instances/make_instances.py wrote these files; regenerating gives the same requests."""
    assert name in available_instances()
    shipped = load_instance(name)
    recipe = shipped_instances()[name]
    assert shipped.to_dict() == json.loads(json.dumps(recipe.to_dict()))
    assert "source" in shipped.extra


def test_every_shipped_instance_loads_and_has_a_source():
    for name in available_instances():
        inst = load_instance(name)
        assert inst.requests
        assert inst.extra.get("source")

"""Hand-checked batch compositions of the unified scheduler, and the incremental Engine API.

Every batch costs exactly 1 s here (cost model ``base = 1``), so batch j of a back-to-back schedule
runs over [j, j + 1]. Each expected schedule is derived by hand in the comments from the rules in
the engine's docstring (docs/policies.md, B1-B11).
"""

from __future__ import annotations

import pytest

from optsched import Instance, Limits, Request, replay
from optsched.costmodel import CostModel
from optsched.policies.config import PolicyConfig
from optsched.policies.engine import Engine, simulate

UNIT = CostModel(name="unit", base=1.0)


def make(reqs, C=8, P=None, M=100, R=None) -> Instance:
    requests = tuple(Request(rid, arr, i, o) for rid, arr, i, o in reqs)
    return Instance("hand", UNIT, Limits(C, P or C, M, R), requests)


def compositions(instance: Instance, policy) -> list[tuple[list[str], list[tuple[str, int]], float | None]]:
    schedule = simulate(instance, policy)
    result = replay(instance, schedule)
    assert result.feasible, result.violations
    return [(list(b.evict), [(it.id, it.tokens) for it in b.items], b.start) for b in schedule.batches]


def test_vllm_prefills_together_then_decodes():
    # r0 (I=4, O=3), r1 (I=4, O=2); C = 8 fits both prompts: batch 0 prefills both (first tokens),
    # batch 1 decodes both (r1 done, g = 2), batch 2 decodes r0 (done, g = 3).
    inst = make([("r0", 0, 4, 3), ("r1", 0, 4, 2)])
    assert compositions(inst, "vllm") == [
        ([], [("r0", 4), ("r1", 4)], None),
        ([], [("r0", 1), ("r1", 1)], None),
        ([], [("r0", 1)], None),
    ]
    out = replay(inst, simulate(inst, "vllm")).outcomes
    assert (out["r0"].ttft, out["r0"].latency, out["r1"].latency) == (1.0, 3.0, 2.0)


def test_vllm_self_eviction_and_front_of_queue():
    # M = 9, r0 and r1 (I=4, O=3). Batch 0 admits both (reserve 4 + 4 = 8 <= 9) and prefills them.
    # Batch 1: r0 decodes (9 <= 9); r1 needs one more slot (10 > 9) and no lower-priority running
    # request exists, so it evicts itself; its prompt becomes m + 1 = 5.
    # Batch 2: r1 (front of R_w) needs 5 slots, only 3 free: admission stops; r0 decodes and finishes.
    # Batch 3: r1 refills 5 tokens (token 2); batch 4: r1 decodes (token 3).
    inst = make([("r0", 0, 4, 3), ("r1", 0, 4, 3)], M=9)
    assert compositions(inst, "vllm") == [
        ([], [("r0", 4), ("r1", 4)], None),
        (["r1"], [("r0", 1)], None),
        ([], [("r0", 1)], None),
        ([], [("r1", 5)], None),
        ([], [("r1", 1)], None),
    ]


def test_eviction_free_waits_instead():
    # Same instance, vllm-ef: each admission reserves I + O - 1 = 6, so r1 waits until r0 finished.
    inst = make([("r0", 0, 4, 3), ("r1", 0, 4, 3)], M=9)
    assert compositions(inst, "vllm-ef") == [
        ([], [("r0", 4)], None),
        ([], [("r0", 1)], None),
        ([], [("r0", 1)], None),
        ([], [("r1", 4)], None),
        ([], [("r1", 1)], None),
        ([], [("r1", 1)], None),
    ]


def test_victim_is_latest_arrived_running_request():
    # M = 13, three requests (I=4, O=3) arriving at 0, 0.5 and 0.7. Batch 0 starts at 0 with r0 only:
    # r0 prefills. Batch 1 (t=1): r1 and r2 have arrived; vLLM admits both
    # (4 + 4 + 4 = 12 <= 13). Batch 2: decodes in arrival order: r0 -> 13 <= 13; r1 needs 14 > 13, the
    # lowest-priority running request outside the batch is r2 (latest arrival): evict it (frees 4).
    inst = make([("r0", 0.0, 4, 3), ("r1", 0.5, 4, 3), ("r2", 0.7, 4, 3)], C=8, M=13)
    comp = compositions(inst, "vllm")
    assert comp[0] == ([], [("r0", 4)], None)
    assert comp[1] == ([], [("r1", 4), ("r2", 4)], None)
    assert comp[2] == (["r2"], [("r0", 1), ("r1", 1)], None)


def test_max_running_limits_admission():
    # R_max = 1: vLLM admits r0 only (R_w stops at r1); r1 is admitted once r0 finished.
    inst = make([("r0", 0, 2, 2), ("r1", 0, 2, 1)], R=1)
    assert compositions(inst, "vllm") == [
        ([], [("r0", 2)], None),
        ([], [("r0", 1)], None),
        ([], [("r1", 2)], None),
    ]


def test_evicted_to_tail_option():
    # M = 9; r0, r1 (I=4, O=3) at 0 and r5 (I=3, O=1) at 0.5. Batch 0 admits r0, r1 (8 slots).
    # Batch 1 (t=1): R_w = [r5] needs 3 > 1 free: stop; decodes: r0 -> 9 slots, r1 lacks one and
    # evicts itself (prompt 5). Front (B1 default): R_w = [r1, r5]; tail: R_w = [r5, r1].
    # Batch 2: front: r1 needs 5 > 4 free, stop, r0 decodes; tail: r5 needs 3 <= 4, admitted.
    inst = make([("r0", 0.0, 4, 3), ("r1", 0.0, 4, 3), ("r5", 0.5, 3, 1)], M=9)
    front = compositions(inst, "vllm")
    tail = compositions(
        inst, PolicyConfig("vllm-tail", ("waiting", "running"), hybrid=False, chunked=False, evicted_to_front=False)
    )
    assert front[:2] == tail[:2] == [([], [("r0", 4), ("r1", 4)], None), (["r1"], [("r0", 1)], None)]
    assert front[2] == ([], [("r0", 1)], None)
    assert tail[2] == ([], [("r5", 3)], None)


def test_sarathi_decode_first_and_prefill_budget_counts_decodes():
    # C = 8, P = 6 (sarathi's chunk = min(512, P) = 6). r0 (I=2, O=3) at 0; r1 (I=10, O=1) at 0.5.
    # Batch 0: r0 prefill 2. Batch 1 (t=1): r0 decodes (1 token); r1 may take P - N_tok = 6 - 1 = 5
    # tokens (B4). Batch 2: r0 decodes (done); r1 continues with min(5 left, 6 - 1) = 5: prompt done.
    inst = make([("r0", 0.0, 2, 3), ("r1", 0.5, 10, 1)], C=8, P=6)
    assert compositions(inst, "sarathi") == [
        ([], [("r0", 2)], None),
        ([], [("r0", 1), ("r1", 5)], None),
        ([], [("r0", 1), ("r1", 5)], None),
    ]
    # Without B4 (P counts prefill tokens only) r1 takes 6 then 4.
    plain = PolicyConfig(
        "sarathi-p", ("running_decode", "running_prefill", "waiting"), chunk=512, prefill_counts_decodes=False
    )
    assert compositions(inst, plain)[1:] == [([], [("r0", 1), ("r1", 6)], None), ([], [("r0", 1), ("r1", 4)], None)]


def test_vllm_chunks_a_prompt_that_can_never_fit_whole():
    # C = P = 8 and I = 20: vLLM has no chunked prefill, but 20 > P can never fit, so it is chunked
    # 8 + 8 + 4 (token 1 with the last chunk), then one decode.
    inst = make([("r0", 0, 20, 2)])
    assert [items for _, items, _ in compositions(inst, "vllm")] == [
        [("r0", 8)],
        [("r0", 8)],
        [("r0", 4)],
        [("r0", 1)],
    ]


def test_idle_engine_waits_for_the_next_arrival_with_an_explicit_start():
    inst = make([("a", 0.0, 2, 1), ("b", 10.0, 2, 1)])
    assert compositions(inst, "vllm") == [([], [("a", 2)], None), ([], [("b", 2)], 10.0)]
    assert replay(inst, simulate(inst, "vllm")).metrics.makespan == 11.0


def test_rank_orders_by_prompt_or_output_length():
    # C = 8 fits one prompt of 6 per batch, so the order of service is the ranking.
    inst = make([("long-in", 0, 6, 1), ("short-in", 0, 5, 3), ("mid", 0, 6, 2)], C=8, P=8)
    first = lambda policy: [items[0][0] for _, items, _ in compositions(inst, policy) if items[0][1] > 1]  # noqa: E731
    assert first("rank-i")[0] == "short-in"
    assert first("rank-o")[0] == "long-in"
    assert first("rank-org")[0] == "long-in"


def test_rank_org_equals_sarathi_pc():
    # FCFS admission with tail eviction keeps R_r a prefix of the arrival order, so ranking by
    # arrival in one group schedules exactly like Sarathi with P = C (documented in docs/policies.md).
    reqs = [(f"r{k}", 0.1 * k, 3 + 7 * k % 11, 1 + 5 * k % 7) for k in range(30)]
    inst = make(reqs, C=16, P=16, M=40)
    assert simulate(inst, "rank-org").batches == simulate(inst, "sarathi-pc").batches


# ---------------------------------------------------------------------- incremental API


def test_incremental_engine_matches_simulate():
    reqs = [(f"r{k}", 0.37 * k, 2 + 5 * k % 9, 1 + 3 * k % 5) for k in range(25)]
    inst = make(reqs, C=12, M=30, R=4)
    for policy in ("vllm", "sarathi", "rank-i", "sarathi-ef"):
        engine = Engine(inst.limits, inst.cost_model, policy, name=inst.name)
        for r in inst.requests:  # dispatch each request at its arrival, as a multi-worker router would
            engine.advance(r.arrival)
            engine.add_request(r)
        engine.advance()
        assert engine.done()
        assert engine.schedule().batches == simulate(inst, policy).batches
        assert replay(engine.instance(), engine.schedule()).feasible


def test_snapshot_reports_queues_and_kv():
    inst = make([("r0", 0, 4, 3), ("r1", 0, 4, 3), ("late", 50.0, 2, 1)], M=9)
    engine = Engine.from_instance(inst, "vllm")
    engine.advance(1.5)  # batches 0 ([0,1]) and 1 ([1,2]) start before 1.5
    snap = engine.snapshot()
    assert snap.now == 2.0
    assert [(s.id, s.m, s.generated, s.prompt, s.reserved) for s in snap.running] == [("r0", 5, 2, 4, 5)]
    assert [(s.id, s.m, s.generated, s.prompt) for s in snap.waiting] == [("r1", 0, 1, 5)]
    assert [s.id for s in snap.pending] == ["late"]
    assert (snap.kv_used, snap.kv_reserved) == (5, 5)
    assert not engine.done()
    engine.advance()
    assert engine.done() and engine.snapshot().running == ()


def test_request_that_can_never_fit_is_refused():
    engine = Engine(Limits(8, 8, 10, None), UNIT, "vllm")
    with pytest.raises(ValueError, match="can never finish"):
        engine.add_request(Request("big", 0.0, 8, 4))
    engine.add_request(Request("ok", 0.0, 8, 3))
    with pytest.raises(ValueError, match="added twice"):
        engine.add_request(Request("ok", 0.0, 1, 1))


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(KeyError, match="known: .*sarathi"):
        simulate(make([("a", 0, 1, 1)]), "fifo")


def test_advance_to_an_arrival_time_then_resume():
    # Regression: an idle engine stopped at exactly the next arrival must not let that request into
    # a batch starting before its arrival when resumed.
    inst = make([("a", 0.0, 1, 1), ("b", 5.0, 1, 1)])
    engine = Engine.from_instance(inst, "vllm")
    engine.advance(5.0)  # batch 0 runs over [0, 1]; b's batch would start at 5.0, not before 5.0
    assert engine.now == 1.0 and [s.id for s in engine.snapshot().pending] == ["b"]
    engine.advance()
    assert engine.schedule().batches == simulate(inst, "vllm").batches
    assert replay(inst, engine.schedule()).feasible


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "rank-o"])
def test_request_state_times_agree_with_replay(policy):
    """request_state's first-token and finish times are the replay's, evictions included."""
    import random

    rng = random.Random(3)
    for _ in range(20):
        reqs = [
            (f"r{k}", round(rng.uniform(0, 5), 2), rng.randint(1, 9), rng.randint(1, 8))
            for k in range(rng.randint(2, 12))
        ]
        inst = make(reqs, C=rng.choice([4, 8, 16]), M=rng.choice([18, 40, 200]))
        engine = Engine.from_instance(inst, policy)
        engine.advance(2.0)
        for r in inst.requests:
            st = engine.request_state(r.id)
            assert st.finish is None or st.first_token is not None and st.first_token <= st.finish
        engine.advance()
        out = replay(inst, engine.schedule()).outcomes
        for r in inst.requests:
            st = engine.request_state(r.id)
            assert (st.first_token, st.finish) == pytest.approx((out[r.id].first_token, out[r.id].finish))
    with pytest.raises(KeyError):
        engine.request_state("nope")


def test_admission_that_evicts_to_the_front_admits_the_candidate_and_keeps_the_victim():
    """FCFS R_w with ``evict_for_waiting`` and ``evicted_to_front``: admitting q0 (a refill of 2
    tokens) evicts q1 to the front of R_w. Popping the front would take q1, not q0: q1 would be lost
    (unfinished after the last batch) and q0 would stay queued while running (a case found by
    Hypothesis in test_policy_properties)."""
    cfg = PolicyConfig(
        "custom", ("waiting", "running"), hybrid=True, chunked=False, evict_for_waiting=True, evicted_to_front=True
    )
    reqs = (Request("q0", 0.0, 1, 2), Request("q1", 0.0, 18, 1), Request("q2", 0.0, 1, 1))
    inst = Instance("front", CostModel(name="unit", base=1.0), Limits(2, 1, 19, None), reqs)
    schedule = simulate(inst, cfg)
    result = replay(inst, schedule)
    assert result.feasible, result.violations
    assert schedule.batches[1].evict == ("q0",) and schedule.batches[2].evict == ("q1",)
    assert [b.items[0].id for b in schedule.batches[3:6]] == ["q0", "q1", "q2"]  # the victim before q2

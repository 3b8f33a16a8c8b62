"""``optsched export --format chrome-trace``: the trace-event JSON format, and the batch track equal
to the replay."""

from __future__ import annotations

import json

import pytest

from optsched.cli import main
from optsched.instance import load_instance
from optsched.policies import simulator_for
from optsched.schedule import load_schedule, replay

REQUIRED = {
    "X": ("name", "ph", "ts", "dur", "pid", "tid"),
    "i": ("name", "ph", "ts", "pid", "tid", "s"),
    "C": ("name", "ph", "ts", "pid", "args"),
    "M": ("name", "ph", "pid", "args"),
}


@pytest.mark.parametrize(
    "instance, policy", [("toy-4", "vllm"), ("infermax-i64-o1024-n32-m10k", "sarathi"), ("poisson-mixed-100", "rank-i")]
)
def test_chrome_trace_events_and_batch_track(tmp_path, capsys, instance, policy):
    sched, out = tmp_path / "s.json", tmp_path / "trace.json"
    assert main(["simulate", instance, "--policy", policy, "--out", str(sched)]) == 0
    assert main(["export", str(sched), "--format", "chrome-trace", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    events = data["traceEvents"]
    inst = load_instance(instance)
    schedule = load_schedule(sched)
    res = replay(inst, schedule)
    for ev in events:
        assert ev["ph"] in REQUIRED, ev
        for key in REQUIRED[ev["ph"]]:
            assert key in ev, (key, ev)
        assert isinstance(ev["name"], str) and isinstance(ev["pid"], int)
        if ev["ph"] != "M":
            assert isinstance(ev["ts"], float) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert ev["dur"] >= 0
    batches = [ev for ev in events if ev["ph"] == "X" and ev["cat"] == "batch"]
    assert len(batches) == len(schedule.batches)
    for j, ev in enumerate(batches):
        assert ev["args"]["batch"] == j
        assert (ev["args"]["start"], ev["args"]["end"]) == (res.starts[j], res.ends[j])
        assert ev["ts"] == res.starts[j] * 1e6
        assert ev["ts"] + ev["dur"] == pytest.approx(res.ends[j] * 1e6, rel=1e-12, abs=1e-9)
        assert ev["args"]["prefill_tokens"] == res.prefill_tokens[j]
        assert ev["args"]["decode_items"] == res.decode_items[j]
    # Every request has a track; its runs cover exactly the tokens of its items.
    names = {
        ev["tid"]: ev["args"]["name"]
        for ev in events
        if ev["ph"] == "M" and ev["name"] == "thread_name" and ev["pid"] == 2
    }
    assert sorted(names.values()) == sorted(r.id for r in inst.requests)
    tokens: dict[str, int] = {}
    for ev in events:
        if ev["ph"] == "X" and ev.get("cat") == "request" and ev["name"] in ("prefill", "decode"):
            tokens[names[ev["tid"]]] = tokens.get(names[ev["tid"]], 0) + ev["args"]["tokens"]
    for r in inst.requests:
        assert tokens[r.id] == sum(it.tokens for b in schedule.batches for it in b.items if it.id == r.id)
    firsts = {names[ev["tid"]]: ev["ts"] for ev in events if ev["name"] == "first token"}
    assert firsts == {rid: o.first_token * 1e6 for rid, o in res.outcomes.items()}


def test_chrome_trace_refuses_infeasible_and_foreign_options(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"instance": "toy-4", "batches": [{"items": [{"id": "r0", "tokens": 1}]}]}))
    assert main(["export", str(bad), "--format", "chrome-trace", "--out", str(tmp_path / "t.json")]) == 1
    assert "export refused" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    sched = tmp_path / "s.json"
    inst = load_instance("toy-4")
    simulator_for("vllm")(inst).save(sched)
    assert (
        main([
            "export",
            str(sched),
            "--format",
            "chrome-trace",
            "--out",
            str(tmp_path / "t.json"),
            "--block-size",
            "16",
        ])
        == 2
    )
    assert "--block-size: applies only to --format vllm-replay" in capsys.readouterr().err


def test_a_schedule_of_another_instance_name_is_warned_of(tmp_path, capsys):
    """Its request ids match, its traffic may not: export warns as check does, and goes on."""
    sched, out = tmp_path / "s.json", tmp_path / "trace.json"
    assert main(["simulate", "toy-4", "--policy", "vllm", "--out", str(sched)]) == 0
    sched.write_text(sched.read_text().replace('"instance": "toy-4"', '"instance": "toy-4-other"'))
    capsys.readouterr()
    assert main(["export", str(sched), "--instance", "toy-4", "--format", "chrome-trace", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "was made for instance 'toy-4-other', exporting it with 'toy-4'" in err and out.exists()
    assert main(["check", "toy-4", str(sched)]) == 0
    assert "was made for instance 'toy-4-other', checking it against 'toy-4'" in capsys.readouterr().err

"""optsched report: the bound <= best <= policy chain on every shipped instance, clean replays,
stable JSON, partial reports on Ctrl-C and on the deadline, solver integration, the HTML page."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from optsched import problems
from optsched.cli import main
from optsched.instance import available_instances, load_instance
from optsched.policies import POLICIES
from optsched.report import build_report, gather_bounds, report_html, report_table, report_to_dict
from optsched.report.terminal import same_batches
from optsched.result import SolveResult
from optsched.schedule import item_phases, replay
from tests.support.budgets import ExpiresAfter
from tests.support.chromium import run_chromium
from tests.support.report import random_schedule, serial_fcfs

REL = 1e-9
#: Instances above this many requests run with the registered policies' first few only (test time).
FULL_POLICY_SET_UP_TO = 200
#: The policies run on those big instances.
BIG_INSTANCE_POLICIES = ("vllm", "sarathi", "rank-i")


@pytest.fixture
def fcfs(monkeypatch: pytest.MonkeyPatch) -> str:
    """Register the test-only serial FCFS policy (so that the report has a policy before the simulator lands)."""
    monkeypatch.setitem(POLICIES, "serial-fcfs", "tests.support.report:serial_fcfs")
    return "serial-fcfs"


def register(
    monkeypatch: pytest.MonkeyPatch, name: str, *, solve: str | None = None, bounds: str | None = None
) -> None:
    """Register a test formulation for the test only."""
    monkeypatch.setattr(problems, "FORMULATIONS", list(problems.FORMULATIONS))
    problems.register(problems.Formulation(name, solve, bounds))


def check_chain(report) -> None:
    """Each proven comparable bound <= best objective <= each policy's; every schedule replays cleanly."""
    best = report.best
    assert best is not None
    for label, value, schedule, _ in report.candidates():
        res = replay(report.instance, schedule)
        assert res.feasible, (label, res.violations[:3])
        assert best[1] <= value * (1 + REL), (label, value, best)
    for b in report.bounds:
        if b.valid and b.comparable:
            assert b.value <= best[1] * (1 + REL), (b, best)
    for p in report.policies:
        assert p.status in ("ok", "skipped", "n/a"), (p.policy, p.status, p.message)
        if p.status == "n/a":  # only policies of other problems may reject an instance
            assert p.message


@pytest.mark.parametrize("name", available_instances())
def test_chain_on_shipped_instances(name: str) -> None:
    """Every registered policy (the first few on big instances, for test time) and the generic bounds."""
    if not POLICIES:
        pytest.skip("no policy registered")
    inst = load_instance(name)
    policies = sorted(POLICIES)
    if len(inst.requests) > FULL_POLICY_SET_UP_TO:
        policies = [p for p in BIG_INSTANCE_POLICIES if p in POLICIES] or policies[:3]
    report = build_report(inst, time_limit=None, policies=policies, solve_max_requests=0)
    assert not report.partial, report.notes
    check_chain(report)
    assert report.objective == ("latency" if len({r.arrival for r in inst.requests}) > 1 else "makespan")
    names = {b.name for b in report.bounds if b.source == "generic"}
    if report.objective == "makespan":
        assert names == {"work", "critical-path"}
    else:  # the busy-time LP where it is solved within its limits
        listed = {"critical-path", "srpt-work", "pair-interference", "pair-wait", "ttft-plus-rest"}
        assert listed <= names <= listed | {"busy-time-work"}
    ok = [p for p in report.policies if p.status == "ok"]
    assert ok and len(report.candidates()) == len(ok)


def test_json_is_stable_and_documented(fcfs: str) -> None:
    inst = load_instance("toy-4")
    a = report_to_dict(build_report(inst, time_limit=None, solve_max_requests=0))
    time.sleep(0.01)
    b = report_to_dict(build_report(inst, time_limit=None, solve_max_requests=0))
    a.pop("run")
    b.pop("run")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert set(a) == {
        "instance",
        "requests",
        "cost_model",
        "limits",
        "objective",
        "bounds",
        "best_bound",
        "best",
        "solver",
        "tail_bounds",
        "schedules",
        "partial",
        "notes",
    }
    assert set(a["schedules"][0]) == {"kind", "name", "status", "objective", "gap", "metrics", "message"}


def test_cli_json_and_table(fcfs: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "toy-4", "--json", "--quiet", "--solve-max-requests", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["instance"] == "toy-4" and data["best"]["source"].startswith("policy:")
    assert data["best_bound"]["value"] <= data["best"]["objective"]
    assert set(data["run"]) == {
        "time_limit",
        "wall_time",
        "phase_times",
        "policy_wall_times",
        "bounder_wall_times",
        "solver_wall_time",
    }
    assert main(["report", "toy-4", "--solve-max-requests", "0"]) == 0
    captured = capsys.readouterr()
    assert "Lower bounds" in captured.out and "policy:serial-fcfs" in captured.out
    assert "generic bounds" in captured.err  # progress on stderr


def test_cli_default_options_run_the_solver(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's form (no --solve-max-requests): the solver runs (on aladdin-fig3 it proves an
    optimum below every policy in well under a second; the limit leaves room for a loaded machine)."""
    assert main(["report", "aladdin-fig3", "--json", "--quiet", "--time-limit", "120"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["solver"]["problem"] == "infermax" and data["solver"]["status"] == "optimal"
    assert data["best"]["source"] == "solver:infermax"
    assert data["best_bound"]["value"] <= data["best"]["objective"] + 1e-9


def test_cli_bad_input(fcfs: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "no-such-instance"]) == 2
    assert main(["report", "toy-4", "--policies", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["report", "toy-4", "--time-limit", "0"]) == 2
    assert main(["report", "toy-4", "--html", "/no/such/folder/r.html"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_ctrl_c_gives_partial_report(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(instance):
        raise KeyboardInterrupt

    monkeypatch.setattr("tests.support.report.interrupted", interrupted, raising=False)
    monkeypatch.setitem(POLICIES, "zz-interrupt", "tests.support.report:interrupted")
    report = build_report(load_instance("toy-4"), time_limit=None, policies=[fcfs, "zz-interrupt"])
    assert report.partial and "interrupted during policies" in report.notes[-1]
    assert [p.status for p in report.policies] == ["ok", "skipped"]
    check_chain(report)
    assert "PARTIAL" in report_table(report)
    assert "Partial report" in report_html(report)


def test_deadline_gives_partial_report(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(instance):
        time.sleep(30)

    monkeypatch.setattr("tests.support.report.slow", slow, raising=False)
    monkeypatch.setitem(POLICIES, "zz-slow", "tests.support.report:slow")
    monkeypatch.setitem(POLICIES, "zz-slow-2", "tests.support.report:slow")
    t0 = time.perf_counter()
    report = build_report(
        load_instance("toy-4"), time_limit=1.0, policies=[fcfs, "zz-slow", "zz-slow-2"], solve_max_requests=0
    )
    assert time.perf_counter() - t0 < 2.0
    # the slow policy is stopped at the policies' share of the limit, the later ones are not started
    slow_run = {p.policy: p for p in report.policies}
    assert slow_run["zz-slow"].status == "skipped" and slow_run["zz-slow"].message.startswith("stopped after")
    assert slow_run["zz-slow-2"].status == "skipped" and slow_run[fcfs].status == "ok"
    assert any(n.startswith("policy zz-slow stopped after") for n in report.notes), report.notes
    assert report.best is not None and report.best[0] == "policy:serial-fcfs"


def test_compiled_policies_run_first(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM and Sarathi come first, then the policies that run on the compiled engine, so that a time
    limit on a large trace still finds them and a best schedule; the others keep their order."""
    order = ["hybrid", "hybrid-b", "rank-o", "sarathi", "vllm-hy", "vllm"]  # the hybrid ones run in Python
    report = build_report(load_instance("toy-4"), time_limit=None, policies=order)
    assert [p.policy for p in report.policies] == ["sarathi", "vllm", "rank-o", "vllm-hy", "hybrid", "hybrid-b"]


def test_p99_bounds_that_do_not_fit_their_share_are_noted(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The P99 bounds get a share of the time limit; past it they are noted as not computed and the
    report goes on to the solver (it is not partial)."""

    def slow(instance, budget):
        time.sleep(30)

    monkeypatch.setattr("optsched.problems.infermax.goodput_bounds.tail_bounds", slow)
    t0 = time.perf_counter()
    report = build_report(load_instance("toy-4"), time_limit=4.0, policies=[fcfs], solve_max_requests=0)
    assert time.perf_counter() - t0 < 4.5
    assert not report.partial and report.tail_bounds == {}
    assert any(n.startswith("P99 bounds: not computed within their share") for n in report.notes), report.notes


def _fake_solver(objective_shift: float):
    def solve(instance, options, budget):
        assert options["objective"] == "makespan" and budget.limited
        schedule = serial_fcfs(instance)
        value = replay(instance, schedule).metrics.makespan
        return SolveResult(
            problem="fake",
            solver="test",
            status="feasible",
            objective=value + objective_shift,
            bound=0.5 * value,
            schedule=schedule,
        )

    return solve


@pytest.mark.parametrize("shift, ok", [(0.0, True), (1.0, False)])
def test_solver_is_replayed_and_checked(shift: float, ok: bool, fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.support.report.fake_solve", _fake_solver(shift), raising=False)
    register(monkeypatch, "fake", solve="tests.support.report:fake_solve")
    report = build_report(load_instance("toy-4"), time_limit=10, policies=[fcfs], solve_problem="fake")
    assert report.solver is not None
    if ok:
        assert report.solver.replay is not None and report.best[0] == "solver:fake"
        assert any(b.name == "fake-solver" and not b.comparable for b in report.bounds)
    else:  # the solver's own objective disagrees with the replay: reported, never used
        assert report.solver.replay is None and "disagrees" in report.solver.message
        assert report.best[0] == "policy:serial-fcfs"
    check_chain(report)


@pytest.mark.parametrize("time_limit", [10.0, 600.0])
def test_solver_gets_the_time_left_but_the_room(time_limit: float, fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short limit keeps a fifth for after the solver; a long one only 11 s (not a fifth of 600 s)."""
    limits: list[float] = []
    solve = _fake_solver(0.0)

    def recording(instance, options, budget):
        limits.append(budget.left())
        return solve(instance, options, budget)

    monkeypatch.setattr("tests.support.report.recording_solve", recording, raising=False)
    register(monkeypatch, "fake", solve="tests.support.report:recording_solve")
    t0 = time.perf_counter()
    build_report(load_instance("toy-4"), time_limit=time_limit, policies=[fcfs], solve_problem="fake")
    used = time.perf_counter() - t0  # the phases before the solver took less than this
    room = 0.2 * time_limit + 1.0 if time_limit < 50.0 else 11.0
    assert time_limit - room - used <= limits[0] <= time_limit - room


def test_solver_size_limit(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch, "fake", solve="tests.support.report:never_called")
    report = build_report(load_instance("toy-4"), time_limit=10, solve_problem="fake", solve_max_requests=2)
    assert report.solver is not None and report.solver.result is None and "4 requests > 2" in report.solver.message


def test_gather_bounds_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from optsched.result import Bound

    def good(instance, options, budget):
        return [Bound("lp", 0.001, True, f"objective {options['objective']}")]

    def bad(instance, options, budget):
        raise ValueError("does not apply")

    monkeypatch.setattr("tests.support.report.good_bounds", good, raising=False)
    monkeypatch.setattr("tests.support.report.bad_bounds", bad, raising=False)
    register(monkeypatch, "zz-good", bounds="tests.support.report:good_bounds")
    register(monkeypatch, "zz-bad", bounds="tests.support.report:bad_bounds")
    notes: list[str] = []
    inst = load_instance("toy-4")
    bounds = gather_bounds(inst, notes=notes)
    assert [b.source for b in bounds][:2] == ["generic", "generic"]
    assert any(b.source == "zz-good" and b.note == "objective makespan" for b in bounds)
    assert any("zz-bad" in n and "does not apply" in n for n in notes)
    only = gather_bounds(inst, problem="zz-good")
    assert [b.source for b in only] == ["zz-good"]
    with pytest.raises(KeyError):
        gather_bounds(inst, problem="nope")


def test_the_report_runs_only_the_bounders_it_compares(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bounder of another problem than SCHEDULE_PROBLEMS is not run by the report (its bounds
    would be listed, never compared: at full trace size they cost tens of seconds); a note says so."""
    called = []

    def listed_only(instance, options, budget):
        called.append(True)
        raise AssertionError("an uncompared bounder was run")

    monkeypatch.setattr("tests.support.report.listed_only", listed_only, raising=False)
    register(monkeypatch, "zz-other", bounds="tests.support.report:listed_only")
    report = build_report(load_instance("toy-4"), time_limit=None, policies=[fcfs], solve_max_requests=0)
    assert called == [] and "zz-other" not in report.bounder_times
    assert "bounder zz-other: not run (its bounds are not compared with the schedules')" in report.notes
    assert set(report.bounder_times) == {"infermax"}


def test_item_phases_agree_with_replay() -> None:
    """The plots' prefill/decode split sums to replay's per-batch prefill tokens and decode items."""
    rng = random.Random(5)
    inst = load_instance("toy-4")
    for _ in range(20):
        schedule = random_schedule(inst, rng, evict_prob=0.3)
        res = replay(inst, schedule)
        assert res.feasible
        for j, (batch, phases) in enumerate(zip(schedule.batches, item_phases(inst, schedule))):
            assert sum(it.tokens for it, p in zip(batch.items, phases) if p) == res.prefill_tokens[j]
            assert sum(1 for p in phases if not p) == res.decode_items[j]


def test_html_is_self_contained(fcfs: str, tmp_path) -> None:
    from optsched.report import write_html

    report = build_report(load_instance("toy-4"), time_limit=None, policies=[fcfs], solve_max_requests=0)
    path = tmp_path / "r.html"
    write_html(report, path)
    text = path.read_text()
    assert "<script" not in text.lower()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", text)
    assert all(r.startswith(("data:", "#")) for r in refs), refs
    # one schedule only: bars, its timeline, memory, TTFT/TPOT (no second "worst policy" timeline)
    assert text.count("<svg") == 4


def test_html_draws_figures_only_while_time_is_left(fcfs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the deadline the page is still written, with the figures drawn so far and a note naming
    the rest; with no time left at all none is drawn (nor matplotlib loaded for them)."""
    report = build_report(load_instance("toy-4"), time_limit=None, policies=[fcfs], solve_max_requests=0)
    assert report_html(report).count("<svg") == 4 and "Not drawn" not in report_html(report)
    none = report_html(report, ExpiresAfter(0))  # type: ignore[arg-type]
    assert "<svg" not in none and "Not drawn, the time limit being reached: every figure." in none
    assert "<table" in none
    two = report_html(report, ExpiresAfter(3))  # type: ignore[arg-type]  # the start, then two figures
    assert two.count("<svg") == 2
    assert "Not drawn, the time limit being reached: KV-cache use and running size; TTFT and TPOT" in two
    monkeypatch.setattr("optsched.report.html.requested", lambda: True)  # Ctrl-C: said so, not a limit
    assert "Not drawn, the report being interrupted: every figure." in report_html(report, ExpiresAfter(0))  # type: ignore[arg-type]


def test_html_renders_in_headless_chromium(tmp_path) -> None:
    from optsched.report import write_html

    # the console check must see errors when there are some
    control = tmp_path / "control.html"
    control.write_text("<html><body><script>console.error('boom')</script></body></html>")
    _, _, console = run_chromium(control, tmp_path, "--dump-dom")
    assert any("boom" in line for line in console), console

    page = tmp_path / "report.html"
    report = build_report(load_instance("toy-4"), time_limit=None, solve_max_requests=0)
    write_html(report, page)
    rc, dom, console = run_chromium(page, tmp_path, "--dump-dom")
    assert rc == 0 and console == []
    # bars, the best schedule's timeline and vLLM's (else Sarathi's) when it differs, memory, TTFT/TPOT
    found = {c[0]: c[2] for c in report.candidates()}
    engine = next((found[f"policy:{p}"] for p in ("vllm", "sarathi") if f"policy:{p}" in found), None)
    contrast = engine is not None and not same_batches(engine, report.best[2])
    assert dom.count("<svg") == (5 if contrast else 4)
    assert "<table>" in dom  # every policy named, alone or folded with identical ones (a = b)
    assert all(re.search(rf"(policy:| = ){re.escape(p.policy)}(?=[ <])", dom) for p in report.policies)
    shot = tmp_path / "shot.png"
    rc, _, console = run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,3000")
    assert rc == 0 and console == [] and shot.stat().st_size > 20_000


@pytest.mark.usefixtures("infermax_kernels")  # a cold numba cache would compile inside its 20 s
def test_chain_with_the_exact_solver() -> None:
    """The registered infermax solver on a small shipped instance: its schedule and bound join the chain."""
    if "infermax" not in problems.SOLVERS or "aladdin-fig3" not in available_instances():
        pytest.skip("the infermax solver or the aladdin-fig3 instance is not available")
    report = build_report(load_instance("aladdin-fig3"), time_limit=20)
    assert report.solver is not None and report.solver.result is not None
    assert report.solver.replay is not None and report.solver.replay.feasible
    check_chain(report)
    if report.solver.result.status == "optimal":
        assert report.proven_optimal and report.best[0] == "solver:infermax"


@pytest.mark.parametrize("objective", ["latency", "ttft"])
def test_other_objectives(objective: str) -> None:
    """The chain holds for the mean latency and the mean TTFT too (their own generic and load-aware
    bounds); the best schedule's objective is the replay's metric, in seconds."""
    if not POLICIES:
        pytest.skip("no policy registered")
    report = build_report(load_instance("toy-4"), objective=objective, time_limit=None, solve_max_requests=0)
    check_chain(report)
    assert report.best_bound is not None and report.best_bound.objective == objective
    assert all(b.objective == objective for b in report.bounds)
    metric = {"latency": "mean_latency", "ttft": "mean_ttft"}[objective]
    assert report.best[1] == pytest.approx(getattr(report.best[3].metrics, metric), rel=1e-12)
    data = report_to_dict(report)
    assert data["best"]["objective"] == pytest.approx(data["best"]["metrics"][metric], rel=1e-12)
    assert all(value >= data["best_bound"]["value"] for _, value, _, _ in report.candidates())


def test_completion_is_read_as_latency() -> None:
    report = build_report(load_instance("toy-4"), objective="completion", time_limit=None, solve_max_requests=0)
    assert report.objective == "latency"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped TimeUps
def test_the_alarm_fires_again_when_its_exception_is_dropped() -> None:
    """A TimeUp raised inside a ``__del__`` is dropped by Python; the alarm fires again."""
    import gc

    from optsched.budget import TimeBudget
    from optsched.report.alarm import TimeUp, alarm

    class Slow:
        def __del__(self) -> None:
            time.sleep(0.3)  # the alarm lands here, where its exception is ignored

    t0 = time.perf_counter()
    with pytest.raises(TimeUp), alarm(TimeBudget.of(0.1)):
        Slow()
        gc.collect()
        time.sleep(5)
    assert time.perf_counter() - t0 < 1.0


def test_the_solver_gets_the_best_policy_it_takes_as_its_warm_start() -> None:
    """``report --problem hybrid``: the best policy (sarathi or vllm on toy-4) is no hybrid policy,
    which the hybrid solver refuses as a warm start; the report hands it the best hybrid policy and
    the solver runs."""
    report = build_report(load_instance("toy-4"), objective="latency", time_limit=30, solve_problem="hybrid")
    assert report.solver is not None and report.solver.result is not None, report.solver
    assert "warm_start" not in (report.solver.message or "")
    ok = [p for p in report.policies if p.status == "ok"]
    best = min(ok, key=lambda p: p.objective)
    assert not best.policy.startswith("hybrid")  # the case the choice is for

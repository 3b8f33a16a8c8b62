"""Schedule files: Parquet and the fast JSON path give the schedule the strict JSON parser gives.

- Every shipped instance x several policies: save as JSON and as Parquet, load both; equal to the
  simulated schedule (batches, instance name, meta), and the fast JSON path equals the strict one.
- Hand schedules with starts, evictions and empty batches round-trip through Parquet.
- Files the fast JSON path cannot vouch for (a key given twice, a boolean token count, an integer
  beyond 64 bits, an unknown field, a colon inside an id) load as the strict parser loads them, or
  fail with its message.
- A malformed Parquet schedule is refused naming the file, the row and the field.
- The command line: ``simulate --out X.parquet`` then ``check`` and ``export`` read it.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from optsched.instance import load_instance
from optsched.jsonio import loads_json, read_text
from optsched.policies.engine import simulate
from optsched.schedule import Batch, Item, Schedule, ScheduleError, load_schedule
from tests.support.paths import INSTANCES, REPO

SHIPPED = sorted(p.stem for p in INSTANCES.glob("*.json"))
POLICIES = ("vllm", "sarathi", "rank-i", "vllm-ef")


def strict(path) -> Schedule:
    return Schedule.from_dict(loads_json(read_text(path, ScheduleError), str(path), ScheduleError), str(path))


@pytest.mark.parametrize("name", SHIPPED)
def test_round_trip_of_every_shipped_instance(name: str, tmp_path) -> None:
    inst = load_instance(INSTANCES / f"{name}.json")
    for policy in POLICIES:
        try:
            schedule = simulate(inst, policy)
        except ValueError:
            continue
        for suffix in (".json", ".parquet"):
            path = tmp_path / f"s{suffix}"
            schedule.save(path)
            loaded = load_schedule(path)
            assert loaded == schedule and loaded.instance == inst.name
            assert dict(loaded.meta) == json.loads(json.dumps(dict(schedule.meta)))
        assert strict(tmp_path / "s.json") == load_schedule(tmp_path / "s.json")


HAND = Schedule(
    "hand",
    (
        Batch((Item("a", 3), Item("b:1", 1)), (), 0.5),
        Batch((), (), 2.0),
        Batch((), ("a",)),
        Batch((Item("a", 4),), ("b:1", "c")),
        Batch(()),
    ),
    {"note": "x", "nested": {"k": [1, 2.5, None]}},
)


def test_hand_schedule_round_trips_through_parquet(tmp_path) -> None:
    path = tmp_path / "h.parquet"
    HAND.save(path)
    loaded = load_schedule(path)
    assert loaded == HAND
    assert loaded.batches[1].start == 2.0 and loaded.batches[2].start is None
    HAND.save(tmp_path / "h.json")
    assert load_schedule(tmp_path / "h.json") == HAND == strict(tmp_path / "h.json")


BATCH = '{"items": [{"id": "a", "tokens": 3}]}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"instance": "x", "batches": [{"items": [{"id": "a", "tokens": 3, "tokens": 2}]}]}', "given twice"),
        ('{"instance": "x", "batches": [{"items": [{"id": "a", "tokens": true}]}]}', "must be an integer"),
        ('{"instance": "x", "batches": [{"items": [{"id": "a", "tokens": 123456789012345678901}]}]}', None),
        ('{"instance": "x", "batches": [{"items": [{"id": "a", "tokens": 9223372036854775808}]}]}', None),
        ('{"instance": "x", "batches": [{"items": [], "when": 1}]}', "unknown field"),
        ('{"instance": "x", "batches": [' + BATCH + '], "meta": {"n": 123456789012345678901}}', None),
        ('{"instance": "x", "instance": "y", "batches": [' + BATCH + "]}", "given twice"),
        ('{"instance": "x:y", "batches": [{"items": [{"id": "a:b", "tokens": 3, "note": "z"}]}]}', None),
        ('{"instance": "x", "batches": [{"start": NaN, "items": []}]}', "malformed JSON"),
        ('{"instance": "x", "batches": [{"start": 1e300, "items": []}]}', "must lie within"),
        ('{"instance": 4, "batches": []}', "field 'instance': must be a string"),
        ('{"instnce": "x", "batches": []}', r"unknown field\(s\) \['instnce'\] \(free-form data goes in 'meta'\)"),
    ],
)
def test_json_the_fast_path_cannot_vouch_for_loads_strictly(text: str, message: str | None, tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    if message is None:
        loaded = load_schedule(path)
        assert loaded == strict(path)
        assert type(loaded.meta.get("n", 0)) is int
        return
    with pytest.raises(ScheduleError, match=message) as got:
        load_schedule(path)
    with pytest.raises(ScheduleError) as want:
        strict(path)
    assert str(got.value) == str(want.value)


def _write(path, table: pa.Table, meta: bytes | None = b'{"instance": "x", "meta": {}}') -> None:
    if meta is not None:
        table = table.replace_schema_metadata({b"optsched.schedule": meta})
    pq.write_table(table, path)


def _table(**override) -> pa.Table:
    cols = {
        "batch": pa.array([0, 0, 1], pa.int64()),
        "request": pa.array(["a", "b", "a"]),
        "tokens": pa.array([3, 2, 1], pa.int64()),
        "evict": pa.array([False, False, False]),
        "start": pa.array([None, None, None], pa.float64()),
    }
    cols.update(override)
    return pa.table({k: v for k, v in cols.items() if v is not None})


@pytest.mark.parametrize(
    ("override", "meta", "message"),
    [
        ({}, None, "no 'optsched.schedule' metadata"),
        ({}, b"[1]", "must be a JSON object"),
        ({"tokens": None}, b'{"instance": "x"}', r"column\(s\) \['tokens'\] missing"),
        ({"batch": pa.array([0, 2, 2], pa.int64())}, b'{"instance": "x"}', "row 1: field 'batch'"),
        ({"batch": pa.array([1, 1, 1], pa.int64())}, b'{"instance": "x"}', "row 0: field 'batch'"),
        ({"tokens": pa.array([3, None, 1], pa.int64())}, b'{"instance": "x"}', "row 1: field 'tokens'"),
        ({"evict": pa.array([False, True, False])}, b'{"instance": "x"}', "row 1: field 'tokens'"),
        ({"request": pa.array(["a", None, "a"])}, b'{"instance": "x"}', "row 1: field 'request'"),
        ({"start": pa.array([1.0, 2.0, None])}, b'{"instance": "x"}', "row 1: field 'start'"),
        ({"start": pa.array([None, None, math.nan])}, b'{"instance": "x"}', "row 2: field 'start': must be a finite"),
        ({"start": pa.array([math.nan, math.nan, None])}, b'{"instance": "x"}', "row 0: field 'start': must be a fin"),
        ({"evict": pa.array([1, 0, 0], pa.int8())}, b'{"instance": "x"}', "column 'evict': must be a boolean"),
    ],
)
def test_malformed_parquet_is_refused_naming_row_and_field(override, meta, message, tmp_path) -> None:
    path = tmp_path / "s.parquet"
    _write(path, _table(**override), meta)
    with pytest.raises(ScheduleError, match=message) as got:
        load_schedule(path)
    assert str(got.value).startswith(str(path))


def test_not_a_parquet_file_is_refused(tmp_path) -> None:
    path = tmp_path / "s.parquet"
    path.write_text("{}")
    with pytest.raises(ScheduleError, match="cannot read the Parquet schedule"):
        load_schedule(path)


def test_a_parquet_file_of_another_writer_loads(tmp_path) -> None:
    path = tmp_path / "s.parquet"
    _write(path, _table(start=pa.array([0.5, 0.5, None])))
    loaded = load_schedule(path)
    assert loaded.batches == (Batch((Item("a", 3), Item("b", 2)), (), 0.5), Batch((Item("a", 1),)))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optsched", *args], cwd=REPO, capture_output=True, text=True)


def test_simulate_writes_parquet_that_check_and_export_read(tmp_path) -> None:
    inst = str(INSTANCES / "splitwise-conv-100.json")
    out = tmp_path / "s.parquet"
    done = _cli("simulate", inst, "--policy", "sarathi", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_schedule(out) == simulate(load_instance(inst), "sarathi")
    checked = _cli("check", inst, str(out), "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["feasible"] is True
    trace = tmp_path / "t.json"
    exported = _cli("export", str(out), "--instance", inst, "--format", "chrome-trace", "--out", str(trace))
    assert exported.returncode == 0, exported.stderr
    assert trace.exists()


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_round_trip_through_parquet_in_several_row_groups(seed: int, tmp_path) -> None:
    rng = random.Random(seed)
    ids = [f"r{k}" for k in range(rng.randint(1, 12))]
    batches = tuple(
        Batch(
            tuple(Item(rng.choice(ids), rng.randint(1, 9)) for _ in range(rng.choice([0, 1, 3]))),
            tuple(rng.sample(ids, rng.choice([0, 0, 1]))),
            rng.choice([None, None, rng.uniform(0, 50)]),
        )
        for _ in range(rng.randint(0, 30))
    )
    schedule = Schedule("x", batches)
    path = tmp_path / "s.parquet"
    schedule.save(path)
    table = pq.read_table(path)
    pq.write_table(table, path, row_group_size=rng.randint(1, 7))  # several chunks per column
    assert load_schedule(path) == schedule


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_a_non_finite_meta_value_is_written_as_null(suffix: str, tmp_path) -> None:
    """``slo-shed``'s configuration holds ``shed_work = inf``: its file holds null there (standard
    JSON, which the strict parser reads) and the batches round-trip."""
    schedule = simulate(load_instance("toy-4"), "slo-shed")
    assert schedule.meta["policy_config"]["shed_work"] == math.inf
    path = tmp_path / f"s{suffix}"
    schedule.save(path)
    loaded = load_schedule(path) if suffix == ".parquet" else strict(path)
    assert loaded.batches == schedule.batches and loaded.meta["policy_config"]["shed_work"] is None


def test_a_parquet_name_in_capitals_is_parquet(tmp_path) -> None:
    schedule = simulate(load_instance("toy-4"), "vllm")
    path = tmp_path / "S.PARQUET"
    schedule.save(path)
    assert path.read_bytes()[:4] == b"PAR1" and load_schedule(path) == schedule

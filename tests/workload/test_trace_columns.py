"""Requests held as columns (:class:`optsched.request.RequestColumns`): a loaded trace's requests are
the same :class:`~optsched.instance.Request` objects as built one by one from the file's values, on
real traces and on random files of every layout, by the pyarrow path and the standard-library
reader alike; nothing builds them before a caller asks for one; a bad value still names the file,
the line and the column."""

from __future__ import annotations

import datetime
import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from optsched import request as request_module
from optsched.cli import main
from optsched.instance import NO_EXTRA, Request, RequestColumns
from optsched.workload import FORMATS, WorkloadError, load_trace, load_trace_csv, loaders
from optsched.workload.readers import TICKS_PER_SECOND

MODEL = "llama2-7b-a100"


def _stamp(ticks: int, digits: int, zone: str = "") -> str:
    """``ticks`` (100 ns since 0001-01-01) as ``YYYY-MM-DD hh:mm:ss[.f]`` with ``digits`` fractional digits."""
    seconds, fraction = divmod(ticks, TICKS_PER_SECOND)
    day, second = divmod(seconds, 86400)
    moment = datetime.datetime.combine(datetime.date.fromordinal(day), datetime.time()) + datetime.timedelta(
        seconds=second
    )
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return (text + "." + str(fraction).zfill(7)[:digits] if digits else text) + zone


def _times(rng: np.random.Generator, fmt: str, n: int) -> tuple[list[str], list[float] | list[int], int]:
    """n arrival fields of ``fmt``, their values (seconds, or 100 ns ticks) and the values per second."""
    if fmt in ("azure", "azure-multimodal"):
        digits = int(rng.integers(0, 8))
        step = 10 ** (7 - digits)
        ticks = (rng.integers(0, 40 * 86400 * 10**digits, n) * step + 638358417460000000).tolist()
        if rng.random() < 0.3:  # some widths differ: pyarrow's parser and the regular expression read them
            fields = [_stamp(t, digits if k % 2 else 7) for k, t in enumerate(ticks)]
        else:
            fields = [_stamp(t, digits) for t in ticks]
        return fields, ticks, TICKS_PER_SECOND
    values = (rng.random(n) * 10 ** rng.integers(1, 7)).round(int(rng.integers(0, 7))).tolist()
    return [repr(v) for v in values], values, 1


def random_trace(rng: np.random.Generator, fmt: str, path: Path) -> tuple[Path, list[Request]]:
    """A random trace of ``fmt`` written to ``path`` (gzipped at random) and the requests it holds."""
    f = FORMATS[fmt]
    n = int(rng.integers(1, 300))
    prompts = rng.integers(1, 5000, n).tolist()
    outputs = rng.integers(1, 2000, n).tolist()
    if f.failed_if_no_output:
        outputs = [0 if rng.random() < 0.1 else o for o in outputs]
    fields, times, per_second = _times(rng, fmt, n) if f.arrival else ([""] * n, [0.0] * n, 1)
    if f.jsonl:
        times, per_second = rng.integers(0, 10**9, n).tolist(), 1000
        lines = [
            json.dumps({"timestamp": t, "input_length": p, "output_length": o, "hash_ids": [1, 2]}) + "\n"
            for t, p, o in zip(times, prompts, outputs)
        ]
    else:
        values = {f.prompt: prompts, f.output: outputs, **({f.arrival: fields} if f.arrival else {})}
        columns = list(f.columns)
        lines = [",".join(columns) + "\n"] + [
            ",".join(str(values[c][k]) if c in values else "GPT-4" if c == "Model" else "7" for c in columns) + "\n"
            for k in range(n)
        ]
    kept = [k for k in range(n) if outputs[k] > 0]
    low = min((times[k] for k in kept), default=0)
    seconds = [(t - low) / per_second if per_second > 1 else t - low for t in times]
    data = "".join(lines).encode()
    if rng.random() < 0.3:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path, [Request(f"row{k}", seconds[k], prompts[k], outputs[k]) for k in kept]


def _same(inst, expected: list[Request]) -> None:
    requests = inst.requests
    assert isinstance(requests, RequestColumns)
    arrival, prompt, output = inst.columns
    assert arrival.tolist() == [r.arrival for r in expected]
    assert prompt.tolist() == [r.prompt_tokens for r in expected]
    assert output.tolist() == [r.output_tokens for r in expected]
    assert requests.ids == [r.id for r in expected]
    assert requests == tuple(expected) and tuple(expected) == requests
    assert [(r.id, r.arrival, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (r.id, r.arrival, r.prompt_tokens, r.output_tokens) for r in expected
    ]
    assert all(type(r.arrival) is float and type(r.prompt_tokens) is int for r in requests)
    assert hash(requests) == hash(tuple(expected))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_random_traces_load_the_requests_written(tmp_path, reader, fmt, seed):
    rng = np.random.default_rng([seed, list(FORMATS).index(fmt)])
    path, expected = random_trace(rng, fmt, tmp_path / ("t.jsonl" if FORMATS[fmt].jsonl else "t.csv"))
    _same(load_trace(path, MODEL, format=fmt), expected)


def test_real_traces_equal_their_rows(data_dir, reader):
    """The shipped-format real traces (``vidur``): the column path's requests are the rows' values."""
    import csv

    for name in ("splitwise_conv.csv", "splitwise_code.csv"):
        path = data_dir / "traces" / name
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        low = min(float(r["arrived_at"]) for r in rows)
        expected = [
            Request(f"row{k}", float(r["arrived_at"]) - low, int(r["num_prefill_tokens"]), int(r["num_decode_tokens"]))
            for k, r in enumerate(rows)
        ]
        _same(load_trace(path, MODEL), expected)


#: A bad value per layout's prompt column, and the words of its error.
BAD_VALUES = [("12x", "not an integer"), ("0", ">= 1"), ("-4", ""), ("0x10", "")]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_bad_value_names_the_file_line_and_column(tmp_path, reader, fmt, seed):
    rng = np.random.default_rng([seed, 99, list(FORMATS).index(fmt)])
    f = FORMATS[fmt]
    path, _ = random_trace(rng, fmt, tmp_path / ("t.jsonl" if f.jsonl else "t.csv"))
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.decode().splitlines(keepends=True)
    first = 0 if f.jsonl else 1
    k = int(rng.integers(first, len(lines)))
    value, words = BAD_VALUES[seed % len(BAD_VALUES)] if not f.jsonl else ('"12"', "not a finite number")
    if f.jsonl:
        obj = json.loads(lines[k])
        lines[k] = lines[k].replace(f'"input_length": {obj["input_length"]}', f'"input_length": {value}')
    else:
        cells = lines[k].rstrip("\n").split(",")
        cells[list(f.columns).index(f.prompt)] = value
        lines[k] = ",".join(cells) + "\n"
    bad = tmp_path / ("bad.jsonl" if f.jsonl else "bad.csv")
    bad.write_text("".join(lines))
    with pytest.raises(WorkloadError) as err:
        load_trace(bad, MODEL, format=fmt)
    message = str(err.value)
    assert message.startswith(f"{bad}: line {k + 1}, ") and repr(f.prompt) in message and words in message, message


def test_a_bad_date_time_exits_2_naming_the_line(tmp_path, capsys, reader):
    rows = [f"2023-11-16 18:15:{s:02d}.{s:07d},10,5\n" for s in range(40)]
    rows[23] = "2023-02-29 18:15:23.0000023,10,5\n"  # not a date: 2023 is no leap year
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(rows))
    assert main(["info", str(path), "--cost-model", MODEL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: line 25, column 'TIMESTAMP'" in err, err


def test_the_loader_builds_no_request_object_until_asked(tmp_path, monkeypatch):
    path, expected = random_trace(np.random.default_rng(7), "burstgpt", tmp_path / "b.csv")
    built = []
    real = request_module.requests_from_columns
    monkeypatch.setattr(request_module, "requests_from_columns", lambda *a: built.append(1) or real(*a))
    inst = load_trace(path, MODEL)
    offline = load_trace_csv(path, MODEL, offline=True)
    first = expected[len(expected) // 2]
    assert len(inst.requests) == len(expected) and first.id in inst and inst.index(first.id) == len(expected) // 2
    assert inst.columns[1].tolist() == [r.prompt_tokens for r in expected]
    assert inst.with_requests(inst.requests).requests is inst.requests
    assert offline.columns[0].tolist() == [0.0] * len(expected) and offline.requests.ids == inst.requests.ids
    assert inst.requests[len(expected) // 2] == first and inst.requests[-1] == expected[-1] and built == []
    assert list(inst.requests) == expected and built == [1]
    assert list(inst.requests) == expected and inst.requests[0] is inst.requests[0] and built == [1]  # kept


def test_request_columns_behave_as_the_tuple_of_their_requests():
    columns = RequestColumns([0.5, 0.0, 2.25], [10, 20, 30], [1, 2, 3], numbers=[0, 4, 9])
    plain = (Request("row0", 0.5, 10, 1), Request("row4", 0.0, 20, 2), Request("row9", 2.25, 30, 3))
    assert columns.ids == ["row0", "row4", "row9"] and len(columns) == 3
    assert pickle.loads(pickle.dumps(columns)) == columns == plain
    assert RequestColumns([0.5, 0.0, 2.25], [10, 20, 30], [1, 2, 3], numbers=[0, 4, 9]) == columns
    assert RequestColumns([0.5, 0.0, 2.25], [10, 20, 31], [1, 2, 3], numbers=[0, 4, 9]) != columns
    assert columns != plain[:2] and columns[1:] == plain[1:] and columns[-1] == plain[-1]
    assert columns + plain[:1] == plain + plain[:1] and plain[:1] + columns == plain[:1] + plain
    assert hash(columns) == hash(plain) and columns.index(plain[1]) == 1 and plain[2] in columns
    assert all(r.extra is NO_EXTRA and r.slo is None and r.predicted_output_tokens is None for r in columns)
    assert not columns.arrival.flags.writeable and columns.at_zero().ids == columns.ids
    with pytest.raises(ValueError, match="different lengths"):
        RequestColumns([0.0], [1, 2], [1])


#: Date-times of every edge the fixed-width reading handles, in groups spanning less than 1e9 s
#: (the latest arrival) whose rows each have the same width.
EDGES = [
    ["0001-01-01 00:00:00", "0001-03-01 12:34:56", "0030-12-31 23:59:59"],
    ["9999-12-31 23:59:59", "9990-01-01 00:00:00", "9996-02-29 01:02:03"],
    ["1900-02-28 23:59:60", "1900-03-01 00:00:00", "1901-01-01 00:00:00"],
    [
        "2024-02-29 12:00:00",
        "2000-02-29T00:00:00",
        "1999-12-31 23:59:60",
        "2023-12-31 23:59:60",
        "2023-11-16 19:05:09",
        "2001-03-01 00:00:00",
    ],
]

BAD_STAMPS = [
    ("2023-02-29 00:00:00", "day is out of range"),
    ("1900-02-29 00:00:00", "day is out of range"),
    ("2023-13-01 00:00:00", "month must be in 1..12"),
    ("2023-04-31 00:00:00", "day is out of range"),
    ("0000-01-01 00:00:00", "year 0 is out of range"),
    ("2023-01-01 24:00:00", "time of day out of range"),
    ("2023-01-01 00:60:00", "time of day out of range"),
    ("2023-01-01 00:00:61", "time of day out of range"),
    ("2023-01-01 00:00:70", "time of day out of range"),
    ("2023-01-01_00:00:00", "not a date-time"),
    ("2023-01-01 00:0a:00", "not a date-time"),
]


@pytest.mark.parametrize("digits", [0, 3, 7])
@pytest.mark.parametrize("group", range(len(EDGES)))
def test_date_times_of_one_width_at_every_edge(tmp_path, monkeypatch, reader, group, digits):
    """Read by the numpy digit path (not pyarrow's parser, not the standard reader) with the pyarrow reader."""
    from optsched.workload import arrow
    from optsched.workload.readers import datetime_ticks

    if reader == "arrow":
        monkeypatch.setattr(arrow, "_parsed_ticks", lambda column: pytest.fail("not read digit by digit"))
        monkeypatch.setattr(loaders, "_csv_rows", lambda *a: pytest.fail("read by the standard reader"))

    stamps = [s + ("." + "1234567"[:digits] if digits else "") for s in EDGES[group]]
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{s},5,2\n" for s in stamps))
    ticks = [datetime_ticks(s) for s in stamps]
    expected = [Request(f"row{k}", (t - min(ticks)) / TICKS_PER_SECOND, 5, 2) for k, t in enumerate(ticks)]
    _same(load_trace(path, MODEL), expected)


@pytest.mark.parametrize(("stamp", "words"), BAD_STAMPS)
def test_a_bad_date_time_of_one_width_names_its_line(tmp_path, reader, stamp, words):
    rows = [f"2023-11-16 18:{m:02d}:00,5,2\n" for m in range(30)]
    rows[17] = f"{stamp},5,2\n"
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(rows))
    with pytest.raises(WorkloadError) as err:
        load_trace(path, MODEL)
    assert str(err.value).startswith(f"{path}: line 19, column 'TIMESTAMP': ") and words in str(err.value), err.value


@pytest.mark.parametrize("capacity", [None, 2500])
def test_the_request_check_on_columns_words_the_first_offender_as_on_objects(capacity):
    from optsched.instance import InstanceError, Limits, check_requests

    rng = np.random.default_rng(5)
    prompts, outputs = rng.integers(1, 2000, 500), rng.integers(1, 2000, 500)
    prompts[[300, 400]] = 10**7 + 1
    columns = RequestColumns(np.zeros(500), prompts, outputs, numbers=np.arange(500) * 2)
    limits = Limits(kv_capacity=capacity)
    with pytest.raises(InstanceError) as on_columns:
        check_requests(columns, limits, "f.csv")
    with pytest.raises(InstanceError) as on_objects:
        check_requests(tuple(columns.objects()), limits, "f.csv")
    assert str(on_columns.value) == str(on_objects.value) and "f.csv: request 'row" in str(on_columns.value)
    fine = RequestColumns(np.zeros(3), [1, 2, 3], [1, 1, 1])
    check_requests(fine, Limits(kv_capacity=3), "f.csv")
    twice = RequestColumns(np.zeros(2), [1, 2], [1, 1], numbers=[4, 4])
    with pytest.raises(InstanceError, match="request 'row4': field 'id': duplicate id"):
        check_requests(twice, Limits(), "f.csv")


def test_checking_a_loaded_trace_under_new_limits_builds_no_request_object(tmp_path, monkeypatch):
    """What the command line does to a trace before the command runs: load, then check under its limits."""
    from optsched.instance import InstanceError, Limits, check_requests

    path, expected = random_trace(np.random.default_rng(3), "vidur", tmp_path / "v.csv")
    monkeypatch.setattr(request_module, "requests_from_columns", lambda *a: pytest.fail("Request objects built"))
    inst = load_trace(path, MODEL, check_capacity=False)
    check_requests(inst.requests, Limits(kv_capacity=10**6), str(path), check_ids=False)
    worst = max(expected, key=lambda r: r.prompt_tokens + r.output_tokens)
    with pytest.raises(InstanceError, match="exceeds limits.kv_capacity"):
        check_requests(inst.requests, Limits(kv_capacity=worst.max_kv - 1), str(path), check_ids=False)


#: Spellings of counts the grammar reads (blanks around, leading zeros, -0 as a failed BurstGPT row).
SPELLINGS = [" 5", "5 ", "\t7", "007", "0000000000000000009", "10000000", "-0"]


def test_count_spellings_read_alike_by_both_readers(tmp_path, monkeypatch):
    header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    rows = [f"{k}.5,GPT-4,{s if s != '-0' else '3'},{s},1,Conversation log\n" for k, s in enumerate(SPELLINGS)]
    path = tmp_path / "b.csv"
    path.write_text(header + "".join(rows))
    with monkeypatch.context() as m:  # read by pyarrow (as int64), not handed to the standard reader
        m.setattr(loaders, "_csv_rows", lambda *a: pytest.fail("read by the standard reader"))
        fast = load_trace(path, MODEL)
    monkeypatch.setattr(loaders, "arrow_available", lambda: False)
    slow = load_trace(path, MODEL)
    assert tuple(fast.requests) == tuple(slow.requests) and len(fast.requests) == len(SPELLINGS) - 1
    assert fast.extra["notes"] == slow.extra["notes"]


@pytest.mark.parametrize("value", ["1000000000000000000", "0x10", "99999999999999999999"])
def test_a_count_outside_the_grammar_is_named_alike_by_both_readers(tmp_path, monkeypatch, value):
    path = tmp_path / "v.csv"
    path.write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,{value},5\n")
    with pytest.raises(WorkloadError) as fast:
        load_trace(path, MODEL)
    monkeypatch.setattr(loaders, "arrow_available", lambda: False)
    with pytest.raises(WorkloadError) as slow:
        load_trace(path, MODEL)
    assert str(fast.value) == str(slow.value) and f"{path}: line 3, column 'num_prefill_tokens'" in str(fast.value)


def test_gzip_files_read_as_gzip_reads_them(tmp_path):
    """One member (inflated by zlib directly), several members, zero padding; truncated, damaged
    and trailing bytes named as damaged or truncated gzip data, as GzipFile names them."""
    from optsched.workload.readers import read_bytes

    text = "".join(f"{k},{k % 7 + 1},{k % 5 + 1}\n" for k in range(20000)).encode()
    one = gzip.compress(text)
    cases = {"one": one, "members": one + gzip.compress(text[:100]), "padded": one + b"\0" * 9}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert read_bytes(str(tmp_path / name)) == gzip.decompress(data), name
    damaged = bytearray(one)
    damaged[-6] ^= 0xFF  # the CRC
    bad = {"truncated": one[: len(one) // 2], "damaged": bytes(damaged), "trailing": one + b"garbage"}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(WorkloadError, match=f"{name}: damaged or truncated gzip data"):
            read_bytes(str(tmp_path / name))

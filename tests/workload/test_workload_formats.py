"""Trace loaders (:mod:`optsched.workload`): every format from its published column list, with BOM,
CRLF, gzip, quoted fields and extra columns; malformed rows exit 2 naming the line and the column."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from optsched.cli import main
from optsched.workload import FORMATS, WorkloadError, load_trace, loaders, trace_format_of
from optsched.workload.arrow import arrow_available


@pytest.fixture(params=["arrow", "stdlib"])
def reader(request, monkeypatch):
    """Run a test with the pyarrow fast path (when installed) and with the standard-library reader."""
    if request.param == "arrow":
        if not arrow_available():
            pytest.skip("pyarrow is not installed (the fast path of optsched[parquet])")
        calls = []
        real = loaders.read_csv_columns
        monkeypatch.setattr(loaders, "read_csv_columns", lambda *a: calls.append(1) or real(*a))
        yield calls
    else:
        monkeypatch.setattr(loaders, "arrow_available", lambda: False)
        yield None


#: Per format: header, data rows (as written), expected (arrival, prompt, output) per kept request.
CASES = {
    "vidur": (
        ["arrived_at", "num_prefill_tokens", "num_decode_tokens"],
        [["10.5", "374", "44"], ["14.814579", "396", "109"], ["20", "7", "1"]],
        [(0.0, 374, 44), (14.814579 - 10.5, 396, 109), (9.5, 7, 1)],
    ),
    "vidur-lengths": (
        ["num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio"],
        [["3772", "54", "3826", "69.85"], ["2015", "156", "2171", "12.9"]],
        [(0.0, 3772, 54), (0.0, 2015, 156)],
    ),
    "azure": (
        ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
        [
            ["2023-11-16 18:15:46.6805900", "374", "44"],
            ["2023-11-16 18:15:50.0000001", "396", "109"],
            ["2023-11-17 00:00:00", "12", "3"],
        ],
        [
            (0.0, 374, 44),
            ((50_0000001 - 46_6805900) / 10**7, 396, 109),
            ((86400 * 10**7 - (18 * 3600 + 15 * 60 + 46) * 10**7 - 6805900) / 10**7, 12, 3),
        ],
    ),
    "azure-multimodal": (
        ["TIMESTAMP", "NumImages", "ContextTokens", "GeneratedTokens"],
        [["2025-05-10 00:00:01.5+00:00", "2", "1000", "20"], ["2025-05-10 01:00:00.25+01:00", "0", "30", "2"]],
        # 01:00:00.25+01:00 is 00:00:00.25 UTC: the earliest request
        [(1.25, 1000, 20), (0.0, 30, 2)],
    ),
    "burstgpt": (
        [
            "Timestamp",
            "Model",
            "Request tokens",
            "Response tokens",
            "Total tokens",
            "Log Type",
            "Session ID",
            "Elapsed time",
        ],
        [
            ["5", "ChatGPT", "472", "18", "490", "Conversation log", "s1", "0.5"],
            ["7.25", "GPT-4", "1087", "0", "1087", "Conversation log", "s2", "0.1"],
            ["9", "GPT-4", "100", "300", "400", "API log", "s3", "2"],
        ],
        [(0.0, 472, 18), (4.0, 100, 300)],
    ),
    "splitwise-sim": (
        [
            "request_id",
            "request_type",
            "application_id",
            "arrival_timestamp",
            "batch_size",
            "prompt_size",
            "token_size",
        ],
        [["0", "2", "0", "0.125", "1", "1020", "129"], ["1", "2", "0", "0.5", "1", "83", "19"]],
        [(0.0, 1020, 129), (0.375, 83, 19)],
    ),
}

MOONCAKE = [
    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]},
    {"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 49]},
    {"timestamp": 30000, "input_length": 5, "output_length": 1, "hash_ids": []},
]


def _csv_text(header: list[str], rows: list[list[str]], *, quote: bool = False, eol: str = "\n") -> str:
    def field(v: str) -> str:
        return '"' + v.replace('"', '""') + '"' if quote or "," in v else v

    return "".join(",".join(field(v) for v in line) + eol for line in [header, *rows])


def _write(path: Path, text: str, *, bom: bool = False, gz: bool = False) -> Path:
    data = (("\ufeff" if bom else "") + text).encode("utf-8")
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


VARIANTS = {
    "plain": {},
    "bom": {"bom": True},
    "crlf": {"eol": "\r\n"},
    "quoted": {"quote": True},
    "gzip": {"gz": True},
    "bom-crlf-quoted-gzip": {"bom": True, "eol": "\r\n", "quote": True, "gz": True},
}


def _check(inst, expected) -> None:
    assert len(inst.requests) == len(expected)
    got = [(r.arrival, r.prompt_tokens, r.output_tokens) for r in inst.requests]
    assert got == expected


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fmt", list(CASES))
def test_csv_formats_load_exactly(tmp_path, fmt, variant, reader):
    header, rows, expected = CASES[fmt]
    opts = dict(VARIANTS[variant])
    bom, gz = opts.pop("bom", False), opts.pop("gz", False)
    path = _write(tmp_path / "trace.csv", _csv_text(header, rows, **opts), bom=bom, gz=gz)
    assert trace_format_of(path).name == fmt  # detected from the header
    inst = load_trace(path, "llama2-7b-a100")
    _check(inst, expected)
    assert inst.name == "trace" and [r.id for r in inst.requests][0] == "row0"
    _check(load_trace(path, "llama2-7b-a100", format=fmt), expected)
    if reader is not None and FORMATS[fmt].time_unit != "datetime":
        assert reader  # the fast path read it


def test_fast_path_equals_stdlib_on_real_traces(data_dir, monkeypatch):
    if not arrow_available():
        pytest.skip("pyarrow is not installed (the fast path of optsched[parquet])")
    for name in (
        "splitwise_conv.csv",
        "splitwise_code.csv",
        "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
    ):
        path = data_dir / "traces" / name
        fast = load_trace(path, "llama2-7b-a100")
        with monkeypatch.context() as m:
            m.setattr(loaders, "arrow_available", lambda: False)
            slow = load_trace(path, "llama2-7b-a100")
        assert fast.requests == slow.requests and len(fast.requests) > 1000


def test_burstgpt_drops_failed_requests_with_a_note_and_filters_a_model(tmp_path, capsys, reader):
    header, rows, _ = CASES["burstgpt"]
    path = _write(tmp_path / "b.csv", _csv_text(header, rows))
    inst = load_trace(path, "llama2-7b-a100")
    assert [r.id for r in inst.requests] == ["row0", "row2"]  # ids point back to the data rows
    assert any("1 rows with 0 Response tokens (failed requests) dropped" in n for n in inst.extra["notes"])
    gpt4 = load_trace(path, "llama2-7b-a100", model="GPT-4")
    assert [(r.id, r.arrival) for r in gpt4.requests] == [("row2", 0.0)]
    assert any("1 rows of other models than 'GPT-4' left out" in n for n in gpt4.extra["notes"])
    with pytest.raises(WorkloadError, match="models in the file: ChatGPT, GPT-4"):
        load_trace(path, "llama2-7b-a100", model="Claude")
    assert main(["info", str(path), "--cost-model", "llama2-7b-a100", "--model", "GPT-4", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["requests"] == 1 and "optsched: note:" in captured.err


@pytest.mark.parametrize("variant", ["plain", "bom", "crlf", "gzip"])
def test_mooncake_jsonl(tmp_path, variant):
    eol = "\r\n" if variant == "crlf" else "\n"
    text = "".join(json.dumps(o) + eol for o in MOONCAKE)
    path = _write(tmp_path / "mooncake_trace.jsonl", text, bom=variant == "bom", gz=variant == "gzip")
    assert trace_format_of(path).name == "mooncake"
    inst = load_trace(path, "llama2-7b-a100")
    _check(inst, [(0.0, 6955, 52), (3.053, 6472, 26), (2.518, 5, 1)])
    assert any("hash_ids" in n for n in inst.extra["notes"])
    assert (30535 - 27482) / 1000 == 3.053


def test_every_format_has_a_test():
    assert set(FORMATS) == {*CASES, "mooncake"}


def _cli(capsys, path, *args):
    code = main(["info", str(path), "--cost-model", "llama2-7b-a100", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "fmt, row_index, column, value, needle",
    [
        ("vidur", 1, 1, "12x", "line 3, column 'num_prefill_tokens': not an integer ('12x')"),
        ("azure", 0, 0, "2023-13-01 00:00:00", "line 2, column 'TIMESTAMP': month must be in 1..12"),
        ("azure", 2, 0, "yesterday", "line 4, column 'TIMESTAMP': not a date-time"),
        ("azure-multimodal", 1, 3, "-4", "line 3, column 'GeneratedTokens': must be an integer >= 1, got -4"),
        ("burstgpt", 2, 0, "nan", "line 4, column 'Timestamp': not a finite number"),
        ("splitwise-sim", 0, 6, "1.5", "line 2, column 'token_size': not an integer ('1.5')"),
        ("vidur-lengths", 0, 0, "0", "line 2, column 'num_prefill_tokens': must be an integer >= 1, got 0"),
    ],
)
def test_malformed_rows_exit_2_naming_line_and_column(tmp_path, capsys, fmt, row_index, column, value, needle, reader):
    header, rows, _ = CASES[fmt]
    rows = [list(r) for r in rows]
    rows[row_index][column] = value
    path = _write(tmp_path / "bad.csv", _csv_text(header, rows, eol="\r\n"), bom=True)
    code, err = _cli(capsys, path)
    assert code == 2 and f"bad.csv: {needle}" in err, err


def test_short_row_missing_column_and_unknown_header(tmp_path, capsys, reader):
    path = _write(tmp_path / "short.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5\n")
    code, err = _cli(capsys, path)
    assert code == 2 and "short.csv: line 3: 2 fields, the header has 3" in err
    # a long row would be read by position: 1,000 unquoted is two fields
    path = _write(tmp_path / "long.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n0.5,2,500,20\n")
    code, err = _cli(capsys, path)
    assert code == 2 and "long.csv: line 3: 4 fields, the header has 3" in err
    path = _write(tmp_path / "trailing.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5,\n1,5,5\n")
    assert _cli(capsys, path)[0] == 0  # an empty field at a row's end reads nothing by position
    path = _write(tmp_path / "twice.csv", "arrived_at,num_prefill_tokens,num_decode_tokens,arrived_at\n0,5,5,1\n")
    code, err = _cli(capsys, path)
    assert code == 2 and "twice.csv: line 1, column 4: header name 'arrived_at' repeats column 1" in err
    path = _write(tmp_path / "miss.csv", "arrived_at,num_prefill_tokens\n0,5\n")
    code, err = _cli(capsys, path, "--format", "vidur")
    assert code == 2 and "miss.csv: line 1: missing column 'num_decode_tokens'" in err
    code, err = _cli(capsys, path)
    assert code == 2 and "matches no trace format; pass --format" in err


def test_mooncake_bad_lines(tmp_path, capsys):
    lines = [json.dumps(MOONCAKE[0]), '{"timestamp": 5, "input_length": "x", "output_length": 3}', "{oops"]
    path = _write(tmp_path / "m.jsonl", "\n".join(lines[:2]) + "\n")
    code, err = _cli(capsys, path)
    assert code == 2 and "m.jsonl: line 2, field 'input_length': not a finite number ('x')" in err
    path = _write(tmp_path / "m2.jsonl", lines[0] + "\n\n" + lines[2] + "\n")
    code, err = _cli(capsys, path)
    assert code == 2 and "m2.jsonl: line 3, column 2: malformed JSON" in err


def test_not_utf8_names_line_and_column(tmp_path, capsys, reader):
    raw = b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5,5\n" + b"2,\xe9t\xe9,5\n"
    path = tmp_path / "latin1.csv"
    path.write_bytes(raw)
    code, err = _cli(capsys, path)
    assert code == 2 and "latin1.csv: line 4, column 3: not UTF-8 (byte 0xe9)" in err
    gz = tmp_path / "latin1.csv.gz"
    gz.write_bytes(gzip.compress(raw))
    code, err = _cli(capsys, gz)
    assert code == 2 and "line 4, column 3: not UTF-8" in err


@pytest.mark.parametrize("gz", [False, True])
def test_a_nul_byte_is_named(tmp_path, capsys, reader, gz):
    """The csv module read a NUL inside a field: the row seemed short ("2 fields, the header has 3")."""
    path = _write(tmp_path / "nul.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,10\x003\n", gz=gz)
    code, err = _cli(capsys, path)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path.name}: line 3, column 5: a NUL byte" in err


def test_first_reads_only_the_first_rows(tmp_path):
    header, rows, expected = CASES["vidur"]
    bad_tail = [*rows, ["oops", "1", "1"]]
    path = _write(tmp_path / "t.csv", _csv_text(header, bad_tail))
    _check(load_trace(path, "llama2-7b-a100", max_rows=3), expected)
    with pytest.raises(WorkloadError, match="line 5, column 'arrived_at'"):
        load_trace(path, "llama2-7b-a100")


def test_requests_from_columns_are_plain_frozen_requests():
    import dataclasses
    import pickle

    from optsched.instance import NO_EXTRA, Request, requests_from_columns

    fast = requests_from_columns(["a", "b"], [0.0, 1.5], [10, 20], [3, 1])
    plain = (Request("a", 0.0, 10, 3), Request("b", 1.5, 20, 1))
    assert fast == plain and [type(r) for r in fast] == [Request, Request]
    assert [hash(r) for r in fast] == [hash(r) for r in plain] and fast[0].extra is NO_EXTRA
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast[0].arrival = 3.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == plain
    assert dataclasses.replace(fast[1], arrival=2.0) == Request("b", 2.0, 20, 1)

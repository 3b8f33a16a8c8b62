"""A JSON Lines trace whose object repeats a field the loader reads is refused, naming the file, the
line and the field (as instance, schedule and plan JSON refuse a repeated key, and CSV a repeated
column); both readers (pyarrow's and the standard library's) agree, also on a gzip file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from optsched.cli import main
from optsched.workload import load_trace

ROWS = [
    '{"timestamp": 0, "input_length": 50, "output_length": 5, "hash_ids": [1, 2]}',
    '{"timestamp": 100, "input_length": 51, "output_length": 6, "hash_ids": [1, 2]}',
    '{"timestamp": 200, "input_length": 52, "output_length": 7, "hash_ids": [1, 2]}',
]


def _write(folder: Path, rows: list[str], gz: bool) -> Path:
    text = "\n".join(rows) + "\n"
    if gz:
        path = folder / "dup.jsonl.gz"
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path = folder / "dup.jsonl"
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    ("line", "edit", "field"),
    [
        (1, ('"input_length": 50,', '"input_length": 50, "input_length": 9000,'), "input_length"),
        (2, ('"output_length": 6,', '"output_length": 6, "output_length": 6,'), "output_length"),
        (3, ('"timestamp": 200,', '"timestamp": 200, "timestamp": 1,'), "timestamp"),
    ],
)
def test_a_read_field_given_twice_is_refused(tmp_path, capsys, reader, gz, line, edit, field):
    rows = list(ROWS)
    rows[line - 1] = rows[line - 1].replace(*edit)
    path = _write(tmp_path, rows, gz)
    code = main(["info", str(path), "--cost-model", "llama2-7b-a100", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and not out, (code, out, err)
    assert err.count("\n") == 1, err
    assert err.startswith(f"optsched: error: {path}: line {line}, field {field!r}: given twice in one object"), err


@pytest.mark.parametrize("gz", [False, True])
def test_an_ignored_field_given_twice_reads_as_without_it(tmp_path, reader, gz):
    """A repeat of a field the loader does not read (``hash_ids``) changes nothing, with either reader."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "twice").mkdir()
    twice = [ROWS[0].replace('"hash_ids": [1, 2]', '"hash_ids": [1], "hash_ids": [2]'), *ROWS[1:]]
    loaded, plain = (
        load_trace(_write(tmp_path / folder, rows, gz), cost_model="llama2-7b-a100")
        for folder, rows in (("twice", twice), ("plain", ROWS))
    )
    seen = [(r.arrival, r.prompt_tokens, r.output_tokens) for r in loaded.requests]
    assert seen == [(r.arrival, r.prompt_tokens, r.output_tokens) for r in plain.requests]
    assert [p for _, p, _ in seen] == [json.loads(row)["input_length"] for row in ROWS]

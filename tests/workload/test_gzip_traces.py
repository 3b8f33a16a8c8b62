"""Gzip traces streamed into pyarrow's readers (:mod:`optsched.workload.streamed`): a gzipped file
of every layout loads to exactly the plain file's instance, in blocks large and small, of one member
or several; whatever the streamed path does not vouch for is read by the whole-file path with the
same result and the same error; a truncated or damaged gzip file is a one-line error naming the
file, never fewer rows."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from optsched.cli import main
from optsched.workload import FORMATS, WorkloadError, load_trace, loaders, readers
from optsched.workload import arrow as arrow_module
from optsched.workload.streamed import TallyingStream

MODEL = "llama2-7b-a100"

pytest.importorskip("pyarrow")


def _field(rng: np.random.Generator, column: str, fmt_name: str, k: int, t: float) -> str:
    """One field of row k arriving at t seconds (every published column of every layout)."""
    f = FORMATS[fmt_name]
    if column == f.arrival:
        if f.time_unit == "datetime":
            stamp = np.datetime64("2023-11-16T18:00:00", "ns") + np.timedelta64(int(t * 1e9), "ns")
            return str(stamp).replace("T", " ")[:27]
        return str(int(t * 1000)) if f.time_unit == "ms" else f"{t:.6f}"
    if column == f.prompt:
        return str(int(rng.integers(1, 4000)))
    if column == f.output:
        return str(int(rng.integers(0 if f.failed_if_no_output else 1, 1000)))
    return {"Model": "ChatGPT" if k % 3 else "GPT-4", "Log Type": "Conversation log"}.get(column, str(k % 5))


def trace_text(fmt_name: str, rows: int, seed: int = 0) -> bytes:
    """A trace of ``rows`` rows of the layout ``fmt_name`` (JSON Lines for Mooncake)."""
    rng = np.random.default_rng(seed)
    f = FORMATS[fmt_name]
    times = np.cumsum(rng.exponential(0.05, rows)).tolist()
    if f.jsonl:
        lines = [
            f'{{"timestamp": {int(t * 1000)}, "input_length": {rng.integers(1, 4000)}, '
            f'"output_length": {rng.integers(1, 1000)}, "hash_ids": [{k}, 7]}}\n'
            for k, t in enumerate(times)
        ]
        return "".join(lines).encode()
    lines = [",".join(f.columns) + "\n"]
    lines += [",".join(_field(rng, c, fmt_name, k, t) for c in f.columns) + "\n" for k, t in enumerate(times)]
    return "".join(lines).encode()


def _name(fmt_name: str) -> str:
    return "t.jsonl" if FORMATS[fmt_name].jsonl else "t.csv"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _members(text: bytes, cuts: list[int]) -> bytes:
    """``text`` as one gzip member per piece between ``cuts``."""
    bounds = [0, *cuts, len(text)]
    return b"".join(gzip.compress(text[a:b]) for a, b in zip(bounds, bounds[1:]))


def _notes(inst) -> list[str]:
    """The instance's notes without the file name that starts each."""
    return [note.split(": ", 1)[1] for note in inst.extra.get("notes", [])]


def _same(one, other) -> None:
    for a, b in zip(one.columns, other.columns, strict=True):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert one.requests.ids == other.requests.ids and _notes(one) == _notes(other) and one.limits == other.limits


def load_streamed(monkeypatch, path: Path, **options):
    """``load_trace`` of a gzip file that must be read by the streamed path (the whole-file path fails)."""
    with monkeypatch.context() as m:
        m.setattr(loaders, "read_bytes", lambda *a: pytest.fail("read whole, not streamed"))
        return load_trace(path, MODEL, **options)


#: (chunk of read_chunks, pyarrow's block) in bytes: chunks read whole, cut into blocks, several per block.
CHUNKINGS = [(readers.READ_CHUNK, readers.READ_CHUNK), (5000, 1 << 12), (3000, 1 << 16)]


@pytest.mark.parametrize("chunking", range(len(CHUNKINGS)))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_gzipped_trace_loads_as_the_plain_file(tmp_path, monkeypatch, fmt, chunking):
    chunk, block = CHUNKINGS[chunking]
    monkeypatch.setattr(readers, "READ_CHUNK", chunk)
    monkeypatch.setattr(arrow_module, "_STREAM_BLOCK", block)
    text = trace_text(fmt, 3000, seed=chunking)
    plain = load_trace(_write(tmp_path / _name(fmt), text), MODEL)
    packed = load_streamed(monkeypatch, _write(tmp_path / (_name(fmt) + ".gz"), gzip.compress(text)), name=plain.name)
    _same(packed, plain)
    assert len(plain.requests) > 2000


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_gzip_of_several_members_and_padding_loads_as_the_plain_file(tmp_path, monkeypatch, fmt):
    text = trace_text(fmt, 2000, seed=3)
    plain = load_trace(_write(tmp_path / _name(fmt), text), MODEL)
    cases = {
        "members": _members(text, [len(text) // 3, len(text) // 3 + 7]),  # one cut inside a line
        "padded": gzip.compress(text) + b"\0" * 1000,
        "padded-members": _members(text, [len(text) // 2]) + b"\0" * 3,
        "empty-member": gzip.compress(b"") + gzip.compress(text) + gzip.compress(b""),
    }
    for case, data in cases.items():
        packed = load_streamed(monkeypatch, _write(tmp_path / f"{case}.gz", data), name=plain.name, format=fmt)
        _same(packed, plain)


@pytest.mark.parametrize("fmt", ["burstgpt", "azure", "mooncake"])
def test_a_truncated_gzip_is_an_error_never_fewer_rows(tmp_path, monkeypatch, fmt):
    """Cut anywhere (in the deflate data, in the CRC or length at the end, in a later member), in
    small chunks and in large ones: the error names the file; no load returns the rows read."""
    text = trace_text(fmt, 1500, seed=4)
    whole = gzip.compress(text)
    cuts = [len(whole) - k for k in range(1, 9)] + [len(whole) // 2, len(whole) // 5, 30, 12, 5]
    files = {f"cut{c}": whole[:c] for c in cuts}
    files["second-member-cut"] = whole + gzip.compress(text[:5000])[:-3]
    for chunk in (readers.READ_CHUNK, 4096):
        monkeypatch.setattr(readers, "READ_CHUNK", chunk)
        for name, data in files.items():
            path = _write(tmp_path / f"{name}.gz", data)
            with pytest.raises(WorkloadError) as err:
                load_trace(path, MODEL, format=fmt)
            assert str(err.value).startswith(f"{path}: damaged or truncated gzip data (") and "\n" not in str(err.value)


def test_damaged_gzip_data_is_a_one_line_error_naming_the_file(tmp_path, capsys):
    text = trace_text("vidur", 2000, seed=5)
    whole = gzip.compress(text)
    crc = bytearray(whole)
    crc[-6] ^= 0xFF
    inside = bytearray(whole)
    inside[len(whole) // 2] ^= 0x55
    size = bytearray(whole)
    size[-2] ^= 0x01
    files = {"crc": crc, "inside": inside, "size": size, "trailing": whole + b"garbage", "not-member": whole + b"\x1f"}
    for name, data in files.items():
        path = _write(tmp_path / f"{name}.csv.gz", bytes(data))
        with pytest.raises(WorkloadError, match=f"^{path}: damaged or truncated gzip data"):
            load_trace(path, MODEL)
        assert main(["info", str(path), "--cost-model", MODEL]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}: damaged or truncated gzip data" in err, err


def _both(tmp_path: Path, name: str, text: bytes, **options) -> tuple[object, object]:
    """Load ``text`` plain and gzipped: each instance, or each error's message with the file name replaced."""
    results = []
    for path in (tmp_path / name, tmp_path / (name + ".gz")):
        path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
        try:
            results.append(load_trace(path, MODEL, name="t", **options))
        except WorkloadError as exc:
            results.append(str(exc).replace(str(path), "FILE"))
    return results[0], results[1]


BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
JSON_ROW = '{"timestamp": 5, "input_length": 3, "output_length": 2}\n'

#: Files the streamed path leaves to the whole-file path (or refuses), each loaded alike plain and gzipped.
ODD_FILES = {
    "x-in-a-model-name": (
        "t.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "".join(f"{k}.5,Mixtral-8x7B,{k + 1},{k % 4},1,Conversation log\n" for k in range(300)),
    ),
    "hex-count": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,0x10,5\n2,3,3\n"),
    "bad-count": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,12x,5\n2,3,3\n"),
    "zero-count": ("t.csv", "num_prefill_tokens,num_decode_tokens\n5,5\n0,5\n"),
    "blank-lines": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n\n1,6,5\n\r\n2,3,3\n"),
    "crlf-bom-quoted": ("t.csv", '\ufeffarrived_at,num_prefill_tokens,num_decode_tokens\r\n0,"5",5\r\n1,6,5\r\n'),
    "quoted-line-end": ("t.csv", 'arrived_at,num_prefill_tokens,num_decode_tokens\n0,"5\n",5\n1,6,5\n'),
    "quoted-line-end-unread": ("t.csv", BURST + '0.5,"GPT\n4",5,5,1,log\n1.5,GPT-4,6,6,1,log\n'),
    "stray-quote": ("t.csv", BURST + '0.5,GPT-4,5,5,1,"log\n1.5,GPT-4,6,6,1,log\n2.5,GPT-4,6,6,1,log"\n'),
    "latin1-unread": ("t.csv", BURST + "0.5,GPT-4,5,5,1,log \xe9\n1.5,GPT-4,6,6,1,log\n"),
    "short-row": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,6\n"),
    "no-last-line-end": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,6,5"),
    "cr-line-ends": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\r0,5,5\r1,6,5\r"),
    "latin1": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,6,5 \xe9\n"),
    "utf8-value": (
        "t.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0.5,GPT-4,5,5,1,Conversation log ✓\n1.5,GPT-4,6,6,1,log\n",
    ),
    "bad-date": (
        "t.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-28 10:00:00,5,5\n2023-02-29 10:00:00,5,5\n",
    ),
    "header-only": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"),
    "late-arrival": ("t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1e10,6,5\n"),
    "jsonl": ("t.jsonl", JSON_ROW + '{"timestamp": 9, "input_length": 4, "output_length": 1}\n'),
    "jsonl-bom": ("t.jsonl", '\ufeff{"timestamp": 5, "input_length": 3, "output_length": 2}\n'),
    "jsonl-bad": (
        "t.jsonl",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 9, "input_length": "4"}\n',
    ),
    "jsonl-blank": ("t.jsonl", JSON_ROW + "\n" + JSON_ROW),
}


@pytest.mark.parametrize("case", list(ODD_FILES))
def test_what_the_stream_does_not_vouch_for_reads_as_the_plain_file(tmp_path, case):
    name, text = ODD_FILES[case]
    data = text.encode("latin-1" if case.startswith("latin1") else "utf-8")
    plain, packed = _both(tmp_path, name, data)
    if isinstance(plain, str):
        assert packed == plain and "FILE: " in plain, (plain, packed)
    else:
        assert not isinstance(packed, str), packed
        _same(packed, plain)


def test_the_model_filter_on_a_gzipped_trace(tmp_path, monkeypatch):
    text = trace_text("burstgpt", 2000, seed=6)
    plain = load_trace(_write(tmp_path / "b.csv", text), MODEL, model="GPT-4")
    packed = load_streamed(
        monkeypatch, _write(tmp_path / "b.csv.gz", gzip.compress(text)), model="GPT-4", name=plain.name
    )
    _same(packed, plain)
    assert any("other models" in note for note in packed.extra["notes"])


@pytest.mark.parametrize("seed", range(6))
def test_the_stream_tallies_what_the_whole_bytes_give(seed):
    """Read in pieces of random sizes over chunks cut anywhere (inside the header, inside a UTF-8
    character): the content, line count, UTF-8 verdict, x after the header and first bytes."""
    rng = np.random.default_rng(seed)
    pieces = ["a,b\n", "1,2\n", "é,ü\n", "x,3", "\r\n", "\ufeff", "ab", "\n\n", "X"]
    text = "".join(rng.choice(pieces, int(rng.integers(0, 60))).tolist()).encode()
    if seed % 3 == 2:
        text = text.replace("é".encode(), b"\xe9", 1)  # not UTF-8 (when the text holds an é)
    if seed % 3 == 1 and text:
        text = text[:-1] + "é".encode()[:1]  # a character cut at the end
    cuts = sorted(set(rng.integers(0, len(text) + 1, int(rng.integers(0, 8))).tolist()))
    bounds = [0, *cuts, len(text)]
    stream = TallyingStream(iter([text[a:b] for a, b in zip(bounds, bounds[1:])]))
    read = b""
    while piece := stream.read(int(rng.integers(1, 7)) if rng.random() < 0.7 else -1):
        read += piece
    stream.finish()
    assert read == text
    assert stream.line_count() == text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)
    try:
        utf8 = text.decode() is not None
    except UnicodeDecodeError:
        utf8 = False
    assert stream.is_utf8() == utf8
    assert stream.x_in_rows == (b"x" in text.partition(b"\n")[2].lower())
    assert stream.start == text[:3]


def test_an_error_met_while_streaming_is_kept_until_finish():
    def chunks():
        yield b"a,b\n1,2\n"
        raise WorkloadError("f.csv.gz: damaged or truncated gzip data (cut)")

    stream = TallyingStream(chunks())
    assert stream.read(100) == b"a,b\n1,2\n" and stream.read(100) == b"" and stream.read() == b""
    with pytest.raises(WorkloadError, match="damaged or truncated"):
        stream.finish()


def test_a_gzip_header_with_every_optional_field(tmp_path, monkeypatch):
    """FEXTRA, FNAME, FCOMMENT and FHCRC (what gzip and other tools may write) are read."""
    import struct

    text = trace_text("vidur", 500, seed=7)
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = packer.compress(text) + packer.flush()
    head = b"\x1f\x8b\x08" + bytes([2 | 4 | 8 | 16]) + b"\0\0\0\0\0\xff"
    head += struct.pack("<H", 5) + b"extra" + b"t.csv\0" + b"a comment\0"
    head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    data = head + deflated + struct.pack("<II", zlib.crc32(text), len(text))
    plain = load_trace(_write(tmp_path / "t.csv", text), MODEL)
    _same(load_streamed(monkeypatch, _write(tmp_path / "t.csv.gz", data), name=plain.name), plain)


def test_the_command_line_imports_isal_only_to_read_gzip(tmp_path: Path) -> None:
    """The vLLM executor's venv runs optsched's sources without its dependencies (tests/e2e): its
    commands must start without ISA-L, which only a gzip read imports."""
    code = (
        "import sys\n"
        "sys.modules['isal'] = None  # importing it now raises ImportError\n"
        "from optsched.cli import main\n"
        "from optsched.workload import load_trace\n"
        "print(load_trace(sys.argv[1], 'llama2-7b-a100').name)\n"
    )
    plain = tmp_path / "t.csv"
    plain.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n")
    run = subprocess.run([sys.executable, "-c", code, str(plain)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr

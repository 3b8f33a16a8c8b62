"""Fuzz suite of the command line (docs/cli.md), run by CI with every test: hypothesis draws random
and mutated instances, schedules, trace files, TOML profiles, measurement and result files, sweep
specs and command lines for every command, with a fixed seed (``derandomize``) and a fixed number
of examples, and checks the contract on each run:

- the exit code is 0, 1 or 2 (never 3: an internal error), and stderr holds no traceback;
  ``execute`` and ``profile`` may end with 3 only to say which missing extra to install;
- exit 2 comes with one error line, ``optsched: error: ...`` (usage errors too);
- a command given ``--time-limit T`` returns within T + :data:`TIME_SLACK` seconds (a limit that
  holds, not a speed goal: those are in tests/benchmarks/bench_time_limits.py);
- under ``--json``, stdout is one JSON object (nothing on a bad-input exit, or one object);
- on exit 2 no file is created, replaced or left behind (no temporary file either); on 0 or 1 only
  the command's declared outputs change.

Each command runs in this process (``optsched.cli.main``) under a 60 s alarm, so a hang is a
failure, not a stuck CI. ``OPTSCHED_FUZZ_EXAMPLES`` scales every test's number of examples (default 1);
``OPTSCHED_FUZZ_RANDOM=1`` turns ``derandomize`` off, for a deeper search on demand with other
examples (``python -m pytest tests/commands/test_fuzz_cli.py --hypothesis-seed=N``); ``OPTSCHED_FUZZ_LOG=FILE``
appends one tab-separated line per run (test, exit code, seconds, command line, end of stderr), to
see what the examples cover.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import signal
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from optsched.cli import main
from optsched.policies import POLICIES
from optsched.problems import SOLVERS
from tests.support.export import execute_result
from tests.support.paths import INSTANCES, REPO

TOY = json.loads((INSTANCES / "toy-4.json").read_text())
SCALE = float(os.environ.get("OPTSCHED_FUZZ_EXAMPLES", "1"))
FIXED_SEED = os.environ.get("OPTSCHED_FUZZ_RANDOM", "") in ("", "0")
LOG = os.environ.get("OPTSCHED_FUZZ_LOG")


def fuzz(examples: int) -> settings:
    """Fixed seed, a fixed number of examples, no deadline per example (the alarm bounds it), no
    explain phase (its line tracing makes a deeply nested input run for minutes)."""
    return settings(
        max_examples=max(1, round(examples * SCALE)),
        deadline=None,
        derandomize=FIXED_SEED,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )


# --------------------------------------------------------------------------- running one command

#: Seconds a command may run past its ``--time-limit`` here (in-process imports and the load of a
#: shared CI machine included) before the run counts as a limit not honoured.
TIME_SLACK = 20.0

#: Options whose value is a file the command writes.
OUTPUT_FLAGS = ("--out", "--requests-out", "--html", "--plot", "--profile-out", "--steps-out")


class Alarm(Exception):
    pass


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Alarm(f"command still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a digest of its content and mode."""
    out = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha1(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
    return out


def declared_outputs(argv: list[str], folder: Path) -> set[str]:
    """Paths (relative to ``folder``) a run may write: the output options' values, a sweep's folder,
    execute's default result."""
    outs = set()
    for flag, value in zip(argv, argv[1:]):
        if flag in OUTPUT_FLAGS:
            outs.add(value)
    if argv[0] == "execute" and "--out" not in argv and len(argv) > 1:
        outs.add(str(Path(argv[1]).with_suffix("")) + ".result.json")
    rel = set()
    for value in outs:
        try:
            rel.add(str(Path(value).resolve().relative_to(folder.resolve())))
        except ValueError:
            continue
    return rel


def run(argv: list[str], folder: Path) -> tuple[int, str, str]:
    """Run ``optsched ARGV`` and check the contract (module docstring); returns code, stdout, stderr."""
    before = snapshot(folder)
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with alarm(60), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    wall = time.perf_counter() - start
    stdout, stderr = out.getvalue(), err.getvalue()
    if LOG:
        with open(LOG, "a") as fh:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split(" ")[0]
            fh.write(f"{test}\t{code}\t{wall:.2f}\t{' '.join(argv)}\t{stderr.strip()[-300:]!r}\n")
    where = f"optsched {' '.join(argv)}\nexit {code} after {wall:.1f} s\nstderr: {stderr[-1500:]}"
    missing_extra = argv[0] in ("execute", "profile") and code == 3 and "pip install 'optsched[" in stderr
    assert code in (0, 1, 2) or missing_extra, where
    assert "Traceback" not in stderr and "internal error" not in stderr, where
    if code == 2:
        assert one_error_line(stderr), where
    limit = time_limit_of(argv)
    if code != 2 and limit is not None:
        assert wall <= limit + TIME_SLACK, f"time limit {limit} s not honoured\n{where}"
    if "--json" in argv and not missing_extra:
        if code in (0, 1):
            assert isinstance(json.loads(stdout), dict), where
        else:
            assert stdout == "" or isinstance(json.loads(stdout), dict), where
    after = snapshot(folder)
    changed = {p for p in after if before.get(p) != after[p]} | (before.keys() - after.keys())
    leftovers = [p for p in after if Path(p).name.startswith(".") and p.endswith(".tmp")]
    assert not leftovers, f"temporary files left: {leftovers}\n{where}"
    if code == 2 or missing_extra:
        assert not changed, f"bad input changed files: {sorted(changed)}\n{where}"
    else:
        allowed = declared_outputs(argv, folder)
        stray = {p for p in changed if not any(a == "." or p == a or p.startswith(a + "/") for a in allowed)}
        assert not stray, f"files changed that are no output: {sorted(stray)}\n{where}"
    return code, stdout, stderr


def one_error_line(stderr: str) -> bool:
    """One ``optsched: error: ...`` line (usage errors included)."""
    lines = stderr.rstrip("\n").split("\n")
    return len(lines) == 1 and lines[0].startswith("optsched: error: ")


def time_limit_of(argv: list[str]) -> float | None:
    """The finite ``--time-limit`` of ``argv`` (the last one given), or None."""
    values = [value for flag, value in zip(argv, argv[1:]) if flag == "--time-limit"]
    try:
        limit = float(values[-1]) if values else None
    except ValueError:
        return None
    return limit if limit is not None and math.isfinite(limit) and limit >= 0 else None


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def workdir(base: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=base))


# --------------------------------------------------------------------------- values and mutations

ODD_VALUES = [None, -1, 0, 1, 1.5, -0.5, 1e-300, 1e18, 1e308, 2**63, 10**12, "x", "", [], {}, True, False]
ODD_TEXT = [
    "-1",
    "0",
    "1",
    "2",
    "0.5",
    "1e308",
    "1e-300",
    "nan",
    "inf",
    "-inf",
    "abc",
    "",
    "1,2",
    "10000000000",
    "-0",
    "0x10",
    " 3",
    "1e11",
    "9" * 30,
]


def leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += leaves(value, path + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            found += leaves(value, path + (index,))
    if path:
        found.append(path)
    return found


@st.composite
def mutated_json(draw: st.DrawFn, data: Any) -> str:
    """``data`` as JSON text with one change: a field replaced, deleted or doubled, the text cut or
    made invalid UTF-8, NaN, deep nesting."""
    obj = json.loads(json.dumps(data))
    kind = draw(
        st.sampled_from(["replace", "replace", "replace", "delete", "duplicate", "truncate", "bytes", "nan", "nest"])
    )
    paths = leaves(obj)
    if kind in ("replace", "delete") and paths:
        path = draw(st.sampled_from(paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        if kind == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(st.sampled_from(ODD_VALUES))
        return json.dumps(obj)
    text = json.dumps(obj)
    if kind == "duplicate":
        return (
            text.replace('"prompt_tokens"', '"prompt_tokens": 3, "prompt_tokens"', 1)
            if '"prompt_tokens"' in text
            else text.replace("{", '{"k": 1, "k": 2, ', 1)
        )
    if kind == "truncate":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if kind == "nan":
        return text.replace("0.0", "NaN", 1) if "0.0" in text else text.replace("1", "Infinity", 1)
    if kind == "nest":
        depth = draw(st.sampled_from([50, 900, 5000]))
        return text.replace("{", '{"deep": ' + "[" * depth + "]" * depth + ", ", 1)
    return text  # "bytes": the caller writes invalid UTF-8


def write_text(path: Path, text: str, corrupt: bool = False) -> Path:
    raw = text.encode()
    if corrupt:
        raw = raw[: len(raw) // 2] + b"\xff\xfe" + raw[len(raw) // 2 :]
    path.write_bytes(raw)
    return path


PROFILES = ["llama2-7b-a100", "llama2-70b-a100", "llama-65b-ascend8", "llama2-7b-h200"]


@st.composite
def valid_instance(draw: st.DrawFn, max_requests: int = 5) -> dict[str, Any]:
    n = draw(st.integers(1, max_requests))
    reqs = []
    for i in range(n):
        r: dict[str, Any] = {
            "id": f"r{i}",
            "prompt_tokens": draw(st.integers(1, 64)),
            "output_tokens": draw(st.integers(1, 12)),
        }
        if draw(st.booleans()):
            r["arrival"] = draw(st.sampled_from([0.0, 0.003, 0.05, 0.2]))
        if draw(st.booleans()):
            r["slo"] = {draw(st.sampled_from(["ttft", "e2e", "tpot"])): draw(st.sampled_from([0.01, 0.1, 1.0]))}
        if draw(st.booleans()):
            r["task"] = draw(st.sampled_from(["chat", "e2e"]))
        reqs.append(r)
    need = max(r["prompt_tokens"] + r["output_tokens"] - 1 for r in reqs)
    limits = {
        "token_budget": draw(st.sampled_from([8, 64, 4096])),
        "kv_capacity": draw(st.sampled_from([None, need, need + 20, 10000])),
        "max_running": draw(st.sampled_from([None, 1, 2, 4])),
    }
    if draw(st.booleans()):
        limits["prefill_budget"] = draw(st.sampled_from([4, limits["token_budget"]]))
    data: dict[str, Any] = {
        "name": "fuzz",
        "cost_model": draw(st.sampled_from(PROFILES)),
        "limits": limits,
        "requests": reqs,
    }
    if draw(st.booleans()):
        data.update(max_batch_size=draw(st.integers(1, 4)), static_latency="qwen2.5-7b-2xv100")
    return data


@st.composite
def instance_file(draw: st.DrawFn, folder: Path) -> str:
    """A path to a random valid or mutated instance, or a shipped name, or a missing file."""
    kind = draw(st.sampled_from(["valid", "valid", "mutated", "mutated", "mutated", "shipped", "missing"]))
    if kind == "shipped":
        return draw(st.sampled_from(["toy-4", "aladdin-fig3", "nosuch-instance"]))
    if kind == "missing":
        return str(folder / "missing.json")
    data = draw(valid_instance()) if kind == "valid" or draw(st.booleans()) else TOY
    text = json.dumps(data) if kind == "valid" else draw(mutated_json(data))
    return str(write_text(folder / "inst.json", text, corrupt=kind == "mutated" and draw(st.integers(0, 9)) == 0))


# --------------------------------------------------------------------------- instances through commands

SMALL_LIMIT = ["--time-limit", "0.5"]


INSTANCE_COMMANDS = [
    ["info"],
    ["info", "--out", "{d}/info.json"],
    ["simulate", "--policy", "vllm"],
    ["simulate", "--policy", "all"],
    ["simulate", "--policy", "sarathi", "--out", "{d}/s.json", "--requests-out", "{d}/r.csv"],
    ["bound"],
    ["bound", "--problem", "infermax", *SMALL_LIMIT],
    ["bound", "--problem", "hybrid"],
    ["solve", "--problem", "infermax", *SMALL_LIMIT, "--out", "{d}/s.json"],
    ["solve", "--problem", "hybrid-offline", *SMALL_LIMIT],
    ["solve", "--problem", "gmax", *SMALL_LIMIT],
    ["solve", "--problem", "scls-batch", *SMALL_LIMIT],
    ["solve", "--problem", "aladdin", *SMALL_LIMIT],
    ["solve", "--problem", "hybrid", *SMALL_LIMIT],
    ["report", "--time-limit", "1", "--quiet", "--html", "{d}/r.html"],
    ["plan", "--max-workers", "4"],
]


def command_id(command: list[str]) -> str:
    return " ".join(command)


@pytest.mark.parametrize("command", INSTANCE_COMMANDS, ids=command_id)
@fuzz(10)
@given(data=st.data())
def test_instances_through_every_instance_command(base: Path, command: list[str], data: st.DataObject) -> None:
    folder = workdir(base)
    inst = data.draw(instance_file(folder))
    argv = [command[0], inst, *(a.replace("{d}", str(folder)) for a in command[1:]), "--json"]
    run(argv, folder)


def every_formulation_objective_and_policy() -> list[list[str]]:
    """Command lines (without the instance) that run every formulation's solve, InferMax's
    objectives and ``--no-evict``, the bounds, ``info`` and every policy."""
    cmds = [["solve", "--problem", problem, *SMALL_LIMIT] for problem in sorted(SOLVERS)]
    cmds += [
        ["solve", "--problem", "infermax", *SMALL_LIMIT, "--objective", objective] for objective in ("ttft", "latency")
    ]
    cmds += [
        ["solve", "--problem", "infermax", *SMALL_LIMIT, "--no-evict"],
        ["bound", "--problem", "infermax"],
        ["bound", "--problem", "hybrid"],
        ["info"],
    ]
    return cmds + [["simulate", "--policy", policy] for policy in sorted(POLICIES)]


@pytest.mark.parametrize("command", every_formulation_objective_and_policy(), ids=command_id)
@fuzz(4)
@given(data=st.data())
def test_valid_instances_through_every_formulation_objective_and_policy(
    base: Path, command: list[str], data: st.DataObject
) -> None:
    """A valid instance is never an internal error: a formulation that does not apply says so (exit 2)."""
    folder = workdir(base)
    inst = write_text(folder / "inst.json", json.dumps(data.draw(valid_instance(max_requests=6))))
    run([command[0], str(inst), *command[1:], "--json"], folder)


# --------------------------------------------------------------------------- schedules


@pytest.fixture(scope="module")
def toy_schedule() -> dict[str, Any]:
    from optsched.instance import load_instance
    from optsched.policies import simulator_for

    return simulator_for("sarathi")(load_instance("toy-4")).to_dict()


SCHEDULE_COMMANDS = [
    ["check", "toy-4", "{s}", "--json"],
    ["check", "toy-4", "{s}", "--requests-out", "{d}/r.csv", "--json"],
    ["export", "{s}", "--format", "vllm-replay", "--out", "{d}/plan.json", "--json"],
    ["export", "{s}", "--format", "chrome-trace", "--instance", "toy-4", "--out", "{d}/t.json"],
]


@pytest.mark.parametrize("command", SCHEDULE_COMMANDS, ids=command_id)
@fuzz(20)
@given(data=st.data())
def test_mutated_schedules(base: Path, toy_schedule: dict[str, Any], command: list[str], data: st.DataObject) -> None:
    folder = workdir(base)
    corrupt = data.draw(st.integers(0, 9)) == 0
    sched = write_text(folder / "s.json", data.draw(mutated_json(toy_schedule)), corrupt=corrupt)
    existing = folder / "plan.json"
    existing.write_text("an existing output")
    argv = [a.replace("{s}", str(sched)).replace("{d}", str(folder)) for a in command]
    code, _, _ = run(argv, folder)
    if code != 0:
        assert existing.read_text() == "an existing output"


# --------------------------------------------------------------------------- trace files

_TOKENS = st.integers(1, 500).map(str)
_SECONDS = st.sampled_from(["0", "0.25", "1.5", "3"])
#: Trace formats (docs/instances.md) as a header and a valid cell per column, and a header of none.
TRACE_FORMATS = [
    ("arrived_at,num_prefill_tokens,num_decode_tokens", [_SECONDS, _TOKENS, _TOKENS]),
    ("num_prefill_tokens,num_decode_tokens", [_TOKENS, _TOKENS]),
    (
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        [st.sampled_from(["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47.1000000"]), _TOKENS, _TOKENS],
    ),
    (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        [_SECONDS, st.sampled_from(["GPT-4", "ChatGPT"]), _TOKENS, _TOKENS, _TOKENS, st.just("Conversation log")],
    ),
    ("a,b,c", [_TOKENS, _TOKENS, _TOKENS]),
]


@st.composite
def trace_text(draw: st.DrawFn) -> str:
    """A CSV trace: valid rows of one format, then one change (none, a cell replaced by odd text, a
    cell dropped or added, the header cut)."""
    header, cells = draw(st.sampled_from(TRACE_FORMATS))
    rows = draw(st.lists(st.tuples(*cells).map(list), max_size=6))
    change = draw(st.sampled_from(["none", "cell", "drop", "add", "header"]))
    if change == "header":
        header = header[: draw(st.integers(0, len(header) - 1))]
    elif change != "none" and rows:
        row = draw(st.sampled_from(rows))
        col = draw(st.integers(0, len(row) - 1))
        odd = draw(st.one_of(st.sampled_from(ODD_TEXT), st.text(alphabet=string.printable, max_size=6)))
        if change == "cell":
            row[col] = odd
        elif change == "drop":
            del row[col]
        else:
            row.insert(col, odd)
    return "\n".join([header, *(",".join(r) for r in rows)]) + "\n"


@pytest.mark.parametrize(
    "command",
    [["info"], ["simulate", "--policy", "vllm"], ["bound"], ["solve", "--problem", "infermax", *SMALL_LIMIT]],
    ids=command_id,
)
@fuzz(15)
@given(data=st.data())
def test_trace_files(base: Path, command: list[str], data: st.DataObject) -> None:
    folder = workdir(base)
    name = data.draw(st.sampled_from(["t.csv", "t.csv", "t.jsonl"]))
    if name.endswith(".jsonl"):
        lines = data.draw(
            st.lists(
                st.fixed_dictionaries({
                    "timestamp": st.sampled_from([0, 10, -5, "x", 1e308]),
                    "input_length": st.sampled_from([1, 100, 0, "a", None]),
                    "output_length": st.sampled_from([1, 5, -1, 2.5]),
                }),
                max_size=5,
            )
        )
        text = "\n".join(json.dumps(x) for x in lines) + data.draw(st.sampled_from(["", "\n{broken"]))
    else:
        text = data.draw(trace_text())
    trace = write_text(folder / name, text, corrupt=data.draw(st.integers(0, 7)) == 0)
    extra = data.draw(
        st.sampled_from([
            ["--cost-model", "llama2-7b-a100"],
            [],
            ["--cost-model", "llama2-7b-a100", "--first", "2"],
            ["--cost-model", "llama2-7b-a100", "--format", "azure"],
        ])
    )
    run([command[0], str(trace), *command[1:], *extra, "--json"], folder)


#: Cells that a CSV writer quotes, or a hand-edited file gets wrong: quotes, delimiters, line ends.
CSV_ODD_CELLS = ['"x', 'x"', '"a,b"', '"a""b"', '"', '""', "a,b", '"a\nb"', '"\n', "a\rb", "\t5", " 5 "]

#: Header variants: a renamed or unknown time column, BOMs, a blank first line, case, blanks.
HEADER_VARIANTS = {
    "as is": lambda h: h,
    "time renamed": lambda h: h.replace("arrived_at", "arrival_time"),
    "time unknown": lambda h: "ts," + h.split(",", 1)[1],
    "double bom": lambda h: "\ufeff\ufeff" + h,
    "bom": lambda h: "\ufeff" + h,
    "blank line first": lambda h: "\n" + h,
    "upper case": lambda h: h.upper(),
    "blanks": lambda h: h.replace(",", " , "),
    "duplicate column": lambda h: h + "," + h.split(",")[-1],
}


@st.composite
def hostile_csv(draw: st.DrawFn) -> tuple[str, int | None]:
    """A vidur CSV trace with a header variant and odd cells in an extra ``note`` column or in a
    read column; with the number of data rows when every row is plain (None otherwise)."""
    header = draw(st.sampled_from(sorted(HEADER_VARIANTS)))
    rows = [[str(k), str(draw(st.integers(1, 300))), str(draw(st.integers(1, 30))), "ok"] for k in range(8)]
    odd = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.sampled_from(CSV_ODD_CELLS)), max_size=3))
    for row, col, cell in odd:
        rows[row][col] = cell
    text = HEADER_VARIANTS[header]("arrived_at,num_prefill_tokens,num_decode_tokens,note")
    text += "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    return text, (len(rows) if header in ("as is", "bom", "blanks") and not odd else None)


@fuzz(40)
@given(data=st.data())
def test_hostile_csv_traces(base: Path, data: st.DataObject) -> None:
    """Quotes, delimiters and line ends in fields, header variants, gzip truncation: exit 0 with
    every row loaded, or exit 2 with one line (never a row dropped silently)."""
    folder = workdir(base)
    text, rows = data.draw(hostile_csv())
    raw = text.encode()
    name = "t.csv"
    if data.draw(st.booleans()):
        name, raw = "t.csv.gz", gzip.compress(raw)
        if data.draw(st.booleans()):
            raw, rows = raw[: data.draw(st.integers(0, len(raw) - 1))], None  # truncated
    (folder / name).write_bytes(raw)
    code, out, _ = run(["info", str(folder / name), "--cost-model", "llama2-7b-a100", "--json"], folder)
    if code == 0:
        lines = [line for line in text.lstrip("\ufeff").splitlines()[1:] if line.strip()]
        assert json.loads(out)["requests"] == len(lines), (text, out)
    if rows is not None:
        assert code == 0 and json.loads(out)["requests"] == rows, text


#: JSON values that overflow, nest deeply or are not numbers, for a field read or ignored.
HUGE_OR_DEEP = [
    "9" * 400,
    "-" + "9" * 400,
    "1e308",
    "-1e308",
    "1e16",
    "NaN",
    "Infinity",
    "[" * 3000 + "]" * 3000,
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 2000 + "1" + "}" * 2000,
    "true",
    '"12"',
    "12.5",
    "null",
]


@fuzz(30)
@given(data=st.data())
def test_huge_and_deep_json_values(base: Path, data: st.DataObject) -> None:
    """A Mooncake trace with one huge, deep or odd value in a read or an ignored field."""
    folder = workdir(base)
    lines = [{"timestamp": 10 * k, "input_length": 5 + k, "output_length": 2, "hash_ids": [k]} for k in range(4)]
    texts = [json.dumps(x) for x in lines]
    row = data.draw(st.integers(0, 3))
    field = data.draw(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "extra"]))
    value = data.draw(st.sampled_from(HUGE_OR_DEEP))
    texts[row] = (
        texts[row][:-1] + f', "{field}": {value}}}'
        if field == "extra"
        else texts[row].replace(f'"{field}": {json.dumps(lines[row][field])}', f'"{field}": {value}')
    )
    (folder / "t.jsonl").write_text("\n".join(texts) + "\n")
    code, out, _ = run(["info", str(folder / "t.jsonl"), "--cost-model", "llama2-7b-a100", "--json"], folder)
    if code == 0:
        assert json.loads(out)["requests"] == 4


# --------------------------------------------------------------------------- TOML profiles


TOML_NUMBERS = ["0", "1", "32", "-1", "1e300", "inf", "nan", "0.001", "2e-6", '"x"', "[1]", "true"]
TOML_KEYS = ["bias", "per_token", "per_token_sq", "per_kv", "per_ctx", "oops"]
SHIPPED_PROFILE = (REPO / "models" / "llama2-7b-a100.toml").read_text().splitlines()


@st.composite
def shipped_profile_changed(draw: st.DrawFn) -> list[str]:
    """The lines of a shipped profile with one value replaced, one line deleted or one key added."""
    lines = list(SHIPPED_PROFILE)
    index = draw(st.sampled_from([i for i, line in enumerate(lines) if "=" in line and not line.startswith("#")]))
    key = lines[index].split("=")[0].strip()
    change = draw(st.sampled_from(["value", "delete", "add", "none"]))
    if change == "value":
        lines[index] = f"{key} = {draw(st.sampled_from(TOML_NUMBERS))}"
    elif change == "delete":
        del lines[index]
    elif change == "add":
        lines.insert(index + 1, f"{draw(st.sampled_from(TOML_KEYS))} = {draw(st.sampled_from(TOML_NUMBERS))}")
    return lines


@st.composite
def toml_text(draw: st.DrawFn) -> str:
    number = st.sampled_from(TOML_NUMBERS)
    if draw(st.booleans()):
        lines = draw(shipped_profile_changed())
    else:
        lines = [
            f"{key} = {draw(number)}"
            for key in draw(st.lists(st.sampled_from(["layers", "base", "per_token", "name"]), max_size=4, unique=True))
        ]
        for section in draw(st.lists(st.sampled_from(["prefill", "decode", "extra"]), max_size=2, unique=True)):
            lines.append(f"[{section}]")
            lines += [
                f"{key} = {draw(number)}" for key in draw(st.lists(st.sampled_from(TOML_KEYS), max_size=3, unique=True))
            ]
    text = "\n".join(lines) + "\n"
    if draw(st.integers(0, 4)) == 0:
        text += draw(st.sampled_from(["base = [\n", "[prefill\n", "x = 'unterminated\n", "layers = 1\nlayers = 2\n"]))
    return text


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "toy-4", "--policy", "vllm"],
        ["info", "toy-4"],
        ["bound", "toy-4"],
        ["solve", "toy-4", "--problem", "infermax", *SMALL_LIMIT],
    ],
    ids=command_id,
)
@fuzz(15)
@given(data=st.data())
def test_toml_profiles(base: Path, command: list[str], data: st.DataObject) -> None:
    folder = workdir(base)
    profile = write_text(folder / "p.toml", data.draw(toml_text()), corrupt=data.draw(st.integers(0, 9)) == 0)
    run([*command, "--cost-model", str(profile), "--json"], folder)


# --------------------------------------------------------------------------- measurements and results


@fuzz(40)
@given(data=st.data())
def test_measurement_files_for_fit(base: Path, data: st.DataObject) -> None:
    folder = workdir(base)
    header = data.draw(
        st.sampled_from([
            "tokens,time",
            "tokens,ms",
            "x,y",
            "num_tokens,time_stats.mlp.mean",
            "num_tokens,num_tensor_parallel_workers,time_stats.mlp.mean",
        ])
    )
    columns = header.count(",") + 1
    rows = data.draw(
        st.lists(
            st.lists(
                st.one_of(st.sampled_from(ODD_TEXT), st.integers(1, 4096).map(str)), min_size=columns, max_size=columns
            ),
            max_size=6,
        )
    )
    csv = write_text(
        folder / "m.csv",
        "\n".join([header, *(",".join(r) for r in rows)]) + "\n",
        corrupt=data.draw(st.integers(0, 9)) == 0,
    )
    existing = folder / "p.toml"
    existing.write_text("# an existing profile\n")
    extra = data.draw(
        st.sampled_from([
            [],
            ["--out", str(existing)],
            ["--time-column", "ms", "--unit", "ms"],
            ["--compare", "llama2-7b-a100"],
            ["--tp", "2"],
        ])
    )
    code, _, _ = run(["fit", str(csv), *extra, "--json"], folder)
    if code != 0:
        assert existing.read_text() == "# an existing profile\n"


@pytest.fixture(scope="module")
def toy_result() -> dict[str, Any]:
    """An ``optsched execute`` result of toy-4's vLLM plan, measured 10 % above the prediction."""
    from optsched.export.vllm_replay import build_plan
    from optsched.instance import load_instance
    from optsched.policies import simulator_for

    instance = load_instance("toy-4")
    plan = build_plan(instance, simulator_for("vllm")(instance), block_size=16)
    predicted = [s.predicted_time for s in plan.steps]
    return execute_result(plan, [1.1 * p for p in predicted], predicted)


@pytest.mark.parametrize("kind", ["result", "plan", "steps"])
@fuzz(20)
@given(data=st.data())
def test_results_plans_and_step_files(base: Path, toy_result: dict[str, Any], kind: str, data: st.DataObject) -> None:
    folder = workdir(base)
    source = {
        "result": toy_result,
        "plan": toy_result["plan"],
        "steps": {"grid": [{"tokens": 8, "time": 1.0}], "runs": {}, "time_unit": "ms"},
    }[kind]
    path = write_text(folder / "f.json", data.draw(mutated_json(source)), corrupt=data.draw(st.integers(0, 9)) == 0)
    if kind == "plan":
        argv = ["execute", str(path), "--model", "tiny-llama", "--out", str(folder / "res.json"), "--json"]
    elif kind == "steps":
        argv = ["fit", str(path), "--json"]
    else:
        argv = [
            "validate",
            str(path),
            *data.draw(
                st.sampled_from([
                    [],
                    ["--profile-out", str(folder / "p.toml")],
                    ["--plot", str(folder / "p.png")],
                    ["--timing", "model"],
                ])
            ),
            "--json",
        ]
    run(argv, folder)


# --------------------------------------------------------------------------- command lines of every command

FLAGS: dict[str, list[str]] = {
    "simulate": [
        "--policy",
        "--out",
        "--requests-out",
        "--cost-model",
        "--token-budget",
        "--prefill-budget",
        "--kv-capacity",
        "--max-running",
        "--first",
        "--window",
        "--sample",
        "--seed",
        "--rate-scale",
        "--clip-prompt",
        "--offline",
        "--slo-ttft",
        "--format",
        "--model",
    ],
    "check": ["--requests-out", "--cost-model", "--first", "--kv-capacity"],
    "info": ["--out", "--cost-model", "--first", "--window", "--sample", "--seed", "--max-running"],
    "solve": [
        "--problem",
        "--solver",
        "--time-limit",
        "--threads",
        "--objective",
        "--no-evict",
        "--method",
        "--warm-start",
        "--log",
        "--option",
        "--out",
        "--requests-out",
        "--first",
    ],
    "bound": ["--problem", "--solver", "--time-limit", "--objective", "--method", "--option", "--first"],
    "fit": ["--tp", "--tokens-column", "--time-column", "--unit", "--compare", "--out", "--name", "--loss", "--timing"],
    "profile": [
        "--model",
        "--device",
        "--dtype",
        "--out",
        "--steps-out",
        "--tokens",
        "--repeats",
        "--warmup",
        "--threads",
    ],
    "plan": [
        "--method",
        "--target",
        "--heartbeat",
        "--gpus-per-worker",
        "--max-workers",
        "--solver",
        "--time-limit",
        "--predict-bins",
        "--first",
    ],
    "export": ["--format", "--out", "--instance", "--block-size", "--kv-blocks"],
    "execute": ["--model", "--dtype", "--out", "--repeats", "--warmup", "--kv-cache-bytes", "--seed", "--engine"],
    "validate": ["--timing", "--worst", "--plot", "--profile-out", "--profile-name", "--profile", "--instances"],
    "generate": [
        "--name",
        "--n",
        "--prompt",
        "--output",
        "--type",
        "--arrivals",
        "--seed",
        "--cost-model",
        "--token-budget",
        "--kv-capacity",
        "--out",
    ],
    "report": [
        "--time-limit",
        "--html",
        "--objective",
        "--policies",
        "--problem",
        "--solve-max-requests",
        "--quiet",
        "--requests-out",
        "--first",
    ],
    "sweep": [
        "--out",
        "--workers",
        "--resume",
        "--capacity",
        "--replicas",
        "--slo-ttft-p99",
        "--attainment",
        "--no-progress",
    ],
    "sweep-report": ["--html"],
}
#: Flags without a value.
SWITCHES = {"--offline", "--no-evict", "--log", "--quiet", "--resume", "--capacity", "--replicas", "--no-progress"}
#: Values that make sense for some flags (the others get :data:`ODD_TEXT` and these).
GOOD_VALUES = [
    "toy-4",
    "vllm",
    "sarathi",
    "all",
    "infermax",
    "hybrid",
    "gmax",
    "aladdin",
    "scls-batch",
    "hybrid-offline",
    "cpsat",
    "highs",
    "cbc",
    "makespan",
    "ttft",
    "exact",
    "bestfit",
    "jsq",
    "llama2-7b-a100",
    "tiny-llama",
    "vllm-replay",
    "chrome-trace",
    "8",
    "8,16",
    "normal:8,2",
    "poisson:5",
    "0:1",
    "0.5",
    "KEY=VALUE",
    "relax=0",
    "max_cells=10",
    "horizon=3",
    "foo=1",
    "method=magic",
    "wall",
    "model",
    "gpu",
    "ms",
    "l1",
]
#: Positional arguments per command (drawn from these).
POSITIONAL: dict[str, list[list[str]]] = {
    "simulate": [["toy-4"], ["{inst}"]],
    "check": [["toy-4", "{sched}"], ["{inst}", "{sched}"]],
    "info": [["toy-4"], ["{inst}"]],
    "solve": [["toy-4"], ["{inst}"]],
    "bound": [["toy-4"], ["{inst}"]],
    "fit": [["{csv}"], ["{sched}"]],
    "profile": [[]],
    "plan": [["aladdin-fig3"], ["{inst}"]],
    "export": [["{sched}"]],
    "execute": [["{plan}"]],
    "validate": [["{result}"], ["{sched}"]],
    "generate": [[]],
    "report": [["toy-4"], ["{inst}"]],
    "sweep": [["{spec}"]],
    "sweep-report": [["{folder}"], ["{sched}"]],
}


@pytest.fixture(scope="module")
def files(
    tmp_path_factory: pytest.TempPathFactory, toy_schedule: dict[str, Any], toy_result: dict[str, Any]
) -> dict[str, str]:
    """Valid inputs the command lines name (read-only: each run writes into its own folder)."""
    folder = tmp_path_factory.mktemp("fuzz-inputs")
    paths = {
        "inst": folder / "i.json",
        "sched": folder / "s.json",
        "csv": folder / "m.csv",
        "plan": folder / "plan.json",
        "result": folder / "r.json",
        "spec": folder / "spec.json",
    }
    paths["inst"].write_text(json.dumps({**TOY, "name": "toy-4"}))
    paths["sched"].write_text(json.dumps(toy_schedule))
    paths["csv"].write_text("tokens,time\n1,0.25\n8,0.3\n64,0.5\n")
    paths["plan"].write_text(json.dumps(toy_result["plan"]))
    paths["result"].write_text(json.dumps(toy_result))
    paths["spec"].write_text(
        json.dumps({"name": "fz", "workloads": [{"instance": "toy-4"}], "run": {"simulate": ["vllm"], "bound": True}})
    )
    return {k: str(v) for k, v in paths.items()}


@st.composite
def command_line(draw: st.DrawFn, command: str, files: dict[str, str], folder: Path) -> list[str]:
    names = {**files, "folder": str(folder)}
    argv = [command, *(a.format(**names) for a in draw(st.sampled_from(POSITIONAL[command])))]
    for flag in draw(st.lists(st.sampled_from(FLAGS[command]), max_size=4)):
        argv.append(flag)
        if flag in SWITCHES:
            continue
        if flag in OUTPUT_FLAGS or flag == "--out":
            argv.append(
                draw(
                    st.sampled_from([
                        str(folder / "o.json"),
                        str(folder / "o.csv"),
                        str(folder / "o.html"),
                        str(folder),
                        str(folder / "nodir" / "o.json"),
                        os.devnull,
                        files["sched"],
                    ])
                )
            )
        elif flag == "--time-limit":
            argv.append(draw(st.sampled_from(["0.3", "1", "0", "-1", "nan", "abc", "1e-300"])))
        else:
            argv.append(draw(st.sampled_from(GOOD_VALUES + ODD_TEXT)))
    if command in ("solve", "bound", "report") and "--time-limit" not in argv:
        argv += ["--time-limit", "0.5"]  # bounded runs: the suite's budget
    if command == "sweep" and "--out" not in argv:
        argv += ["--out", str(folder / "store")]
    if command == "sweep":
        argv += ["--workers", "1"]
    if draw(st.booleans()):
        argv.append("--json")
    return argv


@pytest.mark.parametrize("command", sorted(FLAGS))
@fuzz(15)
@given(data=st.data())
def test_command_lines_of_every_command(base: Path, files: dict[str, str], command: str, data: st.DataObject) -> None:
    folder = workdir(base)
    argv = data.draw(command_line(command, files, folder))
    if argv[0] == "sweep" and argv[argv.index("--out") + 1] == files["sched"]:
        return  # a sweep store is a folder: --out onto an input file is refused (exit 2), covered by output tests
    run(argv, folder)


# --------------------------------------------------------------------------- sweep specs


@fuzz(25)
@given(data=st.data())
def test_sweep_specs(base: Path, data: st.DataObject) -> None:
    folder = workdir(base)
    spec = {
        "name": "fz",
        "workloads": [{"instance": "toy-4"}],
        "limits": {"kv_capacity": [600]},
        "run": {"simulate": ["vllm"], "bound": True},
    }
    path = write_text(
        folder / data.draw(st.sampled_from(["spec.json", "spec.yaml"])),
        data.draw(mutated_json(spec)),
        corrupt=data.draw(st.integers(0, 9)) == 0,
    )
    run(["sweep", str(path), "--out", str(folder / "store"), "--workers", "1", "--no-progress", "--json"], folder)

#!/usr/bin/env bash
# Create (or reuse) the Vidur 0.0.26 virtual environment and its offline inputs for
# tests/benchmarks/bench_vidur.py.
#
# Usage: tests/benchmarks/vidur_env.sh [VENV_DIR]   (default ~/.cache/optsched/vidur-0.0.26-venv)
#
# Steps (docs/development.md, "Vidur comparison"):
# 1. a venv of its own with `vidur==0.0.26` from PyPI (never the project's venv);
# 2. the fix of Request.restart(): it resets neither `_num_stage_processed_tokens` nor
#    `_is_prefill_stage_complete`, so the first preemption (vLLM scheduler) fails the assertion in
#    Request.on_batch_end; two lines added to restart() reset them;
# 3. the offline inputs under VENV_DIR/optsched-inputs, generated from ../shared/data by
#    tests/benchmarks/vidur_inputs.py: the trace in the trace-replay layout and the profile cache
#    with the stand-in attention table.
# A marker file records a finished install so that a second run reuses the venv; the inputs are
# rebuilt on every run (a few seconds). Exit 1 with a message naming the failed step.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${1:-$HOME/.cache/optsched/vidur-0.0.26-venv}"
DATA="${OPTSCHED_SHARED_DATA:-$HERE/../../../shared/data}"
MARKER="$VENV/.optsched-vidur-ready"
PY="${PYTHON:-python3}"
STEP_NAME=vidur-env
# shellcheck source=../support/venv_steps.sh
source "$HERE/../support/venv_steps.sh"
if [[ ! -d "$DATA" ]]; then
  echo "vidur-env: shared data folder $DATA not found (set OPTSCHED_SHARED_DATA)" >&2
  exit 1
fi
if [[ -f "$MARKER" ]]; then
  echo "vidur-env: reusing $VENV"
else
  echo "vidur-env: creating $VENV (vidur 0.0.26 and its dependencies; a few minutes)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  step "$PY" -m venv "$VENV"
  step "$VENV/bin/python" -m pip install "vidur==0.0.26"
  REQUEST_PY="$("$VENV/bin/python" -c 'import vidur.entities.request as m; print(m.__file__)')"
  # The fix: after `self._num_processed_tokens = 0` in restart(), reset the stage counters too.
  step "$VENV/bin/python" - "$REQUEST_PY" <<'EOF'
import re
import sys

path = sys.argv[1]
with open(path, newline="") as f:
    text = f.read()
pattern = re.compile(r"(    def restart\(self\):.*?\n( +)self\._num_processed_tokens = 0(\r?\n))", re.S)
match = pattern.search(text)
if match is None:
    sys.exit(f"restart() in {path} is not the 0.0.26 code this fix is written for")
indent, eol = match.group(2), match.group(3)
fix = f"{indent}self._num_stage_processed_tokens = 0{eol}{indent}self._is_prefill_stage_complete = False{eol}"
with open(path, "w", newline="") as f:
    f.write(text[: match.end()] + fix + text[match.end() :])
print(f"patched {path}")
EOF
  "$VENV/bin/python" -c "import vidur.main" >"$STEP_LOG" 2>&1 \
    || { echo "vidur-env: 'import vidur.main' fails in $VENV" >&2; tail -20 "$STEP_LOG" >&2; exit 1; }
  touch "$MARKER"
fi
step "$VENV/bin/python" "$HERE/vidur_inputs.py" "$DATA" "$VENV/optsched-inputs"
echo "vidur-env: ready: $VENV (inputs in $VENV/optsched-inputs)"

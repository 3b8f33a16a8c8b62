#!/usr/bin/env bash
# End-to-end test of the vLLM executor on vLLM's CPU build (docs/executor.md).
#
# 1. creates or reuses the pinned vLLM venv (tests/e2e/vllm_env.sh), ~3 min and ~2.5 GB the first
#    time; default ~/.cache/optsched/vllm-0.32.0-venv so that CI runs on one machine share it
#    (override with VLLM_E2E_VENV, e.g. .ci/vllm-venv, which git ignores);
# 2. installs this checkout's optsched into it (no dependencies: vLLM brings numpy and pydantic);
# 3. runs tests/e2e/vllm_e2e.py: schedule -> export -> vLLM execute (tiny random-weight Llama) ->
#    validate, asserting zero plan mismatches and exact output lengths; then vLLM's own scheduler
#    (no plan) against optsched's policies, asserting vllm-v1 and sarathi-pc match it batch for batch.
# The project's Python (OPTSCHED_PYTHON, default python3) must have optsched installed.
# Prints "vllm-e2e: N passed, M failed" last and exits non-zero on any failure.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_E2E_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/optsched/vllm-0.32.0-venv}"
PY="${OPTSCHED_PYTHON:-python3}"
OUT="${VLLM_E2E_OUT:-$REPO/.ci/vllm-e2e-out}"

fail() { echo "vllm-e2e: $1" >&2; echo "vllm-e2e: 0 passed, 1 failed"; exit 1; }

"$PY" -c "import optsched" 2>/dev/null || fail "$PY cannot import optsched (set OPTSCHED_PYTHON)"
bash "$REPO/tests/e2e/vllm_env.sh" "$VENV" || fail "could not prepare the vLLM venv at $VENV"
"$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >/dev/null 2>&1 \
  || fail "could not install optsched into $VENV"
rm -rf "$OUT"
# In-process engine (exact step control); one unpinned OpenMP thread: on a shared 2-core machine two
# threads straggle (steps of 3 ms became 20-200 ms under load), one thread stays near 3 ms.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1
"$PY" "$REPO/tests/e2e/vllm_e2e.py" --python "$PY" --vllm-python "$VENV/bin/python" --out "$OUT"

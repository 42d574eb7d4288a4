# Sourced by scripts/device_test.sh: run a script's phases under one wall-clock budget.
#
#   BUDGET_SECONDS=540 BUDGET_SUMMARY=out/summary.md; . scripts/phase_budget.sh
#   within LABEL CMD...
#
# within runs CMD under what is left of the budget, counted from when this file was sourced, less
# BUDGET_RESERVE seconds (default 20) kept for the caller's summary; a budget of 0 means none. A slow
# or hung phase then cannot take the later phases' time, nor the summary, which a run cut short by the
# device tool's own limit would lose. Returns CMD's status, 124 (or 137) when the budget cut it short,
# 125 when it could not start (under BUDGET_MIN_START seconds left, default 30); the last two are
# noted in BUDGET_SUMMARY.
BUDGET_SECONDS="${BUDGET_SECONDS:-0}"
BUDGET_RESERVE="${BUDGET_RESERVE:-20}"
BUDGET_MIN_START="${BUDGET_MIN_START:-30}"
BUDGET_SUMMARY="${BUDGET_SUMMARY:-/dev/null}"
budget_t0=$(date +%s)

within() {
  local label="$1"; shift
  if [ "$BUDGET_SECONDS" -eq 0 ]; then "$@"; return $?; fi
  local left=$(( BUDGET_SECONDS - ($(date +%s) - budget_t0) - BUDGET_RESERVE ))
  if [ "$left" -lt "$BUDGET_MIN_START" ]; then
    echo "[budget] $label: skipped, ${left} s of ${BUDGET_SECONDS} s left" >&2
    echo "- $label: SKIPPED (budget of ${BUDGET_SECONDS} s spent)" >>"$BUDGET_SUMMARY"
    return 125
  fi
  # SIGINT first: pytest and ctest then report what ran before they stop.
  timeout --signal=INT --kill-after=15 "$left" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "[budget] $label: cut short after ${left} s" >&2
    echo "- $label: CUT SHORT by the budget after ${left} s (partial log kept)" >>"$BUDGET_SUMMARY"
  fi
  return $rc
}

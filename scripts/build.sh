#!/usr/bin/env bash
# Builds pride (C++ libraries, tests, perf tools, Python package) and installs the package into the venv.
# One CMake build tree, build/py, driven by scikit-build-core; ctest runs in the same tree.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n 2,3p "$0"; echo "usage: bash scripts/build.sh   (no options; PRIDE_BUILD_JOBS sets the parallel jobs, default nproc)"
             exit 0 ;;
  "") ;;
  *) echo "build.sh: takes no arguments (see --help)"; exit 2 ;;
esac
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
jobs="${PRIDE_BUILD_JOBS:-$(nproc)}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "build: compiling pride (CMake via pip, build tree build/py, $jobs jobs)"
# pip -v, so that the log has ninja's [done/total] lines: a build from scratch takes about 10 minutes on
# 2 cores, and every 30 s this says how far it is.
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$PRIDE_PY" -m pip install -v --disable-pip-version-check \
  --no-build-isolation -C build-dir=build/py -C cmake.define.PRIDE_BUILD_TESTS=ON \
  -C cmake.define.PRIDE_BUILD_PERF=ON . >"$log" 2>&1 &
pip_pid=$!
seconds=0
while kill -0 "$pip_pid" 2>/dev/null; do
  sleep 1
  seconds=$((seconds + 1))
  if ((seconds % 30 == 0)); then
    step="$(grep -o '^ *\[[0-9]*/[0-9]*\]' "$log" | tail -n 1 | tr -d ' ' || true)"
    echo "build: ${seconds} s${step:+, step $step}"
  fi
done
if ! wait "$pip_pid"; then
  grep -v "^WARNING: Location" "$log" | tail -n 60
  echo "build: failed (the end of its log above)"
  exit 1
fi
echo "build: done in ${seconds} s"

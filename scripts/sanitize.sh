#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer run of the engine: the thread-rank tests
# (communicator, workspace, sign-allreduce, standard collectives) and every fault scenario of SPEC §6
# as real processes, over shared memory and over TCP. Leak checking is on. Build tree: build/asan.
# Needs the venv of scripts/setup.sh (torch's c10d store). Not part of .ci/run: it rebuilds the
# engine with sanitizers (minutes on 2 cores).
#
#   bash scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n 2,7p "$0"; exit 0 ;; esac
bash scripts/setup.sh
PY="$PWD/.venv/bin/python"
mkdir -p build
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIDE_SANITIZE=address,undefined \
  -DPython3_EXECUTABLE="$PY" -DPRIDE_BUILD_PERF=OFF > build/asan.configure.log
cmake --build build/asan -j2 --target test_communicator test_workspace test_sign_allreduce test_standard fault_probe
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in test_communicator test_workspace test_sign_allreduce test_standard; do
  echo "sanitize: $t"
  "build/asan/tests/engine/$t" --gtest_brief=1
done
status=0
for shm in 1 0; do
  for scenario in "ok 1" "silent 3" "die 2" "loop 1" "numel 2" "mode 1"; do
    set -- $scenario
    out=$(PRIDE_SHARED_MEMORY=$shm "$PY" tests/multiproc/run_multiproc.py fault \
      --probe build/asan/tests/multiproc/fault_probe --nproc 4 --scenario "$1" --victim "$2" --timeout 5 2>&1) || status=1
    if grep -qE "AddressSanitizer|LeakSanitizer|runtime error" <<<"$out"; then status=1; echo "$out"; fi
    echo "sanitize: fault $1 (victim $2, PRIDE_SHARED_MEMORY=$shm): $(tail -1 <<<"$out")"
  done
done
[ $status -eq 0 ] && echo "sanitize: no sanitizer reports" || echo "sanitize: FAILED"
exit $status

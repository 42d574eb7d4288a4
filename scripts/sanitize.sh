#!/usr/bin/env bash
# Sanitizer runs of the engine. Default: AddressSanitizer + UBSan + LeakSanitizer on the thread-rank
# tests (communicator, workspace, sign-allreduce, standard collectives, level vote, 1-bit allreduce,
# chunks, settings, process state), the bit kernels' tests (AVX2 and portable), and every fault
# scenario of SPEC §6 as real processes, over shared memory and over TCP (build tree build/asan). --thread:
# ThreadSanitizer on the thread-rank tests and on the torch plugin driven from several threads
# (tests/plugin/test_backend_threads.cc; build/tsan; UCX and torch are not instrumented, see
# tests/sanitizers/tsan.supp). --ci: the reduced ASan + UBSan set that scripts/test.sh (and so CI)
# runs: test_communicator and the killed-rank, giving-up and disagreeing-ranks scenarios over both
# transports. --build-only: configure and build the ASan set's targets and stop (scripts/test.sh
# builds them at low priority while the other tests run). Needs the venv of scripts/setup.sh (torch's
# c10d store).
#
#   bash scripts/sanitize.sh [--thread | --ci] [--build-only]
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=address
BUILD_ONLY=0
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    --thread) MODE=thread ;;
    --ci) MODE=ci ;;
    --build-only) BUILD_ONLY=1 ;;
    *) echo "sanitize: unknown option $arg (see --help)"; exit 2 ;;
  esac
done
if [ "$MODE" = thread ] && [ $BUILD_ONLY = 1 ]; then
  echo "sanitize: --build-only builds the AddressSanitizer set, not --thread's"; exit 2
fi
bash scripts/setup.sh
PY="$PWD/.venv/bin/python"
mkdir -p build
if [ "$MODE" = thread ]; then
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIDE_SANITIZE=thread \
    -DPython3_EXECUTABLE="$PY" -DPRIDE_BUILD_PERF=OFF > build/tsan.configure.log
  cmake --build build/tsan -j2 --target test_communicator test_workspace test_sign_allreduce test_standard \
    test_backend_threads
  # UCX_MEM_EVENTS=no: UCX's memory hooks crash under TSan when a thread exits.
  export UCX_MEM_EVENTS=no TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 suppressions=$PWD/tests/sanitizers/tsan.supp"
  status=0
  for t in engine/test_communicator engine/test_workspace engine/test_sign_allreduce engine/test_standard \
           plugin/test_backend_threads; do
    log="build/tsan/$(basename $t).log"
    "build/tsan/tests/$t" --gtest_brief=1 > "$log" 2>&1 || status=1
    reports=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
    echo "sanitize: $t (thread): $reports reports, $(grep -E 'PASSED|FAILED' "$log" | head -1)"
    [ "$reports" = 0 ] || { status=1; grep -A30 "WARNING: ThreadSanitizer" "$log" | head -60; }
  done
  [ $status -eq 0 ] && echo "sanitize: no sanitizer reports" || echo "sanitize: FAILED"
  exit $status
fi
# --ci (what scripts/test.sh runs): the communicator tests and the failure scenarios that free buffers
# under in-flight requests (a killed rank, a rank that gives up, disagreeing ranks), both transports.
TESTS="engine/test_communicator engine/test_workspace engine/test_sign_allreduce engine/test_standard
       engine/test_level_vote engine/test_onebit_allreduce engine/test_chunks engine/test_settings
       engine/test_process_state kernels/test_kernels"
SCENARIOS=("ok 1" "silent 3" "die 2" "loop 1" "numel 2" "mode 1")
if [ "$MODE" = ci ]; then
  TESTS="engine/test_communicator"
  SCENARIOS=("die 2" "loop 1" "numel 2")
fi
TARGETS="$(for t in $TESTS; do basename "$t"; done | tr '\n' ' ')"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIDE_SANITIZE=address,undefined \
  -DPython3_EXECUTABLE="$PY" -DPRIDE_BUILD_PERF=OFF > build/asan.configure.log
cmake --build build/asan -j2 --target $TARGETS fault_probe > build/asan.build.log || {
  tail -30 build/asan.build.log; echo "sanitize: the AddressSanitizer build failed"; exit 1; }
[ $BUILD_ONLY = 1 ] && { echo "sanitize: built $TARGETS fault_probe in build/asan"; exit 0; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in $TESTS; do
  log="build/asan/$(basename "$t").log"
  "build/asan/tests/$t" --gtest_brief=1 > "$log" 2>&1 || status=1
  if grep -qE "AddressSanitizer|LeakSanitizer|runtime error" "$log"; then status=1; grep -A30 -E "AddressSanitizer|LeakSanitizer|runtime error" "$log" | head -60; fi
  echo "sanitize: $t: $(grep -E 'PASSED|FAILED' "$log" | head -1)"
done
for shm in 1 0; do
  for scenario in "${SCENARIOS[@]}"; do
    set -- $scenario
    out=$(PRIDE_SHARED_MEMORY=$shm "$PY" tests/multiproc/run_multiproc.py fault \
      --probe build/asan/tests/multiproc/fault_probe --nproc 4 --scenario "$1" --victim "$2" --timeout 5 2>&1) || status=1
    if grep -qE "AddressSanitizer|LeakSanitizer|runtime error" <<<"$out"; then status=1; echo "$out"; fi
    echo "sanitize: fault $1 (victim $2, PRIDE_SHARED_MEMORY=$shm): $(tail -1 <<<"$out")"
  done
done
[ $status -eq 0 ] && echo "sanitize: no sanitizer reports" || echo "sanitize: FAILED"
exit $status

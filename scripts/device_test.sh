#!/usr/bin/env bash
# The GPU machine's one command: installs what is missing from carried files, builds pride against
# that machine's own python3 and torch with the libucx-cu13 UCX, and runs the whole test suite there,
# GPU tests included (ctest, then pytest). Nothing is fetched: prepare the files folder first on a
# machine with network access (bash scripts/fetch_device_files.sh) and bring it along.
#
#   bash scripts/device_test.sh [--files DIR] [--out DIR] [--jobs N] [--suite all|ctest|pytest|gpu]
#                               [--bench | --bench-quick | --bench-cpu] [--ctest-regex R] [--pytest-k EXPR]...
#                               [--workers N] [--budget SECONDS]
#
#   --files DIR     wheels to install (default .whl): libucx-cu13, lion-pytorch, expecttest
#   --out DIR       where the logs and the summary go (default $OUT when set, else build/device-results)
#   --suite S       all (default), ctest, pytest, or gpu (only the tests labelled/marked gpu)
#   --bench         also run the GPU benchmarks (scripts/device_bench.sh) after the tests
#   --bench-quick   the same on 20M parameters instead of 350M (minutes less)
#   --bench-cpu     instead, the host-CPU figures (device_bench.sh --cpu; ~4 minutes)
#   --pytest-k EXPR select pytest tests; give it several times for several pytest runs, in that order
#   --workers N     pytest-xdist workers (default: cores / 4)
#   --budget S      the whole run's wall-clock limit: every phase runs under a timeout of what is left
#                   (20 s kept for the summary), a phase that cannot start in time is reported as
#                   skipped. Use it under the device tool's per-call limit, so that the summary and
#                   the logs of a cut-short run still come back.
# Exit status: 0 when every suite that ran passed (a phase cut short or skipped by the budget fails).
# The summary (date, commit, machine, pass/fail counts, phase times) is written to OUT/summary.md,
# line by line as the phases end, for docs/device-runs.md. Its commit is PRIDE_COMMIT when set, else
# the copy's git HEAD, flagged when tracked files differ from it: the device tool's copy of the
# working tree can carry an older .git, so name the commit you sent (PRIDE_COMMIT=$(git rev-parse --short HEAD)).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FILES=.whl
RESULTS="${OUT:-$ROOT/build/device-results}"
JOBS="$(nproc)"
SUITE=all
BENCH=0
CTEST_REGEX=""
PYTEST_KS=()
WORKERS=""
BUDGET=0
QUICK=0
CPU_BENCH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --files|--out|--jobs|--suite|--ctest-regex|--pytest-k|--workers|--budget)
      [ $# -ge 2 ] || { echo "device_test: $1 needs a value (see --help)"; exit 2; } ;;
  esac
  case "$1" in
    --files) FILES="$2"; shift 2 ;;
    --out) RESULTS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --suite) SUITE="$2"; shift 2 ;;
    --bench) BENCH=1; shift ;;
    --bench-quick) BENCH=1; QUICK=1; shift ;;
    --bench-cpu) BENCH=1; CPU_BENCH=1; shift ;;
    --ctest-regex) CTEST_REGEX="$2"; shift 2 ;;
    --pytest-k) PYTEST_KS+=("$2"); shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "device_test: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
case "$SUITE" in all|ctest|pytest|gpu) ;; *) echo "device_test: --suite must be all, ctest, pytest or gpu"; exit 2 ;; esac
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "device_test: --budget takes whole seconds, not '$BUDGET'"; exit 2; }
[ -z "$WORKERS" ] || [[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || { echo "device_test: --workers takes a positive count, not '$WORKERS'"; exit 2; }
# Before any device time is spent: device_bench.sh refuses the pair too, but only after the tests ran.
[ "$QUICK" = 1 ] && [ "$CPU_BENCH" = 1 ] && { echo "device_test: --bench-quick and --bench-cpu exclude each other"; exit 2; }
mkdir -p "$RESULTS"
PY="${PRIDE_PY:-python3}"
SITE="${PRIDE_DEVICE_SITE:-/tmp/pride-site}"
BUILD="${PRIDE_DEVICE_BUILD:-build/device}"
summary="$RESULTS/summary.md"
t0=$(date +%s)
say() { echo "[device_test $(( $(date +%s) - t0 ))s] $*"; }
BUDGET_SECONDS="$BUDGET" BUDGET_SUMMARY="$summary"
. scripts/phase_budget.sh  # within LABEL CMD...: CMD under what is left of --budget

commit_sent() {
  if [ -n "${PRIDE_COMMIT:-}" ]; then echo "$PRIDE_COMMIT"; return; fi
  local head changed
  head="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  changed="$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
  if [ "$changed" -gt 0 ]; then
    echo "$head with $changed tracked files changed (this copy's .git may be older than what was sent; set PRIDE_COMMIT)"
  else
    echo "$head"
  fi
}
{
  echo "# device_test.sh run"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(commit_sent)"
  echo "- machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no GPU'), $(nproc) cores"
  echo "- os: $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -1), cmake $(cmake --version | head -1 | awk '{print $3}')"
  echo "- python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')"
  echo "- nvcc: $(nvcc --version 2>/dev/null | tail -1)"
} >"$summary"

# 1. Carried wheels into a private site folder (the image's own packages stay as they are).
say "installing carried wheels from $FILES into $SITE"
if ! ls "$FILES"/*.whl >/dev/null 2>&1; then
  echo "device_test: no wheels in $FILES; run scripts/fetch_device_files.sh on a machine with network access"
  exit 2
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$FILES"/*.whl \
  >"$RESULTS/pip.log" 2>&1 || { tail -20 "$RESULTS/pip.log"; echo "device_test: installing the wheels failed"; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
echo "- UCX: libucx-cu13 $("$PY" -c 'import importlib.metadata as m; print(m.version("libucx-cu13"))')" >>"$summary"

# 2. Build: the Python package into the same site folder, tests and perf tools in $BUILD.
build_pride() {  # extra -C options for CMake, if any
  CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" within build "$PY" -m pip install -q --no-build-isolation --no-deps --no-cache-dir \
    --target "$SITE" --upgrade -C build-dir="$BUILD" -C cmake.define.PRIDE_UCX=wheel \
    -C cmake.define.PRIDE_BUILD_TESTS=ON -C cmake.define.PRIDE_BUILD_PERF=ON \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 "$@" . >"$RESULTS/build.log" 2>&1
}
say "building (build tree $BUILD, $JOBS jobs)"
built=0
build_pride && built=1
# The torch plugin precompiles torch's headers (torch_plugin/CMakeLists.txt), which only CI's g++ 12 had
# built when it was written. A precompiled header changes no code, so if that is what failed here, the
# build is tried again without one rather than losing the GPU session's call to it.
if [ "$built" = 0 ] && grep -qE "FAILED: .*cmake_pch|cmake_pch.*error|error.*cmake_pch" "$RESULTS/build.log"; then
  mv "$RESULTS/build.log" "$RESULTS/build-pch.log"
  say "the build failed in a precompiled header (build-pch.log): building again without precompiled headers"
  echo "- build with precompiled headers: FAILED (build-pch.log); built again without them" >>"$summary"
  build_pride -C cmake.define.CMAKE_DISABLE_PRECOMPILE_HEADERS=ON && built=1
fi
if [ "$built" = 0 ]; then
  tail -60 "$RESULTS/build.log"
  echo "- build: FAILED (build.log)" >>"$summary"
  echo "device_test: build failed"
  exit 1
fi
say "built"
echo "- build: ok ($(( $(date +%s) - t0 )) s after start)" >>"$summary"
status=0

# 3. ctest (C++ kernels, CUDA kernels, engine, multi-process). gpu: only the tests labelled gpu.
if [ "$SUITE" = all ] || [ "$SUITE" = ctest ] || [ "$SUITE" = gpu ]; then
  args=(--test-dir "$BUILD" --output-on-failure --timeout 300 -j "$(( JOBS < 8 ? JOBS : 8 ))")
  [ "$SUITE" = gpu ] && args+=(-L gpu)
  [ -n "$CTEST_REGEX" ] && args+=(-R "$CTEST_REGEX")
  say "ctest ${args[*]}"
  phase_t=$(date +%s)
  within ctest ctest "${args[@]}" >"$RESULTS/ctest.log" 2>&1
  rc=$?
  grep -E "tests passed|tests failed|Total Test time" "$RESULTS/ctest.log"
  grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)" "$RESULTS/ctest.log" || true
  echo "- ctest: $(grep -E 'tests passed|tests failed' "$RESULTS/ctest.log" | tail -1) (exit $rc, $(( $(date +%s) - phase_t )) s)" >>"$summary"
  grep -E "^\s+[0-9]+ - " "$RESULTS/ctest.log" | grep -v "(Skipped)" | sed 's/^/  - failed: /' >>"$summary" || true
  grep -E "^\s+[0-9]+ - .*\(Skipped\)" "$RESULTS/ctest.log" | sed 's/^/  - skipped: /' >>"$summary" || true
  [ $rc -eq 0 ] || status=1
fi

# 4. pytest (the torch backend, DistributedLion, CUDA tensors, demo): one run per --pytest-k, in the
# order given (the riskiest first when device time is short), or one run of everything.
if [ "$SUITE" = all ] || [ "$SUITE" = pytest ] || [ "$SUITE" = gpu ]; then
  [ ${#PYTEST_KS[@]} -eq 0 ] && PYTEST_KS=("")
  [ -n "$WORKERS" ] || WORKERS=$(( JOBS / 4 > 1 ? JOBS / 4 : 1 ))
  run_no=0
  memory_report="$RESULTS/memory-by-kind.txt"
  rm -f "$memory_report"
  for k in "${PYTEST_KS[@]}"; do
    run_no=$((run_no + 1))
    log="$RESULTS/pytest.log"
    [ ${#PYTEST_KS[@]} -gt 1 ] && log="$RESULTS/pytest-$run_no.log"
    args=(-q -p no:cacheprovider --junitxml="${log%.log}.xml" tests/python)
    # Every multi-process test spawns ranks that import the CUDA torch (seconds each): run tests side by
    # side where pytest-xdist is installed (the GPU image has it); tests marked xdist_group (the NCCL
    # ones) run one after another in one worker.
    if "$PY" -c "import xdist" 2>/dev/null; then args+=(-n "$WORKERS" --dist loadgroup); fi
    [ "$SUITE" = gpu ] && args+=(-m gpu)
    [ -n "$k" ] && args+=(-k "$k")
    say "pytest ${args[*]}"
    phase_t=$(date +%s)
    # test_memory.py's table of memory growth by kind of call goes into the summary (below).
    PYTHONUNBUFFERED=1 PRIDE_MEMORY_REPORT="$memory_report" within "pytest${k:+ -k '$k'}" "$PY" -m pytest "${args[@]}" >"$log" 2>&1
    rc=$?
    tail -3 "$log"
    grep -E "^(FAILED|ERROR) " "$log" | head -40 || true
    echo "- pytest${k:+ -k '$k'}: $(tail -1 "$log") (exit $rc, $(( $(date +%s) - phase_t )) s)" >>"$summary"
    grep -E "^(FAILED|ERROR) " "$log" | sed 's/^/  - /' >>"$summary" || true
    [ $rc -eq 0 ] || status=1
  done
  if [ -s "$memory_report" ]; then
    { echo "- memory growth by kind of call (test_memory.py):"; echo '```'; cat "$memory_report"; echo '```'; } >>"$summary"
    rm -f "$memory_report"  # in the summary now: the device tool brings back 8 files at most
  fi
fi

if [ "$BENCH" = 1 ]; then
  say "benchmarks (scripts/device_bench.sh)"
  bench_args=(--out "$RESULTS")
  [ "$QUICK" = 1 ] && bench_args+=(--quick)
  [ "$CPU_BENCH" = 1 ] && bench_args+=(--cpu)
  phase_t=$(date +%s)
  within bench bash scripts/device_bench.sh "${bench_args[@]}" >"$RESULTS/bench.log" 2>&1 || status=1
  echo "- bench$([ "$QUICK" = 1 ] && echo ' (quick)')$([ "$CPU_BENCH" = 1 ] && echo ' (host CPU)'): $(( $(date +%s) - phase_t )) s, log bench.log" >>"$summary"
  tail -40 "$RESULTS/bench.log"
fi
say "done, exit $status"
echo "- total: $(( $(date +%s) - t0 )) s, exit $status" >>"$summary"
cat "$summary"
exit $status

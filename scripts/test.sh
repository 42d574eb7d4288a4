#!/usr/bin/env bash
# The test command (README, .ci/run): set up, build, then run every test suite.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n 2p "$0"; echo "usage: bash scripts/test.sh   (no options; set-up and build as scripts/setup.sh and"
             echo "       scripts/build.sh, then ctest, pytest, the AddressSanitizer set and the kernels on aarch64 under"
             echo "       qemu; exit 0 when all pass)"; exit 0 ;;
  "") ;;
  *) echo "test.sh: takes no arguments (see --help)"; exit 2 ;;
esac
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
bash scripts/build.sh
# Two jobs run at idle CPU priority (SCHED_IDLE; nice 19 where chrt cannot) while ctest and pytest
# run: the AddressSanitizer set's build, and the CPU kernels cross-built for aarch64 and tested under
# qemu (the portable kernels that ARM hosts run, which this x86 machine otherwise only tests as the
# fallback; no timeouts there to be hurt by a slow turn). ctest and pytest mostly wait on their ranks
# (pytest used 7.7 CPU-minutes of the 2 cores in its 12.3 minutes here), and these jobs need about 11
# CPU-minutes, which otherwise came after the tests. The sanitizer tests themselves run in the
# foreground below: their fault scenarios time ranks out, which a starved rank would upset.
idle=(nice -n 19); chrt --idle 0 true 2>/dev/null && idle=(chrt --idle 0)
rm -f build/aarch64.status
setsid "${idle[@]}" bash -c 'bash scripts/sanitize.sh --ci --build-only >build/asan.prebuild.log 2>&1
  bash scripts/check_kernels_elsewhere.sh aarch64 >build/aarch64.log 2>&1; echo $? >build/aarch64.status' &
background=$!
trap 'kill -- -$background 2>/dev/null || true' EXIT
status=0
ctest --test-dir build/py --output-on-failure --timeout 600 -j1 || status=1
if ls tests/python/test_*.py >/dev/null 2>&1; then
  "$PRIDE_PY" -m pytest -q --durations=15 tests/python || status=1
fi
wait $background || true
# AddressSanitizer + UBSan + LeakSanitizer on the communicator and the failure paths (build/asan, built
# above; a failed build is built again here and reported); the full set is `bash scripts/sanitize.sh`,
# TSan `--thread`.
bash scripts/sanitize.sh --ci || status=1
# The aarch64 kernels (above). 77: the cross compiler or qemu could not be installed, skipped.
aarch64=$(cat build/aarch64.status 2>/dev/null || echo 1)
case "$aarch64" in
  0|77) grep -E "^check_kernels_elsewhere|^\[ *(PASSED|SKIPPED|FAILED) *\]|tests from .* ran" build/aarch64.log || true ;;
  *) tail -n 60 build/aarch64.log; echo "test.sh: the aarch64 kernels failed ($aarch64; build/aarch64.log)"; status=1 ;;
esac
exit $status

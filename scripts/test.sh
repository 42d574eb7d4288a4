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
# The AddressSanitizer set and the aarch64 kernels are built at the lowest CPU priority while ctest and
# pytest run. Those mostly wait on their ranks (pytest used 7.7 CPU-minutes of the 2 cores in its
# 12.3 minutes here), and the two builds need about 10 CPU-minutes, which would otherwise come after
# the tests. Their steps below build again whatever is missing and report a failed build themselves.
setsid nice -n 19 bash -c 'bash scripts/sanitize.sh --ci --build-only
                           bash scripts/check_kernels_elsewhere.sh aarch64 --build-only' >build/prebuild.log 2>&1 &
prebuild=$!
trap 'kill -- -$prebuild 2>/dev/null || true' EXIT
status=0
ctest --test-dir build/py --output-on-failure --timeout 600 -j1 || status=1
if ls tests/python/test_*.py >/dev/null 2>&1; then
  "$PRIDE_PY" -m pytest -q --durations=15 tests/python || status=1
fi
wait $prebuild || echo "test.sh: a background build failed (build/prebuild.log); the steps below say which"
# AddressSanitizer + UBSan + LeakSanitizer on the communicator and the failure paths (build/asan, built
# above); the full set is `bash scripts/sanitize.sh`, TSan `--thread`.
bash scripts/sanitize.sh --ci || status=1
# The CPU kernels cross-built for aarch64 (above) and tested under qemu: the portable kernels
# that ARM hosts run, which this x86 machine otherwise only tests as the fallback. 77: could not install
# the cross compiler or qemu, skipped.
bash scripts/check_kernels_elsewhere.sh aarch64 || [ $? -eq 77 ] || status=1
exit $status

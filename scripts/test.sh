#!/usr/bin/env bash
# The test command (README, .ci/run): set up, build, then run every test suite.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
bash scripts/build.sh
status=0
ctest --test-dir build/py --output-on-failure --timeout 600 -j1 || status=1
if ls tests/python/test_*.py >/dev/null 2>&1; then
  "$PRIDE_PY" -m pytest -q --durations=15 tests/python || status=1
fi
# AddressSanitizer + UBSan + LeakSanitizer on the communicator and the failure paths (build/asan,
# about 6 minutes on 2 cores); the full set is `bash scripts/sanitize.sh`, TSan `--thread`.
bash scripts/sanitize.sh --ci || status=1
exit $status

#!/usr/bin/env bash
# Builds pride (C++ libraries, tests, perf tools, Python package) and installs the package into the venv.
# One CMake build tree, build/py, driven by scikit-build-core; ctest runs in the same tree.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
jobs="${PRIDE_BUILD_JOBS:-$(nproc)}"
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$PRIDE_PY" -m pip install -q --disable-pip-version-check --no-build-isolation \
  -C build-dir=build/py -C cmake.define.PRIDE_BUILD_TESTS=ON -C cmake.define.PRIDE_BUILD_PERF=ON . \
  2>&1 | grep -v "^WARNING: Location" || { echo "build failed"; exit 1; }

#!/usr/bin/env bash
# Builds and tests pride's C++ on toolchains CI does not use (docs/compat.md records the runs):
#   clang    clang 14 (Debian's clang-14) instead of g++: the C++ libraries, kernels and tests that need
#            no torch (the main CMake with PRIDE_WITH_TORCH=OFF, PRIDE_WITH_CUDA=OFF; build/clang), ctest.
#   aarch64  g++ for aarch64 (Debian's g++-aarch64-linux-gnu): the CPU kernels and their tests alone
#            (tests/kernels/standalone; build/aarch64), run under qemu-aarch64-static. The portable
#            kernels are what ARM hosts run; the AVX2 tests skip there.
# Installs the Debian packages it needs when they are missing (root). Exit status: the tests', or 77
# (skipped) where a package cannot be installed.
#
#   bash scripts/check_kernels_elsewhere.sh [clang | aarch64 | all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
case "$what" in
  -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
  clang|aarch64|all) ;;
  *) echo "check_kernels_elsewhere: unknown target '$what' (clang, aarch64 or all; see --help)"; exit 2 ;;
esac
need() {  # need <command> <debian package>...
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null && return 0
  echo "check_kernels_elsewhere: installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 ||
    { echo "check_kernels_elsewhere: cannot install $* here; skipped"; exit 77; }
}
# cmake and ninja: the venv's (scripts/setup.sh installs them there) where it exists, else the system's.
[ -d .venv/bin ] && export PATH="$PWD/.venv/bin:$PATH"
need cmake cmake
need ninja ninja-build
jobs="${PRIDE_BUILD_JOBS:-$(nproc)}"
status=0
if [ "$what" = clang ] || [ "$what" = all ]; then
  need clang++-14 clang-14
  echo "check_kernels_elsewhere: clang 14 build in build/clang"
  cmake -S . -B build/clang -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
    -DPRIDE_WITH_TORCH=OFF -DPRIDE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build/clang -j "$jobs"
  ctest --test-dir build/clang -j "$jobs" --output-on-failure | tail -n 3 || status=1
fi
if [ "$what" = aarch64 ] || [ "$what" = all ]; then
  need aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
  need qemu-aarch64-static qemu-user-static
  [ -d /usr/src/googletest ] || need /usr/src/googletest/CMakeLists.txt googletest
  echo "check_kernels_elsewhere: aarch64 cross build in build/aarch64"
  cmake -S tests/kernels/standalone -B build/aarch64 -G Ninja -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build/aarch64 -j "$jobs"
  echo "check_kernels_elsewhere: running test_kernels under qemu-aarch64-static"
  qemu-aarch64-static build/aarch64/test_kernels --gtest_brief=1 | grep -v "avx2 not supported\|oracle.cc.*Skipped" | tail -n 5 ||
    status=1
fi
exit $status

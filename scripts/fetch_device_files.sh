#!/usr/bin/env bash
# Fetches, on a machine with network access, what scripts/device_test.sh installs on a GPU machine that
# has none: the libucx-cu13 wheel (UCX 1.22 with cuda_copy/cuda_ipc, headers included) and the pure-Python
# packages the tests compare against (lion-pytorch) or need (expecttest, for torch's own distributed test suite). Wheels for the GPU machine's Python (default 3.12).
#
#   bash scripts/fetch_device_files.sh [--python 3.12] [--dir .whl]
#
# The folder is git-ignored; hand it to the GPU machine next to the checkout (the device tool's `carry`).
set -euo pipefail
PY_VERSION=3.12
DIR=.whl
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY_VERSION="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "fetch_device_files: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$DIR"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
# Binary wheels for the target interpreter; --no-deps: the GPU machine's image has torch and the rest.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  "${platforms[@]}" -d "$DIR" "libucx-cu13==1.22.*"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" -d "$DIR" "lion-pytorch==0.2.5" "expecttest==0.3.0"
ls -la "$DIR"

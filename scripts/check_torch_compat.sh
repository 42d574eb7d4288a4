#!/usr/bin/env bash
# Runs pride against another torch release: in a venv of its own (build/compat-<version>/venv) it
# installs that torch from PyPI (the CUDA build runs on CPU here), builds pride against it, and runs
# the Python test suite. The project's own venv and build tree are left alone.
#
#   bash scripts/check_torch_compat.sh 2.11.0            # the GPU machines' torch
#   bash scripts/check_torch_compat.sh 2.15.0 -k optim   # extra arguments go to pytest
#
# Exit status: pytest's. The summary line is also written to build/compat-<version>/result.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
  ""|-h|--help) sed -n 2,9p "$0"; exit 0 ;;
esac
version="$1"; shift
. scripts/setup.sh >/dev/null  # Debian packages (UCX, hwloc, ...) as for the main build
dir="build/compat-$version"
venv="$dir/venv"
py="$venv/bin/python"
mkdir -p "$dir"
if [ ! -x "$py" ]; then
  echo "check_torch_compat: creating $venv"
  python3 -m venv "$venv"
fi
if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  echo "check_torch_compat: installing torch==$version and the test requirements"
  # The release asked for on the command line wins over a machine-wide pip constraint that caps torch
  # (this machine's /etc/xdg/pip caps it at the pinned 2.14.1); the venv is this script's own.
  PIP_CONSTRAINT=/dev/null "$py" -m pip install -q --disable-pip-version-check "torch==$version" numpy pytest scikit-build-core pybind11 \
    cmake ninja tqdm matplotlib scikit-learn lion-pytorch==0.2.5 expecttest==0.3.0 >"$dir/pip.log" 2>&1 || { tail -20 "$dir/pip.log"; exit 1; }
fi
# Test requirements that joined the list after a venv was made (expecttest for torch's own distributed
# test suite, lion-pytorch as the optimizer's reference) are added here.
"$py" -c "import expecttest, lion_pytorch" 2>/dev/null ||
  "$py" -m pip install -q --disable-pip-version-check --no-deps expecttest==0.3.0 lion-pytorch==0.2.5
echo "check_torch_compat: building pride against torch $("$py" -c 'import torch; print(torch.__version__)')"
# --no-deps: installing pride must not let pip re-resolve torch (a constraint could swap it for another release).
CMAKE_BUILD_PARALLEL_LEVEL="${PRIDE_BUILD_JOBS:-$(nproc)}" "$py" -m pip install -q --disable-pip-version-check \
  --no-deps --no-build-isolation -C build-dir="$dir/build" . >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
"$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" ||
  { echo "check_torch_compat: the venv's torch is not $version after the build"; exit 1; }
echo "check_torch_compat: running the Python test suite"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python "$@" 2>&1 | tee "$dir/pytest.log"
status=${PIPESTATUS[0]}
set -e
echo "torch $version: $(tail -1 "$dir/pytest.log") (exit $status)" | tee "$dir/result.txt"
exit "$status"

#!/usr/bin/env bash
# Runs pride against another torch release: in a venv of its own (build/compat-<version>/venv) it
# installs that torch from PyPI (the CUDA build runs on CPU here), builds pride against it, and runs
# the Python test suite. The project's own venv and build tree are left alone.
#
#   bash scripts/check_torch_compat.sh 2.11.0            # the GPU machines' torch
#   bash scripts/check_torch_compat.sh 2.15.0 -k optim   # extra arguments go to pytest
#   bash scripts/check_torch_compat.sh --python /root/.pyenv/versions/3.10.13/bin/python3 2.14.1
#                                      # another interpreter (SPEC 8: Python 3.10 to 3.12)
#
# Exit status: pytest's. The summary line is also written to build/compat-<version>[-py<X.Y>]/result.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
  ""|-h|--help) sed -n 2,11p "$0"; exit 0 ;;
esac
base_python=python3
suffix=""
if [ "$1" = "--python" ]; then
  [ $# -ge 3 ] || { echo "check_torch_compat: --python takes an interpreter, then the torch version"; exit 2; }
  base_python="$2"; shift 2
  pyver="$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ||
    { echo "check_torch_compat: cannot run $base_python"; exit 2; }
  suffix="-py$pyver"
fi
version="$1"; shift
[[ "$version" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "check_torch_compat: '$version' is not a torch release such as 2.11.0 (see --help)"; exit 2; }
. scripts/setup.sh >/dev/null  # Debian packages (UCX, hwloc, ...) as for the main build
dir="build/compat-$version$suffix"
venv="$dir/venv"
py="$venv/bin/python"
mkdir -p "$dir"
if [ ! -x "$py" ]; then
  echo "check_torch_compat: creating $venv"
  "$base_python" -m venv "$venv"
fi
# The test requirements are the main venv's (scripts/setup.sh's list) with torch swapped for the release
# asked for, installed in one pip command so that nothing they depend on can swap torch for another release.
# The release asked for on the command line wins over a machine-wide pip constraint that caps torch (this
# machine's /etc/xdg/pip caps it at the pinned 2.14.1); the venv is this script's own.
# The integration tests' frameworks and DeepSpeed (the 1-bit Adam oracle) are pinned for the main venv's
# Python; where a pin has no release for this venv's Python (transformers 5.21 and later need 3.11), the
# newest release of that one package that installs beside this torch is taken instead, and named (not for
# DeepSpeed, whose later releases lack what its test compares). Their tests skip without them.
requirements=("torch==$version")
frameworks=()
for p in "${PIP_PACKAGES[@]}"; do
  case "$p" in
    torch==*) ;;
    transformers==*|accelerate==*|lightning==*|deepspeed==*) frameworks+=("$p") ;;
    *) requirements+=("$p") ;;
  esac
done
if ! pride_pip_installed "$py" "${requirements[@]}"; then
  echo "check_torch_compat: installing torch==$version and the test requirements"
  PIP_CONSTRAINT=/dev/null "$py" -m pip install -q --disable-pip-version-check "${requirements[@]}" >"$dir/pip.log" 2>&1 ||
    { tail -20 "$dir/pip.log"; exit 1; }
fi
if ! pride_pip_installed "$py" "${frameworks[@]}"; then
  echo "check_torch_compat: installing ${frameworks[*]}"
  for p in "${frameworks[@]}"; do
    PIP_CONSTRAINT=/dev/null "$py" -m pip install -q --disable-pip-version-check "torch==$version" "$p" >>"$dir/pip.log" 2>&1 ||
      { [[ $p != deepspeed==* ]] &&  # the oracle is that release: later ones have no 1-bit Adam
        PIP_CONSTRAINT=/dev/null "$py" -m pip install -q --disable-pip-version-check "torch==$version" "${p%%==*}" \
          >>"$dir/pip.log" 2>&1; } ||
      echo "check_torch_compat: could not install ${p%%==*} (its tests will skip): see $dir/pip.log"
  done
  "$py" - "${frameworks[@]%%==*}" <<'PYEOF'
import sys, importlib.metadata as md
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"
print("check_torch_compat: " + ", ".join(f"{n} {version(n)}" for n in sys.argv[1:]))
PYEOF
fi
echo "check_torch_compat: building pride against torch $("$py" -c 'import torch; print(torch.__version__)')"
# --no-deps: installing pride must not let pip re-resolve torch (a constraint could swap it for another release).
CMAKE_BUILD_PARALLEL_LEVEL="${PRIDE_BUILD_JOBS:-$(nproc)}" "$py" -m pip install -q --disable-pip-version-check \
  --no-deps --no-build-isolation --config-settings=build-dir="$dir/build" . >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
"$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" ||
  { echo "check_torch_compat: the venv's torch is not $version after the build"; exit 1; }
echo "check_torch_compat: running the Python test suite"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python "$@" 2>&1 | tee "$dir/pytest.log"
status=${PIPESTATUS[0]}
set -e
echo "torch $version, $("$py" -c 'import platform; print("Python", platform.python_version())'): $(tail -1 "$dir/pytest.log") (exit $status)" | tee "$dir/result.txt"
exit "$status"

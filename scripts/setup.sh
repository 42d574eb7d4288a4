#!/usr/bin/env bash
# Installs what pride needs on a fresh Debian 12 machine: Debian packages (apt) and a Python venv
# (.venv) with torch and the build/test tools. Idempotent and quiet when everything is present.
# Source it (". scripts/setup.sh") to get PRIDE_PY / PRIDE_VENV set, or run it on its own.
set -euo pipefail
# Run on its own with --help: say what it does (sourced by the other scripts, it ignores their arguments).
if [ "${BASH_SOURCE[0]}" = "$0" ] && { [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; }; then
  sed -n 2,4p "$0"
  exit 0
fi
PRIDE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PRIDE_VENV="${PRIDE_VENV:-$PRIDE_ROOT/.venv}"
PRIDE_PY="$PRIDE_VENV/bin/python"

APT_PACKAGES=(build-essential pkg-config libucx-dev ucx-utils libhwloc-dev hwloc libfmt-dev libspdlog-dev
              libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev iproute2
              g++-aarch64-linux-gnu qemu-user-static)  # these two: the kernels on aarch64 (check_kernels_elsewhere.sh)
PIP_PACKAGES=(torch==2.14.1 numpy pytest scikit-build-core pybind11 cmake ninja tqdm matplotlib scikit-learn lion-pytorch==0.2.5 expecttest==0.3.0
              transformers==5.23.0 accelerate==1.15.0 lightning==2.6.6  # these three: tests/python/test_integrations.py
              deepspeed==0.17.6)  # the oracle of tests/python/test_onebit_vs_deepspeed.py (a release that still has 1-bit and 0/1 Adam)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$PRIDE_PY" ]; then
  echo "setup: creating venv $PRIDE_VENV"
  python3 -m venv "$PRIDE_VENV"
fi
# pride_pip_installed PYTHON SPEC...: exit 0 when every "name==version" (or bare name) is installed in
# PYTHON's environment at that version (a local suffix such as +cu130 ignored). check_torch_compat.sh uses it too.
pride_pip_installed() {
  local python="$1"; shift
  "$python" - "$@" <<'PYEOF' 2>/dev/null
import sys, importlib.metadata as md
for spec in sys.argv[1:]:
    name, _, ver = spec.partition("==")
    have = md.version(name)  # raises, so exits non-zero, when the package is missing
    if ver and have.split("+")[0] != ver:
        sys.exit(1)
PYEOF
}
if ! pride_pip_installed "$PRIDE_PY" "${PIP_PACKAGES[@]}"; then
  echo "setup: installing Python packages into $PRIDE_VENV (torch comes from local wheels)"
  pip_log="$(mktemp)"
  if ! "$PRIDE_PY" -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}" >"$pip_log" 2>&1; then
    grep -v "^WARNING: Location" "$pip_log" | tail -n 40
    rm -f "$pip_log"
    echo "setup: pip install failed"
    exit 1
  fi
  rm -f "$pip_log"
fi
export PRIDE_ROOT PRIDE_VENV PRIDE_PY
export PATH="$PRIDE_VENV/bin:$PATH"

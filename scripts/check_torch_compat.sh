#!/usr/bin/env bash
# Compiles (syntax and types, no linking) every translation unit that sees torch's headers against
# another torch release, e.g. the GPU machines' 2.11:  bash scripts/check_torch_compat.sh 2.11.0
# Downloads that release's wheel from PyPI once (about 0.5 GB) into build/torch-<version>/.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
version="${1:?usage: check_torch_compat.sh <torch version>}"
dir="build/torch-$version"
if [ ! -d "$dir/torch/include" ]; then
  mkdir -p "$dir"
  "$PRIDE_PY" -m pip download -q --no-deps --only-binary=:all: -d "$dir" "torch==$version"
  unzip -q -o "$dir"/torch-"$version"-*.whl 'torch/include/*' -d "$dir"
fi
inc="$dir/torch/include"
py_inc="$("$PRIDE_PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")"
status=0
for f in torch_plugin/*.cc backend/store/c10d_store.cc bindings/module.cc; do
  if g++ -std=c++20 -fsyntax-only -DFMT_HEADER_ONLY=1 -D_GLIBCXX_USE_CXX11_ABI=1 -I. -isystem "$inc" \
       -isystem "$inc/torch/csrc/api/include" -isystem "$py_inc" "$f"; then
    echo "ok      $f"
  else
    echo "FAILED  $f"; status=1
  fi
done
exit $status

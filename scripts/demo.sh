#!/usr/bin/env bash
# The main job (README): set up, build, then run the Distributed Lion demo with its defaults
# (4 local workers on scikit-learn's digits: D-Lion MaVo, D-Lion Avg, D-Lion Cub, G-Lion, 1-bit Adam, 0/1 Adam, G-AdamW).
# Arguments are passed to the demo, e.g.  bash scripts/demo.sh --seeds 3 --out results
# (see  python examples/distributed_lion_demo.py --help). Results land in results/ by default.
set -euo pipefail
case "${1:-}" in
  -h|--help)
    sed -n 2,5p "$0"
    # The demo's own flags, without setting anything up when the venv is there already.
    venv_py="$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python"
    if [ -x "$venv_py" ]; then exec "$venv_py" "$(dirname "${BASH_SOURCE[0]}")/../examples/distributed_lion_demo.py" --help; fi
    echo "(the demo's flags are listed here once bash scripts/setup.sh has made the venv)"
    exit 0 ;;
esac
# Bad flags are reported before the set-up and the build, where a venv with pride can already parse them
# (argparse exits with 2 and says why; any other failure here, e.g. no pride built yet, is left to the build).
venv_py="$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python"
if [ -x "$venv_py" ]; then
  status=0
  complaint="$("$venv_py" "$(dirname "${BASH_SOURCE[0]}")/../examples/distributed_lion_demo.py" --check-args "$@" 2>&1)" ||
    status=$?
  if [ "$status" -eq 2 ]; then echo "$complaint" >&2; exit 2; fi
fi
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
bash scripts/build.sh
exec "$PRIDE_PY" examples/distributed_lion_demo.py "$@"

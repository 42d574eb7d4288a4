#!/usr/bin/env bash
# The main job (README): set up, build, then run the Distributed Lion demo with its defaults
# (4 local workers; D-Lion MaVo / D-Lion Avg / G-Lion / G-AdamW on scikit-learn's digits).
# Arguments are passed to the demo, e.g.  bash scripts/demo.sh --seeds 3 --out results
# (see  python examples/distributed_lion_demo.py --help). Results land in results/ by default.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$PRIDE_ROOT"
bash scripts/build.sh
exec "$PRIDE_PY" examples/distributed_lion_demo.py "$@"

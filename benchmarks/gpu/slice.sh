#!/usr/bin/env bash
# One slice of a suite on a machine lent for a few minutes (a GPU), end to end, from a bare machine:
#
#   benchmarks/gpu/slice.sh SUITE [DEVICE] [DEADLINE_SECONDS] [FINISHED_JSON]
#
#   SUITE          a suite name or .toml path
#   DEVICE         cuda (default) or cpu
#   DEADLINE       seconds the suite may run, the pack included (default 480; keep it under the command's time limit
#                  less a minute for the install)
#   FINISHED_JSON  the ledger of cells already merged (the finished.json `--unpack` writes into the results folder,
#                  carried to the machine): they are skipped. Absent on the first slice.
#
# It installs the package without its dependencies (built-in plugins are found through install metadata), installs
# kornia from the wheels in .whl/ when this Python lacks it (benchmarks/gpu/fetch_wheels.sh fetches them), reads the
# data from .data/ when that folder exists (benchmarks/gpu/copy_data.py fills it), runs the cells that fit before the
# deadline, and writes the slice's pack to $OUT/pack (a temporary folder when OUT is unset). Merge the pack where the
# results are kept: reconbench bench SUITE --unpack PACK --out RESULTS. See benchmarks/gpu/README.md.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 SUITE [DEVICE] [DEADLINE_SECONDS] [FINISHED_JSON]" >&2
  exit 2
fi
suite="$1"; device="${2:-cuda}"; deadline="${3:-480}"; ledger="${4:-}"
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"

# the package, installed from this tree (its entry points register the built-in plugins)
installed_here() {
  "$py" - <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from pathlib import Path
try:
    distribution("reconbench")
    import reconbench_plugins
except (PackageNotFoundError, ImportError):
    sys.exit(1)
here = Path.cwd().resolve()
ok = Path(reconbench_plugins.__file__).resolve().is_relative_to(here) and len(entry_points(group="reconbench")) > 0
sys.exit(0 if ok else 1)
PY
}
if ! installed_here; then
  # no build isolation: the machine reaches no registry, so the build uses the setuptools already installed
  "$py" -m pip install -q --no-deps --no-build-isolation -e .
fi

# kornia (the papers' SSIM), from carried wheels when missing
if ! "$py" -c "import kornia" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "error: kornia is not installed here and .whl/ holds no wheel; run benchmarks/gpu/fetch_wheels.sh on a machine with a registry and carry .whl" >&2
    exit 2
  fi
  site="${TMPDIR:-/tmp}/reconbench-slice-site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

# the data: a carried copy in .data/ wins over RECONBENCH_DATA (../shared does not travel)
if [ -d .data ]; then
  export RECONBENCH_DATA="$PWD/.data"
fi
export RECONBENCH_DOWNLOAD=0
export RECONBENCH_CACHE="${RECONBENCH_CACHE:-${TMPDIR:-/tmp}/reconbench-slice-cache}"
# a device machine gets the files without git metadata: the caller names the commit
if [ -z "${RECONBENCH_SLICE_COMMIT:-}" ]; then
  RECONBENCH_SLICE_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"
  export RECONBENCH_SLICE_COMMIT
fi
finished=()
if [ -n "$ledger" ]; then
  if [ -f "$ledger" ]; then
    finished=(--finished "$ledger")
  else
    echo "note: no ledger at $ledger: no cell counts as finished (the first slice of a suite)"
  fi
fi
out="${OUT:-$(mktemp -d)}"
results="$(mktemp -d)"   # this machine's own results folder: what it runs leaves in the pack
echo "slice: suite $suite, device $device, deadline ${deadline}s, pack $out/pack"
"$py" -m reconbench bench "$suite" --device "$device" --deadline "$deadline" --pack "$out/pack" --out "$results" \
  ${finished[@]+"${finished[@]}"} -q

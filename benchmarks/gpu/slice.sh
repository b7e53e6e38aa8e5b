#!/usr/bin/env bash
# One slice of a suite on a machine lent for a few minutes (a GPU), end to end, from a bare machine:
#
#   benchmarks/gpu/slice.sh SUITE [DEVICE] [DEADLINE_SECONDS] [FINISHED_JSON] [BENCH OPTIONS...]
#
#   SUITE          a suite name or .toml path
#   DEVICE         cuda (default) or cpu
#   DEADLINE       seconds the suite may run, the pack included (default 480; keep it under the command's time limit
#                  less a minute for the install)
#   FINISHED_JSON  the ledger of cells already merged (the finished.json `--unpack` writes into the results folder,
#                  carried to the machine): they are skipped. Absent on the first slice.
#   ...            any further arguments go to `reconbench bench` (e.g. --costs FILE); pass "" for FINISHED_JSON
#                  to give them without a ledger
#
# PROBE_BUDGET=S (environment): first run benchmarks/gpu/probe.py for about S seconds of cases into $OUT/probe.json,
# then plan the slice from its numbers (--costs $OUT/probe.json) with the deadline less the probe's time: the first
# occasion on a new kind of GPU, in one command (benchmarks/gpu/README.md). PROBE_ARGS: further probe options.
#
# It installs the carried wheels in .whl/ (RECONBENCH_WHEELS: another folder) when this Python lacks any of them or
# holds one older (benchmarks/gpu/fetch_wheels.sh fetches them: the runtime dependencies the device image lacks),
# checks that reconbench's records (cattrs) import before anything runs, installs the package without its
# dependencies (built-in plugins are found through install metadata), reads the data from .data/ when that folder
# exists (benchmarks/gpu/copy_data.py fills it), runs the cells that fit before the deadline, and writes the slice's
# pack to $OUT/pack (a temporary folder when OUT is unset). Merge the pack where the results are kept:
# reconbench bench SUITE --unpack PACK --out RESULTS. See benchmarks/gpu/README.md.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 SUITE [DEVICE] [DEADLINE_SECONDS] [FINISHED_JSON] [BENCH OPTIONS...]" >&2
  exit 2
fi
suite="$1"; device="${2:-cuda}"; deadline="${3:-480}"; ledger="${4:-}"
shift $(( $# < 4 ? $# : 4 ))
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1   # a command killed at its time limit keeps every line it printed
site="${TMPDIR:-/tmp}/reconbench-slice-site"
mkdir -p "$site"

# the carried wheels (runtime dependencies the device image lacks), installed when any of them is missing or older
wheels="${RECONBENCH_WHEELS:-.whl}"
if ls "$wheels"/*.whl >/dev/null 2>&1; then
  needed="$("$py" benchmarks/gpu/carried_wheels.py "$wheels")"
  if [ -n "$needed" ]; then
    echo "installing the carried wheels of $wheels (needed here: $(echo "$needed" | paste -sd ';' -))"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site/wheels" \
      "$wheels"/*.whl
    export PYTHONPATH="$site/wheels${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
# what the slice imports, before anything runs (the probe included): a missing dependency is one line, not a traceback
"$py" - "$wheels" <<'PY' || exit 2
import importlib
import sys

# cattrs (the records' strict reading): the one runtime dependency a slice imports that the image lacks (kornia, which
# the image lacks too, is never imported: reconbench computes the papers' SSIM itself)
for module in ("reconbench.records",):
    try:
        importlib.import_module(module)
    except ImportError as exc:   # a module missing, or one too old to hold what is imported from it
        why = (f"no module {exc.name.split('.')[0]!r}, a runtime dependency this machine lacks"
               if isinstance(exc, ModuleNotFoundError) and exc.name else f"{exc} (a dependency too old here?)")
        sys.exit(f"error: {module} cannot be imported here: {why}; run benchmarks/gpu/fetch_wheels.sh on a machine "
                 f"with a registry (it fills {sys.argv[1]}/) and carry {sys.argv[1]}")
PY

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
  if ! "$py" -m pip install -q --no-deps --no-build-isolation -e .; then
    # the installed setuptools cannot build it (too old, or no bdist_wheel): write by hand the only metadata the
    # plugin host reads (the distribution's name, version and entry points, from pyproject.toml), and put the
    # tree on the path
    echo "note: pip could not install the package here; registering it from pyproject.toml instead" >&2
    "$py" - "$site" <<'PY'
import sys
import tomllib
from pathlib import Path

site, root = Path(sys.argv[1]), Path.cwd()
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
info = site / f"reconbench-{project['version']}.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: reconbench\nVersion: {project['version']}\n")
groups = {"reconbench": project["entry-points"]["reconbench"], "console_scripts": project["scripts"]}
(info / "entry_points.txt").write_text("".join(
    f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()))
link = site / "reconbench_plugins"
if not link.exists():
    link.symlink_to(root / "plugins", target_is_directory=True)
PY
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    installed_here || { echo "error: the package could not be registered here" >&2; exit 2; }
  fi
fi

# the data: a carried copy in .data/ wins over RECONBENCH_DATA (../shared does not travel)
if [ -d .data ]; then
  export RECONBENCH_DATA="$PWD/.data"
fi
export RECONBENCH_DOWNLOAD=0
export RECONBENCH_CACHE="${RECONBENCH_CACHE:-${TMPDIR:-/tmp}/reconbench-slice-cache}"
# the commit the code runs at: the caller names it. A device machine's copy of the files may carry no git metadata,
# or git metadata of an older commit (the one its session began at), so RECONBENCH_SLICE_COMMIT wins over git in the
# pack and in every cell record; unset, the records name what git says here (-dirty where the code differs from it)
if [ -z "${RECONBENCH_SLICE_COMMIT:-}" ]; then
  here="$(git rev-parse HEAD 2>/dev/null || true)"
  if [ -z "$here" ]; then
    echo "note: no git metadata here and RECONBENCH_SLICE_COMMIT is unset: the pack will not name its commit" >&2
  else
    echo "note: RECONBENCH_SLICE_COMMIT is unset: the pack names the commit git reports here ($here), which on a" \
      "device machine can be an older commit than the code's; name it: RECONBENCH_SLICE_COMMIT=<sha> $0 ..." >&2
  fi
else
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
costs=()
if [ -n "${PROBE_BUDGET:-}" ] && [ "${PROBE_BUDGET}" != 0 ]; then
  probe_start=$(date +%s)
  mkdir -p "$out"
  # the probe writes its JSON after every case; the timeout keeps one slow case from eating the slice
  # shellcheck disable=SC2086  # PROBE_ARGS: further probe options, word-split (e.g. "--tiny --device cpu")
  PYTHONUNBUFFERED=1 timeout $(( PROBE_BUDGET + 90 )) "$py" benchmarks/gpu/probe.py "$out/probe.json" \
    --budget "$PROBE_BUDGET" ${PROBE_ARGS:-} || echo "note: the probe stopped early; the slice plans from what it measured" >&2
  if [ -s "$out/probe.json" ]; then
    costs=(--costs "$out/probe.json")
  fi
  costs+=(--pack-files 7)   # probe.json comes back beside the pack: 8 files in all
  deadline=$(( ${deadline%.*} - ($(date +%s) - probe_start) ))
  if [ "$deadline" -lt 60 ]; then
    echo "error: the probe left ${deadline}s for the slice; give a longer DEADLINE or a smaller PROBE_BUDGET" >&2
    exit 2
  fi
fi
results="$(mktemp -d)"   # this machine's own results folder: what it runs leaves in the pack
echo "slice: suite $suite, device $device, deadline ${deadline}s, pack $out/pack"
"$py" -m reconbench bench "$suite" --device "$device" --deadline "$deadline" --pack "$out/pack" --out "$results" \
  ${finished[@]+"${finished[@]}"} ${costs[@]+"${costs[@]}"} -q "$@"

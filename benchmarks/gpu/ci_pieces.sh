#!/usr/bin/env bash
# Training in pieces across two slices on the CPU, end to end (CI): slice 1's short deadline stops the training of
# tiny-pieces.toml's two targets (one stack) and packs their states; the merge keeps them beside the ledger; slice 2,
# on a fresh cache with the ledger (as a bare machine gets it), continues them and runs every cell (on a loaded
# machine a third or fourth slice may be needed).
#
#   benchmarks/gpu/ci_pieces.sh WORKDIR
set -euo pipefail
work="${1:?usage: $0 WORKDIR}"
cd "$(dirname "$0")/../.."
suite=benchmarks/gpu/tiny-pieces.toml
merged="$work/merged"
RECONBENCH_CACHE="$work/cache1" OUT="$work/slice1" benchmarks/gpu/slice.sh "$suite" cpu 20
reconbench bench "$suite" --unpack "$work/slice1/pack" --out "$merged" | tee "$work/unpack1.txt"
if ! grep -q "training state of target" "$work/unpack1.txt"; then
  echo "error: slice 1 packed no training state (its deadline did not stop the training): nothing travelled" >&2
  exit 1
fi
# slice 2 finishes on an idle machine; on a loaded one its deadline may stop the training again, and further slices
# (each on a fresh cache, from the merged ledger) continue it: at most four in all
for k in 2 3 4; do
  RECONBENCH_CACHE="$work/cache$k" OUT="$work/slice$k" benchmarks/gpu/slice.sh "$suite" cpu 120 "$merged/finished.json"
  reconbench bench "$suite" --unpack "$work/slice$k/pack" --out "$merged" | tee "$work/unpack$k.txt"
  if grep -q "every cell of suite gpu-tiny-pieces" "$work/unpack$k.txt"; then
    break
  fi
  if [ "$k" = 4 ]; then
    echo "error: four slices did not finish the suite's two cells" >&2
    exit 1
  fi
done
python3 - "$merged" <<'PY'
import json
import sys
from pathlib import Path

cells = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[1], "cells").glob("*.json"))]
pieces = [c["target"]["train_metrics"]["training_pieces"] for c in cells]
assert len(cells) == 2 and all(c["status"] == "ok" for c in cells), [c["status"] for c in cells]
assert all(p >= 2 for p in pieces), f"each target should have trained in two pieces or more, got {pieces}"
print(f"training in pieces: {len(cells)} cells, their targets trained in {pieces} pieces")
PY

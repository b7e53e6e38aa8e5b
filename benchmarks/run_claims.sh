#!/usr/bin/env bash
# Measure the papers' claims and publish them: runs the three claims suites (cost notes at the end of each suite
# file), renders leaderboards/claims-a/, claims-b/ and claims-c/, and regenerates docs/claims.md from their
# cells. Commit the four afterwards. Extra options go to `reconbench bench` (e.g. --resume after an interruption).
#   RECONBENCH_DATA=../shared/data benchmarks/run_claims.sh [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
export RECONBENCH_DATA="${RECONBENCH_DATA:-../shared/data}"
for part in claims-a claims-b claims-c; do
  reconbench bench "$part" --out "runs/bench/$part" "$@"
  reconbench leaderboard "$part" --results "runs/bench/$part" --publish
done
python -m reconbench.claims

#!/usr/bin/env bash
# Download, here, the wheels of the packages the device machine's Python lacks (kornia and its Rust helper) into the
# ignored folder .whl/, for benchmarks/gpu/slice.sh to install there (the device machine reaches no registry).
# The device's python3 is CPython 3.12 on x86-64 Linux; the versions are pinned to the ones the CPU machine uses (one of each in .whl/).
set -euo pipefail
cd "$(dirname "$0")/../.."
KORNIA="${KORNIA:-kornia==0.9.0}"
KORNIA_RS="${KORNIA_RS:-kornia_rs==0.2.0}"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d .whl "$KORNIA" "$KORNIA_RS"
ls -l .whl

#!/usr/bin/env bash
# Download, here, the wheels of what reconbench needs and the device machine's image lacks, into the ignored folder
# .whl/ (or DEST), for benchmarks/gpu/slice.sh to install there (the device machine reaches no registry):
#
#   benchmarks/gpu/fetch_wheels.sh [DEST]
#
# The list below holds every runtime dependency of pyproject.toml that benchmarks/gpu/device_packages.txt (the image's
# packages) does not name, and their own runtime requirements where the image lacks them or may hold them too old
# (its versions are unknown, so a minimum a carried package states is carried too).
# tests/unit/benchmarks/test_device_packages.py reads this list and fails when pyproject.toml gains a dependency that
# neither the image nor the list holds. The versions are pinned to the CPU machine's (`pip show NAME`); the device's
# python3 is CPython 3.12 on x86-64 Linux.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${1:-.whl}"
wheels=(
  kornia==0.9.0              # pyproject: the papers' window-3 SSIM; not in the image
  kornia_rs==0.2.0           # kornia's requirement kornia-rs>=0.2.0; not in the image
  cattrs==26.2.1             # pyproject: strict reading of the records (reconbench/records/); not in the image
  attrs==26.1.0              # cattrs's requirement attrs>=25.4.0; the image's attrs may be older
  typing_extensions==4.16.0  # cattrs's requirement typing-extensions>=4.14.0; the image's may be older
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$dest" "${wheels[@]}"
ls -l "$dest"

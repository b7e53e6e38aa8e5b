#!/usr/bin/env bash
# Download, here, the wheels of what reconbench needs and the device machine's image lacks, into the ignored folder
# .whl/ (or DEST), for benchmarks/gpu/slice.sh to install there (the device machine reaches no registry):
#
#   benchmarks/gpu/fetch_wheels.sh [DEST]
#
# The list below holds every runtime dependency of pyproject.toml that benchmarks/gpu/device_packages.txt (the image's
# packages) does not name and a slice imports, and their own runtime requirements where the image lacks them or may
# hold them too old (its versions are unknown, so a minimum a carried package states is carried too). The
# dependencies a slice never imports are not carried; each is named below, with why, one a line:
#
#   not carried: kornia: reconbench computes the papers' SSIM with torch (reconbench/evaluation/ssim.py) and reads
#     kornia's version only through its metadata (None where absent); only the CPU tests that check that SSIM
#     against kornia's import it (tests/unit/evaluation/test_evaluation_ssim.py, tests/_helpers/independent_protocol.py)
#
# tests/unit/benchmarks/test_device_packages.py reads both lists and fails when pyproject.toml gains a dependency that
# neither the image, the carried list nor the not-carried one (with its reason) holds, and runs a slice with kornia
# unimportable. The versions are pinned to the CPU machine's (`pip show NAME`); the device's
# python3 is CPython 3.12 on x86-64 Linux.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${1:-.whl}"
wheels=(
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

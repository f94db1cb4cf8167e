#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with the wheels gpuopt needs that a GPU machine's image lacks:
# msgspec, isal and libcst (and, in .whl/frameworks, transformers and accelerate for
# check_frameworks.py), for CPython 3.10, 3.11 and 3.12 on x86_64 Linux. Run it here, where
# a package index is reachable; the folder travels with the source tree, and
# benchmarks/gpu/gpu_check.py installs from it (pip --no-index) when they are not importable.
#
#   bash benchmarks/gpu/prepare_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-python3}"
mkdir -p .whl
for v in 3.10 3.11 3.12; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: \
    --python-version "$v" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    -d .whl msgspec isal libcst
done
ls -l .whl
du -sh .whl

# check_frameworks.py's HF Trainer: transformers, accelerate and what transformers needs, into
# .whl/frameworks (torch and numpy are the machine's: accelerate's wheel alone, numpy removed);
# transformers 5.23.0 needs Python 3.11 or newer
mkdir -p .whl/frameworks
for v in 3.11 3.12; do
  for spec in "transformers==5.23.0" "accelerate==1.15.0 --no-deps"; do
    # shellcheck disable=SC2086
    "$PY" -m pip download -q --only-binary=:all: \
      --python-version "$v" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 \
      -d .whl/frameworks $spec
  done
done
rm -f .whl/frameworks/numpy-*.whl
du -sh .whl/frameworks

#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test with CTest.
# Tests that need a GPU carry the label `gpu` and skip themselves when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
../.venv/bin/ctest --output-on-failure -j2 "$@"

#!/usr/bin/env bash
# Installs what is missing (scripts/install-deps.sh), configures and builds normgen into build/.
# Halide's CMake package needs CMake >= 3.28, so the venv's pinned CMake drives the build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Use the venv's Halide-compatible CMake, and ccache when present (incremental rebuilds on 2 cores).
.venv/bin/cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "build: compiling (2 jobs)..."
.venv/bin/cmake --build build -j2

#!/usr/bin/env bash
# Installs what is missing (scripts/install-deps.sh), configures and builds normgen into build/.
# Halide's CMake package needs CMake >= 3.28, so the venv's pinned CMake drives the build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Use the venv's Halide-compatible CMake, and ccache when present (incremental rebuilds on 2 cores).
.venv/bin/cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "build: compiling (2 jobs)..."
# Halide notes that bf16 <-> f32 conversions are done with integer shifts on CPUs without AVX512-BF16
# ("(b)float16 type operation is emulated"): expected, and filtered so real messages stay visible.
.venv/bin/cmake --build build -j2 2>&1 | { grep -v "type operation is emulated" || true; }

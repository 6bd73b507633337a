#!/usr/bin/env bash
# Installs what normgen needs, idempotently and pinned:
#   - Debian packages (MLIR/LLVM 22, Catch2 v2, Google Benchmark, oneDNN, libtorch and python3-torch
#     with pytest (the PyTorch operators, python/), PoCL, ccache, numpy, Clang with libFuzzer for
#     scripts/fuzz.sh)
#   - a project-local venv (.venv/) holding Halide 21 from PyPI (C++ library, headers, CMake package)
#     and a newer CMake if the system's is older than Halide's package needs.
# Safe to run repeatedly: it does nothing when everything is already present.
set -euo pipefail
cd "$(dirname "$0")/.."

HALIDE_VERSION=21.0.0
CMAKE_VERSION=3.31.6
DEBIAN_PACKAGES=(
  build-essential ninja-build ccache python3-venv python3-numpy
  llvm-22-dev libmlir-22-dev mlir-22-tools
  catch2 libbenchmark-dev nlohmann-json3-dev
  libdnnl-dev libtorch-dev python3-torch python3-pytest
  ocl-icd-opencl-dev pocl-opencl-icd
  python3-matplotlib
  clang libclang-rt-14-dev
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  echo "install-deps: creating .venv"
  python3 -m venv .venv
fi
want_pip=()
.venv/bin/python -c "import halide, importlib.metadata as m; assert m.version('halide') == '$HALIDE_VERSION'" 2>/dev/null \
  || want_pip+=("halide==$HALIDE_VERSION")
.venv/bin/python -c "import importlib.metadata as m; assert m.version('cmake') == '$CMAKE_VERSION'" 2>/dev/null \
  || want_pip+=("cmake==$CMAKE_VERSION")
if ((${#want_pip[@]})); then
  echo "install-deps: pip installing into .venv: ${want_pip[*]}"
  .venv/bin/python -m pip install -q --disable-pip-version-check "${want_pip[@]}"
fi
echo "install-deps: ok"

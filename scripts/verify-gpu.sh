#!/usr/bin/env bash
# The GPU kernels' whole sweep without a GPU: scripts/verify-gpu.sh [normgen verify options]
#   Halide's GPU schedules on OpenCL through PoCL (--target host-opencl) and MLIR's CUDA kernels
#   emulated on the CPU (--target cuda-emulated), every catalog layer, forward and backward, every
#   storage type, every shape of the sweep (CI runs the quick sweep: CTest's "verify halide-gpu
#   opencl ..." and "verify mlir cuda-emulated ..."). Checks correctness, not GPU speed. Prints the
#   failing rows and a count per run; exit 1 on any failure. Long: the emulated backward of
#   GroupNorm NHWC alone takes about 20 minutes on 2 cores; give --dtype f32 or --quick to shorten.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/bin/normgen ]] || scripts/build.sh
status=0
for grad in "" --grad; do
  echo "== Halide on OpenCL (PoCL) ${grad:-forward}"
  build/bin/normgen verify dsl/catalog/*.norm $grad --target host-opencl --dtype f32,bf16,f16 --failures "$@" || status=1
  echo "== mlir-cuda emulated ${grad:-forward}"
  build/bin/normgen verify dsl/catalog/*.norm $grad --backend mlir --target cuda-emulated --dtype f32,bf16,f16 --failures "$@" || status=1
done
exit $status

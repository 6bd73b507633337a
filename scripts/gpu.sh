#!/usr/bin/env bash
# The GPU check, one prepared script for a machine with an NVIDIA GPU (sm_90) and the CUDA driver:
# build (generating the mlir-cuda cubins with ptxas), then put every mlir-cuda kernel through the
# float64 verifier on its shape sweep and time LayerNorm/RMSNorm (4096x4096, 32768x8192) and every
# catalog layer at one large shape. Writes build/gpu_verify.txt, build/gpu_bench.txt and prints
# both; exits 77 (skip) when there is no GPU. Set NORMGEN_SKIP_BUILD=1 to reuse a build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${NORMGEN_SKIP_BUILD:-}" ] || scripts/build.sh
rc=0
build/bin/normgen-cuda verify ${NORMGEN_GPU_QUICK:+--quick} | tee build/gpu_verify.txt || rc=$?
[ "$rc" = 77 ] && exit 77
build/bin/normgen-cuda bench | tee build/gpu_bench.txt
exit $rc

#!/usr/bin/env bash
# The backward kernels, the whole sweep: scripts/verify-grad.sh [normgen verify options]
#   `normgen verify --grad` on every catalog layer through both CPU backends, all storage types, on
#   every shape of the forward's sweep (CI runs the quick sweep: CTest's "verify halide/mlir grad
#   (quick)"). The inputs are the forward's (the large mean included) with the saved statistics the
#   float64 forward computes from them and upstream gradients N(0, 1). Prints the failing rows and a
#   count per backend; exit 1 on any failure. About 15 minutes on 2 cores (GroupNorm's largest
#   shapes dominate).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/bin/normgen ]] || scripts/build.sh
status=0
for backend in halide mlir; do
  echo "== verify --grad, $backend backend (every shape of the forward's sweep)"
  build/bin/normgen verify dsl/catalog/*.norm --grad --backend "$backend" --dtype f32,bf16,f16 --failures "$@" || status=1
done
exit $status

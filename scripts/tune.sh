#!/usr/bin/env bash
# Retunes the shipped tuning database (generated/tuning/) for this machine: every catalog layer of
# the benchmark grid (bench/shape_grids.h), forward in f32 and bf16 and backward in f32, each shape
# class within its budget, both backends, Halide's autoschedulers timed beside the choice (`normgen
# tune --help`). Progress on stderr, one line per class; Ctrl-C keeps what was measured. Then the
# build picks the new choices up (each layer's kernels regenerate from its best/<layer>.json).
#
#   scripts/tune.sh [LAYER...] [-- TUNE OPTIONS]   e.g. scripts/tune.sh rms_norm -- --budget 30
#
# NORMGEN_TUNE_BUDGET (seconds per class, default 60). NORMGEN_TUNE_MINUTES=M instead: the whole
# catalog's grid classes in M minutes (`normgen tune --catalog --time`: two thirds forward f32 and
# bf16, a third backward f32; each class its share, DRAM-sized classes first when short; ends with
# what it found), for a machine the database has no record of. Nothing else should run meanwhile: the
# choices are bandwidth measurements. The shipped database: 81 shape classes forward and 28
# backward, about an hour and half an hour on 2 cores (AVX2); on an AMD EPYC with AVX-512, forward
# f32 (66 classes at NORMGEN_TUNE_BUDGET=40, 34 minutes) and bf16 (17 classes at 60, 13-66 s each,
# 12 minutes, with warm starts from the previous choices); on an Intel Xeon with AVX-512 and
# 480 MiB L3, forward f32 (77 classes, budget 30, a few at 60-150) and bf16 (18 classes, budget 100, 35 minutes:
# its DRAM-sized cases are 2 GiB; on 2026-12-07 its GroupNorm, InstanceNorm and DyT f32 classes again at
# 40, the 2 GiB ones at 150); the backward f32 classes are tuned on the AMD EPYC with AVX-512 (28
# classes at 40, 18 minutes), and on that Xeon only GroupNorm NCHW's and InstanceNorm's (4 at 40).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
layers=()
while [[ $# -gt 0 && "$1" != "--" ]]; do layers+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
if ((${#layers[@]} == 0)); then
  layers=(layer_norm rms_norm layer_norm_weight_only dyt fused_add_rms_norm rms_norm_llama rms_norm_gemma poly_norm
          batch_norm_train batch_norm_eval group_norm_nchw group_norm_nhwc instance_norm)
fi
grad_layers=(layer_norm rms_norm layer_norm_weight_only layer_norm_no_affine dyt fused_add_rms_norm
             batch_norm_train group_norm_nchw group_norm_nhwc instance_norm)
budget=${NORMGEN_TUNE_BUDGET:-60}
mkdir -p build/tune-cache
if [[ -n "${NORMGEN_TUNE_MINUTES:-}" ]]; then
  minutes=$NORMGEN_TUNE_MINUTES
  echo "tune.sh: the catalog's grid in $minutes minutes on this machine"
  build/bin/normgen tune --catalog --dtype f32,bf16 --time "$(awk "BEGIN{print $minutes*2/3}")" \
      --db generated/tuning --cache build/tune-cache "$@"
  build/bin/normgen tune --catalog --grad --dtype f32 --time "$(awk "BEGIN{print $minutes/3}")" \
      --db generated/tuning --cache build/tune-cache "$@"
  echo "tune.sh: done; rebuild (scripts/build.sh) to generate the chosen kernels"
  exit 0
fi
files=()
for l in "${layers[@]}"; do files+=("dsl/catalog/$l.norm"); done
echo "tune.sh: forward, f32 and bf16: ${layers[*]}"
build/bin/normgen tune "${files[@]}" --dtype f32,bf16 --shapes grid --budget "$budget" \
    --db generated/tuning --cache build/tune-cache "$@"
gfiles=()
for l in "${grad_layers[@]}"; do
  for want in "${layers[@]}"; do [[ "$l" == "$want" ]] && gfiles+=("dsl/catalog/$l.norm"); done
done
if ((${#gfiles[@]})); then
  echo "tune.sh: backward, f32: ${gfiles[*]##*/}"
  build/bin/normgen tune "${gfiles[@]}" --grad --dtype f32 --shapes grid --budget "$budget" \
      --db generated/tuning --cache build/tune-cache "$@"
fi
echo "tune.sh: done; rebuild (scripts/build.sh) to generate the chosen kernels"

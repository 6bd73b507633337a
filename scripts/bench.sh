#!/usr/bin/env bash
# The full benchmark grid (bench/shape_grids.h model_grid(): LLaMA, BERT/ViT, wide rows, ResNet-50,
# Stable-Diffusion UNet, ViT DyT, a DRAM-sized case per layer sized from this machine's L3), every
# kernel (tuned, default, MLIR, Halide's three autoschedulers) beside oneDNN, PyTorch, the scalar
# baseline and the layer's limit measured interleaved in the same run; then the report.
#   build/autoschedule/     the autoschedulers' kernels per grid shape (`normgen autoschedule`;
#                           kept between runs, only what is missing is compiled)
#   build/bench.json        Google Benchmark JSON
#   build/bench.txt         the console log ([dispatch]: which kernel a shape got and why; [check]:
#                           what was verified before timing; [limit]: the layer's limit there)
#   build/report/report.md  tables, summary, losses; build/report/LAYER.png plots
# Extra arguments go to the benchmark (e.g. --benchmark_filter=layer_norm). NORMGEN_BENCH_NO_AUTO=1
# skips the autoschedulers. NORMGEN_BENCH_RUNS=N runs the grid N times (build/bench.json,
# build/bench.2.json, ...; logs alike) and reports them together: each case whole from the run
# whose tuned row is its median (`normgen report` with several files; a noisy machine's numbers).
# Nothing else should run meanwhile (the numbers are bandwidths).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${NORMGEN_BENCH_RUNS:-1}
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench.sh: NORMGEN_BENCH_RUNS must be a positive whole number (got '$runs')" >&2
  exit 1
fi
scripts/build.sh
extra=()
if [[ -z "${NORMGEN_BENCH_NO_AUTO:-}" ]]; then
  layers=(layer_norm rms_norm layer_norm_weight_only dyt fused_add_rms_norm rms_norm_llama rms_norm_gemma poly_norm
          batch_norm_train batch_norm_eval group_norm_nchw group_norm_nhwc instance_norm)
  files=()
  for l in "${layers[@]}"; do files+=("dsl/catalog/$l.norm"); done
  echo "bench.sh: Halide's autoschedulers on the grid's shapes (build/autoschedule/)"
  build/bin/normgen autoschedule "${files[@]}" --dtype f32,bf16 --shapes grid -o build/autoschedule
  extra=(--normgen_extra=build/autoschedule)
fi
outs=()
for ((i = 1; i <= runs; ++i)); do
  suffix=""
  [[ $i -gt 1 ]] && suffix=".$i"
  [[ $runs -gt 1 ]] && echo "bench.sh: run $i of $runs (build/bench$suffix.json)"
  build/bin/normgen_bench "${extra[@]}" --benchmark_out="build/bench$suffix.json" --benchmark_out_format=json "$@" 2>&1 |
    tee "build/bench$suffix.txt"
  outs+=("build/bench$suffix.json")
done
build/bin/normgen report "${outs[@]}" -o build/report

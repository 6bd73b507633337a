#!/usr/bin/env bash
# The full benchmark grid (bench/shape_grids.h model_grid(): LLaMA, BERT/ViT, wide rows, ResNet-50,
# Stable-Diffusion UNet, ViT DyT, a DRAM-sized case per layer), every kernel beside oneDNN, PyTorch,
# the scalar baseline and the copy/read rooflines measured in the same run; then the report.
#   build/bench.json        Google Benchmark JSON
#   build/bench.txt         the console log (the [check] lines say what was verified before timing)
#   build/report/report.md  tables, summary, losses; build/report/LAYER.png plots
# Extra arguments go to the benchmark (e.g. --benchmark_filter=layer_norm). About 6 minutes on
# this machine kind; nothing else should run meanwhile (the numbers are bandwidths).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/normgen_bench --benchmark_out=build/bench.json --benchmark_out_format=json "$@" 2>&1 | tee build/bench.txt
build/bin/normgen report build/bench.json -o build/report

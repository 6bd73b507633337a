#!/usr/bin/env bash
# The full benchmark grid: every case in bench/normgen_bench.cpp beside the copy roofline measured
# in the same run. Results go to build/bench.json (Google Benchmark JSON) as well as the terminal.
# Extra arguments are passed to the benchmark (e.g. --benchmark_filter=layer_norm).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/normgen_bench --benchmark_out=build/bench.json --benchmark_out_format=json "$@"

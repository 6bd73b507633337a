#!/usr/bin/env bash
# The README's run command: install what is missing, build (which generates the Halide kernels of
# every catalog layer x {f32, bf16, f16} x {host, x86-64-avx2}, and the MLIR kernels: mlir-cpu for
# this host and mlir-cuda sm_90 cubins, into build/generated/), then run the main job on the
# built-in catalog (dsl/catalog/*.norm):
#   1. check every declaration;
#   2. verify every layer's kernels against the float64 reference, Halide (both targets) and MLIR
#      (this host) (a spread of the shape sweep; the tests run all of it);
#   3. the table of what each layer is;
#   4. a short benchmark (bench/shape_grids.h short_grid() and short_backward_grid(), two backward
#      cases) of the kernels — the tuned one a program gets (generated/tuning/), the default
#      schedule, the MLIR kernel and Halide's three autoschedulers (compiled first into
#      build/autoschedule-short/, kept between runs) — beside oneDNN, PyTorch, a scalar baseline
#      and the layer's limit, and its report table (build/report-short/report.md; the full grid:
#      scripts/bench.sh). About six minutes the first time, four after.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
n=$(ls dsl/catalog/*.norm | wc -l)
echo
echo "== 1. normgen check dsl/catalog/*.norm"
build/bin/normgen check dsl/catalog/*.norm && echo "all $n declarations are valid"
echo
echo "== 2. normgen verify dsl/catalog/*.norm --dtype all --target host,x86-64-avx2 --quick"
verify_rc=0
build/bin/normgen verify dsl/catalog/*.norm --dtype all --target host,x86-64-avx2 --quick > build/verify.txt \
  2> >(grep -v "type operation is emulated" >&2) || verify_rc=$?
grep -E "FAIL|passed" build/verify.txt || true
echo "(the whole table: build/verify.txt)"
echo "-- normgen verify dsl/catalog/*.norm --backend mlir --dtype all --quick"
build/bin/normgen verify dsl/catalog/*.norm --backend mlir --dtype all --quick > build/verify_mlir.txt 2>/dev/null || verify_rc=$?
grep -E "FAIL|passed" build/verify_mlir.txt || true
echo "(the whole table: build/verify_mlir.txt; the mlir-cuda kernels run on a GPU: scripts/gpu.sh)"
echo
echo "== 3. normgen catalog dsl/catalog/*.norm"
build/bin/normgen catalog dsl/catalog/*.norm
echo
echo "== 3b. normgen describe dsl/catalog/*.norm --invariants (the seeds' invariance table, for every layer)"
build/bin/normgen describe dsl/catalog/*.norm --invariants
echo
echo "== 4. short benchmark: build/bin/normgen_bench --normgen_grid=short, then normgen report (the full grid: scripts/bench.sh)"
echo "-- normgen autoschedule (Halide's autoschedulers on the short grid's shapes, build/autoschedule-short/)"
build/bin/normgen autoschedule dsl/catalog/{layer_norm,rms_norm,dyt,batch_norm_train,group_norm_nchw}.norm --shapes short \
    -o build/autoschedule-short > build/autoschedule_short.txt 2>&1 || { tail -5 build/autoschedule_short.txt; exit 1; }
build/bin/normgen autoschedule dsl/catalog/{layer_norm,rms_norm}.norm --grad --shapes short \
    -o build/autoschedule-short >> build/autoschedule_short.txt 2>&1 || { tail -5 build/autoschedule_short.txt; exit 1; }
build/bin/normgen_bench --normgen_grid=short --normgen_extra=build/autoschedule-short \
  --benchmark_out=build/bench_short.json --benchmark_out_format=json \
  ${NORMGEN_RUN_BENCH_FILTER:+--benchmark_filter="$NORMGEN_RUN_BENCH_FILTER"} > build/bench_short.txt 2>&1 || {
  tail -20 build/bench_short.txt; echo "normgen_bench failed (the whole log: build/bench_short.txt)"; exit 1; }
grep -E "FAILED" build/bench_short.txt || true
build/bin/normgen report build/bench_short.json -o build/report-short --print
echo "(the report with plots: build/report-short/report.md; the benchmark log: build/bench_short.txt)"
exit $verify_rc

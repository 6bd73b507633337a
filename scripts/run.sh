#!/usr/bin/env bash
# The README's run command: install what is missing, build (which generates the Halide kernels of
# every catalog layer x {f32, bf16, f16} x {host, x86-64-avx2} into build/generated/), then run the
# main job on the built-in catalog (dsl/catalog/*.norm):
#   1. check every declaration;
#   2. verify every layer's kernels against the float64 reference (a spread of the shape sweep;
#      the tests run all of it);
#   3. a short benchmark (about two minutes): GB/s and the fraction of the copy bandwidth;
#   4. the table of what each layer is.
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
echo
echo "== 3. short benchmark (build/bin/normgen_bench; the full grid: scripts/bench.sh)"
build/bin/normgen_bench --benchmark_filter="${NORMGEN_RUN_BENCH_FILTER:-^(layer_norm|rms_norm)/f32/4096x4096/|^dyt/|^group_norm_nhwc/|^batch_norm_train/}" \
  --benchmark_out=build/bench_short.json --benchmark_out_format=json 2>/dev/null | grep -vE "^\*\*\*|^-+$" || true
echo
echo "== 4. normgen catalog dsl/catalog/*.norm"
build/bin/normgen catalog dsl/catalog/*.norm
exit $verify_rc

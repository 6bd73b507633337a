#!/usr/bin/env bash
# The differential compiler fuzzer: scripts/fuzz-compiler.sh [N] [SEED]
#   Writes N random well-formed declarations (build/bin/normgen-random-norms: the C++ builder, random
#   layouts, reduction axis sets, nested stages, eps forms, affine terms, functions, rounding points,
#   split views) to build/fuzz-compiler/SEED/ and runs `normgen verify --quick` on each through the
#   Halide backend (host) and the MLIR CPU backend, f32 and bf16, against the float64 reference.
#   With NORMGEN_FUZZ_GRAD=1 also its backward (`normgen verify --grad`: the declaration `normgen grad`
#   derives, with inputs consistent with the forward) through both backends.
#   Prints the count and every failing declaration (kept with its verify table); exit 1 if any fails.
#   Defaults: N = 20, SEED = the time. Needs a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
seed=${2:-$(date +%s)}
[[ -x build/bin/normgen-random-norms ]] || scripts/build.sh >/dev/null
dir=build/fuzz-compiler/$seed
rm -rf "$dir" && mkdir -p "$dir"
build/bin/normgen-random-norms "$n" "$seed" "$dir"
failed=0 i=0
for f in "$dir"/*.norm; do
  i=$((i + 1))
  modes=(forward)
  [[ "${NORMGEN_FUZZ_GRAD:-0}" == 1 ]] && modes+=(grad)
  for mode in "${modes[@]}"; do
    for backend in halide mlir; do
      log=${f%.norm}.$backend.$mode.txt
      flag=()
      [[ $mode == grad ]] && flag=(--grad)
      if ! build/bin/normgen verify "$f" "${flag[@]}" --backend "$backend" --dtype f32,bf16 --target host --quick --failures > "$log" 2>&1; then
        failed=$((failed + 1))
        echo "FAIL $f ($backend, $mode): $(grep -m1 -E 'FAIL|error' "$log" | cut -c1-200)"
      fi
    done
  done
  printf '\rfuzz-compiler: %d/%d declarations, %d failures' "$i" "$n" "$failed" >&2
done
echo >&2
echo "fuzz-compiler: $n random declarations (seed $seed) through halide and mlir${NORMGEN_FUZZ_GRAD:+ (and their backward)}: $failed failing runs (files: $dir)"
[[ $failed -eq 0 ]]

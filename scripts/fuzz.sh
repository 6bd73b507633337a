#!/usr/bin/env bash
# Fuzzing: scripts/fuzz.sh [SECONDS] [TARGET...]
#   Builds the libFuzzer targets of tests/fuzz in build-fuzz/ (Clang, every library with
#   -fsanitize=fuzzer-no-link,address,undefined) and runs each for SECONDS (default 60) from its
#   committed corpus (tests/fuzz/corpus/<target>/, read only; new inputs go to build-fuzz/corpus/).
#   Targets: frontend npy manifest schedule (default: all). A crash, a sanitizer report, a leak or a
#   timeout stops the run; the input is saved in build-fuzz/findings/<target>/ and the script exits 1.
#   Then the differential compiler fuzzer, scripts/fuzz-compiler.sh: NORMGEN_FUZZ_DECLS random
#   declarations (default 20; 0 skips it) through the Halide and MLIR CPU backends.
# CTest's `fuzz smoke` (label fuzz) runs `scripts/fuzz.sh 5` with NORMGEN_FUZZ_DECLS=2, NORMGEN_FUZZ_SEED=1
# (a fixed seed: CI must not fail on a fresh draw; fresh draws are for the long runs).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then secs=$1; shift; fi
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(frontend npy manifest schedule)
[[ -x .venv/bin/cmake ]] || scripts/install-deps.sh
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang++ (Debian's clang; scripts/install-deps.sh installs it)" >&2; exit 1; }

if [[ ! -f build-fuzz/build.ninja ]]; then
  .venv/bin/cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DNORMGEN_FUZZ=ON -DNORMGEN_BUILD_TESTS=OFF -DNORMGEN_WITH_MLIR=OFF >/dev/null
fi
if ! ninja -C build-fuzz -j2 $(printf 'fuzz_%s ' "${targets[@]}") > build-fuzz/build.log 2>&1; then
  grep -E "error|FAILED" build-fuzz/build.log | head -20
  echo "fuzz.sh: the fuzz targets do not build (the whole log: build-fuzz/build.log)" >&2
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t
  mkdir -p "$work" "$findings"
  echo "== fuzz_$t: ${secs} s from tests/fuzz/corpus/$t ($(ls tests/fuzz/corpus/$t | wc -l) seeds)"
  if build-fuzz/bin/fuzz_$t "$work" "tests/fuzz/corpus/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 ${NORMGEN_FUZZ_SEED:+-seed=$NORMGEN_FUZZ_SEED} \
       > "build-fuzz/fuzz_$t.log" 2>&1; then
    execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "build-fuzz/fuzz_$t.log" | grep -o "[0-9]*$" || echo "?")
    echo "   no crash: $execs executions (log: build-fuzz/fuzz_$t.log)"
  else
    status=1
    echo "   FOUND A PROBLEM (input saved in $findings/):"
    grep -E "ERROR|SUMMARY|runtime error|deadly signal|Test unit written" "build-fuzz/fuzz_$t.log" | head -10
  fi
done
# The differential compiler fuzzer (needs the main build; NORMGEN_FUZZ_DECLS=0 skips it).
decls=${NORMGEN_FUZZ_DECLS:-20}
if [[ $decls -gt 0 ]]; then
  echo "== differential: $decls random declarations through both CPU backends (scripts/fuzz-compiler.sh)"
  scripts/fuzz-compiler.sh "$decls" ${NORMGEN_FUZZ_SEED:-} || status=1
fi
exit $status

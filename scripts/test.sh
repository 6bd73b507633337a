#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test with CTest.
# Tests that need a GPU carry the label `gpu` and skip themselves when no device is present.
#
#   scripts/test.sh [CTEST ARGS...]
#   scripts/test.sh --sanitize [address,undefined | thread] [CTEST ARGS...]
#       A separate build (build-asan-ubsan/ or build-tsan/, every target compiled with the
#       sanitizers) and its tests. address,undefined (the default) runs the suite without the
#       verifier's shape sweeps (label verify: each is the same harness over ~21 shapes; one quick
#       sweep per backend stays), the fuzz smoke (scripts/fuzz.sh has its own sanitizers) and the
#       user project (a separate CMake project, built without the flags);
#       LeakSanitizer is off (Halide's, LLVM's and MLIR's global caches stay allocated at exit).
#       thread builds and runs only the tests of concurrent callers and the registry. The generated kernels are
#       machine code from Halide and LLVM, not instrumented: the sanitizers watch normgen's C++.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" != "--sanitize" ]]; then
  scripts/build.sh
  cd build
  ../.venv/bin/ctest --output-on-failure -j2 "$@"
  exit
fi
shift
san=address,undefined
if [[ $# -gt 0 && "$1" != -* ]]; then san=$1; shift; fi
case "$san" in
  address,undefined|undefined,address|address) dir=build-asan-ubsan ;;
  thread) dir=build-tsan ;;
  *) echo "test.sh: --sanitize takes address,undefined or thread, not '$san'" >&2; exit 1 ;;
esac
scripts/install-deps.sh
.venv/bin/cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMGEN_SANITIZE="$san" >/dev/null
echo "test.sh: building $dir with -fsanitize=$san (2 jobs)..."
targets=()
# ThreadSanitizer watches the tests with threads (concurrent callers, the registry): only those are built.
[[ "$san" == thread ]] && targets=(--target runtime_concurrency_test runtime_registry_test runtime_registry_unit_test)
.venv/bin/cmake --build "$dir" -j2 "${targets[@]}" 2>&1 | { grep -E "error|warning: .*sanitiz" || true; }
cd "$dir"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_odr_violation=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
if [[ "$san" == thread ]]; then
  # Every test case of the three programs built (ctest would list the others as not built).
  status=0
  for t in runtime_concurrency_test runtime_registry_test runtime_registry_unit_test; do
    echo "== $t (ThreadSanitizer)"
    bin/$t "$@" || status=1
  done
  exit $status
else
  ../.venv/bin/ctest --output-on-failure -j2 -E "^verify (halide|mlir) [a-z]|fuzz smoke|user project" "$@"
  ../.venv/bin/ctest --output-on-failure -R "^verify (halide|mlir) layer_norm$" "$@"
fi

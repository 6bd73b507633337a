#!/usr/bin/env bash
# Past 2^31 elements, for real: scripts/big.sh [normgen-big-check options]
#   Builds normgen-big-check and runs a bf16 RMSNorm kernel on 2^19 + 1 rows of 4096 (2^31 + 4096
#   elements: about 4 GiB in, 4 GiB out; needs about 9 GiB of memory), then the MLIR kernel of the
#   same layer. The runtime cuts each call into chunks of at most 2^31-1 elements; sampled rows
#   (both sides of every chunk boundary, the first, the last and 64 random ones) are checked against
#   the float64 reference. Not in CI (memory and time); any option is passed on (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/build.ninja ]] || scripts/build.sh
ninja -C build -j2 normgen-big-check > /dev/null
avail_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
if (( avail_kib < 9 * 1024 * 1024 )); then
  echo "big.sh: needs about 9 GiB of free memory; $((avail_kib / 1024 / 1024)) GiB available" >&2
  exit 1
fi
status=0
build/bin/normgen-big-check --backend halide "$@" || status=1
build/bin/normgen-big-check --backend mlir "$@" || status=1
exit $status

#!/usr/bin/env bash
# The GPU run, one call on a machine with an NVIDIA GPU: gpu.sh [--dry-run] [--full] OUTDIR
#   Runs from the GPU pack (scripts/gpu-pack.sh puts this script in it; from the repository it
#   uses build/gpu-pack, making it first). Within about 8 minutes:
#     1. every CUDA kernel of both backends against the float64 reference on the quick sweep
#        (--full: the whole sweep): OUTDIR/verify.txt, verify.json;
#     2. the pack's cases timed with CUDA events beside a device-to-device copy of the same bytes:
#        OUTDIR/bench.txt, normgen.json;
#     3. torch eager and torch.compile on the same cases: OUTDIR/torch.txt, torch.json;
#     4. the report: OUTDIR/report.md and bench.json (Google Benchmark rows: `normgen report`).
#   Exit 0 when every kernel passed, 1 when one failed, 77 without a CUDA device.
#   --dry-run (CI, no GPU): checks the pack (its files, size, the runner, the cases, the torch
#   script) and that the runner, asked for the device, refuses in one line with exit 77 and
#   writes nothing. Exit 0 when all of that holds.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dry=0
sweep=--quick
out=""
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    --full) sweep="" ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu.sh: unknown option '$a' (--help)" >&2; exit 1 ;;
    *) out="$a" ;;
  esac
done
[ -n "$out" ] || { echo "gpu.sh: give the folder for the results (gpu.sh [--dry-run] OUTDIR)" >&2; exit 1; }
if [ -x "$here/bin/normgen-cuda" ]; then
  pack="$here"
else
  pack="$here/../build/gpu-pack"
  [ -x "$pack/bin/normgen-cuda" ] || "$here/gpu-pack.sh" || exit 1
fi
runner="$pack/bin/normgen-cuda"
py="${PYTHON:-python3}"
mkdir -p "$out"
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

if [ "$dry" = 1 ]; then
  fail() { echo "gpu.sh --dry-run: $*" >&2; exit 1; }
  for f in bin/normgen-cuda manifest_cuda.json torch_bench.py gpu.sh; do [ -e "$pack/$f" ] || fail "the pack lacks $f"; done
  size=$(du -sm "$pack" | cut -f1)
  [ "$size" -le 60 ] || fail "the pack is ${size} MiB, over 60"
  "$runner" --help >/dev/null || fail "the runner does not start"
  "$runner" cases --json "$out/cases.json" 2>"$out/cases.err" || fail "normgen-cuda cases: $(cat "$out/cases.err")"
  ncases=$("$py" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['cases']))" "$out/cases.json")
  [ "$ncases" -gt 0 ] || fail "no cases"
  "$py" -m py_compile "$pack/torch_bench.py" || fail "torch_bench.py does not compile"
  if "$py" -c "import torch" 2>/dev/null; then
    "$py" "$pack/torch_bench.py" check || fail "torch_bench.py check failed"
  else
    echo "gpu.sh --dry-run: no torch in $py here: torch_bench.py compiled, not run"
  fi
  # The device: without one, one line, exit 77, nothing written.
  for cmd in check "verify --quick --json $out/verify.json" "bench --quick --json $out/normgen.json"; do
    rc=0
    # shellcheck disable=SC2086
    "$runner" $cmd >"$out/dry.out" 2>"$out/dry.err" || rc=$?
    if [ "$rc" = 0 ] && [ "$cmd" = check ]; then
      echo "gpu.sh --dry-run: a CUDA device is here ($(cat "$out/dry.out")); run gpu.sh without --dry-run"; exit 0
    fi
    [ "$rc" = 77 ] || fail "normgen-cuda $cmd: exit $rc, not 77: $(cat "$out/dry.err")"
    [ "$(wc -l <"$out/dry.err")" -le 2 ] || fail "normgen-cuda $cmd: more than a line: $(cat "$out/dry.err")"
    grep -q "^normgen-cuda: no CUDA device: " "$out/dry.err" || fail "normgen-cuda $cmd: no 'no CUDA device:' line: $(cat "$out/dry.err")"
    [ ! -s "$out/dry.out" ] || fail "normgen-cuda $cmd wrote to stdout without a device"
  done
  [ ! -e "$out/verify.json" ] && [ ! -e "$out/normgen.json" ] || fail "the runner wrote results without a device"
  echo "gpu.sh --dry-run: the pack is ready ($size MiB, $ncases cases); without a device the runner says: $(tail -1 "$out/dry.err")"
  rm -f "$out/dry.out" "$out/dry.err" "$out/cases.err"
  exit 0
fi

rc=0
"$runner" check || exit $?
echo "== 1. verify ($(elapsed))"
# shellcheck disable=SC2086
timeout 240 "$runner" verify $sweep --json "$out/verify.json" 2>&1 | tee "$out/verify.txt"
vrc=${PIPESTATUS[0]}
[ "$vrc" = 0 ] || rc=1
echo "== 2. bench ($(elapsed))"
"$runner" cases --json "$out/cases.json"
timeout 120 "$runner" bench --json "$out/normgen.json" 2>&1 | tee "$out/bench.txt"
echo "== 3. torch ($(elapsed))"
left=$(( 450 - ($(date +%s) - t0) ))
[ "$left" -gt 30 ] || left=30
PYTHONUNBUFFERED=1 timeout "$left" "$py" "$pack/torch_bench.py" time "$out/cases.json" "$out/torch.json" --budget-s $(( left * 2 / 3 )) 2>&1 | tee "$out/torch.txt"
echo "== 4. report ($(elapsed))"
"$py" "$pack/torch_bench.py" report "$out/normgen.json" "$out/torch.json" "$out/verify.json" "$out" >/dev/null && cat "$out/report.md"
echo "gpu.sh: done in $(elapsed); verify exit $vrc"
exit $rc
